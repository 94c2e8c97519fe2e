//! How a lock is taken and kept: [`LockOptions`] and [`Heartbeat`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::error::{LockError, Result};
use crate::holder::Holder;
use crate::locker::retry::{Backoff, Jitter};
use crate::time::{MAX_TTL_MS, Ttl};

/// Called with the error when a release fails (from `Drop`, or `with_lock`).
pub(crate) type ReleaseErrorCallback = Arc<dyn Fn(&LockError) + Send + Sync>;

/// Called with a `LockLost` error when a guard's lease is found lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LockError) + Send + Sync>;

/// Whether and how often the heartbeat renews a guard's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Heartbeat {
    /// Renew every third of the TTL (after [`LockGuard::extend`](crate::LockGuard::extend), of
    /// the new one): a renewal that fails leaves two thirds of the lease for retries before it
    /// would end. The default, and the one place this schedule is stated.
    #[default]
    Auto,
    /// Renew at this interval, which must be shorter than the TTL.
    Every(Duration),
    /// Never renew: the lease ends at its TTL unless [`LockGuard::extend`](crate::LockGuard::extend) is called.
    Off,
}

impl Heartbeat {
    /// The renewal interval for a lease of `ttl`; `None` when off.
    pub(crate) fn interval_for(self, ttl: Duration) -> Option<Duration> {
        match self {
            Heartbeat::Auto => Some(ttl / 3),
            // A later `extend` may shorten the TTL below the configured interval: renewing
            // that late would let the lease lapse, so fall back to the default schedule.
            Heartbeat::Every(every) if every < ttl => Some(every),
            Heartbeat::Every(_) => Heartbeat::Auto.interval_for(ttl),
            Heartbeat::Off => None,
        }
    }
}

/// How [`Locker::lock_with`](crate::Locker::lock_with) acquires and keeps a lock. The setters
/// chain. The defaults wait like `Mutex::lock` (as long as it takes), unlike the TypeScript
/// `lock()` helper's 5 s and 10 retries:
///
/// | option | default |
/// |---|---|
/// | [`ttl`](LockOptions::ttl) | 30 s |
/// | [`timeout`](LockOptions::timeout) (acquisition) | none (waits until held) |
/// | [`max_retries`](LockOptions::max_retries) | unlimited |
/// | [`retry_delay`](LockOptions::retry_delay) | 100 ms |
/// | [`max_retry_delay`](LockOptions::max_retry_delay) | 1 s |
/// | [`backoff`](LockOptions::backoff) | [`Backoff::Exponential`] |
/// | [`jitter`](LockOptions::jitter) | [`Jitter::Equal`] |
/// | [`heartbeat`](LockOptions::heartbeat) | [`Heartbeat::Auto`] |
/// | [`max_hold`](LockOptions::max_hold) | none |
/// | [`min_hold`](LockOptions::min_hold) | none |
/// | [`holder`](LockOptions::holder) | none |
/// | [`wait_in_line`](LockOptions::wait_in_line) | yes |
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
    pub(crate) ttl: Duration,
    pub(crate) timeout: Duration,
    pub(crate) max_retries: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) max_retry_delay: Duration,
    pub(crate) backoff: Backoff,
    pub(crate) jitter: Jitter,
    pub(crate) heartbeat: Heartbeat,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) holder: Option<String>,
    pub(crate) wait_in_line: bool,
    pub(crate) on_lock_lost: Option<LostCallback>,
    pub(crate) on_release_error: Option<ReleaseErrorCallback>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            timeout: Duration::MAX,
            max_retries: u32::MAX,
            retry_delay: Duration::from_millis(100),
            max_retry_delay: Duration::from_secs(1),
            backoff: Backoff::Exponential,
            jitter: Jitter::Equal,
            heartbeat: Heartbeat::Auto,
            cancel: None,
            max_hold: None,
            min_hold: None,
            holder: None,
            wait_in_line: true,
            on_lock_lost: None,
            on_release_error: None,
        }
    }
}

impl LockOptions {
    /// Lease length: a whole number of milliseconds, from 1 ms to
    /// [`MAX_TTL_MS`](crate::driver::MAX_TTL_MS) (10^13 ms, about 317 years: the longest every
    /// backend stores exactly); anything else fails the lock call with `InvalidArgument`
    /// before any I/O. Keep it short (seconds to a minute) and let the heartbeat renew it: a
    /// crashed holder then blocks others only briefly.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`Locker::lock_with`](crate::Locker::lock_with) waits for a held lock before failing with
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

    /// The longest pause between two attempts (default 1 s): the grown delay is capped at it
    /// before the jitter, so a long wait keeps polling at least this often.
    #[must_use]
    pub fn max_retry_delay(mut self, max_retry_delay: Duration) -> Self {
        self.max_retry_delay = max_retry_delay;
        self
    }

    /// The base delay between attempts. A waiter in line ([`wait_in_line`](Self::wait_in_line),
    /// the default) follows it only until the store tells it its place: from then on its place
    /// sets the pace — the first in line polls every few tens of ms (and wakes at once at a
    /// release the store announces), the waiters further back more and more rarely, down to
    /// one attempt per [`PLACE_TTL`](crate::driver::PLACE_TTL) / 3 to keep their places — so
    /// that a key's line costs the store about one fast poller however many wait.
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

    /// The longest the heartbeat keeps the lock: it stops renewing `max_hold` after the
    /// acquisition, and the last renewal is cut short so that the lease ends then, so a hung
    /// job cannot hold a lock forever (ShedLock's `lockAtMostFor`). The guard is then reported
    /// lost. At most [`MAX_TTL_MS`](crate::driver::MAX_TTL_MS) (about 317 years: the end of
    /// the hold must be a lease expiry every backend can store), else `InvalidArgument` before
    /// any I/O. Default: no bound.
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// The shortest the lock is held (ShedLock's `lockAtLeastFor`): the key stays locked until
    /// `min_hold` has passed since the acquisition, whatever happens to the guard, this process
    /// or its connection to the store. The acquisition asks for a lease of at least `min_hold`,
    /// and each renewal during the hold for at least what is left of it, so that the store's
    /// record never ends before the hold does; a guard released inside the hold — dropped,
    /// [`release`](crate::LockGuard::release)d, or at the end of
    /// [`with_lock`](crate::Locker::with_lock) — deletes nothing: one extension sets the lease
    /// to end when the hold ends, renewals stop, and the record expires by itself;
    /// `release()` reports `true`. If that extension fails (an outage, a failover), the hold
    /// stands all the same (the record already lasts that long); `release()` returns the error,
    /// and the lock is released in the background once the hold has ended. Released later,
    /// the lock is deleted as usual; [`release_without_hold`](crate::LockGuard::release_without_hold)
    /// deletes it at once, for work that never began. A holder that crashes inside the hold
    /// keeps the key until the hold ends (rather than until its TTL).
    ///
    /// This is how a job that cron starts on several machines runs once per schedule: the first
    /// machine holds the key for at least `min_hold`, so the others, starting a moment later,
    /// find it held and skip. Must be from 1 ms to [`MAX_TTL_MS`](crate::driver::MAX_TTL_MS)
    /// and, with [`max_hold`](LockOptions::max_hold), no more than it (else `InvalidArgument`
    /// before any I/O). Default: none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{LockBackend, LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let once = LockOptions::default().min_hold(Duration::from_secs(60));
    /// let guard = locker.lock_with("nightly-report", &once)?;
    /// assert!(guard.release()?); // the job was quick…
    /// assert!(locker.backend().is_locked("nightly-report")?); // …the key stays held
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    #[must_use]
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// Says who takes the lock: a short description (a host, a process, a job) stored with it
    /// and returned by lookups ([`LockInfo::holder`](crate::LockInfo::holder), `syncguard
    /// status`), so that whoever finds the lock held can see by whom. 1 to 256 UTF-8 bytes, no
    /// control characters, Unicode format characters (bidi controls, zero-width characters, …)
    /// or line and paragraph separators ([`Holder`](crate::driver::Holder)); anything else
    /// fails the lock call with `InvalidArgument` before any I/O. Not a secret and not hashed: never put one
    /// in it. Stored beside the record the TypeScript SyncGuard reads, which ignores it.
    /// Default: none.
    ///
    /// ```
    /// use syncguard::{LockOptions, Locker, MemoryBackend, get_by_key};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let options = LockOptions::default().holder("billing-worker-3 (pid 4242)");
    /// let _guard = locker.lock_with("invoices", &options)?;
    /// let info = get_by_key(locker.backend(), "invoices")?.expect("held");
    /// assert_eq!(info.holder.as_deref(), Some("billing-worker-3 (pid 4242)"));
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Whether a waiter waits in the key's line (the default): served in the order waiters
    /// arrived at the store, a dead waiter skipped once its place lapses
    /// ([`PLACE_TTL`](crate::driver::PLACE_TTL) after its last attempt), one that gives up
    /// leaving at once; and a single attempt ([`Locker::try_lock`](crate::Locker::try_lock))
    /// does not pass a live line. `false` is barging: each attempt takes the key whenever it is
    /// free, whoever waited longer, and takes no place — as the TypeScript SyncGuard, which
    /// knows no line, always does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let barging = LockOptions::default()
    ///     .wait_in_line(false)
    ///     .timeout(Duration::from_secs(5));
    /// let _guard = locker.lock_with("cache-warmup", &barging)?;
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    #[must_use]
    pub fn wait_in_line(mut self, wait_in_line: bool) -> Self {
        self.wait_in_line = wait_in_line;
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
    /// heartbeat thread (or in [`LockGuard::extend`](crate::LockGuard::extend)): keep it short, and do not block on the
    /// guard in it. Without it, the loss is logged with `log::warn!`. A panic in it is caught.
    #[must_use]
    pub fn on_lock_lost(mut self, callback: impl Fn(&LockError) + Send + Sync + 'static) -> Self {
        self.on_lock_lost = Some(Arc::new(callback));
        self
    }

    /// Called with the error when releasing fails in `Drop` or [`Locker::with_lock`](crate::Locker::with_lock) (the
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

    /// Checks the options as a lock call does, before any I/O: the TTL, the heartbeat interval,
    /// `min_hold` and `max_hold`, the holder description. `InvalidArgument` for the first that
    /// is out of bounds; a lock call with these options fails with the same error. For a
    /// program that takes its options from its user and wants to refuse bad ones up front.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::LockOptions;
    ///
    /// assert!(LockOptions::default().min_hold(Duration::from_secs(300)).validate().is_ok());
    /// let forever = Duration::from_secs(400 * 366 * 24 * 3600);
    /// assert!(LockOptions::default().min_hold(forever).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        self.checked().map(drop)
    }

    /// Whether an acquisition with these options waits (retries within a timeout), rather
    /// than making a single attempt.
    pub(crate) fn waits(&self) -> bool {
        self.max_retries > 0 && !self.timeout.is_zero()
    }

    /// The checks of [`validate`](Self::validate), with the values a lock call needs: the
    /// lease's TTL and the holder.
    pub(crate) fn checked(&self) -> Result<(Ttl, Option<Holder>)> {
        let ttl = Ttl::new(self.ttl)?;
        self.validated_heartbeat()?;
        self.validated_holds()?;
        Ok((ttl, self.validated_holder()?))
    }

    /// Checks `min_hold` and `max_hold`: each no longer than a lease can be (the hold's end is
    /// a lease expiry), and `min_hold` from 1 ms up to `max_hold`.
    fn validated_holds(&self) -> Result<()> {
        let longest = Duration::from_millis(MAX_TTL_MS.unsigned_abs());
        for (name, hold) in [("min_hold", self.min_hold), ("max_hold", self.max_hold)] {
            if let Some(hold) = hold.filter(|hold| *hold > longest) {
                return Err(LockError::invalid_argument(format!(
                    "{name} {hold:?} is longer than a lease can be ({MAX_TTL_MS} ms, about 317 \
                     years)"
                )));
            }
        }
        let Some(min_hold) = self.min_hold else {
            return Ok(());
        };
        if min_hold < Duration::from_millis(1) {
            return Err(LockError::invalid_argument(format!(
                "min_hold {min_hold:?} must be at least 1 ms"
            )));
        }
        if let Some(max_hold) = self.max_hold
            && min_hold > max_hold
        {
            return Err(LockError::invalid_argument(format!(
                "min_hold {min_hold:?} must not exceed max_hold {max_hold:?}"
            )));
        }
        Ok(())
    }

    /// The holder description, checked, before any I/O.
    fn validated_holder(&self) -> Result<Option<Holder>> {
        self.holder.as_deref().map(Holder::new).transpose()
    }

    pub(crate) fn validated_heartbeat(&self) -> Result<Option<Duration>> {
        if let Heartbeat::Every(every) = self.heartbeat
            && (every.is_zero() || every >= self.ttl)
        {
            return Err(LockError::invalid_argument(format!(
                "heartbeat interval {every:?} must be above zero and below the ttl {:?}",
                self.ttl
            )));
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
            .field("max_retry_delay", &self.max_retry_delay)
            .field("backoff", &self.backoff)
            .field("jitter", &self.jitter)
            .field("heartbeat", &self.heartbeat)
            .field("cancel", &self.cancel)
            .field("max_hold", &self.max_hold)
            .field("min_hold", &self.min_hold)
            .field("holder", &self.holder)
            .field("wait_in_line", &self.wait_in_line)
            .field("on_lock_lost", &self.on_lock_lost.is_some())
            .field("on_release_error", &self.on_release_error.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

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
