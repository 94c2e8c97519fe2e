//! Semaphores on PostgreSQL (issue 25), against the shared cluster directly and through the
//! shared PgBouncer (transaction mode): never more than N live permits however callers race,
//! a fence sequence of each semaphore's own, apart from the lock on the same key, expired
//! permits reclaimed, renewals in mixed batches, and the tables `setup_schema` creates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::{
    self, BRISK, TTL, lease, shared_postgres, shared_postgres_backend, shared_postgres_with_tables,
    unique,
};
use syncguard::driver::{
    Acquisition, Driver, DriverExt, Find, Holder, Key, KeyPrefix, LeaseKind, LeaseRef, ListLimit,
    LockId, Mode as LeaseMode, Outcome, Permits, Request, Ttl,
};
use syncguard::postgres::PostgresBackend;
use syncguard::{AcquireOutcome, ErrorCode, LockBackend};

/// A backend on the shared cluster, directly.
fn direct() -> PostgresBackend {
    shared_postgres_backend()
}

support::postgres_both_ways!(
    connect: [
        never_more_than_n_live_holders,
        fences_grow_per_semaphore_apart_from_the_lock,
        the_lock_and_the_semaphore_on_a_key_are_apart,
        expired_permits_are_reclaimed_by_the_next_acquire,
        release_and_extend_are_idempotent,
        a_mixed_batch_renewal_answers_each_lease,
        each_acquisition_is_judged_by_its_own_n,
        holders_come_in_fence_order_with_their_description,
        permits_are_listed_in_byte_order_live_only,
    ],
    upstream: [a_repeated_permit_acquisition_answers_the_first_ones_permit],
);

/// The lease of a permit acquisition that must succeed.
#[track_caller]
fn permit(backend: &dyn LockBackend, key: &str, permits: u32, ttl: Duration) -> syncguard::Lease {
    lease(backend.acquire_as(key, syncguard::Mode::permits(permits).unwrap(), ttl))
}

/// Gives back the permit of `key` held under `lock_id`: whether this call removed it.
#[track_caller]
fn release(backend: &(impl LockBackend + ?Sized), key: &str, lock_id: &str) -> bool {
    backend.release_as(key, LeaseKind::Permit, lock_id).unwrap()
}

/// Waits (at most a minute) until `done` holds, checking every 50 ms.
#[track_caller]
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "waited a minute for: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn never_more_than_n_live_holders(connect: fn() -> PostgresBackend) {
    const N: usize = 3;
    let backends = [Arc::new(connect()), Arc::new(connect())];
    let key = unique("sem-race");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let backend = Arc::clone(&backends[worker % 2]);
            let (key, inside, most) = (key.clone(), Arc::clone(&inside), Arc::clone(&most));
            let fences = Arc::clone(&fences);
            thread::spawn(move || {
                let mut granted = 0;
                for _ in 0..25 {
                    match backend
                        .acquire_as(&key, syncguard::Mode::permits(N as u32).unwrap(), TTL)
                        .unwrap()
                    {
                        AcquireOutcome::Acquired(lease) => {
                            granted += 1;
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            fences.lock().unwrap().push(lease.fence.value());
                            // Hold a moment so that holders overlap.
                            thread::sleep(Duration::from_millis(5));
                            inside.fetch_sub(1, Ordering::SeqCst);
                            assert!(release(&backend, &key, &lease.lock_id));
                        }
                        AcquireOutcome::Locked => thread::yield_now(),
                    }
                }
                granted
            })
        })
        .collect();
    let granted: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let most = most.load(Ordering::SeqCst);
    assert!(most <= N, "{most} holders at once, of {N} permits");
    assert!(granted > N, "only {granted} permits granted");
    let mut fences = fences.lock().unwrap().clone();
    let issued = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), issued, "a permit fence was issued twice");
    assert!(
        backends[0]
            .holders(&key, LeaseKind::Permit)
            .unwrap()
            .is_empty()
    );
}

fn fences_grow_per_semaphore_apart_from_the_lock(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = unique("sem-fences");
    let lock = lease(backend.acquire(&key, TTL));
    assert_eq!(lock.fence.value(), 1);
    let mut last = 0;
    for round in 1..=3 {
        let held = permit(&backend, &key, 2, TTL);
        // The semaphore's own sequence: 1, 2, 3, whatever the lock's counter says.
        assert_eq!(held.fence.value(), round, "permit {round}");
        assert!(held.fence.value() > last);
        last = held.fence.value();
        assert!(release(&backend, &key, &held.lock_id));
    }
    assert!(backend.release(&lock.lock_id).unwrap());
    // The lock's counter did not move for the permits, nor the semaphore's for the lock.
    assert_eq!(lease(backend.acquire(&key, TTL)).fence.value(), 2);
    assert_eq!(permit(&backend, &key, 2, TTL).fence.value(), 4);
    // Another semaphore starts its own sequence.
    assert_eq!(
        permit(&backend, &unique("sem-other"), 2, TTL).fence.value(),
        1
    );
}

fn the_lock_and_the_semaphore_on_a_key_are_apart(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = unique("sem-apart");
    // A semaphore of one permit on the key is not the lock on the key.
    let held = permit(&backend, &key, 1, TTL);
    assert!(!backend.is_locked(&key).unwrap());
    let lock = lease(backend.acquire(&key, TTL));
    assert!(matches!(
        backend
            .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
            .unwrap(),
        AcquireOutcome::Locked
    ));
    // Neither's lock id releases or extends the other.
    assert!(!backend.release(&held.lock_id).unwrap());
    assert!(!release(&backend, &key, &lock.lock_id));
    assert_eq!(
        backend
            .extend_as(&key, LeaseKind::Permit, &lock.lock_id, TTL)
            .unwrap(),
        None
    );
    assert!(backend.release(&lock.lock_id).unwrap());
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 1);
    assert!(release(&backend, &key, &held.lock_id));
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
    let lock = lease(backend.acquire(&key, TTL));
    assert!(backend.is_locked(&key).unwrap());
    assert!(backend.release(&lock.lock_id).unwrap());
}

fn expired_permits_are_reclaimed_by_the_next_acquire(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = unique("sem-expiry");
    let short = Duration::from_millis(100);
    let first = permit(&backend, &key, 1, short);
    assert!(matches!(
        backend
            .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
            .unwrap(),
        AcquireOutcome::Locked
    ));
    // Free once past its expiry and the tolerance, as the server's clock judges it.
    let mut second = None;
    wait_until("the expired permit to be reclaimed", || {
        match backend
            .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
            .unwrap()
        {
            AcquireOutcome::Acquired(lease) => second = Some(lease),
            AcquireOutcome::Locked => {}
        }
        second.is_some()
    });
    let second = second.unwrap();
    assert!(second.fence > first.fence);
    // Its row is gone, not merely outnumbered.
    let rows: i64 = shared_postgres()
        .client()
        .query_one(
            "SELECT count(*) FROM syncguard_locks_permits WHERE key = $1",
            &[&backend.storage_key(&key).unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(!release(&backend, &key, &first.lock_id));
    assert_eq!(
        backend
            .extend_as(&key, LeaseKind::Permit, &first.lock_id, TTL)
            .unwrap(),
        None
    );
    assert!(release(&backend, &key, &second.lock_id));
}

fn release_and_extend_are_idempotent(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = unique("sem-idempotent");
    let held = permit(&backend, &key, 2, TTL);
    let extended = backend
        .extend_as(&key, LeaseKind::Permit, &held.lock_id, TTL)
        .unwrap();
    assert!(extended.is_some_and(|at| at >= held.expires_at_ms));
    assert!(release(&backend, &key, &held.lock_id));
    assert!(!release(&backend, &key, &held.lock_id));
    assert_eq!(
        backend
            .extend_as(&key, LeaseKind::Permit, &held.lock_id, TTL)
            .unwrap(),
        None
    );
    // Expired: reported once, removed, never resurrected.
    let key = Key::new(&unique("sem-expired")).unwrap();
    let short = Ttl::new(Duration::from_millis(50)).unwrap();
    let (first, second) = (
        permit(&backend, key.as_str(), 2, short.as_duration()),
        permit(&backend, key.as_str(), 2, short.as_duration()),
    );
    wait_until("both permits to expire", || {
        backend
            .holders(key.as_str(), LeaseKind::Permit)
            .unwrap()
            .is_empty()
    });
    let (first_id, second_id) = (
        LockId::new(&first.lock_id).unwrap(),
        LockId::new(&second.lock_id).unwrap(),
    );
    let ttl = Ttl::new(TTL).unwrap();
    assert_eq!(
        backend
            .release_lease(LeaseRef::permit(&first_id, &key))
            .unwrap(),
        Outcome::Expired
    );
    assert_eq!(
        backend
            .release_lease(LeaseRef::permit(&first_id, &key))
            .unwrap(),
        Outcome::NotFound
    );
    // A renewal never deletes (it could deadlock with an acquirer reclaiming the same rows):
    // the expired permit stays expired until a release or the next acquisition removes it.
    for _ in 0..2 {
        assert_eq!(
            backend
                .extend_lease(LeaseRef::permit(&second_id, &key), ttl)
                .unwrap(),
            Outcome::Expired
        );
    }
    assert_eq!(
        backend
            .release_lease(LeaseRef::permit(&second_id, &key))
            .unwrap(),
        Outcome::Expired
    );
    assert_eq!(
        backend
            .extend_lease(LeaseRef::permit(&second_id, &key), ttl)
            .unwrap(),
        Outcome::NotFound
    );
    assert!(
        backend
            .holders(key.as_str(), LeaseKind::Permit)
            .unwrap()
            .is_empty()
    );
}

fn a_mixed_batch_renewal_answers_each_lease(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let outsider = connect();
    let (key_a, key_b) = (unique("sem-batch-a"), unique("sem-batch-b"));
    let locks = [
        lease(backend.acquire(&key_a, TTL)),
        lease(backend.acquire(&key_b, TTL)),
    ];
    let permits = [
        permit(&backend, &key_a, 3, TTL),
        permit(&backend, &key_a, 3, TTL),
        permit(&backend, &key_b, 3, TTL),
    ];
    let expiring = permit(&backend, &key_b, 3, Duration::from_millis(50));
    // Released from outside: the batch must say so for these, and only these.
    assert!(outsider.release(&locks[1].lock_id).unwrap());
    assert!(release(&outsider, &key_a, &permits[1].lock_id));
    wait_until("the short permit to expire", || {
        outsider.holders(&key_b, LeaseKind::Permit).unwrap().len() == 1
    });
    let (key_a, key_b) = (Key::new(&key_a).unwrap(), Key::new(&key_b).unwrap());
    let ids: Vec<LockId> = [
        &permits[0],
        &locks[0],
        &permits[1],
        &locks[1],
        &expiring,
        &permits[2],
    ]
    .iter()
    .map(|lease| LockId::new(&lease.lock_id).unwrap())
    .collect();
    let ttl = Ttl::new(TTL).unwrap();
    let batch = [
        (LeaseRef::permit(&ids[0], &key_a), ttl),
        (LeaseRef::new(&ids[1]).with_key(&key_a), ttl),
        (LeaseRef::permit(&ids[2], &key_a), ttl),
        (LeaseRef::new(&ids[3]).with_key(&key_b), ttl),
        (LeaseRef::permit(&ids[4], &key_b), ttl),
        // The right lock id under the wrong key is not that permit.
        (LeaseRef::permit(&ids[5], &key_a), ttl),
        (LeaseRef::permit(&ids[5], &key_b), ttl),
    ];
    let answers: Vec<_> = backend
        .extend_leases(&batch)
        .into_iter()
        .map(|answer| answer.unwrap())
        .collect();
    let kinds: Vec<&str> = answers
        .iter()
        .map(|answer| match answer {
            Outcome::Applied(_) => "applied",
            Outcome::NotFound => "not found",
            Outcome::Expired => "expired",
            Outcome::NotOwner => "not owner",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "applied",
            "applied",
            "not found",
            "not found",
            "expired",
            "not found",
            "applied"
        ]
    );
    for (answer, before) in [
        (&answers[0], permits[0].expires_at_ms),
        (&answers[1], locks[0].expires_at_ms),
        (&answers[6], permits[2].expires_at_ms),
    ] {
        let after = answer.clone().applied().unwrap().expires_at_ms;
        assert!(after >= before, "{after} < {before}");
    }
    assert!(backend.release(&locks[0].lock_id).unwrap());
    assert!(release(&backend, key_a.as_str(), &permits[0].lock_id));
    assert!(release(&backend, key_b.as_str(), &permits[2].lock_id));
}

fn each_acquisition_is_judged_by_its_own_n(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = unique("sem-disagree");
    let held = [
        permit(&backend, &key, 2, TTL),
        permit(&backend, &key, 2, TTL),
    ];
    assert!(matches!(
        backend
            .acquire_as(&key, syncguard::Mode::permits(2).unwrap(), TTL)
            .unwrap(),
        AcquireOutcome::Locked
    ));
    let third = permit(&backend, &key, 5, TTL);
    assert!(matches!(
        backend
            .acquire_as(&key, syncguard::Mode::permits(3).unwrap(), TTL)
            .unwrap(),
        AcquireOutcome::Locked
    ));
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 3);
    for lease in held.iter().chain([&third]) {
        assert!(release(&backend, &key, &lease.lock_id));
    }
}

fn holders_come_in_fence_order_with_their_description(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let key = Key::new(&unique("sem-holders")).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let permits = Permits::new(3).unwrap();
    let descriptions = [Some("worker a"), None, Some("worker c")];
    let granted: Vec<_> = descriptions
        .iter()
        .map(|description| {
            let holder = description.map(|d| Holder::new(d).unwrap());
            let asked = Request::one(&key, ttl).mode(LeaseMode::Permit(permits));
            match backend.acquire_one(&asked.holder(holder.as_ref())).unwrap() {
                Acquisition::Acquired { lease, .. } => lease,
                Acquisition::Locked => panic!("refused"),
            }
        })
        .collect();
    let found = backend.find(Find::Key(&key, LeaseKind::Permit)).unwrap();
    assert_eq!(found.len(), 3);
    for ((record, lease), description) in found.iter().zip(&granted).zip(descriptions) {
        assert_eq!(record.lock_id, lease.lock_id);
        assert_eq!(record.fence, lease.fence);
        assert_eq!(record.key, key.as_str());
        assert_eq!(record.expires_at_ms, lease.expires_at_ms);
        assert_eq!(record.holder.as_deref(), description);
    }
    assert!(found.windows(2).all(|w| w[0].fence < w[1].fence));
    let infos = backend.holders(key.as_str(), LeaseKind::Permit).unwrap();
    assert_eq!(infos[0].holder.as_deref(), Some("worker a"));
    for lease in &granted {
        assert!(release(&backend, key.as_str(), &lease.lock_id));
    }
}

/// The permit listing orders by user key in byte order (`COLLATE "C"`, whatever the database's
/// collation), then fence; returns each permit's holder; leaves out an expired permit whose row
/// is still there; and refuses a prefix PostgreSQL text cannot hold.
fn permits_are_listed_in_byte_order_live_only(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let prefix = unique("sem-list-order");
    // Byte order: "Z" (0x5A) < "a" (0x61) < "é" (0xC3 0xA9); a linguistic collation differs.
    let keys = [
        format!("{prefix}:é"),
        format!("{prefix}:a"),
        format!("{prefix}:Z"),
    ];
    let ttl = Ttl::new(TTL).unwrap();
    let two = Permits::new(2).unwrap();
    let worker = Holder::new("worker z").unwrap();
    let mut held = Vec::new();
    for key in &keys {
        let key = Key::new(key).unwrap();
        for holder in [Some(&worker), None] {
            let asked = Request::one(&key, ttl).mode(LeaseMode::Permit(two));
            match backend.acquire_one(&asked.holder(holder)).unwrap() {
                Acquisition::Acquired { lease, .. } => held.push((key.clone(), lease)),
                Acquisition::Locked => panic!("refused"),
            }
        }
    }
    let expired_key = format!("{prefix}:b");
    let expired = permit(&backend, &expired_key, 1, Duration::from_millis(100));
    let under = KeyPrefix::new(&format!("{prefix}:")).unwrap();
    let wanted: Vec<(String, &str)> = [2, 1, 0]
        .iter()
        .flat_map(|&k| [(keys[k].clone(), "worker z"), (keys[k].clone(), "")])
        .collect();
    let listed = |limit: usize| {
        backend
            .list_records(&under, LeaseKind::Permit, ListLimit::new(limit).unwrap())
            .unwrap()
    };
    // The short permit's row stays (nothing acquires on its key) once it has expired.
    wait_until("the short permit to expire", || {
        !listed(10)
            .locks
            .iter()
            .any(|r| r.lock_id == expired.lock_id)
    });
    let list = listed(10);
    assert_eq!(list.coverage, syncguard::Coverage::Complete);
    let got: Vec<(String, &str)> = list
        .locks
        .iter()
        .map(|r| (r.key.clone(), r.holder.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(got, wanted);
    assert!(
        list.locks
            .windows(2)
            .all(|w| w[0].key != w[1].key || w[0].fence < w[1].fence)
    );
    for record in &list.locks {
        let (_, lease) = held
            .iter()
            .find(|(_, lease)| lease.lock_id == record.lock_id)
            .expect("a listed permit was granted here");
        assert_eq!(
            (record.fence, record.expires_at_ms),
            (lease.fence, lease.expires_at_ms)
        );
    }
    let rows: i64 = shared_postgres()
        .client()
        .query_one(
            "SELECT count(*) FROM syncguard_locks_permits WHERE key = $1",
            &[&backend.storage_key(&expired_key).unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "the expired permit's row is still there");
    let cut = listed(5);
    assert_eq!(cut.coverage, syncguard::Coverage::LimitReached);
    assert_eq!(cut.locks, list.locks[..5]);
    let exact = listed(6);
    assert_eq!(exact.coverage, syncguard::Coverage::Complete);
    let nul = backend
        .list_records(
            &KeyPrefix::new("a\0").unwrap(),
            LeaseKind::Permit,
            ListLimit::new(1).unwrap(),
        )
        .unwrap_err();
    assert_eq!(nul.code(), ErrorCode::InvalidArgument, "{nul}");
    for (key, lease) in &held {
        assert!(release(&backend, key.as_str(), &lease.lock_id));
    }
    assert!(!release(&backend, &expired_key, &expired.lock_id));
}

/// A permit acquisition whose answer is lost with its connection (the proxy closes it as the
/// answer comes back: the server has granted the permit) is repeated once by the pool on a
/// fresh connection, with the same lock id: the repeat answers the permit the first call was
/// granted (same lock id, same fence, granted), stores no second one, and leaves the semaphore
/// to its holder: once released, the next acquisition of the one permit is granted. With two
/// permits, a repeat would otherwise insert its permit twice (a duplicate key); with one, it
/// would find the semaphore full of its own orphaned permit.
fn a_repeated_permit_acquisition_answers_the_first_ones_permit(upstream: u16) {
    let (proxy, backend) = support::postgres_through_a_proxy(upstream);
    let other = direct();
    let mut client = shared_postgres().client();
    for n in [1, 2] {
        let key = unique(&format!("sem-repeat-{n}"));
        // The pool's connection is open before the answer to lose is chosen.
        assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
        let cuts = proxy.answers_cut();
        proxy.cut_answer_to(b"_pacquire_v");
        let held = permit(&backend, &key, n, TTL);
        assert_eq!(proxy.answers_cut(), cuts + 1, "N={n}: an answer was lost");
        assert_eq!(held.fence.value(), 1, "N={n}: the first call's fence");
        let rows: Vec<(String, String)> = client
            .query(
                "SELECT lock_id, fence FROM syncguard_locks_permits WHERE key = $1",
                &[&backend.storage_key(&key).unwrap()],
            )
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(
            rows,
            [(held.lock_id.clone(), held.fence.to_string())],
            "N={n}: one permit row, the one answered"
        );
        assert!(release(&backend, &key, &held.lock_id));
        // No orphan holds the semaphore: its one permit (or both) are free again.
        let next = permit(&other, &key, 1, TTL);
        assert_eq!(next.fence.value(), 2, "N={n}: no fence was drawn twice");
        assert!(release(&other, &key, &next.lock_id));
    }
}

/// A semaphore per job id: 1 000 keys, one permit each, never released (their holders died)
/// and never asked for again. Once they have been expired for over a minute (their expiry is
/// moved back ten minutes, as the clock would have moved on), permit acquisitions on another
/// key delete them, a few each: the permit table keeps none of them. The semaphore rows stay:
/// they hold the fence counters, which are never deleted.
#[test]
fn expired_permits_of_keys_never_used_again_are_deleted() {
    const KEYS: i64 = 1000;
    const TEN_MINUTES_MS: i64 = 600_000;
    let backend = direct();
    let prefix = format!("{}:", unique("sem-single-use"));
    for n in 0..KEYS {
        permit(&backend, &format!("{prefix}{n}"), 1, TTL);
    }
    let mut client = shared_postgres().client();
    let moved = client
        .execute(
            "UPDATE syncguard_locks_permits SET expires_at_ms = expires_at_ms - $2 \
             WHERE starts_with(user_key, $1)",
            &[&prefix, &TEN_MINUTES_MS],
        )
        .unwrap();
    assert_eq!(moved, KEYS as u64);
    let mut rows = |table: &str| -> i64 {
        client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE starts_with(user_key, $1)"),
                &[&prefix],
            )
            .unwrap()
            .get(0)
    };
    // Further activity, on a key of its own: bounded, so that a sweep that never comes fails
    // the test instead of hanging it.
    let busy = unique("sem-busy");
    let mut acquisitions = 0;
    while rows("syncguard_locks_permits") > 0 {
        assert!(
            acquisitions < KEYS,
            "{acquisitions} acquisitions later, {} of the {KEYS} expired permits are still there",
            rows("syncguard_locks_permits")
        );
        let held = permit(&backend, &busy, 1, TTL);
        assert!(release(&backend, &busy, &held.lock_id));
        acquisitions += 1;
    }
    assert_eq!(rows("syncguard_locks_semaphores"), KEYS);
}

#[test]
fn a_bad_number_of_permits_is_refused_before_any_io() {
    shared_postgres_with_tables();
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], shared_postgres().port));
    let proxy = FaultProxy::start(local);
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/postgres",
        support::PG_USER,
        support::PG_PASSWORD,
        proxy.port()
    );
    let backend = support::impatient_postgres(&url).build().unwrap();
    // From now on any call that reaches the network hangs until its deadline.
    proxy.set_mode(Mode::BlackHole);
    let key = unique("sem-bad-n");
    for bad in [0, 1001, u32::MAX] {
        let started = Instant::now();
        let error = syncguard::Mode::permits(bad)
            .and_then(|mode| backend.acquire_as(&key, mode, TTL))
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
        assert!(
            started.elapsed() < BRISK,
            "{bad}: answered after a network call"
        );
    }
    // The black hole does swallow calls that get that far.
    let error = backend
        .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
        .unwrap_err();
    assert_ne!(error.code(), ErrorCode::InvalidArgument, "{error}");
}

#[test]
fn a_permit_release_wakes_watchers() {
    let backend = direct();
    let key = unique("sem-wake");
    let heard = Arc::new(Mutex::new(Vec::<String>::new()));
    let on_release = {
        let heard = Arc::clone(&heard);
        Arc::new(move |key: &str| heard.lock().unwrap().push(key.to_owned()))
    };
    let watch = backend
        .watch_releases(on_release)
        .unwrap()
        .expect("PostgreSQL announces releases");
    watch.watch(&Key::new(&key).unwrap());
    // The watch's LISTEN may still be on its way when the first release is announced (and
    // PostgreSQL keeps no notification for a listener that came later): release again until
    // one is heard.
    wait_until("a permit release to be announced", || {
        let held = permit(&backend, &key, 2, TTL);
        assert!(release(&backend, &key, &held.lock_id));
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if heard.lock().unwrap().contains(&key) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
}

/// Names of what setup creates for semaphores on `locks`, and whether each exists.
fn semaphore_objects(client: &mut postgres::Client, locks: &str) -> Vec<(String, bool)> {
    let mut names: Vec<String> = ["semaphores", "permits"]
        .iter()
        .map(|table| format!("to_regclass('{locks}_{table}')"))
        .collect();
    names.extend(
        [
            "pacquire_v8(text, text, bigint, text, bigint, bigint, bigint, text, text, text, bigint)",
            "prelease_v8(text, text, bigint)",
            "prenew_v8(text[], text[], bigint[], bigint)",
            "permits_v8(text, bigint)",
            "plist_v8(text, bigint, bigint)",
        ]
        .iter()
        .map(|function| format!("to_regprocedure('{locks}_{function}')")),
    );
    names
        .into_iter()
        .map(|name| {
            let present: bool = client
                .query_one(&format!("SELECT {name} IS NOT NULL"), &[])
                .unwrap()
                .get(0);
            (name, present)
        })
        .collect()
}

#[test]
fn setup_schema_creates_the_semaphore_tables_and_functions() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let mut client = shared_postgres().client();
    for (name, present) in semaphore_objects(&mut client, &locks) {
        assert!(present, "{name} missing after setup");
    }
    let key = unique("sem-setup");
    let held = permit(&backend, &key, 1, TTL);
    assert!(release(&backend, &key, &held.lock_id));

    // Without the semaphore functions (tables of an older syncguard): refused, saying to run
    // setup.
    client
        .batch_execute(&format!(
            "DROP FUNCTION {locks}_pacquire_v8, {locks}_prelease_v8, {locks}_prenew_v8, \
             {locks}_permits_v8, {locks}_plist_v8"
        ))
        .unwrap();
    let run_setup = |error: syncguard::LockError| {
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
        assert!(error.message().contains("syncguard setup"), "{error}");
    };
    run_setup(
        backend
            .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
            .unwrap_err(),
    );
    run_setup(backend.holders(&key, LeaseKind::Permit).unwrap_err());
    run_setup(backend.list(&key, LeaseKind::Permit, 10).unwrap_err());
    // Locks still go through their functions.
    let lock = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&lock.lock_id).unwrap());
    // setup_schema notices what is missing and installs it again.
    backend.setup_schema().unwrap();
    let held = permit(&backend, &key, 1, TTL);
    assert!(release(&backend, &key, &held.lock_id));

    // Without the permit table (functions left in place): the same refusal.
    client
        .batch_execute(&format!("DROP TABLE {locks}_permits"))
        .unwrap();
    run_setup(
        backend
            .acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL)
            .unwrap_err(),
    );
    run_setup(
        backend
            .release_as(&key, LeaseKind::Permit, &held.lock_id)
            .unwrap_err(),
    );
    backend.setup_schema().unwrap();
    for (name, present) in semaphore_objects(&mut client, &locks) {
        assert!(present, "{name} missing after the second setup");
    }
    let held = permit(&backend, &key, 1, TTL);
    // The semaphore row survived: its fence sequence goes on.
    assert_eq!(held.fence.value(), 3);
}
