//! An operator's break and a leader's proclaim as Redis stores them (issue 42), driver-level
//! against real servers: the marker of a broken lock is the TypeScript SyncGuard's record
//! (fields, `PX` TTL, index entry), every kind breaks in the cluster layout on one server and on
//! a Redis Cluster, a proclaim replaces the holder text in both layouts, a break is announced as
//! a release, a marker outlives a restart of a Redis that keeps an append-only file, and the
//! heartbeat's scripts are the ones they were. The shared `break_contract!` runs elsewhere.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use redis::Commands as _;
use serde_json::Value;
use syncguard::driver::{
    Acquisition, BreakDelay, Broken, Driver as _, DriverExt as _, Find, Holder, Key, LeaseKind,
    LeaseRef, LockId, LockRecord, Mode, Outcome, Request, Ttl, is_marker,
};
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{ErrorCode, Lease};

use crate::support::redis_topology::{Node, data_node_args};
use crate::support::{
    PATIENT, RedisServer, TTL, break_all, break_note, held_in, patient_redis, shared_cluster,
    shared_redis, shared_redis_namespace, unique,
};

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).unwrap()
}

#[track_caller]
fn is_refused(backend: &RedisBackend, key: &Key, mode: Mode) -> bool {
    let request = Request::one(key, ttl(TTL)).mode(mode);
    matches!(backend.acquire_one(&request), Ok(Acquisition::Locked))
}

/// Checks that `marker` is a marker of `key` that takes the place of `holder` with `fence`,
/// the note as its holder text, acquired at the store's now.
#[track_caller]
fn assert_marker(marker: &LockRecord, key: &Key, fence: u64) {
    assert!(is_marker(&marker.lock_id), "{marker:?}");
    assert_eq!(marker.key, key.as_str());
    assert_eq!(marker.fence.value(), fence, "the key's next fence");
    assert_eq!(marker.holder.as_deref(), Some(break_note().as_str()));
    assert!(marker.expires_at_ms > marker.acquired_at_ms, "{marker:?}");
}

fn id(lease: &Lease) -> LockId {
    LockId::new(&lease.lock_id).unwrap()
}

/// The script built from these files of `src/redis/scripts/` after the prelude, as the
/// backend builds it.
macro_rules! script {
    ($($file:literal),+) => {
        redis::Script::new(concat!(
            include_str!("../../src/redis/scripts/prelude.lua"),
            $(include_str!(concat!("../../src/redis/scripts/", $file))),+
        ))
    };
}

/// An operator's break of a lock, built from its parts as the backend builds it.
macro_rules! break_lock_script {
    () => {
        script!(
            "typed.lua",
            "record.lua",
            "fence.lua",
            "take.lua",
            "break.lua",
            "break_lock.lua"
        )
    };
}

/// The SHA1 of [`script!`]'s script.
macro_rules! script_sha {
    ($($file:literal),+) => {
        script!($($file),+).get_hash().to_owned()
    };
}

// ---------------------------------------------------------------------------------------------
// The TypeScript layout's marker
// ---------------------------------------------------------------------------------------------

/// A broken lock's marker in the TypeScript layout is exactly the record and index entry a
/// TypeScript SyncGuard acquisition writes (its five fields and our holder, `PX` TTLs on both,
/// `prefix:id:<lockId>`), the broken holder's index entry is gone, and the counter moved on:
/// every key under the prefix is accounted for.
#[test]
fn a_broken_lock_leaves_a_typescript_record_in_its_place() {
    let (backend, prefix) = shared_redis_namespace(KeyLayout::TypeScript);
    let mut conn = shared_redis().connection();
    let key = Key::new(&unique("break-ts")).unwrap();
    let held = held_in(&backend, &key, Mode::Exclusive, "web-1:42 job");
    let delay = Duration::from_secs(20);

    let broken = break_all(
        &backend,
        &key,
        LeaseKind::Lock,
        None,
        BreakDelay::For(ttl(delay)),
    );
    let [holder] = broken.holders.as_slice() else {
        panic!("one holder broken: {broken:?}");
    };
    assert_eq!(holder.lock_id, held.lock_id);
    assert_eq!(holder.fence, held.fence);
    assert_eq!(holder.holder.as_deref(), Some("web-1:42 job"));
    let [marker] = broken.markers.as_slice() else {
        panic!("one marker: {broken:?}");
    };
    assert_marker(marker, &key, held.fence.value() + 1);
    assert_eq!(
        marker.expires_at_ms - marker.acquired_at_ms,
        delay.as_millis() as i64
    );

    let lock_key = backend.lock_key(key.as_str()).unwrap();
    let raw: String = conn.get(&lock_key).unwrap();
    let stored: Value = serde_json::from_str(&raw).unwrap();
    let fields: BTreeSet<&str> = stored.as_object().unwrap().keys().map(|k| &**k).collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "lockId",
            "expiresAtMs",
            "acquiredAtMs",
            "key",
            "fence",
            "holder"
        ])
    );
    assert_eq!(stored["lockId"], marker.lock_id.as_str());
    assert_eq!(stored["expiresAtMs"], marker.expires_at_ms);
    assert_eq!(stored["acquiredAtMs"], marker.acquired_at_ms);
    assert_eq!(stored["key"], key.as_str());
    assert_eq!(stored["fence"], format!("{:015}", held.fence.value() + 1));
    assert_eq!(stored["holder"], break_note().as_str());
    let record_ttl: i64 = conn.pttl(&lock_key).unwrap();
    assert!(
        record_ttl > 0 && record_ttl <= delay.as_millis() as i64,
        "{record_ttl}"
    );

    let marker_index = format!("{prefix}:id:{}", marker.lock_id);
    assert_eq!(marker_index, backend.index_key(&marker.lock_id).unwrap());
    let pointed: String = conn.get(&marker_index).unwrap();
    assert_eq!(pointed, lock_key);
    let index_ttl: i64 = conn.pttl(&marker_index).unwrap();
    assert!(
        index_ttl > 0 && index_ttl <= delay.as_millis() as i64,
        "{index_ttl}"
    );

    let fence_key = backend.fence_key(key.as_str()).unwrap();
    let counter: u64 = conn.get(&fence_key).unwrap();
    assert_eq!(counter, held.fence.value() + 1);
    let mut keys: Vec<String> = conn.keys(format!("{prefix}:*")).unwrap();
    keys.sort();
    let mut expected = vec![lock_key, marker_index, fence_key];
    expected.sort();
    assert_eq!(keys, expected, "the broken holder's index entry is gone");

    // What every client reads: held, by the marker, which nothing breaks again.
    assert!(backend.key_is_locked(&key).unwrap());
    assert!(is_refused(&backend, &key, Mode::Exclusive));
    let by_id = backend.find(Find::LockId(&LockId::new(&marker.lock_id).unwrap()));
    assert_eq!(by_id.unwrap(), vec![marker.clone()]);
    assert_eq!(backend.find(Find::LockId(&id(&held))).unwrap(), vec![]);
    let again = break_all(&backend, &key, LeaseKind::Lock, None, BreakDelay::None);
    assert_eq!(again, Broken::default());
    assert_eq!(
        backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap(),
        vec![marker.clone()]
    );
}

/// An expired holder met by a break is removed with everything it left (the TypeScript
/// layout's index entry, a permit's record and place in the holders) and not answered; no
/// marker takes its place. The leases are made expired by rewriting their records' expiry
/// into the past (their keys keep their TTLs), so nothing but the script removes them.
#[test]
fn an_expired_holder_is_removed_and_not_answered() {
    let (backend, prefix) = shared_redis_namespace(KeyLayout::TypeScript);
    let mut conn = shared_redis().connection();
    let key = Key::new(&unique("break-expired")).unwrap();
    let lock = held_in(&backend, &key, Mode::Exclusive, "gone");
    let permit = held_in(&backend, &key, Mode::permits(2).unwrap(), "gone too");
    let past = crate::support::redis_now_ms(&mut conn) - 5_000;
    let expire = |raw: String| {
        let mut record: Value = serde_json::from_str(&raw).unwrap();
        record["expiresAtMs"] = past.into();
        record.to_string()
    };
    let lock_key = backend.lock_key(key.as_str()).unwrap();
    let raw: String = conn.get(&lock_key).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&lock_key)
        .arg(expire(raw))
        .arg("KEEPTTL")
        .query(&mut conn)
        .unwrap();
    let semaphore = backend.semaphore_keys(key.as_str()).unwrap();
    let raw: String = conn.hget(&semaphore.permits, &permit.lock_id).unwrap();
    let _: () = conn
        .hset(&semaphore.permits, &permit.lock_id, expire(raw))
        .unwrap();
    let index_key = backend.index_key(&lock.lock_id).unwrap();
    assert!(conn.exists::<_, bool>(&index_key).unwrap());

    for kind in [LeaseKind::Lock, LeaseKind::Permit] {
        let broken = break_all(&backend, &key, kind, None, BreakDelay::RestOfLease);
        assert_eq!(broken, Broken::default(), "{kind:?}");
    }
    let mut keys: Vec<String> = conn.keys(format!("{prefix}*")).unwrap();
    keys.sort();
    let mut expected = vec![backend.fence_key(key.as_str()).unwrap(), semaphore.fence];
    expected.sort();
    assert_eq!(keys, expected, "only the counters are left");
}

// ---------------------------------------------------------------------------------------------
// Every kind, in the cluster layout
// ---------------------------------------------------------------------------------------------

/// A lock, shared holders and permits broken through `backend` (cluster layout): each live
/// holder replaced by a marker with the key's next fence (the lock's counter for a lock and
/// its readers, the semaphore's for permits), found by key and (a lock's) by its lock id; a
/// lock id narrows the break to one holder; a marker is never broken again; the broken
/// holders' leases are gone.
fn breaks_every_kind(backend: &RedisBackend) {
    let key = Key::new(&unique("break-kinds")).unwrap();

    // A lock: the marker lasts the rest of the broken lease.
    let held = held_in(backend, &key, Mode::Exclusive, "writer");
    let broken = break_all(
        backend,
        &key,
        LeaseKind::Lock,
        None,
        BreakDelay::RestOfLease,
    );
    assert_eq!(broken.holders.len(), 1, "{broken:?}");
    assert_eq!(broken.holders[0].lock_id, held.lock_id);
    let [marker] = broken.markers.as_slice() else {
        panic!("one marker: {broken:?}");
    };
    assert_marker(marker, &key, held.fence.value() + 1);
    assert_eq!(marker.expires_at_ms, held.expires_at_ms);
    let marker_id = LockId::new(&marker.lock_id).unwrap();
    assert_eq!(
        backend.find(Find::LockId(&marker_id)).unwrap(),
        vec![marker.clone()],
        "the marker's index entry follows it"
    );
    assert_eq!(backend.find(Find::LockId(&id(&held))).unwrap(), vec![]);
    let renewal = backend.extend_leases(&[(LeaseRef::new(&id(&held)).with_key(&key), ttl(TTL))]);
    assert!(
        matches!(renewal.as_slice(), [Ok(Outcome::NotFound)]),
        "{renewal:?}"
    );
    assert!(is_refused(backend, &key, Mode::Exclusive));
    let again = break_all(backend, &key, LeaseKind::Lock, None, BreakDelay::None);
    assert_eq!(again, Broken::default(), "a marker is never broken again");

    // Shared holders of another key: both broken, in fence order, each replaced.
    let key = Key::new(&unique("break-shared")).unwrap();
    let readers = [
        held_in(backend, &key, Mode::Shared, "reader-1"),
        held_in(backend, &key, Mode::Shared, "reader-2"),
    ];
    let broken = break_all(
        backend,
        &key,
        LeaseKind::Shared,
        None,
        BreakDelay::For(ttl(TTL)),
    );
    let broken_ids: Vec<&str> = broken.holders.iter().map(|h| &*h.lock_id).collect();
    assert_eq!(
        broken_ids,
        [&*readers[0].lock_id, &*readers[1].lock_id],
        "{broken:?}"
    );
    assert_eq!(broken.markers.len(), 2, "{broken:?}");
    assert_marker(&broken.markers[0], &key, 3);
    assert_marker(&broken.markers[1], &key, 4);
    assert_eq!(
        backend.find(Find::Key(&key, LeaseKind::Shared)).unwrap(),
        broken.markers
    );
    assert!(
        is_refused(backend, &key, Mode::Exclusive),
        "shared markers keep a writer out"
    );
    let renewal = backend.extend_leases(&[(LeaseRef::shared(&id(&readers[0]), &key), ttl(TTL))]);
    assert!(
        matches!(renewal.as_slice(), [Ok(Outcome::NotFound)]),
        "{renewal:?}"
    );

    // Permits: one named by its lock id, then the rest without a marker.
    let permits = Mode::permits(3).unwrap();
    let granted = [
        held_in(backend, &key, permits, "worker-1"),
        held_in(backend, &key, permits, "worker-2"),
    ];
    assert_eq!(granted[1].fence.value(), 2, "the semaphore's own counter");
    let broken = break_all(
        backend,
        &key,
        LeaseKind::Permit,
        Some(&id(&granted[0])),
        BreakDelay::For(ttl(TTL)),
    );
    assert_eq!(broken.holders.len(), 1, "{broken:?}");
    assert_eq!(broken.holders[0].lock_id, granted[0].lock_id);
    let [marker] = broken.markers.as_slice() else {
        panic!("one marker: {broken:?}");
    };
    assert_marker(marker, &key, 3);
    let found = backend.find(Find::Key(&key, LeaseKind::Permit)).unwrap();
    let found_ids: Vec<&str> = found.iter().map(|r| &*r.lock_id).collect();
    assert_eq!(found_ids, [&*granted[1].lock_id, &*marker.lock_id]);
    let broken = break_all(backend, &key, LeaseKind::Permit, None, BreakDelay::None);
    assert_eq!(
        broken.holders.len(),
        1,
        "only the live non-marker: {broken:?}"
    );
    assert_eq!(broken.holders[0].lock_id, granted[1].lock_id);
    assert!(broken.markers.is_empty());
    assert_eq!(
        backend.find(Find::Key(&key, LeaseKind::Permit)).unwrap(),
        vec![marker.clone()]
    );
    // More holders than the first draw of marker lock ids: all broken in one break.
    let many = Mode::permits(20).unwrap();
    let held: Vec<Lease> = (0..12)
        .map(|i| held_in(backend, &key, many, &format!("w{i}")))
        .collect();
    let broken = break_all(
        backend,
        &key,
        LeaseKind::Permit,
        None,
        BreakDelay::RestOfLease,
    );
    assert_eq!(broken.holders.len(), 12, "{broken:?}");
    assert_eq!(broken.markers.len(), 12, "{broken:?}");
    let fences: Vec<u64> = broken.markers.iter().map(|m| m.fence.value()).collect();
    assert_eq!(
        fences,
        (held[11].fence.value() + 1..=held[11].fence.value() + 12).collect::<Vec<_>>()
    );
}

#[test]
fn every_kind_breaks_in_the_cluster_layout_on_one_server() {
    breaks_every_kind(&shared_redis_namespace(KeyLayout::Cluster).0);
}

#[test]
fn every_kind_breaks_on_a_redis_cluster() {
    let backend = RedisBackend::connect(&shared_cluster().url()).unwrap();
    breaks_every_kind(&backend);
}

// ---------------------------------------------------------------------------------------------
// Proclaim
// ---------------------------------------------------------------------------------------------

/// A renewal that carries a holder text replaces the stored one and renews; a renewal without
/// one keeps it; a batch mixing both renews each as asked; a permit's or a shared hold's
/// refuses one. The record keeps the TypeScript fields.
fn proclaims(backend: &RedisBackend) {
    let key = Key::new(&unique("proclaim")).unwrap();
    let other = Key::new(&unique("proclaim-other")).unwrap();
    let leader = held_in(backend, &key, Mode::Exclusive, "candidate-a");
    let bystander = held_in(backend, &other, Mode::Exclusive, "bystander");
    let value = Holder::new("leader at 10.0.0.7:8080").unwrap();
    let leader_id = id(&leader);
    let answers =
        backend.extend_leases(&[(LeaseRef::new(&leader_id).with_holder(&value), ttl(TTL))]);
    assert!(
        matches!(answers.as_slice(), [Ok(Outcome::Applied(_))]),
        "a lease known by its lock id alone: {answers:?}"
    );
    let record = &backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap()[0];
    assert_eq!(record.holder.as_deref(), Some(value.as_str()));
    assert_eq!(record.fence, leader.fence, "the term is kept");
    assert_eq!(record.lock_id, leader.lock_id);

    let answers = backend.extend_leases(&[(LeaseRef::new(&leader_id).with_key(&key), ttl(TTL))]);
    assert!(matches!(answers.as_slice(), [Ok(Outcome::Applied(_))]));
    let record = &backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap()[0];
    assert_eq!(record.holder.as_deref(), Some(value.as_str()), "kept");

    let next = Holder::new("leader at 10.0.0.7:9090").unwrap();
    let bystander_id = id(&bystander);
    let answers = backend.extend_leases(&[
        (LeaseRef::new(&bystander_id).with_key(&other), ttl(TTL)),
        (
            LeaseRef::new(&leader_id).with_key(&key).with_holder(&next),
            ttl(TTL),
        ),
    ]);
    assert!(
        matches!(
            answers.as_slice(),
            [Ok(Outcome::Applied(_)), Ok(Outcome::Applied(_))]
        ),
        "{answers:?}"
    );
    let find = |key: &Key| backend.find(Find::Key(key, LeaseKind::Lock)).unwrap()[0].clone();
    assert_eq!(find(&key).holder.as_deref(), Some(next.as_str()));
    assert_eq!(find(&other).holder.as_deref(), Some("bystander"));

    let permit = held_in(backend, &key, Mode::permits(2).unwrap(), "p");
    let readers = Key::new(&unique("proclaim-readers")).unwrap();
    let reader = held_in(backend, &readers, Mode::Shared, "r");
    let permit_id = id(&permit);
    let reader_id = id(&reader);
    let refused = backend.extend_leases(&[
        (
            LeaseRef::permit(&permit_id, &key).with_holder(&next),
            ttl(TTL),
        ),
        (
            LeaseRef::shared(&reader_id, &readers).with_holder(&next),
            ttl(TTL),
        ),
    ]);
    for answer in refused {
        assert_eq!(answer.unwrap_err().code(), ErrorCode::InvalidArgument);
    }
}

#[test]
fn a_proclaim_replaces_the_holder_text_in_the_typescript_layout() {
    let (backend, _) = shared_redis_namespace(KeyLayout::TypeScript);
    proclaims(&backend);
    // The record is still the TypeScript SyncGuard's, holder included.
    let key = Key::new(&unique("proclaim-raw")).unwrap();
    let leader = held_in(&backend, &key, Mode::Exclusive, "a");
    let value = Holder::new("b").unwrap();
    let leader_id = id(&leader);
    let answers =
        backend.extend_leases(&[(LeaseRef::new(&leader_id).with_holder(&value), ttl(TTL))]);
    assert!(matches!(answers.as_slice(), [Ok(Outcome::Applied(_))]));
    let raw: String = shared_redis()
        .connection()
        .get(backend.lock_key(key.as_str()).unwrap())
        .unwrap();
    let stored: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(stored["holder"], "b");
    assert_eq!(stored["lockId"], leader.lock_id.as_str());
}

#[test]
fn a_proclaim_replaces_the_holder_text_in_the_cluster_layout() {
    proclaims(&shared_redis_namespace(KeyLayout::Cluster).0);
}

#[test]
fn a_proclaim_replaces_the_holder_text_on_a_redis_cluster() {
    proclaims(&RedisBackend::connect(&shared_cluster().url()).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Announced as a release
// ---------------------------------------------------------------------------------------------

/// A break of each kind is heard by a release watch on its key, as a release is.
#[test]
fn a_break_is_announced_as_a_release() {
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let (backend, _) = shared_redis_namespace(layout);
        for (mode, kind) in [
            (Mode::Exclusive, LeaseKind::Lock),
            (Mode::Shared, LeaseKind::Shared),
            (Mode::permits(2).unwrap(), LeaseKind::Permit),
        ] {
            let key = unique("break-heard");
            let (tell, heard) = mpsc::channel::<String>();
            let tell = Mutex::new(tell);
            let watch = backend
                .watch_releases(Arc::new(move |key: &str| {
                    let _ = tell.lock().unwrap().send(key.to_owned());
                }))
                .unwrap()
                .expect("the Redis backend watches releases");
            let key_ref = Key::new(&key).unwrap();
            watch.watch(&key_ref);
            // The subscription starts on the watch's own thread: break (and leave the key
            // free, no marker) until a break is heard. An acquisition announces nothing.
            let deadline = Instant::now() + PATIENT;
            loop {
                held_in(&backend, &key_ref, mode, "held");
                let broken = break_all(&backend, &key_ref, kind, None, BreakDelay::None);
                assert_eq!(broken.holders.len(), 1, "{layout:?} {kind:?}: {broken:?}");
                if heard
                    .recv_timeout(Duration::from_millis(300))
                    .is_ok_and(|heard| heard == key)
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{layout:?} {kind:?}: no break of {key:?} was heard"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A break sent again
// ---------------------------------------------------------------------------------------------

/// The pool sends a call again on a connection found dropped, which may have run it: the break
/// scripts, run twice with the same marker lock ids, apply once and then say so, breaking
/// nothing more (here run raw, as the backend builds them, so the repeat is certain).
#[test]
fn a_break_sent_again_finds_its_own_markers() {
    let (backend, prefix) = shared_redis_namespace(KeyLayout::TypeScript);
    let mut conn = shared_redis().connection();
    let key = Key::new(&unique("break-again")).unwrap();
    held_in(&backend, &key, Mode::Exclusive, "job");
    let marker_id = syncguard::driver::marker_lock_id();
    let lock_key = backend.lock_key(key.as_str()).unwrap();
    let break_lock = break_lock_script!();
    let mut invocation = break_lock.key(&lock_key);
    invocation
        .key(backend.fence_key(key.as_str()).unwrap())
        .key(backend.index_key(marker_id.as_str()).unwrap())
        .arg(1000)
        .arg(key.as_str())
        .arg(syncguard::driver::FENCE_MAX)
        .arg("rest")
        .arg(break_note().as_str())
        .arg("")
        .arg(format!("{prefix}:id:"))
        .arg(marker_id.as_str());
    let first: Vec<redis::Value> = invocation.invoke(&mut conn).unwrap();
    assert_eq!(first.len(), 3, "broken, with a marker: {first:?}");
    let again: Vec<redis::Value> = invocation.invoke(&mut conn).unwrap();
    assert_eq!(
        again,
        [redis::Value::Int(1), redis::Value::BulkString(Vec::new())]
    );

    let permits = Mode::permits(2).unwrap();
    held_in(&backend, &key, permits, "worker");
    let keys = backend.semaphore_keys(key.as_str()).unwrap();
    let break_holders = script!(
        "typed.lua",
        "record.lua",
        "fence.lua",
        "take.lua",
        "semaphore.lua",
        "break.lua",
        "break_holders.lua"
    );
    let mut invocation = break_holders.key(&keys.holders);
    invocation
        .key(&keys.permits)
        .key(&keys.fence)
        .arg(1000)
        .arg(key.as_str())
        .arg(syncguard::driver::FENCE_MAX)
        .arg("rest")
        .arg(break_note().as_str())
        .arg("")
        .arg(format!("{lock_key}:released"))
        .arg(syncguard::driver::marker_lock_id().as_str());
    let first: Vec<redis::Value> = invocation.invoke(&mut conn).unwrap();
    assert_eq!(first.len(), 5, "one broken, one marker: {first:?}");
    let again: Vec<redis::Value> = invocation.invoke(&mut conn).unwrap();
    assert_eq!(again, [redis::Value::Int(1), redis::Value::Int(-1)]);
    assert_eq!(
        backend
            .find(Find::Key(&key, LeaseKind::Permit))
            .unwrap()
            .len(),
        1,
        "one marker"
    );
}

// ---------------------------------------------------------------------------------------------
// A restart
// ---------------------------------------------------------------------------------------------

/// A marker (and the fence counter it moved on) survives a crash and restart of a Redis that
/// keeps an append-only file, fsynced at each write: `--delay` holds across a store restart,
/// and the next grant's fence is still above the broken one's.
#[test]
fn a_marker_survives_a_restart_with_an_append_only_file() {
    let mut node = Node::new("redis-aof", |port, dir| {
        let mut args = data_node_args(port, dir);
        args.extend(
            ["--appendonly", "yes", "--appendfsync", "always"]
                .iter()
                .map(|s| s.to_string()),
        );
        args
    });
    node.start();
    let url = format!("redis://127.0.0.1:{}/", node.port);
    let key = Key::new(&unique("break-aof")).unwrap();
    let held;
    let marker;
    {
        let backend = patient_redis(&url).build().unwrap();
        held = held_in(&backend, &key, Mode::Exclusive, "job");
        let broken = break_all(
            &backend,
            &key,
            LeaseKind::Lock,
            None,
            BreakDelay::For(ttl(Duration::from_secs(120))),
        );
        marker = broken.markers[0].clone();
    }
    node.kill();
    node.start();
    let backend = patient_redis(&url).build().unwrap();
    assert_eq!(
        backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap(),
        vec![marker.clone()]
    );
    assert!(is_refused(&backend, &key, Mode::Exclusive));
    let broken = break_all(&backend, &key, LeaseKind::Lock, None, BreakDelay::None);
    assert_eq!(broken, Broken::default(), "still a marker");
    let mut conn = node.connection();
    redis::cmd("DEL")
        .arg(backend.lock_key(key.as_str()).unwrap())
        .query::<i64>(&mut conn)
        .unwrap();
    let next = held_in(&backend, &key, Mode::Exclusive, "next");
    assert!(next.fence > marker.fence && marker.fence > held.fence);
    node.kill();
}

// ---------------------------------------------------------------------------------------------
// The heartbeat's scripts
// ---------------------------------------------------------------------------------------------

/// How many times the server ran each command, from `INFO commandstats`.
fn command_calls(conn: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, stats) = line.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Acquire, renew and release, in both layouts, cost what they cost before issue 42: each one
/// `EVALSHA` of its own script, built from the same files (the proclaim and the break have
/// scripts of their own, which these never load), and nothing else on the server.
#[test]
fn the_heartbeats_scripts_are_the_ones_they_were() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let hot = [
        script_sha!(
            "fence.lua",
            "take.lua",
            "acquire_free.lua",
            "typed.lua",
            "record.lua",
            "line.lua",
            "lock.lua",
            "acquire.lua"
        ),
        script_sha!("record.lua", "owned.lua", "extend.lua"),
        script_sha!("record.lua", "owned.lua", "release.lua"),
        script_sha!("record.lua", "owned.lua", "extend_record.lua"),
        script_sha!("record.lua", "owned.lua", "release_record.lua"),
    ];
    let apart = [
        script_sha!("record.lua", "owned.lua", "proclaim.lua"),
        script_sha!("record.lua", "owned.lua", "proclaim_record.lua"),
        break_lock_script!().get_hash().to_owned(),
    ];
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let backend = patient_redis(&server.url()).layout(layout).build().unwrap();
        let key = Key::new(&unique("hot")).unwrap();
        let held = held_in(&backend, &key, Mode::Exclusive, "h");
        let held_id = id(&held);
        let renew = || {
            let answers =
                backend.extend_leases(&[(LeaseRef::new(&held_id).with_key(&key), ttl(TTL))]);
            assert!(matches!(answers.as_slice(), [Ok(Outcome::Applied(_))]));
        };
        // The first renewal loads its script (NOSCRIPT, then SCRIPT LOAD); the next runs it.
        renew();
        let before = command_calls(&mut conn);
        renew();
        let after = command_calls(&mut conn);
        let ran = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
        assert_eq!(
            ran("evalsha"),
            1,
            "{layout:?}: one script: {before:?} -> {after:?}"
        );
        assert_eq!(
            ran("eval") + ran("script|load"),
            0,
            "{layout:?}: already loaded"
        );
        assert!(
            backend
                .release_lease(LeaseRef::new(&held_id).with_key(&key))
                .unwrap()
                .is_applied()
        );
    }
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(hot.iter().chain(&apart).collect::<Vec<_>>())
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, [true, true, true, true, true, false, false, false]);
}

/// What the server runs for one uncontended acquisition and its release, from `INFO
/// commandstats` (the scripts' own commands counted with their `EVALSHA`): the free key's
/// acquisition reads neither the line nor the shared holders, nor any key's type, beyond one
/// `EXISTS`, and takes its fence with one `INCR`; the release is the one it was before the
/// line.
#[test]
fn an_uncontended_acquisition_and_release_run_only_what_they_need() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let backend = patient_redis(&server.url()).build().unwrap();
    let release = |held: &Lease, key: &Key| {
        let released = backend.release_lease(LeaseRef::new(&id(held)).with_key(key));
        assert!(released.unwrap().is_applied());
    };
    // The first cycle loads the scripts (NOSCRIPT, then SCRIPT LOAD); the next runs them.
    let warm = Key::new(&unique("warm")).unwrap();
    release(&held_in(&backend, &warm, Mode::Exclusive, "h"), &warm);
    let key = Key::new(&unique("free")).unwrap();
    let before = command_calls(&mut conn);
    let held = held_in(&backend, &key, Mode::Exclusive, "h");
    let after_acquire = command_calls(&mut conn);
    release(&held, &key);
    let after_release = command_calls(&mut conn);
    let ran = |from: &HashMap<String, u64>, to: &HashMap<String, u64>| {
        let mut ran: BTreeMap<String, u64> = BTreeMap::new();
        for (name, calls) in to {
            let calls = calls - from.get(name).unwrap_or(&0);
            if calls > 0 && name != "info" {
                ran.insert(name.clone(), calls);
            }
        }
        ran
    };
    let expected = |commands: &[(&str, u64)]| -> BTreeMap<String, u64> {
        commands
            .iter()
            .map(|(name, calls)| (name.to_string(), *calls))
            .collect()
    };
    assert_eq!(
        ran(&before, &after_acquire),
        expected(&[
            ("evalsha", 1),
            ("time", 1),
            ("exists", 1),
            ("incr", 1),
            ("set", 2)
        ]),
        "the acquisition"
    );
    assert_eq!(
        ran(&after_acquire, &after_release),
        expected(&[
            ("evalsha", 1),
            ("get", 2),
            ("time", 1),
            ("del", 1),
            ("publish", 1)
        ]),
        "the release"
    );
}
