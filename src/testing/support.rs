//! What the contracts share: TTLs and deadlines, unique keys, waiting, and the assertions
//! several contracts make. Public, for a backend's own tests beside the contract suite.

use std::fmt::Debug;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::driver::{
    Acquisition, DriverExt as _, FENCE_DIGITS, Holder, Key, LeaseKind, Request, Ttl,
    generate_lock_id, hash_key, normalize_and_validate_key,
};
use crate::{
    AcquireOutcome, ErrorCode, Fence, Heartbeat, KeyState, Lease, LockBackend, LockInfo,
    LockOptions, Lookup, PlaceInfo, Result, Watch, get_by_id_raw, get_by_key_raw, owns,
};

/// A TTL no test outlives: locks taken with it stay held for the whole test.
pub const LONG_TTL: Duration = Duration::from_secs(30);

/// A TTL short enough to watch a lock expire (plus the 1000 ms liveness tolerance).
pub const SHORT_TTL: Duration = Duration::from_millis(200);

/// How long a test waits for a short-TTL lock to expire before failing. Generous: expiry takes
/// `SHORT_TTL + TIME_TOLERANCE_MS`, and a slow server or loaded machine must not fail the suite.
pub const EXPIRY_DEADLINE: Duration = Duration::from_secs(10);

/// How long a contention test may take in total before it is declared stuck.
pub const CONTENTION_DEADLINE: Duration = Duration::from_secs(120);

/// Slack for comparing two timestamps of the backend's time authority taken at different
/// moments: it absorbs clock steps and rounding, not latency assumptions.
pub const CLOCK_SLACK_MS: i64 = 1000;

/// How long a guard contract waits for something to happen before it fails.
pub(super) const PATIENCE: Duration = Duration::from_secs(15);

/// Options for a lease of `ttl_ms`, renewed every `every_ms`.
pub(super) fn short_lease(ttl_ms: u64, every_ms: u64) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_millis(ttl_ms))
        .heartbeat(Heartbeat::Every(Duration::from_millis(every_ms)))
}

/// A key no other test, and no earlier run against the same server, uses.
pub fn unique_key(test: &str) -> String {
    format!("contract:{test}:{}", generate_lock_id())
}

/// The client's wall clock in Unix ms (for plausibility checks only).
pub fn client_now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("system clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit in i64")
}

/// Acquires `key`, panicking unless the backend answers `Acquired`.
pub fn acquired<B: LockBackend + ?Sized>(backend: &B, key: &str, ttl: Duration) -> Lease {
    match backend.acquire(key, ttl) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("acquire({key:?}, {ttl:?}) should succeed, got {other:?}"),
    }
}

/// Asserts that acquiring `key` answers `Locked`.
pub fn assert_locked_out<B: LockBackend + ?Sized>(backend: &B, key: &str) {
    match backend.acquire(key, LONG_TTL) {
        Ok(AcquireOutcome::Locked) => {}
        other => panic!("acquire({key:?}) on a held key should be Locked, got {other:?}"),
    }
}

/// Polls `condition` (a few ms apart) until it holds; panics after `limit`. The way tests wait
/// for something to happen, instead of sleeping for a guessed duration.
pub fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting for: {what}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// The places in the line of `key`'s lock or semaphore (`kind`), in line order.
pub fn places<B: LockBackend + ?Sized>(backend: &B, key: &str, kind: LeaseKind) -> Vec<PlaceInfo> {
    backend.waiters(key, kind).expect("the line of the key")
}

/// Waits until the backend no longer reports a live lock on `key`.
pub fn wait_until_unlocked<B: LockBackend + ?Sized>(backend: &B, key: &str) {
    wait_until(
        &format!("the lock on {key:?} to expire"),
        EXPIRY_DEADLINE,
        || !backend.is_locked(key).expect("is_locked"),
    );
}

/// Asserts that `result` is an error with code `InvalidArgument`.
pub fn assert_invalid<T: Debug>(result: Result<T>, what: &str) {
    match result {
        Err(err) => assert_eq!(
            err.code(),
            ErrorCode::InvalidArgument,
            "{what}: expected InvalidArgument, got {err:?}"
        ),
        Ok(value) => panic!("{what}: expected InvalidArgument, got Ok({value:?})"),
    }
}

/// Asserts that `fence` is exactly [`FENCE_DIGITS`] (15) ASCII digits: `^\d{15}$`.
pub fn assert_fence_format(fence: &Fence) {
    let s = fence.to_string();
    assert_eq!(s.len(), FENCE_DIGITS, "fence {s:?} must have 15 digits");
    assert_eq!(FENCE_DIGITS, 15);
    assert!(
        s.bytes().all(|b| b.is_ascii_digit()),
        "fence {s:?} must be decimal digits only"
    );
    assert_eq!(fence.to_string(), s, "Display must be the 15-digit string");
}

/// Asserts that `info` describes the lock of `lease` on `key`, expiring at `expires_at_ms`,
/// and that it is sanitised.
pub fn assert_info_describes(info: &LockInfo, key: &str, lease: &Lease, expires_at_ms: i64) {
    assert_eq!(
        info.key_hash,
        hash_key(key),
        "key_hash must be hash_key(key)"
    );
    assert_eq!(
        info.key_hash,
        hash_key(&normalize_and_validate_key(key).expect("valid key")),
        "key_hash must be the hash of the normalised key"
    );
    assert_eq!(
        info.lock_id_hash,
        hash_key(&lease.lock_id),
        "lock_id_hash must be hash_key(lock_id)"
    );
    assert_eq!(
        info.fence, lease.fence,
        "lookup must report the lease's fence"
    );
    assert_eq!(
        info.expires_at_ms, expires_at_ms,
        "lookup must report the authoritative expiry"
    );
    assert!(
        info.acquired_at_ms <= info.expires_at_ms,
        "acquired_at_ms {} after expires_at_ms {}",
        info.acquired_at_ms,
        info.expires_at_ms
    );
    // Milliseconds since the epoch, not seconds or microseconds: within a day of this machine.
    let day_ms = 86_400_000;
    assert!(
        (info.acquired_at_ms - client_now_ms()).abs() < day_ms,
        "acquired_at_ms {} is not a plausible Unix-ms timestamp",
        info.acquired_at_ms
    );
    let shown = format!("{info:?}");
    assert!(
        !shown.contains(&lease.lock_id),
        "LockInfo Debug leaks the lock id: {shown}"
    );
    assert!(
        !shown.contains(key),
        "LockInfo Debug leaks the key: {shown}"
    );
}

/// Looks the lock of `lease` up by `key` and by its lock id, asserting that both modes find it
/// and describe it alike; returns the description.
pub fn lookup_both<B: LockBackend + ?Sized>(backend: &B, key: &str, lease: &Lease) -> LockInfo {
    let by_key = backend
        .lookup(Lookup::Key(key))
        .unwrap()
        .expect("lookup by key finds the held lock");
    let by_id = backend
        .lookup(Lookup::LockId(&lease.lock_id))
        .unwrap()
        .expect("lookup by lock id finds the held lock");
    assert_eq!(
        by_key, by_id,
        "both lookup modes must describe the same lock"
    );
    by_key
}

/// Asserts that `lease` holds `key`: both lookups describe its lock, and both raw lookups
/// report `stored` (the normalised key) and the lease's lock id.
pub fn assert_held_under<B: LockBackend + ?Sized>(
    backend: &B,
    key: &str,
    lease: &Lease,
    stored: &str,
) {
    assert!(backend.is_locked(key).unwrap(), "{key:?} must be locked");
    let info = lookup_both(backend, key, lease);
    assert_info_describes(&info, key, lease, lease.expires_at_ms);
    for (how, raw) in [
        ("get_by_key_raw", get_by_key_raw(backend, key)),
        ("get_by_id_raw", get_by_id_raw(backend, &lease.lock_id)),
    ] {
        let raw = raw
            .unwrap()
            .unwrap_or_else(|| panic!("{how} finds the held lock"));
        assert_eq!(
            raw.key, stored,
            "{how}: the stored key is the normalised key"
        );
        assert_eq!(raw.lock_id, lease.lock_id, "{how}: the holder's lock id");
        assert_eq!(raw.info, info, "{how}: the same sanitised info");
    }
}

/// Asserts that the lock of `lease` is still held and expires when the acquisition said: `what`
/// (calls that must not touch it) changed nothing.
pub fn assert_expiry_unchanged<B: LockBackend + ?Sized>(backend: &B, lease: &Lease, what: &str) {
    let info = backend
        .lookup(Lookup::LockId(&lease.lock_id))
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: the lock must still be held"));
    assert_eq!(
        info.expires_at_ms, lease.expires_at_ms,
        "{what} changed the expiry"
    );
}

/// Asserts that lookup by `lock_id` and owns find no lock under it.
pub fn assert_no_lock_under<B: LockBackend + ?Sized>(backend: &B, lock_id: &str, what: &str) {
    assert_eq!(
        backend.lookup(Lookup::LockId(lock_id)).unwrap(),
        None,
        "{what}: lookup by lock id"
    );
    assert!(!owns(backend, lock_id).unwrap(), "{what}: owns");
}

/// Asserts that nothing holds `key` and nothing is found under `lock_id` (read-only checks:
/// is_locked, both lookups, owns). `what` says why, for the failure message.
pub fn assert_free<B: LockBackend + ?Sized>(backend: &B, key: &str, lock_id: &str, what: &str) {
    assert!(!backend.is_locked(key).unwrap(), "{what}: the key is free");
    assert_eq!(
        backend.lookup(Lookup::Key(key)).unwrap(),
        None,
        "{what}: lookup by key"
    );
    assert_no_lock_under(backend, lock_id, what);
}

/// Asserts that `lock_id` (never issued, released or expired) holds nothing: releasing it is
/// false and extending it finds nothing, and afterwards lookup and owns find nothing either.
/// The extension is 1 s, unlike any test's lease, so that one wrongly applied to another lock
/// shows in that lock's expiry.
pub fn assert_holds_nothing<B: LockBackend + ?Sized>(backend: &B, lock_id: &str, what: &str) {
    assert!(
        !backend.release(lock_id).unwrap(),
        "{what}: release must be false"
    );
    assert_eq!(
        backend.extend(lock_id, Duration::from_secs(1)).unwrap(),
        None,
        "{what}: extend must find nothing"
    );
    assert_no_lock_under(backend, lock_id, what);
}

/// Asserts that `stale`, the lock id of a lease on `key` that ended before `holder` took the
/// key, touches nothing, and that `holder` keeps the lock exactly as acquired.
pub fn assert_stale_id_spares_the_holder<B: LockBackend + ?Sized>(
    backend: &B,
    stale: &str,
    key: &str,
    holder: &Lease,
) {
    assert_holds_nothing(backend, stale, "the stale lock id");
    let held = lookup_both(backend, key, holder);
    assert_info_describes(&held, key, holder, holder.expires_at_ms);
}

/// Runs `call` on `threads` threads at once (all released together by a barrier) and returns
/// what each returned.
pub fn race<T: Send>(threads: usize, call: impl Fn() -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(threads);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    call()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Acquires `key` for `ttl` with `holder` through the driver seam (what a
/// [`Locker`](crate::Locker) with [`LockOptions::holder`](crate::LockOptions::holder) sends),
/// panicking unless the backend answers `Acquired`.
pub fn acquired_by<B: LockBackend + ?Sized>(
    backend: &B,
    key: &str,
    ttl: Duration,
    holder: Option<&str>,
) -> Lease {
    let holder = holder.map(|h| Holder::new(h).expect("a valid holder"));
    let (checked_key, checked_ttl) = (Key::new(key).unwrap(), Ttl::new(ttl).unwrap());
    match backend.acquire_one(&Request::one(&checked_key, checked_ttl).holder(holder.as_ref())) {
        Ok(Acquisition::Acquired { lease, .. }) => lease,
        other => panic!("acquire({key:?}, {holder:?}) should succeed, got {other:?}"),
    }
}

/// The holder every lookup of `lease` (by key and by lock id, sanitised and raw) and a listing
/// under `key` report, after checking that they all report the same one.
pub fn holder_of<B: LockBackend + ?Sized>(backend: &B, key: &str, lease: &Lease) -> Option<String> {
    let info = lookup_both(backend, key, lease);
    let raw_key = get_by_key_raw(backend, key)
        .unwrap()
        .expect("get_by_key_raw");
    let raw_id = get_by_id_raw(backend, &lease.lock_id)
        .unwrap()
        .expect("get_by_id_raw");
    assert_eq!(raw_key.info.holder, info.holder, "raw lookup by key");
    assert_eq!(raw_id.info.holder, info.holder, "raw lookup by lock id");
    let listed = backend.list_raw(key, LeaseKind::Lock, 10).unwrap();
    let listed = listed
        .locks
        .iter()
        .find(|lock| lock.lock_id == lease.lock_id)
        .expect("listed under its key");
    assert_eq!(listed.info.holder, info.holder, "a listing");
    info.holder
}

/// The next state of `watch`, failing the test when none comes within 15 s or the
/// watch answers an error; `what` says what was awaited, for the failure message.
pub fn next_state(watch: &mut Watch, what: &str) -> KeyState {
    match watch.next_timeout(PATIENCE) {
        Some(Ok(state)) => state,
        Some(Err(error)) => panic!("{what}: the watch failed: {error:?}"),
        None => panic!("{what}: no state within {PATIENCE:?}"),
    }
}
