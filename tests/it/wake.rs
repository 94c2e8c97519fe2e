//! Heartbeat and waiting against real servers: a renewal stalled on a row locked elsewhere
//! does not make the other guards of its `Locker` lost, and a release in one `Locker` wakes a
//! waiter in another (its own connections, as another process would have) long before its
//! poll.

#[cfg(feature = "postgres")]
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;
#[cfg(any(feature = "redis", feature = "postgres"))]
use std::time::Instant;

#[cfg(feature = "postgres")]
use syncguard::owns;
use syncguard::{Jitter, LockBackend, LockOptions, Locker};

use crate::support::unique;

/// Long enough for anything the test waits for; far shorter than the 30 s poll of the waiters.
const PATIENCE: Duration = Duration::from_secs(20);

#[cfg(any(feature = "redis", feature = "postgres"))]
fn await_condition(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// `holder` takes `key`, a waiter on `waiter` (polling only every 30 s) starts waiting, and
/// the holder releases: the waiter must hold the lock well within [`PATIENCE`]. Whenever the
/// release happens — before the waiter's first attempt (which then succeeds), during it or
/// after — the waiter is registered before that attempt, so it is never missed.
fn a_release_wakes_a_waiter_elsewhere<A, B>(holder: &Locker<A>, waiter: &Locker<B>, key: &str)
where
    A: LockBackend + 'static,
    B: LockBackend + 'static,
{
    let held = holder.lock(key).unwrap();
    let patient = LockOptions::default()
        .retry_delay(Duration::from_secs(30))
        .max_retry_delay(Duration::from_secs(30))
        .jitter(Jitter::None);
    let (got_tx, got_rx) = mpsc::channel();
    thread::scope(|scope| {
        scope.spawn(|| {
            let guard = waiter.lock_with(key, &patient).unwrap();
            got_tx.send(()).unwrap();
            assert!(guard.release().unwrap());
        });
        assert!(held.release().unwrap());
        got_rx
            .recv_timeout(PATIENCE)
            .expect("the release woke the waiter before its 30 s poll");
    });
}

/// On a server that announces releases: the waiter's locker starts listening for other
/// processes' releases on its first contention, in the background. So contend once, wait until
/// `listening` (asked of the server) says it listens, and then each of a few releases in a row
/// must wake a waiter there. `name` tells the keys apart.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn releases_wake_a_listening_waiter<A, B>(
    holder: &Locker<A>,
    waiter: &Locker<B>,
    name: &str,
    listening: impl FnMut() -> bool,
) where
    A: LockBackend + 'static,
    B: LockBackend + 'static,
{
    let key = unique(&format!("wake-warm-up-{name}"));
    let held = holder.lock(&key).unwrap();
    let short = LockOptions::default().timeout(Duration::from_millis(1));
    assert!(waiter.lock_with(&key, &short).is_err());
    drop(held);
    await_condition("the waiter's locker to listen for releases", listening);
    for round in 0..3 {
        let key = unique(&format!("wake-{name}-{round}"));
        a_release_wakes_a_waiter_elsewhere(holder, waiter, &key);
    }
}

#[test]
fn memory_release_wakes_a_waiter_in_another_locker() {
    let backend = syncguard::MemoryBackend::new();
    let holder = Locker::new(backend.clone());
    let waiter = Locker::new(backend);
    a_release_wakes_a_waiter_elsewhere(&holder, &waiter, &unique("wake-memory"));
}

#[cfg(feature = "redis")]
#[test]
fn redis_release_wakes_a_waiter_in_another_locker() {
    use crate::support::shared_redis_backend;
    let holder = Locker::new(shared_redis_backend());
    let waiter = Locker::new(shared_redis_backend());
    let (_, mut connection) = crate::support::shared_redis_with_connection();
    releases_wake_a_listening_waiter(&holder, &waiter, "redis", || {
        let patterns: i64 = redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query(&mut connection)
            .unwrap();
        patterns > 0
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_release_wakes_a_waiter_in_another_locker() {
    use crate::support::{shared_postgres, shared_postgres_backend};
    use syncguard::postgres::PostgresBackend;
    let holder = Locker::new(shared_postgres_backend());
    // Named, so that its listening connection can be told from other tests'. Its last
    // statement is its LISTEN (the probe notification comes from a connection of its own).
    let name = format!("waiter-{}", syncguard::driver::generate_lock_id());
    let url = format!("{}?application_name={name}", shared_postgres().url());
    let waiter = Locker::new(PostgresBackend::connect(&url).unwrap());
    let mut client = shared_postgres().client();
    releases_wake_a_listening_waiter(&holder, &waiter, "postgres", || {
        let listening: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND query LIKE 'LISTEN %'",
                &[&name],
            )
            .unwrap()
            .get(0);
        listening > 0
    });
}

/// Head-of-line: another transaction holds the first guard's row for longer than its TTL, so
/// its renewal cannot get through — the second guard, whose row is free, is still renewed and
/// stays held. (With one renewal at a time held across its call, both were lost.)
#[cfg(feature = "postgres")]
#[test]
fn postgres_a_renewal_stalled_on_a_locked_row_leaves_other_guards_held() {
    use crate::support::{shared_postgres, shared_postgres_backend};
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    let locker = Locker::with_defaults(
        shared_postgres_backend(),
        LockOptions::default()
            .ttl(Duration::from_secs(3))
            .on_lock_lost(move |error| {
                let _ = lost_tx.lock().unwrap().send(error.key().map(str::to_owned));
            }),
    );
    let (stalled_key, free_key) = (unique("stalled"), unique("free"));
    let stalled = locker.lock(&stalled_key).unwrap();
    let free = locker.lock(&free_key).unwrap();
    let free_expiry = free.expires_at_ms();

    let mut blocker = shared_postgres().client();
    let mut transaction = blocker.transaction().unwrap();
    transaction
        .query(
            "SELECT 1 FROM syncguard_locks WHERE lock_id = $1 FOR UPDATE",
            &[&stalled.lock_id()],
        )
        .unwrap();
    let lost = lost_rx
        .recv_timeout(PATIENCE)
        .expect("the stalled guard is reported lost at its deadline");
    assert_eq!(lost.as_deref(), Some(stalled_key.as_str()));
    assert!(stalled.is_lost());
    // The free guard went on being renewed through the stall.
    assert!(
        !free.is_lost(),
        "the free guard was lost with the stalled one"
    );
    free.check().unwrap();
    assert!(
        free.expires_at_ms() > free_expiry,
        "the free guard was renewed"
    );
    assert!(owns(locker.backend(), free.lock_id()).unwrap());
    assert!(
        lost_rx.try_recv().is_err(),
        "only the stalled guard was lost"
    );
    transaction.rollback().unwrap();
    assert!(free.release().unwrap());
    drop(stalled);
}
