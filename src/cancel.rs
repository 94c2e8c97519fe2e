//! Cancelling a wait for a lock from another thread.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};

/// Ends a [`Locker`](crate::Locker) wait early: the blocking counterpart of an `AbortSignal`.
///
/// Clones share the same state; cancelling any clone cancels them all, for good. A wait that
/// sees the token cancelled ends with [`ErrorCode::Aborted`](crate::ErrorCode::Aborted) at once,
/// even in the middle of a backoff sleep. A network call already in flight is not interrupted
/// (it ends within its own timeout).
///
/// ```
/// use syncguard::{CancelToken, ErrorCode, LockOptions, Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let _held = locker.lock("report")?;
/// let cancel = CancelToken::new();
/// let options = LockOptions::default().cancel(cancel.clone());
/// let waiter = std::thread::spawn({
///     let locker = locker.clone();
///     move || locker.lock_with("report", &options).map(|_| ())
/// });
/// cancel.cancel();
/// assert_eq!(waiter.join().unwrap().unwrap_err().code(), ErrorCode::Aborted);
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<(Mutex<bool>, Condvar)>,
    /// Waits elsewhere (a `Locker`'s waiters) to wake when this is cancelled.
    listeners: Arc<Mutex<Vec<Weak<dyn OnCancel>>>>,
}

/// Something to wake when a [`CancelToken`] is cancelled.
pub(crate) trait OnCancel: Send + Sync {
    fn cancelled(&self);
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait using this token (now and later).
    pub fn cancel(&self) {
        let (flag, wakeup) = &*self.inner;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wakeup.notify_all();
        let listeners = std::mem::take(
            &mut *self
                .listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for listener in listeners.iter().filter_map(Weak::upgrade) {
            listener.cancelled();
        }
    }

    /// Wakes `listener` when this token is cancelled (at once if it already is). Held weakly.
    pub(crate) fn notify(&self, listener: Weak<dyn OnCancel>) {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.is_cancelled() {
            drop(listeners);
            if let Some(listener) = listener.upgrade() {
                listener.cancelled();
            }
            return;
        }
        listeners.retain(|known| known.strong_count() > 0 && !Weak::ptr_eq(known, &listener));
        listeners.push(listener);
    }

    /// Whether [`cancel`](CancelToken::cancel) has been called.
    pub fn is_cancelled(&self) -> bool {
        *self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancelled when another token it listens to is: what relays a loss to the token of several
/// keys held together.
impl OnCancel for CancelToken {
    fn cancelled(&self) {
        self.cancel();
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_hear_of_the_cancellation_once_even_when_late() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        #[derive(Default)]
        struct Count(AtomicUsize);
        impl OnCancel for Count {
            fn cancelled(&self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let token = CancelToken::new();
        let early = Arc::new(Count::default());
        let as_listener: Arc<dyn OnCancel> = early.clone();
        token.notify(Arc::downgrade(&as_listener));
        token.notify(Arc::downgrade(&as_listener)); // registered twice, told once
        token.cancel();
        token.cancel();
        let late = Arc::new(Count::default());
        let as_listener: Arc<dyn OnCancel> = late.clone();
        token.notify(Arc::downgrade(&as_listener));
        assert!(token.is_cancelled());
        assert_eq!(early.0.load(Ordering::SeqCst), 1);
        assert_eq!(late.0.load(Ordering::SeqCst), 1);
    }
}
