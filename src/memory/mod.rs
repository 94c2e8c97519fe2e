//! The in-process backend: the embedded default, and a test double with a controllable clock.

mod breaking;
mod state;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use self::state::{Entry, MIN_SWEEP_AT, State};
use crate::driver::{
    Acquisitions, BreakOrder, Broken, Capabilities, Driver, Extension, Find, KeyPrefix, LeaseKind,
    LeaseRef, ListLimit, LockList, LockRecord, Mode, OnRelease, Outcome, PlaceRecord, ReleaseWatch,
    Request, TIME_TOLERANCE_MS, TicketOrder, TimeAuthority, Ttl, acquire_one_by_one, is_live,
};
use crate::error::Result;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::time::{Clock, SystemClock};

/// Locks that live in this process: threads of one program coordinate through it, and tests
/// use it in place of a server.
///
/// Clones share the same locks. Semantics are those of every other backend (NFC keys,
/// 1000 ms liveness tolerance, fences per key that only grow, lock-id ownership), with the
/// client clock as time authority; [`MemoryBackend::with_clock`] takes a
/// [`ManualClock`](crate::ManualClock) for deterministic expiry. Fence counters live as long as
/// the process. A listing ([`LockBackend::list`](crate::LockBackend::list)) looks at every lock
/// held, under the backend's mutex: no work bound, it is always complete.
///
/// ```
/// use std::time::Duration;
/// use syncguard::{AcquireOutcome, LockBackend, ManualClock, MemoryBackend};
///
/// let clock = ManualClock::new(1_000_000);
/// let backend = MemoryBackend::with_clock(clock.clone());
/// let AcquireOutcome::Acquired(lease) = backend.acquire("job", Duration::from_secs(10))? else {
///     unreachable!("nobody else holds it");
/// };
/// assert_eq!(backend.acquire("job", Duration::from_secs(10))?, AcquireOutcome::Locked);
/// clock.advance(Duration::from_secs(11)); // past expiry and the 1 s tolerance
/// assert!(!backend.is_locked("job")?);
/// assert!(!backend.release(&lease.lock_id)?);
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    /// Who hears of releases ([`Driver::watch_releases`]), by watch number.
    listeners: Arc<Mutex<Listeners>>,
}

#[derive(Default)]
struct Listeners {
    next: u64,
    on_release: Vec<(u64, OnRelease)>,
}

impl MemoryBackend {
    /// An empty backend on the system clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// An empty backend on `clock`.
    pub fn with_clock(clock: impl Clock + 'static) -> Self {
        MemoryBackend {
            state: Arc::new(Mutex::new(State {
                sweep_at: MIN_SWEEP_AT,
                ..State::default()
            })),
            clock: Arc::new(clock),
            listeners: Arc::default(),
        }
    }

    /// This (empty) backend numbering the tickets of new places in line as `tickets` says:
    /// per line by default, or from one sequence for the whole store, as PostgreSQL does — so
    /// that it can stand as the model of either kind of store (the differential test of
    /// [`testing`](crate::testing), feature `testing`).
    pub fn with_ticket_order(self, tickets: TicketOrder) -> Self {
        self.state().store_wide_ticket = (tickets == TicketOrder::StoreWide).then_some(0);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; should a panic ever get through, the maps are
        // still consistent, so carry on rather than poison every later caller.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the watchers that the lock on `key` is gone. Called without the state lock.
    fn announce(&self, key: &str) {
        let listeners: Vec<OnRelease> = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_release
            .iter()
            .map(|(_, on_release)| Arc::clone(on_release))
            .collect();
        for on_release in listeners {
            on_release(key);
        }
    }
}

/// A watch on a [`MemoryBackend`]: it hears every release, so `watch` has nothing to do.
struct MemoryWatch {
    listeners: Weak<Mutex<Listeners>>,
    id: u64,
}

impl ReleaseWatch for MemoryWatch {
    fn watch(&self, _: &Key) {}
    fn unwatch(&self, _: &Key) {}
}

impl Drop for MemoryWatch {
    fn drop(&mut self) {
        if let Some(listeners) = self.listeners.upgrade() {
            listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .on_release
                .retain(|(id, _)| *id != self.id);
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryBackend")
            .field("locks", &state.locks.len())
            .field("fence_counters", &state.fences.len())
            .finish()
    }
}

impl MemoryBackend {
    /// One lease's extension (a batch is these in turn, under the mutex each).
    fn extend_one(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let lock_id = lease.lock_id.as_str();
        if lease.holder.is_some() && lease.kind != LeaseKind::Lock {
            return Err(crate::error::LockError::invalid_argument(
                "only a lock's holder text can be replaced",
            ));
        }
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let removed = if lease.kind == LeaseKind::Lock {
            let Some(key) = state.keys_by_id.get(lock_id).cloned() else {
                return Ok(Outcome::NotFound);
            };
            match state.locks.get_mut(&key) {
                Some(entry) if entry.lock_id == lock_id => {
                    if let Some(extension) = extended(entry, ttl, now_ms) {
                        if let Some(holder) = lease.holder {
                            entry.holder = Some(holder.to_string());
                        }
                        return Ok(extension);
                    }
                    // Expired: clean up, never resurrect.
                    state.take_owned(lock_id, now_ms).1
                }
                _ => {
                    state.keys_by_id.remove(lock_id);
                    return Ok(Outcome::NotFound);
                }
            }
        } else {
            let key = lease.permit_key()?;
            let permit = state
                .held_by_id(key, lease.kind)
                .and_then(|held| held.get_mut(lock_id));
            let Some(entry) = permit else {
                return Ok(Outcome::NotFound);
            };
            if let Some(extension) = extended(entry, ttl, now_ms) {
                return Ok(extension);
            }
            // Expired: reclaimed, never resurrected.
            state.take_permit(lease, now_ms)?.1
        };
        drop(state);
        if let Some(key) = removed {
            self.announce(&key);
        }
        Ok(Outcome::Expired)
    }
}

/// `entry` extended to *now + ttl* if it is live; `None` when it has expired.
fn extended(entry: &mut Entry, ttl: Ttl, now_ms: i64) -> Option<Outcome<Extension>> {
    if !is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS) {
        return None;
    }
    entry.expires_at_ms = now_ms.saturating_add(ttl.as_millis());
    Some(Outcome::Applied(Extension {
        expires_at_ms: entry.expires_at_ms,
        version: None,
    }))
}

impl Driver for MemoryBackend {
    fn describe(&self) -> Capabilities {
        let tickets = match self.state().store_wide_ticket {
            Some(_) => TicketOrder::StoreWide,
            None => TicketOrder::PerLine,
        };
        Capabilities::new("memory", true, TimeAuthority::Client)
            .with_every_mode()
            .with_tickets(tickets)
    }

    /// Decided under the one mutex: several keys all or none at one instant.
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let Some(key) = request.key() else {
            if request.mode != Mode::Exclusive {
                return acquire_one_by_one(self, request);
            }
            // Drawn before the mutex is taken, as everything that needs no shared state.
            let lock_ids = (request.keys().iter())
                .map(|_| LockId::generate().into_string())
                .collect();
            let now_ms = self.clock.now_ms();
            return self.state().acquire_all(request, lock_ids, now_ms);
        };
        let lock_id = LockId::generate().into_string();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        match request.mode {
            Mode::Exclusive | Mode::Shared => state.acquire_lock(key, lock_id, request, now_ms),
            Mode::Permit(permits) => state.acquire_permit(key, permits, lock_id, request, now_ms),
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let now_ms = self.clock.now_ms();
        let (outcome, removed) = match lease.kind {
            LeaseKind::Lock => self.state().take_owned(lease.lock_id.as_str(), now_ms),
            LeaseKind::Permit | LeaseKind::Shared => self.state().take_permit(lease, now_ms)?,
        };
        if let Some(key) = removed {
            self.announce(&key);
        }
        Ok(outcome)
    }

    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        let now_ms = self.clock.now_ms();
        let broken = self.state().break_holders(order, now_ms)?;
        if !broken.holders.is_empty() {
            self.announce(order.key.as_str());
        }
        Ok(broken)
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        (leases.iter())
            .map(|(lease, ttl)| self.extend_one(*lease, *ttl))
            .collect()
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let now_ms = self.clock.now_ms();
        Ok(self.state().live_entry(key.as_str(), now_ms).is_some())
    }

    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let key = match by {
            Find::Key(key, LeaseKind::Lock) => key.as_str(),
            Find::Key(key, kind) => return Ok(state.holders(key, kind, now_ms)),
            Find::LockId(lock_id) => match state.keys_by_id.get(lock_id.as_str()) {
                Some(key) => key.as_str(),
                None => return Ok(Vec::new()),
            },
        };
        Ok(state
            .live_entry(key, now_ms)
            .map(|entry| entry.record(key))
            .into_iter()
            .collect())
    }

    fn list_records(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let live = |entry: &Entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS);
        if kind != LeaseKind::Lock {
            let found = (state.every_holder(kind).into_iter())
                .filter(|(key, _)| prefix.matches(key))
                .flat_map(|(key, held)| {
                    held.values()
                        .filter(|entry| live(entry))
                        .map(move |entry| entry.record(key))
                })
                .collect();
            return Ok(LockList::from_unsorted(found, limit, true));
        }
        let mut found: Vec<(&String, &Entry)> = (state.locks.iter())
            .filter(|(key, entry)| prefix.matches(key) && live(entry))
            .collect();
        // Only the first `limit + 1` keys are copied out: one more tells the limit was reached.
        if found.len() > limit.get() + 1 {
            found.select_nth_unstable_by(limit.get(), |a, b| a.0.cmp(b.0));
            found.truncate(limit.get() + 1);
        }
        let found = found
            .into_iter()
            .map(|(key, entry)| entry.record(key))
            .collect();
        Ok(LockList::from_unsorted(found, limit, true))
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        Ok(state
            .line_mut(key, kind)
            .map(|places| places.live(now_ms))
            .unwrap_or_default())
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        let mut state = self.state();
        if let Some(places) = state.line_mut(key, kind) {
            places.leave(place);
        }
        Ok(())
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let id = listeners.next;
        listeners.next += 1;
        listeners.on_release.push((id, on_release));
        Ok(Some(Box::new(MemoryWatch {
            listeners: Arc::downgrade(&self.listeners),
            id,
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Lease;
    use crate::backend::{AcquireOutcome, LockBackend};
    use crate::driver::DriverExt as _;
    use crate::time::ManualClock;

    fn acquired(outcome: AcquireOutcome) -> Lease {
        outcome.lease().expect("acquired")
    }

    #[test]
    fn liveness_follows_the_injected_clock_with_tolerance() {
        let clock = ManualClock::new(10_000);
        let backend = MemoryBackend::with_clock(clock.clone());
        let lease = acquired(backend.acquire("k", Duration::from_millis(100)).unwrap());
        assert_eq!(lease.expires_at_ms, 10_100);
        clock.set(11_099); // 999 ms past expiry: inside the tolerance
        assert!(backend.is_locked("k").unwrap());
        clock.set(11_100);
        assert!(!backend.is_locked("k").unwrap());
        let lock_id = LockId::new(&lease.lock_id).unwrap();
        let ttl = Ttl::new(Duration::from_secs(1)).unwrap();
        assert_eq!(
            backend.extend_lease(LeaseRef::new(&lock_id), ttl).unwrap(),
            Outcome::Expired
        );
        assert_eq!(
            backend.release_lease(LeaseRef::new(&lock_id)).unwrap(),
            Outcome::NotFound
        );
    }

    #[test]
    fn fences_survive_release_and_expiry() {
        let clock = ManualClock::new(0);
        let backend = MemoryBackend::with_clock(clock.clone());
        let a = acquired(backend.acquire("k", Duration::from_millis(5)).unwrap());
        assert!(backend.release(&a.lock_id).unwrap());
        let b = acquired(backend.acquire("k", Duration::from_millis(5)).unwrap());
        clock.advance(Duration::from_secs(5));
        let c = acquired(backend.acquire("k", Duration::from_millis(5)).unwrap());
        assert_eq!(
            [a.fence.value(), b.fence.value(), c.fence.value()],
            [1, 2, 3]
        );
        // b expired and was replaced by c: b's id must not touch c's lock.
        assert!(!backend.release(&b.lock_id).unwrap());
        assert!(backend.is_locked("k").unwrap());
    }

    #[test]
    fn listings_copy_out_the_first_keys_only() {
        let backend = MemoryBackend::new();
        for n in (0..50).rev() {
            let _ = acquired(
                backend
                    .acquire(&format!("k{n:02}"), Duration::from_secs(60))
                    .unwrap(),
            );
        }
        let listed = backend
            .list_records(
                &KeyPrefix::new("k").unwrap(),
                LeaseKind::Lock,
                ListLimit::new(3).unwrap(),
            )
            .unwrap();
        let keys: Vec<&str> = listed.locks.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["k00", "k01", "k02"]);
        assert_eq!(listed.coverage, crate::driver::Coverage::LimitReached);
    }

    #[test]
    fn sweep_drops_only_dead_locks() {
        let clock = ManualClock::new(0);
        let backend = MemoryBackend::with_clock(clock.clone());
        for i in 0..MIN_SWEEP_AT {
            let _ = backend
                .acquire(&format!("old{i}"), Duration::from_millis(1))
                .unwrap();
        }
        clock.advance(Duration::from_secs(2));
        let live = acquired(backend.acquire("fresh", Duration::from_secs(60)).unwrap());
        let _ = backend.acquire("fresh2", Duration::from_secs(60)).unwrap();
        let state = backend.state();
        assert_eq!(state.locks.len(), 2);
        assert_eq!(state.keys_by_id.len(), 2);
        assert_eq!(state.fences.len(), MIN_SWEEP_AT + 2);
        drop(state);
        assert!(backend.release(&live.lock_id).unwrap());
    }
}
