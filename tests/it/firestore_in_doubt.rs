//! Acquisitions whose commit reached Firestore but whose answer did not come back (the
//! connection dropped after the request, or the answer came too late): the error is marked in
//! doubt and carries the lock id the commit wrote, so that the lock can be found and released
//! (the `Locker` does so in the background). A commit Firestore refused is not in doubt.
//! Through a forwarding stub in front of the emulator: the write is real, only its answer is
//! lost.

use std::thread;
use std::time::{Duration, Instant};

use syncguard::driver::{
    Acquisition, Driver as _, DriverExt as _, Find, Key, LeaseKind, Line, LockId, Mode, Permits,
    Request, Ttl,
};
use syncguard::testing::support::wait_until;
use syncguard::{
    AcquireOutcome, CancelToken, ErrorCode, Heartbeat, LockBackend, LockOptions, Locker,
    get_by_id_raw,
};

use crate::support::{
    BRISK, FaultyFirestore, Injected, TTL, shared_firestore_backend, unique, within_a_minute,
};

/// Acquiring `key` through `faulty` (whose commit answer is lost by `fault`) fails in doubt;
/// the lock it names is in Firestore, held by that lock id, and releasing it frees the key.
fn assert_in_doubt_and_releasable(fault: Injected, timeout: std::time::Duration) {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().timeout(timeout).build().unwrap();
    let key = unique("in-doubt");
    // The first requests of a fresh emulator can take longer than a brisk timeout: they are
    // made with a patient one, so that the brisk one only ever meets the fault.
    let patient = faulty.builder().build().unwrap();
    assert!(!patient.is_locked(&key).unwrap());
    faulty.inject("commit", 1, fault);
    let (k, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let err = within_a_minute(move || backend.acquire_one(&Request::one(&k, ttl))).unwrap_err();
    faulty.release_withheld();
    assert!(
        err.is_in_doubt(),
        "an unanswered commit is in doubt: {err:?}"
    );
    assert_eq!(faulty.count("commit"), 1, "the commit was sent");
    assert!(
        matches!(
            err.code(),
            ErrorCode::NetworkTimeout | ErrorCode::ServiceUnavailable
        ),
        "{err:?}"
    );
    let lock_id = err
        .lock_id()
        .expect("an error in doubt carries its lock id");

    let direct = shared_firestore_backend();
    let found = get_by_id_raw(&direct, lock_id)
        .unwrap()
        .expect("the commit went through: the lock is held under that lock id");
    assert_eq!(found.key, key);
    assert!(direct.is_locked(&key).unwrap());
    assert!(direct.release(lock_id).unwrap(), "released by its lock id");
    assert!(!direct.is_locked(&key).unwrap());
}

/// The connection closes after the commit was forwarded, before any answer.
#[test]
fn an_acquire_whose_answer_is_lost_is_in_doubt() {
    assert_in_doubt_and_releasable(Injected::LoseAnswer, BRISK);
}

/// The commit is applied, and its answer never comes: the request times out.
#[test]
fn an_acquire_that_times_out_after_sending_is_in_doubt() {
    assert_in_doubt_and_releasable(Injected::Withhold, BRISK);
}

/// A commit Firestore answered with a refusal did not happen: not in doubt, nothing held.
#[test]
fn a_refused_acquire_is_not_in_doubt() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("refused");
    faulty.inject(
        "commit",
        1,
        Injected::replace(
            403,
            r#"{"error":{"code":403,"status":"PERMISSION_DENIED","message":"injected"}}"#,
        ),
    );
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err:?}");
    assert!(!err.is_in_doubt(), "{err:?}");
    assert!(!shared_firestore_backend().is_locked(&key).unwrap());
}

/// Issue 30, item 3: a permit acquisition whose commit went through but whose answer was lost
/// reads the semaphore again, finds its own lock id there and answers that permit: one permit
/// taken, not a second one, and not "full" against itself (the semaphore has one permit).
/// Firestore never applies a repeated commit (its precondition, the `updateTime` read, no
/// longer holds); this re-read is where a repeat would show.
#[test]
fn a_permit_acquisition_whose_answer_is_lost_answers_its_own_permit() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("permit-answer-lost");
    assert!(backend.holders(&key, LeaseKind::Permit).unwrap().is_empty());
    faulty.inject("commit", 1, Injected::LoseAnswer);
    let lease = match backend.acquire_as(&key, Mode::permits(1).unwrap(), TTL) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("expected the permit the lost commit took, got {other:?}"),
    };
    assert_eq!(faulty.pending(), 0);
    assert_eq!(
        faulty.count("commit"),
        1,
        "the one commit, whose answer was lost"
    );
    let holders = shared_firestore_backend()
        .holders_raw(&key, LeaseKind::Permit)
        .unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].lock_id, lease.lock_id);
    assert_eq!(holders[0].info.fence, lease.fence);
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &lease.lock_id)
            .unwrap()
    );
}

/// Issue 30, item 6: a guard's permit release whose commit went through but whose answer was
/// lost reads the semaphore again and finds its permit gone while it would still be live, which
/// only its own commit does: it answers `true` (removed), as a release that was answered, and
/// wakes this `Locker`'s waiters for the semaphore, which would otherwise sleep their whole poll
/// delay (here longer than any test).
#[test]
fn a_permit_release_whose_answer_is_lost_answers_removed_and_wakes_local_waiters() {
    let faulty = FaultyFirestore::start();
    let locker = Locker::new(faulty.builder().build().unwrap());
    let key = unique("permit-release-answer-lost");
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let options = LockOptions::default().ttl(TTL).heartbeat(Heartbeat::Off);
    let guard = semaphore.acquire_with(&options).unwrap();
    let cancel = CancelToken::new();
    let only_when_woken = options
        .clone()
        .retry_delay(Duration::from_secs(3600))
        .max_retry_delay(Duration::from_secs(3600))
        .cancel(cancel.clone());
    let reads = faulty.count("batchGet");
    thread::scope(|scope| {
        let waiter = scope.spawn(|| semaphore.acquire_with(&only_when_woken));
        wait_until(
            "the waiter found no permit free",
            Duration::from_secs(60),
            || faulty.count("batchGet") > reads,
        );
        faulty.inject("commit", 1, Injected::LoseAnswer);
        let released = guard.release();
        let woken = wait_for(Duration::from_secs(60), || waiter.is_finished());
        // Never leave the waiter asleep for an hour, whatever happened.
        cancel.cancel();
        let next = waiter.join().unwrap();
        assert!(
            released.as_ref().is_ok_and(|removed| *removed),
            "{released:?}"
        );
        assert!(woken, "the waiter was not woken by the release");
        let next = next.unwrap();
        assert_eq!(
            shared_firestore_backend()
                .holders_raw(&key, LeaseKind::Permit)
                .unwrap()[0]
                .lock_id,
            next.lock_id()
        );
    });
}

/// A waiter's place write whose commit went through but whose answer was lost: the attempt
/// fails, not in doubt (it took no lock), and the waiter's next attempt, with the same place
/// id, finds its place: one place, its ticket kept, no second ticket issued. Firestore never
/// applies a repeated commit (its `updateTime` precondition no longer holds); the repeat is the
/// waiter's next attempt, and the place id makes it the same place.
#[test]
fn a_place_whose_answer_is_lost_is_one_place() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("place-answer-lost");
    let (checked, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let held = backend.acquire(&key, TTL).unwrap().lease().unwrap();
    let place = LockId::generate();
    faulty.inject("commit", 1, Injected::LoseAnswer);
    let lost = backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)));
    assert_eq!(faulty.pending(), 0, "the waiter wrote its place");
    let error = lost.unwrap_err();
    assert!(!error.is_in_doubt(), "a place is no lock: {error:?}");
    assert!(error.code().is_transient(), "{error:?}");

    let again = backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)));
    assert_eq!(again.unwrap(), Acquisition::Locked);
    let line = shared_firestore_backend()
        .find_line(&checked, LeaseKind::Lock)
        .unwrap();
    assert_eq!(line.len(), 1, "one waiter, one place: {line:?}");
    assert_eq!(line[0].place_id, place.as_str());
    assert_eq!(line[0].ticket, 1, "no second ticket");
    backend
        .leave_line(&checked, LeaseKind::Lock, &place)
        .unwrap();
    assert!(backend.release(&held.lock_id).unwrap());
}

/// A semaphore waiter's place write whose answer is lost is read again at once (as every
/// semaphore write without an answer): the waiter finds its place, renews it, and is refused:
/// one place, its ticket kept.
#[test]
fn a_permit_place_whose_answer_is_lost_is_one_place() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("permit-place-answer-lost");
    let (checked, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let one = Permits::new(1).unwrap();
    let held = backend
        .acquire_as(&key, Mode::permits(1).unwrap(), TTL)
        .unwrap()
        .lease()
        .unwrap();
    let place = LockId::generate();
    faulty.inject("commit", 1, Injected::LoseAnswer);
    let answer = backend.acquire_one(
        &Request::one(&checked, ttl)
            .mode(Mode::Permit(one))
            .line(Line::Wait(&place)),
    );
    assert_eq!(answer.unwrap(), Acquisition::Locked);
    assert_eq!(faulty.pending(), 0, "the waiter wrote its place");
    let line = shared_firestore_backend()
        .find_line(&checked, LeaseKind::Permit)
        .unwrap();
    assert_eq!(line.len(), 1, "one waiter, one place: {line:?}");
    assert_eq!(line[0].place_id, place.as_str());
    assert_eq!(line[0].ticket, 1, "no second ticket");
    backend
        .leave_line(&checked, LeaseKind::Permit, &place)
        .unwrap();
    assert!(backend.waiters(&key, LeaseKind::Permit).unwrap().is_empty());
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &held.lock_id)
            .unwrap()
    );
}

/// Whether `condition` held within `limit` (checked every few milliseconds).
fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Issue 34: a shared acquisition whose commit went through but whose answer was lost reads
/// again with the same lock id and answers the hold it finds: one reader, not two, and not in
/// doubt.
#[test]
fn a_shared_acquisition_whose_answer_is_lost_answers_its_own_hold() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("shared-answer-lost");
    faulty.inject("commit", 1, Injected::LoseAnswer);
    let lease = match backend.acquire_as(&key, Mode::Shared, TTL) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("expected the hold the lost commit took, got {other:?}"),
    };
    assert_eq!(faulty.pending(), 0);
    assert_eq!(
        faulty.count("commit"),
        1,
        "the one commit, whose answer was lost"
    );
    let readers = shared_firestore_backend()
        .find(Find::Key(&Key::new(&key).unwrap(), LeaseKind::Shared))
        .unwrap();
    assert_eq!(readers.len(), 1, "{readers:?}");
    assert_eq!(readers[0].lock_id, lease.lock_id);
    assert_eq!(readers[0].fence, lease.fence);
    assert!(
        backend
            .release_as(&key, LeaseKind::Shared, &lease.lock_id)
            .unwrap()
    );
}

/// Issue 34: a shared release whose commit went through but whose answer was lost finds its
/// reader gone while it would still be live, which only its own commit does: released.
#[test]
fn a_shared_release_whose_answer_is_lost_answers_removed() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("shared-release-lost");
    let lease = match backend.acquire_as(&key, Mode::Shared, TTL) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("a fresh key takes a reader, got {other:?}"),
    };
    faulty.inject("commit", 1, Injected::LoseAnswer);
    assert!(
        backend
            .release_as(&key, LeaseKind::Shared, &lease.lock_id)
            .unwrap()
    );
    assert_eq!(faulty.pending(), 0);
    assert!(backend.holders(&key, LeaseKind::Shared).unwrap().is_empty());
}
