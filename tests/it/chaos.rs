//! Chaos: every backend through a fault-injecting TCP proxy ([`support::proxy::FaultProxy`])
//! that cuts connections, black-holes traffic, adds latency, and in front of servers that
//! restart. What must hold: calls end (within their configured timeouts, checked by
//! `within_a_minute` with timeouts far below a minute: [`BRISK`]; and within a few of a 1 s
//! timeout by `*_a_call_into_a_black_hole_ends_at_its_deadline`) with a result or a typed
//! transient error, never a panic; a guard whose lease cannot be renewed is reported lost no later than
//! the lease ends; no renewal follows a release; a small pool under load answers
//! `RateLimited` instead of deadlocking.
//!
//! No assertion depends on how long anything took: waiting is polling a condition with a
//! generous deadline, and a call that must succeed (before a fault, after it, or through mere
//! latency) has timeouts no loaded machine's answer from a local server comes near.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::{
    BRISK, FIRESTORE_PROJECT, PATIENT, PG_PASSWORD, PG_USER, PgServer, RedisServer,
    impatient_postgres, impatient_redis, shared_firestore, shared_firestore_backend,
    shared_postgres, shared_postgres_backend, shared_postgres_with_tables, shared_redis,
    shared_redis_backend, unique, within_a_minute,
};
use syncguard::firestore::FirestoreBackend;
use syncguard::postgres::PostgresBackend;
use syncguard::redis::RedisBackend;
use syncguard::testing::recorder::{Call, Recorder};
use syncguard::testing::support::wait_until;
use syncguard::{
    AcquireOutcome, ErrorCode, Heartbeat, LockBackend, LockError, LockGuard, LockOptions, Locker,
};

/// How long a test waits for something that should happen within a few seconds.
const PATIENCE: Duration = Duration::from_secs(20);

/// How long the storm of cuts in [`cuts_around_every_call`] starts new rounds (not an
/// assertion: how many rounds fit changes nothing but the length of the test).
const STORM: Duration = Duration::from_secs(3);

/// The lease of a guard that must stay held until the test cuts it off: renewed every 300 ms,
/// it survives any pause a loaded machine takes, and is short enough to watch run out.
const HELD_TTL: Duration = Duration::from_secs(5);

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

// ---------------------------------------------------------------------------------------------
// Backends with short timeouts, through a proxy
// ---------------------------------------------------------------------------------------------

fn redis_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

fn redis_via(proxy: &FaultProxy, pool_size: u32) -> RedisBackend {
    impatient_redis(&redis_url(proxy.port()))
        .pool_size(pool_size)
        .build()
        .expect("a Redis backend through the proxy")
}

/// Two pooled connections soon exhausted (150 ms to wait for one); round trips have
/// [`PATIENT`] timeouts, so that only the pool runs out.
fn redis_pool_of_two(proxy: &FaultProxy) -> RedisBackend {
    impatient_redis(&redis_url(proxy.port()))
        .pool_size(2)
        .connect_timeout(PATIENT)
        .read_timeout(PATIENT)
        .write_timeout(PATIENT)
        .pool_timeout(Duration::from_millis(150))
        .build()
        .expect("a Redis backend through the proxy")
}

fn pg_url(port: u16) -> String {
    format!("postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{port}/postgres")
}

fn pg_via(proxy: &FaultProxy, pool_size: u32) -> PostgresBackend {
    impatient_postgres(&pg_url(proxy.port()))
        .pool_size(pool_size)
        .build()
        .expect("a PostgreSQL backend through the proxy")
}

/// As [`redis_pool_of_two`].
fn pg_pool_of_two(proxy: &FaultProxy) -> PostgresBackend {
    impatient_postgres(&pg_url(proxy.port()))
        .pool_size(2)
        .connect_timeout(PATIENT)
        .statement_timeout(PATIENT)
        .pool_timeout(Duration::from_millis(150))
        .build()
        .expect("a PostgreSQL backend through the proxy")
}

/// Firestore has no pool: `_pool_size` is for the same signature as the others.
fn firestore_via(proxy: &FaultProxy, _pool_size: u32) -> FirestoreBackend {
    FirestoreBackend::builder()
        .project(FIRESTORE_PROJECT)
        .emulator_host(format!("127.0.0.1:{}", proxy.port()))
        .timeout(BRISK)
        .build()
        .expect("a Firestore backend through the proxy")
}

// ---------------------------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------------------------

/// A call under faults may succeed, or fail with a transient network error; nothing else.
fn assert_transient<T: std::fmt::Debug>(what: &str, result: &Result<T, LockError>) {
    if let Err(err) = result {
        assert!(
            matches!(
                err.code(),
                ErrorCode::ServiceUnavailable | ErrorCode::NetworkTimeout
            ),
            "{what}: expected success, ServiceUnavailable or NetworkTimeout, got {:?}: {err}",
            err.code()
        );
    }
}

/// Runs `call` on another thread: it must return (not hang) and not panic.
fn bounded<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    within_a_minute(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
            .map_err(|_| "the call panicked")
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Every connection is cut before and while acquire, extend and release run: each call ends in
/// a result or a typed transient error, and once traffic passes again the next call works.
fn cuts_around_every_call<B: LockBackend + 'static>(proxy: FaultProxy, backend: B) {
    let proxy = Arc::new(proxy);
    let backend = Arc::new(backend);
    let ttl = Duration::from_secs(2);

    // 1. Cut the idle pooled connections before each kind of call.
    for round in 0..3 {
        let key = unique(&format!("cut-{round}"));
        let warm = {
            let b = Arc::clone(&backend);
            let k = key.clone();
            bounded(move || b.is_locked(&k))
        };
        assert!(!warm.expect("a call before any fault"), "fresh key");
        proxy.cut_all();
        let acquired = {
            let b = Arc::clone(&backend);
            let k = key.clone();
            bounded(move || b.acquire(&k, ttl))
        };
        assert_transient("acquire after a cut", &acquired);
        let Ok(AcquireOutcome::Acquired(lease)) = acquired else {
            continue;
        };
        proxy.cut_all();
        let id = lease.lock_id.clone();
        let extended = {
            let b = Arc::clone(&backend);
            bounded(move || b.extend(&id, ttl))
        };
        assert_transient("extend after a cut", &extended);
        proxy.cut_all();
        let id = lease.lock_id.clone();
        let released = {
            let b = Arc::clone(&backend);
            bounded(move || b.release(&id))
        };
        assert_transient("release after a cut", &released);
    }

    // 2. Refused: with no way through, calls fail with a typed error and do not hang.
    proxy.set_mode(Mode::Refuse);
    proxy.cut_all();
    let key = unique("refused");
    let refused = {
        let b = Arc::clone(&backend);
        let k = key.clone();
        bounded(move || b.acquire(&k, ttl))
    };
    assert_transient("acquire while refused", &refused);
    assert!(refused.is_err(), "nothing can get through: {refused:?}");

    // 3. Cuts every few milliseconds while calls are in flight (latency makes them land
    //    mid-call), for up to 15 rounds or until STORM has passed: a call that cannot get
    //    through may take a whole timeout (PostgreSQL's handshake never completes between
    //    cuts), and BRISK timeouts must not make the storm outlast its minute.
    proxy.set_mode(Mode::Pass);
    proxy.set_latency(Duration::from_millis(15));
    let stop = Arc::new(AtomicBool::new(false));
    let cutter = {
        let (proxy, stop) = (Arc::clone(&proxy), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                proxy.cut_all();
                thread::sleep(Duration::from_millis(25));
            }
        })
    };
    let b = Arc::clone(&backend);
    let outcomes = bounded(move || {
        let mut seen = Vec::new();
        let started = std::time::Instant::now();
        for i in 0..15 {
            if i > 0 && started.elapsed() > STORM {
                break;
            }
            let key = unique(&format!("storm-{i}"));
            let acquired = b.acquire(&key, ttl);
            assert_transient("acquire during cuts", &acquired);
            seen.push(acquired.is_ok());
            if let Ok(AcquireOutcome::Acquired(lease)) = acquired {
                let extended = b.extend(&lease.lock_id, ttl);
                assert_transient("extend during cuts", &extended);
                let released = b.release(&lease.lock_id);
                assert_transient("release during cuts", &released);
            }
        }
        seen
    });
    stop.store(true, Ordering::SeqCst);
    cutter.join().unwrap();
    assert!(proxy.faults() > 0, "the proxy injected faults");
    assert!((1..=15).contains(&outcomes.len()), "{outcomes:?}");

    // 4. Traffic passes again: the very next call works, on a fresh or a pooled connection.
    proxy.set_latency(Duration::ZERO);
    let key = unique("recovered");
    let b = Arc::clone(&backend);
    let lease = bounded(move || match b.acquire(&key, ttl) {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("the first call after the faults ended should work: {other:?}"),
    });
    let b = Arc::clone(&backend);
    let released = bounded(move || b.release(&lease.lock_id));
    assert!(released.expect("release after recovery"));
}

/// The proxy black-holes all traffic while a guard is held: the guard must report the loss
/// (`is_lost`, `check` → `LockLost`, the `on_lock_lost` callback) no later than the lease ends.
///
/// Why ordering and not timestamps: the lease's end is decided by the server (Redis,
/// PostgreSQL) or by a client clock (Firestore), and comparing the moment of the callback with
/// `expires_at_ms` would be a timing assertion that a loaded machine could break. Instead a
/// second, unproxied backend probes the key until it finds it free, which can only happen once
/// the lease has ended on the store; at that moment the guard must already say it is lost.
/// `is_lost`/`check` turn true at the local deadline (send time of the last successful renewal
/// plus the TTL), which is never later than the store's expiry, so this must always hold. The
/// callback runs at the same deadline on the heartbeat's scheduler thread, which does not wait
/// for the renewal in flight: here it is only awaited; how late it may run is bounded by the
/// guard contract `loss_is_reported_while_a_renewal_hangs`.
fn black_hole_while_held<B, D>(proxy: FaultProxy, backend: B, direct: D)
where
    B: LockBackend + 'static,
    D: LockBackend + 'static,
{
    let (lost_tx, lost_rx) = mpsc::channel::<ErrorCode>();
    let lost_tx = std::sync::Mutex::new(lost_tx);
    let options = LockOptions::default()
        .ttl(HELD_TTL)
        .heartbeat(Heartbeat::Every(Duration::from_millis(300)))
        .on_lock_lost(move |e| {
            let _ = lost_tx.lock().unwrap().send(e.code());
        });
    let locker = Locker::with_defaults(backend, options);
    let key = unique("black-hole");
    let guard = {
        let (locker, key) = (locker.clone(), key.clone());
        bounded(move || locker.lock(&key).expect("lock before the outage"))
    };
    let first_expiry = guard.expires_at_ms();
    wait_until("the heartbeat to renew once", PATIENCE, || {
        guard.expires_at_ms() > first_expiry
    });
    guard.check().expect("held before the outage");

    proxy.set_mode(Mode::BlackHole);
    let guard = Arc::new(guard);
    let probe_key = key.clone();
    let probed = Arc::clone(&guard);
    let lost_when_free = bounded(move || {
        loop {
            match direct.is_locked(&probe_key) {
                Ok(false) => return probed.is_lost(),
                Ok(true) => {}
                Err(e) => panic!("the unproxied probe failed: {e}"),
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    assert!(
        lost_when_free,
        "the store let the lease go before the guard reported it lost"
    );
    let err = guard.check().unwrap_err();
    assert_eq!(err.code(), ErrorCode::LockLost, "{err}");
    let code = lost_rx
        .recv_timeout(PATIENCE)
        .expect("on_lock_lost must be called");
    assert_eq!(code, ErrorCode::LockLost);
    assert!(proxy.faults() > 0, "the proxy black-holed traffic");

    // Dropping the lost guard must not hang either, even with the traffic still black-holed.
    let guard = Arc::into_inner(guard).expect("the probe let go of the guard");
    bounded(move || drop::<LockGuard>(guard));
    drop(locker);
}

/// The timeout of every call in [`a_call_into_a_black_hole_ends_at_its_deadline`].
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// How many [`CALL_TIMEOUT`]s a call into a black hole may take: its own deadline, and a loaded
/// machine's lateness on top (well below the twelve a minute's bound allows for [`BRISK`]).
const CALL_DEADLINE_FACTOR: u32 = 4;

fn redis_with_call_timeout(proxy: &FaultProxy) -> RedisBackend {
    impatient_redis(&redis_url(proxy.port()))
        .pool_size(2)
        .connect_timeout(CALL_TIMEOUT)
        .read_timeout(CALL_TIMEOUT)
        .write_timeout(CALL_TIMEOUT)
        .build()
        .expect("a Redis backend through the proxy")
}

fn pg_with_call_timeout(proxy: &FaultProxy) -> PostgresBackend {
    impatient_postgres(&pg_url(proxy.port()))
        .pool_size(2)
        .connect_timeout(CALL_TIMEOUT)
        .statement_timeout(CALL_TIMEOUT)
        .build()
        .expect("a PostgreSQL backend through the proxy")
}

fn firestore_with_call_timeout(proxy: &FaultProxy) -> FirestoreBackend {
    FirestoreBackend::builder()
        .project(FIRESTORE_PROJECT)
        .emulator_host(format!("127.0.0.1:{}", proxy.port()))
        .timeout(CALL_TIMEOUT)
        .build()
        .expect("a Firestore backend through the proxy")
}

/// Each call has a deadline of its own, which the heartbeat relies on (a stuck renewal must
/// come back to be retried): into a black hole — a server that accepts and never answers — an
/// acquisition on a warm connection ends with a transient error within a few of its timeouts,
/// not within the minute [`bounded`] allows.
fn a_call_into_a_black_hole_ends_at_its_deadline<B: LockBackend + 'static>(
    proxy: FaultProxy,
    backend: B,
) {
    let backend = Arc::new(backend);
    let key = unique("call-deadline");
    let warm = Arc::clone(&backend);
    let warm_key = key.clone();
    bounded(move || {
        if let Ok(AcquireOutcome::Acquired(lease)) = warm.acquire(&warm_key, HELD_TTL) {
            let _ = warm.release(&lease.lock_id);
        }
    });
    proxy.set_mode(Mode::BlackHole);
    let began = Instant::now();
    let outcome = bounded(move || backend.acquire(&key, HELD_TTL));
    let took = began.elapsed();
    let error = outcome.expect_err("nothing answers in a black hole");
    // Shown with --nocapture: how far the machine's lateness is from the bound.
    eprintln!("a call with a {CALL_TIMEOUT:?} timeout gave up after {took:?}: {error}");
    assert!(error.code().is_transient(), "{error}");
    assert!(
        took < CALL_TIMEOUT * CALL_DEADLINE_FACTOR,
        "a call with a {CALL_TIMEOUT:?} timeout took {took:?} to give up: {error}"
    );
}

#[test]
fn redis_a_call_into_a_black_hole_ends_at_its_deadline() {
    through(
        redis_proxy,
        redis_with_call_timeout,
        a_call_into_a_black_hole_ends_at_its_deadline,
    );
}

#[test]
fn postgres_a_call_into_a_black_hole_ends_at_its_deadline() {
    through(
        pg_proxy,
        pg_with_call_timeout,
        a_call_into_a_black_hole_ends_at_its_deadline,
    );
}

#[test]
fn firestore_a_call_into_a_black_hole_ends_at_its_deadline() {
    through(
        firestore_proxy,
        firestore_with_call_timeout,
        a_call_into_a_black_hole_ends_at_its_deadline,
    );
}

/// After a black hole ends, the backend works again: pooled connections that went through it
/// may be dead (those opened during it are closed by the proxy when it ends), and each may cost
/// one failed call with a typed error, but no more than that.
fn recovers_after_black_hole<B: LockBackend + 'static>(proxy: FaultProxy, backend: B) {
    let locker = Locker::with_defaults(
        backend,
        LockOptions::default()
            .ttl(HELD_TTL)
            .heartbeat(Heartbeat::Every(Duration::from_millis(300))),
    );
    let key = unique("after-black-hole");
    let guard = {
        let (locker, key) = (locker.clone(), key.clone());
        bounded(move || locker.lock(&key).expect("lock before the outage"))
    };
    proxy.set_mode(Mode::BlackHole);
    wait_until("the lease to run out", PATIENCE, || guard.is_lost());
    bounded(move || drop::<LockGuard>(guard));
    // Traffic passes again. Pooled connections that went through the black hole may be dead
    // (those opened during it are closed by the proxy when it ends): each may cost one
    // failed call, with a typed error, before the locker works again.
    proxy.set_mode(Mode::Pass);
    let again = bounded(move || {
        for _ in 0..10 {
            let attempt = locker.try_lock(&key).map(|g| g.is_some());
            assert_transient("try_lock after the black hole", &attempt);
            if let Ok(free) = attempt {
                // The store may still count the lost lease as live for a moment (Firestore: its
                // expiry plus the 1 s tolerance, on the client clock): it then expires, or the
                // background release frees it.
                if !free {
                    wait_until("the lost lock to be free", PATIENCE, || {
                        matches!(locker.try_lock(&key), Ok(Some(_)))
                    });
                }
                return true;
            }
        }
        panic!("the locker still fails ten calls after the black hole ended");
    });
    assert!(again, "the lost lock can be taken again");
}

/// With latency on every round trip, releases race the heartbeat: the call log must never show
/// a renewal of a lease after its release began (contract::guard::no_renewal_after_release,
/// through a slow network).
fn no_extend_after_release_with_latency<B: LockBackend + 'static>(proxy: FaultProxy, backend: B) {
    proxy.set_latency(Duration::from_millis(10));
    let recorder = Recorder::new(backend);
    let locker = Locker::with_defaults(
        Arc::clone(&recorder),
        LockOptions::default()
            .ttl(Duration::from_secs(5))
            .heartbeat(Heartbeat::Every(Duration::from_millis(1))),
    );
    bounded(move || {
        for round in 0..3 {
            let guards: Vec<LockGuard> = (0..8)
                .map(|i| {
                    locker
                        .lock(&unique(&format!("race-{round}-{i}")))
                        .expect("lock with latency")
                })
                .collect();
            let first = Call::Extend(guards[0].lock_id().to_owned());
            wait_until("the heartbeat to be renewing", PATIENCE, || {
                recorder.count(&first) >= 1
            });
            for guard in guards {
                assert!(guard.release().expect("release with latency"));
            }
        }
        // In the order the backend saw them: no extend of a lease whose release had begun.
        let mut released = HashSet::new();
        for call in recorder.calls() {
            match call {
                Call::Release(lock_id) => {
                    released.insert(lock_id);
                }
                Call::Extend(lock_id) => assert!(
                    !released.contains(&lock_id),
                    "a renewal was sent after release began"
                ),
                _ => {}
            }
        }
    });
    drop(proxy);
}

/// A pool of 2 connections, 8 threads looping acquire/release, 50 ms of latency per round
/// trip: every call either works or answers `RateLimited` (no connection freed within the pool
/// timeout), and nothing deadlocks.
fn pool_exhaustion<B: LockBackend + 'static>(proxy: FaultProxy, backend: B) {
    proxy.set_latency(Duration::from_millis(50));
    let backend = Arc::new(backend);
    let ok = Arc::new(AtomicUsize::new(0));
    let limited = Arc::new(AtomicUsize::new(0));
    let (b, ok2, limited2) = (Arc::clone(&backend), Arc::clone(&ok), Arc::clone(&limited));
    bounded(move || {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (b, ok, limited) = (Arc::clone(&b), Arc::clone(&ok2), Arc::clone(&limited2));
                thread::spawn(move || {
                    let count = |what: &str, result: Result<(), LockError>| match result {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) if e.code() == ErrorCode::RateLimited => {
                            limited.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{what}: expected success or RateLimited, got {e}"),
                    };
                    for i in 0..6 {
                        let key = unique(&format!("pool-{t}-{i}"));
                        match b.acquire(&key, Duration::from_secs(5)) {
                            Ok(AcquireOutcome::Acquired(lease)) => {
                                count("acquire", Ok(()));
                                count("release", b.release(&lease.lock_id).map(|_| ()));
                            }
                            Ok(AcquireOutcome::Locked) => panic!("a fresh key was locked"),
                            Err(e) => count("acquire", Err(e)),
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a worker panicked");
        }
    });
    let (ok, limited) = (ok.load(Ordering::SeqCst), limited.load(Ordering::SeqCst));
    assert!(
        ok > 0,
        "some calls got a connection ({limited} rate-limited)"
    );
    eprintln!("pool exhaustion: {ok} calls served, {limited} rate-limited");
    proxy.set_latency(Duration::ZERO);
    let key = unique("pool-after");
    let b = Arc::clone(&backend);
    let outcome = bounded(move || b.acquire(&key, Duration::from_secs(1)));
    assert!(
        matches!(outcome, Ok(AcquireOutcome::Acquired(_))),
        "{outcome:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------------

fn redis_proxy() -> FaultProxy {
    FaultProxy::start(local(shared_redis().port))
}

/// A `Locker` on `backend` whose leases of `ttl` renew every 300 ms, and where it reports the
/// loss of one.
fn renewing_every_300ms<B: LockBackend + 'static>(
    backend: B,
    ttl: Duration,
) -> (Locker<B>, mpsc::Receiver<(ErrorCode, String)>) {
    let (lost_tx, lost_rx) = mpsc::channel::<(ErrorCode, String)>();
    let lost_tx = std::sync::Mutex::new(lost_tx);
    let locker = Locker::with_defaults(
        backend,
        LockOptions::default()
            .ttl(ttl)
            .heartbeat(Heartbeat::Every(Duration::from_millis(300)))
            .on_lock_lost(move |e| {
                let _ = lost_tx
                    .lock()
                    .unwrap()
                    .send((e.code(), e.message().to_owned()));
            }),
    );
    (locker, lost_rx)
}

/// Redis runs without persistence: a restart forgets every lock, and the guard's next renewal
/// finds its lock gone.
#[test]
fn redis_restart_loses_held_locks() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(local(server.port));
    let (locker, lost_rx) = renewing_every_300ms(redis_via(&proxy, 4), Duration::from_secs(10));
    let key = unique("redis-restart");
    let guard = locker.lock(&key).unwrap();
    server.restart();
    let (code, why) = lost_rx
        .recv_timeout(PATIENCE)
        .expect("the guard reports its lock lost after the restart");
    assert_eq!(code, ErrorCode::LockLost);
    // Said by the renewal that found the lock gone, not left to the lease's deadline.
    assert!(why.contains("gone when its lease was renewed"), "{why}");
    assert!(guard.is_lost());
    assert_eq!(guard.check().unwrap_err().code(), ErrorCode::LockLost);
    assert!(!bounded(move || guard.release()).expect("release of a lost lock is no error"));
    // The empty server counts fences from 1 again. The Locker saw fence 1 for this key
    // already: the repeated fence is refused, and the lock it came with released.
    let again = bounded({
        let (locker, key) = (locker.clone(), key.clone());
        move || locker.try_lock(&key).map(|g| g.map(|g| g.fence().value()))
    });
    let error = again.expect_err("a fence that went backwards is refused");
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    assert_eq!(error.key(), Some(key.as_str()));
    assert!(error.message().contains("went backwards"), "{error}");
    let free = bounded({
        let (locker, key) = (locker.clone(), key.clone());
        move || locker.backend().is_locked(&key)
    });
    assert!(
        !free.unwrap(),
        "the refused acquisition left no lock behind"
    );
    // The refused acquisition took fence 1 of the new count; another process (a fresh Locker)
    // is granted the next one and cannot tell: only the store's persistence keeps fences.
    let fresh = Locker::new(redis_via(&proxy, 1));
    let fence = bounded(move || fresh.try_lock(&key).map(|g| g.map(|g| g.fence().value())));
    assert_eq!(fence.unwrap(), Some(2));
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

fn pg_proxy() -> FaultProxy {
    shared_postgres_with_tables();
    FaultProxy::start(local(shared_postgres().port))
}

/// The handshake has a deadline too: connecting to a server that accepts and never answers
/// fails with `NetworkTimeout` instead of waiting for the startup reply forever.
#[test]
fn postgres_connecting_into_a_black_hole_times_out() {
    let proxy = pg_proxy();
    proxy.set_mode(Mode::BlackHole);
    let url = pg_url(proxy.port());
    let err = bounded(move || {
        PostgresBackend::builder()
            .url(url)
            .connect_timeout(Duration::from_millis(300))
            .statement_timeout(Duration::from_millis(300))
            .build()
            .expect_err("nothing answers the startup message")
    });
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
}

/// PostgreSQL keeps its data across a restart: the guard keeps its lease, and the heartbeat
/// renews it again over fresh connections.
#[test]
fn postgres_restart_keeps_held_locks() {
    let mut server = PgServer::start();
    PostgresBackend::connect(&server.url())
        .unwrap()
        .setup_schema()
        .unwrap();
    let proxy = FaultProxy::start(local(server.port));
    // A TTL far above any restart time, so only a bug can lose the lease.
    let (locker, lost_rx) = renewing_every_300ms(pg_via(&proxy, 4), Duration::from_secs(30));
    let key = unique("pg-restart");
    let guard = locker.lock(&key).unwrap();
    let first = guard.expires_at_ms();
    wait_until("a renewal before the restart", PATIENCE, || {
        guard.expires_at_ms() > first
    });
    server.restart();
    let after_restart = guard.expires_at_ms();
    wait_until("a renewal after the restart", PATIENCE, || {
        guard.expires_at_ms() > after_restart
    });
    guard.check().expect("the lease survived the restart");
    assert!(lost_rx.try_recv().is_err(), "no loss was reported");
    assert!(bounded(move || guard.release()).expect("release after the restart"));
}

// ---------------------------------------------------------------------------------------------
// Firestore (emulator)
// ---------------------------------------------------------------------------------------------

fn firestore_proxy() -> FaultProxy {
    // The emulator's first requests are slow while its JVM warms up: not a fault under test.
    let direct = shared_firestore_backend();
    for _ in 0..5 {
        let key = unique("warm-up");
        if let Ok(AcquireOutcome::Acquired(lease)) = direct.acquire(&key, Duration::from_secs(5)) {
            let _ = direct.release(&lease.lock_id);
        }
    }
    FaultProxy::start(local(shared_firestore().port))
}

// ---------------------------------------------------------------------------------------------
// The shared checks on every backend
// ---------------------------------------------------------------------------------------------

/// Runs `check` on a backend that `via` makes through a fresh proxy from `proxy`.
fn through<B>(
    proxy: fn() -> FaultProxy,
    via: impl FnOnce(&FaultProxy) -> B,
    check: impl FnOnce(FaultProxy, B),
) {
    let proxy = proxy();
    let backend = via(&proxy);
    check(proxy, backend);
}

/// A module `$backend` with one `#[test]` per shared check, each on a backend made by
/// `$via(&proxy, pool_size)` through a fresh `$proxy()`; `$direct()` is a backend on the same
/// server, bypassing the proxy; `$pool_of_two(&proxy)`, where given, one for `pool_exhaustion`.
macro_rules! through_a_proxy {
    ($backend:ident, $proxy:ident, $via:ident, $direct:ident $(, $pool_of_two:ident)?) => {
        mod $backend {
            use super::*;

            #[test]
            fn cuts_around_every_call() {
                through($proxy, |p| $via(p, 4), super::cuts_around_every_call);
            }

            #[test]
            fn black_hole_while_held_reports_the_loss() {
                through($proxy, |p| $via(p, 4), |p, b| black_hole_while_held(p, b, $direct()));
            }

            #[test]
            fn recovers_after_black_hole() {
                through($proxy, |p| $via(p, 4), super::recovers_after_black_hole);
            }

            #[test]
            fn no_extend_after_release_with_latency() {
                through($proxy, |p| $via(p, 8), super::no_extend_after_release_with_latency);
            }

            $(
                #[test]
                fn pool_exhaustion_is_rate_limited() {
                    through($proxy, $pool_of_two, pool_exhaustion);
                }
            )?
        }
    };
}

through_a_proxy!(
    redis,
    redis_proxy,
    redis_via,
    shared_redis_backend,
    redis_pool_of_two
);
// On PostgreSQL, a black hole that accepts and acknowledges the bytes (this proxy, a hung
// server or middlebox) leaves nothing unacknowledged, so `tcp_user_timeout` never fires, and
// the query never reaches the server, so its `statement_timeout` never fires either: only the
// client's own deadline on every call ends the wait.
through_a_proxy!(
    postgres,
    pg_proxy,
    pg_via,
    shared_postgres_backend,
    pg_pool_of_two
);
through_a_proxy!(
    firestore,
    firestore_proxy,
    firestore_via,
    shared_firestore_backend
);
