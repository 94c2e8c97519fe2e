//! The backend contract suite: what every [`LockBackend`] promises, written once and run against
//! each backend (memory, Redis, PostgreSQL, Firestore emulator).
//!
//! Each contract is a public generic function taking the backend under test; the
//! [`backend_contract!`](crate::backend_contract) macro expands to one `#[test]` per function, each on a fresh backend
//! from the factory. Backends may share one live server with other tests and earlier runs, so
//! every test works on its own keys ([`unique_key`]) and never assumes an empty store.
//!
//! Rules the tests keep: waiting is polling a condition with a generous deadline, never a bare
//! sleep; no assertion depends on how long anything took; timestamps are compared with values
//! the backend itself returned.
//!
//! Spec references: seed 003 ("SyncGuard common interface") and DESIGN.md §3.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::driver::{
    DriverExt as _, LeaseKind, LeaseRef, LockId, MAX_HOLDER_LENGTH_BYTES, MAX_KEY_LENGTH_BYTES,
    Outcome, Ttl, generate_lock_id, hash_key, validate_lock_id,
};
use crate::{
    AcquireOutcome, Coverage, Fence, Lease, LockBackend, LockInfo, Lookup, MAX_LIST_LIMIT,
    get_by_id, get_by_id_raw, get_by_key, get_by_key_raw, list_locks, list_locks_raw, owns,
};

use super::support::*;

mod inputs;
pub use self::inputs::*;

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

/// Seed 003 "Backend Implementation Tests": acquire, is_locked, lookup, extend, release.
pub fn lifecycle<B: LockBackend>(backend: &B) {
    let key = unique_key("lifecycle");
    assert!(!backend.is_locked(&key).unwrap(), "fresh key must be free");
    assert_eq!(backend.lookup(Lookup::Key(&key)).unwrap(), None);

    let lease = acquired(backend, &key, LONG_TTL);
    validate_lock_id(&lease.lock_id).expect("acquire returns a well-formed lock id");
    assert_fence_format(&lease.fence);
    assert_held_under(backend, &key, &lease, &key);
    assert_locked_out(backend, &key);

    let by_key = lookup_both(backend, &key, &lease);
    let ttl_ms = i64::try_from(LONG_TTL.as_millis()).unwrap();
    assert!(
        (by_key.expires_at_ms - by_key.acquired_at_ms - ttl_ms).abs() <= CLOCK_SLACK_MS,
        "expires_at_ms - acquired_at_ms must be the TTL: {by_key:?}"
    );

    let extended = backend
        .extend(&lease.lock_id, LONG_TTL)
        .unwrap()
        .expect("extending a live lock succeeds");
    assert!(
        extended >= lease.expires_at_ms - CLOCK_SLACK_MS,
        "extend by the same TTL later cannot end earlier: {extended} < {}",
        lease.expires_at_ms
    );
    let after_extend = backend
        .lookup(Lookup::Key(&key))
        .unwrap()
        .expect("still locked");
    assert_info_describes(&after_extend, &key, &lease, extended);
    assert_eq!(
        after_extend.acquired_at_ms, by_key.acquired_at_ms,
        "extend must not change acquired_at_ms"
    );
    assert!(backend.is_locked(&key).unwrap());

    assert!(
        backend.release(&lease.lock_id).unwrap(),
        "release of a held lock is true"
    );
    assert_free(backend, &key, &lease.lock_id, "released");

    let again = acquired(backend, &key, LONG_TTL);
    assert_ne!(
        again.lock_id, lease.lock_id,
        "every acquisition gets a new lock id"
    );
    assert!(
        again.fence > lease.fence,
        "fence grows with each acquisition"
    );
    assert!(backend.release(&again.lock_id).unwrap());
}

/// Seed 003 "lookup": read-only — repeated lookups and is_locked never change the stored expiry.
pub fn lookup_is_read_only<B: LockBackend>(backend: &B) {
    let key = unique_key("lookup-read-only");
    let lease = acquired(backend, &key, LONG_TTL);
    for _ in 0..3 {
        assert!(backend.is_locked(&key).unwrap());
        let info = lookup_both(backend, &key, &lease);
        assert_eq!(
            info.expires_at_ms, lease.expires_at_ms,
            "lookup must not touch the TTL"
        );
        assert!(owns(backend, &lease.lock_id).unwrap());
    }
    assert!(backend.release(&lease.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------------

/// Seed 003 "Concurrent access patterns": 8 threads × 25 rounds on one key, one holder, fences
/// increase.
pub fn contention<B: LockBackend>(backend: &B) {
    contention_with(backend, 8, 25);
}

/// [`contention`] with a chosen number of threads and rounds per thread.
fn contention_with<B: LockBackend>(backend: &B, threads: usize, rounds: usize) {
    let key = unique_key("contention");
    let holders = AtomicUsize::new(0);
    let max_holders = AtomicUsize::new(0);
    let fences: Mutex<Vec<Fence>> = Mutex::new(Vec::with_capacity(threads * rounds));
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let failed = AtomicBool::new(false);
    let deadline = Instant::now() + CONTENTION_DEADLINE;

    thread::scope(|scope| {
        for worker in 0..threads {
            let (key, holders, max_holders, fences, failures, failed) =
                (&key, &holders, &max_holders, &fences, &failures, &failed);
            scope.spawn(move || {
                let fail = |message: String| {
                    failures.lock().unwrap().push(message);
                    failed.store(true, Ordering::SeqCst);
                };
                'rounds: for round in 0..rounds {
                    let lease = loop {
                        if failed.load(Ordering::SeqCst) {
                            break 'rounds;
                        }
                        if Instant::now() > deadline {
                            fail(format!("worker {worker} round {round}: never got the lock"));
                            break 'rounds;
                        }
                        match backend.acquire(key, LONG_TTL) {
                            Ok(AcquireOutcome::Acquired(lease)) => break lease,
                            Ok(AcquireOutcome::Locked) => {
                                thread::sleep(Duration::from_micros(200));
                            }
                            Err(err) => {
                                fail(format!("worker {worker} round {round}: acquire: {err:?}"));
                                break 'rounds;
                            }
                        }
                    };
                    let now_holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    max_holders.fetch_max(now_holding, Ordering::SeqCst);
                    fences.lock().unwrap().push(lease.fence);
                    holders.fetch_sub(1, Ordering::SeqCst);
                    match backend.release(&lease.lock_id) {
                        Ok(true) => {}
                        other => {
                            fail(format!("worker {worker} round {round}: release: {other:?}"));
                            break 'rounds;
                        }
                    }
                }
            });
        }
    });

    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "contention failures: {failures:#?}");
    assert_eq!(
        max_holders.load(Ordering::SeqCst),
        1,
        "two threads held the lock at once"
    );
    let fences = fences.into_inner().unwrap();
    assert_eq!(
        fences.len(),
        threads * rounds,
        "every round must have held the lock once"
    );
    for fence in &fences {
        assert_fence_format(fence);
    }
    for pair in fences.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fences must strictly increase in acquisition order: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let unique: HashSet<Fence> = fences.iter().copied().collect();
    assert_eq!(unique.len(), fences.len(), "fences must never repeat");
    assert!(!backend.is_locked(&key).unwrap(), "every holder released");
}

/// Seed 003 "acquire … atomic": many threads racing for one free key — exactly one wins.
pub fn racing_acquires_have_one_winner<B: LockBackend>(backend: &B) {
    let key = unique_key("race-acquire");
    let outcomes = race(8, || backend.acquire(&key, LONG_TTL).expect("acquire"));
    let winners: Vec<Lease> = outcomes
        .into_iter()
        .filter_map(AcquireOutcome::lease)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one racing acquire may win");
    assert_eq!(
        winners[0].fence.to_string(),
        "000000000000001",
        "losers must not consume fences"
    );
    assert!(backend.release(&winners[0].lock_id).unwrap());
}

/// Seed 003 release "At-most-once effect": concurrent releases of one lock — exactly one is true.
pub fn racing_releases_have_one_winner<B: LockBackend>(backend: &B) {
    let key = unique_key("race-release");
    let lease = acquired(backend, &key, LONG_TTL);
    let released = race(8, || backend.release(&lease.lock_id).expect("release"));
    assert_eq!(
        released.iter().filter(|&&r| r).count(),
        1,
        "exactly one concurrent release may report true: {released:?}"
    );
    assert!(!backend.is_locked(&key).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------------------------

/// Seed 003 "TTL expiration" + `isLive`: a short-TTL lock lapses by itself and reads say so.
pub fn expiry<B: LockBackend>(backend: &B) {
    let key = unique_key("expiry");
    let lease = acquired(backend, &key, SHORT_TTL);
    wait_until_unlocked(backend, &key);
    assert_free(backend, &key, &lease.lock_id, "expired");
    let next = acquired(backend, &key, LONG_TTL);
    assert!(next.fence > lease.fence);
    assert!(backend.release(&next.lock_id).unwrap());
}

/// Seed 003 extend "No Resurrection": after expiry extend/release/lookup find nothing.
pub fn no_resurrection<B: LockBackend>(backend: &B) {
    let key = unique_key("no-resurrection");
    let lease = acquired(backend, &key, SHORT_TTL);
    wait_until_unlocked(backend, &key);

    assert_eq!(
        backend.extend(&lease.lock_id, LONG_TTL).unwrap(),
        None,
        "extend must not resurrect an expired lock"
    );
    assert_free(backend, &key, &lease.lock_id, "after a refused extend");
    assert_holds_nothing(backend, &lease.lock_id, "an expired lock id");
    assert_free(backend, &key, &lease.lock_id, "after a refused release");

    let next = acquired(backend, &key, LONG_TTL);
    assert!(next.fence > lease.fence, "fence grows across expiry");
    assert_stale_id_spares_the_holder(backend, &lease.lock_id, &key, &next);
    assert!(backend.release(&next.lock_id).unwrap());
}

/// Seed 003 extend "TTL Update Semantics": extend sets expiry to now + ttl (replaces, not adds).
pub fn extend_replaces_the_ttl<B: LockBackend>(backend: &B) {
    let key = unique_key("extend-replaces");
    let long = Duration::from_secs(60);
    // Long enough that the lock is still live when looked up, however slow the machine.
    let short = Duration::from_secs(20);
    let lease = acquired(backend, &key, long);
    // The acquire's "now" on the backend's clock.
    let acquired_now = lease.expires_at_ms - 60_000;

    let shortened = backend
        .extend(&lease.lock_id, short)
        .unwrap()
        .expect("extend a live lock");
    assert!(
        shortened < lease.expires_at_ms,
        "extend(20 s) must replace the 60 s TTL, not add to it: {shortened} >= {}",
        lease.expires_at_ms
    );
    assert!(
        shortened >= acquired_now + 20_000 - CLOCK_SLACK_MS,
        "extend(20 s) must expire about 20 s after a moment no earlier than the acquire: \
         {shortened} < {acquired_now} + 20000"
    );
    let info = backend
        .lookup(Lookup::LockId(&lease.lock_id))
        .unwrap()
        .expect("still live");
    assert_eq!(
        info.expires_at_ms, shortened,
        "lookup reports the extended expiry"
    );

    let lengthened = backend
        .extend(&lease.lock_id, Duration::from_secs(120))
        .unwrap()
        .expect("extend again");
    assert!(
        lengthened > lease.expires_at_ms,
        "extend(120 s) must end after the original 60 s lease"
    );
    assert!(lengthened > shortened);
    let info = backend
        .lookup(Lookup::Key(&key))
        .unwrap()
        .expect("still live");
    assert_info_describes(&info, &key, &lease, lengthened);
    assert!(backend.release(&lease.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Idempotency and ownership
// ---------------------------------------------------------------------------------------------

/// Seed 003 release/extend idempotency: a second release is false; extend after release is None.
pub fn release_and_extend_are_idempotent<B: LockBackend>(backend: &B) {
    let key = unique_key("idempotent");
    let lease = acquired(backend, &key, LONG_TTL);
    assert!(backend.release(&lease.lock_id).unwrap());
    assert!(
        !backend.release(&lease.lock_id).unwrap(),
        "second release is false"
    );
    assert!(
        !backend.release(&lease.lock_id).unwrap(),
        "third release is false"
    );
    assert_eq!(
        backend.extend(&lease.lock_id, LONG_TTL).unwrap(),
        None,
        "extend after release"
    );
    assert!(
        !backend.is_locked(&key).unwrap(),
        "extend after release must not resurrect"
    );
    let lock_id = LockId::new(&lease.lock_id).unwrap();
    assert!(matches!(
        backend.release_lease(LeaseRef::new(&lock_id)).unwrap(),
        Outcome::NotFound | Outcome::Expired
    ));
    let ttl = Ttl::new(LONG_TTL).unwrap();
    assert!(matches!(
        backend.extend_lease(LeaseRef::new(&lock_id), ttl).unwrap(),
        Outcome::NotFound | Outcome::Expired
    ));
}

/// Seed 003 release/extend/lookup on a lock id that never existed: false / None, no error.
pub fn unknown_lock_ids_are_absent<B: LockBackend>(backend: &B) {
    let stranger = generate_lock_id();
    assert_holds_nothing(backend, &stranger, "a lock id never issued");
    let key = unique_key("never-locked");
    assert_free(backend, &key, &stranger, "never locked");
    assert_eq!(get_by_key_raw(backend, &key).unwrap(), None);
    assert_eq!(get_by_id_raw(backend, &stranger).unwrap(), None);
}

/// Seed 003 "Ownership Verification" (ADR-003): other lock ids never touch the holder.
pub fn ownership_is_by_lock_id<B: LockBackend>(backend: &B) {
    let key = unique_key("ownership");
    let other_key = unique_key("ownership-other");
    let lease = acquired(backend, &key, LONG_TTL);
    let other = acquired(backend, &other_key, LONG_TTL);
    let stranger = generate_lock_id();

    assert_holds_nothing(backend, &stranger, "an unknown lock id");
    assert!(
        backend.is_locked(&key).unwrap(),
        "the holder keeps its lock"
    );
    assert_expiry_unchanged(backend, &lease, "a stranger's extend");

    // Releasing one lock leaves another key's lock alone.
    assert!(backend.release(&other.lock_id).unwrap());
    assert!(backend.is_locked(&key).unwrap());
    assert!(owns(backend, &lease.lock_id).unwrap());
    let by_key = backend.lookup(Lookup::Key(&key)).unwrap().expect("held");
    assert_eq!(by_key.lock_id_hash, hash_key(&lease.lock_id));

    // A released lease's id cannot touch the next holder of the same key.
    assert!(backend.release(&lease.lock_id).unwrap());
    let next = acquired(backend, &key, LONG_TTL);
    assert_stale_id_spares_the_holder(backend, &lease.lock_id, &key, &next);
    assert!(backend.release(&next.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Lookup and helpers
// ---------------------------------------------------------------------------------------------

/// Seed 003 "Dual Lookup" + "Null Semantics": both modes agree; None when absent.
pub fn lookup_both_modes<B: LockBackend>(backend: &B) {
    let key = unique_key("lookup");
    assert_eq!(
        backend.lookup(Lookup::Key(&key)).unwrap(),
        None,
        "missing key"
    );
    let lease = acquired(backend, &key, LONG_TTL);
    let by_key = lookup_both(backend, &key, &lease);
    assert_info_describes(&by_key, &key, &lease, lease.expires_at_ms);
    assert_eq!(by_key.key_hash.len(), 24);
    assert!(
        by_key
            .key_hash
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert!(backend.release(&lease.lock_id).unwrap());
    assert_free(backend, &key, &lease.lock_id, "released");
}

/// Seed 003 lookup helpers: get_by_key/get_by_id, the raw variants and owns.
pub fn lookup_helpers<B: LockBackend>(backend: &B) {
    let key = unique_key("helpers");
    let lease = acquired(backend, &key, LONG_TTL);

    let by_key = get_by_key(backend, &key).unwrap().expect("get_by_key");
    let by_id = get_by_id(backend, &lease.lock_id)
        .unwrap()
        .expect("get_by_id");
    assert_eq!(by_key, by_id);
    assert_info_describes(&by_key, &key, &lease, lease.expires_at_ms);

    let raw_key = get_by_key_raw(backend, &key)
        .unwrap()
        .expect("get_by_key_raw");
    let raw_id = get_by_id_raw(backend, &lease.lock_id)
        .unwrap()
        .expect("get_by_id_raw");
    assert_eq!(raw_key, raw_id);
    assert_eq!(
        raw_key.info, by_key,
        "raw lookups carry the same sanitised info"
    );
    assert_eq!(raw_key.key, key, "raw key is the normalised user key");
    assert_eq!(
        raw_key.lock_id, lease.lock_id,
        "raw lock id is the holder's"
    );
    let shown = format!("{raw_key:?}");
    assert!(
        !shown.contains(&lease.lock_id),
        "LockInfoDebug Debug leaks the lock id: {shown}"
    );
    let shown = format!("{lease:?}");
    assert!(
        !shown.contains(&lease.lock_id),
        "Lease Debug leaks the lock id: {shown}"
    );

    assert!(owns(backend, &lease.lock_id).unwrap());
    assert!(!owns(backend, &generate_lock_id()).unwrap());
    assert!(backend.release(&lease.lock_id).unwrap());
    assert!(!owns(backend, &lease.lock_id).unwrap());
    assert_eq!(get_by_key(backend, &key).unwrap(), None);
    assert_eq!(get_by_id(backend, &lease.lock_id).unwrap(), None);
    assert_eq!(get_by_key_raw(backend, &key).unwrap(), None);
    assert_eq!(get_by_id_raw(backend, &lease.lock_id).unwrap(), None);
}

/// A holder description is stored with its lock and returned by every lookup, exactly as given
/// (quotes, backslashes, slashes, braces, non-ASCII, the full 256 bytes); it survives renewals;
/// a lock taken without one has none — also when it replaces a lock that had one, released or
/// expired: a description never outlives its lock.
pub fn holders_are_stored_with_their_lock<B: LockBackend>(backend: &B) {
    let odd = r#"web-1:4242 sh -c "echo \"ok\" > /tmp/a" {"x":[1]} é 🔒"#;
    let longest = format!("{}é", "h".repeat(MAX_HOLDER_LENGTH_BYTES - 2));
    assert_eq!(longest.len(), MAX_HOLDER_LENGTH_BYTES);
    for holder in [odd, longest.as_str(), "a"] {
        let key = unique_key("holder");
        let lease = acquired_by(backend, &key, LONG_TTL, Some(holder));
        assert_eq!(holder_of(backend, &key, &lease).as_deref(), Some(holder));
        assert!(backend.extend(&lease.lock_id, LONG_TTL).unwrap().is_some());
        assert_eq!(
            holder_of(backend, &key, &lease).as_deref(),
            Some(holder),
            "a renewal keeps the holder"
        );
        let shown = format!("{:?}", get_by_key(backend, &key).unwrap());
        assert!(!shown.contains(&lease.lock_id), "{shown}");
        assert!(backend.release(&lease.lock_id).unwrap());
        assert_eq!(get_by_key(backend, &key).unwrap(), None);

        // Released, then taken without a holder: none.
        let next = acquired(backend, &key, LONG_TTL);
        assert_eq!(holder_of(backend, &key, &next), None, "{holder:?}");
        assert!(backend.release(&next.lock_id).unwrap());
    }

    // Expired, then taken without a holder: none either.
    let key = unique_key("holder-expired");
    let lapsed = acquired_by(backend, &key, SHORT_TTL, Some("the one before"));
    wait_until_unlocked(backend, &key);
    let next = acquired(backend, &key, LONG_TTL);
    assert!(next.fence > lapsed.fence);
    assert_eq!(holder_of(backend, &key, &next), None);
    // And with one: its own.
    assert!(backend.release(&next.lock_id).unwrap());
    let again = acquired_by(backend, &key, LONG_TTL, Some("the one after"));
    assert_eq!(
        holder_of(backend, &key, &again).as_deref(),
        Some("the one after")
    );
    assert!(backend.release(&again.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Fences
// ---------------------------------------------------------------------------------------------

/// Listing (`list`, `list_raw`, `list_locks`, `list_locks_raw`): exactly the live locks whose
/// key starts with the prefix — not those under another prefix, not a released one, not an
/// expired one — sorted by key (byte order), cut at the limit and saying so; sanitised unless
/// raw; prefixes NFC-normalised; prefix and limit validated before any I/O.
pub fn listing<B: LockBackend>(backend: &B) {
    let root = unique_key("list");
    let under = format!("{root}:a:");
    let elsewhere = format!("{root}:b:");
    let expired = acquired(backend, &format!("{under}0-expired"), SHORT_TTL);
    // Taken out of order; `é` sorts after the ASCII ones by its bytes.
    let names = ["3", "\u{e9}", "1", "2"];
    let leases: Vec<(String, Lease)> = names
        .iter()
        .map(|name| {
            let key = format!("{under}{name}");
            let lease = acquired(backend, &key, LONG_TTL);
            (key, lease)
        })
        .collect();
    let released = acquired(backend, &format!("{under}0-released"), LONG_TTL);
    assert!(backend.release(&released.lock_id).unwrap());
    let other = acquired(backend, &format!("{elsewhere}1"), LONG_TTL);
    let sibling = acquired(backend, &format!("{root}:a"), LONG_TTL);
    // Left in place: a store that keeps expired records must still not list them.
    wait_until_unlocked(backend, &format!("{under}0-expired"));

    let mut expected = leases.clone();
    expected.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
    let expected_keys: Vec<&str> = expected.iter().map(|(key, _)| key.as_str()).collect();

    let raw = list_locks_raw(backend, &under, 10).unwrap();
    let raw_keys: Vec<&str> = raw.locks.iter().map(|lock| lock.key.as_str()).collect();
    assert_eq!(
        raw_keys, expected_keys,
        "the live locks under the prefix, sorted"
    );
    assert_eq!(raw.coverage, Coverage::Complete);
    for (lock, (key, lease)) in raw.locks.iter().zip(&expected) {
        assert_eq!(&lock.lock_id, &lease.lock_id, "{key}: the holder's lock id");
        assert_eq!(
            lock.info.fence, lease.fence,
            "{key}: the acquisition's fence"
        );
        assert_info_describes(&lock.info, key, lease, lease.expires_at_ms);
        let shown = format!("{lock:?}");
        assert!(
            !shown.contains(&lease.lock_id),
            "Debug leaks the lock id: {shown}"
        );
    }

    let sanitised = list_locks(backend, &under, 10).unwrap();
    let infos: Vec<LockInfo> = raw.locks.iter().map(|lock| lock.info.clone()).collect();
    assert_eq!(
        sanitised.locks, infos,
        "the sanitised list is the raw one's hashes"
    );
    assert_eq!(
        backend.list(&under, LeaseKind::Lock, 10).unwrap(),
        sanitised
    );
    let shown = format!("{sanitised:?}");
    assert!(
        leases
            .iter()
            .all(|(key, lease)| !shown.contains(&lease.lock_id) && !shown.contains(key.as_str())),
        "a sanitised list shows raw keys or lock ids: {shown}"
    );

    let first_two = backend.list_raw(&under, LeaseKind::Lock, 2).unwrap();
    let first_keys: Vec<&str> = first_two
        .locks
        .iter()
        .map(|lock| lock.key.as_str())
        .collect();
    assert_eq!(
        first_keys,
        expected_keys[..2],
        "the limit keeps the first keys"
    );
    assert_eq!(first_two.coverage, Coverage::LimitReached);
    let exactly = backend
        .list_raw(&under, LeaseKind::Lock, expected.len())
        .unwrap();
    assert_eq!(exactly.locks.len(), expected.len());
    assert_eq!(
        exactly.coverage,
        Coverage::Complete,
        "nothing beyond the limit"
    );

    let decomposed = backend
        .list_raw(&format!("{under}e\u{301}"), LeaseKind::Lock, 10)
        .unwrap();
    let decomposed: Vec<&str> = decomposed
        .locks
        .iter()
        .map(|lock| lock.key.as_str())
        .collect();
    assert_eq!(
        decomposed,
        [format!("{under}\u{e9}")],
        "prefixes are NFC-normalised"
    );

    let whole = backend
        .list_raw(&format!("{root}:"), LeaseKind::Lock, 10)
        .unwrap();
    let whole: Vec<&str> = whole.locks.iter().map(|lock| lock.key.as_str()).collect();
    let mut everything: Vec<String> = expected_keys.iter().map(|key| (*key).to_owned()).collect();
    everything.extend([format!("{root}:a"), format!("{elsewhere}1")]);
    everything.sort();
    assert_eq!(
        whole, everything,
        "both prefixes and the sibling under the root"
    );
    let none = backend
        .list_raw(&format!("{root}:c"), LeaseKind::Lock, 10)
        .unwrap();
    assert!(none.locks.is_empty());
    assert_eq!(none.coverage, Coverage::Complete);

    // Every lock of the store: others' too, so only what holds whatever else is stored.
    let any = backend.list_raw("", LeaseKind::Lock, 1).unwrap();
    assert!(any.locks.len() <= 1, "{any:?}");

    assert_invalid(backend.list(&under, LeaseKind::Lock, 0), "limit 0");
    assert_invalid(
        backend.list(&under, LeaseKind::Lock, MAX_LIST_LIMIT + 1),
        "limit above the maximum",
    );
    assert_invalid(
        backend.list(&"x".repeat(MAX_KEY_LENGTH_BYTES + 1), LeaseKind::Lock, 1),
        "a prefix longer than the longest key",
    );

    for (_, lease) in &leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    assert!(backend.release(&other.lock_id).unwrap());
    assert!(backend.release(&sibling.lock_id).unwrap());
    assert!(!backend.release(&expired.lock_id).unwrap());
    let after = backend
        .list_raw(&format!("{root}:"), LeaseKind::Lock, 10)
        .unwrap();
    assert!(
        after.locks.is_empty(),
        "released locks are not listed: {after:?}"
    );
}

/// Seed 003 "Fence Token Conformance" (15 digits, DESIGN §1): format, start, order, JSON.
pub fn fence_format_and_monotonicity<B: LockBackend>(backend: &B) {
    let key = unique_key("fence");
    let first = acquired(backend, &key, LONG_TTL);
    assert_fence_format(&first.fence);
    assert_eq!(
        first.fence.to_string(),
        "000000000000001",
        "fences start at 1"
    );
    assert!(backend.release(&first.lock_id).unwrap());

    let second = acquired(backend, &key, SHORT_TTL);
    assert_fence_format(&second.fence);
    assert!(second.fence > first.fence, "fence grows across release");
    assert!(
        second.fence.to_string() > first.fence.to_string(),
        "string order is acquisition order"
    );
    wait_until_unlocked(backend, &key);

    let third = acquired(backend, &key, LONG_TTL);
    assert_fence_format(&third.fence);
    assert!(third.fence > second.fence, "fence grows across expiry");
    assert!(third.fence.to_string() > second.fence.to_string());

    // Another key has its own counter.
    let other_key = unique_key("fence-other");
    let other = acquired(backend, &other_key, LONG_TTL);
    assert_eq!(
        other.fence.to_string(),
        "000000000000001",
        "counters are per key"
    );

    let info = backend.lookup(Lookup::Key(&key)).unwrap().expect("held");
    assert_eq!(info.fence, third.fence, "lookup reports the current fence");

    for fence in [&first.fence, &second.fence, &third.fence] {
        let json = serde_json::to_string(fence).unwrap();
        assert_eq!(
            json,
            format!("\"{fence}\""),
            "a fence serialises as its string"
        );
        let back: Fence = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, fence, "JSON round trip keeps the fence");
        assert_eq!(back.to_string(), fence.to_string());
        let parsed: Fence = fence.to_string().parse().unwrap();
        assert_eq!(&parsed, fence);
    }
    let value = serde_json::to_value(&info).unwrap();
    assert_eq!(value["fence"], serde_json::json!(third.fence.to_string()));
    assert_eq!(value["keyHash"], serde_json::json!(hash_key(&key)));
    assert_eq!(
        value["lockIdHash"],
        serde_json::json!(hash_key(&third.lock_id))
    );
    assert_eq!(value["expiresAtMs"], serde_json::json!(info.expires_at_ms));
    assert_eq!(
        value["acquiredAtMs"],
        serde_json::json!(info.acquired_at_ms)
    );

    assert!(backend.release(&third.lock_id).unwrap());
    assert!(backend.release(&other.lock_id).unwrap());
}

/// Seed 003 "Capabilities": every bundled backend supports fencing and names itself.
pub fn capabilities<B: LockBackend>(backend: &B) {
    let caps = backend.capabilities();
    assert!(caps.supports_fencing, "{caps:?}");
    assert!(
        ["memory", "redis", "postgres", "firestore"].contains(&caps.backend),
        "unexpected backend name in {caps:?}"
    );
    assert_eq!(backend.capabilities(), caps, "capabilities are stable");
}
