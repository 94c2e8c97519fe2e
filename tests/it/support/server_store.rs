//! What every backend on a server's store (Redis, PostgreSQL) must show, written once, with the
//! store as another client sees it: expiries are the server's clock plus the TTL, the 1000 ms
//! tolerance and the 2000 ms guard of the opt-in cleanup are judged by that clock, fence
//! counters outlive their locks, and locks the TypeScript SyncGuard wrote are honoured. Each
//! backend's area implements [`ServerStore`] and invokes [`server_store_tests!`].

use std::time::{Duration, Instant};

use syncguard::driver::{LeaseKind, TIME_TOLERANCE_MS, generate_lock_id};
use syncguard::testing::support::wait_until_unlocked;
use syncguard::{LockBackend, Lookup};

use super::{TTL, assert_honours_a_foreign_lock, lease, unique};

/// A backend's store on a server, as another client sees it: the server's clock, locks written
/// into the store directly, and what is stored.
pub trait ServerStore {
    /// The server's clock, in Unix ms.
    fn now_ms(&mut self) -> i64;

    /// Writes `lock` as the TypeScript SyncGuard does when it takes a lock: the lock, and the
    /// key's fence counter at the lock's fence.
    fn write_lock(&mut self, lock: &PlantedLock);

    /// Whether a lock on `key` is stored, live or expired.
    fn lock_is_stored(&mut self, key: &str) -> bool;

    /// The value of `key`'s fence counter, if it has one.
    fn fence_counter(&mut self, key: &str) -> Option<i64>;
}

/// A lock written into a store directly: `lock_id` took `key` with `fence` at `acquired_at_ms`
/// until `expires_at_ms`, by the server's clock (the expiry may be in the past).
pub struct PlantedLock<'a> {
    pub key: &'a str,
    pub lock_id: &'a str,
    pub fence: u64,
    pub acquired_at_ms: i64,
    pub expires_at_ms: i64,
}

impl PlantedLock<'_> {
    /// The fence as stored: 15 digits.
    pub fn fence_string(&self) -> String {
        format!("{:015}", self.fence)
    }
}

/// What a check runs on: `backend` as built by default, `cleaning` built with
/// `cleanup_in_is_locked(true)`, both on the server whose store `store` writes and reads.
pub struct OnServer<'a> {
    pub backend: &'a dyn LockBackend,
    pub cleaning: &'a dyn LockBackend,
    pub store: &'a mut dyn ServerStore,
}

/// A module `server_store` with one `#[test]` per check of this module, each on fresh backends
/// from `$builder` (a function from a URL to a backend builder, with
/// [`PATIENT`](super::PATIENT) timeouts) for the server `$server` (an expression evaluated in
/// that module, which sees all that the invoking module imports; it has a `url()`), and on the
/// [`ServerStore`] `$server.$store()`.
macro_rules! server_store_tests {
    ($builder:path, $server:expr, $store:ident $(,)?) => {
        $crate::support::server_store::server_store_tests!(@tests $builder, $server, $store;
            expiry_is_computed_from_the_server_clock,
            tolerance_is_applied_against_the_server_clock,
            cleanup_in_is_locked_is_opt_in_and_guarded,
            fence_counters_survive_release_and_expiry,
            honours_locks_the_typescript_library_wrote,
        );
    };
    (@tests $builder:path, $server:expr, $store:ident; $($check:ident),* $(,)?) => {
        mod server_store {
            use super::*;

            $(
                #[test]
                fn $check() {
                    let server = $server;
                    let url = server.url();
                    let backend = $builder(&url).build().unwrap();
                    let cleaning = $builder(&url)
                        .cleanup_in_is_locked(true)
                        .build()
                        .unwrap();
                    $crate::support::server_store::$check($crate::support::server_store::OnServer {
                        backend: &backend,
                        cleaning: &cleaning,
                        store: &mut server.$store(),
                    });
                }
            )*
        }
    };
}
pub(crate) use server_store_tests;

/// Acquire and extend give expiries of the server's clock, read just before and just after
/// each call, plus the TTL.
pub fn expiry_is_computed_from_the_server_clock(on: OnServer) {
    let key = unique("server-time");
    let ttl = i64::try_from(TTL.as_millis()).expect("a TTL in ms fits in i64");
    let before = on.store.now_ms();
    let lease = lease(on.backend.acquire(&key, TTL));
    let after = on.store.now_ms();
    assert!(
        (before + ttl..=after + ttl).contains(&lease.expires_at_ms),
        "expiry {} not within the server's clock [{before}, {after}] + ttl",
        lease.expires_at_ms
    );
    let before = on.store.now_ms();
    let extended = on.backend.extend(&lease.lock_id, TTL).unwrap().unwrap();
    let after = on.store.now_ms();
    assert!(
        (before + ttl..=after + ttl).contains(&extended),
        "extended expiry {extended} not within the server's clock [{before}, {after}] + ttl"
    );
    assert!(on.backend.release(&lease.lock_id).unwrap());
}

/// Writes a lock on a fresh key, taken a minute ago, that expired `age_ms` ago by the server's
/// clock; returns the key, the lock id and the expiry.
fn write_expired_lock(store: &mut dyn ServerStore, age_ms: i64) -> (String, String, i64) {
    let key = unique("expired");
    let lock_id = generate_lock_id();
    let now = store.now_ms();
    let expires_at_ms = now - age_ms;
    store.write_lock(&PlantedLock {
        key: &key,
        lock_id: &lock_id,
        fence: 1,
        acquired_at_ms: now - 60_000,
        expires_at_ms,
    });
    (key, lock_id, expires_at_ms)
}

/// Runs `checks` on a lock written `age_ms` past its expiry, until a run has ended — by the
/// server's clock, read after it — less than `window_ms` after that expiry: only such a run
/// surely saw the lock inside the window, however slow the machine. A run that may have
/// straddled the window's end proves nothing either way and is repeated on a fresh key (a
/// loaded machine may need several). Returns what the conclusive run saw.
fn inside_the_window<T>(
    store: &mut dyn ServerStore,
    age_ms: i64,
    window_ms: i64,
    mut checks: impl FnMut(&str, &str) -> T,
) -> T {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let (key, lock_id, expires_at_ms) = write_expired_lock(store, age_ms);
        let seen = checks(&key, &lock_id);
        if store.now_ms() - expires_at_ms < window_ms {
            return seen;
        }
        assert!(
            Instant::now() < give_up,
            "for a minute, no run of the checks ended within {window_ms} ms of the expiry"
        );
    }
}

/// The 1000 ms tolerance is applied against the server's clock: a lock that expired 500 ms ago
/// by that clock is still live (held, found, listed, extendable) while less than 1000 ms have
/// passed, one that expired 1500 ms ago is not (and can be taken).
pub fn tolerance_is_applied_against_the_server_clock(on: OnServer) {
    let backend = on.backend;
    let (lock_id, seen) = inside_the_window(on.store, 500, TIME_TOLERANCE_MS, |key, lock_id| {
        let seen = [
            backend.is_locked(key).unwrap(),
            backend.lookup(Lookup::Key(key)).unwrap().is_some(),
            backend.lookup(Lookup::LockId(lock_id)).unwrap().is_some(),
            backend.list(key, LeaseKind::Lock, 1).unwrap().locks.len() == 1,
            backend.extend(lock_id, TTL).unwrap().is_some(),
        ];
        (lock_id.to_owned(), seen)
    });
    assert_eq!(
        seen, [true; 5],
        "expired 500 ms ago: is_locked, lookup by key and by id, list, extend"
    );
    assert!(backend.release(&lock_id).unwrap());

    // Past the tolerance from the start: no window to miss.
    let (key, lock_id, _) = write_expired_lock(on.store, 1500);
    let why = "expired 1500 ms ago";
    assert!(!backend.is_locked(&key).unwrap(), "{why}");
    assert!(
        backend.lookup(Lookup::Key(&key)).unwrap().is_none(),
        "{why}"
    );
    assert!(
        backend.lookup(Lookup::LockId(&lock_id)).unwrap().is_none(),
        "{why}"
    );
    assert!(
        backend
            .list(&key, LeaseKind::Lock, 1)
            .unwrap()
            .locks
            .is_empty(),
        "{why}"
    );
    assert_eq!(backend.extend(&lock_id, TTL).unwrap(), None, "{why}");
    let taken = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&taken.lock_id).unwrap(), "{why}");
}

/// `is_locked` deletes an expired lock it comes across only when the backend was built with
/// `cleanup_in_is_locked(true)`, and then only one that expired more than 2000 ms ago by the
/// server's clock.
pub fn cleanup_in_is_locked_is_opt_in_and_guarded(on: OnServer) {
    let (store, cleaning) = (on.store, on.cleaning);
    // Left behind past its expiry (e.g. written with a longer PX by another client).
    let (key, _, _) = write_expired_lock(store, 5_000);
    assert!(!on.backend.is_locked(&key).unwrap());
    assert!(store.lock_is_stored(&key), "read-only by default");
    assert!(!cleaning.is_locked(&key).unwrap());
    assert!(!store.lock_is_stored(&key), "cleaned up when enabled");

    let (locked, stored) = inside_the_window(store, 1_500, 2_000, |key, _| {
        (cleaning.is_locked(key).unwrap(), key.to_owned())
    });
    assert!(!locked);
    assert!(
        store.lock_is_stored(&stored),
        "within the 2000 ms guard nothing is deleted"
    );
}

/// A key's fence counter outlives its locks, released or expired: each acquisition continues it.
pub fn fence_counters_survive_release_and_expiry(on: OnServer) {
    let key = unique("fence-lifetime");
    let first = lease(on.backend.acquire(&key, TTL));
    assert!(on.backend.release(&first.lock_id).unwrap());
    assert_eq!(on.store.fence_counter(&key), Some(1), "after a release");

    let short = lease(on.backend.acquire(&key, Duration::from_millis(50)));
    assert_eq!(short.fence.value(), 2);
    wait_until_unlocked(on.backend, &key);
    assert!(!on.backend.release(&short.lock_id).unwrap(), "expired");
    assert_eq!(on.store.fence_counter(&key), Some(2), "after an expiry");

    let third = lease(on.backend.acquire(&key, TTL));
    assert_eq!(third.fence.value(), 3);
    assert!(on.backend.release(&third.lock_id).unwrap());
}

/// A lock the TypeScript SyncGuard wrote, with its fence counter at 7, is honoured, and its
/// counter carried on.
pub fn honours_locks_the_typescript_library_wrote(on: OnServer) {
    let key = unique("from-node");
    let lock_id = generate_lock_id();
    let now = on.store.now_ms();
    on.store.write_lock(&PlantedLock {
        key: &key,
        lock_id: &lock_id,
        fence: 7,
        acquired_at_ms: now,
        expires_at_ms: now + 30_000,
    });
    assert_honours_a_foreign_lock(on.backend, &key, &lock_id, now + 30_000);
}
