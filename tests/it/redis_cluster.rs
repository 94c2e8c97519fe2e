//! The Redis backend on a Redis Cluster (3 primaries, 3 replicas) started by the tests: the
//! contract suites, the cluster key layout (against `tests/data/redis_cluster_keys.json` and
//! the Cluster's own `CLUSTER KEYSLOT`), `min_replicas`, and a failover in the middle of
//! contention.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{ErrorCode, LockBackend, Locker, Lookup};

use crate::support::failover::{FailoverRun, Topology};
use crate::support::stopped::Stopped;
use crate::support::{RedisCluster, TTL, lease, shared_cluster, shared_redis, unique};

fn cluster_backend() -> RedisBackend {
    RedisBackend::connect(&shared_cluster().url()).expect("connect to the test Cluster")
}

syncguard::backend_contract!(cluster_backend);
syncguard::guard_contract!(topology: cluster_backend);
syncguard::semaphore_contract!(cluster_backend);
syncguard::line_contract!(topology: cluster_backend);
syncguard::shared_contract!(topology: cluster_backend);
syncguard::multi_contract!(cluster_backend);
syncguard::lost_answer_contract!(cluster_backend);
syncguard::break_contract!(cluster_backend);
syncguard::watch_contract!(cluster_backend);
syncguard::leadership_contract!(cluster_backend);

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/redis_cluster_keys.json"
);

fn vectors() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    match serde_json::from_str(&text).expect("vectors are JSON") {
        Value::Object(map) => map,
        other => panic!("vectors must be a JSON object, got {other}"),
    }
}

fn text<'a>(entry: &'a Value, name: &str) -> &'a str {
    entry[name]
        .as_str()
        .unwrap_or_else(|| panic!("vector field {name:?} must be a string in {entry}"))
}

fn fields(entry: &Value) -> BTreeSet<&str> {
    entry
        .as_object()
        .unwrap_or_else(|| panic!("vector must be an object: {entry}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Every vector of the cluster layout: the keys `KeyLayout::Cluster` names, and the hash slot
/// each lands in according to the Cluster itself. A section or field this test does not know
/// fails it.
#[test]
fn every_cluster_layout_vector_matches() {
    let vectors = vectors();
    assert_eq!(
        vectors.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        BTreeSet::from(["about", "locks", "lock_ids", "errors"]),
        "a section this test does not check would be silently skipped"
    );
    let cluster = shared_cluster();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    let mut expect = |what: String, actual: String, expected: &str| {
        if actual != expected {
            mismatches.push(format!("{what} = {actual:?}, expected {expected:?}"));
        }
    };
    for entry in vectors["locks"].as_array().expect("locks is an array") {
        assert_eq!(
            fields(entry),
            BTreeSet::from(["prefix", "key", "lock_key", "fence_key", "slot"])
        );
        let (prefix, key) = (text(entry, "prefix"), text(entry, "key"));
        let slot = entry["slot"].as_u64().expect("slot is a number");
        let lock_key = KeyLayout::Cluster.lock_key(prefix, key).unwrap();
        let fence_key = KeyLayout::Cluster.fence_key(prefix, key).unwrap();
        let call = format!("({prefix:?}, {key:.40?})");
        expect(
            format!("lock_key{call}"),
            lock_key.clone(),
            text(entry, "lock_key"),
        );
        expect(
            format!("fence_key{call}"),
            fence_key.clone(),
            text(entry, "fence_key"),
        );
        for redis_key in [&lock_key, &fence_key] {
            expect(
                format!("slot of {redis_key:.50?}"),
                cluster.key_slot(redis_key).to_string(),
                &slot.to_string(),
            );
        }
        checked += 1;
    }
    for entry in vectors["lock_ids"]
        .as_array()
        .expect("lock_ids is an array")
    {
        assert_eq!(
            fields(entry),
            BTreeSet::from(["prefix", "lock_id", "index_key", "slot"])
        );
        let (prefix, lock_id) = (text(entry, "prefix"), text(entry, "lock_id"));
        let index_key = KeyLayout::Cluster.index_key(prefix, lock_id).unwrap();
        expect(
            format!("index_key({prefix:?}, {lock_id:?})"),
            index_key.clone(),
            text(entry, "index_key"),
        );
        expect(
            format!("slot of {index_key:?}"),
            cluster.key_slot(&index_key).to_string(),
            &entry["slot"]
                .as_u64()
                .expect("slot is a number")
                .to_string(),
        );
        checked += 1;
    }
    for entry in vectors["errors"].as_array().expect("errors is an array") {
        assert_eq!(fields(entry), BTreeSet::from(["prefix", "key", "error"]));
        let (prefix, key) = (text(entry, "prefix"), text(entry, "key"));
        match KeyLayout::Cluster.lock_key(prefix, key) {
            Err(error) if error.code().as_str() == text(entry, "error") => {}
            other => mismatches.push(format!(
                "lock_key({prefix:?}, {key:?}) = {other:?}, expected {}",
                text(entry, "error")
            )),
        }
        checked += 1;
    }
    assert!(
        mismatches.is_empty(),
        "{} vectors disagree:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        checked >= 20,
        "expected the full vector file, found {checked}"
    );
}

/// A lock's record and fence counter share one hash slot on the Cluster; its index entry is in
/// the lock id's own slot, and the lock id alone (two requests: the index, then the record)
/// still extends and releases the lock.
#[test]
fn a_lock_id_alone_finds_its_lock() {
    let cluster = shared_cluster();
    let backend = cluster_backend();
    assert_eq!(backend.layout(), KeyLayout::Cluster);
    for name in ["plain", "with{braces}", "}starts-with-a-brace"] {
        let key = unique(name);
        let lease = lease(backend.acquire(&key, TTL));
        let lock_key = backend.lock_key(&key).unwrap();
        let slot = cluster.key_slot(&lock_key);
        assert_eq!(
            cluster.key_slot(&backend.fence_key(&key).unwrap()),
            slot,
            "{key}"
        );
        let index_key = backend.index_key(&lease.lock_id).unwrap();
        assert_eq!(
            cluster.key_slot(&index_key),
            cluster.key_slot(&lease.lock_id),
            "the index entry lies in the lock id's own slot"
        );
        let indexed: Option<String> = redis::cmd("GET")
            .arg(&index_key)
            .query(&mut cluster.raw())
            .unwrap();
        assert_eq!(indexed.as_deref(), Some(lock_key.as_str()));
        // A backend that knows nothing but the lock id (as `syncguard release --lock-id`).
        let other = cluster_backend();
        let found = other
            .lookup_raw(Lookup::LockId(&lease.lock_id))
            .unwrap()
            .expect("found by id");
        assert_eq!(found.key, key);
        let long = Duration::from_secs(600);
        assert!(other.extend(&lease.lock_id, long).unwrap().is_some());
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&index_key)
            .query(&mut cluster.raw())
            .unwrap();
        assert!(ttl > 300_000, "an extend renews the index entry: {ttl}");
        assert!(other.release(&lease.lock_id).unwrap());
        assert!(!backend.is_locked(&key).unwrap());
        assert!(!other.release(&lease.lock_id).unwrap(), "released once");
    }
}

/// Lock ids on a Cluster are the specification's plain ids: many locks of one key get ids
/// whose index entries spread over the slots (ids chosen to hash to the lock's slot would all
/// share it).
#[test]
fn cluster_lock_ids_have_no_structure() {
    let cluster = shared_cluster();
    let backend = cluster_backend();
    let key = unique("one-key-many-ids");
    let slot = cluster.key_slot(&backend.lock_key(&key).unwrap());
    let mut slots = BTreeSet::new();
    let mut in_lock_slot = 0;
    for _ in 0..40 {
        let lease = lease(backend.acquire(&key, TTL));
        assert_eq!(lease.lock_id.len(), 22);
        let index_slot = cluster.key_slot(&backend.index_key(&lease.lock_id).unwrap());
        in_lock_slot += usize::from(index_slot == slot);
        slots.insert(index_slot);
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    assert!(slots.len() > 30, "{} distinct index slots", slots.len());
    assert!(
        in_lock_slot < 5,
        "{in_lock_slot} ids hashed to the lock's slot"
    );
}

/// The windows between the script and the index command: an index entry without its record
/// (or pointing at another holder's) releases nothing, and a record whose index entry is
/// missing still releases and extends through its guard, which knows the key.
#[test]
fn index_and_record_out_of_step_are_safe() {
    use syncguard::driver::{Driver, DriverExt as _, Key, LeaseRef, LockId, Outcome, Ttl};

    let cluster = shared_cluster();
    let backend = cluster_backend();
    let mut raw = cluster.raw();

    // An index entry written for an acquisition that was refused: it names a lock held by
    // another lock id.
    let key = unique("held-by-another");
    let holder = lease(backend.acquire(&key, TTL));
    let stray = LockId::generate();
    let stray_index = backend.index_key(stray.as_str()).unwrap();
    redis::cmd("SET")
        .arg(&stray_index)
        .arg(backend.lock_key(&key).unwrap())
        .arg("PX")
        .arg(60_000)
        .exec(&mut raw)
        .unwrap();
    assert!(
        !backend.release(stray.as_str()).unwrap(),
        "not held by the stray id"
    );
    assert!(backend.extend(stray.as_str(), TTL).unwrap().is_none());
    assert!(
        backend
            .lookup(Lookup::LockId(stray.as_str()))
            .unwrap()
            .is_none()
    );
    assert!(
        backend.is_locked(&key).unwrap(),
        "the holder's lock survives"
    );

    // An index entry whose record never came (or is gone).
    let orphan = LockId::generate();
    redis::cmd("SET")
        .arg(backend.index_key(orphan.as_str()).unwrap())
        .arg(backend.lock_key(&unique("never-locked")).unwrap())
        .arg("PX")
        .arg(60_000)
        .exec(&mut raw)
        .unwrap();
    assert!(!backend.release(orphan.as_str()).unwrap());

    // A record whose index entry is missing (the process died before writing it).
    redis::cmd("DEL")
        .arg(backend.index_key(&holder.lock_id).unwrap())
        .exec(&mut raw)
        .unwrap();
    assert!(
        !backend.release(&holder.lock_id).unwrap(),
        "a bare id cannot find it"
    );
    let lock_id = LockId::new(&holder.lock_id).unwrap();
    let user_key = Key::new(&key).unwrap();
    let guard = LeaseRef::new(&lock_id).with_key(&user_key);
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    assert!(matches!(
        backend.extend_lease(guard, ttl).unwrap(),
        Outcome::Applied(_)
    ));
    assert!(matches!(
        backend.release_lease(guard).unwrap(),
        Outcome::Applied(())
    ));
    assert!(!backend.is_locked(&key).unwrap());
}

/// A `redis-cluster://` URL naming a server without cluster support is refused at `build()`,
/// saying so.
#[test]
fn a_single_server_is_no_cluster() {
    let url = format!("redis-cluster://127.0.0.1:{}/", shared_redis().port);
    let err = RedisBackend::connect(&url).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert_eq!(
        err.message(),
        format!(
            "the Redis server at 127.0.0.1:{} is not a Cluster node (cluster support disabled): \
             use a redis:// URL for a single server",
            shared_redis().port
        )
    );
}

/// With `min_replicas=1` acquisitions wait for the replica and succeed; asking for more
/// replicas than the Cluster has fails with a transient code and leaves the key free.
#[test]
fn min_replicas_waits_for_the_replica() {
    let url = shared_cluster().url();
    let backend = RedisBackend::builder()
        .url(format!("{url}?min_replicas=1&replica_timeout=1000ms"))
        .build()
        .unwrap();
    let key = unique("replicated");
    let lease = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&lease.lock_id).unwrap());

    let demanding = RedisBackend::builder()
        .url(url)
        .min_replicas(2)
        .replica_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let err = demanding.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.code().is_transient());
    assert!(
        err.message().contains("of the 2 replicas required"),
        "{err}"
    );
    assert!(!backend.is_locked(&key).unwrap(), "the lock was released");
}

/// `min_replicas` covers the index entry's node too (issue 30): an acquisition is granted only
/// once the replicas of its record's primary and of its index entry's primary both have it, so
/// that a failover of either loses neither the fence nor the way to the lock by its lock id.
/// Staged: one primary's replica is stopped (SIGSTOP), so nothing written there is
/// acknowledged; of the acquisitions whose record lies elsewhere, those whose index entry lies
/// there are released again and refused, the others granted.
#[test]
fn min_replicas_waits_for_the_index_entry_too() {
    let cluster = RedisCluster::start();
    let backend = RedisBackend::builder()
        .url(format!(
            "{}?min_replicas=1&replica_timeout=500ms",
            cluster.url()
        ))
        .read_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let asked = cluster.nodes[0].port;
    let primary_of = |storage_key: &str| {
        cluster
            .primary_of(cluster.key_slot(storage_key), asked)
            .expect("a primary serves the slot")
    };
    let stalled = cluster
        .primary_of(0, asked)
        .expect("a primary serves slot 0");
    let replica = Stopped::replica_of(stalled);
    let (mut granted, mut refused) = (0, 0);
    for _ in 0..200 {
        if granted > 0 && refused > 0 {
            break;
        }
        let key = unique("index-replicated");
        if primary_of(&KeyLayout::Cluster.lock_key("syncguard", &key).unwrap()) == stalled {
            continue;
        }
        match backend.acquire(&key, TTL) {
            Ok(syncguard::AcquireOutcome::Acquired(held)) => {
                let index = KeyLayout::Cluster
                    .index_key("syncguard", &held.lock_id)
                    .unwrap();
                assert_ne!(
                    primary_of(&index),
                    stalled,
                    "granted, though its index entry lies on the primary whose replica \
                     acknowledges nothing"
                );
                assert!(backend.release(&held.lock_id).unwrap());
                granted += 1;
            }
            Ok(syncguard::AcquireOutcome::Locked) => panic!("{key} is locked"),
            Err(err) => {
                assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
                assert!(
                    err.message().contains("of the 1 replicas required"),
                    "{err}"
                );
                assert!(!backend.is_locked(&key).unwrap(), "the lock was released");
                refused += 1;
            }
        }
    }
    drop(replica);
    assert!(
        granted > 0 && refused > 0,
        "{granted} granted, {refused} refused"
    );
}

/// A primary dies in the middle of contention; its replica takes over; the dead node comes
/// back as a replica. With `min_replicas=1`: never two holders at once, fences strictly grow,
/// every error is a typed transient one, and operations resume.
#[test]
fn failover_in_the_middle_of_contention() {
    let mut cluster = RedisCluster::start();
    let key = unique("failover");
    let url = format!("{}?min_replicas=1&replica_timeout=500ms", cluster.url());
    let slot = cluster.key_slot(&KeyLayout::Cluster.lock_key("syncguard", &key).unwrap());
    let observer = cluster.url();
    FailoverRun::new(&url, &key).run(
        &observer,
        &mut ClusterFailover {
            cluster: &mut cluster,
            slot,
            killed: None,
        },
    );
}

struct ClusterFailover<'a> {
    cluster: &'a mut RedisCluster,
    slot: u16,
    killed: Option<(u16, u16)>,
}

impl Topology for ClusterFailover<'_> {
    fn kill_primary(&mut self) {
        let asked = self.cluster.nodes[0].port;
        let primary = self
            .cluster
            .primary_of(self.slot, asked)
            .expect("a primary serves the slot");
        let survivor = self
            .cluster
            .nodes
            .iter()
            .map(|n| n.port)
            .find(|&p| p != primary)
            .expect("another node");
        self.cluster.node_mut(primary).kill();
        self.killed = Some((primary, survivor));
    }

    fn await_promotion(&mut self) {
        let (killed, survivor) = self.killed.expect("a primary was killed");
        let slot = self.slot;
        let cluster = &*self.cluster;
        cluster.await_condition("a replica to take over the slot", || {
            cluster
                .primary_of(slot, survivor)
                .is_some_and(|p| p != killed)
                && crate::support::cluster_info(survivor)
                    .get("cluster_state")
                    .map(String::as_str)
                    == Some("ok")
        });
    }

    fn restart_killed(&mut self) {
        let (killed, _) = self.killed.expect("a primary was killed");
        self.cluster.node_mut(killed).start();
        let ports: Vec<u16> = self.cluster.nodes.iter().map(|n| n.port).collect();
        self.cluster.await_healthy(&ports);
    }
}

/// A batch of renewals whose locks lie in many hash slots (so on every node): one answer per
/// lease, in order, the unknown one included.
#[test]
fn renewals_in_one_batch_span_slots() {
    use syncguard::driver::{Driver, LeaseRef, LockId, Outcome, Ttl};

    let backend = cluster_backend();
    let keys: Vec<String> = (0..24).map(|n| unique(&format!("batch-{n}"))).collect();
    let leases: Vec<_> = keys
        .iter()
        .map(|key| lease(backend.acquire(key, TTL)))
        .collect();
    let slots: BTreeSet<u16> = keys
        .iter()
        .map(|key| shared_cluster().key_slot(&backend.lock_key(key).unwrap()))
        .collect();
    assert!(slots.len() > 3, "the keys spread over slots");
    let unknown = LockId::generate();
    let mut ids: Vec<LockId> = leases
        .iter()
        .map(|l| LockId::new(&l.lock_id).unwrap())
        .collect();
    ids.insert(5, unknown);
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let batch: Vec<_> = ids.iter().map(|id| (LeaseRef::new(id), ttl)).collect();
    let answers = backend.extend_leases(&batch);
    assert_eq!(answers.len(), batch.len());
    for (i, answer) in answers.into_iter().enumerate() {
        match answer.unwrap() {
            Outcome::NotFound if i == 5 => {}
            Outcome::Applied(extension) if i != 5 => {
                assert!(extension.expires_at_ms > 0)
            }
            other => panic!("lease {i}: {other:?}"),
        }
    }
    for l in &leases {
        assert!(backend.release(&l.lock_id).unwrap());
    }
}

/// A `WAIT` whose node connection is cut off fails the acquisition (transient, the lock
/// released); the cluster client must not resend it on a new connection, where a server that
/// records offsets only after replicated commands would count, at once, a replica that never
/// got the acquisition (Redis 7.0 records one after the connection's first `PING`, so there a
/// resent `WAIT` only waits again, in vain). Staged: the key's replica is stopped (SIGSTOP), so
/// the acquisition's `WAIT` blocks; the test then kills that client on the primary.
#[test]
fn a_wait_cut_off_is_not_resent_on_a_fresh_connection() {
    use crate::support::redis_topology::connection;

    let cluster = RedisCluster::start();
    let key = unique("cut-wait");
    let slot = cluster.key_slot(&KeyLayout::Cluster.lock_key("syncguard", &key).unwrap());
    let primary = cluster
        .primary_of(slot, cluster.nodes[0].port)
        .expect("a primary serves the slot");
    // Long enough that the WAIT is still blocked when the test finds it: a hang guard only.
    let backend = RedisBackend::builder()
        .url(format!(
            "{}?min_replicas=1&replica_timeout=20000ms",
            cluster.url()
        ))
        .read_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Once acknowledged by the replica (so that it has acknowledged something, as a replica
    // that was up for a while has), and the pool's connections exist.
    let first = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&first.lock_id).unwrap());
    let replica = Stopped::replica_of(primary);
    let acquiring = {
        let key = key.clone();
        std::thread::spawn(move || backend.acquire(&key, TTL).map(|_| ()))
    };
    let mut admin = connection(primary).unwrap();
    cluster.await_condition("the acquisition's WAIT to block", || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
        let waiting = clients
            .lines()
            .find(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                fields.contains(&"cmd=wait") && fields.contains(&"flags=b")
            })
            .and_then(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_owned);
        match waiting {
            Some(id) => {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(&id)
                    .query(&mut admin)
                    .unwrap();
                killed == 1
            }
            None => false,
        }
    });
    let outcome = acquiring.join().unwrap();
    drop(replica);
    let err = outcome.expect_err("a WAIT whose connection was cut off confirmed nothing");
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(
        err.message().contains("could not confirm that 1 replicas"),
        "{err}"
    );
    let plain = RedisBackend::connect(&cluster.url()).unwrap();
    assert!(!plain.is_locked(&key).unwrap(), "the lock was released");
}

/// Issue 40, item 6: one primary is down (killed, and its replica stopped so that nothing
/// takes over). A new backend still connects, through the nodes that answer, and serves the
/// slots whose primaries are up; a key on the dead primary fails with a transient error, so
/// that a waiting caller tries again.
#[test]
fn a_primary_down_leaves_the_other_slots_served() {
    let mut cluster = RedisCluster::start();
    // Slots that no primary serves must not take the others down with them.
    for node in &cluster.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut node.connection())
            .unwrap();
    }
    let asked = cluster.nodes[0].port;
    let primary_of = |key: &str| {
        let slot = cluster.key_slot(&KeyLayout::Cluster.lock_key("syncguard", key).unwrap());
        cluster
            .primary_of(slot, asked)
            .expect("a primary serves the slot")
    };
    let dead_key = unique("primary-down");
    let dead = primary_of(&dead_key);
    let live_key = std::iter::repeat_with(|| unique("primary-up"))
        .find(|key| primary_of(key) != dead)
        .expect("a key on another primary");
    let _replica = Stopped::replica_of(dead);
    cluster.node_mut(dead).kill();

    let backend = RedisBackend::connect(&cluster.url()).expect("connect through the live nodes");
    assert!(!backend.is_locked(&live_key).unwrap());
    let locker = Locker::new(backend);
    // A lock's index entry lies in its lock id's own slot, on the dead primary for about one
    // lock id in three: that attempt fails (transient, nothing left held) and the wait tries
    // again with a new lock id.
    let guard = locker
        .try_lock_for(&live_key, Duration::from_secs(60))
        .expect("a key on a live primary is served")
        .expect("the key is free");
    guard.release().expect("released");
    let error = locker
        .try_lock(&dead_key)
        .expect_err("the key's primary is down");
    assert!(error.code().is_transient(), "{error:?}");
}
