//! The TypeScript layout's operations: a lock's record, index entry and fence counter are the
//! TypeScript SyncGuard's keys, so one script does each operation whole, reaching the record
//! through the index entry `P:id:lockId` when it starts from a lock id (as release and extend
//! always do). The cluster layout's operations are in `split.rs`; the driver (`mod.rs`) picks
//! one or the other once per call. Acquisition and lookup by key are the same in both layouts
//! and stay in the driver.

use super::scripts::{SCRIPTS, Status, lock_renewal};
use super::store::Store;
use crate::driver::{Extension, LeaseRef, LockId, LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl};
use crate::error::Result;

/// Release: one script, through the index entry.
pub(super) fn release(store: &Store, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
    let index_key = store.keys.index_key(lease.lock_id);
    let mut reply = store.run(|conn| {
        SCRIPTS
            .release
            .key(&index_key)
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .invoke(conn)
    })?;
    store.outcome(&mut reply, lease.lock_id, |_| Ok(()))
}

/// Extend: one script, through the index entry; a lease that carries a holder text (a
/// leader's proclaim) has a script of its own, so that the heartbeat's stays as it was.
pub(super) fn extend(store: &Store, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
    let index_key = store.keys.index_key(lease.lock_id);
    let (_, invocation) = lock_renewal(&index_key, lease, ttl, &SCRIPTS.extend, &SCRIPTS.proclaim);
    let value = store
        .pool
        .run(&store.server, |conn| invocation.invoke(conn))?;
    store.extension(value, lease.lock_id)
}

/// Batch renewal: every lease's extend script in one pipeline (a lease needs only its lock
/// id).
pub(super) fn extend_all(
    store: &Store,
    leases: &[(LeaseRef<'_>, Ttl)],
) -> Vec<Result<Outcome<Extension>>> {
    let mut pipe = redis::pipe();
    for (lease, ttl) in leases {
        let mut invocation = SCRIPTS.extend.prepare_invoke();
        invocation
            .key(store.keys.index_key(lease.lock_id))
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .arg(ttl.as_millis());
        pipe.invoke_script(&invocation);
    }
    let lock_ids: Vec<&LockId> = leases.iter().map(|(lease, _)| lease.lock_id).collect();
    store.renew(&mut pipe, &SCRIPTS.extend, &lock_ids, 1).0
}

/// Lookup by lock id: one script, through the index entry.
pub(super) fn find(store: &Store, lock_id: &LockId) -> Result<Option<LockRecord>> {
    let index_key = store.keys.index_key(lock_id);
    let mut reply = store.run(|conn| {
        SCRIPTS
            .lookup_id
            .key(&index_key)
            .arg(lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .invoke(conn)
    })?;
    match reply.status {
        Status::Ok => store.decode(&reply.string()?).map(Some),
        Status::Foreign => Err(store
            .refusal(&mut reply, None)
            .with_lock_id(lock_id.as_str())),
        _ => Ok(None),
    }
}
