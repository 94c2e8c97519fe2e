//! Pipelines across hash slots on a real Cluster (3 primaries, 3 replicas, started for this
//! module): a guard's extension, a batch of renewals and an acquire reach every node they touch
//! before any reply is awaited — one round trip — and a slot that moves between the writes and
//! the replies is followed.
//!
//! "One round trip" is shown without a clock: one primary is paused for writes (`CLIENT PAUSE
//! … WRITE`, which holds scripts too), so its reply cannot come while it is paused; the
//! commands meant for the other primaries must be applied all the same. Requests sent one after
//! another would wait for the paused node's reply before sending the rest, and the awaited
//! condition would never hold.

use std::time::Duration;

use syncguard::driver::{Driver, DriverExt as _, Key, LeaseRef, LockId, Outcome, Ttl};
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{Lease, LockBackend, Lookup};

use syncguard::testing::support::wait_until;

use crate::support::redis_topology::connection;
use crate::support::{RedisCluster, lease, unique};

const PREFIX: &str = "syncguard";
/// The TTL locks are taken with; renewals ask for [`LONGER`], so a key's PTTL above this one
/// shows that a renewal reached it.
const SHORT: Duration = Duration::from_secs(20);
const LONGER: Duration = Duration::from_secs(90);

/// A backend whose deadlines outlast the pauses below.
fn patient_backend(cluster: &RedisCluster) -> RedisBackend {
    let long = Duration::from_secs(120);
    RedisBackend::builder()
        .url(cluster.url())
        .read_timeout(long)
        .write_timeout(long)
        .build()
        .expect("connect to the test Cluster")
}

fn primary(cluster: &RedisCluster, storage_key: &str) -> u16 {
    let slot = cluster.key_slot(storage_key);
    cluster
        .primary_of(slot, cluster.nodes[0].port)
        .expect("a primary serves the slot")
}

/// The PTTL of `storage_key` on the primary at `port` (which serves its slot).
fn pttl(port: u16, storage_key: &str) -> i64 {
    let mut conn = connection(port).expect("reach the primary");
    redis::cmd("PTTL")
        .arg(storage_key)
        .query(&mut conn)
        .expect("PTTL")
}

fn record_key(key: &str) -> String {
    KeyLayout::Cluster
        .lock_key(PREFIX, key)
        .expect("a valid key")
}

fn index_key(lock_id: &str) -> String {
    KeyLayout::Cluster
        .index_key(PREFIX, lock_id)
        .expect("a valid lock id")
}

/// A lock whose record and index entry lie on different primaries.
fn split_lock(cluster: &RedisCluster, backend: &RedisBackend, name: &str) -> (String, Lease) {
    (0..100)
        .find_map(|_| {
            let key = unique(name);
            let held = lease(backend.acquire(&key, SHORT));
            if primary(cluster, &record_key(&key)) != primary(cluster, &index_key(&held.lock_id)) {
                Some((key, held))
            } else {
                assert!(backend.release(&held.lock_id).unwrap());
                None
            }
        })
        .expect("a lock whose record and index entry lie on different primaries")
}

/// A primary paused for writes until dropped.
struct Paused(u16);

impl Paused {
    fn new(port: u16) -> Paused {
        let mut conn = connection(port).expect("reach the node");
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(600_000)
            .arg("WRITE")
            .query::<()>(&mut conn)
            .expect("CLIENT PAUSE");
        Paused(port)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Ok(mut conn) = connection(self.0) {
            let _ = redis::cmd("CLIENT").arg("UNPAUSE").query::<()>(&mut conn);
        }
    }
}

#[test]
fn pipelines_across_slots() {
    let cluster = RedisCluster::start();
    let backend = std::sync::Arc::new(patient_backend(&cluster));
    a_guards_extension_is_one_round_trip(&cluster, &backend);
    an_index_entry_outlives_its_record(&cluster, &backend);
    a_batch_of_renewals_is_one_round_trip(&cluster, &backend);
    a_slot_that_moved_is_followed(&cluster, &backend);
    an_index_entry_that_cannot_be_written(&cluster, &backend);
}

/// The record and the index entry on different primaries: with the record's primary paused,
/// the index entry's `PEXPIRE` is applied before the script's reply can come.
fn a_guards_extension_is_one_round_trip(
    cluster: &RedisCluster,
    backend: &std::sync::Arc<RedisBackend>,
) {
    let (key, held) = split_lock(cluster, backend, "pipeline-extend");
    let record_port = primary(cluster, &record_key(&key));
    let paused = Paused::new(record_port);
    let extension = {
        let (backend, key, lock_id) = (backend.clone(), key.clone(), held.lock_id.clone());
        std::thread::spawn(move || {
            let key = Key::new(&key).unwrap();
            let lock_id = LockId::new(&lock_id).unwrap();
            backend.extend_lease(
                LeaseRef::new(&lock_id).with_key(&key),
                Ttl::new(LONGER).unwrap(),
            )
        })
    };
    let index = index_key(&held.lock_id);
    let index_port = primary(cluster, &index);
    cluster.await_condition(
        "the index entry's PEXPIRE while the record's node is paused",
        || pttl(index_port, &index) > SHORT.as_millis() as i64,
    );
    drop(paused);
    match extension.join().expect("the extension returns") {
        Ok(Outcome::Applied(extension)) => assert!(extension.expires_at_ms > 0),
        other => panic!("expected the extension applied, got {other:?}"),
    }
    assert!(pttl(record_port, &record_key(&key)) > SHORT.as_millis() as i64);
    assert!(backend.release(&held.lock_id).unwrap());
}

/// How a lease is renewed.
#[derive(Debug, Clone, Copy)]
enum Renewal {
    Guard,
    Batch,
    BareLockId,
}

/// Renews the lock on `key` held under `lock_id` for `ttl`: whether the renewal applied.
fn renew(backend: &RedisBackend, key: &str, lock_id: &str, ttl: Duration, how: Renewal) -> bool {
    let (key, lock_id) = (Key::new(key).unwrap(), LockId::new(lock_id).unwrap());
    let lease = LeaseRef::new(&lock_id).with_key(&key);
    let checked = Ttl::new(ttl).unwrap();
    match how {
        Renewal::Guard => matches!(
            backend.extend_lease(lease, checked),
            Ok(Outcome::Applied(_))
        ),
        Renewal::Batch => matches!(
            backend.extend_leases(&[(lease, checked)]).pop(),
            Some(Ok(Outcome::Applied(_)))
        ),
        Renewal::BareLockId => backend.extend(lock_id.as_str(), ttl).unwrap().is_some(),
    }
}

/// When `storage_key` expires (`PEXPIRETIME`, Unix ms of the node's clock; the nodes share this
/// machine's).
fn expiry_ms(conn: &mut redis::Connection, storage_key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(storage_key)
        .query(conn)
        .expect("PEXPIRETIME")
}

fn now_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1000 + micros / 1000
}

/// The index entry outlives its record (issue 30), also when the record's node applies its
/// write last (its script redirected or retried, its node slower): with the record's primary
/// paused, each renewal's command on the index entry applies first, and the script only once
/// the clock has moved on. After a guard's extension, a batch renewal and an extension by bare
/// lock id, the index entry expires no earlier than its record. (With the same TTL for both it
/// expired first, and for that moment the lock was held but not found by its lock id.)
fn an_index_entry_outlives_its_record(
    cluster: &RedisCluster,
    backend: &std::sync::Arc<RedisBackend>,
) {
    let (key, held) = split_lock(cluster, backend, "index-outlives");
    let (record, index) = (record_key(&key), index_key(&held.lock_id));
    let mut on_record = connection(primary(cluster, &record)).expect("reach the primary");
    let mut on_index = connection(primary(cluster, &index)).expect("reach the primary");
    assert!(
        expiry_ms(&mut on_index, &index) >= expiry_ms(&mut on_record, &record),
        "after the acquisition"
    );
    let patience = Duration::from_secs(120);
    for (how, ttl) in [
        (Renewal::Guard, Duration::from_secs(100)),
        (Renewal::Batch, Duration::from_secs(110)),
        (Renewal::BareLockId, Duration::from_secs(120)),
    ] {
        let before = expiry_ms(&mut on_index, &index);
        let paused = Paused::new(primary(cluster, &record));
        let renewal = {
            let (backend, key, lock_id) = (backend.clone(), key.clone(), held.lock_id.clone());
            std::thread::spawn(move || renew(&backend, &key, &lock_id, ttl, how))
        };
        wait_until(
            "the index entry's command while the record's node is paused",
            patience,
            || expiry_ms(&mut on_index, &index) > before,
        );
        // The script then applies at a later millisecond than the index entry's command.
        let index_applied = now_ms(&mut on_index);
        wait_until("the clock to move on", patience, || {
            now_ms(&mut on_record) > index_applied
        });
        drop(paused);
        assert!(renewal.join().expect("the renewal returns"), "{how:?}");
        let (index_expires, record_expires) = (
            expiry_ms(&mut on_index, &index),
            expiry_ms(&mut on_record, &record),
        );
        assert!(
            index_expires >= record_expires,
            "{how:?}: the index entry expires at {index_expires}, {} ms before its record",
            record_expires - index_expires
        );
    }
    assert!(backend.release(&held.lock_id).unwrap());
}

/// Locks on every primary, the first on the paused one: the others are renewed while it is
/// paused.
fn a_batch_of_renewals_is_one_round_trip(
    cluster: &RedisCluster,
    backend: &std::sync::Arc<RedisBackend>,
) {
    // (key, lock id, the record's primary)
    let mut held: Vec<(String, String, u16)> = (0..24)
        .map(|n| {
            let key = unique(&format!("pipeline-batch-{n}"));
            let lock_id = lease(backend.acquire(&key, SHORT)).lock_id;
            let port = primary(cluster, &record_key(&key));
            (key, lock_id, port)
        })
        .collect();
    let paused_port = held[0].2;
    let others: Vec<(String, u16)> = held
        .iter()
        .filter(|(_, _, port)| *port != paused_port)
        .map(|(key, _, port)| (record_key(key), *port))
        .collect();
    assert!(others.len() > 4, "the locks spread over the primaries");
    held.sort_by_key(|(_, _, port)| *port != paused_port);
    let paused = Paused::new(paused_port);
    let renewals = {
        let (backend, held) = (backend.clone(), held.clone());
        std::thread::spawn(move || {
            let keys: Vec<Key> = held.iter().map(|(k, _, _)| Key::new(k).unwrap()).collect();
            let ids: Vec<LockId> = held
                .iter()
                .map(|(_, id, _)| LockId::new(id).unwrap())
                .collect();
            let ttl = Ttl::new(LONGER).unwrap();
            let batch: Vec<_> = ids
                .iter()
                .zip(&keys)
                .map(|(id, key)| (LeaseRef::new(id).with_key(key), ttl))
                .collect();
            backend
                .extend_leases(&batch)
                .into_iter()
                .map(|answer| matches!(answer, Ok(Outcome::Applied(_))))
                .collect::<Vec<bool>>()
        })
    };
    cluster.await_condition(
        "renewals on the other primaries while one is paused",
        || {
            others
                .iter()
                .all(|(record, port)| pttl(*port, record) > SHORT.as_millis() as i64)
        },
    );
    drop(paused);
    let applied = renewals.join().expect("the renewals return");
    assert_eq!(applied, vec![true; held.len()], "every renewal applied");
    for (_, lock_id, _) in &held {
        assert!(backend.release(lock_id).unwrap());
    }
}

/// The key's slot moves to another primary after the backend's connection read the slot map:
/// the acquire's script meets `MOVED` after both commands were written, and every reply still
/// goes to its own command.
fn a_slot_that_moved_is_followed(cluster: &RedisCluster, backend: &std::sync::Arc<RedisBackend>) {
    let key = unique("pipeline-moved");
    let record = record_key(&key);
    let slot = cluster.key_slot(&record);
    let from = primary(cluster, &record);
    let to = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|&port| port != from && is_primary(cluster, port))
        .expect("another primary");
    // The backend's pooled connection knows the slot map from here on.
    assert!(!backend.is_locked(&unique("pipeline-warm")).unwrap());
    move_empty_slot(slot, from, to);
    cluster.await_condition("every node to see the slot moved", || {
        cluster
            .nodes
            .iter()
            .all(|n| cluster.primary_of(slot, n.port) == Some(to))
    });
    for _ in 0..3 {
        let held = lease(backend.acquire(&key, SHORT));
        assert_eq!(primary(cluster, &record), to);
        let found = backend
            .lookup(Lookup::LockId(&held.lock_id))
            .unwrap()
            .expect("found by its lock id");
        assert_eq!(found.fence, held.fence);
        assert!(backend.release(&held.lock_id).unwrap());
        assert!(!backend.is_locked(&key).unwrap());
    }
}

fn is_primary(cluster: &RedisCluster, port: u16) -> bool {
    crate::support::cluster_nodes(cluster.nodes[0].port)
        .unwrap_or_default()
        .iter()
        .any(|n| n.port == port && n.primary && !n.failed)
}

/// Moves an empty slot between primaries (the documented resharding steps, with no keys to
/// migrate).
fn move_empty_slot(slot: u16, from: u16, to: u16) {
    let id = |port: u16| -> String {
        let mut conn = connection(port).expect("reach the node");
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut conn)
            .expect("CLUSTER MYID")
    };
    let (from_id, to_id) = (id(from), id(to));
    let setslot = |port: u16, args: &[&str]| {
        let mut conn = connection(port).expect("reach the node");
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query::<()>(&mut conn)
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {args:?} on {port}: {e}"));
    };
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    setslot(to, &["NODE", &to_id]);
    setslot(from, &["NODE", &to_id]);
}

/// Every primary but the record's refuses writes (`min-replicas-to-write` above its replica
/// count), so an index entry there cannot be written: a granted acquire is released again and
/// fails with a transient code; a guard's extension and release still apply.
fn an_index_entry_that_cannot_be_written(
    cluster: &RedisCluster,
    backend: &std::sync::Arc<RedisBackend>,
) {
    let (key, held) = split_lock(cluster, backend, "pipeline-unindexed");
    let record_node = primary(cluster, &record_key(&key));
    let refusing: Vec<u16> = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .filter(|&port| port != record_node && is_primary(cluster, port))
        .collect();
    let refusal = Refusal::new(refusing);
    let (lock_key, lock_id) = (Key::new(&key).unwrap(), LockId::new(&held.lock_id).unwrap());
    let guard = LeaseRef::new(&lock_id).with_key(&lock_key);
    assert!(matches!(
        backend.extend_lease(guard, Ttl::new(LONGER).unwrap()),
        Ok(Outcome::Applied(_))
    ));
    assert!(pttl(record_node, &record_key(&key)) > SHORT.as_millis() as i64);

    let refused = (0..200).find_map(|_| {
        let other = unique("pipeline-unindexed-acquire");
        if primary(cluster, &record_key(&other)) != record_node {
            return None;
        }
        match backend.acquire(&other, SHORT) {
            // Its index entry landed on the record's own primary.
            Ok(syncguard::AcquireOutcome::Acquired(granted)) => {
                assert!(backend.release(&granted.lock_id).unwrap());
                None
            }
            other_outcome => Some((other, other_outcome)),
        }
    });
    let (other, outcome) = refused.expect("an acquire whose index entry could not be written");
    match outcome {
        Err(error) => {
            assert!(error.code().is_transient(), "{error}");
            assert!(error.message().contains("index entry"), "{error}");
        }
        other_outcome => panic!("expected a transient error, got {other_outcome:?}"),
    }
    assert!(
        !backend.is_locked(&other).unwrap(),
        "the lock was released again"
    );

    assert!(matches!(
        backend.release_lease(guard),
        Ok(Outcome::Applied(()))
    ));
    assert!(!backend.is_locked(&key).unwrap());
    drop(refusal);
}

/// Primaries that refuse writes until dropped.
struct Refusal(Vec<u16>);

impl Refusal {
    fn new(ports: Vec<u16>) -> Refusal {
        let refusal = Refusal(ports);
        refusal.set(10).expect("CONFIG SET min-replicas-to-write");
        refusal
    }

    fn set(&self, replicas: u32) -> redis::RedisResult<()> {
        for &port in &self.0 {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("min-replicas-to-write")
                .arg(replicas)
                .query::<()>(&mut connection(port)?)?;
        }
        Ok(())
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        let _ = self.set(0);
    }
}
