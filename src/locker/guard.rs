//! The RAII guard: a held lease as the program sees it.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::driver::Lease;
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::holder::Holder;
use crate::locker::heartbeat::Scheduler;
use crate::locker::lease::{HeldLease, Released, Renewal};
use crate::locker::options::ReleaseErrorCallback;
use crate::locker::store::{Origin, Store, Unheld};
use crate::time::Ttl;

/// What a guard needs of its `Locker`: the store and the heartbeat. Holding it keeps the
/// locker's shared state alive.
pub(crate) trait GuardStore: Store {
    fn scheduler(&self) -> &Scheduler;
}

/// A held lock. Dropping it releases the lock; [`release`](LockGuard::release) does the same
/// and reports the outcome.
///
/// While the guard lives, the [`Locker`](crate::Locker)'s heartbeat renews the lease (unless
/// [`Heartbeat::Off`](crate::Heartbeat::Off)). If a renewal finds the lock gone, or the lease
/// runs out because renewals kept failing, the guard is *lost*: [`is_lost`](LockGuard::is_lost)
/// turns true, [`check`](LockGuard::check) fails with `LockLost`, and the `on_lock_lost` callback
/// runs. Check before each step that must not run without the lock, and pass the
/// [`fence`](LockGuard::fence) to whatever the lock protects.
///
/// A permit of a [`Semaphore`](crate::Semaphore) is held through a `LockGuard` too: everything
/// here holds for it, with the semaphore's key and its own fence sequence.
///
/// ```
/// use syncguard::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let guard = locker.lock("invoice:42")?;
/// guard.check()?; // still ours
/// println!("writing with fence {}", guard.fence());
/// assert!(guard.release()?); // or just let it drop
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lease: Arc<HeldLease>,
    store: Arc<dyn GuardStore>,
    on_release_error: Option<ReleaseErrorCallback>,
}

impl LockGuard {
    pub(crate) fn new(
        lease: Arc<HeldLease>,
        store: Arc<dyn GuardStore>,
        on_release_error: Option<ReleaseErrorCallback>,
    ) -> Self {
        LockGuard {
            lease,
            store,
            on_release_error,
        }
    }

    /// The key, NFC-normalised.
    pub fn key(&self) -> &str {
        self.lease.key().as_str()
    }

    /// The key, validated.
    pub(crate) fn lease_key(&self) -> &crate::key::Key {
        self.lease.key()
    }

    /// The lock id: the handle to this lock in the backend. Keep it secret.
    pub fn lock_id(&self) -> &str {
        self.lease.lock_id().as_str()
    }

    /// The fencing token of this acquisition.
    pub fn fence(&self) -> &Fence {
        self.lease.fence()
    }

    /// The lease's expiry as the backend last reported it, in Unix ms of the backend's time
    /// authority. Moves forward with every renewal.
    pub fn expires_at_ms(&self) -> i64 {
        self.lease.expires_at_ms()
    }

    /// The lease's local deadline: when the last acquisition or renewal the store confirmed
    /// was sent, plus its TTL. The store counts from when the request arrived, so its record
    /// expires no earlier; the guard is lost at this instant unless a renewal is confirmed
    /// first. Moves forward with each renewal. Work that must be over before anyone else can
    /// hold the lock (as `syncguard run --on-lost kill` ends its command `--grace` before it)
    /// is timed against it. Costs no I/O.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use syncguard::{LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let before = Instant::now();
    /// let guard = locker.lock_with("job", &LockOptions::default().ttl(Duration::from_secs(30)))?;
    /// assert!(guard.deadline() >= before + Duration::from_secs(30));
    /// assert!(guard.deadline() <= Instant::now() + Duration::from_secs(30));
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn deadline(&self) -> std::time::Instant {
        self.lease.deadline()
    }

    /// Whether the lease is lost: a renewal found the lock gone, or the TTL ran out without a
    /// successful renewal. Once true, stays true. Costs no I/O.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// A token cancelled when the lease is lost (at its local deadline at the latest), to hand
    /// to work that must stop without the lock — a [`CancelToken`] another thread can wait on.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{Heartbeat, LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let options = LockOptions::default()
    ///     .ttl(Duration::from_millis(50))
    ///     .heartbeat(Heartbeat::Off);
    /// let guard = locker.lock_with("short", &options)?;
    /// let lost = guard.lost_token();
    /// while !lost.is_cancelled() {
    ///     std::thread::sleep(Duration::from_millis(5)); // the work, in steps
    /// }
    /// assert!(guard.is_lost());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn lost_token(&self) -> CancelToken {
        self.lease.lost_token()
    }

    /// `Ok(())` while the lease is held, `Err` with code
    /// [`ErrorCode::LockLost`](crate::ErrorCode::LockLost) once lost. Costs no I/O.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(self.lease.lost_error())
        } else {
            Ok(())
        }
    }

    /// Sets the lease to expire `ttl` from now (the backend's now), and makes the heartbeat
    /// renew with that TTL from then on, on its [`Heartbeat`](crate::Heartbeat) schedule for
    /// the new TTL. `Ok(false)` when the lock is no longer held (the guard is then lost); errors
    /// leave the lease as it was.
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        self.renew(Some(Ttl::new(ttl)?), None)
    }

    /// Renews the lease for its own TTL and stores `holder` as its holder text in the same
    /// step (a leader's [`proclaim`](crate::Leadership::proclaim)); otherwise as
    /// [`extend`](LockGuard::extend).
    pub(crate) fn renew_with_holder(&self, holder: &Holder) -> Result<bool> {
        self.renew(None, Some(holder))
    }

    /// The one renewal a program asks for: for `ttl` (`None`: the lease's own), with `holder`
    /// stored when given; the heartbeat then renews on its schedule from here.
    fn renew(&self, ttl: Option<Ttl>, holder: Option<&Holder>) -> Result<bool> {
        match self.lease.renew(self.store.driver(), ttl, holder) {
            Renewal::Renewed => {
                self.store.scheduler().schedule(&self.lease);
                Ok(true)
            }
            Renewal::Ended => {
                self.lease.release_if_lapsed(self.store.as_ref());
                Ok(false)
            }
            Renewal::Failed(error) => Err(error),
        }
    }

    /// Releases the lock. `Ok(true)` when this call removed it (or, before a
    /// [`min_hold`](crate::LockOptions::min_hold) ended, set it to expire when the hold ends),
    /// `Ok(false)` when it was already gone (expired, or taken over). No renewal is sent once
    /// this has begun. An error means the store did not answer: the lock is then released in
    /// the background (once the `min_hold` has ended, which it lasts until in any case).
    pub fn release(self) -> Result<bool> {
        self.release_now(true)
    }

    /// Releases the lock at once, deleting it also before its
    /// [`min_hold`](crate::LockOptions::min_hold) has ended: for work that never began (a hold
    /// is for work that ran). Otherwise as [`release`](LockGuard::release).
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{LockBackend, LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let once = LockOptions::default().min_hold(Duration::from_secs(60));
    /// let guard = locker.lock_with("nightly-report", &once)?;
    /// assert!(guard.release_without_hold()?); // the job could not start…
    /// assert!(!locker.backend().is_locked("nightly-report")?); // …so the next may run it
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn release_without_hold(self) -> Result<bool> {
        self.release_now(false)
    }

    /// When the [`min_hold`](crate::LockOptions::min_hold) ends, in Unix ms of the backend's
    /// time authority (as [`expires_at_ms`](LockGuard::expires_at_ms)): the store's clock at
    /// the acquisition plus the hold. The store's record does not end before it. `None`
    /// without a `min_hold`. Costs no I/O.
    pub fn min_hold_until_ms(&self) -> Option<i64> {
        self.lease.min_hold_end_ms()
    }

    fn release_now(&self, keep_hold: bool) -> Result<bool> {
        match self.lease.release(self.store.driver(), keep_hold) {
            Ok(Released::Removed) => {
                self.store.released(self.lease.key());
                Ok(true)
            }
            Ok(Released::Kept) => Ok(true),
            Ok(Released::Absent) => Ok(false),
            Err(error) => {
                // The store may not have heard it: try again in the background while the lease
                // could still be live, so the key is not left locked for nobody (but never
                // before a kept min_hold ends: the lock is to stay until then).
                if error.code() != ErrorCode::InvalidArgument {
                    let hold_end = self.lease.min_hold_end().filter(|_| keep_hold);
                    self.store.release_later(
                        Unheld::now(
                            self.lease.key(),
                            self.lease.lock_id(),
                            self.lease.kind(),
                            self.lease.ttl(),
                            Origin::FailedRelease,
                        )
                        .not_before(hold_end),
                    );
                }
                Err(error)
            }
        }
    }

    /// Keeps the lock but lets go of it here: the heartbeat stops renewing it and dropping
    /// nothing releases it. The lock stays in the store until the returned lease's
    /// `expires_at_ms` (the last expiry the store confirmed), for another process to extend or
    /// release by its lock id — as `syncguard acquire` hands a lock to a shell script.
    ///
    /// ```
    /// use syncguard::{LockBackend, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let lease = locker.lock("handed-over")?.detach();
    /// assert!(locker.backend().is_locked("handed-over")?);
    /// assert!(locker.backend().release(&lease.lock_id)?);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    #[must_use = "the lease is the only way left to release the lock before it expires"]
    pub fn detach(self) -> Lease {
        self.lease.detach()
    }

    pub(crate) fn report_release_error(&self, error: &LockError) {
        report_release_error(self.on_release_error.as_ref(), self.key(), error);
    }
}

/// Hands a failed release to the callback, or logs it (without the lock id).
pub(crate) fn report_release_error(
    callback: Option<&ReleaseErrorCallback>,
    key: &str,
    error: &LockError,
) {
    match callback {
        Some(callback) => {
            if catch_unwind(AssertUnwindSafe(|| callback(error))).is_err() {
                log::error!("syncguard: the on_release_error callback panicked");
            }
        }
        None => log::warn!(
            "syncguard: releasing the lock on key hash {} failed: {error}",
            hash_key(key)
        ),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // After `release` or `detach` this finds nothing left to do.
        if let Err(error) = self.release_now(true) {
            self.report_release_error(&error);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("kind", &self.lease.kind())
            .field("fence", self.fence())
            .field("expires_at_ms", &self.expires_at_ms())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
