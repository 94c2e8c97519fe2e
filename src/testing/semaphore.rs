//! The semaphore contracts: what [`Locker::semaphore`](crate::Locker::semaphore) and the
//! permit calls of [`LockBackend`] promise on a backend that has semaphores. Each takes the
//! backend by value; several [`Locker`]s share it through an `Arc`, as several processes share
//! a store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::driver::{
    Extension, Holder, Key, LeaseKind, LeaseRef, LockId, Mode, Outcome, Permits, Ttl,
};
use crate::{AcquireOutcome, ErrorCode, Lease, LockBackend, LockOptions, Locker, Result};

use super::recorder::recorded_locker;
use super::support::{
    CONTENTION_DEADLINE, EXPIRY_DEADLINE, LONG_TTL, PATIENCE, SHORT_TTL, short_lease, unique_key,
    wait_until,
};

/// A permit of `permits` on `key` for `ttl`, which must be free.
fn permit<B: LockBackend + ?Sized>(backend: &B, key: &str, permits: u32, ttl: Duration) -> Lease {
    match backend.acquire_as(key, Mode::permits(permits).unwrap(), ttl) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("a permit of {permits} on {key:?} should be free, got {other:?}"),
    }
}

/// Whether an acquisition of `permits` on `key` is refused.
fn refused<B: LockBackend + ?Sized>(backend: &B, key: &str, permits: u32) -> bool {
    matches!(
        backend.acquire_as(key, Mode::permits(permits).unwrap(), LONG_TTL),
        Ok(AcquireOutcome::Locked)
    )
}

/// Eight threads on two lockers contend for a semaphore of 3, each holding a permit for a
/// moment several times: never more than three inside at once, every fence different, and a
/// permit asked for after another was given back has the larger fence.
pub fn never_more_than_n_holders<B: LockBackend + 'static>(backend: B) {
    const PERMITS: usize = 3;
    let key = unique_key("sem-holders");
    let backend = Arc::new(backend);
    let options = LockOptions::default().timeout(CONTENTION_DEADLINE);
    let lockers = [
        Locker::with_defaults(Arc::clone(&backend), options.clone()),
        Locker::with_defaults(Arc::clone(&backend), options),
    ];
    let inside = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let sections: Mutex<Vec<(u64, Instant, Instant)>> = Mutex::default();
    thread::scope(|scope| {
        for t in 0..8 {
            let semaphore = lockers[t % 2].semaphore(&key, PERMITS as u32).unwrap();
            let (inside, most, sections) = (&inside, &most, &sections);
            scope.spawn(move || {
                for _ in 0..4 {
                    let asked = Instant::now();
                    let guard = semaphore.acquire().expect("a permit within the deadline");
                    let now_inside = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now_inside, Ordering::SeqCst);
                    // Work while holding the permit (not synchronisation): others contend.
                    thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let fence = guard.fence().value();
                    assert!(guard.release().expect("release"), "the permit was held");
                    let given_back = Instant::now();
                    sections.lock().unwrap().push((fence, asked, given_back));
                }
            });
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=PERMITS).contains(&most),
        "{most} holders at once of {PERMITS}"
    );
    let sections = sections.into_inner().unwrap();
    let mut fences: Vec<u64> = sections.iter().map(|(fence, _, _)| *fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), sections.len(), "a fence was granted twice");
    for (fence_a, _, given_back_a) in &sections {
        for (fence_b, asked_b, _) in &sections {
            assert!(
                !(given_back_a < asked_b && fence_a > fence_b),
                "fence {fence_b} was granted after fence {fence_a} was given back"
            );
        }
    }
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
}

/// A semaphore's fences are a sequence of its own: they grow with each permit, also across
/// releases, and the lock on the same key keeps its own.
pub fn permit_fences_are_the_semaphores_own<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-fences");
    let lock = super::support::acquired(&backend, &key, LONG_TTL);
    let first = permit(&backend, &key, 2, LONG_TTL);
    let second = permit(&backend, &key, 2, LONG_TTL);
    assert_eq!((first.fence.value(), second.fence.value()), (1, 2));
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &first.lock_id)
            .unwrap()
    );
    let third = permit(&backend, &key, 2, LONG_TTL);
    assert_eq!(third.fence.value(), 3, "fences grow across releases");
    assert_eq!(third.fence.to_string().len(), 15, "{}", third.fence);
    assert!(backend.release(&lock.lock_id).unwrap());
    let next_lock = super::support::acquired(&backend, &key, LONG_TTL);
    assert_eq!(
        (lock.fence.value(), next_lock.fence.value()),
        (1, 2),
        "the lock's fences ignore the permits"
    );
    for lease in [&second, &third] {
        assert!(
            backend
                .release_as(&key, LeaseKind::Permit, &lease.lock_id)
                .unwrap()
        );
    }
    assert!(backend.release(&next_lock.lock_id).unwrap());
}

/// The lock on a key and the semaphore on it are two things: neither holds, frees, lists or
/// renews the other. A semaphore of one permit is not the lock.
pub fn the_lock_and_the_semaphore_of_a_key_are_apart<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-apart");
    let lock = super::support::acquired(&backend, &key, LONG_TTL);
    let only = permit(&backend, &key, 1, LONG_TTL);
    assert!(refused(&backend, &key, 1), "the one permit is taken");
    assert!(backend.is_locked(&key).unwrap());
    let holders = backend.holders_raw(&key, LeaseKind::Permit).unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lock_id, only.lock_id, "the permit, not the lock");
    // Each id names its own kind only.
    assert!(
        !backend.release(&only.lock_id).unwrap(),
        "a permit is no lock"
    );
    assert!(
        !backend
            .release_as(&key, LeaseKind::Permit, &lock.lock_id)
            .unwrap()
    );
    assert!(
        backend
            .extend_as(&key, LeaseKind::Permit, &lock.lock_id, LONG_TTL)
            .unwrap()
            .is_none()
    );
    assert!(backend.release(&lock.lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
    assert!(refused(&backend, &key, 1), "the permit outlives the lock");
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &only.lock_id)
            .unwrap()
    );
    let lock = super::support::acquired(&backend, &key, LONG_TTL);
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
    assert!(backend.release(&lock.lock_id).unwrap());
}

/// Each acquisition is judged by its own number: with two permits held, a caller of two is
/// refused and a caller of five is not; then a caller of three is refused.
pub fn each_acquisition_is_judged_by_its_own_permits<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-disagree");
    let held = [
        permit(&backend, &key, 2, LONG_TTL),
        permit(&backend, &key, 2, LONG_TTL),
    ];
    assert!(refused(&backend, &key, 2));
    assert!(refused(&backend, &key, 1));
    let wider = permit(&backend, &key, 5, LONG_TTL);
    assert!(refused(&backend, &key, 3), "three are held");
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 3);
    for lease in held.iter().chain([&wider]) {
        assert!(
            backend
                .release_as(&key, LeaseKind::Permit, &lease.lock_id)
                .unwrap()
        );
    }
}

/// A permit nobody renews is reclaimed by the next acquisition once it has expired; the old
/// holder can neither renew nor release it any more.
pub fn expired_permits_are_reclaimed<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-expiry");
    let old = permit(&backend, &key, 1, SHORT_TTL);
    assert!(refused(&backend, &key, 1));
    let mut new = None;
    wait_until(
        "the expired permit to be reclaimed",
        EXPIRY_DEADLINE,
        || {
            new = backend
                .acquire_as(&key, Mode::permits(1).unwrap(), LONG_TTL)
                .expect("acquire_as a permit")
                .lease();
            new.is_some()
        },
    );
    let new = new.expect("reclaimed");
    assert!(new.fence > old.fence);
    assert!(
        backend
            .extend_as(&key, LeaseKind::Permit, &old.lock_id, LONG_TTL)
            .unwrap()
            .is_none()
    );
    assert!(
        !backend
            .release_as(&key, LeaseKind::Permit, &old.lock_id)
            .unwrap()
    );
    let holders = backend.holders_raw(&key, LeaseKind::Permit).unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lock_id, new.lock_id);
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &new.lock_id)
            .unwrap()
    );
}

/// Releasing and extending a permit are idempotent and answer by lock id: a second release
/// is `false`, an extension after it `None`, and ids never issued are absent.
pub fn permit_release_and_extend_are_idempotent<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-idempotent");
    let lease = permit(&backend, &key, 2, LONG_TTL);
    let extended = backend
        .extend_as(&key, LeaseKind::Permit, &lease.lock_id, LONG_TTL)
        .unwrap()
        .expect("a held permit extends");
    assert!(extended >= lease.expires_at_ms);
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &lease.lock_id)
            .unwrap()
    );
    assert!(
        !backend
            .release_as(&key, LeaseKind::Permit, &lease.lock_id)
            .unwrap()
    );
    assert!(
        backend
            .extend_as(&key, LeaseKind::Permit, &lease.lock_id, LONG_TTL)
            .unwrap()
            .is_none()
    );
    let stranger = crate::driver::generate_lock_id();
    assert!(
        !backend
            .release_as(&key, LeaseKind::Permit, &stranger)
            .unwrap()
    );
    assert!(
        backend
            .extend_as(&key, LeaseKind::Permit, &stranger, LONG_TTL)
            .unwrap()
            .is_none()
    );
    let other_key = unique_key("sem-idempotent-other");
    let held = permit(&backend, &key, 2, LONG_TTL);
    assert!(
        !backend
            .release_as(&other_key, LeaseKind::Permit, &held.lock_id)
            .unwrap(),
        "a permit is found under its own key only"
    );
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &held.lock_id)
            .unwrap()
    );
}

/// A heartbeat batch may hold locks and permits together: each lease gets its own answer,
/// including those removed from outside.
pub fn batch_renewals_answer_locks_and_permits_apart<B: LockBackend + 'static>(backend: B) {
    let (key_a, key_b) = (unique_key("sem-batch-a"), unique_key("sem-batch-b"));
    let lock_a = super::support::acquired(&backend, &key_a, LONG_TTL);
    let permits: Vec<Lease> = (0..3)
        .map(|_| permit(&backend, &key_a, 3, LONG_TTL))
        .collect();
    let lock_b = super::support::acquired(&backend, &key_b, LONG_TTL);
    let permit_b = permit(&backend, &key_b, 1, LONG_TTL);
    assert!(
        backend
            .release_as(&key_a, LeaseKind::Permit, &permits[1].lock_id)
            .unwrap()
    );
    assert!(backend.release(&lock_b.lock_id).unwrap());
    let names: Vec<(Key, LockId, bool)> = [
        (&key_a, &lock_a, false),
        (&key_a, &permits[0], true),
        (&key_a, &permits[1], true),
        (&key_b, &lock_b, false),
        (&key_a, &permits[2], true),
        (&key_b, &permit_b, true),
    ]
    .into_iter()
    .map(|(key, lease, is_permit)| {
        (
            Key::new(key).unwrap(),
            LockId::new(&lease.lock_id).unwrap(),
            is_permit,
        )
    })
    .collect();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let batch: Vec<(LeaseRef<'_>, Ttl)> = names
        .iter()
        .map(|(key, id, is_permit)| {
            let lease = if *is_permit {
                LeaseRef::permit(id, key)
            } else {
                LeaseRef::new(id).with_key(key)
            };
            (lease, ttl)
        })
        .collect();
    let answers: Vec<bool> = backend
        .extend_leases(&batch)
        .into_iter()
        .map(|answer: Result<Outcome<Extension>>| {
            matches!(answer.expect("a renewal answer"), Outcome::Applied(_))
        })
        .collect();
    assert_eq!(answers, [true, true, false, false, true, true]);
    for (key, lease) in [
        (&key_a, &permits[0]),
        (&key_a, &permits[2]),
        (&key_b, &permit_b),
    ] {
        assert!(
            backend
                .release_as(key, LeaseKind::Permit, &lease.lock_id)
                .unwrap()
        );
    }
    assert!(backend.release(&lock_a.lock_id).unwrap());
}

/// A permit's guard is a lock's guard: the heartbeat keeps a short permit alive past its TTL,
/// a permit removed from outside is reported lost, and dropping the guard gives the permit
/// back.
pub fn permit_guards_renew_report_loss_and_release<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-guard");
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    let options = short_lease(1_500, 100).on_lock_lost(move |error| {
        let _ = lost_tx.lock().unwrap().send(error.code());
    });
    let locker = Locker::with_defaults(backend, options);
    let semaphore = locker.semaphore(&key, 2).unwrap();
    let kept = semaphore.acquire().unwrap();
    let removed = semaphore.acquire().unwrap();
    let first_expiry = kept.expires_at_ms();
    wait_until("the heartbeat to renew the permit", PATIENCE, || {
        kept.expires_at_ms() > first_expiry
    });
    let backend = locker.backend();
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, removed.lock_id())
            .unwrap()
    );
    let code = lost_rx
        .recv_timeout(PATIENCE)
        .expect("on_lock_lost was called");
    assert_eq!(code, ErrorCode::LockLost);
    assert!(removed.is_lost());
    assert!(!kept.is_lost(), "only the removed permit is lost");
    assert!(kept.check().is_ok());
    let kept_id = kept.lock_id().to_owned();
    drop(kept);
    assert!(
        !backend
            .release_as(&key, LeaseKind::Permit, &kept_id)
            .unwrap(),
        "given back on drop"
    );
    assert!(!removed.release().unwrap(), "already gone");
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
}

/// A waiter for a full semaphore gets the permit a holder gives back.
pub fn a_waiter_gets_a_released_permit<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-wait");
    let locker =
        Locker::with_defaults(backend, LockOptions::default().timeout(CONTENTION_DEADLINE));
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let held = semaphore.acquire().unwrap();
    let held_fence = held.fence().value();
    let (started_tx, started_rx) = mpsc::channel();
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            let _ = started_tx.send(());
            semaphore.acquire().map(|guard| guard.fence().value())
        })
    };
    started_rx
        .recv_timeout(PATIENCE)
        .expect("the waiter started");
    assert!(semaphore.try_acquire().unwrap().is_none(), "still full");
    assert!(held.release().unwrap());
    let fence = waiter
        .join()
        .expect("the waiter did not panic")
        .expect("the waiter got the permit");
    assert!(fence > held_fence);
}

/// `min_hold` keeps a permit given back early until the hold ends; `detach` leaves it held
/// under its lease, releasable by its key and lock id.
pub fn min_hold_and_detach_keep_the_permit<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-hold");
    let locker = Locker::new(backend);
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let options = LockOptions::default().min_hold(Duration::from_secs(60));
    let early = semaphore.acquire_with(&options).unwrap();
    let early_id = early.lock_id().to_owned();
    assert!(
        early.release().unwrap(),
        "kept, as held until the hold ends"
    );
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "the permit stays held"
    );
    let backend = locker.backend();
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &early_id)
            .unwrap()
    );

    let detached = semaphore
        .try_acquire()
        .unwrap()
        .expect("free again")
        .detach();
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "a detached permit stays held"
    );
    assert_eq!(
        backend.holders_raw(&key, LeaseKind::Permit).unwrap()[0].lock_id,
        detached.lock_id
    );
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &detached.lock_id)
            .unwrap()
    );
}

/// Holders are listed in fence order with the descriptions given at acquisition.
pub fn holders_are_listed_in_fence_order<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("sem-list");
    let locker = Locker::new(backend);
    let semaphore = locker.semaphore(&key, 3).unwrap();
    let described_as = |holder: &str| LockOptions::default().holder(holder);
    let guards = [
        semaphore.acquire_with(&described_as("worker-a:1")).unwrap(),
        semaphore.acquire_with(&described_as("worker-b:2")).unwrap(),
        semaphore.acquire().unwrap(),
    ];
    let holders = semaphore.holders_raw().unwrap();
    let described: Vec<(String, u64, Option<String>)> = holders
        .iter()
        .map(|raw| {
            (
                raw.lock_id.clone(),
                raw.info.fence.value(),
                raw.info.holder.clone(),
            )
        })
        .collect();
    let expected: Vec<(String, u64, Option<String>)> = guards
        .iter()
        .zip([Some("worker-a:1"), Some("worker-b:2"), None])
        .map(|(guard, holder)| {
            (
                guard.lock_id().to_owned(),
                guard.fence().value(),
                holder.map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(described, expected);
    let sanitised = semaphore.holders().unwrap();
    assert_eq!(sanitised.len(), 3);
    assert_eq!(sanitised[0].key_hash, crate::driver::hash_key(&key));
    assert_eq!(
        sanitised[0].lock_id_hash,
        crate::driver::hash_key(guards[0].lock_id())
    );
    assert!(sanitised.windows(2).all(|w| w[0].fence < w[1].fence));
}

/// A bad number of permits, key or holder is refused with `InvalidArgument` before the store
/// is asked anything.
pub fn bad_permits_are_refused_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    for permits in [0, crate::driver::MAX_PERMITS + 1] {
        let error = locker.semaphore("k", permits).err().expect("refused");
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{permits}");
        let error = Mode::permits(permits).expect_err("refused");
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{permits}");
    }
    assert!(Permits::new(crate::driver::MAX_PERMITS).is_ok());
    assert_eq!(
        locker.semaphore("", 2).err().expect("refused").code(),
        ErrorCode::InvalidArgument
    );
    let semaphore = locker.semaphore("k", 2).unwrap();
    let bad_ttl = LockOptions::default().ttl(Duration::ZERO);
    let bad_holder = LockOptions::default().holder("two\nlines");
    for options in [bad_ttl, bad_holder] {
        let error = semaphore.acquire_with(&options).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{options:?}");
    }
    let bad_id = locker
        .backend()
        .release_as("k", LeaseKind::Permit, "not-a-lock-id");
    assert_eq!(bad_id.unwrap_err().code(), ErrorCode::InvalidArgument);
    assert!(Holder::new("fine").is_ok());
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());
}

/// Permits are listed by key prefix, sorted by key then fence, cut at the limit; locks are not
/// among them, and a listing of locks shows no permit.
pub fn permits_are_listed_by_prefix<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("sem-listing");
    let (key_a, key_b) = (format!("{prefix}:a"), format!("{prefix}:b"));
    let a1 = permit(&backend, &key_a, 2, LONG_TTL);
    let a2 = permit(&backend, &key_a, 2, LONG_TTL);
    let b1 = permit(&backend, &key_b, 2, LONG_TTL);
    let lock = super::support::acquired(&backend, &key_b, LONG_TTL);
    let outside = permit(&backend, &format!("{prefix}-other"), 1, LONG_TTL);
    let under = format!("{prefix}:");
    let listed = backend.list_raw(&under, LeaseKind::Permit, 10).unwrap();
    let ids: Vec<&str> = listed
        .locks
        .iter()
        .map(|raw| raw.lock_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [&a1.lock_id, &a2.lock_id, &b1.lock_id],
        "by key, then fence"
    );
    assert_eq!(listed.coverage, crate::Coverage::Complete);
    assert_eq!(listed.locks[2].key, key_b);
    let cut = backend.list(&under, LeaseKind::Permit, 2).unwrap();
    assert_eq!(cut.locks.len(), 2);
    assert_eq!(cut.coverage, crate::Coverage::LimitReached);
    assert_eq!(
        cut.locks[0].lock_id_hash,
        crate::driver::hash_key(&a1.lock_id)
    );
    let locks = backend.list_raw(&under, LeaseKind::Lock, 10).unwrap();
    let lock_ids: Vec<&str> = locks.locks.iter().map(|raw| raw.lock_id.as_str()).collect();
    assert_eq!(
        lock_ids,
        [lock.lock_id.as_str()],
        "a listing of locks shows no permit"
    );
    assert!(
        backend
            .release_as(&key_a, LeaseKind::Permit, &a1.lock_id)
            .unwrap()
    );
    assert_eq!(
        backend
            .list(&under, LeaseKind::Permit, 10)
            .unwrap()
            .locks
            .len(),
        2
    );
    for (key, lease) in [(&key_a, &a2), (&key_b, &b1)] {
        assert!(
            backend
                .release_as(key, LeaseKind::Permit, &lease.lock_id)
                .unwrap()
        );
    }
    assert!(
        backend
            .release_as(
                &format!("{prefix}-other"),
                LeaseKind::Permit,
                &outside.lock_id
            )
            .unwrap()
    );
    assert!(backend.release(&lock.lock_id).unwrap());
    assert!(
        backend
            .list(&under, LeaseKind::Permit, 10)
            .unwrap()
            .locks
            .is_empty()
    );
}

/// Permits are observed as leases of kind `permit`: acquired, refused when all are held (by
/// one attempt and by a bounded wait), renewed, and released.
pub fn permits_are_observed<B: LockBackend + 'static>(backend: B) {
    use crate::observe::{Kind, Refusal, Release};
    use crate::testing::observed::{EventLog, Seen};

    let key = unique_key("sem-observed");
    let log = Arc::new(EventLog::default());
    let (locker, _) = recorded_locker(backend, short_lease(5_000, 500));
    let locker = locker.with_observer(log.clone());
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let permit = semaphore.acquire().unwrap();
    assert!(semaphore.try_acquire().unwrap().is_none());
    let short = Duration::from_millis(300);
    assert!(semaphore.try_acquire_for(short).unwrap().is_none());
    wait_until("a renewal of the permit", PATIENCE, || {
        log.count(&key, |seen| *seen == Seen::Renewed) >= 1
    });
    assert!(permit.release().unwrap());
    let events: Vec<Seen> = log
        .of(&key)
        .into_iter()
        .filter(|seen| *seen != Seen::Renewed)
        .collect();
    match events.as_slice() {
        [
            Seen::Acquired {
                kind: Kind::Permit,
                attempts: 1,
                ..
            },
            Seen::NotAcquired {
                kind: Kind::Permit,
                why: Refusal::Held,
            },
            Seen::NotAcquired {
                kind: Kind::Permit,
                why: Refusal::Timeout,
            },
            Seen::Released {
                kind: Kind::Permit,
                how: Release::Released,
                after_loss: false,
            },
        ] => {}
        other => panic!("the permit's events: {other:?}"),
    }
}
