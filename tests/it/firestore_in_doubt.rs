//! Acquisitions whose commit reached Firestore but whose answer did not come back (the
//! connection dropped after the request, or the answer came too late): the error is marked in
//! doubt and carries the lock id the commit wrote, so that the lock can be found and released
//! (the `Locker` does so in the background). A commit Firestore refused is not in doubt.
//! Through a forwarding stub in front of the emulator: the write is real, only its answer is
//! lost.

use syncguard::driver::{Driver as _, Key, Ttl};
use syncguard::{ErrorCode, LockBackend, get_by_id_raw};

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
    let err = within_a_minute(move || backend.try_acquire(&k, ttl, None)).unwrap_err();
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
