//! What an acquire script is told, in its `KEYS` and `ARGV`: the request (lock id, TTL,
//! tolerance, key, fence limit, holder) and what it asks of the line.

use redis::ScriptInvocation;

use super::layout::LineKeys;
use crate::driver::{FENCE_MAX, Holder, Key, Line, LockId, PLACE_TTL, Request, TIME_TOLERANCE_MS};

/// How long a line's keys outlive its last write: a place written last lives [`PLACE_TTL`] and
/// is judged live for [`TIME_TOLERANCE_MS`] more; a second on top, so that no key of a line
/// expires while a place in it is still live. A line nobody renews then disappears, ticket
/// counter and all (its next waiter starts again at ticket 1, behind no one).
fn line_keys_ttl_ms() -> i64 {
    PLACE_TTL.as_millis() + TIME_TOLERANCE_MS + 1_000
}

/// Adds a line's keys to an acquire script's `KEYS` (after the lock's or the semaphore's own).
pub(crate) fn push_keys(invocation: &mut ScriptInvocation<'_>, keys: &LineKeys) {
    invocation
        .key(&keys.order)
        .key(&keys.expiry)
        .key(&keys.places);
}

/// Adds what an acquisition asks of the line to an acquire script's `ARGV` (after its own):
/// the mode, the place id (empty unless waiting), a place's TTL, the line keys' TTL and the
/// ticket a waiter of several keys carries ([`Line::WaitAt`]; empty for none).
pub(crate) fn push_args(invocation: &mut ScriptInvocation<'_>, line: Line<'_>) {
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

/// Adds what a lock's or a shared hold's acquire script (`acquire.lua`, `shared_acquire.lua`)
/// is told of `request` on `key` to its `ARGV`: the new lock id, the TTL, the tolerance, the
/// user key, the largest fence allowed and the holder text, then the line
/// ([`push_args`]).
pub(crate) fn push_request_args(
    invocation: &mut ScriptInvocation<'_>,
    lock_id: &LockId,
    key: &Key,
    request: &Request<'_>,
) {
    invocation
        .arg(lock_id.as_str())
        .arg(request.ttl.as_millis())
        .arg(TIME_TOLERANCE_MS)
        .arg(key.as_str())
        .arg(FENCE_MAX)
        .arg(request.holder.map_or("", Holder::as_str));
    push_args(invocation, request.line);
}
