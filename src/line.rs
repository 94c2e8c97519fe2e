//! The line: a key's waiters in arrival order (DESIGN §12).
//!
//! A waiter that finds a key held takes a *place*: a ticket from the store (the store's order
//! of arrival) held as a short lease of its own, judged by the store's clock like every lease.
//! A grant goes to the first live places only; every expired place is pruned; a waiter that
//! gives up leaves at once, one that dies leaves when its place expires. A single attempt takes
//! no place and does not pass a live line.
//!
//! One rule decides every grant, for a lock (one slot) and a semaphore (one slot per permit)
//! alike: an acquisition is granted when more slots are free than live places are *ahead* of it
//! — every live place for a newcomer or a single attempt, the places with a smaller ticket for a
//! waiter already in line. So the first in line takes the next free slot, and a semaphore with
//! two free permits admits the first two. A shared hold of a lock (a reader) is granted when no
//! exclusive holder is live and no exclusive place is ahead of it: readers at the head of the
//! line are granted together, and readers that come after a waiting writer wait behind it.
//!
//! [`Line`] is what an acquisition asks of the store; [`PlaceRecord`] is a stored place; and
//! [`Places`] is that rule written once for the stores that decide in the client (the in-memory
//! store, Firestore inside a transaction). Redis and PostgreSQL decide the same rule in their
//! script and statement.

use std::fmt;
use std::time::Duration;

use crate::hash::hash_key;
use crate::holder::Holder;
use crate::lock_id::LockId;
use crate::time::{TIME_TOLERANCE_MS, Ttl, is_live};

/// How long a place lives unless its waiter renews it: 5 s.
///
/// Short, because a waiter that dies keeps everyone behind it waiting until then (plus the
/// [`TIME_TOLERANCE_MS`] every lease is judged with): a dead waiter delays the line by about
/// 6 s. Long enough that a waiter renews it several times over (a waiter in line tries at least every 1.7 s) through a
/// slow round trip or a lost one, without a thread of its own: it renews its place with each
/// attempt, which it makes anyway.
pub const PLACE_TTL: Ttl = Ttl::from_checked_millis(5_000);

/// The longest a waiter in line sleeps between attempts (each attempt renews its place): a
/// third of [`PLACE_TTL`], so two attempts in a row may fail before the place lapses.
pub(crate) const PLACE_RENEWAL: Duration = Duration::from_millis(RENEWAL_MS as u64);

/// [`PLACE_RENEWAL`] in milliseconds.
const RENEWAL_MS: i64 = 5_000 / 3;

/// A place with more than this many milliseconds left was renewed within the last
/// [`PLACE_RENEWAL`]: an attempt leaves it as it is (unless its holder text changed). So a
/// waiter writes its place about once per `PLACE_RENEWAL`, not at every wake-up: a store that
/// writes one document for the whole line (Firestore) would see the waiters' writes collide,
/// and one that logs every write (PostgreSQL) would flush one per attempt. The next attempt,
/// at most `PLACE_RENEWAL` later, renews it long before it lapses.
pub(crate) const PLACE_FRESH_MS: i64 = 5_000 - RENEWAL_MS;

/// What an acquisition asks of the key's line ([`Driver::try_acquire`](crate::driver::Driver::try_acquire)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// Pay no heed to the line: granted whenever a slot is free, takes no place. The behaviour
    /// of a `Locker` with [`LockOptions::wait_in_line`](crate::LockOptions::wait_in_line)`(false)`,
    /// and of the TypeScript SyncGuard.
    Ignore,
    /// A single attempt: granted only when more slots are free than live places wait; takes no
    /// place.
    Keep,
    /// An attempt of a waiter whose place (taken or to take) is named by this id. Granted when
    /// more slots are free than live places are ahead of it (its place then leaves the line in
    /// the same atomic step); otherwise its place is taken at the back of the line with the
    /// store's next ticket, or, when it is in line already, kept where it is and renewed for
    /// [`PLACE_TTL`]. Every expired place is pruned. The same id twice is one place, so a
    /// repeated request takes no second one.
    Wait(&'a LockId),
}

impl Line<'_> {
    /// The waiter's place id, for [`Line::Wait`].
    pub fn place(&self) -> Option<&LockId> {
        match self {
            Line::Wait(place) => Some(place),
            Line::Ignore | Line::Keep => None,
        }
    }

    /// The same heed of the line without a place: [`Line::Wait`] becomes [`Line::Keep`] (as a
    /// single attempt heeds it), the others stay. What several keys taken together ask of each
    /// key's line ([`Driver::try_acquire_all`](crate::driver::Driver::try_acquire_all)).
    pub fn without_place(self) -> Line<'static> {
        match self {
            Line::Ignore => Line::Ignore,
            Line::Keep | Line::Wait(_) => Line::Keep,
        }
    }
}

/// A place in a key's line, raw: what [`Driver::find_line`](crate::driver::Driver::find_line)
/// returns, in line order.
#[derive(Clone, PartialEq, Eq)]
pub struct PlaceRecord {
    /// The waiter's place id (secret as a lock id is: whoever has it can leave the place).
    pub place_id: String,
    /// The store's ticket: places are served in ticket order.
    pub ticket: u64,
    /// When the place lapses unless renewed, Unix ms of the store's time authority.
    pub expires_at_ms: i64,
    /// Who waits, as described by its acquisition's [`holder`](crate::LockOptions::holder).
    pub holder: Option<String>,
    /// Whether it waits for a shared hold (a reader); else for the lock itself or a permit.
    pub shared: bool,
}

impl fmt::Debug for PlaceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlaceRecord")
            .field("place_hash", &hash_key(&self.place_id))
            .field("ticket", &self.ticket)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("holder", &self.holder)
            .field("shared", &self.shared)
            .finish()
    }
}

impl PlaceRecord {
    fn is_live(&self, now_ms: i64) -> bool {
        is_live(self.expires_at_ms, now_ms, TIME_TOLERANCE_MS)
    }
}

/// A key's line as a store that decides in the client keeps it: its places in ticket order and
/// the last ticket issued (which never shrinks, so a new place always goes to the back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Places {
    /// The last ticket issued.
    pub last_ticket: u64,
    /// The places, in ticket order (expired ones included until pruned).
    pub places: Vec<PlaceRecord>,
}

/// What [`Places::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Admission {
    /// Whether the acquisition may take a slot.
    pub granted: bool,
    /// Whether the line changed (a place pruned, taken, renewed or left): a store writes it
    /// back only then, so an acquisition with an empty line writes nothing more.
    pub changed: bool,
}

impl Places {
    /// Decides an acquisition when `free` slots are free at `now_ms` (a lock: 1 or 0, 0 also
    /// while shared holders are live; a semaphore: its permits less the live ones; a shared
    /// hold, `shared`: 1 unless an exclusive lock is live), as [`Line`] describes, and updates
    /// the line: prunes every expired place, and for [`Line::Wait`] removes the waiter's place
    /// when granted, or takes or renews it for [`PLACE_TTL`] (with `holder`) when not.
    pub fn admit(
        &mut self,
        line: Line<'_>,
        free: usize,
        shared: bool,
        now_ms: i64,
        holder: Option<&Holder>,
    ) -> Admission {
        let before = self.places.len();
        self.places.retain(|place| place.is_live(now_ms));
        let mut changed = self.places.len() != before;
        let place = match line {
            Line::Ignore => {
                return Admission {
                    granted: free > 0,
                    changed,
                };
            }
            Line::Keep => {
                return Admission {
                    granted: passes(&self.places, free, shared),
                    changed,
                };
            }
            Line::Wait(place) => place.as_str(),
        };
        let mine = self.places.iter().position(|p| p.place_id == place);
        let ahead = &self.places[..mine.unwrap_or(self.places.len())];
        if passes(ahead, free, shared) {
            if let Some(mine) = mine {
                self.places.remove(mine);
                changed = true;
            }
            return Admission {
                granted: true,
                changed,
            };
        }
        let expires_at_ms = now_ms.saturating_add(PLACE_TTL.as_millis());
        let holder = holder.map(Holder::to_string);
        match mine {
            Some(mine) => {
                let kept = &mut self.places[mine];
                let fresh = kept.expires_at_ms - now_ms > PLACE_FRESH_MS && kept.holder == holder;
                if fresh {
                    return Admission {
                        granted: false,
                        changed,
                    };
                }
                kept.expires_at_ms = expires_at_ms;
                kept.holder = holder;
            }
            None => {
                self.last_ticket += 1;
                self.places.push(PlaceRecord {
                    place_id: place.to_owned(),
                    ticket: self.last_ticket,
                    expires_at_ms,
                    holder,
                    shared,
                });
            }
        }
        Admission {
            granted: false,
            changed: true,
        }
    }

    /// Removes the place `place` (a waiter that gave up); whether it was there.
    pub fn leave(&mut self, place: &LockId) -> bool {
        let before = self.places.len();
        self.places.retain(|p| p.place_id != place.as_str());
        self.places.len() != before
    }

    /// The live places at `now_ms`, in line order.
    pub fn live(&self, now_ms: i64) -> Vec<PlaceRecord> {
        self.places
            .iter()
            .filter(|place| place.is_live(now_ms))
            .cloned()
            .collect()
    }

    /// Whether no place is stored (live or not): the store may drop the line.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }
}

/// Whether an acquisition with `free` slots may pass the live places `ahead` of it: a shared
/// hold when none of them waits for the lock itself, anything else when there are fewer of
/// them than free slots.
fn passes(ahead: &[PlaceRecord], free: usize, shared: bool) -> bool {
    if shared {
        free > 0 && ahead.iter().all(|place| place.shared)
    } else {
        free > ahead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> LockId {
        LockId::generate()
    }

    #[test]
    fn an_empty_line_changes_nothing_and_grants_a_free_slot() {
        let mut line = Places::default();
        let place = id();
        for ask in [Line::Ignore, Line::Keep, Line::Wait(&place)] {
            let admission = line.admit(ask, 1, false, 0, None);
            assert_eq!((admission.granted, admission.changed), (true, false));
        }
        assert!(line.is_empty());
    }

    #[test]
    fn places_are_served_in_ticket_order() {
        let mut line = Places::default();
        let (a, b) = (id(), id());
        assert!(!line.admit(Line::Wait(&a), 0, false, 0, None).granted);
        assert!(!line.admit(Line::Wait(&b), 0, false, 0, None).granted);
        assert!(
            !line.admit(Line::Keep, 1, false, 10, None).granted,
            "a single attempt"
        );
        assert!(
            !line.admit(Line::Wait(&b), 1, false, 10, None).granted,
            "b is second"
        );
        assert!(
            line.admit(Line::Ignore, 1, false, 10, None).granted,
            "barging"
        );
        assert!(line.admit(Line::Wait(&a), 1, false, 10, None).granted);
        assert!(line.admit(Line::Wait(&b), 1, false, 10, None).granted);
        assert!(line.is_empty());
        assert_eq!(line.last_ticket, 2);
    }

    #[test]
    fn free_permits_go_to_the_first_places() {
        let mut line = Places::default();
        let ids: Vec<LockId> = (0..3).map(|_| id()).collect();
        for place in &ids {
            assert!(!line.admit(Line::Wait(place), 0, false, 0, None).granted);
        }
        assert!(!line.admit(Line::Wait(&ids[2]), 2, false, 1, None).granted);
        assert!(line.admit(Line::Wait(&ids[1]), 2, false, 1, None).granted);
        assert!(
            !line.admit(Line::Wait(&ids[2]), 1, false, 1, None).granted,
            "a is ahead"
        );
        assert!(line.admit(Line::Wait(&ids[0]), 1, false, 1, None).granted);
        assert!(line.admit(Line::Wait(&ids[2]), 1, false, 1, None).granted);
    }

    #[test]
    fn a_repeated_place_is_one_place_and_keeps_its_ticket() {
        let mut line = Places::default();
        let (a, b) = (id(), id());
        let _ = line.admit(Line::Wait(&a), 0, false, 0, None);
        let _ = line.admit(Line::Wait(&b), 0, false, 0, None);
        let holder = Holder::new("again").unwrap();
        let _ = line.admit(Line::Wait(&a), 0, false, 100, Some(&holder));
        assert_eq!(
            line.places[0].expires_at_ms,
            100 + PLACE_TTL.as_millis(),
            "a new holder text is written at once"
        );
        let _ = line.admit(Line::Wait(&a), 0, false, 200, Some(&holder));
        assert_eq!(
            line.places[0].expires_at_ms,
            100 + PLACE_TTL.as_millis(),
            "fresh: left as it is"
        );
        let _ = line.admit(
            Line::Wait(&a),
            0,
            false,
            100 + RENEWAL_MS + 1,
            Some(&holder),
        );
        assert_eq!(line.places.len(), 2);
        assert_eq!(line.places[0].place_id, a.as_str());
        assert_eq!(line.places[0].ticket, 1);
        assert_eq!(line.places[0].holder.as_deref(), Some("again"));
        assert_eq!(
            line.places[0].expires_at_ms,
            101 + RENEWAL_MS + PLACE_TTL.as_millis(),
            "renewed once no longer fresh"
        );
    }

    #[test]
    fn readers_at_the_head_pass_together_and_a_waiting_writer_stops_later_ones() {
        let mut line = Places::default();
        let (r1, r2, w, r3) = (id(), id(), id(), id());
        // A writer holds: everyone waits.
        assert!(!line.admit(Line::Wait(&r1), 0, true, 0, None).granted);
        assert!(!line.admit(Line::Wait(&r2), 0, true, 0, None).granted);
        assert!(!line.admit(Line::Wait(&w), 0, false, 0, None).granted);
        assert!(!line.admit(Line::Wait(&r3), 0, true, 0, None).granted);
        // Released: the two readers at the head pass in either order, the later one does not.
        assert!(line.admit(Line::Wait(&r2), 1, true, 1, None).granted);
        assert!(
            !line.admit(Line::Wait(&r3), 1, true, 1, None).granted,
            "behind the writer"
        );
        assert!(
            !line.admit(Line::Keep, 1, true, 1, None).granted,
            "a reader's try"
        );
        assert!(line.admit(Line::Wait(&r1), 1, true, 1, None).granted);
        // Readers hold: the writer has no free slot, and still stops the last reader.
        assert!(!line.admit(Line::Wait(&w), 0, false, 1, None).granted);
        assert!(!line.admit(Line::Wait(&r3), 1, true, 1, None).granted);
        // The readers left.
        assert!(line.admit(Line::Wait(&w), 1, false, 2, None).granted);
        assert!(
            !line.admit(Line::Wait(&r3), 0, true, 2, None).granted,
            "the writer holds"
        );
        assert!(line.admit(Line::Wait(&r3), 1, true, 3, None).granted);
        assert!(line.is_empty());
    }

    #[test]
    fn every_expired_place_is_pruned() {
        let mut line = Places::default();
        let ids: Vec<LockId> = (0..3).map(|_| id()).collect();
        let _ = line.admit(Line::Wait(&ids[0]), 0, false, 0, None);
        let _ = line.admit(Line::Wait(&ids[1]), 0, false, 4_000, None);
        let _ = line.admit(Line::Wait(&ids[2]), 0, false, 0, None);
        let lapse = PLACE_TTL.as_millis() + TIME_TOLERANCE_MS;
        assert_eq!(line.live(lapse).len(), 1);
        let admission = line.admit(Line::Keep, 0, false, lapse, None);
        assert!(admission.changed);
        assert_eq!(line.places.len(), 1);
        assert_eq!(line.places[0].place_id, ids[1].as_str());
        assert!(
            line.admit(Line::Wait(&ids[1]), 1, false, lapse, None)
                .granted
        );
    }

    #[test]
    fn leaving_removes_the_place_only() {
        let mut line = Places::default();
        let (a, b) = (id(), id());
        let _ = line.admit(Line::Wait(&a), 0, false, 0, None);
        let _ = line.admit(Line::Wait(&b), 0, false, 0, None);
        assert!(line.leave(&a));
        assert!(!line.leave(&a));
        assert!(line.admit(Line::Wait(&b), 1, false, 0, None).granted);
    }

    #[test]
    fn debug_hides_the_place_id() {
        let place = id();
        let record = PlaceRecord {
            place_id: place.as_str().to_owned(),
            ticket: 1,
            expires_at_ms: 2,
            holder: None,
            shared: false,
        };
        assert!(!format!("{record:?}").contains(place.as_str()));
    }
}
