//! The line of waiters on Redis (see [The line](super#the-line)): its own two scripts, leaving
//! and reading. THE RULE itself is decided in `scripts/line.lua`, inside each acquire script,
//! told of the line by [`acquire_args`](super::acquire_args).

use super::scripts::SCRIPTS;
use super::store::Store;
use crate::driver::{Key, LeaseKind, LockId, PlaceRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

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
