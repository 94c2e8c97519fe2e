//! Shared holds (readers) on PostgreSQL (issue 34), against the shared cluster directly and
//! through the shared PgBouncer (transaction mode): each reader is a row of its own beside the
//! lock and expires on its own, and a shared acquisition repeated by the pool after a lost
//! answer is one hold. (The shipped contracts run in `postgres.rs` and `pgbouncer.rs`.)

use crate::support::{self, TTL, lease, shared_postgres, shared_postgres_backend, unique};
use syncguard::{AcquireOutcome, LockBackend};

/// The (lock id, fence) of every row of the shared table under `key`, live or not.
fn reader_rows(backend: &syncguard::postgres::PostgresBackend, key: &str) -> Vec<(String, String)> {
    shared_postgres()
        .client()
        .query(
            "SELECT lock_id, fence FROM syncguard_locks_shared WHERE key = $1 ORDER BY fence",
            &[&backend.storage_key(key).unwrap()],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// A shared acquisition whose answer is lost with its connection (the proxy closes it as the
/// answer comes back: the server has granted the hold) is repeated once by the pool on a fresh
/// connection, with the same lock id: the repeat answers the hold the first call was granted
/// (same lock id, same fence), stores no second one, and once it is released a writer gets in
/// (no orphaned reader keeps it out).
fn a_repeated_shared_acquisition_answers_the_first_ones_hold(upstream: u16) {
    let (proxy, backend) = support::postgres_through_a_proxy(upstream);
    let other = shared_postgres_backend();
    let key = unique("shared-repeat");
    // The pool's connection is open before the answer to lose is chosen.
    assert!(backend.readers(&key).unwrap().is_empty());
    let cuts = proxy.answers_cut();
    proxy.cut_answer_to(b"_sacquire_v");
    let held = lease(backend.acquire_shared(&key, TTL));
    assert_eq!(proxy.answers_cut(), cuts + 1, "an answer was lost");
    assert_eq!(held.fence.value(), 1, "the first call's fence");
    assert_eq!(
        reader_rows(&backend, &key),
        [(held.lock_id.clone(), held.fence.to_string())],
        "one reader row, the one answered"
    );
    assert!(backend.release_shared(&key, &held.lock_id).unwrap());
    let writer = lease(other.acquire(&key, TTL));
    assert_eq!(writer.fence.value(), 2, "no fence was drawn twice");
    assert!(other.release(&writer.lock_id).unwrap());
}

support::postgres_both_ways!(
    upstream: [a_repeated_shared_acquisition_answers_the_first_ones_hold],
);

/// Each reader expires on its own: a reader whose expiry has passed (moved back ten minutes,
/// as the clock would have moved on) is not counted — not by `readers`, not by a writer, who
/// is kept out by the live reader alone — and its row is deleted by the next shared
/// acquisition of the key, while the live reader keeps its hold and renews it.
#[test]
fn an_expired_reader_is_reclaimed_and_never_counted() {
    let backend = shared_postgres_backend();
    let key = unique("shared-expiry");
    let dead = lease(backend.acquire_shared(&key, TTL));
    let live = lease(backend.acquire_shared(&key, TTL));
    shared_postgres()
        .client()
        .execute(
            "UPDATE syncguard_locks_shared SET expires_at_ms = expires_at_ms - 600000 \
             WHERE key = $1 AND lock_id = $2",
            &[&backend.storage_key(&key).unwrap(), &dead.lock_id],
        )
        .unwrap();
    let readers = backend.readers_raw(&key).unwrap();
    assert_eq!(readers.len(), 1, "{readers:?}");
    assert_eq!(readers[0].lock_id, live.lock_id);
    assert_eq!(backend.acquire(&key, TTL).unwrap(), AcquireOutcome::Locked);
    assert!(
        backend
            .extend_shared(&key, &live.lock_id, TTL)
            .unwrap()
            .is_some()
    );
    assert_eq!(
        backend.extend_shared(&key, &dead.lock_id, TTL).unwrap(),
        None
    );

    let third = lease(backend.acquire_shared(&key, TTL));
    let rows: Vec<String> = reader_rows(&backend, &key)
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(
        rows,
        [live.lock_id.clone(), third.lock_id.clone()],
        "the expired row is gone"
    );
    assert!(backend.release_shared(&key, &live.lock_id).unwrap());
    assert!(backend.release_shared(&key, &third.lock_id).unwrap());
    let writer = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&writer.lock_id).unwrap());
}
