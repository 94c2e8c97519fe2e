//! Shared holders (readers) as Redis stores them (issue 34): two keys beside the lock in its
//! line's hash slot, each reader a lease of its own with a fence from the lock's counter, counted
//! by the exclusive acquire in its own script, expiring on its own, and keys of another type
//! refused. The shared contracts themselves run in `redis.rs`, `redis_cluster.rs` and
//! `redis_sentinel.rs`.

use std::collections::HashMap;
use std::time::Duration;

use redis::Commands as _;
use syncguard::testing::support::wait_until;
use syncguard::{AcquireOutcome, ErrorCode, LeaseKind, LockBackend, Mode};

use crate::support::{PATIENT, TTL, lease, shared_redis_with_connection, unique};

/// The lock ids the readers' records hash holds.
fn stored_readers(conn: &mut redis::Connection, records: &str) -> Vec<String> {
    let raw: HashMap<String, String> = conn.hgetall(records).unwrap();
    let mut ids: Vec<String> = raw.into_keys().collect();
    ids.sort();
    ids
}

/// A reader is its own record beside the lock — scored by its expiry, its fence the lock
/// counter's next — and no lock record (what the TypeScript SyncGuard reads) is written; the
/// writer is refused while it lives and granted once it is released.
#[test]
fn a_reader_is_stored_beside_the_lock_and_keeps_the_writer_out() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("shared-storage");
    let keys = backend.shared_keys(&key).unwrap();
    let first = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&first.lock_id).unwrap());

    let reader = lease(backend.acquire_as(&key, Mode::Shared, TTL));
    assert_eq!(
        reader.fence.value(),
        2,
        "the lock's counter, after the lock's fence 1"
    );
    let scored: Vec<(String, i64)> = conn.zrange_withscores(&keys.holders, 0, -1).unwrap();
    assert_eq!(scored, vec![(reader.lock_id.clone(), reader.expires_at_ms)]);
    let raw: String = conn.hget(&keys.records, &reader.lock_id).unwrap();
    let record: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(record["fence"], reader.fence.to_string());
    assert_eq!(record["key"], key.as_str());
    let lock_record: Option<String> = conn.get(backend.lock_key(&key).unwrap()).unwrap();
    assert_eq!(lock_record, None, "a reader writes no lock record");

    assert!(matches!(
        backend.acquire(&key, TTL).unwrap(),
        AcquireOutcome::Locked
    ));
    assert!(release_shared(&backend, &key, &reader.lock_id));
    let writer = lease(backend.acquire(&key, TTL));
    assert_eq!(writer.fence.value(), 3);
    assert!(backend.release(&writer.lock_id).unwrap());
}

/// A dead reader is not kept alive by a live one: once its own expiry passes it is no longer
/// counted (the live reader's release lets the writer in), and the next reader's grant deletes
/// its record.
#[test]
fn an_expired_reader_counts_for_nothing_and_is_reclaimed() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("shared-expiry");
    let keys = backend.shared_keys(&key).unwrap();
    let dead = lease(backend.acquire_as(&key, Mode::Shared, Duration::from_millis(100)));
    let live = lease(backend.acquire_as(&key, Mode::Shared, TTL));
    wait_until("the short reader to expire", PATIENT, || {
        backend.holders(&key, LeaseKind::Shared).unwrap().len() == 1
    });
    assert_eq!(
        stored_readers(&mut conn, &keys.records).len(),
        2,
        "not reclaimed yet: only a grant reclaims"
    );
    assert!(release_shared(&backend, &key, &live.lock_id));
    let writer = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&writer.lock_id).unwrap());

    let next = lease(backend.acquire_as(&key, Mode::Shared, TTL));
    assert_eq!(
        stored_readers(&mut conn, &keys.records),
        vec![next.lock_id.clone()]
    );
    assert!(!release_shared(&backend, &key, &dead.lock_id));
    assert!(release_shared(&backend, &key, &next.lock_id));
}

/// A readers key that holds another Redis type refuses the exclusive and the shared acquire
/// alike (`Internal`, naming it) before anything is written.
#[test]
fn a_readers_key_of_another_type_is_refused() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("shared-foreign");
    let keys = backend.shared_keys(&key).unwrap();
    let _: () = conn.set(&keys.holders, "not a set").unwrap();

    let error = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    assert!(error.message().contains(&keys.holders), "{error}");
    let error = backend.acquire_as(&key, Mode::Shared, TTL).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    assert!(error.message().contains(&keys.holders), "{error}");
    let counter: Option<i64> = conn.get(backend.fence_key(&key).unwrap()).unwrap();
    assert_eq!(counter, None, "no fence taken");
    assert!(!backend.is_locked(&key).unwrap(), "nothing was written");
    let kept: String = conn.get(&keys.holders).unwrap();
    assert_eq!(kept, "not a set");
    let _: () = conn.del(&keys.holders).unwrap();
}

/// Releases the shared hold `lock_id` on `key`: whether it was live.
fn release_shared(backend: &syncguard::redis::RedisBackend, key: &str, lock_id: &str) -> bool {
    backend.release_as(key, LeaseKind::Shared, lock_id).unwrap()
}
