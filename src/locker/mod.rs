//! [`Locker`]: acquisition with retries, RAII guards, and the shared heartbeat.

mod guard;
mod heartbeat;
mod retry;

use std::fmt;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use rand::RngExt as _;

pub use self::guard::LockGuard;
pub use self::retry::{Backoff, Jitter};

use self::guard::{HeldLease, LeaseOps, LostCallback, ReleaseErrorCallback};
use self::heartbeat::Scheduler;
use crate::backend::{AcquireOutcome, Lease, LockBackend};
use crate::cancel::CancelToken;
use crate::error::{ErrorCode, LockError, Result};
use crate::key::normalize_and_validate_key;
use crate::time::ttl_to_ms;

/// Whether and how often the heartbeat renews a guard's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Heartbeat {
    /// Renew every third of the TTL. The default.
    #[default]
    Auto,
    /// Renew at this interval, which must be shorter than the TTL.
    Every(Duration),
    /// Never renew: the lease ends at its TTL unless [`LockGuard::extend`] is called.
    Off,
}

impl Heartbeat {
    /// The renewal interval for a lease of `ttl`; `None` when off.
    pub(crate) fn interval_for(self, ttl: Duration) -> Option<Duration> {
        match self {
            Heartbeat::Auto => Some(ttl / 3),
            // A later `extend` may shorten the TTL below the configured interval: renewing
            // that late would let the lease lapse, so fall back to a third of it.
            Heartbeat::Every(every) if every < ttl => Some(every),
            Heartbeat::Every(_) => Some(ttl / 3),
            Heartbeat::Off => None,
        }
    }
}

/// How [`Locker::lock_with`] acquires and keeps a lock. `LockOptions::default()` gives the
/// SyncGuard defaults; the setters chain.
///
/// | option | default |
/// |---|---|
/// | [`ttl`](LockOptions::ttl) | 30 s |
/// | [`timeout`](LockOptions::timeout) (acquisition) | 5 s |
/// | [`max_retries`](LockOptions::max_retries) | 10 |
/// | [`retry_delay`](LockOptions::retry_delay) | 100 ms |
/// | [`backoff`](LockOptions::backoff) | [`Backoff::Exponential`] |
/// | [`jitter`](LockOptions::jitter) | [`Jitter::Equal`] |
/// | [`heartbeat`](LockOptions::heartbeat) | [`Heartbeat::Auto`] (every ttl/3) |
///
/// ```
/// use std::time::Duration;
/// use syncguard::{Heartbeat, LockOptions};
///
/// let options = LockOptions::default()
///     .ttl(Duration::from_secs(60))
///     .timeout(Duration::from_secs(30))
///     .heartbeat(Heartbeat::Every(Duration::from_secs(10)))
///     .on_lock_lost(|e| eprintln!("{e}"));
/// ```
#[derive(Clone)]
pub struct LockOptions {
    ttl: Duration,
    timeout: Duration,
    max_retries: u32,
    retry_delay: Duration,
    backoff: Backoff,
    jitter: Jitter,
    heartbeat: Heartbeat,
    cancel: Option<CancelToken>,
    on_lock_lost: Option<LostCallback>,
    on_release_error: Option<ReleaseErrorCallback>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
            max_retries: 10,
            retry_delay: Duration::from_millis(100),
            backoff: Backoff::Exponential,
            jitter: Jitter::Equal,
            heartbeat: Heartbeat::Auto,
            cancel: None,
            on_lock_lost: None,
            on_release_error: None,
        }
    }
}

impl LockOptions {
    /// Lease length: a whole number of milliseconds, at least 1 ms. Keep it short (seconds to
    /// a minute) and let the heartbeat renew it: a crashed holder then blocks others only
    /// briefly.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`Locker::lock_with`] waits for a held lock before failing with
    /// `AcquisitionTimeout`. The first attempt is always made, so zero means "try once".
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many times to retry after the first attempt found the lock held.
    #[must_use]
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// The base delay between attempts.
    #[must_use]
    pub fn retry_delay(mut self, retry_delay: Duration) -> Self {
        self.retry_delay = retry_delay;
        self
    }

    /// How the delay grows between attempts.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How the delay is randomised.
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Whether and how often the lease is renewed while the guard lives.
    #[must_use]
    pub fn heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// A token that ends the wait with `Aborted` when cancelled.
    #[must_use]
    pub fn cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Called (once per guard) with a `LockLost` error when the lease is found lost: a renewal
    /// found the lock gone, or renewals kept failing until the TTL ran out. It runs on the
    /// heartbeat thread (or in [`LockGuard::extend`]): keep it short, and do not block on the
    /// guard in it. Without it, the loss is logged with `log::warn!`. A panic in it is caught.
    #[must_use]
    pub fn on_lock_lost(mut self, callback: impl Fn(&LockError) + Send + Sync + 'static) -> Self {
        self.on_lock_lost = Some(Arc::new(callback));
        self
    }

    /// Called with the error when releasing fails in `Drop` or [`Locker::with_lock`] (the
    /// error carries the key and lock id). Without it, the failure is logged with
    /// `log::warn!`. The lock then expires at the end of its TTL. A panic in it is caught.
    #[must_use]
    pub fn on_release_error(
        mut self,
        callback: impl Fn(&LockError) + Send + Sync + 'static,
    ) -> Self {
        self.on_release_error = Some(Arc::new(callback));
        self
    }

    fn validated_heartbeat(&self) -> Result<Option<Duration>> {
        if let Heartbeat::Every(every) = self.heartbeat {
            if every.is_zero() || every >= self.ttl {
                return Err(LockError::invalid_argument(format!(
                    "heartbeat interval {every:?} must be above zero and below the ttl {:?}",
                    self.ttl
                )));
            }
        }
        Ok(self.heartbeat.interval_for(self.ttl))
    }
}

impl fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockOptions")
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_delay", &self.retry_delay)
            .field("backoff", &self.backoff)
            .field("jitter", &self.jitter)
            .field("heartbeat", &self.heartbeat)
            .field("cancel", &self.cancel)
            .field("on_lock_lost", &self.on_lock_lost.is_some())
            .field("on_release_error", &self.on_release_error.is_some())
            .finish()
    }
}

/// Takes locks from a backend and hands out guards that release on drop and are kept alive
/// by one shared heartbeat thread.
///
/// Cheap to clone (clones share the backend, the defaults and the heartbeat thread), `Send`
/// and `Sync`. Everything blocks the calling thread; no async runtime is involved.
///
/// ```
/// use syncguard::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// {
///     let guard = locker.lock("nightly-report")?; // waits (with backoff) up to 5 s
///     assert!(locker.try_lock("nightly-report")?.is_none()); // held: no wait
///     // ... critical section; the heartbeat keeps the lease alive ...
/// } // released here
/// let total = locker.with_lock("nightly-report", |guard| guard.fence().value())?;
/// assert_eq!(total, 2);
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub struct Locker<B> {
    shared: Arc<Shared<B>>,
}

struct Shared<B> {
    backend: B,
    defaults: LockOptions,
    scheduler: Arc<Scheduler>,
}

impl<B> Drop for Shared<B> {
    fn drop(&mut self) {
        // The locker and every guard are gone: nothing is left to renew.
        self.scheduler.shutdown();
    }
}

impl<B: LockBackend> LeaseOps for Shared<B> {
    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        self.backend.extend(lock_id, ttl)
    }

    fn release(&self, lock_id: &str) -> Result<bool> {
        self.backend.release(lock_id)
    }
}

impl<B> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.shared.backend)
            .field("defaults", &self.shared.defaults)
            .finish()
    }
}

impl<B: LockBackend + 'static> Locker<B> {
    /// A locker over `backend` with the default [`LockOptions`].
    pub fn new(backend: B) -> Self {
        Self::with_defaults(backend, LockOptions::default())
    }

    /// A locker over `backend` whose [`lock`](Locker::lock), [`try_lock`](Locker::try_lock)
    /// and [`with_lock`](Locker::with_lock) use `defaults`.
    pub fn with_defaults(backend: B, defaults: LockOptions) -> Self {
        Locker {
            shared: Arc::new(Shared {
                backend,
                defaults,
                scheduler: Arc::new(Scheduler::new()),
            }),
        }
    }

    /// The backend, for direct single-attempt operations and lookups.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The options `lock`, `try_lock` and `with_lock` use.
    pub fn defaults(&self) -> &LockOptions {
        &self.shared.defaults
    }

    /// Takes the lock on `key`, waiting with backoff while someone else holds it, up to the
    /// default timeout (5 s) or retry budget; then `AcquisitionTimeout`.
    pub fn lock(&self, key: &str) -> Result<LockGuard> {
        self.lock_with(key, &self.shared.defaults)
    }

    /// Takes the lock on `key` if it is free right now (one attempt, no waiting).
    pub fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        let once = self.shared.defaults.clone().max_retries(0);
        self.acquire(key, &once)
    }

    /// Takes the lock on `key`, waiting up to `timeout`; `Ok(None)` if it stayed held.
    pub fn try_lock_for(&self, key: &str, timeout: Duration) -> Result<Option<LockGuard>> {
        let options = self
            .shared
            .defaults
            .clone()
            .timeout(timeout)
            .max_retries(u32::MAX);
        self.acquire(key, &options)
    }

    /// Takes the lock on `key` with `options`, waiting as they say; `AcquisitionTimeout` if the
    /// lock stayed held, `Aborted` if the cancel token fired.
    pub fn lock_with(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.acquire(key, options)?.ok_or_else(|| {
            LockError::new(
                ErrorCode::AcquisitionTimeout,
                format!(
                    "the lock stayed held by another owner (timeout {:?}, {} retries)",
                    options.timeout, options.max_retries
                ),
            )
            .with_key(key)
        })
    }

    /// Runs `f` while holding the lock on `key` (acquired as by [`lock`](Locker::lock)) and
    /// always releases afterwards, also when `f` panics. `f`'s result is returned as is; a
    /// failed release goes to `on_release_error` (default: a log warning) and never replaces it.
    pub fn with_lock<T>(&self, key: &str, f: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.lock(key)?;
        let output = f(&guard);
        let on_release_error = self.shared.defaults.on_release_error.clone();
        let key = guard.key().to_owned();
        if let Err(error) = guard.release() {
            guard::report_release_error(on_release_error.as_ref(), &key, &error);
        }
        Ok(output)
    }

    /// The retry loop. `Ok(None)` when the lock stayed held past the timeout or retry budget.
    fn acquire(&self, key: &str, options: &LockOptions) -> Result<Option<LockGuard>> {
        let key = normalize_and_validate_key(key)?;
        ttl_to_ms(options.ttl)?;
        let interval = options.validated_heartbeat()?;
        if interval.is_some() {
            // Before acquiring: a thread that cannot start must not leave a lock behind.
            let ops: Weak<Shared<B>> = Arc::downgrade(&self.shared);
            let ops: Weak<dyn LeaseOps> = ops;
            self.shared.scheduler.ensure_running(ops)?;
        }
        let aborted =
            || LockError::new(ErrorCode::Aborted, "the wait was cancelled").with_key(&key);
        let start = Instant::now();
        let mut attempts: u32 = 0;
        let (lease, sent) = loop {
            if options
                .cancel
                .as_ref()
                .is_some_and(CancelToken::is_cancelled)
            {
                return Err(aborted());
            }
            attempts = attempts.saturating_add(1);
            let sent = Instant::now();
            match self.shared.backend.acquire(&key, options.ttl)? {
                AcquireOutcome::Acquired(lease) => break (lease, sent),
                AcquireOutcome::Locked => {}
            }
            if attempts > options.max_retries {
                return Ok(None);
            }
            let delay_ms = retry::retry_delay_ms(
                attempts,
                options.retry_delay,
                options.backoff,
                options.jitter,
                rand::rng().random::<f64>(),
            );
            let Some(delay) = retry::clamp_to_timeout(delay_ms, start.elapsed(), options.timeout)
            else {
                return Ok(None);
            };
            match &options.cancel {
                Some(cancel) => {
                    if cancel.sleep(delay) {
                        return Err(aborted());
                    }
                }
                None => thread::sleep(delay),
            }
        };
        Ok(Some(self.guard(key, lease, sent, options)))
    }

    fn guard(&self, key: String, lease: Lease, sent: Instant, options: &LockOptions) -> LockGuard {
        let held = Arc::new(HeldLease::new(
            key,
            lease,
            sent,
            options.ttl,
            options.heartbeat,
            options.on_lock_lost.clone(),
        ));
        if held.interval().is_some() {
            self.shared
                .scheduler
                .schedule(Arc::clone(&held), held.next_due());
        }
        let ops: Arc<dyn LeaseOps> = self.shared.clone();
        LockGuard::new(held, ops, options.on_release_error.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_intervals() {
        let ttl = Duration::from_millis(300);
        assert_eq!(
            Heartbeat::Auto.interval_for(ttl),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            Heartbeat::Every(Duration::from_millis(50)).interval_for(ttl),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            Heartbeat::Every(Duration::from_secs(1)).interval_for(ttl),
            Some(Duration::from_millis(100))
        );
        assert_eq!(Heartbeat::Off.interval_for(ttl), None);
    }

    #[test]
    fn heartbeat_interval_must_be_inside_the_ttl() {
        for every in [
            Duration::ZERO,
            Duration::from_secs(30),
            Duration::from_secs(31),
        ] {
            let options = LockOptions::default().heartbeat(Heartbeat::Every(every));
            let err = options.validated_heartbeat().unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument);
        }
    }
}
