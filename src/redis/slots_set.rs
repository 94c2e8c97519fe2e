//! A set of keys over several Redis Cluster hash slots, waiting in line
//! ([`Driver::try_acquire`](crate::driver::Driver::try_acquire) of a set with [`Line::Wait`] or
//! [`Line::WaitAt`]): no script may touch
//! two slots, so the set cannot be decided in one step as on one server (`multi.rs`). It
//! follows the several keys rule ([`admit_all`](crate::driver::admit_all)) key by key instead:
//!
//! 1. At a waiter's first attempt (no ticket yet, or a retry whose answer was lost) the keys
//!    are taken one by one as a single attempt takes them ([`Line::Keep`]: one script per key,
//!    the only cost when nobody contends). A waiter that stands anywhere is refused by its own
//!    place there, and goes on.
//! 2. Its one ticket: that of its places where it stands already (read by a first pass), else
//!    the one it carries, else one above the highest last ticket of the set's lines.
//! 3. A pass over every key in the set's order (`scripts/line_judge.lua`) decides each key's
//!    admission with that ticket and stands (or renews its place) on every key that refuses it
//!    and every key where it stands already, taking nothing — so a set never loses its place on
//!    a key by stopping at an earlier refusal, or by taking a key and giving it back.
//! 4. Only when every key admitted it are the keys taken, one by one with the ticket; a key
//!    that refuses in between (taken meanwhile) gives back what was taken, and the set stands
//!    again on the keys where it stood.
//!
//! Not atomic: another caller may see some keys taken for a moment, as with any set taken key
//! by key, and the places are written one key at a time.

use super::acquire_args;
use super::driver::RedisBackend;
use super::scripts::SCRIPTS;
use crate::driver::{self, Acquisitions, Holder, Key, LeaseKind, Line, Request, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

/// What the line script does on a key besides judging it.
#[derive(Clone, Copy)]
enum Step {
    /// Stands (or renews the place) where the key refuses or the waiter stands already.
    Judge,
    /// Stands (or renews the place) whatever the key says: the set stood there before it took
    /// the key and gave it back.
    Stand,
}

/// One key's answer to the line script.
struct Judged {
    /// Whether the key admits the waiter (free, and no live place ahead of it).
    admitted: bool,
    /// The ticket of the waiter's live place on the key before the call, if it stood there.
    standing: Option<u64>,
    /// The ticket a new place at the back of the key's line would get.
    next_ticket: u64,
    /// How many places stand ahead of the waiter's own after the call, when it stands there.
    position: Option<u64>,
}

impl RedisBackend {
    /// The set of `request`, whose locks lie in several Cluster slots, acquired by the several
    /// keys rule as the module docs tell. A line without a place (a single attempt) takes the
    /// keys one by one ([`driver::acquire_one_by_one`]). A refusal's position is the most
    /// places ahead of the set's own on the keys' lines, as the last pass left them.
    pub(super) fn acquire_over_slots(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let (keys, line) = (request.keys(), request.line);
        if line.place().is_none() {
            return driver::acquire_one_by_one(self, request);
        }
        if line.ticket().is_none() {
            let first = driver::acquire_one_by_one(self, &request.line(Line::Keep))?;
            if let Acquisitions::Acquired(_) = first {
                return Ok(first);
            }
        }
        let ticket = match line.ticket() {
            Some(ticket) => ticket,
            None => {
                let seen = keys
                    .iter()
                    .map(|key| self.judge(key, Step::Judge, request))
                    .collect::<Result<Vec<_>>>()?;
                let standing = seen.iter().filter_map(|judged| judged.standing).min();
                let fresh = seen.iter().map(|judged| judged.next_ticket).max();
                standing.or(fresh).unwrap_or(1)
            }
        };
        let waiting = line.at(ticket);
        let asked = request.line(waiting);
        let judged = keys
            .iter()
            .map(|key| self.judge(key, Step::Judge, &asked))
            .collect::<Result<Vec<_>>>()?;
        let refused = |position: Option<u64>| Acquisitions::Locked {
            ticket: Some(ticket),
            position,
        };
        let furthest = |judged: &[Judged]| judged.iter().filter_map(|j| j.position).max();
        if !judged.iter().all(|judged| judged.admitted) {
            return Ok(refused(furthest(&judged)));
        }
        let taken = driver::acquire_one_by_one(self, &asked)?;
        let Acquisitions::Locked {
            position: refusing, ..
        } = taken
        else {
            return Ok(taken);
        };
        // A key was taken between the two passes: the keys before it were taken (leaving
        // their lines) and given back, and the refusing key gave the set its place.
        let mut stood = Vec::new();
        for (key, judged) in keys.iter().zip(&judged) {
            if judged.standing.is_some() {
                stood.push(self.judge(key, Step::Stand, &asked)?);
            }
        }
        Ok(refused(furthest(&stood).max(refusing)))
    }

    /// Runs the line script on `key` (see `scripts/line_judge.lua`) for the holder and line of
    /// `request`: with a ticket in its line it writes the waiter's place as `step` says;
    /// without one it only reads.
    fn judge(&self, key: &Key, step: Step, request: &Request<'_>) -> Result<Judged> {
        let store = &self.store;
        let lock_keys = store.keys.lock_keys(key.as_str())?;
        let tagged = store.keys.tagged(key.as_str())?;
        let line_keys = tagged.line_keys(LeaseKind::Lock);
        let readers = tagged.shared_keys().holders;
        let step = match step {
            Step::Judge => "judge",
            Step::Stand => "stand",
        };
        let mut reply = store.run_ok(key, |conn| {
            let mut invocation = SCRIPTS.line_judge.key(&lock_keys.lock);
            invocation.key(&lock_keys.fence);
            acquire_args::push_keys(&mut invocation, &line_keys);
            invocation
                .key(&readers)
                .arg(TIME_TOLERANCE_MS)
                .arg(step)
                .arg(request.holder.map_or("", Holder::as_str));
            acquire_args::push_args(&mut invocation, request.line);
            invocation.invoke(conn)
        })?;
        let admitted = reply.int()? == 1;
        let standing = reply.ticket()?;
        let next_ticket = u64::try_from(reply.int()?)
            .map_err(|_| LockError::internal("a Redis line's next ticket is negative"))?;
        let position = reply.position()?;
        Ok(Judged {
            admitted,
            standing,
            next_ticket,
            position,
        })
    }
}
