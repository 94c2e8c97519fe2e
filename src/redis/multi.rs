//! The locks of several keys at once on Redis ([`Driver::try_acquire`](crate::driver::Driver::try_acquire) of a
//! set): one script over
//! every key's keys (`scripts/acquire_all.lua`, built from the same per-key parts as the
//! single-key acquire, `scripts/lock.lua`), deciding the whole set by the several keys rule
//! ([`admit_all`](crate::driver::admit_all)) in one atomic step — on one server,
//! behind Sentinel, and on a Cluster when every key lies in one hash slot. A Cluster whose keys
//! lie in several slots takes them key by key (`slots_set.rs`), since no script may touch two
//! slots.
//!
//! In the cluster layout each key's index entry lies in its lock id's own slot: the `SET`s go
//! beside the script in the same round trip, as for one key (`split.rs`).

use redis::Cmd;

use super::driver::RedisBackend;
use super::errors::{Phase, Unanswered, map_error};
use super::layout::KeyLayout;
use super::scripts::{self, Reply, SCRIPTS, Status};
use super::slot::key_slot;
use super::{acquire_args, split};
use crate::driver::{
    self, Acquisitions, FENCE_MAX, Holder, Key, Lease, LeaseKind, LockId, Request,
    TIME_TOLERANCE_MS, Version,
};
use crate::error::{LockError, Result};
use crate::fence::Fence;

/// How many `KEYS` of the script one key takes: its lock key, fence counter, three line keys
/// and shared holders, and in the TypeScript layout its index key.
fn stride(layout: KeyLayout) -> usize {
    match layout {
        KeyLayout::TypeScript => 7,
        KeyLayout::Cluster => 6,
    }
}

/// One key of the set as the script is told it.
struct Member<'k> {
    key: &'k Key,
    lock_id: LockId,
    /// Every Redis key the script reads for this key, to name the user key of a refusal.
    redis_keys: Vec<String>,
}

impl RedisBackend {
    /// Takes the exclusive locks on every key of `request`, or none: one script where the store
    /// allows it (see the module docs), else one key at a time.
    pub(super) fn acquire_all(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let backend = self;
        let store = &backend.store;
        let keys = request.keys();
        if store.pool.is_cluster() && !in_one_slot(backend, keys)? {
            return backend.acquire_over_slots(request);
        }
        let (ttl, holder) = (request.ttl, request.holder);
        let layout = store.keys.layout();
        let mut invocation = SCRIPTS.acquire_all.prepare_invoke();
        let mut members = Vec::with_capacity(keys.len());
        // The slots the acquisition writes, which `min_replicas` waits for.
        let mut slots = Vec::new();
        let mut index_sets: Vec<Cmd> = Vec::new();
        for key in keys {
            let lock_keys = store.keys.lock_keys(key.as_str())?;
            let tagged = store.keys.tagged(key.as_str())?;
            let line_keys = tagged.line_keys(LeaseKind::Lock);
            let readers = tagged.shared_keys().holders;
            let lock_id = store.keys.new_lock_id();
            let index_key = store.keys.index_key(&lock_id);
            slots.push(key_slot(lock_keys.lock.as_bytes()));
            invocation.key(&lock_keys.lock).key(&lock_keys.fence);
            acquire_args::push_keys(&mut invocation, &line_keys);
            invocation.key(&readers);
            match layout {
                KeyLayout::TypeScript => {
                    invocation.key(&index_key);
                }
                KeyLayout::Cluster => {
                    slots.push(key_slot(index_key.as_bytes()));
                    index_sets.push(split::set_index(&index_key, &lock_keys.lock, ttl));
                }
            }
            let redis_keys = vec![
                lock_keys.lock,
                lock_keys.fence,
                line_keys.order,
                line_keys.expiry,
                line_keys.places,
                readers,
                index_key,
            ];
            members.push(Member {
                key,
                lock_id,
                redis_keys,
            });
        }
        invocation
            .arg(ttl.as_millis())
            .arg(TIME_TOLERANCE_MS)
            .arg(FENCE_MAX)
            .arg(holder.map_or("", Holder::as_str))
            .arg(stride(layout));
        acquire_args::push_args(&mut invocation, request.line);
        for member in &members {
            invocation
                .arg(member.lock_id.as_str())
                .arg(member.key.as_str());
        }

        let unanswered = Unanswered::default();
        let note = |error: redis::RedisError| {
            unanswered.note(&error);
            error
        };
        let answer = store.pool.run_on(&store.server, |mut conn| {
            let (value, indexes) = if index_sets.is_empty() {
                (invocation.invoke(conn.as_dyn()).map_err(note)?, Vec::new())
            } else {
                split::script_with_indexes(
                    &mut conn,
                    &invocation,
                    &SCRIPTS.acquire_all,
                    index_sets.clone(),
                )
                .map_err(note)?
            };
            // On the connection that wrote, as for one key; its failure is an answer.
            let acknowledged = match &backend.replicas {
                Some(policy) if scripts::granted(&value) => Some(policy.wait(conn, &slots)),
                _ => None,
            };
            Ok((value, indexes, acknowledged))
        });
        // A script sent and not answered may have taken every key: each lease is in doubt.
        let (value, indexes, acknowledged) = answer.map_err(|error| {
            unanswered.judge_all(
                error,
                members
                    .iter()
                    .map(|m| (m.key.as_str().to_owned(), m.lock_id.as_str().to_owned())),
            )
        })?;
        let mut reply = Reply::parse(value)?;
        match reply.status {
            Status::Ok => {
                let mut leases = Vec::with_capacity(members.len());
                for member in &members {
                    let fence: Fence = reply.string()?.parse()?;
                    // Re-issuing through from_counter applies the warning threshold.
                    let fence = Fence::from_counter(fence.value())
                        .map_err(|e| e.with_key(member.key.as_str()))?;
                    let expires_at_ms = reply.int()?;
                    leases.push((
                        Lease {
                            lock_id: member.lock_id.as_str().to_owned(),
                            fence,
                            expires_at_ms,
                        },
                        None,
                    ));
                }
                let unindexed = indexes
                    .into_iter()
                    .enumerate()
                    .find_map(|(at, answer)| answer.err().map(|error| (at, error)));
                if let Some((at, error)) = unindexed {
                    let unreleased = unreleased(backend, keys, &leases);
                    return Err(
                        split::unindexed(store, members[at].key, error).in_doubt_all(unreleased)
                    );
                }
                if let (Some(policy), Some(acknowledged)) = (&backend.replicas, acknowledged) {
                    let acknowledged =
                        acknowledged.map_err(|e| map_error(e, &store.server, Phase::Call));
                    if !matches!(acknowledged, Ok(n) if n >= i64::from(policy.replicas)) {
                        let unreleased = unreleased(backend, keys, &leases);
                        return Err(backend
                            .unreplicated(members[0].key, acknowledged)
                            .in_doubt_all(unreleased));
                    }
                }
                Ok(Acquisitions::Acquired(leases))
            }
            Status::Absent => {
                let ticket = reply.ticket()?;
                let position = reply.position()?;
                Ok(Acquisitions::Locked { ticket, position })
            }
            Status::FenceOverflow | Status::BadCounter | Status::Foreign => {
                let named = reply.peek_string().and_then(|redis_key| {
                    members
                        .iter()
                        .find(|m| m.redis_keys.iter().any(|k| k.as_bytes() == redis_key))
                });
                let error = store.refusal(&mut reply, named.map(|m| m.key));
                // The index entries went out beside the script (one round trip) and point at no
                // lock of their lock ids: a refusal leaves nothing behind.
                for (member, index) in members.iter().zip(&indexes) {
                    if index.is_ok() {
                        split::drop_index_entry(store, &member.redis_keys[6]);
                    }
                }
                Err(error)
            }
            Status::NotFound | Status::Expired => Err(store.foreign(None)),
        }
    }
}

/// Whether every key's lock lies in one hash slot (its keys share the lock's tag), so that one
/// script may take them all on a Cluster.
fn in_one_slot(backend: &RedisBackend, keys: &[Key]) -> Result<bool> {
    let mut slots = keys.iter().map(|key| {
        let lock = backend.store.keys.lock_keys(key.as_str())?.lock;
        Ok::<_, LockError>(key_slot(lock.as_bytes()))
    });
    let Some(first) = slots.next().transpose()? else {
        return Ok(true);
    };
    for slot in slots {
        if slot? != first {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Gives back the leases of a set granted but not held whole; the (key, lock id) of each that
/// could not be, for the error's doubt.
fn unreleased(
    backend: &RedisBackend,
    keys: &[Key],
    leases: &[(Lease, Option<Version>)],
) -> Vec<(String, String)> {
    keys.iter()
        .zip(leases)
        .filter(|(key, (lease, version))| {
            driver::release_granted(backend, key, LeaseKind::Lock, lease, version.as_ref()).is_err()
        })
        .map(|(key, (lease, _))| (key.to_string(), lease.lock_id.clone()))
        .collect()
}
