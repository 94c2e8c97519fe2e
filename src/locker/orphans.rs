//! Locks that may sit in the store with nobody holding them, released in the background.
//!
//! Three ways to get one: an acquisition whose request was sent but whose answer never came
//! back ([`LockError::is_in_doubt`](crate::LockError::is_in_doubt)) — the store may apply it
//! late, after a stall, and then hold the key for a whole TTL for nobody; a lease that ran out
//! before a renewal was confirmed — a renewal may still have been applied, and the program has
//! been told the lock is lost; and a guard's release that failed, which would otherwise leave
//! the lock until its expiry (inside a `min_hold`, the extension to the hold's end that failed:
//! released once the hold has ended, as the release then would have). Each is released by its lock id on one thread
//! per [`Locker`](crate::Locker), started when there is something to release and ending when
//! there is nothing left, with a growing pause between attempts.
//!
//! When to stop: a lapsed lease or a failed release, at the first answer the store gives
//! (removed, or already gone; a late renewal never revives a removed lock), or once its TTL
//! has passed. An acquisition in doubt, only when a release removes it: "not found" may mean the
//! request is still on its way, so releasing goes on until a TTL has passed since the store
//! last failed to answer (a request cannot be pending longer without the store being
//! unreachable) — and never longer than [`GIVE_UP_AFTER`].

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::driver::{LeaseKind, LeaseRef, Outcome};
use crate::hash::hash_key;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::locker::store::{Origin, Store, Unheld};

/// Name of the thread that releases orphaned locks (one per `Locker`, while there are any).
pub(crate) const THREAD_NAME: &str = "syncguard-orph";

/// The longest the background release of one lock goes on.
pub(crate) const GIVE_UP_AFTER: Duration = Duration::from_secs(3600);
/// Most locks waiting to be released; more are left to expire (and logged).
const MAX_PENDING: usize = 10_000;
const FIRST_GAP: Duration = Duration::from_millis(100);
const MAX_GAP: Duration = Duration::from_secs(5);

struct Orphan {
    key: Key,
    lock_id: LockId,
    kind: LeaseKind,
    origin: Origin,
    ttl: Duration,
    /// Never tried after this.
    hard_stop: Instant,
    /// Not tried after this unless the store failed to answer since.
    give_up_at: Instant,
    next_at: Instant,
    gap: Duration,
}

#[derive(Default)]
struct Pending {
    orphans: Vec<Orphan>,
    running: bool,
}

/// The locks one `Locker` releases in the background.
#[derive(Default)]
pub(crate) struct Orphans {
    pending: Mutex<Pending>,
    changed: Condvar,
}

impl Orphans {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases `unheld` in the background, from its `not_before` on (or now), again and
    /// again until the rules of the [module docs](self) say stop.
    pub(crate) fn adopt(self: &Arc<Self>, unheld: Unheld, store: Arc<dyn Store>) {
        let Unheld {
            key,
            lock_id,
            kind,
            ttl,
            origin,
            not_before,
        } = unheld;
        // The store just failed (or was slow) to answer: not again at once.
        let first = (Instant::now() + FIRST_GAP).max(not_before.unwrap_or(Instant::now()));
        let mut pending = self.pending();
        if pending.orphans.len() >= MAX_PENDING {
            log::warn!(
                "syncguard: too many locks waiting to be released; the lock on key hash {} \
                 is left to expire",
                hash_key(key.as_str())
            );
            return;
        }
        pending.orphans.push(Orphan {
            key,
            lock_id,
            kind,
            origin,
            ttl,
            hard_stop: first + GIVE_UP_AFTER,
            give_up_at: first + ttl,
            next_at: first,
            gap: FIRST_GAP,
        });
        if pending.running {
            drop(pending);
            self.changed.notify_one();
            return;
        }
        let orphans = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || orphans.run(store.as_ref()));
        match started {
            Ok(_) => pending.running = true,
            Err(error) => {
                pending.orphans.clear();
                log::error!(
                    "syncguard: could not start the thread that releases orphaned locks: {error}"
                );
            }
        }
    }

    fn run(&self, store: &dyn Store) {
        loop {
            let due = {
                let mut pending = self.pending();
                loop {
                    let now = Instant::now();
                    let Some(first) = pending.orphans.iter().map(|o| o.next_at).min() else {
                        pending.running = false;
                        return;
                    };
                    if first <= now {
                        break;
                    }
                    pending = self
                        .changed
                        .wait_timeout(pending, first - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                let now = Instant::now();
                let (due, later) = std::mem::take(&mut pending.orphans)
                    .into_iter()
                    .partition(|o| o.next_at <= now);
                pending.orphans = later;
                due
            };
            let mut again: Vec<Orphan> = due
                .into_iter()
                .filter_map(|orphan| release(store, orphan))
                .collect();
            self.pending().orphans.append(&mut again);
        }
    }
}

/// One attempt; the orphan back when another is due.
fn release(store: &dyn Store, mut orphan: Orphan) -> Option<Orphan> {
    let lease = LeaseRef::new(&orphan.lock_id)
        .with_key(&orphan.key)
        .with_kind(orphan.kind);
    let now = Instant::now();
    match store.driver().release_lease(lease) {
        Ok(Outcome::Applied(())) => {
            log::info!(
                "syncguard: released the lock on key {} {}",
                orphan.key,
                match orphan.origin {
                    Origin::InDoubt => "that an acquisition without an answer had taken",
                    Origin::Lapsed => "whose lease had run out unconfirmed",
                    Origin::FailedRelease => "whose release had failed",
                }
            );
            store.released(&orphan.key);
            return None;
        }
        Ok(_) if orphan.origin != Origin::InDoubt || now >= orphan.give_up_at => return None,
        Ok(_) => {}
        Err(error) => {
            if orphan.origin == Origin::InDoubt {
                // While the store does not answer, the acquisition may still be on its way.
                orphan.give_up_at = orphan.give_up_at.max(now + orphan.ttl);
            }
            log::debug!("syncguard: releasing an orphaned lock failed, will retry: {error}");
        }
    }
    if now >= orphan.hard_stop || (orphan.origin != Origin::InDoubt && now >= orphan.give_up_at) {
        log::warn!(
            "syncguard: stopped releasing the lock on key {} in the background; it is left \
             until it expires",
            orphan.key
        );
        return None;
    }
    orphan.next_at = now + orphan.gap;
    orphan.gap = (orphan.gap * 2).min(MAX_GAP);
    Some(orphan)
}
