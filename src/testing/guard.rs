//! Guard and heartbeat contract: what `Locker`/`LockGuard` promise on top of any backend.
//!
//! Every test wraps the backend under test in a [`Recorder`], which logs each call in order
//! (so tests can prove what was or was not sent) and can inject failures.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::{
    Backoff, CancelToken, ErrorCode, Heartbeat, Jitter, LockBackend, LockGuard, LockOptions,
    Locker, owns,
};

use super::recorder::{Call, Recorder, recorded_locker};
use super::support::{PATIENCE, short_lease, unique_key, wait_until};

mod failures;
mod isolation;
mod min_hold;
mod observe;
pub use self::failures::*;
pub use self::isolation::*;
pub use self::min_hold::*;
pub use self::observe::*;

/// Dropping a guard releases its lock.
pub fn drop_releases<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("drop");
    let locker = Locker::new(backend);
    let guard = locker.lock(&key).unwrap();
    let lock_id = guard.lock_id().to_owned();
    assert!(locker.backend().is_locked(&key).unwrap());
    drop(guard);
    assert!(!locker.backend().is_locked(&key).unwrap());
    assert!(!owns(locker.backend(), &lock_id).unwrap());
}

/// `release(self)` reports whether it removed the lock; the next holder gets a higher fence.
pub fn release_reports_and_fences_grow<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("release");
    let locker = Locker::new(backend);
    let first = locker.lock(&key).unwrap();
    let first_fence = first.fence().to_owned();
    assert!(first.release().unwrap());
    let second = locker.lock(&key).unwrap();
    assert!(second.fence() > &first_fence);
    assert_eq!(second.key(), key);
    assert!(second.release().unwrap());
}

/// The heartbeat (default schedule: [`Heartbeat::Auto`]) keeps a lease alive past its TTL:
/// once a renewal has moved the expiry a whole TTL beyond the first one — it was made after
/// the first lease would have ended — the guard and the backend still hold the lock. The TTL
/// (3 s) is one that no pause of a loaded machine outlasts; nothing is timed.
pub fn heartbeat_keeps_a_short_lease<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("heartbeat");
    let locker = Locker::new(backend);
    let ttl_ms: i64 = 3_000;
    let guard = locker
        .lock_with(
            &key,
            &LockOptions::default().ttl(Duration::from_millis(ttl_ms.unsigned_abs())),
        )
        .unwrap();
    let first_expiry = guard.expires_at_ms();
    wait_until("a renewal after the first lease ended", PATIENCE, || {
        guard.expires_at_ms() >= first_expiry + ttl_ms || guard.is_lost()
    });
    assert!(!guard.is_lost());
    guard.check().unwrap();
    assert!(owns(locker.backend(), guard.lock_id()).unwrap());
    assert!(guard.release().unwrap());
}

/// A guard outlives its (temporary) `Locker`: the heartbeat keeps running for it.
pub fn guard_outlives_its_locker<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("orphan");
    let recorder = Recorder::new(backend);
    let guard = Locker::new(Arc::clone(&recorder))
        .lock_with(&key, &short_lease(3_000, 50))
        .unwrap();
    let renewal = Call::Extend(guard.lock_id().to_owned());
    wait_until("renewals after the locker was dropped", PATIENCE, || {
        recorder.count(&renewal) >= 3
    });
    guard.check().unwrap();
    assert!(guard.release().unwrap());
}

/// Control for the two tests above: without a heartbeat the same lease lapses and the guard
/// says so.
pub fn without_heartbeat_the_lease_lapses<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("no-heartbeat");
    let (locker, recorder) = recorded_locker(
        backend,
        LockOptions::default()
            .ttl(Duration::from_millis(300))
            .heartbeat(Heartbeat::Off),
    );
    let guard = locker.lock(&key).unwrap();
    wait_until("the guard to report its lease lost", PATIENCE, || {
        guard.is_lost()
    });
    assert_eq!(guard.check().unwrap_err().code(), ErrorCode::LockLost);
    wait_until("the backend to expire the lock", PATIENCE, || {
        !owns(locker.backend(), guard.lock_id()).unwrap()
    });
    assert_eq!(recorder.count(&Call::Extend(guard.lock_id().to_owned())), 0);
    assert!(!guard.release().unwrap());
}

/// A lock removed behind the guard's back is reported lost at the first renewal after the
/// removal: within one heartbeat interval, counted in renewals rather than measured in time.
pub fn removed_lease_is_reported_lost<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("removed");
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    // Renewals every half second: a release by lock id that finds the record changed under it
    // (Firestore's commits are conditioned on the document's update time) reads it again, and
    // against renewals every 100 ms on a loaded emulator it kept losing that race.
    let options = short_lease(5_000, 500).on_lock_lost(move |e| {
        let _ = lost_tx
            .lock()
            .unwrap()
            .send((e.code(), e.key().map(str::to_owned)));
    });
    let (locker, recorder) = recorded_locker(backend, options);
    let guard = locker.lock(&key).unwrap();
    let lock_id = guard.lock_id().to_owned();
    let renewal = Call::Extend(lock_id.clone());
    wait_until("a first renewal", PATIENCE, || {
        recorder.count(&renewal) >= 1
    });

    assert!(locker.backend().release(&lock_id).unwrap());
    // Renewals that started from here on: one logged while the release was in flight may have
    // been served before it (and succeeded), so the count starts once the release is done.
    let removal = recorder.calls().len();
    let (code, lost_key) = lost_rx
        .recv_timeout(PATIENCE)
        .expect("on_lock_lost was called");
    assert_eq!(code, ErrorCode::LockLost);
    assert_eq!(lost_key.as_deref(), Some(key.as_str()));
    assert!(guard.is_lost());
    assert_eq!(guard.check().unwrap_err().code(), ErrorCode::LockLost);
    let renewals_after_removal = recorder.calls()[removal..]
        .iter()
        .filter(|c| **c == renewal)
        .count();
    assert!(
        renewals_after_removal <= 1,
        "lost only after {renewals_after_removal} renewals"
    );

    // Lost for good: no more renewals, extend says no, and release sends nothing.
    assert!(!guard.extend(Duration::from_secs(5)).unwrap());
    let calls_before_release = recorder.calls().len();
    assert!(!guard.release().unwrap());
    assert_eq!(
        recorder.calls()[calls_before_release..]
            .iter()
            .filter(|c| **c == Call::Release(lock_id.clone()))
            .count(),
        0
    );
    assert!(lost_rx.try_recv().is_err(), "on_lock_lost runs once");
}

/// Once release has begun, no renewal of that lease is ever sent. Many guards renewed every
/// millisecond are released while the heartbeat is busy with them; the call log must never
/// show a renewal of a lease after its release started.
pub fn no_renewal_after_release<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, short_lease(2_000, 1));
    for round in 0..5 {
        let guards: Vec<LockGuard> = (0..20)
            .map(|i| {
                locker
                    .lock(&unique_key(&format!("race-{round}-{i}")))
                    .unwrap()
            })
            .collect();
        let first = Call::Extend(guards[0].lock_id().to_owned());
        wait_until("the heartbeat to be renewing", PATIENCE, || {
            recorder.count(&first) >= 1
        });
        for guard in guards {
            guard.release().unwrap();
        }
    }
    let calls = recorder.calls();
    for (at, call) in calls.iter().enumerate() {
        if let Call::Release(lock_id) = call {
            let late = calls[at..]
                .iter()
                .any(|c| *c == Call::Extend(lock_id.clone()));
            assert!(!late, "a renewal was sent after release began");
        }
    }
}

/// `LockGuard::extend` replaces the TTL and the heartbeat carries on from there.
pub fn guard_extend<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("extend");
    let locker = Locker::new(backend);
    let guard = locker
        .lock_with(&key, &LockOptions::default().ttl(Duration::from_secs(5)))
        .unwrap();
    let before = guard.expires_at_ms();
    assert!(guard.extend(Duration::from_secs(60)).unwrap());
    assert!(guard.expires_at_ms() >= before + 50_000);
    let info = crate::get_by_id(locker.backend(), guard.lock_id())
        .unwrap()
        .unwrap();
    assert_eq!(info.expires_at_ms, guard.expires_at_ms());
    assert_eq!(
        guard.extend(Duration::ZERO).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert!(guard.release().unwrap());
}

/// `try_lock` does not wait; `lock` gives up with `AcquisitionTimeout` after its retries.
pub fn contention_outcomes<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("contention");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let held = locker.lock(&key).unwrap();
    let acquires = || recorder.count(&Call::Acquire(key.clone()));

    assert!(locker.try_lock(&key).unwrap().is_none());
    assert_eq!(acquires(), 2);

    let options = LockOptions::default()
        .max_retries(2)
        .retry_delay(Duration::from_millis(1))
        .timeout(Duration::from_secs(60));
    let err = locker.lock_with(&key, &options).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AcquisitionTimeout);
    assert_eq!(err.key(), Some(key.as_str()));
    assert_eq!(acquires(), 2 + 3, "one attempt and two retries");

    let options = LockOptions::default()
        .timeout(Duration::from_millis(50))
        .retry_delay(Duration::from_millis(5));
    let err = locker.lock_with(&key, &options).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AcquisitionTimeout);

    assert!(
        locker
            .try_lock_for(&key, Duration::from_millis(20))
            .unwrap()
            .is_none()
    );
    drop(held);
    assert!(locker.try_lock(&key).unwrap().is_some());
}

/// A waiter blocked on a held lock wakes up when another holder releases.
pub fn waiter_gets_the_lock_after_release<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("handoff");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let held = locker.lock(&key).unwrap();
    let first_fence = held.fence().to_owned();
    let waiter = thread::spawn({
        let locker = locker.clone();
        let key = key.clone();
        move || {
            let options = LockOptions::default()
                .retry_delay(Duration::from_millis(5))
                .timeout(Duration::from_secs(60))
                .max_retries(u32::MAX);
            locker
                .lock_with(&key, &options)
                .map(|g| g.fence().to_owned())
        }
    });
    wait_until("the waiter to be retrying", PATIENCE, || {
        recorder.count(&Call::Acquire(key.clone())) >= 3
    });
    drop(held);
    let fence = waiter.join().unwrap().unwrap();
    assert!(fence > first_fence);
}

/// A cancel token ends a wait with `Aborted`, before the first attempt or during backoff.
pub fn cancel_aborts_the_wait<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("cancel");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let _held = locker.lock(&key).unwrap();

    let cancelled = CancelToken::new();
    cancelled.cancel();
    let err = locker
        .lock_with(&key, &LockOptions::default().cancel(cancelled))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Aborted);

    let cancel = CancelToken::new();
    let waiter = thread::spawn({
        let locker = locker.clone();
        let key = key.clone();
        let options = LockOptions::default()
            .retry_delay(Duration::from_secs(30))
            .backoff(Backoff::Fixed)
            .jitter(Jitter::None)
            .timeout(Duration::from_secs(3600))
            .cancel(cancel.clone());
        move || locker.lock_with(&key, &options).map(|_| ())
    });
    // The holder's acquire, then the waiter's first attempt: it is now in its 30 s backoff.
    wait_until("the waiter to have tried once", PATIENCE, || {
        recorder.count(&Call::Acquire(key.clone())) >= 2
    });
    cancel.cancel();
    assert_eq!(
        waiter.join().unwrap().unwrap_err().code(),
        ErrorCode::Aborted
    );
}

/// Bad input fails with `InvalidArgument` before anything reaches the backend.
pub fn invalid_input_sends_nothing<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let too_long = "k".repeat(513);
    let cases: Vec<(&str, LockOptions)> = vec![
        ("", LockOptions::default()),
        (too_long.as_str(), LockOptions::default()),
        ("k", LockOptions::default().ttl(Duration::ZERO)),
        ("k", LockOptions::default().ttl(Duration::from_micros(1500))),
        (
            "k",
            LockOptions::default()
                .ttl(Duration::from_secs(1))
                .heartbeat(Heartbeat::Every(Duration::from_secs(1))),
        ),
        (
            "k",
            LockOptions::default().heartbeat(Heartbeat::Every(Duration::ZERO)),
        ),
    ];
    for (key, options) in &cases {
        let err = locker.lock_with(key, options).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{options:?}");
    }
    assert_eq!(
        locker.try_lock("").unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        locker.with_lock("", |_| ()).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());
}

/// `with_lock` runs the closure under the lock, returns its value, and always releases —
/// also when the closure panics.
pub fn with_lock_always_releases<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("with-lock");
    let locker = Locker::new(backend);
    let (value, lock_id) = locker
        .with_lock(&key, |guard| {
            assert!(locker.backend().is_locked(&key).unwrap());
            (7, guard.lock_id().to_owned())
        })
        .unwrap();
    assert_eq!(value, 7);
    assert!(!owns(locker.backend(), &lock_id).unwrap());

    let panicked = catch_unwind(AssertUnwindSafe(|| {
        locker.with_lock(&key, |_| panic!("the job failed"))
    }));
    assert!(panicked.is_err());
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// A guard can move to another thread (and be released there).
pub fn guard_is_send<B: LockBackend + 'static>(backend: B) {
    fn assert_send<T: Send + Sync>() {}
    assert_send::<LockGuard>();
    let key = unique_key("send");
    let locker = Locker::new(backend);
    let guard = locker.lock(&key).unwrap();
    let released = thread::spawn(move || guard.release())
        .join()
        .unwrap()
        .unwrap();
    assert!(released);
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// Many threads through one `Locker` on one key: never two holders, and fences strictly
/// increase in holding order.
pub fn many_threads_one_key_through_one_locker<B: LockBackend + 'static>(backend: B) {
    let locker = Locker::with_defaults(
        backend,
        LockOptions::default()
            .retry_delay(Duration::from_millis(2))
            .timeout(Duration::from_secs(120))
            .max_retries(u32::MAX),
    );
    let key = unique_key("crowd");
    let holders = std::sync::atomic::AtomicUsize::new(0);
    let fences = Mutex::new(Vec::new());
    let (threads, rounds) = (6, 8);
    thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for _ in 0..rounds {
                    locker
                        .with_lock(&key, |guard| {
                            assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                            fences.lock().unwrap().push(guard.fence().to_owned());
                            holders.fetch_sub(1, Ordering::SeqCst);
                        })
                        .unwrap();
                }
            });
        }
    });
    let fences = fences.into_inner().unwrap();
    assert_eq!(fences.len(), threads * rounds);
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fences strictly increase in holding order"
    );
}

/// Guard debug output shows no lock id.
pub fn guard_debug_hides_the_lock_id<B: LockBackend + 'static>(backend: B) {
    let locker = Locker::new(backend);
    let guard = locker.lock(&unique_key("debug")).unwrap();
    let shown = format!("{guard:?}");
    assert!(!shown.contains(guard.lock_id()), "{shown}");
    assert!(shown.contains(&guard.fence().to_string()), "{shown}");
}

/// `extend(d)` moves the heartbeat to the new TTL at once: a lease shortened from 30 s to 3 s
/// keeps being renewed (on [`Heartbeat::Auto`]'s schedule for 3 s), instead of lapsing while the old 10 s schedule
/// runs.
pub fn shorter_extend_keeps_the_lease<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("shorter");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let guard = locker.lock(&key).unwrap();
    let renewal = Call::Extend(guard.lock_id().to_owned());
    assert!(guard.extend(Duration::from_secs(3)).unwrap());
    wait_until(
        "three heartbeat renewals after the extend",
        PATIENCE,
        || recorder.count(&renewal) >= 4,
    );
    guard.check().unwrap();
    assert!(owns(locker.backend(), guard.lock_id()).unwrap());
    assert!(guard.release().unwrap());
}

/// A renewal that hangs (a stalled network) does not delay the loss: `on_lock_lost`, the lost
/// token and `is_lost` turn at the lease's deadline while the renewal is still in flight. The
/// deadline is at most the TTL after the hang began (the last confirmed renewal was sent
/// before it); the callback comes within 3 s of it (what a loaded machine may take to schedule
/// the heartbeat's thread).
pub fn loss_is_reported_while_a_renewal_hangs<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("hang");
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    let ttl = Duration::from_millis(400);
    let options = short_lease(400, 100).on_lock_lost(move |e| {
        let _ = lost_tx.lock().unwrap().send(e.message().to_owned());
    });
    let (locker, recorder) = recorded_locker(backend, options);
    let guard = locker.lock(&key).unwrap();
    let token = guard.lost_token();
    let hung = Instant::now();
    recorder.hang_renewals(true);
    let message = lost_rx.recv_timeout(ttl + LOSS_LAG);
    // Checked while the renewal still hangs: the loss did not wait for it.
    let reported_while_hanging = message.is_ok() && token.is_cancelled() && guard.is_lost();
    recorder.hang_renewals(false);
    let message = message.unwrap_or_else(|_| {
        panic!(
            "no loss reported {:?} after the renewals began to hang (TTL {ttl:?})",
            hung.elapsed()
        )
    });
    assert!(
        reported_while_hanging,
        "loss reported only after the renewal came back"
    );
    assert!(
        message.contains(&key),
        "the message names the key: {message}"
    );
    assert_eq!(guard.check().unwrap_err().code(), ErrorCode::LockLost);
    // A renewal may have reached the store: the lapsed lease is released in the background at
    // once, while the guard still lives.
    let release = Call::Release(guard.lock_id().to_owned());
    wait_until(
        "the lapsed lease released in the background",
        PATIENCE,
        || recorder.count(&release) >= 1,
    );
    let _ = guard.release();
}

/// How late [`loss_is_reported_while_a_renewal_hangs`] lets the loss callback run after the
/// lease's deadline: what a loaded machine may take to schedule the heartbeat's thread — far
/// below a call's timeout (5 s by default), which the callback must not wait for.
const LOSS_LAG: Duration = Duration::from_secs(3);

/// `max_hold` bounds how long the heartbeat keeps a lock: renewals stop, the last one is cut
/// short so the lease ends at `max_hold` after acquisition, and the guard is reported lost.
pub fn max_hold_ends_renewals<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("max-hold");
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    // A lease of 3 s (no pause of a loaded machine outlasts it) renewed every 100 ms: without
    // the cut, the last renewal before max_hold would end it about 3 s after max_hold.
    let options = short_lease(3_000, 100)
        .max_hold(Duration::from_millis(3_500))
        .on_lock_lost(move |e| {
            let _ = lost_tx.lock().unwrap().send(e.message().to_owned());
        });
    let (locker, recorder) = recorded_locker(backend, options);
    let guard = locker.lock(&key).unwrap();
    let acquired_at_ms = crate::get_by_id(locker.backend(), guard.lock_id())
        .unwrap()
        .expect("held")
        .acquired_at_ms;
    let renewal = Call::Extend(guard.lock_id().to_owned());
    wait_until("renewals before max_hold", PATIENCE, || {
        recorder.count(&renewal) >= 2
    });
    let message = lost_rx
        .recv_timeout(PATIENCE)
        .expect("the guard is reported lost once max_hold has passed");
    assert!(message.contains("max_hold"), "{message}");
    // 2 s of slack: the store counts from when the renewal arrived.
    assert!(
        guard.expires_at_ms() <= acquired_at_ms + 3_500 + 2_000,
        "the last renewal was cut to end at max_hold: expires {} acquired {acquired_at_ms}",
        guard.expires_at_ms()
    );
    let renewals = recorder.count(&renewal);
    wait_until("the lock to expire in the backend", PATIENCE, || {
        !owns(locker.backend(), guard.lock_id()).unwrap()
    });
    assert_eq!(
        recorder.count(&renewal),
        renewals,
        "no renewal after max_hold"
    );
    assert!(!guard.release().unwrap());
}

/// A waiter does not sit out its poll delay when the holder releases: the release wakes it.
/// (A 30 s retry delay would leave it waiting far longer than the test allows.)
pub fn a_release_wakes_the_waiter<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("wake");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let held = locker.lock(&key).unwrap();
    let attempts = || recorder.count(&Call::Acquire(key.clone()));
    let patient = LockOptions::default()
        .retry_delay(Duration::from_secs(30))
        .max_retry_delay(Duration::from_secs(30))
        .jitter(Jitter::None);
    let (got_tx, got_rx) = mpsc::channel();
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        move || {
            let guard = locker.lock_with(&key, &patient).unwrap();
            got_tx.send(()).unwrap();
            guard.release().unwrap()
        }
    });
    wait_until("the waiter's first attempt", PATIENCE, || attempts() >= 2);
    assert!(held.release().unwrap());
    got_rx
        .recv_timeout(PATIENCE)
        .expect("the release woke the waiter before its 30 s poll");
    assert!(waiter.join().unwrap());
}

/// Many guards on one `Locker` are renewed together, through the store's batch renewal. When
/// some of their locks are removed or taken over from outside, exactly those guards are
/// reported lost, at their next renewal, and every other guard keeps its lease — each lease
/// gets its own answer from a batch, never a neighbour's.
pub fn batch_renewals_answer_each_lease<B: LockBackend + 'static>(backend: B) {
    const GUARDS: usize = 20;
    let removed = [1, 6, 13];
    let taken_over = [3, 10, 19];
    // Renewed often, so batches form; a long TTL, so that a slow store loses no lease.
    let (locker, recorder) = recorded_locker(backend, short_lease(30_000, 200));
    let keys: Vec<String> = (0..GUARDS)
        .map(|i| unique_key(&format!("batch-{i}")))
        .collect();
    let guards: Vec<LockGuard> = keys.iter().map(|key| locker.lock(key).unwrap()).collect();
    let ids: Vec<String> = guards.iter().map(|g| g.lock_id().to_owned()).collect();
    let renewals_since = |from: usize, i: usize| {
        recorder.calls()[from..]
            .iter()
            .filter(|call| **call == Call::Extend(ids[i].clone()))
            .count()
    };
    wait_until("a renewal of every guard", PATIENCE, || {
        (0..GUARDS).all(|i| renewals_since(0, i) >= 1)
    });

    // From outside: some locks released by lock id, some released and taken by someone else.
    let mut takers = Vec::new();
    for i in removed.iter().chain(&taken_over) {
        assert!(locker.backend().release(&ids[*i]).unwrap(), "guard {i}");
    }
    for i in taken_over {
        let lease = locker
            .backend()
            .acquire(&keys[i], Duration::from_secs(60))
            .unwrap()
            .lease()
            .expect("the freed key can be taken");
        takers.push((i, lease));
    }
    let disturbed: Vec<usize> = removed.iter().chain(&taken_over).copied().collect();
    let kept: Vec<usize> = (0..GUARDS).filter(|i| !disturbed.contains(i)).collect();
    let from = recorder.calls().len();
    let expiry_then: Vec<i64> = guards.iter().map(LockGuard::expires_at_ms).collect();

    // Each disturbed guard is lost by its next renewal or the one after (one may have been in
    // flight while its lock was removed).
    wait_until(
        "two renewals of each disturbed guard, or its loss",
        PATIENCE,
        || {
            disturbed
                .iter()
                .all(|&i| guards[i].is_lost() || renewals_since(from, i) >= 2)
        },
    );
    for &i in &disturbed {
        assert!(
            guards[i].is_lost(),
            "guard {i}: its lock was removed, yet {} renewals later it was not reported lost",
            renewals_since(from, i)
        );
        assert_eq!(guards[i].check().unwrap_err().code(), ErrorCode::LockLost);
    }
    // Every other guard renewed successfully since, and holds its lock.
    wait_until(
        "a successful renewal of every undisturbed guard",
        PATIENCE,
        || {
            kept.iter()
                .all(|&i| guards[i].is_lost() || guards[i].expires_at_ms() > expiry_then[i])
        },
    );
    for &i in &kept {
        assert!(
            !guards[i].is_lost(),
            "guard {i} was not disturbed but is lost"
        );
        guards[i].check().unwrap();
        assert!(owns(locker.backend(), &ids[i]).unwrap(), "guard {i}");
    }
    // Releasing the lost guards touches nobody's lock; the new holders were left alone.
    for (i, guard) in guards.into_iter().enumerate() {
        assert_eq!(guard.release().unwrap(), kept.contains(&i), "guard {i}");
    }
    for (i, lease) in takers {
        assert!(owns(locker.backend(), &lease.lock_id).unwrap(), "key {i}");
        assert!(locker.backend().release(&lease.lock_id).unwrap(), "key {i}");
    }
}

/// `min_hold`: a lock released before its hold ends stays in the store — `release()`, drop,
/// the end of `with_lock` and a panic in its closure alike — set to expire when the hold ends:
/// one extension, no delete, no renewal after it; then it expires by itself.
pub fn min_hold_keeps_an_early_release<B: LockBackend + 'static>(backend: B) {
    // A hold long enough for the four acquisitions on a slow store, and a TTL far beyond it.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(120))
        .min_hold(Duration::from_secs(10));
    let (locker, recorder) = recorded_locker(backend, options);
    let keys =
        ["release", "drop", "with-lock", "panic"].map(|how| unique_key(&format!("min-hold-{how}")));

    let guard = locker.lock(&keys[0]).unwrap();
    let (lock_id, expiry) = (guard.lock_id().to_owned(), guard.expires_at_ms());
    assert!(guard.release().unwrap(), "an early release reports success");
    drop(locker.lock(&keys[1]).unwrap());
    assert_eq!(locker.with_lock(&keys[2], |_| 7).unwrap(), 7);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        locker.with_lock(&keys[3], |_| panic!("the job failed"))
    }));
    assert!(panicked.is_err());

    for key in &keys {
        assert!(
            locker.backend().is_locked(key).unwrap(),
            "{key}: held until its min_hold ends"
        );
        assert!(locker.try_lock(key).unwrap().is_none(), "{key}");
    }
    let info = crate::get_by_id_raw(locker.backend(), &lock_id)
        .unwrap()
        .expect("the released lock is still stored under its lock id");
    assert!(
        info.info.expires_at_ms < expiry,
        "set to end with the hold, not with the 120 s lease"
    );
    let extends = recorder.count(&Call::Extend(lock_id.clone()));
    assert_eq!(extends, 1, "one extension to the hold's end");
    assert!(
        !recorder
            .calls()
            .iter()
            .any(|call| matches!(call, Call::Release(_))),
        "nothing deleted"
    );
    wait_until(
        "the kept locks to expire by themselves",
        2 * PATIENCE,
        || {
            keys.iter()
                .all(|key| !locker.backend().is_locked(key).unwrap())
        },
    );
    assert_eq!(
        recorder.count(&Call::Extend(lock_id)),
        extends,
        "no renewal after the release"
    );
}

/// `min_hold`: released after the hold has passed, a lock is deleted as usual; lost during
/// the hold, a release reports `false` and leaves the new holder alone.
pub fn min_hold_after_the_hold_and_on_loss<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let short = LockOptions::default().min_hold(Duration::from_millis(200));
    let key = unique_key("min-hold-over");
    let guard = locker.lock_with(&key, &short).unwrap();
    // The hold counts from the acquisition's answer (a slow acquisition does not eat into it).
    let acquired = Instant::now();
    wait_until("the min_hold to pass", PATIENCE, || {
        acquired.elapsed() > Duration::from_millis(250)
    });
    let lock_id = guard.lock_id().to_owned();
    assert!(guard.release().unwrap());
    assert_eq!(recorder.count(&Call::Release(lock_id)), 1);
    assert!(
        !locker.backend().is_locked(&key).unwrap(),
        "deleted at once"
    );

    let long = short_lease(10_000, 500).min_hold(Duration::from_secs(60));
    let key = unique_key("min-hold-lost");
    let guard = locker.lock_with(&key, &long).unwrap();
    assert!(locker.backend().release(guard.lock_id()).unwrap());
    let taker = locker
        .backend()
        .acquire(&key, Duration::from_secs(60))
        .unwrap()
        .lease()
        .expect("the freed key can be taken");
    wait_until("the loss to be noticed", PATIENCE, || guard.is_lost());
    assert!(!guard.release().unwrap(), "nothing of ours left to keep");
    assert!(
        owns(locker.backend(), &taker.lock_id).unwrap(),
        "the new holder is untouched"
    );
    assert!(locker.backend().release(&taker.lock_id).unwrap());
}

/// A `min_hold` below 1 ms, or above `max_hold`, and a `min_hold` or `max_hold` longer than a
/// lease can be ([`MAX_TTL_MS`](crate::driver::MAX_TTL_MS)), are refused before anything is
/// sent, by the lock call and by [`LockOptions::validate`].
pub fn min_hold_is_validated_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let key = unique_key("min-hold-invalid");
    let too_long = Duration::from_millis(crate::driver::MAX_TTL_MS.unsigned_abs() + 1);
    for options in [
        LockOptions::default().min_hold(Duration::ZERO),
        LockOptions::default().min_hold(Duration::from_micros(999)),
        LockOptions::default()
            .min_hold(Duration::from_secs(2))
            .max_hold(Duration::from_secs(1)),
        LockOptions::default().min_hold(too_long),
        LockOptions::default().max_hold(too_long),
        LockOptions::default().min_hold(too_long).max_hold(too_long),
    ] {
        let error = locker.lock_with(&key, &options).unwrap_err();
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{options:?}: {error}"
        );
        let checked = options.validate().unwrap_err();
        assert_eq!(checked.message(), error.message(), "{options:?}");
    }
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());
    let fine = LockOptions::default()
        .min_hold(Duration::from_secs(1))
        .max_hold(Duration::from_secs(1));
    let guard = locker.lock_with(&key, &fine).unwrap();
    drop(guard);
}

/// [`LockOptions::holder`]: the guard's lock carries the description, found by key and by lock
/// id; a guard taken without one has none; a [`Locker::with_defaults`] holder applies to
/// `lock`, `try_lock` and `with_lock`.
pub fn holder_option_is_stored_with_the_lock<B: LockBackend + 'static>(backend: B) {
    let described = "cron@web-1:4242 ./nightly.sh --full";
    let locker = Locker::with_defaults(backend, LockOptions::default().holder(described));
    let key = unique_key("holder-option");
    let guard = locker.lock(&key).unwrap();
    let by_key = crate::get_by_key(locker.backend(), &key).unwrap().unwrap();
    let by_id = crate::get_by_id(locker.backend(), guard.lock_id())
        .unwrap()
        .unwrap();
    assert_eq!(by_key.holder.as_deref(), Some(described));
    assert_eq!(by_id, by_key);
    drop(guard);

    let other = unique_key("holder-option-other");
    let taken = locker
        .with_lock(&other, |guard| {
            crate::get_by_id(locker.backend(), guard.lock_id())
                .unwrap()
                .and_then(|info| info.holder)
        })
        .unwrap();
    assert_eq!(taken.as_deref(), Some(described));

    let anonymous = locker
        .lock_with(&key, &LockOptions::default().ttl(Duration::from_secs(30)))
        .unwrap();
    let info = crate::get_by_id(locker.backend(), anonymous.lock_id())
        .unwrap()
        .unwrap();
    assert_eq!(info.holder, None, "{info:?}");
}

/// A holder that is empty, over 256 bytes, or holds a control character (NUL, newline), a
/// Unicode format character (a bidi override, a zero-width space) or a line separator fails the
/// lock call with `InvalidArgument` before anything is sent.
pub fn holder_is_validated_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let key = unique_key("holder-invalid");
    let too_long = "h".repeat(257);
    let too_long_in_characters = "é".repeat(129);
    for holder in [
        "",
        too_long.as_str(),
        too_long_in_characters.as_str(),
        "a\0b",
        "a\nb",
        "\u{1b}[2J",
        "job\u{202E}gpj.exe",
        "a\u{200B}b",
        "a\u{2028}b",
    ] {
        let options = LockOptions::default().holder(holder);
        let error = locker.lock_with(&key, &options).unwrap_err();
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{holder:?}: {error}"
        );
        let error = match Locker::with_defaults(Arc::clone(&recorder), options).try_lock(&key) {
            Err(error) => error,
            Ok(guard) => panic!("{holder:?}: try_lock must refuse, got {guard:?}"),
        };
        assert_eq!(
            error.code(),
            ErrorCode::InvalidArgument,
            "{holder:?}: {error}"
        );
    }
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());
    let fine = LockOptions::default().holder("h".repeat(256));
    drop(locker.lock_with(&key, &fine).unwrap());
}
