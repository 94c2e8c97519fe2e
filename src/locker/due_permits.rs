//! The heartbeat's permits that wait in its queue for a renewal, by semaphore.
//!
//! When one permit of a semaphore falls due, the heartbeat renews the semaphore's other
//! permits with it (one request, one write of a semaphore's record where a store keeps one).
//! Finding them by scanning the whole queue costs every lease the `Locker` holds (twice: a
//! renewal and a deadline entry each) whenever a permit falls due; where renewals come back
//! spread out (a store over the network), that is many times a second, and with thousands of
//! permits it was most of the scheduler thread's work. This index finds them at the cost of
//! the semaphore's own permits.
//!
//! It is kept in step with the queue: a permit is here, with the generation of its queued
//! renewal, exactly while that renewal is queued and current. Renewals in flight, and finished
//! leases once swept, are not.

use std::collections::HashMap;
use std::sync::Arc;

use crate::key::Key;
use crate::locker::lease::HeldLease;

#[derive(Default)]
pub(crate) struct DuePermits {
    /// Per semaphore, its permits by the address of their shared lease (unique while the
    /// index holds that `Arc`).
    by_semaphore: HashMap<Key, HashMap<usize, Queued>>,
}

/// A permit whose renewal is queued, and that renewal's generation.
struct Queued {
    lease: Arc<HeldLease>,
    generation: u64,
}

fn address(lease: &HeldLease) -> usize {
    std::ptr::from_ref(lease).addr()
}

impl DuePermits {
    /// The renewal of `permit` with `generation` was queued; it replaces any queued before.
    pub(crate) fn queued(&mut self, permit: &Arc<HeldLease>, generation: u64) {
        let queued = Queued {
            lease: Arc::clone(permit),
            generation,
        };
        match self.by_semaphore.get_mut(permit.key()) {
            Some(permits) => {
                permits.insert(address(permit), queued);
            }
            None => {
                let permits = HashMap::from([(address(permit), queued)]);
                self.by_semaphore.insert(permit.key().clone(), permits);
            }
        }
    }

    /// The renewal of `permit` with `generation` left the queue: due, or stale. A later one
    /// queued since stays.
    pub(crate) fn dequeued(&mut self, permit: &HeldLease, generation: u64) {
        let semaphore = permit.key();
        let Some(permits) = self.by_semaphore.get_mut(semaphore) else {
            return;
        };
        let at = address(permit);
        if permits
            .get(&at)
            .is_some_and(|queued| queued.generation == generation)
        {
            permits.remove(&at);
        }
        if permits.is_empty() {
            self.by_semaphore.remove(semaphore);
        }
    }

    /// Takes out of the queue every permit of `semaphore` waiting there, for renewal now:
    /// their queued renewals are stale from here on (each gets a new generation), and the
    /// renewal they are given reschedules them.
    pub(crate) fn take_semaphore(&mut self, semaphore: &Key, renewals: &mut Vec<Arc<HeldLease>>) {
        let Some(permits) = self.by_semaphore.remove(semaphore) else {
            return;
        };
        for Queued { lease, generation } in permits.into_values() {
            if lease.generation() == generation && !lease.is_finished() {
                lease.next_generation();
                renewals.push(lease);
            }
        }
    }

    /// Drops the permits of finished leases, with the queue's own sweep of them.
    pub(crate) fn sweep(&mut self) {
        self.by_semaphore.retain(|_, permits| {
            permits.retain(|_, queued| !queued.lease.is_finished());
            !permits.is_empty()
        });
    }

    /// Every permit here of a lease not finished, with the generation of its queued renewal.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(usize, u64)> {
        let mut entries: Vec<(usize, u64)> = self
            .by_semaphore
            .values()
            .flat_map(|permits| permits.iter())
            .filter(|(_, queued)| !queued.lease.is_finished())
            .map(|(&at, queued)| (at, queued.generation))
            .collect();
        entries.sort_unstable();
        entries
    }

    /// How many semaphores have a permit here.
    #[cfg(test)]
    pub(crate) fn semaphores(&self) -> usize {
        self.by_semaphore.len()
    }
}

#[cfg(test)]
pub(crate) fn address_of(lease: &HeldLease) -> usize {
    address(lease)
}
