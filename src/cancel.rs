//! Cancelling a wait for a lock from another thread.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    }

    /// Whether [`cancel`](CancelToken::cancel) has been called.
    pub fn is_cancelled(&self) -> bool {
        *self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `duration` unless cancelled first; `true` when cancelled.
    pub(crate) fn sleep(&self, duration: Duration) -> bool {
        let (flag, wakeup) = &*self.inner;
        let deadline = Instant::now().checked_add(duration);
        let mut cancelled = flag.lock().unwrap_or_else(PoisonError::into_inner);
        while !*cancelled {
            let left = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => duration,
            };
            if left.is_zero() {
                break;
            }
            cancelled = wakeup
                .wait_timeout(cancelled, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *cancelled
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
    fn cancel_wakes_a_long_sleep() {
        let token = CancelToken::new();
        let sleeper = std::thread::spawn({
            let token = token.clone();
            move || token.sleep(Duration::from_secs(3600))
        });
        token.cancel();
        assert!(sleeper.join().unwrap());
        assert!(token.is_cancelled());
    }

    #[test]
    fn uncancelled_sleep_returns_false() {
        assert!(!CancelToken::new().sleep(Duration::from_millis(1)));
    }
}
