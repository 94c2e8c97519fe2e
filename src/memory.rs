//! The in-process backend: the embedded default, and a test double with a controllable clock.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::driver::{
    Acquisition, Acquisitions, Driver, Extension, Find, Holder, KeyPrefix, KeySet, LeaseKind,
    LeaseRef, Line, ListLimit, LockList, LockRecord, OnRelease, Outcome, Permits, PlaceRecord,
    Places, ReleaseWatch, TIME_TOLERANCE_MS, Ttl, admit_all, is_live,
};
use crate::driver::{Capabilities, TicketOrder, TimeAuthority};
use crate::error::Result;
use crate::fence::Fence;
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
    /// Normalised key → its semaphore: apart from the key's lock and its fences.
    semaphores: HashMap<String, Semaphore>,
    /// Normalised key → the line of waiters for its lock, once anyone stood in it: kept when
    /// empty, as fences are, so that its last ticket never shrinks (a new place goes behind every
    /// ticket the line issued, as on Redis, PostgreSQL and Firestore).
    lines: HashMap<String, Places>,
    /// Normalised key → its lock's shared holders, by lock id (possibly expired, until
    /// reclaimed). Their fences come from `fences`, as the lock's do.
    readers: HashMap<String, HashMap<String, Entry>>,
    /// The last ticket issued to a new place, when tickets are numbered store-wide
    /// ([`TicketOrder::StoreWide`]); `None` numbers them per line.
    store_wide_ticket: Option<u64>,
}

/// The permits of one key's semaphore and its own fence sequence.
#[derive(Default)]
struct Semaphore {
    /// Lock id → the permit held under it (possibly expired, until reclaimed).
    held: HashMap<String, Entry>,
    /// The last fence issued. Never shrinks.
    fence: u64,
    /// Its line of waiters.
    line: Places,
}

struct Entry {
    lock_id: String,
    expires_at_ms: i64,
    acquired_at_ms: i64,
    fence: Fence,
    holder: Option<String>,
}

const MIN_SWEEP_AT: usize = 1024;

impl Entry {
    /// A lock (or permit) granted at `now_ms` for `ttl`.
    fn granted(
        lock_id: &str,
        now_ms: i64,
        ttl: Ttl,
        fence: Fence,
        holder: Option<&Holder>,
    ) -> Self {
        Entry {
            lock_id: lock_id.to_owned(),
            expires_at_ms: now_ms.saturating_add(ttl.as_millis()),
            acquired_at_ms: now_ms,
            fence,
            holder: holder.map(Holder::to_string),
        }
    }

    /// The raw record of this lock on `key`.
    fn record(&self, key: &str) -> LockRecord {
        LockRecord {
            key: key.to_owned(),
            lock_id: self.lock_id.clone(),
            expires_at_ms: self.expires_at_ms,
            acquired_at_ms: self.acquired_at_ms,
            fence: self.fence,
            holder: self.holder.clone(),
        }
    }
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

impl State {
    fn live_entry(&self, key: &str, now_ms: i64) -> Option<&Entry> {
        self.locks
            .get(key)
            .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
    }

    /// Removes the lock held under `lock_id`: `Applied` if it was live, `Expired` if it had
    /// expired (removed all the same, never a live one of another holder); with the key when
    /// something was removed.
    fn take_owned(&mut self, lock_id: &str, now_ms: i64) -> (Outcome<()>, Option<String>) {
        let Some(key) = self.keys_by_id.get(lock_id) else {
            return (Outcome::NotFound, None);
        };
        let Some(entry) = self.locks.get(key).filter(|e| e.lock_id == lock_id) else {
            // A stale index entry: the lock was replaced. Leave the new holder alone.
            self.keys_by_id.remove(lock_id);
            return (Outcome::NotFound, None);
        };
        let live = is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS);
        let key = key.clone();
        self.locks.remove(&key);
        self.keys_by_id.remove(lock_id);
        let outcome = if live {
            Outcome::Applied(())
        } else {
            Outcome::Expired
        };
        (outcome, Some(key))
    }

    /// [`take_owned`](State::take_owned) for a permit, found by its key and lock id.
    /// The permits of `key`'s semaphore, or its lock's shared holders (`kind`), by lock id.
    fn held_by_id(&mut self, key: &Key, kind: LeaseKind) -> Option<&mut HashMap<String, Entry>> {
        match kind {
            LeaseKind::Permit => self
                .semaphores
                .get_mut(key.as_str())
                .map(|semaphore| &mut semaphore.held),
            LeaseKind::Shared => self.readers.get_mut(key.as_str()),
            LeaseKind::Lock => None,
        }
    }

    /// Whether a live shared holder of `key`'s lock exists; reclaims the expired ones.
    fn has_live_readers(&mut self, key: &str, now_ms: i64) -> bool {
        let Some(readers) = self.readers.get_mut(key) else {
            return false;
        };
        readers.retain(|_, entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS));
        if readers.is_empty() {
            self.readers.remove(key);
            return false;
        }
        true
    }

    /// Removes the permit or shared hold `lease` names (found by its key and lock id).
    fn take_permit(
        &mut self,
        lease: LeaseRef<'_>,
        now_ms: i64,
    ) -> Result<(Outcome<()>, Option<String>)> {
        let key = lease.permit_key()?;
        let taken = self
            .held_by_id(key, lease.kind)
            .and_then(|held| held.remove(lease.lock_id.as_str()));
        let outcome = match taken {
            None => return Ok((Outcome::NotFound, None)),
            Some(entry) if is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS) => {
                Outcome::Applied(())
            }
            Some(_) => Outcome::Expired,
        };
        Ok((outcome, Some(key.to_string())))
    }

    /// `line`, with a ticket from the store-wide sequence when tickets are numbered so
    /// ([`TicketOrder::StoreWide`]) and a waiter without one stands in none of the lines it asks
    /// for (`stands`, asked only then): it then takes its place with that ticket, behind every
    /// place anywhere. Per line (the default), `line` as it is, with nothing looked up.
    fn ticketed<'a>(&mut self, line: Line<'a>, stands: impl FnOnce(&Self) -> bool) -> Line<'a> {
        if !matches!(line, Line::Wait(_)) || self.store_wide_ticket.is_none() || stands(self) {
            return line;
        }
        match &mut self.store_wide_ticket {
            Some(last) => {
                *last = last.saturating_add(1);
                line.at(*last)
            }
            None => line,
        }
    }

    /// Whether the waiter of `line` stands in the line of `key`'s lock.
    fn stands(&self, key: &Key, line: Line<'_>) -> bool {
        line.place().is_some_and(|place| {
            self.lines
                .get(key.as_str())
                .is_some_and(|places| places.has(place))
        })
    }

    /// Decides an acquisition of `key`'s lock with `free` slots by its line ([`Places::admit`]);
    /// a line is kept once made, empty or not (see `lines`).
    fn admit(
        &mut self,
        key: &Key,
        line: Line<'_>,
        free: usize,
        shared: bool,
        now_ms: i64,
        holder: Option<&Holder>,
    ) -> bool {
        let Some(places) = self.lines.get_mut(key.as_str()) else {
            // No one in line: nothing to decide unless this waiter must take a place.
            if free > 0 || line.place().is_none() {
                return free > 0;
            }
            let mut places = Places::default();
            let _ = places.admit(line, free, shared, now_ms, holder);
            self.lines.insert(key.to_string(), places);
            return false;
        };
        places.admit(line, free, shared, now_ms, holder).granted
    }

    /// Whether `key`'s lock may be granted now: no live lock, no live reader, and its line
    /// lets this request pass ([`admit`](State::admit)).
    fn lock_is_free(
        &mut self,
        key: &Key,
        line: Line<'_>,
        now_ms: i64,
        holder: Option<&Holder>,
    ) -> bool {
        let free = self.free_lock_slots(key, now_ms);
        self.admit(key, line, free, false, now_ms, holder)
    }

    /// The free slots of `key`'s lock at `now_ms`: 1 unless a live lock or a live shared holder
    /// holds it, whatever its line.
    fn free_lock_slots(&mut self, key: &Key, now_ms: i64) -> usize {
        usize::from(
            self.live_entry(key.as_str(), now_ms).is_none()
                && !self.has_live_readers(key.as_str(), now_ms),
        )
    }

    /// Takes `key`'s lock, which [`lock_is_free`](State::lock_is_free) found free.
    fn grant_lock(
        &mut self,
        key: &Key,
        lock_id: String,
        ttl: Ttl,
        holder: Option<&Holder>,
        now_ms: i64,
    ) -> Result<Acquisition> {
        if self.locks.len() >= self.sweep_at {
            self.sweep_expired(now_ms);
        }
        let counter = self.fences.get(key.as_str()).copied().unwrap_or(0) + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        let expires_at_ms = now_ms.saturating_add(ttl.as_millis());
        self.fences.insert(key.to_string(), counter);
        if let Some(old) = self.locks.remove(key.as_str()) {
            self.keys_by_id.remove(&old.lock_id);
        }
        self.keys_by_id.insert(lock_id.clone(), key.to_string());
        let entry = Entry::granted(&lock_id, now_ms, ttl, fence, holder);
        self.locks.insert(key.to_string(), entry);
        Ok(Acquisition::granted(lock_id, fence, expires_at_ms, None))
    }

    /// The line of `key`'s lock or semaphore, if anyone is in it.
    fn line_mut(&mut self, key: &Key, kind: LeaseKind) -> Option<&mut Places> {
        match kind {
            LeaseKind::Lock | LeaseKind::Shared => self.lines.get_mut(key.as_str()),
            LeaseKind::Permit => self
                .semaphores
                .get_mut(key.as_str())
                .map(|semaphore| &mut semaphore.line),
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

impl Driver for MemoryBackend {
    fn describe(&self) -> Capabilities {
        let tickets = match self.state().store_wide_ticket {
            Some(_) => TicketOrder::StoreWide,
            None => TicketOrder::PerLine,
        };
        Capabilities::new("memory", true, TimeAuthority::Client).with_tickets(tickets)
    }

    fn try_acquire(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        // Drawn before the mutex is taken, as everything that needs no shared state.
        let lock_id = LockId::generate().into_string();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let line = state.ticketed(line, |state| state.stands(key, line));
        if !state.lock_is_free(key, line, now_ms, holder) {
            return Ok(Acquisition::Locked);
        }
        state.grant_lock(key, lock_id, ttl, holder, now_ms)
    }

    /// Every key decided and taken under the one mutex: all or none at one instant, the lines
    /// decided by [`admit_all`].
    fn try_acquire_all(
        &self,
        keys: &KeySet,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisitions> {
        let mut lock_ids: Vec<String> = keys
            .iter()
            .map(|_| LockId::generate().into_string())
            .collect();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let line = state.ticketed(line, |state| keys.iter().any(|key| state.stands(key, line)));
        let free: Vec<usize> = keys
            .iter()
            .map(|key| state.free_lock_slots(key, now_ms))
            .collect();
        // The lines are taken out of the map for the decision, and put back (kept with their
        // last ticket) unless they never held a place.
        let mut lines: Vec<Places> = keys
            .iter()
            .map(|key| state.lines.remove(key.as_str()).unwrap_or_default())
            .collect();
        let mut deciding: Vec<&mut Places> = lines.iter_mut().collect();
        let admission = admit_all(&mut deciding, &free, line, now_ms, holder);
        for (key, places) in keys.iter().zip(lines) {
            if places.last_ticket > 0 {
                state.lines.insert(key.to_string(), places);
            }
        }
        if !admission.granted {
            return Ok(Acquisitions::Locked {
                ticket: admission.ticket,
            });
        }
        // A fence counter at its end refuses its key: checked for every key before any is
        // taken, so that the refusal leaves none held.
        for key in keys {
            let counter = state.fences.get(key.as_str()).copied().unwrap_or(0) + 1;
            Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        }
        let mut leases = Vec::with_capacity(keys.len());
        for (key, lock_id) in keys.iter().zip(lock_ids.drain(..)) {
            if let Acquisition::Acquired { lease, version } =
                state.grant_lock(key, lock_id, ttl, holder, now_ms)?
            {
                leases.push((lease, version));
            }
        }
        Ok(Acquisitions::Acquired(leases))
    }

    fn try_acquire_permit(
        &self,
        key: &Key,
        permits: Permits,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let lock_id = LockId::generate().into_string();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let line = state.ticketed(line, |state| {
            line.place().is_some_and(|place| {
                state
                    .semaphores
                    .get(key.as_str())
                    .is_some_and(|semaphore| semaphore.line.has(place))
            })
        });
        let semaphore = state.semaphores.entry(key.to_string()).or_default();
        // Reclaim what has expired: only live permits count.
        semaphore
            .held
            .retain(|_, entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS));
        let free = (permits.get() as usize).saturating_sub(semaphore.held.len());
        if !semaphore
            .line
            .admit(line, free, false, now_ms, holder)
            .granted
        {
            return Ok(Acquisition::Locked);
        }
        let counter = semaphore.fence + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        let expires_at_ms = now_ms.saturating_add(ttl.as_millis());
        semaphore.fence = counter;
        let entry = Entry::granted(&lock_id, now_ms, ttl, fence, holder);
        semaphore.held.insert(lock_id.clone(), entry);
        Ok(Acquisition::granted(lock_id, fence, expires_at_ms, None))
    }

    fn try_acquire_shared(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let lock_id = LockId::generate().into_string();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        let line = state.ticketed(line, |state| state.stands(key, line));
        let free = usize::from(state.live_entry(key.as_str(), now_ms).is_none());
        if !state.admit(key, line, free, true, now_ms, holder) {
            return Ok(Acquisition::Locked);
        }
        let counter = state.fences.get(key.as_str()).copied().unwrap_or(0) + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        state.fences.insert(key.to_string(), counter);
        let entry = Entry::granted(&lock_id, now_ms, ttl, fence, holder);
        let expires_at_ms = entry.expires_at_ms;
        state
            .readers
            .entry(key.to_string())
            .or_default()
            .insert(lock_id.clone(), entry);
        Ok(Acquisition::granted(lock_id, fence, expires_at_ms, None))
    }

    fn find_shared(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let mut readers: Vec<LockRecord> = state
            .readers
            .get(key.as_str())
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
            .map(|entry| entry.record(key.as_str()))
            .collect();
        readers.sort_by_key(|record| record.fence);
        Ok(readers)
    }

    fn list_shared_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let found = state
            .readers
            .iter()
            .filter(|(key, _)| prefix.matches(key))
            .flat_map(|(key, readers)| {
                readers
                    .values()
                    .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
                    .map(|entry| entry.record(key))
            })
            .collect();
        Ok(LockList::from_unsorted(found, limit, true))
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        let mut state = self.state();
        if let Some(places) = state.line_mut(key, kind) {
            places.leave(place);
        }
        Ok(())
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        Ok(state
            .line_mut(key, kind)
            .map(|places| places.live(now_ms))
            .unwrap_or_default())
    }

    fn find_permits(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let mut held: Vec<LockRecord> = state
            .semaphores
            .get(key.as_str())
            .map(|semaphore| {
                semaphore
                    .held
                    .values()
                    .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
                    .map(|entry| entry.record(key.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        held.sort_by_key(|record| record.fence);
        Ok(held)
    }

    fn list_permit_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let found = state
            .semaphores
            .iter()
            .filter(|(key, _)| prefix.matches(key))
            .flat_map(|(key, semaphore)| {
                semaphore
                    .held
                    .values()
                    .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
                    .map(|entry| entry.record(key))
            })
            .collect();
        Ok(LockList::from_unsorted(found, limit, true))
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

    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let lock_id = lease.lock_id.as_str();
        let now_ms = self.clock.now_ms();
        let mut state = self.state();
        if lease.kind != LeaseKind::Lock {
            let key = lease.permit_key()?;
            let permit = state
                .held_by_id(key, lease.kind)
                .and_then(|held| held.get_mut(lock_id));
            let Some(entry) = permit else {
                return Ok(Outcome::NotFound);
            };
            if is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS) {
                entry.expires_at_ms = now_ms.saturating_add(ttl.as_millis());
                return Ok(Outcome::Applied(Extension {
                    expires_at_ms: entry.expires_at_ms,
                    version: None,
                }));
            }
            // Expired: reclaimed, never resurrected.
            let (_, removed) = state.take_permit(lease, now_ms)?;
            drop(state);
            if let Some(key) = removed {
                self.announce(&key);
            }
            return Ok(Outcome::Expired);
        }
        let Some(key) = state.keys_by_id.get(lock_id).cloned() else {
            return Ok(Outcome::NotFound);
        };
        match state.locks.get_mut(&key) {
            Some(entry) if entry.lock_id == lock_id => {
                if is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS) {
                    entry.expires_at_ms = now_ms.saturating_add(ttl.as_millis());
                    return Ok(Outcome::Applied(Extension {
                        expires_at_ms: entry.expires_at_ms,
                        version: None,
                    }));
                }
                // Expired: clean up, never resurrect.
                let (_, removed) = state.take_owned(lock_id, now_ms);
                drop(state);
                if let Some(key) = removed {
                    self.announce(&key);
                }
                Ok(Outcome::Expired)
            }
            _ => {
                state.keys_by_id.remove(lock_id);
                Ok(Outcome::NotFound)
            }
        }
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let now_ms = self.clock.now_ms();
        Ok(self.state().live_entry(key.as_str(), now_ms).is_some())
    }

    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let key = match by {
            Find::Key(key) => key.as_str(),
            Find::LockId(lock_id) => match state.keys_by_id.get(lock_id.as_str()) {
                Some(key) => key.as_str(),
                None => return Ok(None),
            },
        };
        Ok(state.live_entry(key, now_ms).map(|entry| entry.record(key)))
    }

    fn list_records(&self, prefix: &KeyPrefix, limit: ListLimit) -> Result<LockList<LockRecord>> {
        let now_ms = self.clock.now_ms();
        let state = self.state();
        let mut found: Vec<(&String, &Entry)> = state
            .locks
            .iter()
            .filter(|(key, entry)| {
                prefix.matches(key) && is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS)
            })
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
            .list_records(&KeyPrefix::new("k").unwrap(), ListLimit::new(3).unwrap())
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
