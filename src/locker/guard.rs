//! The RAII guard, and the lease state it shares with the heartbeat.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::Lease;
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::key::hash_key;
use crate::locker::Heartbeat;
use crate::time::ttl_to_ms;

/// Called with a `LockLost` error when a guard's lease is found lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LockError) + Send + Sync>;
/// Called with the error when a release fails (from `Drop`, or `with_lock`).
pub(crate) type ReleaseErrorCallback = Arc<dyn Fn(&LockError) + Send + Sync>;

/// What guards and the heartbeat need of the backend behind a `Locker`. Holding it keeps the
/// locker's shared state (backend and heartbeat scheduler) alive.
pub(crate) trait LeaseOps: Send + Sync {
    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>>;
    fn release(&self, lock_id: &str) -> Result<bool>;
}

/// Where a lease is in its life. Guarded by a mutex that renewals hold across their network
/// call, so that once `Releasing` is set no renewal can be sent any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Held,
    Releasing,
    Released,
    /// `confirmed`: the backend said the lock is gone (so releasing would be pointless);
    /// otherwise the lease ran past its TTL without a successful renewal.
    Lost {
        confirmed: bool,
    },
}

/// A held lease: shared by its guard and the heartbeat scheduler.
pub(crate) struct HeldLease {
    key: String,
    lock_id: String,
    fence: Fence,
    heartbeat: Heartbeat,
    on_lock_lost: Option<LostCallback>,
    /// Instants below are stored as nanoseconds since `base`, so readers never block.
    base: Instant,
    ttl_ms: AtomicU64,
    /// When the lease runs out locally: the send time of the last successful acquire/extend
    /// plus its TTL. The server's expiry is never earlier (it starts counting later).
    deadline_ns: AtomicU64,
    /// When the heartbeat should renew next.
    next_due_ns: AtomicU64,
    expires_at_ms: AtomicI64,
    lost: AtomicBool,
    lost_reported: AtomicBool,
    /// Set when the phase leaves `Held`; readable without waiting for an in-flight renewal.
    finished: AtomicBool,
    phase: Mutex<Phase>,
}

impl HeldLease {
    pub(crate) fn new(
        key: String,
        lease: Lease,
        sent: Instant,
        ttl: Duration,
        heartbeat: Heartbeat,
        on_lock_lost: Option<LostCallback>,
    ) -> Self {
        let held = HeldLease {
            key,
            lock_id: lease.lock_id,
            fence: lease.fence,
            heartbeat,
            on_lock_lost,
            base: sent,
            ttl_ms: AtomicU64::new(0),
            deadline_ns: AtomicU64::new(0),
            next_due_ns: AtomicU64::new(0),
            expires_at_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            lost_reported: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            phase: Mutex::new(Phase::Held),
        };
        held.set_renewal(sent, ttl, lease.expires_at_ms);
        held
    }

    pub(crate) fn lock_id(&self) -> &str {
        &self.lock_id
    }

    pub(crate) fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Acquire))
    }

    /// How often the heartbeat renews this lease; `None` when it does not.
    pub(crate) fn interval(&self) -> Option<Duration> {
        self.heartbeat.interval_for(self.ttl())
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.at(self.deadline_ns.load(Ordering::Acquire))
    }

    pub(crate) fn next_due(&self) -> Instant {
        self.at(self.next_due_ns.load(Ordering::Acquire))
    }

    /// Whether the lease can no longer be counted on. Latches: once true, stays true.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.lost.store(true, Ordering::Release);
            return true;
        }
        false
    }

    /// Whether renewals and releases still go out for this lease.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Moves the phase on from `Held`. Call with the phase lock held.
    pub(crate) fn set_phase(&self, phase: &mut Phase, next: Phase) {
        *phase = next;
        if next != Phase::Held {
            self.finished.store(true, Ordering::Release);
        }
    }

    /// Records a successful renewal sent at `sent`. Call with the phase lock held.
    /// A renewal that comes back after the lease already ran out locally does not revive it:
    /// the program may have been told it was lost.
    pub(crate) fn renewed(
        &self,
        phase: &mut Phase,
        sent: Instant,
        ttl: Duration,
        expires_at_ms: i64,
    ) {
        if self.is_lost() {
            self.mark_lost(phase, false);
            return;
        }
        self.set_renewal(sent, ttl, expires_at_ms);
    }

    /// Marks the lease lost when its local deadline has passed. Call with the phase lock held.
    pub(crate) fn lost_if_overdue(&self, phase: &mut Phase) -> bool {
        if self.is_lost() {
            self.mark_lost(phase, false);
            true
        } else {
            false
        }
    }

    pub(crate) fn mark_lost(&self, phase: &mut Phase, confirmed: bool) {
        self.lost.store(true, Ordering::Release);
        if matches!(*phase, Phase::Held | Phase::Lost { confirmed: false }) {
            self.set_phase(phase, Phase::Lost { confirmed });
        }
    }

    /// Tells the program (once) that the lease is lost. Call without the phase lock.
    pub(crate) fn report_lost(&self, why: &str) {
        if self.lost_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        let error = self.error(ErrorCode::LockLost, why);
        match &self.on_lock_lost {
            Some(callback) => {
                if catch_unwind(AssertUnwindSafe(|| callback(&error))).is_err() {
                    log::error!("syncguard: the on_lock_lost callback panicked");
                }
            }
            None => log::warn!(
                "syncguard: lost the lock on key hash {}: {why}",
                hash_key(&self.key)
            ),
        }
    }

    fn error(&self, code: ErrorCode, message: &str) -> LockError {
        LockError::new(code, message)
            .with_key(self.key.clone())
            .with_lock_id(self.lock_id.clone())
    }

    fn set_renewal(&self, sent: Instant, ttl: Duration, expires_at_ms: i64) {
        let since_base = sent.saturating_duration_since(self.base);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let interval = self.heartbeat.interval_for(ttl).unwrap_or(ttl);
        self.ttl_ms.store(
            u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.next_due_ns.store(
            ns(since_base).saturating_add(ns(interval)),
            Ordering::Release,
        );
        self.deadline_ns
            .store(ns(since_base).saturating_add(ns(ttl)), Ordering::Release);
    }

    fn at(&self, ns: u64) -> Instant {
        self.base
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or_else(|| self.base + Duration::from_secs(u64::from(u32::MAX)))
    }
}

/// A held lock. Dropping it releases the lock; [`release`](LockGuard::release) does the same
/// and reports the outcome.
///
/// While the guard lives, the [`Locker`](crate::Locker)'s heartbeat renews the lease (unless
/// [`Heartbeat::Off`]). If a renewal finds the lock gone, or the lease runs out because
/// renewals kept failing, the guard is *lost*: [`is_lost`](LockGuard::is_lost) turns true,
/// [`check`](LockGuard::check) fails with `LockLost`, and the `on_lock_lost` callback runs.
/// Check before each step that must not run without the lock, and pass the
/// [`fence`](LockGuard::fence) to whatever the lock protects.
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
    ops: Arc<dyn LeaseOps>,
    on_release_error: Option<ReleaseErrorCallback>,
}

impl LockGuard {
    pub(crate) fn new(
        lease: Arc<HeldLease>,
        ops: Arc<dyn LeaseOps>,
        on_release_error: Option<ReleaseErrorCallback>,
    ) -> Self {
        LockGuard {
            lease,
            ops,
            on_release_error,
        }
    }

    /// The key, NFC-normalised.
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The lock id: the handle to this lock in the backend. Keep it secret.
    pub fn lock_id(&self) -> &str {
        &self.lease.lock_id
    }

    /// The fencing token of this acquisition.
    pub fn fence(&self) -> &Fence {
        &self.lease.fence
    }

    /// The lease's expiry as the backend last reported it, in Unix ms of the backend's time
    /// authority. Moves forward with every renewal.
    pub fn expires_at_ms(&self) -> i64 {
        self.lease.expires_at_ms.load(Ordering::Acquire)
    }

    /// Whether the lease is lost: a renewal found the lock gone, or the TTL ran out without a
    /// successful renewal. Once true, stays true. Costs no I/O.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// `Ok(())` while the lease is held, `Err` with code [`ErrorCode::LockLost`] once lost.
    /// Costs no I/O.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(self.lease.error(
                ErrorCode::LockLost,
                "the lease was lost: the lock expired or was taken over",
            ))
        } else {
            Ok(())
        }
    }

    /// Sets the lease to expire `ttl` from now (the backend's now), and makes the heartbeat
    /// renew with that TTL from then on. `Ok(false)` when the lock is no longer held (the
    /// guard is then lost); errors leave the lease as it was.
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        ttl_to_ms(ttl)?;
        let mut phase = self.lease.phase();
        if *phase != Phase::Held || self.lease.lost_if_overdue(&mut phase) {
            drop(phase);
            self.lease
                .report_lost("the lease ran out before it was extended");
            return Ok(false);
        }
        let sent = Instant::now();
        match self.ops.extend(&self.lease.lock_id, ttl) {
            Ok(Some(expires_at_ms)) => {
                self.lease.renewed(&mut phase, sent, ttl, expires_at_ms);
                if *phase == Phase::Held {
                    return Ok(true);
                }
                drop(phase);
                self.lease
                    .report_lost("the extension came back after the lease had run out");
                Ok(false)
            }
            Ok(None) => {
                self.lease.mark_lost(&mut phase, true);
                drop(phase);
                self.lease
                    .report_lost("the lock was gone when extending it");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Releases the lock. `Ok(true)` when this call removed it, `Ok(false)` when it was
    /// already gone (expired, or taken over). No renewal is sent once this has begun.
    pub fn release(self) -> Result<bool> {
        self.release_once()
    }

    fn release_once(&self) -> Result<bool> {
        {
            let mut phase = self.lease.phase();
            match *phase {
                Phase::Held | Phase::Lost { confirmed: false } => {
                    self.lease.set_phase(&mut phase, Phase::Releasing);
                }
                Phase::Lost { confirmed: true } | Phase::Releasing | Phase::Released => {
                    self.lease.set_phase(&mut phase, Phase::Released);
                    return Ok(false);
                }
            }
        }
        let result = self.ops.release(&self.lease.lock_id);
        self.lease
            .set_phase(&mut self.lease.phase(), Phase::Released);
        result.map_err(|e| {
            let with_context = e.key().is_none();
            if with_context {
                e.with_key(self.lease.key.clone())
            } else {
                e
            }
        })
    }

    pub(crate) fn report_release_error(&self, error: &LockError) {
        report_release_error(self.on_release_error.as_ref(), &self.lease.key, error);
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
        if let Err(error) = self.release_once() {
            self.report_release_error(&error);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("fence", self.fence())
            .field("expires_at_ms", &self.expires_at_ms())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
