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
//! # Several keys
//!
//! A waiter for several keys at once stands in line on each key it found held with one ticket
//! on all of them, so that waiters of sets stand in one order on every line: [`admit_all`]
//! states the rule.
//!
//! [`Line`] is what an acquisition asks of the store; [`PlaceRecord`] is a stored place; and
//! [`Places`] (and [`admit_all`] for several keys) is that rule written once for the stores
//! that decide in the client (the in-memory store, Firestore inside a transaction). Redis and PostgreSQL decide the same rule in their
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
    /// An attempt of a waiter of several keys ([`Request::all`](crate::driver::Request::all)),
    /// or of one of its keys: as [`Wait`](Line::Wait), but its place carries this ticket —
    /// the same on every key of the set — and stands among the places by ticket (then place
    /// id), not at the back. The last ticket of the line grows to it if it is beyond. See
    /// [`admit_all`] for the rule of several keys.
    WaitAt(&'a LockId, u64),
}

impl Line<'_> {
    /// The waiter's place id, for [`Line::Wait`].
    pub fn place(&self) -> Option<&LockId> {
        match self {
            Line::Wait(place) | Line::WaitAt(place, _) => Some(place),
            Line::Ignore | Line::Keep => None,
        }
    }

    /// The ticket a waiter of several keys carries ([`Line::WaitAt`]).
    pub fn ticket(&self) -> Option<u64> {
        match self {
            Line::WaitAt(_, ticket) => Some(*ticket),
            Line::Ignore | Line::Keep | Line::Wait(_) => None,
        }
    }

    /// This waiter with its `ticket`: [`Line::Wait`] becomes [`Line::WaitAt`]; the others
    /// stay.
    pub fn at(self, ticket: u64) -> Self {
        match self {
            Line::Wait(place) | Line::WaitAt(place, _) => Line::WaitAt(place, ticket),
            other => other,
        }
    }
}

/// How a store numbers the tickets of new places ([`Capabilities::tickets`](crate::driver::Capabilities::tickets)).
///
/// Either way every new place goes behind every place of its lines, and a waiter of several
/// keys carries one ticket on all of them ([`admit_all`]). The two differ only in how two
/// waiters of sets that share some keys, but not all, are ordered on a line where both come to
/// stand later than they arrived: by the order of their first refusals anywhere (store-wide),
/// or by the tickets their own lines had reached (per line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TicketOrder {
    /// A new place's ticket is one above the last ticket of its lines (the in-memory store,
    /// Redis, Firestore: a counter per line).
    #[default]
    PerLine,
    /// A new place's ticket comes from one sequence for the whole store, above every ticket
    /// issued before (PostgreSQL's identity column).
    StoreWide,
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
    /// When refused and standing in the line: how many places are ahead of the waiter's own
    /// (0: it is first).
    pub position: Option<u64>,
}

impl Places {
    /// Decides an acquisition when `free` slots are free at `now_ms` (a lock: 1 or 0, 0 also
    /// while shared holders are live; a semaphore: its permits less the live ones; a shared
    /// hold, `shared`: 1 unless an exclusive lock is live), as [`Line`] describes, and updates
    /// the line: prunes every expired place, and for [`Line::Wait`] and [`Line::WaitAt`]
    /// removes the waiter's place when granted, or takes or renews it for [`PLACE_TTL`] (with
    /// `holder`) when not.
    pub fn admit(
        &mut self,
        line: Line<'_>,
        free: usize,
        shared: bool,
        now_ms: i64,
        holder: Option<&Holder>,
    ) -> Admission {
        let mut changed = self.prune(now_ms);
        let granted = self.admits(line, free, shared);
        if let Some(place) = line.place() {
            changed |= if granted {
                self.leave(place)
            } else {
                let ticket = line.ticket().unwrap_or_else(|| self.next_ticket());
                self.stand(place, ticket, shared, now_ms, holder)
            };
        }
        let position = match line.place() {
            Some(place) if !granted => self.ahead_of(place),
            _ => None,
        };
        Admission {
            granted,
            changed,
            position,
        }
    }

    /// Removes every place expired at `now_ms`; whether any was.
    pub fn prune(&mut self, now_ms: i64) -> bool {
        let before = self.places.len();
        self.places.retain(|place| place.is_live(now_ms));
        self.places.len() != before
    }

    /// Whether an acquisition asking `line` may take one of `free` slots, given the places
    /// stored (prune first): changes nothing.
    pub fn admits(&self, line: Line<'_>, free: usize, shared: bool) -> bool {
        // A waiter that stands in line already is judged where it stands, whatever ticket it
        // asks with (a retry whose first answer was lost carries none): its own place is never
        // ahead of it.
        let ahead = match (line, line.place().and_then(|place| self.position(place))) {
            (Line::Ignore, _) => return free > 0,
            (Line::Keep, _) => &self.places[..],
            (_, Some(mine)) => &self.places[..mine],
            (Line::Wait(_), None) => &self.places[..],
            (Line::WaitAt(place, ticket), None) => {
                let behind = self.places.partition_point(|p| {
                    (p.ticket, p.place_id.as_str()) < (ticket, place.as_str())
                });
                &self.places[..behind]
            }
        };
        passes(ahead, free, shared)
    }

    /// The ticket a new place at the back of this line gets.
    pub fn next_ticket(&self) -> u64 {
        self.last_ticket.saturating_add(1)
    }

    /// Whether the waiter `place` stands in this line.
    pub fn has(&self, place: &LockId) -> bool {
        self.position(place).is_some()
    }

    /// The ticket of the waiter `place`, when it stands in this line.
    pub fn ticket_of(&self, place: &LockId) -> Option<u64> {
        self.position(place).map(|mine| self.places[mine].ticket)
    }

    /// Takes the waiter's place with `ticket`, in ticket (then place id) order, or, when it
    /// stands in line already, keeps it where it is and renews it for [`PLACE_TTL`] from
    /// `now_ms` — unless it is fresh (renewed within the last third of [`PLACE_TTL`]) with the
    /// same holder text. Whether the line changed.
    pub fn stand(
        &mut self,
        place: &LockId,
        ticket: u64,
        shared: bool,
        now_ms: i64,
        holder: Option<&Holder>,
    ) -> bool {
        let expires_at_ms = now_ms.saturating_add(PLACE_TTL.as_millis());
        let holder = holder.map(Holder::to_string);
        if let Some(mine) = self.position(place) {
            let kept = &mut self.places[mine];
            if kept.expires_at_ms - now_ms > PLACE_FRESH_MS && kept.holder == holder {
                return false;
            }
            kept.expires_at_ms = expires_at_ms;
            kept.holder = holder;
            return true;
        }
        let at = self
            .places
            .partition_point(|p| (p.ticket, p.place_id.as_str()) < (ticket, place.as_str()));
        self.places.insert(
            at,
            PlaceRecord {
                place_id: place.as_str().to_owned(),
                ticket,
                expires_at_ms,
                holder,
                shared,
            },
        );
        self.last_ticket = self.last_ticket.max(ticket);
        true
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

    /// How many places stand ahead of the waiter `place`, when it stands in this line (prune
    /// first: every place is counted).
    pub fn ahead_of(&self, place: &LockId) -> Option<u64> {
        self.position(place).map(|mine| mine as u64)
    }

    fn position(&self, place: &LockId) -> Option<usize> {
        self.places
            .iter()
            .position(|p| p.place_id == place.as_str())
    }
}

/// What [`admit_all`] decided for several keys.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct SetAdmission {
    /// Whether every key may be taken (then the waiter's places are gone from every line).
    pub granted: bool,
    /// Per line, in the order given: whether it changed (a store writes back only those).
    pub changed: Vec<bool>,
    /// The ticket the waiter's places carry, when it stands in line after this refusal: given
    /// back as [`Line::WaitAt`] in its next attempt.
    pub ticket: Option<u64>,
    /// When refused and standing in line: how many places are ahead of the waiter's own on the
    /// line where it stands furthest back.
    pub position: Option<u64>,
}

/// A waiter for several keys at once ([`Request::all`](crate::driver::Request::all))
/// holds none of them while it waits, and waits in line on the keys it found held — with **one
/// ticket on every key**, so that the waiters of several keys stand in one order on all their
/// lines and no two can each be ahead of the other (which, with a ticket per line, would have
/// them wait for each other forever). The rule, for a waiter with place id *P*:
///
/// 1. Its ticket *T* is the ticket of its places where it stands already (so a request
///    repeated, or retried after its answer was lost, keeps its one ticket), else the one it
///    carries ([`Line::WaitAt`]), else, at its first refusal ([`Line::Wait`]), one above the
///    highest last ticket of the set's lines.
/// 2. On each key, the places ahead of it are the live places ordered before (*T*, *P*) by
///    ticket, then place id — never its own place (every live place for a single attempt,
///    [`Line::Keep`]). A key admits it when it has more free slots than places ahead.
/// 3. When every key admits it, every lock is taken and its place leaves every line.
/// 4. Otherwise nothing is taken, and its place with ticket *T* is taken (or kept and renewed,
///    as for one key) on every key that did not admit it and on every key where it already
///    stands; a line's last ticket grows to *T* when below. The answer carries *T*
///    ([`Acquisitions::Locked`](crate::driver::Acquisitions::Locked)), and the waiter's next
///    attempts ask [`Line::WaitAt`] with it.
///
/// Every expired place is pruned, on every key, as for one key. A waiter's places only grow
/// while it waits, and nobody passes it on a key where it stands: so the waiter with the
/// smallest ticket is granted once the holders of its keys are gone, and every waiter in turn.
/// A waiter of one key keeps taking the ticket after the last one of its line.
///
/// This function is that rule for the stores that decide in the client (the in-memory store,
/// Firestore inside a transaction); Redis and PostgreSQL decide it in their script and statement.
///
/// It decides an acquisition of the locks of several keys at once, all or none:
/// `lines[i]` is the line of the `i`-th key and `free[i]` its free slots (1 or 0) at `now_ms`.
/// Prunes every line; when granted, removes the waiter's place from each; when refused, takes
/// or renews it on each key that did not admit it and on each where it already stands.
pub fn admit_all(
    lines: &mut [&mut Places],
    free: &[usize],
    line: Line<'_>,
    now_ms: i64,
    holder: Option<&Holder>,
) -> SetAdmission {
    let mut changed: Vec<bool> = lines.iter_mut().map(|l| l.prune(now_ms)).collect();
    // One ticket for the whole wait: the one its places carry where it stands already (a
    // request repeated, or retried after its answer was lost, finds them), else the one it
    // carries, else a fresh one.
    let standing = line
        .place()
        .and_then(|place| lines.iter().filter_map(|l| l.ticket_of(place)).min());
    let line = match (line.place(), standing, line.ticket()) {
        (Some(_), Some(ticket), _) => line.at(ticket),
        (Some(_), None, None) => {
            let fresh = lines.iter().map(|l| l.next_ticket()).max().unwrap_or(1);
            line.at(fresh)
        }
        _ => line,
    };
    let admitted: Vec<bool> = lines
        .iter()
        .zip(free)
        .map(|(l, &free)| l.admits(line, free, false))
        .collect();
    let granted = admitted.iter().all(|&a| a);
    let (Some(place), Some(ticket)) = (line.place(), line.ticket()) else {
        return SetAdmission {
            granted,
            changed,
            ticket: None,
            position: None,
        };
    };
    for ((l, changed), admitted) in lines.iter_mut().zip(&mut changed).zip(admitted) {
        *changed |= if granted {
            l.leave(place)
        } else if !admitted || l.has(place) {
            l.stand(place, ticket, false, now_ms, holder)
        } else {
            false
        };
    }
    let position = match granted {
        true => None,
        false => lines.iter().filter_map(|l| l.ahead_of(place)).max(),
    };
    SetAdmission {
        granted,
        changed,
        ticket: (!granted).then_some(ticket),
        position,
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
    fn a_set_retried_after_its_answer_was_lost_keeps_its_one_ticket_and_is_granted() {
        let (mut a, mut b) = (Places::default(), Places::default());
        let (set, single) = (id(), id());
        // The set's first refusal is applied (it stands on both keys with ticket 1) and its
        // answer lost: the retry carries no ticket.
        let first = admit_all(&mut [&mut a, &mut b], &[0, 0], Line::Wait(&set), 0, None);
        assert_eq!(first.ticket, Some(1));
        // A single waiter behind it on a.
        assert!(!a.admit(Line::Wait(&single), 0, false, 1, None).granted);
        let retry = admit_all(&mut [&mut a, &mut b], &[0, 0], Line::Wait(&set), 2, None);
        assert_eq!(retry.ticket, Some(1), "the one ticket, not a new one");
        assert_eq!(a.places.len(), 2, "no second place");
        assert_eq!(b.places.len(), 1);
        assert!(
            !a.admit(Line::Wait(&single), 1, false, 3, None).granted,
            "the set is ahead"
        );
        let granted = admit_all(&mut [&mut a, &mut b], &[1, 1], Line::Wait(&set), 4, None);
        assert!(granted.granted, "its own places are not ahead of it");
        assert!(b.is_empty());
        assert!(a.admit(Line::Wait(&single), 1, false, 5, None).granted);
    }

    #[test]
    fn a_waiter_is_judged_where_it_stands_whatever_ticket_it_carries() {
        let mut line = Places::default();
        let (a, b) = (id(), id());
        let _ = line.admit(Line::Wait(&a), 0, false, 0, None);
        let _ = line.admit(Line::Wait(&b), 0, false, 0, None);
        assert!(
            !line.admit(Line::WaitAt(&b, 0), 1, false, 1, None).granted,
            "a is ahead of b's place"
        );
        assert!(line.admit(Line::WaitAt(&a, 9), 1, false, 1, None).granted);
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
