//! The pace of a waiter in line (DESIGN §5, §12): after a refusal that told it its place, how
//! long it sleeps before its next attempt, and how many releases heard end the sleep sooner.
//! One policy for every store, decided here only.
//!
//! - A waiter that may take the next free slot (the first in line; for a semaphore of N
//!   permits, the first N) polls often, for what no store announces: a lease that just runs
//!   out, and — behind PgBouncer, on Firestore, or when a store's release channel is down — any
//!   release at all. Where releases are announced it polls at [`FIRST_IN_LINE_POLL`], for
//!   expiries only; where they are not, at four times its own attempt's round trip within
//!   [`UNANNOUNCED_POLL_MIN`]..[`UNANNOUNCED_POLL_MAX`], so that it learns of a release within
//!   a few tens of ms on a fast store without keeping a slow one busy.
//! - The rest poll slowly, at [`SLOWEST_POLL`], only to renew their places: a key's line costs
//!   the store one fast poller plus one renewal per waiter per `SLOWEST_POLL`, however many
//!   wait. Where releases are not announced, the next in line learns that it is first at its
//!   next renewal, which costs a handoff only when the one before held for less than that.
//! - A release heard wakes only the waiters it may concern: one that may take the next slot at
//!   once; one `k` places back after `k` releases (each release lets at most one more place
//!   through). A shared waiter (a reader) wakes at every release: the readers at the head of
//!   the line are granted together, whatever their places.

use std::time::Duration;

use crate::driver::Mode;
use crate::line::PLACE_RENEWAL;

/// How often the first in line polls at most where releases are announced (for a lease that
/// runs out, which no store announces): between half this and this.
pub(crate) const FIRST_IN_LINE_POLL: Duration = Duration::from_millis(50);

/// The fastest the first in line polls where releases are not announced: between half this and
/// this.
const UNANNOUNCED_POLL_MIN: Duration = Duration::from_millis(20);

/// The slowest the first in line polls where releases are not announced, however slow its
/// attempts: between half this and this.
const UNANNOUNCED_POLL_MAX: Duration = Duration::from_millis(250);

/// The slowest a waiter in line polls (between half this and this): [`PLACE_RENEWAL`], each
/// attempt renewing its place.
const SLOWEST_POLL: Duration = PLACE_RENEWAL;

/// How many attempt round trips the first in line sleeps between its attempts where releases
/// are not announced: the store spends at most a fifth of its time on that waiter.
const ROUND_TRIPS_PER_POLL: u32 = 4;

/// Where a refused waiter stands, as its last refusal told.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Standing {
    /// Live places ahead of the waiter's own (on the line where it stands furthest back).
    pub position: u64,
    /// What it waits for: a lock, a shared hold, or a permit of N.
    pub mode: Mode,
    /// Whether the store announces releases to this waiter (its `Locker` hears them).
    pub announced: bool,
    /// How long the refused attempt took.
    pub round_trip: Duration,
}

/// What a waiter does until its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    /// The longest it sleeps.
    pub delay: Duration,
    /// The releases heard (of its keys) that end the sleep sooner.
    pub releases: u64,
}

impl Standing {
    /// Places between this waiter and the next free slot: 0 when a slot freed now may be its.
    fn places_to_go(&self) -> u64 {
        let slots = match self.mode {
            Mode::Permit(permits) => u64::from(permits.get()),
            Mode::Exclusive | Mode::Shared => 1,
        };
        self.position.saturating_sub(slots - 1)
    }

    /// The pause after the refusal; `random` is uniform in `[0, 1)` (the jitter).
    pub(crate) fn pause(&self, random: f64) -> Pause {
        let first = match self.announced {
            true => FIRST_IN_LINE_POLL,
            false => self
                .round_trip
                .saturating_mul(ROUND_TRIPS_PER_POLL)
                .clamp(UNANNOUNCED_POLL_MIN, UNANNOUNCED_POLL_MAX),
        };
        let to_go = self.places_to_go();
        let poll = match to_go {
            0 => first,
            _ => SLOWEST_POLL,
        };
        let releases = match self.mode {
            Mode::Shared => 1,
            Mode::Exclusive | Mode::Permit(_) => to_go.max(1),
        };
        Pause {
            delay: poll.mul_f64((1.0 + random.clamp(0.0, 1.0)) / 2.0),
            releases,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(position: u64, mode: Mode, announced: bool, round_trip_ms: u64) -> Standing {
        Standing {
            position,
            mode,
            announced,
            round_trip: Duration::from_millis(round_trip_ms),
        }
    }

    #[test]
    fn the_first_polls_for_expiries_where_releases_are_announced() {
        let pause = standing(0, Mode::Exclusive, true, 1).pause(0.999_999);
        assert!(pause.delay <= FIRST_IN_LINE_POLL);
        assert!(pause.delay > FIRST_IN_LINE_POLL * 99 / 100);
        assert_eq!(pause.releases, 1);
        let pause = standing(0, Mode::Exclusive, true, 1).pause(0.0);
        assert_eq!(pause.delay, FIRST_IN_LINE_POLL / 2);
    }

    #[test]
    fn unannounced_the_first_polls_at_its_round_trips_within_bounds() {
        let fast = standing(0, Mode::Exclusive, false, 1).pause(0.0);
        assert_eq!(fast.delay, UNANNOUNCED_POLL_MIN / 2);
        let slower = standing(0, Mode::Exclusive, false, 10).pause(0.0);
        assert_eq!(slower.delay, Duration::from_millis(20));
        let slow = standing(0, Mode::Exclusive, false, 500).pause(0.0);
        assert_eq!(slow.delay, UNANNOUNCED_POLL_MAX / 2);
    }

    #[test]
    fn the_rest_only_renew_their_places() {
        for announced in [true, false] {
            for position in [1, 2, 7, u64::MAX] {
                let pause = standing(position, Mode::Exclusive, announced, 1);
                assert_eq!(pause.pause(0.0).delay, SLOWEST_POLL / 2);
                assert!(pause.pause(0.999).delay <= SLOWEST_POLL);
            }
        }
        assert!(SLOWEST_POLL <= PLACE_RENEWAL);
    }

    #[test]
    fn a_waiter_k_places_back_wakes_after_k_releases() {
        assert_eq!(standing(0, Mode::Exclusive, true, 1).pause(0.5).releases, 1);
        assert_eq!(standing(1, Mode::Exclusive, true, 1).pause(0.5).releases, 1);
        assert_eq!(standing(5, Mode::Exclusive, true, 1).pause(0.5).releases, 5);
        assert_eq!(standing(5, Mode::Shared, true, 1).pause(0.5).releases, 1);
    }

    #[test]
    fn the_first_n_of_a_semaphore_of_n_may_take_the_next_permit() {
        let permits = Mode::permits(3).unwrap();
        let first = standing(0, Mode::Exclusive, false, 1).pause(0.0);
        for position in 0..3 {
            assert_eq!(standing(position, permits, false, 1).pause(0.0), first);
        }
        let fourth = standing(3, permits, false, 1).pause(0.0);
        assert_eq!(fourth.delay, SLOWEST_POLL / 2);
        assert_eq!(fourth.releases, 1);
        assert_eq!(standing(5, permits, false, 1).pause(0.0).releases, 3);
    }
}
