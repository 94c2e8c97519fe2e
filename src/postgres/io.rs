//! The backend's I/O thread: one single-threaded tokio runtime that drives every connection of
//! one [`PostgresBackend`](super::PostgresBackend), and hands results back to blocking callers.
//!
//! Why a thread of its own rather than a runtime per call or per connection: a tokio runtime
//! cannot be entered from a thread that is already inside one (`block_on` panics with "Cannot
//! start a runtime from within a runtime"), and the threads of an async program are exactly
//! such threads. Callers here only send work to the I/O thread and wait on a plain channel,
//! which blocks the calling thread — as a blocking library may — and never panics, whatever
//! runtime the caller is in. The deadline of each call is kept on the I/O thread.

use std::future::Future;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// Why work handed to the I/O thread produced no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undone {
    /// The deadline passed first; the work was dropped where it stood.
    TimedOut(Duration),
    /// The I/O thread has stopped (the backend is being dropped).
    Stopped,
}

/// A handle for sending work to the I/O thread. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Io {
    handle: Handle,
}

impl Io {
    /// Runs `work` on the I/O thread and waits for its result, at most `deadline`.
    pub(crate) fn run<T, F>(&self, deadline: Duration, work: F) -> Result<T, Undone>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (done, result) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let outcome = tokio::time::timeout(deadline, work)
                .await
                .map_err(|_| Undone::TimedOut(deadline));
            // The caller may be gone only if its thread died; nothing to tell then.
            let _ = done.send(outcome);
        });
        // The task always sends before it ends, or is dropped unsent when the runtime stops.
        result.recv().unwrap_or(Err(Undone::Stopped))
    }

    /// Starts `work` on the I/O thread and does not wait for it (a cancel request, say).
    pub(crate) fn spawn_detached(&self, work: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(work));
    }
}

/// Owns the I/O thread: dropping it stops the runtime, which closes every connection it drove,
/// and waits for the thread to end.
pub(crate) struct IoThread {
    io: Io,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl IoThread {
    pub(crate) fn start() -> std::io::Result<IoThread> {
        // Building a runtime is allowed anywhere; running and dropping it happen on its thread.
        let runtime = Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let io = Io {
            handle: runtime.handle().clone(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("syncguard-postgres-io".to_owned())
            .spawn(move || {
                // Ends when the sender is used or dropped; then the runtime and all its tasks
                // (the connections) are dropped here, on this thread.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(IoThread {
            io,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub(crate) fn io(&self) -> &Io {
        &self.io
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // Never panics: a panic on the I/O thread is reported as an `Err` here, and
            // joining from the I/O thread itself cannot happen (no caller code runs there).
            if thread.thread().id() != thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_work_and_keeps_the_deadline() {
        let thread = IoThread::start().unwrap();
        assert_eq!(thread.io().run(Duration::from_secs(5), async { 7 }), Ok(7));
        let stuck = thread
            .io()
            .run(Duration::from_millis(20), std::future::pending::<()>());
        assert_eq!(stuck, Err(Undone::TimedOut(Duration::from_millis(20))));
    }

    #[test]
    fn a_stopped_thread_answers_stopped() {
        let thread = IoThread::start().unwrap();
        let io = thread.io().clone();
        drop(thread);
        assert_eq!(
            io.run(Duration::from_secs(5), async { 7 }),
            Err(Undone::Stopped)
        );
    }
}
