//! Redis semaphores (issue 25) on every deployment: a single server in both key layouts,
//! Sentinel and a real Cluster. Each suite runs the same checks through `LockBackend`'s permit
//! calls and the `Driver` methods; the single server also checks what is stored.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::Commands as _;
use syncguard::driver::{
    Acquisition, Driver, DriverExt as _, Find, Holder, Key, LeaseKind, LeaseRef, LockId, Mode,
    Permits, Request, Ttl,
};
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{Coverage, ErrorCode, Lease, LockBackend};

use crate::support::{
    TTL, lease, patient_redis, shared_cluster, shared_redis, shared_redis_namespace,
    shared_sentinels, unique,
};

/// How long a condition loop waits for expiry (a short TTL plus the 1 s tolerance) or a
/// release notice before it fails.
const PATIENCE: Duration = Duration::from_secs(15);

/// Polls `condition` until it holds, failing with `what` after [`PATIENCE`].
#[track_caller]
fn await_condition(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn permit(backend: &RedisBackend, key: &str, permits: u32) -> Lease {
    lease(backend.acquire_as(key, Mode::permits(permits).unwrap(), TTL))
}

/// Several threads race for N permits: never more than N holders at once.
fn racing_threads_never_exceed_n(backend: RedisBackend) {
    const N: usize = 3;
    let key = unique("sem-race");
    let backend = Arc::new(backend);
    let (inside, most, granted) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let until = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                while Instant::now() < until {
                    let Some(held) = backend
                        .acquire_as(&key, Mode::permits(N as u32).unwrap(), TTL)
                        .unwrap()
                        .lease()
                    else {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    };
                    // Counted after the grant and uncounted before the release: never more
                    // than the server holds.
                    let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now_inside, Ordering::SeqCst);
                    granted.fetch_add(1, Ordering::SeqCst);
                    let holders = backend.holders(&key, LeaseKind::Permit).unwrap().len();
                    assert!(holders <= N, "{holders} live permits listed, N = {N}");
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(release_permit(&backend, &key, &held.lock_id));
                }
            });
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!(most <= N, "{most} holders at once, N = {N}");
    assert!(most >= 2, "the race never had two holders at once ({most})");
    assert!(granted.load(Ordering::SeqCst) > N, "too few grants to tell");
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
}

fn fences_are_the_semaphores_own(backend: RedisBackend) {
    let key = unique("sem-fences");
    let lock = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&lock.lock_id).unwrap());
    let permits: Vec<Lease> = (0..5).map(|_| permit(&backend, &key, 5)).collect();
    let fences: Vec<u64> = permits.iter().map(|p| p.fence.value()).collect();
    assert_eq!(fences, [1, 2, 3, 4, 5], "a sequence of the semaphore's own");
    assert!(release_permit(&backend, &key, &permits[4].lock_id));
    let next = permit(&backend, &key, 5);
    assert_eq!(
        next.fence.value(),
        6,
        "strictly larger than every earlier permit's"
    );
    // Six permits went out: the lock's counter is where the lock left it.
    let lock = lease(backend.acquire(&key, TTL));
    assert_eq!(lock.fence.value(), 2);
    assert!(backend.release(&lock.lock_id).unwrap());
}

fn lock_and_semaphore_are_apart(backend: RedisBackend) {
    let key = unique("sem-apart");
    let lock = lease(backend.acquire(&key, TTL));
    // N = 1 on "k" is not the lock on "k".
    let held = permit(&backend, &key, 1);
    assert!(
        backend
            .acquire_as(&key, Mode::permits(1).unwrap(), TTL)
            .unwrap()
            .lease()
            .is_none()
    );
    assert!(backend.is_locked(&key).unwrap());
    assert!(backend.release(&lock.lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 1);
    let lock = lease(backend.acquire(&key, TTL));
    assert!(release_permit(&backend, &key, &held.lock_id));
    assert!(backend.is_locked(&key).unwrap());
    // A permit's lock id is no lock's, nor the other way round.
    assert!(!backend.release(&held.lock_id).unwrap());
    assert!(!release_permit(&backend, &key, &lock.lock_id));
    assert!(backend.release(&lock.lock_id).unwrap());
}

fn expired_permits_are_reclaimed(backend: RedisBackend) {
    let key = unique("sem-expiry");
    let short = Duration::from_millis(100);
    let old = lease(backend.acquire_as(&key, Mode::permits(1).unwrap(), short));
    let mut fresh = None;
    await_condition(
        "the expired permit to be reclaimed by an acquisition",
        || {
            fresh = backend
                .acquire_as(&key, Mode::permits(1).unwrap(), TTL)
                .unwrap()
                .lease();
            fresh.is_some()
        },
    );
    let fresh = fresh.unwrap();
    assert!(fresh.fence > old.fence);
    let holders = backend.holders_raw(&key, LeaseKind::Permit).unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lock_id, fresh.lock_id);
    // Never resurrected.
    assert_eq!(
        backend
            .extend_as(&key, LeaseKind::Permit, &old.lock_id, TTL)
            .unwrap(),
        None
    );
    assert!(!release_permit(&backend, &key, &old.lock_id));
    // An expired permit (not yet reclaimed) is no holder, and renewing it fails.
    let other = unique("sem-expiry");
    let gone = lease(backend.acquire_as(&other, Mode::permits(2).unwrap(), short));
    await_condition("the permit to expire", || {
        backend
            .holders(&other, LeaseKind::Permit)
            .unwrap()
            .is_empty()
    });
    let (key_ref, id) = (
        Key::new(&other).unwrap(),
        LockId::new(&gone.lock_id).unwrap(),
    );
    let ttl = Ttl::new(TTL).unwrap();
    let outcome = backend
        .extend_lease(LeaseRef::permit(&id, &key_ref), ttl)
        .unwrap();
    assert_eq!(outcome, syncguard::driver::Outcome::Expired);
    assert!(!release_permit(&backend, &other, &gone.lock_id));
    assert!(release_permit(&backend, &key, &fresh.lock_id));
}

fn release_and_extend_are_idempotent(backend: RedisBackend) {
    let key = unique("sem-idem");
    let held = permit(&backend, &key, 2);
    let extended = backend
        .extend_as(
            &key,
            LeaseKind::Permit,
            &held.lock_id,
            Duration::from_secs(60),
        )
        .unwrap()
        .expect("a live permit is extended");
    assert!(
        extended > held.expires_at_ms,
        "{extended} <= {}",
        held.expires_at_ms
    );
    assert_eq!(
        backend.holders(&key, LeaseKind::Permit).unwrap()[0].expires_at_ms,
        extended
    );
    assert!(release_permit(&backend, &key, &held.lock_id));
    assert!(!release_permit(&backend, &key, &held.lock_id));
    assert_eq!(
        backend
            .extend_as(&key, LeaseKind::Permit, &held.lock_id, TTL)
            .unwrap(),
        None
    );
    let never = syncguard::driver::generate_lock_id();
    assert!(!release_permit(&backend, &key, &never));
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
}

fn batch_renewals_answer_each_lease(backend: RedisBackend) {
    let (lock_keys, sem_keys): (Vec<String>, Vec<String>) = (
        (0..3).map(|_| unique("batch-lock")).collect(),
        (0..3).map(|_| unique("batch-sem")).collect(),
    );
    let locks: Vec<Lease> = lock_keys
        .iter()
        .map(|k| lease(backend.acquire(k, TTL)))
        .collect();
    let permits: Vec<Lease> = sem_keys.iter().map(|k| permit(&backend, k, 1)).collect();
    // From outside: lock 1 released, lock 2 released and taken by another; permit 1 released,
    // permit 2 released and taken by another.
    assert!(backend.release(&locks[1].lock_id).unwrap());
    assert!(backend.release(&locks[2].lock_id).unwrap());
    let thief = lease(backend.acquire(&lock_keys[2], TTL));
    assert!(release_permit(&backend, &sem_keys[1], &permits[1].lock_id));
    assert!(release_permit(&backend, &sem_keys[2], &permits[2].lock_id));
    let sem_thief = permit(&backend, &sem_keys[2], 1);

    let lock_ids: Vec<LockId> = locks
        .iter()
        .map(|l| LockId::new(&l.lock_id).unwrap())
        .collect();
    let permit_ids: Vec<LockId> = permits
        .iter()
        .map(|p| LockId::new(&p.lock_id).unwrap())
        .collect();
    let lock_k: Vec<Key> = lock_keys.iter().map(|k| Key::new(k).unwrap()).collect();
    let sem_k: Vec<Key> = sem_keys.iter().map(|k| Key::new(k).unwrap()).collect();
    let ttl = |s: u64| Ttl::new(Duration::from_secs(s)).unwrap();
    // Interleaved, each with a TTL of its own, so that a lease given another's answer shows.
    let batch = [
        (LeaseRef::permit(&permit_ids[0], &sem_k[0]), ttl(101)),
        (LeaseRef::new(&lock_ids[0]).with_key(&lock_k[0]), ttl(202)),
        (LeaseRef::permit(&permit_ids[1], &sem_k[1]), ttl(303)),
        (LeaseRef::new(&lock_ids[1]), ttl(404)),
        (LeaseRef::permit(&permit_ids[2], &sem_k[2]), ttl(505)),
        (LeaseRef::new(&lock_ids[2]).with_key(&lock_k[2]), ttl(606)),
        (LeaseRef::new(&lock_ids[0]), ttl(707)),
    ];
    // The server's clock at the first grant (its expiry less its TTL): no later than now.
    let before = permits[0].expires_at_ms - TTL.as_millis() as i64;
    let answers = backend.extend_leases(&batch);
    assert_eq!(answers.len(), batch.len());
    let expiry = |i: usize| -> i64 {
        match &answers[i] {
            Ok(syncguard::driver::Outcome::Applied(extension)) => extension.expires_at_ms,
            other => panic!("lease {i}: expected Applied, got {other:?}"),
        }
    };
    for (i, secs) in [(0, 101), (1, 202), (6, 707)] {
        let offset = expiry(i) - before;
        let wanted = secs * 1000;
        assert!(
            (wanted - 5_000..=wanted + 60_000).contains(&offset),
            "lease {i}: expiry {offset} ms ahead, its TTL is {wanted} ms"
        );
    }
    for i in [2, 3, 4, 5] {
        assert!(
            matches!(answers[i], Ok(syncguard::driver::Outcome::NotFound)),
            "lease {i}: expected NotFound, got {:?}",
            answers[i]
        );
    }
    // What was stolen stays with the thief, untouched.
    assert_eq!(
        backend
            .holders_raw(&sem_keys[2], LeaseKind::Permit)
            .unwrap()[0]
            .lock_id,
        sem_thief.lock_id
    );
    let held = backend.holders(&sem_keys[0], LeaseKind::Permit).unwrap();
    assert_eq!(held[0].expires_at_ms, expiry(0));
    for id in [&locks[0].lock_id, &thief.lock_id] {
        assert!(backend.release(id).unwrap());
    }
    assert!(release_permit(&backend, &sem_keys[0], &permits[0].lock_id));
    assert!(release_permit(&backend, &sem_keys[2], &sem_thief.lock_id));
}

fn callers_disagreeing_on_n_each_get_their_own(backend: RedisBackend) {
    let key = unique("sem-n");
    let first = permit(&backend, &key, 2);
    let second = permit(&backend, &key, 2);
    assert!(
        backend
            .acquire_as(&key, Mode::permits(2).unwrap(), TTL)
            .unwrap()
            .lease()
            .is_none()
    );
    let third = permit(&backend, &key, 5);
    assert!(
        backend
            .acquire_as(&key, Mode::permits(3).unwrap(), TTL)
            .unwrap()
            .lease()
            .is_none()
    );
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 3);
    for held in [first, second, third] {
        assert!(release_permit(&backend, &key, &held.lock_id));
    }
}

fn bad_n_is_refused(backend: RedisBackend) {
    let key = unique("sem-bad-n");
    for bad in [0, 1001] {
        let error = Mode::permits(bad)
            .and_then(|mode| backend.acquire_as(&key, mode, TTL))
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{bad}: {error}");
    }
    assert!(Permits::new(0).is_err());
    // Nothing was asked of the server: the semaphore's first fence is still 1.
    assert_eq!(permit(&backend, &key, 1000).fence.value(), 1);
}

fn holders_are_listed_in_fence_order(backend: RedisBackend) {
    let key = unique("sem-holders");
    let key_ref = Key::new(&key).unwrap();
    let permits = Permits::new(4).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let ids: Vec<String> = (0..4)
        .map(|i| {
            let holder = Holder::new(format!("x{i}")).unwrap();
            let request = Request::one(&key_ref, ttl)
                .mode(Mode::Permit(permits))
                .holder(Some(&holder));
            match backend.acquire_one(&request).unwrap() {
                Acquisition::Acquired { lease, .. } => lease.lock_id,
                Acquisition::Locked => panic!("permit {i} refused"),
            }
        })
        .collect();
    assert!(release_permit(&backend, &key, &ids[1]));
    let found = backend
        .find(Find::Key(&key_ref, LeaseKind::Permit))
        .unwrap();
    let listed: Vec<(&str, Option<&str>, u64)> = found
        .iter()
        .map(|r| (r.lock_id.as_str(), r.holder.as_deref(), r.fence.value()))
        .collect();
    assert_eq!(
        listed,
        [
            (ids[0].as_str(), Some("x0"), 1),
            (ids[2].as_str(), Some("x2"), 3),
            (ids[3].as_str(), Some("x3"), 4)
        ]
    );
    assert!(found.iter().all(|r| r.key == key));
    let infos = backend.holders(&key, LeaseKind::Permit).unwrap();
    let holders: Vec<Option<&str>> = infos.iter().map(|i| i.holder.as_deref()).collect();
    assert_eq!(holders, [Some("x0"), Some("x2"), Some("x3")]);
    for id in [&ids[0], &ids[2], &ids[3]] {
        assert!(release_permit(&backend, &key, id));
    }
}

fn releases_wake_waiters(backend: RedisBackend) {
    let key = unique("sem-wake");
    let (tell, heard) = mpsc::channel::<String>();
    let tell = std::sync::Mutex::new(tell);
    let watch = backend
        .watch_releases(Arc::new(move |key: &str| {
            let _ = tell.lock().unwrap().send(key.to_owned());
        }))
        .unwrap()
        .expect("the Redis backend watches releases");
    watch.watch(&Key::new(&key).unwrap());
    // The subscription starts on the watch's own thread: release until it is heard.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let held = permit(&backend, &key, 1);
        assert!(release_permit(&backend, &key, &held.lock_id));
        if heard
            .recv_timeout(Duration::from_millis(300))
            .is_ok_and(|heard| heard == key)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no release of {key:?} was heard");
    }
}

macro_rules! semaphore_suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            fn backend() -> RedisBackend {
                $backend
            }

            #[test]
            fn racing_threads_never_exceed_n() {
                super::racing_threads_never_exceed_n(backend());
            }
            #[test]
            fn fences_are_the_semaphores_own() {
                super::fences_are_the_semaphores_own(backend());
            }
            #[test]
            fn lock_and_semaphore_are_apart() {
                super::lock_and_semaphore_are_apart(backend());
            }
            #[test]
            fn expired_permits_are_reclaimed() {
                super::expired_permits_are_reclaimed(backend());
            }
            #[test]
            fn release_and_extend_are_idempotent() {
                super::release_and_extend_are_idempotent(backend());
            }
            #[test]
            fn batch_renewals_answer_each_lease() {
                super::batch_renewals_answer_each_lease(backend());
            }
            #[test]
            fn callers_disagreeing_on_n_each_get_their_own() {
                super::callers_disagreeing_on_n_each_get_their_own(backend());
            }
            #[test]
            fn bad_n_is_refused() {
                super::bad_n_is_refused(backend());
            }
            #[test]
            fn holders_are_listed_in_fence_order() {
                super::holders_are_listed_in_fence_order(backend());
            }
            #[test]
            fn releases_wake_waiters() {
                super::releases_wake_waiters(backend());
            }
        }
    };
}

semaphore_suite!(
    single_typescript,
    shared_redis_namespace(KeyLayout::TypeScript).0
);
semaphore_suite!(
    single_cluster_layout,
    shared_redis_namespace(KeyLayout::Cluster).0
);
semaphore_suite!(
    sentinel,
    RedisBackend::connect(&shared_sentinels().url()).expect("connect through the test Sentinels")
);
semaphore_suite!(
    cluster,
    RedisBackend::connect(&shared_cluster().url()).expect("connect to the test Cluster")
);

/// What a semaphore stores on a single server, in both layouts: the documented keys, types and
/// fields, none of them the lock's, and only the fence counter left once every permit is gone.
#[test]
fn stores_the_documented_layout() {
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let (backend, prefix) = shared_redis_namespace(layout);
        let mut conn = shared_redis().connection();
        let key = "sem:job";
        let keys = backend.semaphore_keys(key).unwrap();
        assert_eq!(keys.holders, format!("{prefix}{{{key}}}:sem:holders"));
        assert_eq!(keys.permits, format!("{prefix}{{{key}}}:sem:permits"));
        assert_eq!(keys.fence, format!("{prefix}{{{key}}}:sem:fence"));
        let lock = lease(backend.acquire(key, TTL));
        let held = permit(&backend, key, 1);
        let mut names: Vec<String> = conn.keys(format!("{prefix}*")).unwrap();
        names.sort();
        let mut expected = vec![
            backend.lock_key(key).unwrap(),
            backend.fence_key(key).unwrap(),
            backend.index_key(&lock.lock_id).unwrap(),
            keys.holders.clone(),
            keys.permits.clone(),
            keys.fence.clone(),
        ];
        expected.sort();
        assert_eq!(names, expected, "{layout:?}");
        let kind = |conn: &mut redis::Connection, name: &str| -> String {
            redis::cmd("TYPE").arg(name).query(conn).unwrap()
        };
        assert_eq!(kind(&mut conn, &keys.holders), "zset");
        assert_eq!(kind(&mut conn, &keys.permits), "hash");
        assert_eq!(conn.get::<_, String>(&keys.fence).unwrap(), "1");
        let score: f64 = conn.zscore(&keys.holders, &held.lock_id).unwrap();
        assert_eq!(score as i64, held.expires_at_ms);
        let raw: String = conn.hget(&keys.permits, &held.lock_id).unwrap();
        let record: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(record["lockId"], held.lock_id.as_str());
        assert_eq!(record["key"], key);
        assert_eq!(record["fence"], "000000000000001");
        assert_eq!(record["expiresAtMs"].as_i64(), Some(held.expires_at_ms));
        assert!(conn.pttl::<_, i64>(&keys.holders).unwrap() > 0);
        assert!(conn.pttl::<_, i64>(&keys.permits).unwrap() > 0);
        assert_eq!(conn.pttl::<_, i64>(&keys.fence).unwrap(), -1);
        assert!(release_permit(&backend, key, &held.lock_id));
        assert!(backend.release(&lock.lock_id).unwrap());
        let mut left: Vec<String> = conn.keys(format!("{prefix}*")).unwrap();
        left.sort();
        let mut counters = vec![backend.fence_key(key).unwrap(), keys.fence.clone()];
        counters.sort();
        assert_eq!(
            left, counters,
            "{layout:?}: only the two fence counters stay"
        );
    }
}

/// What a semaphore's keys hold that is not what it wrote is refused, named, and left alone.
#[test]
fn refuses_what_it_did_not_write() {
    let (backend, _) = shared_redis_namespace(KeyLayout::TypeScript);
    let mut conn = shared_redis().connection();
    let key = unique("sem-foreign");
    let keys = backend.semaphore_keys(&key).unwrap();
    let _: () = conn.set(&keys.holders, "not a sorted set").unwrap();
    let error = backend
        .acquire_as(&key, Mode::permits(2).unwrap(), TTL)
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal);
    assert!(error.message().contains(&keys.holders), "{error}");
    assert_eq!(
        conn.get::<_, String>(&keys.holders).unwrap(),
        "not a sorted set"
    );
    let _: () = conn.del(&keys.holders).unwrap();
    let _: () = conn.set(&keys.fence, "-3").unwrap();
    let error = backend
        .acquire_as(&key, Mode::permits(2).unwrap(), TTL)
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
}

/// The permits a listing shows: `(key, fence, lock id)` in its order.
fn listed_permits(
    backend: &RedisBackend,
    prefix: &str,
    limit: usize,
) -> Vec<(String, u64, String)> {
    let listed = backend.list_raw(prefix, LeaseKind::Permit, limit).unwrap();
    assert_eq!(listed.coverage, Coverage::Complete, "{prefix}");
    listed
        .locks
        .into_iter()
        .map(|raw| (raw.key, raw.info.fence.value(), raw.lock_id))
        .collect()
}

/// A Cluster's permit listing scans every primary: the permits of semaphores whose slots lie
/// on all three primaries are listed together, by key then fence — a key with braces (its
/// semaphore under a hash tag) among them — and the locks held on the same keys are not, nor
/// are the permits among the locks.
#[test]
fn a_cluster_lists_permits_on_every_primary() {
    let cluster = shared_cluster();
    let backend = RedisBackend::connect(&cluster.url()).expect("connect to the test Cluster");
    let prefix = unique("sem-list-cluster");
    let asked = cluster.nodes[0].port;
    let braced = format!("{prefix}:{{braced}}");
    assert!(
        !backend
            .semaphore_keys(&braced)
            .unwrap()
            .permits
            .contains("braced"),
        "a key with braces is stored under its hash"
    );
    let mut keys = vec![braced];
    let mut primaries = BTreeSet::new();
    for n in 0.. {
        let key = format!("{prefix}:{n:03}");
        let slot = cluster.key_slot(&backend.semaphore_keys(&key).unwrap().permits);
        primaries.insert(cluster.primary_of(slot, asked).expect("a primary"));
        keys.push(key);
        if primaries.len() == 3 && keys.len() >= 6 {
            break;
        }
        assert!(n < 200, "semaphores on every primary");
    }
    // Two permits and a lock on each key.
    let permits: Vec<(String, Lease)> = keys
        .iter()
        .flat_map(|key| {
            [
                (key.clone(), permit(&backend, key, 2)),
                (key.clone(), permit(&backend, key, 2)),
            ]
        })
        .collect();
    let locks: Vec<Lease> = keys
        .iter()
        .map(|key| lease(backend.acquire(key, TTL)))
        .collect();
    let mut expected: Vec<(String, u64, String)> = permits
        .iter()
        .map(|(key, held)| (key.clone(), held.fence.value(), held.lock_id.clone()))
        .collect();
    expected.sort();
    assert_eq!(listed_permits(&backend, &prefix, 100), expected);
    let cut = backend.list(&prefix, LeaseKind::Permit, 3).unwrap();
    assert_eq!(cut.locks.len(), 3);
    assert_eq!(cut.coverage, Coverage::LimitReached);

    let listed_locks = backend.list_raw(&prefix, LeaseKind::Lock, 100).unwrap();
    assert_eq!(listed_locks.coverage, Coverage::Complete);
    let mut lock_ids: Vec<&str> = locks.iter().map(|held| held.lock_id.as_str()).collect();
    lock_ids.sort();
    let mut listed_ids: Vec<&str> = listed_locks
        .locks
        .iter()
        .map(|raw| raw.lock_id.as_str())
        .collect();
    listed_ids.sort();
    assert_eq!(listed_ids, lock_ids, "the locks, and no permit among them");

    for (key, held) in &permits {
        assert!(release_permit(&backend, key, &held.lock_id));
    }
    assert!(listed_permits(&backend, &prefix, 100).is_empty());
    for held in locks {
        assert!(backend.release(&held.lock_id).unwrap());
    }
}

/// With a long key prefix, a long key's semaphore is stored under the hash of the key (in
/// either layout): its permits are listed under the real key, found by their records, beside a
/// short key's, and not under a prefix the real key does not start with.
#[test]
fn hashed_semaphores_are_listed_under_their_real_key() {
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let namespace = format!(
            "{}-{}",
            unique("sem-list-long").replace(':', "-"),
            "n".repeat(440)
        );
        let backend = patient_redis(&shared_redis().url())
            .key_prefix(&namespace)
            .layout(layout)
            .build()
            .expect("connect to the test Redis");
        let short = "report:short".to_owned();
        let long = format!("report:{}", "l".repeat(500));
        let elsewhere = format!("other:{}", "l".repeat(500));
        let stored = backend.semaphore_keys(&long).unwrap().permits;
        assert_eq!(
            stored.len(),
            format!("{namespace}{{}}:sem:permits").len() + 22,
            "the long key's semaphore is stored under its hash: {stored}"
        );
        let held: Vec<(String, Lease)> = [&short, &long, &long, &elsewhere]
            .into_iter()
            .map(|key| (key.clone(), permit(&backend, key, 2)))
            .collect();
        let entry = |i: usize| {
            let (key, lease) = &held[i];
            (key.clone(), lease.fence.value(), lease.lock_id.clone())
        };
        assert_eq!(
            listed_permits(&backend, "report:", 10),
            [entry(1), entry(2), entry(0)],
            "{layout:?}"
        );
        assert_eq!(
            listed_permits(&backend, "report:l", 10),
            [entry(1), entry(2)],
            "{layout:?}"
        );
        assert_eq!(listed_permits(&backend, "", 10).len(), 4, "{layout:?}");
        assert!(
            backend
                .list_raw("", LeaseKind::Lock, 10)
                .unwrap()
                .locks
                .is_empty()
        );
        for (key, lease) in &held {
            assert!(release_permit(&backend, key, &lease.lock_id));
        }
        assert!(listed_permits(&backend, "", 10).is_empty(), "{layout:?}");
    }
}

/// Releases the permit `lock_id` on `key`: whether it was live.
fn release_permit(backend: &RedisBackend, key: &str, lock_id: &str) -> bool {
    backend.release_as(key, LeaseKind::Permit, lock_id).unwrap()
}
