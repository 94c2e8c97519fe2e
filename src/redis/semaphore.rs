//! Semaphores: one Lua script per acquire, release, renewal and listing, over the semaphore's
//! three keys in one hash slot (see [Semaphores](super#semaphores) and
//! [`SemaphoreKeys`](super::layout::SemaphoreKeys)). The same in both key layouts: every key
//! of a semaphore is named by its user key, never reached through an index entry.
//!
//! A lock's shared holders (`shared.rs`) are a set of holders of the same shape (a sorted set of
//! expiries and a hash of records): their release, renewal and reading are these.

use redis::{ScriptInvocation, Value};

use super::errors::{Phase, Unanswered, map_error};
use super::replicas::ReplicaAcks;
use super::scripts::{Reply, SCRIPTS, Status, granted};
use super::slot::key_slot;
use super::store::Store;
use crate::driver::{
    Acquisitions, Extension, FENCE_MAX, Holder, Key, LeaseKind, LeaseRef, LockId, LockRecord,
    Outcome, Permits, Request, TIME_TOLERANCE_MS, Ttl,
};
use crate::error::{LockError, Result};
use crate::fence::Fence;

/// An acquisition's answer, with what the replicas said of it (`min_replicas`), for the
/// driver to judge: it undoes an acquisition too few replicas have, as it does for locks.
pub(super) struct Attempt {
    pub acquisition: Acquisitions,
    /// The lock id the permit was asked for under.
    pub lock_id: LockId,
    /// The replicas' acknowledgements of a granted permit, when `min_replicas` is set.
    pub acknowledged: Option<Result<i64>>,
}

/// Takes a permit of the semaphore of `permits` on `key` as `request` asks: one script on the
/// semaphore's keys and its line's (and `WAIT` on the same connection with `min_replicas`, for
/// a granted permit only: a place is not waited for).
pub(super) fn acquire(
    store: &Store,
    replicas: Option<&ReplicaAcks>,
    key: &Key,
    permits: Permits,
    request: &Request<'_>,
) -> Result<Attempt> {
    let tagged = store.keys.tagged(key.as_str())?;
    let keys = tagged.semaphore_keys();
    let line_keys = tagged.line_keys(LeaseKind::Permit);
    let lock_id = store.keys.new_lock_id();
    let slot = key_slot(keys.holders.as_bytes());
    let mut invocation = SCRIPTS.semaphore_acquire.key(&keys.holders);
    invocation.key(&keys.permits).key(&keys.fence);
    super::acquire_args::push_keys(&mut invocation, &line_keys);
    invocation
        .arg(lock_id.as_str())
        .arg(request.ttl.as_millis())
        .arg(TIME_TOLERANCE_MS)
        .arg(permits.get())
        .arg(key.as_str())
        .arg(FENCE_MAX)
        .arg(request.holder.map_or("", Holder::as_str));
    super::acquire_args::push_args(&mut invocation, request.line);
    run_acquire(store, replicas, key, lock_id, slot, &invocation)
}

/// Runs an acquire script of a holder set (a permit's or a shared hold's) asked for under
/// `lock_id`, whose keys lie in `slot`, and reads its answer.
pub(super) fn run_acquire(
    store: &Store,
    replicas: Option<&ReplicaAcks>,
    key: &Key,
    lock_id: LockId,
    slot: u16,
    invocation: &ScriptInvocation<'_>,
) -> Result<Attempt> {
    // As for a lock: a script sent without an answer may have granted the hold.
    let unanswered = Unanswered::default();
    let answer = store.pool.run_on(&store.server, |mut conn| {
        let value: Value = invocation
            .invoke(conn.as_dyn())
            .inspect_err(|error| unanswered.note(error))?;
        // WAIT counts this connection's writes: the same connection, and its failure is an
        // answer, not a reason to repeat the script.
        let acknowledged = match replicas {
            Some(policy) if granted(&value) => Some(policy.wait(conn, &[slot])),
            _ => None,
        };
        Ok((value, acknowledged))
    });
    let (value, acknowledged) =
        answer.map_err(|error| unanswered.judge(error, key.as_str(), lock_id.as_str()))?;
    let mut reply = Reply::parse(value)?;
    let acquisition = match reply.status {
        Status::Ok => {
            let fence: Fence = reply.string()?.parse()?;
            // Re-issuing through from_counter applies the warning threshold.
            let fence = Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
            let expires_at_ms = reply.int()?;
            Acquisitions::granted(lock_id.as_str().to_owned(), fence, expires_at_ms, None)
        }
        Status::Absent => Acquisitions::locked_at(reply.position()?),
        Status::FenceOverflow | Status::BadCounter | Status::Foreign => {
            return Err(store.refusal(&mut reply, Some(key)));
        }
        Status::NotFound | Status::Expired => return Err(store.foreign(Some(key.as_str()))),
    };
    let acknowledged =
        acknowledged.map(|answer| answer.map_err(|e| map_error(e, &store.server, Phase::Call)));
    Ok(Attempt {
        acquisition,
        lock_id,
        acknowledged,
    })
}

/// The holders and records keys of the holder set of `kind` on `key`: a semaphore's holders
/// and permits, or the lock's shared holders and their records.
pub(super) fn holder_set(store: &Store, key: &Key, kind: LeaseKind) -> Result<(String, String)> {
    match kind {
        LeaseKind::Shared => {
            let keys = store.keys.shared_keys(key.as_str())?;
            Ok((keys.holders, keys.records))
        }
        LeaseKind::Permit | LeaseKind::Lock => {
            let keys = store.keys.semaphore_keys(key.as_str())?;
            Ok((keys.holders, keys.permits))
        }
    }
}

/// Where a permit's release is announced: the channel of the lock on the same user key, so
/// that the release watch hears it as it hears a lock's (with the user key).
pub(super) fn release_channel(store: &Store, key: &Key) -> Result<String> {
    Ok(format!(
        "{}:released",
        store.keys.lock_keys(key.as_str())?.lock
    ))
}

/// Gives back a permit or a shared hold: one script.
pub(super) fn release(store: &Store, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
    let key = lease.permit_key()?;
    let (holders, records) = holder_set(store, key, lease.kind)?;
    let channel = release_channel(store, key)?;
    let mut reply = store.run(|conn| {
        SCRIPTS
            .semaphore_release
            .key(&holders)
            .key(&records)
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .arg(&channel)
            .arg(key.as_str())
            .invoke(conn)
    })?;
    store
        .outcome(&mut reply, lease.lock_id, |_| Ok(()))
        .map_err(|e| e.with_key(key.as_str()))
}

/// The extend script's invocation for one permit or shared hold.
fn extension_of(store: &Store, lease: LeaseRef<'_>, ttl: Ttl) -> Result<ScriptInvocation<'static>> {
    let key = lease.permit_key()?;
    let (holders, records) = holder_set(store, key, lease.kind)?;
    let mut invocation = SCRIPTS.semaphore_extend.prepare_invoke();
    invocation
        .key(holders)
        .key(records)
        .arg(lease.lock_id.as_str())
        .arg(TIME_TOLERANCE_MS)
        .arg(ttl.as_millis())
        .arg(release_channel(store, key)?)
        .arg(key.as_str());
    Ok(invocation)
}

/// Renews a permit or a shared hold: one script.
pub(super) fn extend(store: &Store, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
    let invocation = extension_of(store, lease, ttl)?;
    let value = store
        .pool
        .run(&store.server, |conn| invocation.invoke(conn))?;
    store.extension(value, lease.lock_id)
}

/// Renews several permits or shared holds in one pipeline (on a Cluster, one per node, all at once): one
/// answer per lease, in order. A lease that cannot even be asked about (no key) gets its own
/// error; the others their own script's answer.
pub(super) fn extend_all(
    store: &Store,
    leases: &[(LeaseRef<'_>, Ttl)],
) -> Vec<Result<Outcome<Extension>>> {
    let prepared: Vec<Result<ScriptInvocation<'static>>> = leases
        .iter()
        .map(|(lease, ttl)| extension_of(store, *lease, *ttl))
        .collect();
    let mut pipe = redis::pipe();
    let mut lock_ids = Vec::new();
    for ((lease, _), invocation) in leases.iter().zip(&prepared) {
        if let Ok(invocation) = invocation {
            pipe.invoke_script(invocation);
            lock_ids.push(lease.lock_id);
        }
    }
    let mut sent = if lock_ids.is_empty() {
        Vec::new()
    } else {
        store
            .renew(&mut pipe, &SCRIPTS.semaphore_extend, &lock_ids, 1)
            .0
    }
    .into_iter();
    // Each sent lease takes the next answer of the pipeline, in the order they were sent.
    let answers: Vec<_> = prepared
        .into_iter()
        .map(|invocation| match invocation {
            Ok(_) => sent
                .next()
                .unwrap_or_else(|| Err(LockError::internal("a renewal got no answer"))),
            Err(error) => Err(error),
        })
        .collect();
    debug_assert!(sent.next().is_none());
    answers
}

/// The live permits of the semaphore on `key` (`kind` [`LeaseKind::Permit`]) or the live
/// shared holders of its lock ([`LeaseKind::Shared`]), in fence order: one read-only script.
pub(super) fn find(store: &Store, key: &Key, kind: LeaseKind) -> Result<Vec<LockRecord>> {
    let (holders, records) = holder_set(store, key, kind)?;
    let reply = store.run_ok(key, |conn| {
        SCRIPTS
            .semaphore_holders
            .key(&holders)
            .key(&records)
            .arg(TIME_TOLERANCE_MS)
            .invoke(conn)
    })?;
    let mut held = reply
        .strings()?
        .iter()
        .map(|raw| store.decode(raw))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.with_key(key.as_str()))?;
    held.sort_by_key(|record| record.fence);
    Ok(held)
}
