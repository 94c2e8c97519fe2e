//! The line of waiters on Redis (see [The line](super#the-line) and [`LineKeys`]): what an
//! acquire script is told of the line, and the line's own two scripts, leaving and reading.
//! THE RULE itself is decided in `scripts/line.lua`, inside each acquire script.

use redis::ScriptInvocation;

use super::layout::LineKeys;
use super::scripts::SCRIPTS;
use super::store::Store;
use crate::driver::{Key, LeaseKind, Line, LockId, PLACE_TTL, PlaceRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

/// How long a line's keys outlive its last write: a place written last lives [`PLACE_TTL`] and
/// is judged live for [`TIME_TOLERANCE_MS`] more; a second on top, so that no key of a line
/// expires while a place in it is still live. A line nobody renews then disappears, ticket
/// counter and all (its next waiter starts again at ticket 1, behind no one).
fn line_keys_ttl_ms() -> i64 {
    PLACE_TTL.as_millis() + TIME_TOLERANCE_MS + 1_000
}

/// Adds a line's keys to an acquire script's `KEYS` (after the lock's or the semaphore's own).
pub(super) fn push_keys(invocation: &mut ScriptInvocation<'_>, keys: &LineKeys) {
    invocation
        .key(&keys.order)
        .key(&keys.expiry)
        .key(&keys.places);
}

/// Adds what an acquisition asks of the line to an acquire script's `ARGV` (after its own):
/// the mode, the place id (empty unless waiting), a place's TTL, the line keys' TTL and the
/// ticket a waiter of several keys carries ([`Line::WaitAt`]; empty for none).
pub(super) fn push_args(invocation: &mut ScriptInvocation<'_>, line: Line<'_>) {
    let mode = match line {
        Line::Ignore => "ignore",
        Line::Keep => "keep",
        Line::Wait(_) | Line::WaitAt(..) => "wait",
    };
    invocation
        .arg(mode)
        .arg(line.place().map_or("", LockId::as_str))
        .arg(PLACE_TTL.as_millis())
        .arg(line_keys_ttl_ms())
        .arg(
            line.ticket()
                .map_or(String::new(), |ticket| ticket.to_string()),
        );
}

/// Removes the place `place` from the line of `key`'s lock or semaphore: one script.
pub(super) fn leave(store: &Store, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
    let keys = store.keys.line_keys(key.as_str(), kind)?;
    store.run_ok(key, |conn| {
        SCRIPTS
            .line_leave
            .key(&keys.order)
            .key(&keys.expiry)
            .key(&keys.places)
            .arg(place.as_str())
            .invoke(conn)
    })?;
    Ok(())
}

/// The live places of the line of `key`'s lock or semaphore, in ticket order: one read-only
/// script (it prunes nothing).
pub(super) fn find(store: &Store, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
    let keys = store.keys.line_keys(key.as_str(), kind)?;
    let mut reply = store.run_ok(key, |conn| {
        SCRIPTS
            .line_find
            .key(&keys.order)
            .key(&keys.expiry)
            .key(&keys.places)
            .arg(TIME_TOLERANCE_MS)
            .invoke(conn)
    })?;
    let mut places = Vec::new();
    while !reply.is_done() {
        let place_id = reply.string()?;
        let ticket = u64::try_from(reply.int()?)
            .map_err(|_| LockError::internal("a place in a Redis line has a negative ticket"))?;
        let expires_at_ms = reply.int()?;
        let holder = Some(reply.string()?).filter(|holder| !holder.is_empty());
        let shared = reply.int()? == 1;
        places.push(PlaceRecord {
            place_id,
            ticket,
            expires_at_ms,
            holder,
            shared,
        });
    }
    Ok(places)
}
