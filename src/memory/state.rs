//! What a [`MemoryBackend`](super::MemoryBackend) keeps under its mutex, and every decision
//! made on it: acquisitions of each mode, releases, reads.

use std::collections::HashMap;

use crate::driver::{
    Acquisitions, Admission, Holder, LeaseKind, LeaseRef, Line, LockRecord, Mode, Outcome, Permits,
    Places, Request, TIME_TOLERANCE_MS, Ttl, admit_all, is_live,
};
use crate::error::Result;
use crate::fence::Fence;
use crate::key::Key;

#[derive(Default)]
pub(super) struct State {
    /// Normalised key → the lock on it (possibly expired, until swept).
    pub(super) locks: HashMap<String, Entry>,
    /// Lock id → normalised key: the reverse index release and extend resolve through.
    pub(super) keys_by_id: HashMap<String, String>,
    /// Normalised key → last fence issued. Never shrinks.
    pub(super) fences: HashMap<String, u64>,
    /// Lock count at which the next acquire sweeps expired entries.
    pub(super) sweep_at: usize,
    /// Normalised key → its semaphore: apart from the key's lock and its fences.
    pub(super) semaphores: HashMap<String, Semaphore>,
    /// Normalised key → the line of waiters for its lock, once anyone stood in it: kept when
    /// empty, as fences are, so that its last ticket never shrinks (a new place goes behind every
    /// ticket the line issued, as on Redis, PostgreSQL and Firestore).
    pub(super) lines: HashMap<String, Places>,
    /// Normalised key → its lock's shared holders, by lock id (possibly expired, until
    /// reclaimed). Their fences come from `fences`, as the lock's do.
    pub(super) readers: HashMap<String, HashMap<String, Entry>>,
    /// The last ticket issued to a new place, when tickets are numbered store-wide
    /// ([`TicketOrder::StoreWide`]); `None` numbers them per line.
    pub(super) store_wide_ticket: Option<u64>,
}

/// The permits of one key's semaphore and its own fence sequence.
#[derive(Default)]
pub(super) struct Semaphore {
    /// Lock id → the permit held under it (possibly expired, until reclaimed).
    pub(super) held: HashMap<String, Entry>,
    /// The last fence issued. Never shrinks.
    pub(super) fence: u64,
    /// Its line of waiters.
    pub(super) line: Places,
}

pub(super) struct Entry {
    pub(super) lock_id: String,
    pub(super) expires_at_ms: i64,
    pub(super) acquired_at_ms: i64,
    pub(super) fence: Fence,
    pub(super) holder: Option<String>,
}

pub(super) const MIN_SWEEP_AT: usize = 1024;

impl Entry {
    /// A lock (or permit) granted at `now_ms` for `ttl`.
    pub(super) fn granted(
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
    pub(super) fn record(&self, key: &str) -> LockRecord {
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

impl State {
    pub(super) fn live_entry(&self, key: &str, now_ms: i64) -> Option<&Entry> {
        self.locks
            .get(key)
            .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
    }

    /// Removes the lock held under `lock_id`: `Applied` if it was live, `Expired` if it had
    /// expired (removed all the same, never a live one of another holder); with the key when
    /// something was removed.
    pub(super) fn take_owned(
        &mut self,
        lock_id: &str,
        now_ms: i64,
    ) -> (Outcome<()>, Option<String>) {
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

    /// The permits of `key`'s semaphore, or its lock's shared holders (`kind`), by lock id.
    pub(super) fn held_by_id(
        &mut self,
        key: &Key,
        kind: LeaseKind,
    ) -> Option<&mut HashMap<String, Entry>> {
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
    pub(super) fn has_live_readers(&mut self, key: &str, now_ms: i64) -> bool {
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
    pub(super) fn take_permit(
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
    pub(super) fn ticketed<'a>(
        &mut self,
        line: Line<'a>,
        stands: impl FnOnce(&Self) -> bool,
    ) -> Line<'a> {
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
    pub(super) fn stands(&self, key: &Key, line: Line<'_>) -> bool {
        line.place().is_some_and(|place| {
            self.lines
                .get(key.as_str())
                .is_some_and(|places| places.has(place))
        })
    }

    /// Decides an acquisition of `key`'s lock, exclusive or `shared`, by its line
    /// ([`Places::admit`]): the lock has a slot free unless a live lock holds it (or, for an
    /// exclusive one, a live reader). A line is kept once made, empty or not (see `lines`).
    fn admit_to_lock(
        &mut self,
        key: &Key,
        request: &Request<'_>,
        shared: bool,
        now_ms: i64,
    ) -> Admission {
        let line = self.ticketed(request.line, |state| state.stands(key, request.line));
        let free = match shared {
            true => usize::from(self.live_entry(key.as_str(), now_ms).is_none()),
            false => self.free_lock_slots(key, now_ms),
        };
        let Some(places) = self.lines.get_mut(key.as_str()) else {
            // No one in line: nothing to decide unless this waiter must take a place.
            if free > 0 || line.place().is_none() {
                return Admission {
                    granted: free > 0,
                    changed: false,
                    position: None,
                };
            }
            let mut places = Places::default();
            let admission = places.admit(line, free, shared, now_ms, request.holder);
            self.lines.insert(key.to_string(), places);
            return admission;
        };
        places.admit(line, free, shared, now_ms, request.holder)
    }

    /// The free slots of `key`'s lock at `now_ms`: 1 unless a live lock or a live shared holder
    /// holds it, whatever its line.
    pub(super) fn free_lock_slots(&mut self, key: &Key, now_ms: i64) -> usize {
        usize::from(
            self.live_entry(key.as_str(), now_ms).is_none()
                && !self.has_live_readers(key.as_str(), now_ms),
        )
    }

    /// Takes `key`'s lock, found free.
    pub(super) fn grant_lock(
        &mut self,
        key: &Key,
        lock_id: String,
        ttl: Ttl,
        holder: Option<&Holder>,
        now_ms: i64,
    ) -> Result<Acquisitions> {
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
        Ok(Acquisitions::granted(lock_id, fence, expires_at_ms, None))
    }

    /// The line of `key`'s lock or semaphore, if anyone is in it.
    pub(super) fn line_mut(&mut self, key: &Key, kind: LeaseKind) -> Option<&mut Places> {
        match kind {
            LeaseKind::Lock | LeaseKind::Shared => self.lines.get_mut(key.as_str()),
            LeaseKind::Permit => self
                .semaphores
                .get_mut(key.as_str())
                .map(|semaphore| &mut semaphore.line),
        }
    }

    pub(super) fn sweep_expired(&mut self, now_ms: i64) {
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

    /// The lock on `key` for `request`, exclusive or a shared hold of it.
    pub(super) fn acquire_lock(
        &mut self,
        key: &Key,
        lock_id: String,
        request: &Request<'_>,
        now_ms: i64,
    ) -> Result<Acquisitions> {
        let shared = request.mode == Mode::Shared;
        let admission = self.admit_to_lock(key, request, shared, now_ms);
        if !admission.granted {
            return Ok(Acquisitions::locked_at(admission.position));
        }
        match shared {
            true => self.grant_reader(key, lock_id, request, now_ms),
            false => self.grant_lock(key, lock_id, request.ttl, request.holder, now_ms),
        }
    }

    /// Every key of `request` decided and taken at once: all or none at one instant, the lines
    /// decided by [`admit_all`].
    pub(super) fn acquire_all(
        &mut self,
        request: &Request<'_>,
        lock_ids: Vec<String>,
        now_ms: i64,
    ) -> Result<Acquisitions> {
        let keys = request.keys();
        let line = self.ticketed(request.line, |state| {
            keys.iter().any(|key| state.stands(key, request.line))
        });
        let free: Vec<usize> = keys
            .iter()
            .map(|key| self.free_lock_slots(key, now_ms))
            .collect();
        // The lines are taken out of the map for the decision, and put back (kept with their
        // last ticket) unless they never held a place.
        let mut lines: Vec<Places> = keys
            .iter()
            .map(|key| self.lines.remove(key.as_str()).unwrap_or_default())
            .collect();
        let mut deciding: Vec<&mut Places> = lines.iter_mut().collect();
        let admission = admit_all(&mut deciding, &free, line, now_ms, request.holder);
        for (key, places) in keys.iter().zip(lines) {
            if places.last_ticket > 0 {
                self.lines.insert(key.to_string(), places);
            }
        }
        if !admission.granted {
            return Ok(Acquisitions::Locked {
                ticket: admission.ticket,
                position: admission.position,
            });
        }
        // A fence counter at its end refuses its key: checked for every key before any is
        // taken, so that the refusal leaves none held.
        for key in keys {
            let counter = self.fences.get(key.as_str()).copied().unwrap_or(0) + 1;
            Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        }
        let mut leases = Vec::with_capacity(keys.len());
        for (key, lock_id) in keys.iter().zip(lock_ids) {
            if let Acquisitions::Acquired(granted) =
                self.grant_lock(key, lock_id, request.ttl, request.holder, now_ms)?
            {
                leases.extend(granted);
            }
        }
        Ok(Acquisitions::Acquired(leases))
    }

    /// One of the `permits` permits of `key`'s semaphore for `request`.
    pub(super) fn acquire_permit(
        &mut self,
        key: &Key,
        permits: Permits,
        lock_id: String,
        request: &Request<'_>,
        now_ms: i64,
    ) -> Result<Acquisitions> {
        let line = self.ticketed(request.line, |state| {
            request.line.place().is_some_and(|place| {
                state
                    .semaphores
                    .get(key.as_str())
                    .is_some_and(|semaphore| semaphore.line.has(place))
            })
        });
        let semaphore = self.semaphores.entry(key.to_string()).or_default();
        // Reclaim what has expired: only live permits count.
        semaphore
            .held
            .retain(|_, entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS));
        let free = (permits.get() as usize).saturating_sub(semaphore.held.len());
        let admission = semaphore
            .line
            .admit(line, free, false, now_ms, request.holder);
        if !admission.granted {
            return Ok(Acquisitions::locked_at(admission.position));
        }
        let counter = semaphore.fence + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        semaphore.fence = counter;
        let entry = Entry::granted(&lock_id, now_ms, request.ttl, fence, request.holder);
        let expires_at_ms = entry.expires_at_ms;
        semaphore.held.insert(lock_id.clone(), entry);
        Ok(Acquisitions::granted(lock_id, fence, expires_at_ms, None))
    }

    /// Takes a shared hold of `key`'s lock, found free for it: a lease of its own, with the
    /// lock's next fence.
    fn grant_reader(
        &mut self,
        key: &Key,
        lock_id: String,
        request: &Request<'_>,
        now_ms: i64,
    ) -> Result<Acquisitions> {
        let counter = self.fences.get(key.as_str()).copied().unwrap_or(0) + 1;
        let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
        self.fences.insert(key.to_string(), counter);
        let entry = Entry::granted(&lock_id, now_ms, request.ttl, fence, request.holder);
        let expires_at_ms = entry.expires_at_ms;
        self.readers
            .entry(key.to_string())
            .or_default()
            .insert(lock_id.clone(), entry);
        Ok(Acquisitions::granted(lock_id, fence, expires_at_ms, None))
    }

    /// The live permits of `key`'s semaphore or the live shared holders of its lock (`kind`),
    /// in fence order.
    pub(super) fn holders(&self, key: &Key, kind: LeaseKind, now_ms: i64) -> Vec<LockRecord> {
        let held = match kind {
            LeaseKind::Permit => self.semaphores.get(key.as_str()).map(|s| &s.held),
            LeaseKind::Shared => self.readers.get(key.as_str()),
            LeaseKind::Lock => None,
        };
        let mut found: Vec<LockRecord> = held
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
            .map(|entry| entry.record(key.as_str()))
            .collect();
        found.sort_by_key(|record| record.fence);
        found
    }

    /// Every key's permits or shared holders (`kind`), live or not, by key.
    pub(super) fn every_holder(&self, kind: LeaseKind) -> Vec<(&str, &HashMap<String, Entry>)> {
        match kind {
            LeaseKind::Permit => (self.semaphores.iter())
                .map(|(key, semaphore)| (key.as_str(), &semaphore.held))
                .collect(),
            LeaseKind::Shared => (self.readers.iter())
                .map(|(key, readers)| (key.as_str(), readers))
                .collect(),
            LeaseKind::Lock => Vec::new(),
        }
    }
}
