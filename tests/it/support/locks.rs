//! What the areas share for keys, leases, server clocks and stored locks.

use std::time::Duration;

use syncguard::driver::generate_lock_id;
use syncguard::driver::{
    Acquisition, BreakDelay, BreakNote, BreakOrder, Broken, Driver, DriverExt as _, Holder, Key,
    LeaseKind, Mode, Request,
};
use syncguard::driver::{Extension, LeaseRef, LockId, Outcome, Ttl};
use syncguard::{
    AcquireOutcome, ErrorCode, Lease, LockBackend, Lookup, get_by_id_raw, get_by_key_raw,
};

/// A TTL no test outlives.
pub const TTL: Duration = Duration::from_secs(30);

/// A key no other test, of any area, uses.
pub fn unique(name: &str) -> String {
    format!("test:{name}:{}", generate_lock_id())
}

/// The lease of an acquisition that must succeed.
#[track_caller]
pub fn lease(outcome: syncguard::Result<AcquireOutcome>) -> Lease {
    match outcome {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// A holder description with what JSON, Lua's cjson and Firestore encode specially: quotes, a
/// backslash, slashes, braces, non-ASCII.
pub const ODD_HOLDER: &str = r#"web-1:4242 sh -c "cp a\b /srv/x" {"k":[1]} é 🔒"#;

/// The lease of `key`, acquired for [`TTL`] with the holder description `holder` (as a
/// `Locker` with `LockOptions::holder` acquires); the acquisition must succeed.
#[track_caller]
pub fn lease_held_by(backend: &dyn LockBackend, key: &str, holder: &str) -> Lease {
    held_in(backend, &Key::new(key).unwrap(), Mode::Exclusive, holder)
}

/// The lease of `key` in `mode`, acquired for [`TTL`] with the holder description `holder`;
/// the acquisition must succeed.
#[track_caller]
pub fn held_in(backend: &dyn Driver, key: &Key, mode: Mode, holder: &str) -> Lease {
    let holder = Holder::new(holder).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    match backend.acquire_one(&Request::one(key, ttl).mode(mode).holder(Some(&holder))) {
        Ok(Acquisition::Acquired { lease, .. }) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The lease of `key` with the holder description `holder`, acquired for 200 ms and waited out:
/// returns once the backend no longer reports the key locked, with the record of that lock
/// left for the next acquisition to take over.
#[track_caller]
pub fn expired_lease_held_by(backend: &dyn LockBackend, key: &str, holder: &str) -> Lease {
    let ttl = Duration::from_millis(200);
    let lease = syncguard::testing::support::acquired_by(backend, key, ttl, Some(holder));
    syncguard::testing::support::wait_until_unlocked(backend, key);
    lease
}

/// Fails unless an acquisition found the key held.
#[track_caller]
pub fn locked(outcome: syncguard::Result<AcquireOutcome>) {
    assert!(matches!(outcome, Ok(AcquireOutcome::Locked)), "{outcome:?}");
}

/// A lock another library (the TypeScript SyncGuard) wrote into `backend`'s store is honoured:
/// `key` held by `lock_id` with fence 7 until `expires_at_ms`, its fence counter at 7. It is
/// held, looked up whole, extended and released by its lock id, and the next acquisition
/// continues the shared counter.
pub fn assert_honours_a_foreign_lock(
    backend: &dyn LockBackend,
    key: &str,
    lock_id: &str,
    expires_at_ms: i64,
) {
    assert!(backend.is_locked(key).unwrap());
    assert_eq!(backend.acquire(key, TTL).unwrap(), AcquireOutcome::Locked);
    let info = get_by_id_raw(backend, lock_id).unwrap().unwrap();
    assert_eq!(info.key, key);
    assert_eq!(info.info.fence.to_string(), "000000000000007");
    assert_eq!(info.info.expires_at_ms, expires_at_ms);
    assert_eq!(
        info.info.holder, None,
        "the TypeScript SyncGuard stores no holder description"
    );
    assert_eq!(get_by_key_raw(backend, key).unwrap().unwrap(), info);
    let listed = backend.list_raw(key, LeaseKind::Lock, 10).unwrap();
    assert_eq!(listed.locks, [info], "listed as it is looked up");
    assert!(backend.extend(lock_id, TTL).unwrap().is_some());
    assert!(backend.release(lock_id).unwrap());
    let next = lease(backend.acquire(key, TTL));
    assert_eq!(
        next.fence.to_string(),
        "000000000000008",
        "continues the shared counter"
    );
    assert!(backend.release(&next.lock_id).unwrap());
}

/// Acquiring `key` fails with `code`.
#[track_caller]
pub fn assert_acquire_fails(backend: &dyn LockBackend, key: &str, code: ErrorCode) {
    let err = backend.acquire(key, TTL).unwrap_err();
    assert_eq!(err.code(), code, "acquire({key:?}): {err}");
}

/// What is stored for `key` is no lock `backend` can read (another program's value, a record
/// with wrong field types): acquire, is_locked and lookup all fail with `Internal`.
#[track_caller]
pub fn assert_unreadable(backend: &dyn LockBackend, key: &str) {
    assert_acquire_fails(backend, key, ErrorCode::Internal);
    let err = backend.is_locked(key).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal, "is_locked({key:?}): {err}");
    let err = backend.lookup(Lookup::Key(key)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal, "lookup({key:?}): {err}");
}

/// `key`'s fence counter holds something `backend` cannot read: acquiring fails with
/// `Internal` and takes no lock.
#[track_caller]
pub fn assert_unreadable_counter_stops_acquire(backend: &dyn LockBackend, key: &str) {
    assert_acquire_fails(backend, key, ErrorCode::Internal);
    assert!(!backend.is_locked(key).unwrap(), "nothing was written");
}

/// A whole cycle on the free `key`: acquire, is_locked, lookup by lock id, extend, release.
#[track_caller]
pub fn assert_lock_cycle(backend: &dyn LockBackend, key: &str) {
    let held = lease(backend.acquire(key, TTL));
    assert!(backend.is_locked(key).unwrap());
    assert!(
        backend
            .lookup(Lookup::LockId(&held.lock_id))
            .unwrap()
            .is_some()
    );
    assert!(backend.extend(&held.lock_id, TTL).unwrap().is_some());
    assert!(backend.release(&held.lock_id).unwrap());
}

/// `release_lease` by a lock id given as text: the driver's answer, with its reason.
pub fn release_outcome<B: LockBackend + ?Sized>(
    backend: &B,
    lock_id: &str,
) -> syncguard::Result<Outcome<()>> {
    let lock_id = LockId::new(lock_id)?;
    backend.release_lease(LeaseRef::new(&lock_id))
}

/// `extend_lease` by a lock id given as text: the driver's answer, with its reason.
pub fn extend_outcome<B: LockBackend + ?Sized>(
    backend: &B,
    lock_id: &str,
    ttl: std::time::Duration,
) -> syncguard::Result<Outcome<Extension>> {
    let (lock_id, ttl) = (LockId::new(lock_id)?, Ttl::new(ttl)?);
    backend.extend_lease(LeaseRef::new(&lock_id), ttl)
}

/// The operator's note the stores' break tests leave in their markers.
pub fn break_note() -> Holder {
    BreakNote::new("ops-1:77 syncguard", Some("hung".to_owned()))
        .to_holder()
        .unwrap()
}

/// Breaks every live holder of `kind` on `key` (or the one under `lock_id`), leaving
/// [`break_note`] for `delay`; the break must succeed.
#[track_caller]
pub fn break_all(
    backend: &dyn Driver,
    key: &Key,
    kind: LeaseKind,
    lock_id: Option<&LockId>,
    delay: BreakDelay,
) -> Broken {
    let note = break_note();
    let order = BreakOrder {
        key,
        kind,
        lock_id,
        delay,
        note: &note,
    };
    backend.break_leases(&order).unwrap()
}
