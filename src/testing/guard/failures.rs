//! The guard contracts on a failing store: renewals, acquisitions and releases that fail (as
//! the [`Recorder`](crate::testing::recorder::Recorder) injects them) are retried, reported, or
//! end in a reported loss.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::driver::TIME_TOLERANCE_MS;
use crate::{ErrorCode, LockBackend, LockOptions, get_by_id, owns};

use crate::testing::recorder::{Call, recorded_locker};
use crate::testing::support::{CLOCK_SLACK_MS, PATIENCE, short_lease, unique_key, wait_until};

/// Transient renewal failures are retried, and a lease that survives them stays owned.
pub fn transient_renewal_failures_are_retried<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("blip");
    let (locker, recorder) = recorded_locker(backend, short_lease(3_000, 100));
    let guard = locker.lock(&key).unwrap();
    let renewal = Call::Extend(guard.lock_id().to_owned());
    recorder.failing_extends.store(3, Ordering::SeqCst);
    wait_until("three failed renewals and a good one", PATIENCE, || {
        recorder.failing_extends.load(Ordering::SeqCst) == 0 && recorder.count(&renewal) >= 4
    });
    let renewed_at = recorder.count(&renewal);
    wait_until("renewals to carry on", PATIENCE, || {
        recorder.count(&renewal) > renewed_at
    });
    guard.check().unwrap();
    assert!(owns(locker.backend(), guard.lock_id()).unwrap());
    assert!(guard.release().unwrap());
}

/// Renewals that keep failing end with the guard lost (and told) once its TTL has run out,
/// never later; the heartbeat retried in between.
pub fn failing_renewals_end_in_loss<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("outage");
    let lost = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&lost);
    // The lease's local deadline counts from the acquisition's send time, so an acquisition
    // that opens a connection (a TLS or SCRAM handshake on a loaded machine) eats into the
    // TTL: the call before opens it, and the TTL leaves room for several renewals after it.
    let options = short_lease(1_500, 100).on_lock_lost(move |_| seen.store(true, Ordering::SeqCst));
    let (locker, recorder) = recorded_locker(backend, options);
    assert!(!locker.backend().is_locked(&key).unwrap());
    recorder.extends_down.store(true, Ordering::SeqCst);
    let guard = locker.lock(&key).unwrap();
    wait_until("the outage to be reported", PATIENCE, || {
        lost.load(Ordering::SeqCst)
    });
    assert!(guard.is_lost());
    assert!(recorder.count(&Call::Extend(guard.lock_id().to_owned())) >= 2);
    recorder.extends_down.store(false, Ordering::SeqCst);
    assert!(
        !guard.extend(Duration::from_secs(5)).unwrap(),
        "loss is final"
    );
    // The lock may still exist server-side: releasing it is still attempted.
    let _ = guard.release().unwrap();
    assert!(!locker.backend().is_locked(&key).unwrap());
}

/// A failed release reaches `on_release_error` (from `Drop` and from `with_lock`) and never
/// replaces the closure's result.
pub fn release_errors_go_to_the_callback<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("release-error");
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&errors);
    let options = LockOptions::default().on_release_error(move |e| {
        sink.lock()
            .unwrap()
            .push((e.code(), e.key().map(str::to_owned)))
    });
    let (locker, recorder) = recorded_locker(backend, options);
    recorder.releases_down.store(true, Ordering::SeqCst);

    let value = locker.with_lock(&key, |_| "done").unwrap();
    assert_eq!(value, "done");
    let guard = locker.lock(&unique_key("release-error-drop"));
    // The first lock is still held (its release failed); the second key is free.
    let guard = guard.unwrap();
    drop(guard);
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .all(|(code, _)| *code == ErrorCode::ServiceUnavailable)
    );
    assert_eq!(errors[0].1.as_deref(), Some(key.as_str()));

    // Once releases work again, the background retry frees the key.
    recorder.releases_down.store(false, Ordering::SeqCst);
    wait_until(
        "the failed release retried in the background",
        PATIENCE,
        || !locker.backend().is_locked(&key).unwrap(),
    );
}

/// Waiting goes on through transient failures (an unreachable or stalled store) as through
/// contention; a single attempt reports the failure, a wait that ends reports the last one,
/// and a failure that is not transient ends the wait at once.
pub fn transient_acquire_failures_are_waited_through<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("transient");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let attempts = || recorder.count(&Call::Acquire(key.clone()));

    recorder.failing_acquires.store(1, Ordering::SeqCst);
    let once = locker.try_lock(&key).unwrap_err();
    assert_eq!(once.code(), ErrorCode::ServiceUnavailable, "{once}");

    recorder.failing_acquires.store(3, Ordering::SeqCst);
    let guard = locker
        .try_lock_for(&key, Duration::from_secs(60))
        .unwrap()
        .expect("held once the store answers again");
    assert_eq!(
        attempts(),
        5,
        "one attempt, then three failures and a success"
    );
    assert!(guard.release().unwrap());

    // The wait ends while the store still fails: the last failure, not a timeout.
    recorder.failing_acquires.store(u32::MAX, Ordering::SeqCst);
    let before = attempts();
    let brief = LockOptions::default()
        .timeout(Duration::from_millis(300))
        .retry_delay(Duration::from_millis(20));
    let error = locker.lock_with(&key, &brief).unwrap_err();
    assert_eq!(error.code(), ErrorCode::ServiceUnavailable, "{error}");
    assert!(attempts() - before >= 2, "retried within the timeout");
    recorder.failing_acquires.store(0, Ordering::SeqCst);

    // Contention after a failure: the wait ends as a timeout again.
    let holder = locker.lock(&key).unwrap();
    recorder.failing_acquires.store(1, Ordering::SeqCst);
    let contended = locker.lock_with(&key, &brief).unwrap_err();
    assert_eq!(
        contended.code(),
        ErrorCode::AcquisitionTimeout,
        "{contended}"
    );
    assert!(holder.release().unwrap());
}

/// An acquisition that was sent but whose answer was lost may have taken the lock: the
/// `Locker` releases its lock id in the background, so the key is not held for nobody until
/// the TTL ends, and a wait that retries gets the lock.
pub fn acquisitions_in_doubt_are_released<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("in-doubt");
    let long = LockOptions::default().ttl(Duration::from_secs(120));
    let (locker, recorder) = recorded_locker(backend, long);

    recorder.lost_acquire_answers.store(1, Ordering::SeqCst);
    let error = locker.try_lock(&key).unwrap_err();
    assert_eq!(error.code(), ErrorCode::NetworkTimeout, "{error}");
    assert!(error.is_in_doubt());
    let lock_id = error.lock_id().expect("the lock id in doubt").to_owned();
    // Released long before its 120 s TTL.
    wait_until("the acquisition in doubt released", PATIENCE, || {
        recorder.count(&Call::Release(lock_id.clone())) >= 1
            && !locker.backend().is_locked(&key).unwrap()
    });

    // Inside a wait: the next attempts find the key free again.
    recorder.lost_acquire_answers.store(1, Ordering::SeqCst);
    let guard = locker
        .try_lock_for(&key, PATIENCE)
        .unwrap()
        .expect("held after the lost answer");
    guard.check().unwrap();
    assert!(guard.release().unwrap());
}

/// A release that failed is tried again in the background, so the key is free long before the
/// lease's TTL would have ended; the caller still hears of the failure.
pub fn failed_releases_are_retried<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("failed-release");
    let long = LockOptions::default().ttl(Duration::from_secs(120));
    let (locker, recorder) = recorded_locker(backend, long);
    let guard = locker.lock(&key).unwrap();
    let release = Call::Release(guard.lock_id().to_owned());
    recorder.releases_down.store(true, Ordering::SeqCst);
    let error = guard.release().unwrap_err();
    assert_eq!(error.code(), ErrorCode::ServiceUnavailable, "{error}");
    wait_until("a second release, from the background", PATIENCE, || {
        recorder.count(&release) >= 2
    });
    recorder.releases_down.store(false, Ordering::SeqCst);
    wait_until("the lock released in the background", PATIENCE, || {
        !locker.backend().is_locked(&key).unwrap()
    });
}

/// `min_hold` through an outage at the job's end: the release inside the hold (its extension
/// to the hold's end) fails and so do the renewals, yet once the outage is over — well after
/// the lease's TTL and the store's tolerance have passed — the key is still held, its record
/// ending no earlier than the hold.
pub fn min_hold_outlasts_a_failed_release<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("min-hold-outage");
    let ttl = Duration::from_millis(1_000);
    let (locker, recorder) = recorded_locker(
        backend,
        short_lease(1_000, 300).min_hold(Duration::from_secs(30)),
    );
    let acquired = Instant::now();
    let guard = locker.lock(&key).unwrap();
    let lock_id = guard.lock_id().to_owned();
    let hold_until_ms = guard
        .min_hold_until_ms()
        .expect("the guard knows its hold's end");

    // The outage: neither renewals nor the release's extension reach the store.
    recorder.extends_down.store(true, Ordering::SeqCst);
    recorder.releases_down.store(true, Ordering::SeqCst);
    let error = guard.release().unwrap_err();
    assert_eq!(error.code(), ErrorCode::NetworkTimeout, "{error}");
    let expired_by = ttl + Duration::from_millis(TIME_TOLERANCE_MS.unsigned_abs()) * 2;
    wait_until("the lease's TTL and tolerance to pass", PATIENCE, || {
        acquired.elapsed() > expired_by
    });
    recorder.extends_down.store(false, Ordering::SeqCst);
    recorder.releases_down.store(false, Ordering::SeqCst);

    assert!(
        locker.backend().is_locked(&key).unwrap(),
        "the key is held past its lease's TTL: the hold stands"
    );
    assert!(locker.try_lock(&key).unwrap().is_none(), "{key}");
    let info = get_by_id(locker.backend(), &lock_id)
        .unwrap()
        .expect("still stored under its lock id");
    assert!(
        info.expires_at_ms + CLOCK_SLACK_MS >= hold_until_ms,
        "the record ends with the hold ({hold_until_ms}), not before: {info:?}"
    );
    assert!(locker.backend().release(&lock_id).unwrap());
}

/// `min_hold` whose last extension fails when the lease's TTL reaches far beyond the hold: the
/// lock is not deleted before the hold ends, and is released in the background once it has
/// (not left until its 120 s TTL), as a release after the hold would have.
pub fn min_hold_failed_release_ends_with_the_hold<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("min-hold-release-later");
    let hold = Duration::from_secs(3);
    let long = LockOptions::default()
        .ttl(Duration::from_secs(120))
        .min_hold(hold);
    let (locker, recorder) = recorded_locker(backend, long);
    let acquired = Instant::now();
    let guard = locker.lock(&key).unwrap();
    let release = Call::Release(guard.lock_id().to_owned());
    // Both down: on a machine so slow that the hold is over by now, the release is a delete.
    recorder.extends_down.store(true, Ordering::SeqCst);
    recorder.releases_down.store(true, Ordering::SeqCst);
    let error = guard.release().unwrap_err();
    assert!(error.code().is_transient(), "{error}");
    recorder.extends_down.store(false, Ordering::SeqCst);
    recorder.releases_down.store(false, Ordering::SeqCst);
    let held = locker.backend().is_locked(&key).unwrap();
    // Only an answer that came back before the hold ended says anything about the hold.
    if acquired.elapsed() < hold {
        assert!(held, "deleted before its min_hold ended");
        assert_eq!(recorder.count(&release), 0, "a delete inside the hold");
    }
    wait_until("the lock released once the hold ended", PATIENCE, || {
        !locker.backend().is_locked(&key).unwrap()
    });
    assert!(recorder.count(&release) >= 1, "released, not expired");
}
