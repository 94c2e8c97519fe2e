//! The cluster layout's operations: a lock's record and fence counter share the key's hash
//! slot, its index entry `P:id:{lockId}` lies in the lock id's own slot, so no script touches
//! the index entry. Lock ids are plain 16-byte CSPRNG ids (128 bits), never chosen to hash
//! anywhere.
//!
//! This file owns the layout's operations (the TypeScript layout's are in `typescript.rs`);
//! the driver (`mod.rs`) picks one or the other once per call.
//!
//! Every operation sends its script and the command on its index entry together: one pipeline
//! on one server, and on a Cluster one round trip across the two nodes (`node::pipeline`).
//!
//! | operation | requests (round trips) |
//! |---|---|
//! | acquire | [acquire script on the record, `SET I L PX ttl+tolerance`] |
//! | release through a guard (key known) | [release script, `DEL I`] |
//! | extend through a guard (key known) | [extend script, `PEXPIRE I ttl+tolerance`] |
//! | break (a lock) | break script on the record; then [`DEL` the broken holder's `I`, `SET` the marker's `I`] |
//! | by bare lock id (`release/extend --lock-id`, lookup) | `GET I`, then as above |
//! | batch renewal | all leases' [extend script, `PEXPIRE I`] in one pipeline |
//!
//! The script is the truth; the index entry follows it, and outlives its record by the time
//! tolerance (`index_ttl_ms`), so that a lock is found by its lock id for as long as by its
//! key. A refused acquire's `SET I` leaves an entry pointing at a record another lock id owns,
//! and every script compares the lock id stored in the record, so such an entry (or any stale
//! one) can never release or extend that lock: it answers "not found" and expires with its
//! TTL. On a Cluster the two commands reach
//! different nodes, and one can fail while the other applies:
//! - acquire granted, `SET I` failed: the lock could not be found by its lock id, so it is
//!   released again and the acquire fails (transient), leaving nothing locked;
//! - extend or release applied, its index command failed: the answer stands (a guard knows its
//!   key and never reads the index) and a warning is logged; until the lock's new expiry, a bare
//!   lock id may then not find it (after an extension), or find an entry that answers "not
//!   found" (after a release).
//!
//! A crash between the two writes leaves the same states.

use redis::{Cmd, RedisError, RedisResult, ScriptInvocation, Value};

use super::errors::{Phase, map_error};
use super::pool::Conn;
use super::scripts::{Reply, SCRIPTS, Status, lock_renewal};
use super::store::{Store, failed_all};
use crate::driver::{
    Extension, Key, LeaseRef, LockId, LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl, in_order,
};
use crate::error::{ErrorCode, LockError, Result};

/// The answers of a script on a record and of a command on its index entry, sent together.
pub(super) struct WithIndex {
    pub script: Value,
    pub index: RedisResult<Value>,
}

/// Sends `invocation` (a script on one record) and `index` (a command on its index entry)
/// together: one round trip (see the module docs). `Err` when the script has no answer.
pub(super) fn script_with_index(
    conn: &mut Conn<'_>,
    invocation: &ScriptInvocation<'_>,
    script: &redis::Script,
    index: Cmd,
) -> RedisResult<WithIndex> {
    let (script, mut indexes) = script_with_indexes(conn, invocation, script, vec![index])?;
    match indexes.pop() {
        Some(index) => Ok(WithIndex { script, index }),
        None => Err(short_pipeline()),
    }
}

/// Sends `invocation` (a script on records of one hash slot) and `indexes` (commands on their
/// index entries) together: one round trip. The script's answer and each command's, in order;
/// `Err` when the script has no answer.
pub(super) fn script_with_indexes(
    conn: &mut Conn<'_>,
    invocation: &ScriptInvocation<'_>,
    script: &redis::Script,
    indexes: Vec<Cmd>,
) -> RedisResult<(Value, Vec<RedisResult<Value>>)> {
    let count = indexes.len();
    let mut pipe = redis::pipe();
    pipe.invoke_script(invocation);
    for index in indexes {
        pipe.add_command(index);
    }
    let mut answers = conn.pipeline(&mut pipe, script)?.into_iter();
    let script = answers.next().ok_or_else(short_pipeline)??;
    let indexes: Vec<_> = answers.collect();
    if indexes.len() != count {
        return Err(short_pipeline());
    }
    Ok((script, indexes))
}

fn short_pipeline() -> RedisError {
    RedisError::from((redis::ErrorKind::Client, "Redis answered a pipeline short"))
}

/// The `SET` of an acquisition's index entry, sent beside its script: the entry names the
/// record `lock_key` and outlives the lease ([`index_ttl_ms`]).
pub(super) fn set_index(index_key: &str, lock_key: &str, ttl: Ttl) -> Cmd {
    let mut set = redis::cmd("SET");
    set.arg(index_key)
        .arg(lock_key)
        .arg("PX")
        .arg(index_ttl_ms(ttl));
    set
}

/// How long an index entry lives for a lease of `ttl`: [`TIME_TOLERANCE_MS`] longer than its
/// record. The two writes reach different nodes, each of which counts the TTL from the moment
/// it applies its own, in no set order (and a redirected or retried script applies later
/// still); with the same TTL the entry would often expire a moment before its record, and for
/// that moment the lock would be held but not found by its lock id (`owns`, lookups, release
/// and extend by bare lock id). An entry that outlives its record finds nothing: every script
/// compares the lock id stored in the record.
fn index_ttl_ms(ttl: Ttl) -> i64 {
    ttl.as_millis() + TIME_TOLERANCE_MS
}

/// The record key of a lease: from its key, else from its index entry (one request);
/// `None` when the index entry is gone.
fn record_key_of(store: &Store, lease: LeaseRef<'_>) -> Result<Option<String>> {
    if let Some(key) = lease.key {
        return Ok(Some(store.keys.lock_keys(key.as_str())?.lock));
    }
    let index_key = store.keys.index_key(lease.lock_id);
    store.pool.run(&store.server, |conn| {
        redis::cmd("GET")
            .arg(&index_key)
            .query::<Option<String>>(conn)
    })
}

/// Release in the cluster layout.
pub(super) fn release(store: &Store, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
    let Some(lock_key) = record_key_of(store, lease)? else {
        return Ok(Outcome::NotFound);
    };
    let mut invocation = SCRIPTS.release_record.key(&lock_key);
    invocation
        .arg(lease.lock_id.as_str())
        .arg(TIME_TOLERANCE_MS);
    let mut delete = redis::cmd("DEL");
    delete.arg(store.keys.index_key(lease.lock_id));
    let answers = store.pool.run_on(&store.server, |mut conn| {
        script_with_index(
            &mut conn,
            &invocation,
            &SCRIPTS.release_record,
            delete.clone(),
        )
    })?;
    if let Err(error) = answers.index {
        index_not_followed(store, lease.key, "release", vec![error]);
    }
    store.outcome(
        &mut Reply::parse(answers.script)?,
        lease.lock_id,
        |_| Ok(()),
    )
}

/// Extend in the cluster layout.
pub(super) fn extend(store: &Store, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
    let Some(lock_key) = record_key_of(store, lease)? else {
        return Ok(Outcome::NotFound);
    };
    let (script, invocation) = lock_renewal(
        &lock_key,
        lease,
        ttl,
        &SCRIPTS.extend_record,
        &SCRIPTS.proclaim_record,
    );
    let answers = store.pool.run_on(&store.server, |mut conn| {
        script_with_index(
            &mut conn,
            &invocation,
            script,
            index_pexpire(store, lease.lock_id, ttl),
        )
    })?;
    if let Err(error) = answers.index {
        index_not_followed(store, lease.key, "extension", vec![error]);
    }
    store.extension(answers.script, lease.lock_id)
}

/// Batch renewal in the cluster layout: the leases that carry their key in one pipeline
/// (each its record's script and a `PEXPIRE` of its index entry), those known only by their
/// lock id one by one, since their record is found through their index entry first.
pub(super) fn extend_all(
    store: &Store,
    leases: &[(LeaseRef<'_>, Ttl)],
) -> Vec<Result<Outcome<Extension>>> {
    let (keyed, alone): (Vec<usize>, Vec<usize>) =
        (0..leases.len()).partition(|&i| leases[i].0.key.is_some());
    let mut answers = Vec::with_capacity(leases.len());
    if !keyed.is_empty() {
        let group: Vec<_> = keyed.iter().map(|&i| &leases[i]).collect();
        answers.extend(keyed.iter().copied().zip(extend_keyed(store, &group)));
    }
    answers.extend(alone.into_iter().map(|i| {
        let (lease, ttl) = &leases[i];
        (i, extend(store, *lease, *ttl))
    }));
    in_order(leases.len(), answers)
}

/// One pipeline of renewals of leases whose key is known.
fn extend_keyed(store: &Store, leases: &[&(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
    let mut pipe = redis::pipe();
    for (lease, ttl) in leases {
        let Some(key) = lease.key else {
            return failed_all(leases.len(), || {
                LockError::internal("a batched renewal without its key")
            });
        };
        let target = match store.keys.lock_keys(key.as_str()) {
            Ok(keys) => keys.lock,
            Err(error) => {
                return failed_all(leases.len(), || {
                    LockError::new(error.code(), error.message())
                });
            }
        };
        let mut invocation = SCRIPTS.extend_record.prepare_invoke();
        invocation
            .key(target)
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .arg(ttl.as_millis());
        pipe.invoke_script(&invocation);
        pipe.add_command(index_pexpire(store, lease.lock_id, *ttl));
    }
    let lock_ids: Vec<&LockId> = leases.iter().map(|(lease, _)| lease.lock_id).collect();
    let (outcomes, unfollowed) = store.renew(&mut pipe, &SCRIPTS.extend_record, &lock_ids, 2);
    index_not_followed(store, None, "renewal", unfollowed);
    outcomes
}

/// `PEXPIRE` of a lock id's index entry, for a lease renewed for `ttl`.
fn index_pexpire(store: &Store, lock_id: &LockId, ttl: Ttl) -> Cmd {
    let mut pexpire = redis::cmd("PEXPIRE");
    pexpire
        .arg(store.keys.index_key(lock_id))
        .arg(index_ttl_ms(ttl));
    pexpire
}

/// Logs index commands that failed after their scripts answered (one line for a batch):
/// the answers stand (see the module docs).
fn index_not_followed(
    store: &Store,
    key: Option<&Key>,
    operation: &str,
    failures: Vec<RedisError>,
) {
    let count = failures.len();
    let Some(first) = failures.into_iter().next() else {
        return;
    };
    let error = map_error(first, &store.server, Phase::Call);
    let locks = match key {
        Some(key) => format!("the lock on {:?}", key.as_str()),
        None if count == 1 => "a lock".to_owned(),
        None => format!("{count} locks"),
    };
    log::warn!(
        "syncguard: the {operation} of {locks} applied, but the index entry could not \
         follow ({error}); until the lock expires its bare lock id may not find it"
    );
}

/// The index entries after a break of the lock at `lock_key` (the script decided, on the
/// record): the broken holder's entry deleted and the marker's written, for as long as an
/// acquisition's outlives its record. Both in one round trip; a failure is logged and the
/// break's answer stands, as for a release (see the module docs).
pub(super) fn follow_break(
    store: &Store,
    key: &Key,
    lock_key: &str,
    broken: &LockRecord,
    marker: Option<&LockRecord>,
) -> Result<()> {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL")
        .arg(store.keys.index_key(&LockId::new(&broken.lock_id)?));
    if let Some(marker) = marker {
        let ttl_ms = marker.expires_at_ms - marker.acquired_at_ms + TIME_TOLERANCE_MS;
        pipe.cmd("SET")
            .arg(store.keys.index_key(&LockId::new(&marker.lock_id)?))
            .arg(lock_key)
            .arg("PX")
            .arg(ttl_ms);
    }
    // No script in the pipeline: the break script only names what a NOSCRIPT would reload.
    let answers = store.pool.run_on(&store.server, |mut conn| {
        conn.pipeline(&mut pipe, &SCRIPTS.break_lock)
    })?;
    let failures: Vec<RedisError> = answers.into_iter().filter_map(|a| a.err()).collect();
    index_not_followed(store, Some(key), "break", failures);
    Ok(())
}

/// Lookup by lock id in the cluster layout: the index entry, then the record, which must
/// carry this lock id.
pub(super) fn find(store: &Store, lock_id: &LockId) -> Result<Option<LockRecord>> {
    let Some(lock_key) = record_key_of(store, LeaseRef::new(lock_id))? else {
        return Ok(None);
    };
    let mut reply = store.lookup(&lock_key)?;
    match reply.status {
        Status::Ok => {}
        Status::Foreign => {
            return Err(store
                .refusal(&mut reply, None)
                .with_lock_id(lock_id.as_str()));
        }
        _ => return Ok(None),
    }
    let record = store.decode(&reply.string()?)?;
    Ok((record.lock_id == lock_id.as_str()).then_some(record))
}

/// Releases a lock granted on a Cluster whose index entry could not be written (the lock
/// could not be found by its lock id), and says so; see the module docs.
pub(super) fn undo_unindexed(
    store: &Store,
    key: &Key,
    lock_id: &LockId,
    error: RedisError,
) -> LockError {
    if let Err(undo) = release(store, LeaseRef::new(lock_id).with_key(key)) {
        log::warn!(
            "syncguard: could not release the lock on {key:?} after its index entry could \
             not be written; it expires with its TTL: {undo}"
        );
    }
    unindexed(store, key, error)
}

/// The error for an acquisition of `key` granted without its index entry (`error`: why the
/// entry could not be written), once it is released.
pub(super) fn unindexed(store: &Store, key: &Key, error: RedisError) -> LockError {
    let error = map_error(error, &store.server, Phase::Call);
    LockError::new(
        if error.code().is_transient() {
            error.code()
        } else {
            ErrorCode::ServiceUnavailable
        },
        format!(
            "the lock was granted but its index entry (by which its lock id finds it) could \
             not be written, so it was released again: {}",
            error.message()
        ),
    )
    .with_key(key.as_str())
}

/// Deletes the index entry of a lock id that holds no lock (best effort: it expires with
/// its TTL anyway).
pub(super) fn drop_index_entry(store: &Store, index_key: &str) {
    let deleted = store.pool.run(&store.server, |conn| {
        redis::cmd("DEL").arg(index_key).query::<i64>(conn)
    });
    if let Err(error) = deleted {
        log::warn!(
            "syncguard: could not delete the index entry of a refused acquisition; it \
             expires with its TTL: {error}"
        );
    }
}
