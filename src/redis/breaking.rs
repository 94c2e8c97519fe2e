//! An operator's forced release ([`BreakOrder`]) on Redis: one script decides and writes the
//! whole break, removing the live holders and leaving a marker in the place of each, with the
//! next fence of the key's counter and its expiry from Redis `TIME` (the rules are in
//! [`breaking`](crate::driver::BreakOrder)). A lock's break (`scripts/break_lock.lua`) works on
//! its record and counter, and in the TypeScript layout on the index entries too; in the
//! cluster layout the index entries, in other hash slots, follow it (`split.rs`). A holder
//! set's break (`scripts/break_holders.lua`: a semaphore's permits, or a lock's shared
//! holders) works on its keys in the key's slot. Either announces the break on the lock's
//! release channel, as a release does.
//!
//! The markers' lock ids are drawn here and passed in; a holder set's script answers how many
//! more it needs, writing nothing, when the holders outnumber them. A script sent again after
//! its connection dropped (the pool does so once) finds its own markers and says so: it is
//! never applied twice.

use redis::ScriptInvocation;

use super::layout::KeyLayout;
use super::scripts::{Reply, SCRIPTS, Status};
use super::semaphore::{holder_set, release_channel};
use super::split;
use super::store::Store;
use crate::driver::{
    BreakDelay, BreakOrder, Broken, FENCE_MAX, Key, LeaseKind, LockId, LockRecord,
    TIME_TOLERANCE_MS, marker_lock_id,
};
use crate::error::{ErrorCode, LockError, Result};

/// How many marker lock ids a holder set's break draws before it knows how many holders it
/// breaks: a semaphore's usual few permits in one round trip.
const FIRST_DRAW: usize = 8;

/// How many times a holder set's break draws more marker lock ids, for holders that keep
/// arriving between its attempts, before it gives up.
const DRAWS: usize = 4;

/// Breaks what `order` names: one script (and in the cluster layout, for a lock, its index
/// entries' commands after it).
pub(super) fn break_leases(store: &Store, order: &BreakOrder<'_>) -> Result<Broken> {
    match order.kind {
        LeaseKind::Lock => break_lock(store, order),
        LeaseKind::Shared | LeaseKind::Permit => break_holders(store, order),
    }
    .map_err(|e| e.with_key(order.key.as_str()))
}

/// The arguments both break scripts open with: the tolerance, the user key, the largest fence,
/// the delay (`marker_expiry` in `scripts/break.lua`), the markers' holder text and the one
/// lock id broken (`''`: every holder).
fn push_order_args(invocation: &mut ScriptInvocation<'_>, order: &BreakOrder<'_>) {
    let delay = match order.delay {
        BreakDelay::RestOfLease => "rest".to_owned(),
        BreakDelay::None => "none".to_owned(),
        BreakDelay::For(ttl) => ttl.as_millis().to_string(),
    };
    invocation
        .arg(TIME_TOLERANCE_MS)
        .arg(order.key.as_str())
        .arg(FENCE_MAX)
        .arg(delay)
        .arg(order.note.as_str())
        .arg(order.lock_id.map_or("", LockId::as_str));
}

/// A lock's break: `scripts/break_lock.lua`.
fn break_lock(store: &Store, order: &BreakOrder<'_>) -> Result<Broken> {
    let key = order.key;
    let keys = store.keys.lock_keys(key.as_str())?;
    let marker_id = marker_lock_id();
    let layout = store.keys.layout();
    let mut invocation = SCRIPTS.break_lock.key(&keys.lock);
    invocation.key(&keys.fence);
    if layout == KeyLayout::TypeScript {
        invocation.key(store.keys.index_key(&marker_id));
    }
    push_order_args(&mut invocation, order);
    invocation
        .arg(store.keys.cleanup_index_head())
        .arg(marker_id.as_str());
    let mut reply = store.run(|conn| invocation.invoke(conn))?;
    applied(store, &mut reply, key)?;
    let mut broken = Broken::default();
    if reply.is_done() {
        return Ok(broken);
    }
    let holder = reply.string()?;
    if holder.is_empty() {
        return Err(applied_before());
    }
    let holder = store.decode(&holder)?;
    let marker = match reply.is_done() {
        true => None,
        false => Some(store.decode(&reply.string()?)?),
    };
    if layout == KeyLayout::Cluster {
        split::follow_break(store, key, &keys.lock, &holder, marker.as_ref())?;
    }
    broken.holders.push(holder);
    broken.markers.extend(marker);
    Ok(broken)
}

/// A holder set's break: `scripts/break_holders.lua`, with as many marker lock ids as it asks
/// for.
fn break_holders(store: &Store, order: &BreakOrder<'_>) -> Result<Broken> {
    let key = order.key;
    let (holders, records) = holder_set(store, key, order.kind)?;
    let fence = match order.kind {
        LeaseKind::Permit => store.keys.semaphore_keys(key.as_str())?.fence,
        LeaseKind::Shared | LeaseKind::Lock => store.keys.lock_keys(key.as_str())?.fence,
    };
    let channel = release_channel(store, key)?;
    let mut drawn = match (order.delay, order.lock_id) {
        (BreakDelay::None, _) => 0,
        (_, Some(_)) => 1,
        (_, None) => FIRST_DRAW,
    };
    for _ in 0..DRAWS {
        let mut invocation = SCRIPTS.break_holders.key(&holders);
        invocation.key(&records).key(&fence);
        push_order_args(&mut invocation, order);
        invocation.arg(&channel);
        for _ in 0..drawn {
            invocation.arg(marker_lock_id().as_str());
        }
        let mut reply = store.run(|conn| invocation.invoke(conn))?;
        applied(store, &mut reply, key)?;
        let short = reply.int()?;
        if short < 0 {
            return Err(applied_before());
        }
        if let Ok(short @ 1..) = usize::try_from(short) {
            // Room for a few more holders arriving before the next attempt.
            drawn += short + FIRST_DRAW;
            continue;
        }
        let count = usize::try_from(reply.int()?).unwrap_or(0);
        let mut records: Vec<LockRecord> = reply
            .strings()?
            .iter()
            .map(|raw| store.decode(raw))
            .collect::<Result<_>>()?;
        if records.len() < count {
            return Err(LockError::internal(
                "unexpected reply from Redis: a break answered fewer holders than it counted",
            ));
        }
        let markers = records.split_off(count);
        return Ok(Broken {
            holders: records,
            markers,
        });
    }
    Err(LockError::new(
        ErrorCode::ServiceUnavailable,
        "the holders of the key kept growing while it was broken; nothing was broken: try again",
    ))
}

/// The error for a break sent again after its connection dropped, which finds that its first
/// sending was applied: what it broke is not known any more, but its markers hold the key.
fn applied_before() -> LockError {
    LockError::new(
        ErrorCode::ServiceUnavailable,
        "the connection dropped while the break was sent, and it was applied: the key's \
         holders were broken and its markers hold it, but which holders is not known",
    )
}

/// `Ok` when the script applied; the error its refusal means otherwise (it wrote nothing).
fn applied(store: &Store, reply: &mut Reply, key: &Key) -> Result<()> {
    match reply.status {
        Status::Ok => Ok(()),
        Status::Foreign | Status::FenceOverflow | Status::BadCounter => {
            Err(store.refusal(reply, Some(key)))
        }
        Status::Absent | Status::NotFound | Status::Expired => {
            Err(store.foreign(Some(key.as_str())))
        }
    }
}
