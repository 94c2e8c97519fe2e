//! [`Semaphore`]: at most N holders of a key at a time, each through a [`LockGuard`] — the
//! lock's retry loop, guard, heartbeat and loss signal, with a permit for a lease.

use std::fmt;
use std::time::Duration;

use super::{LockGuard, LockOptions, Locker};
use crate::backend::{LockInfo, LockInfoDebug};
use crate::driver::{Driver, Permits};
use crate::driver::{Find, LeaseKind, Mode};
use crate::error::{ErrorCode, LockError, Result};
use crate::key::Key;

/// A semaphore on one key: [`Locker::semaphore`]. Cheap to clone; `Send` and `Sync`.
///
/// Acquiring follows the lock's rules: [`acquire`](Semaphore::acquire) waits as
/// [`Locker::lock`] does (announced releases wake it; transient failures are retried; an
/// acquisition in doubt is released in the background), [`try_acquire`](Semaphore::try_acquire)
/// makes one attempt, [`try_acquire_for`](Semaphore::try_acquire_for) waits up to a timeout.
/// The [`LockGuard`] of a permit renews it, reports its loss and gives it back on drop;
/// [`min_hold`](LockOptions::min_hold), [`max_hold`](LockOptions::max_hold),
/// [`holder`](LockOptions::holder) and [`detach`](LockGuard::detach) work as for a lock.
///
/// Each acquisition is judged by its own number of permits (see
/// [`Permits`](crate::driver::Permits)): give every process the same number for one key.
pub struct Semaphore<B> {
    locker: Locker<B>,
    key: Key,
    permits: Permits,
}

impl<B: Driver + 'static> Locker<B> {
    /// A semaphore on `key` with `permits` permits (1 to
    /// [`MAX_PERMITS`](crate::driver::MAX_PERMITS)): at most that many holders at a time, across
    /// every process that uses the same store. Each permit is held through a [`LockGuard`],
    /// with its own lock id, fence, heartbeat and loss signal, as a lock is. The semaphore is
    /// stored apart from the lock on the same key: [`lock`](Locker::lock)`("k")` and a
    /// permit of `semaphore("k", 1)` do not exclude each other. `InvalidArgument` for a bad
    /// key or number, before any I/O.
    ///
    /// ```
    /// use syncguard::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let exports = locker.semaphore("partner-api", 2)?;
    /// let first = exports.acquire()?; // waits while 2 are held
    /// let second = exports.try_acquire()?.expect("one permit left");
    /// assert!(exports.try_acquire()?.is_none()); // both taken
    /// assert!(second.fence() > first.fence());
    /// assert_eq!(exports.holders()?.len(), 2);
    /// drop(first);
    /// let n = exports.with_permit(|permit| permit.fence().value())?;
    /// assert_eq!(n, 3);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn semaphore(&self, key: &str, permits: u32) -> Result<Semaphore<B>> {
        Ok(Semaphore {
            locker: self.clone(),
            key: Key::new(key)?,
            permits: Permits::new(permits)?,
        })
    }
}

impl<B: Driver + 'static> Semaphore<B> {
    /// The semaphore's key (NFC-normalised).
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// How many holders it admits.
    pub fn permits(&self) -> u32 {
        self.permits.get()
    }

    /// Takes a permit, waiting while all are held — as long as it takes unless the locker's
    /// defaults set a [`timeout`](LockOptions::timeout) or a [`cancel`](LockOptions::cancel)
    /// token (then `AcquisitionTimeout` or `Aborted`), as [`Locker::lock`] does.
    pub fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(self.locker.defaults())
    }

    /// Takes a permit if one is free right now (one attempt, no waiting).
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.attempt(&self.locker.once())
    }

    /// Takes a permit, waiting up to `timeout`; `Ok(None)` if all stayed held.
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.attempt(&self.locker.up_to(timeout))
    }

    /// Takes a permit with `options`, waiting as they say; `AcquisitionTimeout` if all permits
    /// stayed held, `Aborted` if the cancel token fired.
    pub fn acquire_with(&self, options: &LockOptions) -> Result<LockGuard> {
        self.attempt(options)?.ok_or_else(|| {
            LockError::new(
                ErrorCode::AcquisitionTimeout,
                format!(
                    "all {} permits stayed held (timeout {:?}, {} retries)",
                    self.permits, options.timeout, options.max_retries
                ),
            )
            .with_key(self.key.as_str())
        })
    }

    /// Runs `f` while holding a permit (acquired as by [`acquire`](Semaphore::acquire)) and
    /// always gives it back afterwards, also when `f` panics; as [`Locker::with_lock`].
    pub fn with_permit<T>(&self, f: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.acquire()?;
        let output = f(&guard);
        let on_release_error = self.locker.defaults().on_release_error.clone();
        if let Err(error) = guard.release() {
            super::guard::report_release_error(
                on_release_error.as_ref(),
                self.key.as_str(),
                &error,
            );
        }
        Ok(output)
    }

    /// Who holds permits now: the live ones, in fence order. Sanitised: hashes only.
    pub fn holders(&self) -> Result<Vec<LockInfo>> {
        Ok(self
            .holders_raw()?
            .into_iter()
            .map(|raw| raw.info)
            .collect())
    }

    /// [`holders`](Semaphore::holders) with the raw key and lock ids.
    pub fn holders_raw(&self) -> Result<Vec<LockInfoDebug>> {
        Ok(self
            .locker
            .backend()
            .find(Find::Key(&self.key, LeaseKind::Permit))?
            .into_iter()
            .map(LockInfoDebug::from)
            .collect())
    }

    fn attempt(&self, options: &LockOptions) -> Result<Option<LockGuard>> {
        self.locker
            .acquire_key(self.key.clone(), Mode::Permit(self.permits), options)
    }
}

impl<B> Clone for Semaphore<B> {
    fn clone(&self) -> Self {
        Semaphore {
            locker: self.locker.clone(),
            key: self.key.clone(),
            permits: self.permits,
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for Semaphore<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("key_hash", &crate::hash::hash_key(self.key.as_str()))
            .field("permits", &self.permits)
            .field("locker", &self.locker)
            .finish()
    }
}
