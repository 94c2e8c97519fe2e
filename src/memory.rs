//! The in-process backend: the embedded default, and a test double with a controllable clock.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::backend::{
    AcquireOutcome, Capabilities, FailureReason, Lease, LockBackend, LockInfo, LockInfoDebug,
    Lookup, MutationOutcome, TimeAuthority,
};
use crate::error::Result;
use crate::fence::Fence;
use crate::key::normalize_and_validate_key;
use crate::lock_id::{generate_lock_id, validate_lock_id};
use crate::time::{Clock, SystemClock, TIME_TOLERANCE_MS, is_live, ttl_to_ms};

/// Locks that live in this process: threads of one program coordinate through it, and tests
/// use it in place of a server.
///
/// Clones share the same locks. Semantics are those of every other backend (NFC keys,
/// 1000 ms liveness tolerance, fences per key that only grow, lock-id ownership), with the
/// client clock as time authority; [`MemoryBackend::with_clock`] takes a
/// [`ManualClock`](crate::ManualClock) for deterministic expiry. Fence counters live as long as
/// the process.
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
}

#[derive(Default)]
struct State {
    /// Normalised key → the lock on it (possibly expired, until swept).
    locks: HashMap<String, Entry>,
    /// Lock id → normalised key: the reverse index release and extend resolve through.
    keys_by_id: HashMap<String, String>,
    /// Normalised key → last fence issued. Never shrinks.
    fences: HashMap<String, u64>,
    /// Lock count at which the next acquire sweeps expired entries.
    sweep_at: usize,
}

struct Entry {
    lock_id: String,
    expires_at_ms: i64,
    acquired_at_ms: i64,
    fence: Fence,
}

const MIN_SWEEP_AT: usize = 1024;

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
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; should a panic ever get through, the maps are
        // still consistent, so carry on rather than poison every later caller.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

impl State {
    fn live_entry(&self, key: &str, now_ms: i64) -> Option<&Entry> {
        self.locks
            .get(key)
            .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
    }

    /// Removes the lock held under `lock_id` if it is live; says why not otherwise.
    /// Expired entries found on the way are removed (never a live one).
    fn take_owned(&mut self, lock_id: &str, now_ms: i64) -> std::result::Result<(), FailureReason> {
        let key = self
            .keys_by_id
            .get(lock_id)
            .ok_or(FailureReason::NotFound)?;
        let Some(entry) = self.locks.get(key).filter(|e| e.lock_id == lock_id) else {
            // A stale index entry: the lock was replaced. Leave the new holder alone.
            self.keys_by_id.remove(lock_id);
            return Err(FailureReason::NotFound);
        };
        let live = is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS);
        let key = key.clone();
        self.locks.remove(&key);
        self.keys_by_id.remove(lock_id);
        if live {
            Ok(())
        } else {
            Err(FailureReason::Expired)
        }
    }

    fn sweep_expired(&mut self, now_ms: i64) {
        let keys_by_id = &mut self.keys_by_id;
        self.locks.retain(|_, entry| {
            let live = is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS);
            if !live {
                keys_by_id.remove(&entry.lock_id);
            }
            live
        });
        self.sweep_at = (self.locks.len() * 2).max(MIN_SWEEP_AT);
    }
}

impl LockBackend for MemoryBackend {
    fn acquire(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome> {
        let ttl_ms = ttl_to_ms(ttl)?;
        let key = normalize_and_validate_key(key)?;
        let lock_id = generate_lock_id();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        if state.live_entry(&key, now_ms).is_some() {
            return Ok(AcquireOutcome::Locked);
        }
        if state.locks.len() >= state.sweep_at {
            state.sweep_expired(now_ms);
        }
        let counter = state.fences.get(&key).copied().unwrap_or(0) + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.clone()))?;
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        state.fences.insert(key.clone(), counter);
        if let Some(old) = state.locks.remove(&key) {
            state.keys_by_id.remove(&old.lock_id);
        }
        state.keys_by_id.insert(lock_id.clone(), key.clone());
        state.locks.insert(
            key,
            Entry {
                lock_id: lock_id.clone(),
                expires_at_ms,
                acquired_at_ms: now_ms,
                fence: fence.clone(),
            },
        );
        Ok(AcquireOutcome::Acquired(Lease {
            lock_id,
            fence,
            expires_at_ms,
        }))
    }

    fn release(&self, lock_id: &str) -> Result<bool> {
        Ok(self.release_outcome(lock_id)?.applied().is_some())
    }

    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        Ok(self.extend_outcome(lock_id, ttl)?.applied())
    }

    fn is_locked(&self, key: &str) -> Result<bool> {
        let key = normalize_and_validate_key(key)?;
        let now_ms = self.clock.now_ms();
        Ok(self.state().live_entry(&key, now_ms).is_some())
    }

    fn lookup(&self, by: Lookup<'_>) -> Result<Option<LockInfo>> {
        Ok(self.lookup_raw(by)?.map(|raw| raw.info))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("memory", true, TimeAuthority::Client)
    }

    fn release_outcome(&self, lock_id: &str) -> Result<MutationOutcome<()>> {
        validate_lock_id(lock_id)?;
        let now_ms = self.clock.now_ms();
        Ok(match self.state().take_owned(lock_id, now_ms) {
            Ok(()) => MutationOutcome::Applied(()),
            Err(reason) => MutationOutcome::NotApplied(Some(reason)),
        })
    }

    fn extend_outcome(&self, lock_id: &str, ttl: Duration) -> Result<MutationOutcome<i64>> {
        validate_lock_id(lock_id)?;
        let ttl_ms = ttl_to_ms(ttl)?;
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let Some(key) = state.keys_by_id.get(lock_id).cloned() else {
            return Ok(MutationOutcome::NotApplied(Some(FailureReason::NotFound)));
        };
        match state.locks.get_mut(&key) {
            Some(entry) if entry.lock_id == lock_id => {
                if is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS) {
                    entry.expires_at_ms = now_ms.saturating_add(ttl_ms);
                    return Ok(MutationOutcome::Applied(entry.expires_at_ms));
                }
                // Expired: clean up, never resurrect.
                let _ = state.take_owned(lock_id, now_ms);
                Ok(MutationOutcome::NotApplied(Some(FailureReason::Expired)))
            }
            _ => {
                state.keys_by_id.remove(lock_id);
                Ok(MutationOutcome::NotApplied(Some(FailureReason::NotFound)))
            }
        }
    }

    fn lookup_raw(&self, by: Lookup<'_>) -> Result<Option<LockInfoDebug>> {
        let now_ms = self.clock.now_ms();
        let to_info = |key: &str, entry: &Entry| {
            LockInfoDebug::new(
                key,
                entry.lock_id.as_str(),
                entry.expires_at_ms,
                entry.acquired_at_ms,
                entry.fence.clone(),
            )
        };
        match by {
            Lookup::Key(key) => {
                let key = normalize_and_validate_key(key)?;
                let state = self.state();
                Ok(state.live_entry(&key, now_ms).map(|e| to_info(&key, e)))
            }
            Lookup::LockId(lock_id) => {
                validate_lock_id(lock_id)?;
                let state = self.state();
                let Some(key) = state.keys_by_id.get(lock_id) else {
                    return Ok(None);
                };
                Ok(state
                    .live_entry(key, now_ms)
                    .filter(|entry| entry.lock_id == lock_id)
                    .map(|entry| to_info(key, entry)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(
            backend
                .extend_outcome(&lease.lock_id, Duration::from_secs(1))
                .unwrap(),
            MutationOutcome::NotApplied(Some(FailureReason::Expired))
        );
        assert_eq!(
            backend.release_outcome(&lease.lock_id).unwrap(),
            MutationOutcome::NotApplied(Some(FailureReason::NotFound))
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
