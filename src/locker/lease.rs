//! The lease state machine: one held lease, shared by its guard and the heartbeat, and the one
//! path by which it is renewed, released, lost or handed over.
//!
//! ```text
//!   Held ──renew: applied──▶ Held          (deadline and next renewal move on)
//!   Held ──renew: gone─────▶ Lost{confirmed}   (the store said so: nothing to release)
//!   Held ──deadline passed─▶ Lost{unconfirmed} (releasing is still worth a try)
//!   Held | Lost{unconfirmed} ──release──▶ Releasing ──▶ Released
//!   Held ──detach──▶ Detached              (kept in the store, forgotten here)
//! ```
//!
//! Renewals hold the state lock across their call to the store, so once a release has set
//! `Releasing` no renewal of the lease can go out any more.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::Lease;
use crate::driver::{Driver, Extension, LeaseRef, Outcome, Version};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::locker::options::Heartbeat;
use crate::time::Ttl;

/// Called with a `LockLost` error when a guard's lease is found lost.
pub(crate) type LostCallback = Arc<dyn Fn(&LockError) + Send + Sync>;

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Held,
    Releasing,
    Released,
    /// Handed over to the program ([`LockGuard::detach`](crate::LockGuard::detach)): neither
    /// renewed nor released here.
    Detached,
    /// `confirmed`: the store said the lock is gone (so releasing would be pointless);
    /// otherwise the lease ran past its TTL without a successful renewal.
    Lost {
        confirmed: bool,
    },
}

/// What the state lock guards.
struct State {
    phase: Phase,
    /// The store's version of the record, from the last acquire or renewal.
    version: Option<Version>,
}

/// What a renewal came to.
pub(crate) enum Renewal {
    /// The store renewed it: the lease goes on.
    Renewed,
    /// The lease is over: released, handed over, or lost (and reported).
    Ended,
    /// The store could not be asked; the lease goes on until its deadline.
    Failed(LockError),
}

/// A held lease: shared by its guard and the heartbeat scheduler.
pub(crate) struct HeldLease {
    key: Key,
    lock_id: LockId,
    fence: Fence,
    heartbeat: Heartbeat,
    on_lock_lost: Option<LostCallback>,
    /// Instants below are stored as nanoseconds since `base`, so readers never block.
    base: Instant,
    ttl_ms: AtomicI64,
    /// When the lease runs out locally: the send time of the last successful acquire/extend
    /// plus its TTL. The store's expiry is never earlier (it starts counting later).
    deadline_ns: AtomicU64,
    /// When the heartbeat should renew next.
    next_due_ns: AtomicU64,
    expires_at_ms: AtomicI64,
    lost: AtomicBool,
    lost_reported: AtomicBool,
    /// Set when the phase leaves `Held`; readable without waiting for an in-flight renewal.
    finished: AtomicBool,
    state: Mutex<State>,
}

impl HeldLease {
    /// The lease just acquired: `lease` and `version` as the store granted them, for `ttl`,
    /// asked for at `sent`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        key: Key,
        lock_id: LockId,
        lease: Lease,
        version: Option<Version>,
        sent: Instant,
        ttl: Ttl,
        heartbeat: Heartbeat,
        on_lock_lost: Option<LostCallback>,
    ) -> Self {
        let held = HeldLease {
            key,
            lock_id,
            fence: lease.fence,
            heartbeat,
            on_lock_lost,
            base: sent,
            ttl_ms: AtomicI64::new(0),
            deadline_ns: AtomicU64::new(0),
            next_due_ns: AtomicU64::new(0),
            expires_at_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            lost_reported: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            state: Mutex::new(State {
                phase: Phase::Held,
                version,
            }),
        };
        held.set_renewal(sent, ttl, lease.expires_at_ms);
        held
    }

    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    pub(crate) fn lock_id(&self) -> &LockId {
        &self.lock_id
    }

    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    pub(crate) fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The TTL renewals use: the last one asked for.
    pub(crate) fn ttl(&self) -> Ttl {
        // Only ever stored from a `Ttl`.
        Ttl::from_checked_millis(self.ttl_ms.load(Ordering::Acquire))
    }

    /// How often the heartbeat renews this lease; `None` when it does not.
    pub(crate) fn interval(&self) -> Option<Duration> {
        self.heartbeat.interval_for(self.ttl().as_duration())
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

    /// The `LockLost` error for this lease.
    pub(crate) fn lost_error(&self) -> LockError {
        self.error(
            ErrorCode::LockLost,
            "the lease was lost: the lock expired or was taken over",
        )
    }

    /// Renews the lease for `ttl` through `driver`: the one renewal path, used by the
    /// heartbeat and by [`LockGuard::extend`](crate::LockGuard::extend).
    pub(crate) fn renew(&self, driver: &dyn Driver, ttl: Ttl) -> Renewal {
        let mut state = self.state();
        if state.phase != Phase::Held {
            return Renewal::Ended;
        }
        if self.is_lost() {
            self.mark_lost(&mut state, false);
            drop(state);
            self.report_lost("the lease ran out before a renewal succeeded");
            return Renewal::Ended;
        }
        let sent = Instant::now();
        let lease = LeaseRef::new(&self.lock_id)
            .with_key(&self.key)
            .with_version(state.version.as_ref());
        // The state lock stays held across the call: a release waits for it and, once it has
        // set `Releasing`, no renewal of this lease can go out any more.
        match driver.extend_lease(lease, ttl) {
            Ok(Outcome::Applied(extension)) => {
                if self.is_lost() {
                    // Back after the lease ran out locally: the program may have been told it
                    // was lost, so it stays lost.
                    self.mark_lost(&mut state, false);
                    drop(state);
                    self.report_lost("a renewal came back after the lease had run out");
                    return Renewal::Ended;
                }
                let Extension {
                    expires_at_ms,
                    version,
                } = extension;
                state.version = version;
                self.set_renewal(sent, ttl, expires_at_ms);
                Renewal::Renewed
            }
            Ok(Outcome::NotFound | Outcome::Expired | Outcome::NotOwner) => {
                self.mark_lost(&mut state, true);
                drop(state);
                self.report_lost("the lock was gone when its lease was renewed");
                Renewal::Ended
            }
            Err(error) => Renewal::Failed(error),
        }
    }

    /// Releases the lease through `driver`, once: `Ok(true)` when this removed the lock,
    /// `Ok(false)` when it was gone already (or released before).
    pub(crate) fn release(&self, driver: &dyn Driver) -> Result<bool> {
        let version = {
            let mut state = self.state();
            match state.phase {
                Phase::Held | Phase::Lost { confirmed: false } => {
                    self.set_phase(&mut state, Phase::Releasing);
                    state.version.clone()
                }
                Phase::Lost { confirmed: true } | Phase::Releasing | Phase::Released => {
                    self.set_phase(&mut state, Phase::Released);
                    return Ok(false);
                }
                Phase::Detached => return Ok(false),
            }
        };
        let lease = LeaseRef::new(&self.lock_id)
            .with_key(&self.key)
            .with_version(version.as_ref());
        let result = driver.release_lease(lease);
        self.set_phase(&mut self.state(), Phase::Released);
        match result {
            Ok(outcome) => Ok(outcome.is_applied()),
            Err(error) if error.key().is_none() => Err(error.with_key(self.key.as_str())),
            Err(error) => Err(error),
        }
    }

    /// Stops renewing and releasing: the lock stays in the store until its expiry, under the
    /// returned lease, whose `expires_at_ms` is the last the store confirmed.
    pub(crate) fn detach(&self) -> Lease {
        self.set_phase(&mut self.state(), Phase::Detached);
        Lease {
            lock_id: self.lock_id.as_str().to_owned(),
            fence: self.fence,
            expires_at_ms: self.expires_at_ms(),
        }
    }

    fn set_phase(&self, state: &mut State, phase: Phase) {
        state.phase = phase;
        if phase != Phase::Held {
            self.finished.store(true, Ordering::Release);
        }
    }

    fn mark_lost(&self, state: &mut State, confirmed: bool) {
        self.lost.store(true, Ordering::Release);
        if matches!(state.phase, Phase::Held | Phase::Lost { confirmed: false }) {
            self.set_phase(state, Phase::Lost { confirmed });
        }
    }

    /// Tells the program (once) that the lease is lost. Called without the state lock.
    fn report_lost(&self, why: &str) {
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
                hash_key(self.key.as_str())
            ),
        }
    }

    fn error(&self, code: ErrorCode, message: &str) -> LockError {
        LockError::new(code, message)
            .with_key(self.key.as_str())
            .with_lock_id(self.lock_id.as_str())
    }

    fn set_renewal(&self, sent: Instant, ttl: Ttl, expires_at_ms: i64) {
        let since_base = sent.saturating_duration_since(self.base);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let length = ttl.as_duration();
        let interval = self.heartbeat.interval_for(length).unwrap_or(length);
        self.ttl_ms.store(ttl.as_millis(), Ordering::Release);
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.next_due_ns.store(
            ns(since_base).saturating_add(ns(interval)),
            Ordering::Release,
        );
        self.deadline_ns
            .store(ns(since_base).saturating_add(ns(length)), Ordering::Release);
    }

    fn at(&self, ns: u64) -> Instant {
        self.base
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or_else(|| self.base + Duration::from_secs(u64::from(u32::MAX)))
    }
}
