//! Firestore semaphores (issue 25) against the emulator: at most N live holders however many
//! threads and backends race, the semaphore's own fence sequence, independence from the lock
//! on the same key, reclaiming expired permits, idempotent release and renewal, batch renewals
//! mixing locks and permits, callers disagreeing on N, N validated before any request, holders
//! in fence order, listings by prefix across pages, and the document layout.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::support::{
    FirestoreEmulator, TTL, lease, raw_document, shared_firestore_backend,
    shared_firestore_builder, unique, write_document,
};
use serde_json::json;
use syncguard::driver::{
    Acquisition, Driver as _, DriverExt as _, Find, Holder, Key, LeaseKind, LeaseRef, LockId, Mode,
    Permits, Request, Ttl,
};
use syncguard::firestore::{FirestoreBackend, MAX_LIST_PAGES};
use syncguard::testing::support::wait_until;
use syncguard::{
    AcquireOutcome, Clock as _, Coverage, ErrorCode, Lease, LockBackend, LockGuard, LockOptions,
    Locker, ManualClock, SystemClock,
};

/// Long enough for an expired permit to be reclaimable: TTL plus the 1000 ms tolerance, on a
/// loaded machine.
const EXPIRY_WAIT: Duration = Duration::from_secs(20);
/// A TTL that runs out during a test.
const SHORT: Duration = Duration::from_millis(100);

/// The permit of an acquisition that must succeed.
#[track_caller]
fn permit(backend: &FirestoreBackend, key: &str, permits: u32, ttl: Duration) -> Lease {
    lease(backend.acquire_as(key, Mode::permits(permits).unwrap(), ttl))
}

/// Whether an acquisition was refused because the semaphore is full.
#[track_caller]
fn refused(backend: &FirestoreBackend, key: &str, permits: u32) -> bool {
    matches!(
        backend
            .acquire_as(key, Mode::permits(permits).unwrap(), TTL)
            .expect("acquire_as"),
        AcquireOutcome::Locked
    )
}

/// Gives back the permit of `key` held under `lock_id`: whether this call removed it.
#[track_caller]
fn release(backend: &FirestoreBackend, key: &str, lock_id: &str) -> bool {
    backend
        .release_as(key, LeaseKind::Permit, lock_id)
        .expect("release_as")
}

/// Renews the permit of `key` held under `lock_id`: its new expiry, `None` when it is gone.
#[track_caller]
fn extend(backend: &FirestoreBackend, key: &str, lock_id: &str, ttl: Duration) -> Option<i64> {
    backend
        .extend_as(key, LeaseKind::Permit, lock_id, ttl)
        .expect("extend_as")
}

/// The fences of the live permits of `key`, as `holders` lists them.
fn holder_fences(backend: &FirestoreBackend, key: &str) -> Vec<u64> {
    backend
        .holders(key, LeaseKind::Permit)
        .expect("holders")
        .iter()
        .map(|info| info.fence.value())
        .collect()
}

#[test]
fn never_more_than_n_live_holders_across_threads_and_backends() {
    const N: usize = 3;
    const THREADS_PER_BACKEND: usize = 3;
    const ROUNDS: usize = 6;
    let key = Arc::new(unique("sem-race"));
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for _ in 0..2 {
        // Each backend its own client: the races are between processes' worth of clients.
        let backend = Arc::new(shared_firestore_backend());
        for _ in 0..THREADS_PER_BACKEND {
            let (backend, key, holding, most, fences) = (
                Arc::clone(&backend),
                Arc::clone(&key),
                Arc::clone(&holding),
                Arc::clone(&most),
                Arc::clone(&fences),
            );
            threads.push(thread::spawn(move || {
                let mut granted = 0;
                for _ in 0..ROUNDS * 4 {
                    if granted == ROUNDS {
                        break;
                    }
                    let lease =
                        match backend.acquire_as(&key, Mode::permits(N as u32).unwrap(), TTL) {
                            Ok(AcquireOutcome::Acquired(lease)) => lease,
                            Ok(AcquireOutcome::Locked) => {
                                thread::sleep(Duration::from_millis(5));
                                continue;
                            }
                            // Contention past the retry bound: refused, not granted.
                            Err(error) if error.code() == ErrorCode::ServiceUnavailable => continue,
                            Err(error) => panic!("acquire_as: {error}"),
                        };
                    granted += 1;
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= N, "{now} holders of a semaphore of {N} permits");
                    fences.lock().unwrap().push(lease.fence.value());
                    thread::sleep(Duration::from_millis(20));
                    holding.fetch_sub(1, Ordering::SeqCst);
                    assert!(
                        backend
                            .release_as(&key, LeaseKind::Permit, &lease.lock_id)
                            .expect("release_as"),
                        "a held permit was not there to release"
                    );
                }
                granted
            }));
        }
    }
    let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let backend = shared_firestore_backend();
    assert!(holder_fences(&backend, &key).is_empty());
    let mut fences = Arc::try_unwrap(fences).unwrap().into_inner().unwrap();
    assert_eq!(fences.len(), granted);
    assert!(granted >= N, "only {granted} permits granted");
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), granted, "a fence was issued twice");
    assert!(most.load(Ordering::SeqCst) <= N);
}

#[test]
fn fences_increase_per_semaphore_apart_from_the_locks_fences() {
    let backend = shared_firestore_backend();
    let key = unique("sem-fences");
    let lock = lease(backend.acquire(&key, TTL));
    assert_eq!(lock.fence.value(), 1);
    assert!(backend.release(&lock.lock_id).unwrap());
    assert_eq!(lease(backend.acquire(&key, TTL)).fence.value(), 2);

    let first = permit(&backend, &key, 5, TTL);
    let second = permit(&backend, &key, 5, TTL);
    assert_eq!((first.fence.value(), second.fence.value()), (1, 2));
    assert!(release(&backend, &key, &second.lock_id));
    // A released permit's fence is never issued again.
    let third = permit(&backend, &key, 5, TTL);
    assert_eq!(third.fence.value(), 3);
    // Another semaphore has its own sequence.
    assert_eq!(
        permit(&backend, &unique("sem-other"), 5, TTL).fence.value(),
        1
    );
    // And the lock's counter did not move with the permits.
    let counter = raw_document("fence_counters", &backend.fence_document_id(&key).unwrap())
        .expect("the lock's fence counter");
    assert_eq!(
        counter["fields"]["fence"],
        json!({ "stringValue": "000000000000002" })
    );
}

#[test]
fn the_lock_and_the_semaphore_on_one_key_do_not_affect_each_other() {
    let backend = shared_firestore_backend();
    let key = unique("sem-apart");
    let lock = lease(backend.acquire(&key, TTL));
    // A semaphore of one permit on the key is not its lock.
    let held = permit(&backend, &key, 1, TTL);
    assert!(refused(&backend, &key, 1));
    assert!(matches!(
        backend.acquire(&key, TTL).unwrap(),
        AcquireOutcome::Locked
    ));
    // A permit's lock id does not release or extend the lock, nor the lock's the permit.
    assert!(!backend.release(&held.lock_id).unwrap());
    assert!(backend.extend(&held.lock_id, TTL).unwrap().is_none());
    assert!(!release(&backend, &key, &lock.lock_id));
    assert_eq!(holder_fences(&backend, &key), [held.fence.value()]);

    assert!(backend.release(&lock.lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
    assert_eq!(holder_fences(&backend, &key), [held.fence.value()]);
    let relocked = lease(backend.acquire(&key, TTL));
    assert!(release(&backend, &key, &held.lock_id));
    assert!(backend.is_locked(&key).unwrap());
    let lock_doc = raw_document("locks", &backend.lock_document_id(&key).unwrap()).unwrap();
    assert_eq!(
        lock_doc["fields"]["lockId"],
        json!({ "stringValue": relocked.lock_id })
    );
}

#[test]
fn expired_permits_are_reclaimed_by_the_next_acquire() {
    let backend = shared_firestore_backend();
    let key = unique("sem-reclaim");
    let stale = permit(&backend, &key, 1, SHORT);
    let fresh = {
        let mut fresh = None;
        wait_until("the expired permit to be reclaimed", EXPIRY_WAIT, || {
            match backend
                .acquire_as(&key, Mode::permits(1).unwrap(), TTL)
                .expect("acquire_as")
            {
                AcquireOutcome::Acquired(lease) => fresh = Some(lease),
                AcquireOutcome::Locked => thread::sleep(Duration::from_millis(50)),
            }
            fresh.is_some()
        });
        fresh.unwrap()
    };
    assert!(fresh.fence > stale.fence);
    // Reclaimed: gone from the document, never revived.
    let id = backend.lock_document_id(&key).unwrap();
    let document = raw_document("locks_semaphores", &id).expect("the semaphore document");
    let permits = document["fields"]["permits"]["arrayValue"]["values"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(permits.len(), 1);
    assert_eq!(
        permits[0]["mapValue"]["fields"]["lockId"],
        json!({ "stringValue": fresh.lock_id })
    );
    assert!(extend(&backend, &key, &stale.lock_id, TTL).is_none());
    assert!(!release(&backend, &key, &stale.lock_id));
    assert!(refused(&backend, &key, 1));
}

#[test]
fn release_and_extend_are_idempotent_and_never_revive() {
    let backend = shared_firestore_backend();
    let key = unique("sem-idem");
    let held = permit(&backend, &key, 2, TTL);
    let before = held.expires_at_ms;
    let extended = extend(&backend, &key, &held.lock_id, TTL * 2).expect("a live permit extends");
    assert!(extended > before);
    assert!(extend(&backend, &key, &held.lock_id, TTL).is_some());
    assert!(release(&backend, &key, &held.lock_id));
    assert!(!release(&backend, &key, &held.lock_id));
    assert!(extend(&backend, &key, &held.lock_id, TTL).is_none());
    assert!(holder_fences(&backend, &key).is_empty());

    // An expired permit: extending answers Expired and removes it; it never comes back.
    let (key, id) = (Key::new(&key).unwrap(), LockId::new(&generate()).unwrap());
    assert!(
        !backend
            .release_lease(LeaseRef::permit(&id, &key))
            .unwrap()
            .is_applied()
    );
    let short = permit(&backend, key.as_str(), 2, SHORT);
    let short_id = LockId::new(&short.lock_id).unwrap();
    wait_until("the short permit to expire", EXPIRY_WAIT, || {
        holder_fences(&backend, key.as_str()).is_empty()
    });
    let ttl = Ttl::new(TTL).unwrap();
    assert_eq!(
        backend
            .extend_lease(LeaseRef::permit(&short_id, &key), ttl)
            .unwrap(),
        syncguard::driver::Outcome::Expired
    );
    assert_eq!(
        backend
            .extend_lease(LeaseRef::permit(&short_id, &key), ttl)
            .unwrap(),
        syncguard::driver::Outcome::NotFound
    );
    assert_eq!(
        backend
            .release_lease(LeaseRef::permit(&short_id, &key))
            .unwrap(),
        syncguard::driver::Outcome::NotFound
    );
    assert!(holder_fences(&backend, key.as_str()).is_empty());
}

fn generate() -> String {
    syncguard::driver::generate_lock_id()
}

#[test]
fn a_batch_renewal_mixing_locks_and_permits_answers_each_lease() {
    use syncguard::driver::Outcome;
    let backend = shared_firestore_backend();
    let outsider = shared_firestore_backend();
    let (lock_a, lock_b) = (unique("sem-batch-a"), unique("sem-batch-b"));
    let (sem_1, sem_2) = (unique("sem-batch-1"), unique("sem-batch-2"));
    let a = lease(backend.acquire(&lock_a, TTL));
    let b = lease(backend.acquire(&lock_b, TTL));
    let p1 = permit(&backend, &sem_1, 3, TTL);
    let p2 = permit(&backend, &sem_1, 3, TTL);
    let p3 = permit(&backend, &sem_2, 3, TTL);
    let p4 = permit(&backend, &sem_2, 3, SHORT);
    // Released from outside: the lock on B and the second permit of semaphore 1.
    assert!(outsider.release(&b.lock_id).unwrap());
    assert!(release(&outsider, &sem_1, &p2.lock_id));
    wait_until("the short permit to expire", EXPIRY_WAIT, || {
        holder_fences(&backend, &sem_2).len() == 1
    });

    let keys: Vec<Key> = [&lock_a, &lock_b, &sem_1, &sem_2]
        .iter()
        .map(|key| Key::new(key).unwrap())
        .collect();
    let ids: Vec<LockId> = [&a, &b, &p1, &p2, &p3, &p4]
        .iter()
        .map(|lease| LockId::new(&lease.lock_id).unwrap())
        .collect();
    let unknown = LockId::new(&generate()).unwrap();
    let ttl = Ttl::new(TTL * 2).unwrap();
    let leases = [
        (LeaseRef::new(&ids[0]).with_key(&keys[0]), ttl),
        (LeaseRef::permit(&ids[2], &keys[2]), ttl),
        (LeaseRef::new(&ids[1]).with_key(&keys[1]), ttl),
        (LeaseRef::permit(&ids[3], &keys[2]), ttl),
        (LeaseRef::permit(&ids[4], &keys[3]), ttl),
        (LeaseRef::permit(&ids[5], &keys[3]), ttl),
        (LeaseRef::permit(&unknown, &keys[3]), ttl),
        // A permit's lock id, asked for as a lock: no lock has it.
        (LeaseRef::new(&ids[4]).with_key(&keys[3]), ttl),
    ];
    let answers: Vec<Outcome<()>> = backend
        .extend_leases(&leases)
        .into_iter()
        .map(|answer| match answer.expect("a renewal answer") {
            Outcome::Applied(extension) => {
                assert!(extension.expires_at_ms > a.expires_at_ms);
                Outcome::Applied(())
            }
            Outcome::NotFound => Outcome::NotFound,
            Outcome::Expired => Outcome::Expired,
            Outcome::NotOwner => Outcome::NotOwner,
        })
        .collect();
    use Outcome::{Applied, Expired, NotFound};
    assert_eq!(
        answers,
        [
            Applied(()),
            Applied(()),
            NotFound,
            NotFound,
            Applied(()),
            Expired,
            NotFound,
            NotFound
        ]
    );
    // The renewals are stored.
    let renewed = backend.holders(&sem_2, LeaseKind::Permit).unwrap();
    assert_eq!(renewed.len(), 1);
    assert!(renewed[0].expires_at_ms > p3.expires_at_ms);
    let renewed = backend.holders(&sem_1, LeaseKind::Permit).unwrap();
    assert_eq!(renewed.len(), 1);
    assert!(renewed[0].expires_at_ms > p1.expires_at_ms);
}

#[test]
fn callers_disagreeing_on_n_each_get_their_own_limit() {
    let backend = shared_firestore_backend();
    let key = unique("sem-n");
    permit(&backend, &key, 2, TTL);
    permit(&backend, &key, 2, TTL);
    assert!(refused(&backend, &key, 2));
    assert!(refused(&backend, &key, 1));
    permit(&backend, &key, 5, TTL);
    assert!(refused(&backend, &key, 3));
    assert_eq!(holder_fences(&backend, &key), [1, 2, 3]);
}

#[test]
fn bad_numbers_of_permits_are_refused_before_any_request() {
    let backend = shared_firestore_backend();
    let key = unique("sem-bad-n");
    let before = backend.stats().requests;
    for bad in [0, 1001, u32::MAX] {
        // Refused as the mode is made, before a request can be.
        let error = Mode::permits(bad).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{bad}");
    }
    assert_eq!(backend.stats().requests, before);
    // The bounds themselves are accepted.
    permit(&backend, &key, 1, TTL);
    permit(&backend, &key, 1000, TTL);
}

#[test]
fn holders_are_listed_in_fence_order_with_their_descriptions() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("sem-holders")).unwrap();
    let (permits, ttl) = (Permits::new(4).unwrap(), Ttl::new(TTL).unwrap());
    let take = |holder: Option<&str>| {
        let holder = holder.map(|h| Holder::new(h).unwrap());
        match backend
            .acquire_one(
                &Request::one(&key, ttl)
                    .mode(Mode::Permit(permits))
                    .holder(holder.as_ref()),
            )
            .unwrap()
        {
            Acquisition::Acquired { lease, .. } => lease,
            Acquisition::Locked => panic!("refused"),
        }
    };
    let one = take(Some("worker one"));
    let two = take(Some("worker two"));
    let three = take(None);
    assert!(release(&backend, key.as_str(), &two.lock_id));
    let four = take(Some("worker four"));
    let raw = backend
        .holders_raw(key.as_str(), LeaseKind::Permit)
        .unwrap();
    let seen: Vec<(String, u64, Option<String>)> = raw
        .iter()
        .map(|r| {
            (
                r.lock_id.clone(),
                r.info.fence.value(),
                r.info.holder.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (one.lock_id, 1, Some("worker one".to_owned())),
            (three.lock_id, 3, None),
            (four.lock_id, 4, Some("worker four".to_owned())),
        ]
    );
    assert!(raw.iter().all(|r| r.key == key.as_str()));
    let records = backend.find(Find::Key(&key, LeaseKind::Permit)).unwrap();
    assert!(records.windows(2).all(|w| w[0].fence < w[1].fence));
}

#[test]
fn semaphores_live_in_their_own_collection_beside_the_locks() {
    let backend = shared_firestore_backend();
    let key = unique("sem-doc");
    let held = permit(&backend, &key, 2, TTL);
    let id = backend.lock_document_id(&key).unwrap();
    assert!(raw_document("locks", &id).is_none());
    let document = raw_document("locks_semaphores", &id).expect("the semaphore document");
    let fields = &document["fields"];
    assert_eq!(fields["key"], json!({ "stringValue": key }));
    assert_eq!(fields["fence"], json!({ "stringValue": "000000000000001" }));
    let permit_fields = &fields["permits"]["arrayValue"]["values"][0]["mapValue"]["fields"];
    assert_eq!(
        permit_fields["lockId"],
        json!({ "stringValue": held.lock_id })
    );
    assert_eq!(
        permit_fields["fence"],
        json!({ "stringValue": "000000000000001" })
    );
    assert_eq!(
        permit_fields["expiresAtMs"],
        json!({ "integerValue": held.expires_at_ms.to_string() })
    );
    assert!(release(&backend, &key, &held.lock_id));
    // The document (and its fence counter) outlives its permits.
    let document = raw_document("locks_semaphores", &id).expect("kept after release");
    assert_eq!(
        document["fields"]["fence"],
        json!({ "stringValue": "000000000000001" })
    );

    // Another lock collection, another semaphore collection.
    let custom = shared_firestore_builder()
        .collection("sem_test_locks")
        .build()
        .unwrap();
    let held = permit(&custom, &key, 1, TTL);
    assert!(raw_document("sem_test_locks_semaphores", &id).is_some());
    assert!(release(&custom, &key, &held.lock_id));
    let clash = shared_firestore_builder()
        .fence_collection("locks_semaphores")
        .build()
        .unwrap_err();
    assert_eq!(clash.code(), ErrorCode::InvalidArgument);
}

#[test]
fn a_document_that_is_not_a_semaphore_is_an_error_and_left_alone() {
    let backend = shared_firestore_backend();
    let key = unique("sem-foreign");
    let id = backend.lock_document_id(&key).unwrap();
    let fields = json!({
        "key": { "stringValue": key },
        "fence": { "stringValue": "not a fence" },
        "permits": { "arrayValue": {} },
    });
    write_document("locks_semaphores", &id, fields.clone());
    let lock_id = generate();
    let errors = [
        backend
            .acquire_as(&key, Mode::permits(5).unwrap(), TTL)
            .unwrap_err(),
        backend.holders(&key, LeaseKind::Permit).unwrap_err(),
        backend
            .release_as(&key, LeaseKind::Permit, &lock_id)
            .unwrap_err(),
        backend
            .extend_as(&key, LeaseKind::Permit, &lock_id, TTL)
            .unwrap_err(),
        backend.list(&key, LeaseKind::Permit, 10).unwrap_err(),
    ];
    for error in errors {
        assert_eq!(error.code(), ErrorCode::Internal, "{error}");
        assert!(error.to_string().contains("semaphore"), "{error}");
    }
    let stored = raw_document("locks_semaphores", &id).unwrap();
    assert_eq!(stored["fields"], fields);
}

#[test]
fn permit_listings_page_past_expired_permits_and_skip_other_prefixes() {
    let clock = ManualClock::new(SystemClock.now_ms());
    let backend = shared_firestore_builder()
        .clock(clock.clone())
        .build()
        .expect("a Firestore backend for the emulator");
    let base = unique("fs-permit-list");
    let prefix = format!("{base}:");
    // Semaphores whose only permit expires sort first: a listing must page past them.
    let expired: Vec<(String, Lease)> = (0..2 * MAX_LIST_PAGES + 1)
        .map(|n| {
            let key = format!("{prefix}a{n:02}");
            let held = permit(&backend, &key, 1, Duration::from_secs(1));
            (key, held)
        })
        .collect();
    // One semaphore with a live permit and an expired one (not reclaimed: nothing writes it).
    let (mixed, later) = (format!("{prefix}m"), format!("{prefix}z"));
    let kept = permit(&backend, &mixed, 2, Duration::from_secs(60));
    let gone = permit(&backend, &mixed, 2, Duration::from_secs(1));
    clock.advance(Duration::from_secs(10));
    let z1 = permit(&backend, &later, 2, Duration::from_secs(60));
    let z2 = permit(&backend, &later, 2, Duration::from_secs(60));
    // Live permits just outside the prefix's range, on both sides of it.
    let outside: Vec<(String, Lease)> = [format!("{base}-other"), format!("{base};z")]
        .into_iter()
        .map(|key| {
            let held = permit(&backend, &key, 1, Duration::from_secs(60));
            (key, held)
        })
        .collect();
    let live = vec![kept.lock_id.clone(), z1.lock_id.clone(), z2.lock_id.clone()];

    // The lock ids listed under the prefix, the coverage, and the requests it took.
    let listed = |limit: usize| {
        let before = backend.stats().requests;
        let listed = backend.list_raw(&prefix, LeaseKind::Permit, limit).unwrap();
        let ids: Vec<String> = listed.locks.into_iter().map(|raw| raw.lock_id).collect();
        (ids, listed.coverage, backend.stats().requests - before)
    };
    // One page for all.
    assert_eq!(listed(100), (live.clone(), Coverage::Complete, 1));
    // Pages of four documents: five of expired permits, then a short one with the rest.
    assert_eq!(listed(3), (live.clone(), Coverage::Complete, 6));
    // Pages of three: seven of expired permits, then the one where more than two are found.
    assert_eq!(listed(2), (live[..2].to_vec(), Coverage::LimitReached, 8));
    // Pages of two: the bound is reached while every permit read is expired.
    assert_eq!(
        listed(1),
        (
            Vec::new(),
            Coverage::WorkBoundReached,
            MAX_LIST_PAGES as u64
        )
    );
    let mixed_listed = backend.list_raw(&mixed, LeaseKind::Permit, 10).unwrap();
    assert_eq!(
        mixed_listed.locks.len(),
        1,
        "the expired permit is not listed"
    );
    assert_eq!(mixed_listed.locks[0].lock_id, kept.lock_id);

    for (key, lock_id) in [&mixed, &later, &later].into_iter().zip(&live) {
        assert!(release(&backend, key, lock_id));
    }
    // Reclaimed by the release of the other permit.
    assert!(!release(&backend, &mixed, &gone.lock_id));
    for (key, lease) in &expired {
        assert!(!release(&backend, key, &lease.lock_id));
    }
    for (key, lease) in &outside {
        assert!(release(&backend, key, &lease.lock_id));
    }
    assert_eq!(listed(100), (Vec::new(), Coverage::Complete, 1));
}

/// Issue 30, item 8: one `Locker` holding 1 000 permits of one semaphore at TTL 3 s loses none
/// of them, with no fault injected. Every permit's renewal rewrites the one semaphore document;
/// renewals and acquisitions of one backend that meet are combined into one commit, so that
/// they do not race each other into giving up. On an emulator of its own: the load would slow
/// every other Firestore test's calls past their heartbeats. `.ci/run` runs it alone, after the
/// other tests: beside them on two cores, the emulator's answers fell behind the 3-second TTL
/// (254 of 1 000 lost, by the machine's load, not by a conflict).
#[test]
#[ignore = "a load test: .ci/run runs it alone, after the other tests"]
fn a_thousand_permits_of_one_locker_are_all_kept_under_their_renewals() {
    const PERMITS: usize = 1000;
    const THREADS: usize = 4;
    const TTL_UNDER_LOAD: Duration = Duration::from_secs(3);
    const HOLD: Duration = Duration::from_secs(9);
    let emulator = FirestoreEmulator::start();
    let locker = Locker::new(emulator.backend());
    let semaphore = locker
        .semaphore(&unique("held-under-load"), PERMITS as u32)
        .unwrap();
    // A fresh emulator's first answers can take longer than the TTL: they come first.
    assert!(semaphore.holders().unwrap().is_empty());
    let options = LockOptions::default().ttl(TTL_UNDER_LOAD);
    let guards: Vec<LockGuard> = thread::scope(|scope| {
        let takers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    (0..PERMITS / THREADS)
                        .map(|_| semaphore.acquire_with(&options).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        takers
            .into_iter()
            .flat_map(|taker| taker.join().unwrap())
            .collect()
    });
    assert_eq!(guards.len(), PERMITS);
    // Holding is the point: the heartbeat renews every permit three times a second meanwhile.
    thread::sleep(HOLD);
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {PERMITS} permits were lost");
    // Not released one by one: the emulator, and the permits with it, go with this test.
    for guard in guards {
        let _ = guard.detach();
    }
}
