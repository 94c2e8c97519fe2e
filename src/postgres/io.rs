//! The backend's I/O thread: one single-threaded tokio runtime for the work of one
//! [`PostgresBackend`](super::PostgresBackend) that no caller waits for — the listening
//! connection, which must be driven between calls to hear notifications, and cancel requests
//! sent for statements whose deadline passed. The pooled connections are driven by their
//! callers ([`client`](super::client)).

use std::future::Future;
use std::thread;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A handle for starting work on the I/O thread. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Io {
    handle: Handle,
}

impl Io {
    /// Starts `work` on the I/O thread and does not wait for it.
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
    fn runs_detached_work() {
        let thread = IoThread::start().unwrap();
        let (done, ran) = std::sync::mpsc::channel();
        thread.io().spawn_detached(async move {
            let _ = done.send(7);
        });
        assert_eq!(ran.recv(), Ok(7));
    }
}
