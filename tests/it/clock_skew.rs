//! Clock skew: what a client whose clock runs 2 s ahead or behind can and cannot do.
//!
//! Client-time backends (memory, Firestore) store `expiresAtMs = client now + ttl` and judge
//! liveness by the reading client's clock: a lock stored with expiry `E` looks live to a client
//! while its clock reads less than `E + 1000` (the fixed `TIME_TOLERANCE_MS`). So for a client
//! whose clock is `s` ms ahead, the lock ends at true time `E + 1000 - s`:
//! - `s <= 1000`: never before `E`, the holder's own lease end — the tolerance absorbs skew up
//!   to 1 s (at exactly 1 s, takeover becomes possible at the instant `E`);
//! - `s = 2000`: at `E - 1000`, a full second before the holder's lease ends — with a short TTL
//!   (here 1500 ms) only 500 ms after the lock was taken. The holder's later release or extend
//!   then finds its lock replaced and does nothing; the taker's fence is higher, so a store that
//!   checks fences rejects the stale holder's writes.
//!
//! A holder whose clock is 2 s *behind* stores an expiry 2 s early: to honest clients its lock
//! (TTL 1000 ms) is dead on arrival, while the holder itself still sees it alive for up to 2 s
//! longer. Every window is shown with exact `ManualClock` readings relative to the stored
//! `expiresAtMs`, without sleeping. Keep clients' clocks NTP-synchronised well under 1 s;
//! Firestore's `max_clock_skew` can refuse to operate beyond a bound (it measures the system
//! clock against Firestore's, so an injected test clock is invisible to it, as shown below).
//!
//! Redis and PostgreSQL take no client clock at all — their builders have no clock option and
//! every expiry is computed and judged by the server's clock (`TIME`, `clock_timestamp()`) — so
//! client skew cannot change their outcomes: the last tests show expiries are server-derived.

use std::time::Duration;

use crate::support::{self, TTL, lease, locked, unique};
use syncguard::driver::{
    Acquisition, Driver as _, DriverExt as _, Key, LeaseKind, Line, LockId, PLACE_TTL, Request,
    TIME_TOLERANCE_MS, Ttl,
};
use syncguard::firestore::FirestoreBackend;
use syncguard::{
    Clock as _, Heartbeat, LockBackend, LockOptions, Locker, Lookup, ManualClock, MemoryBackend,
    SystemClock, TimeAuthority,
};

const SKEW_MS: i64 = 2000;

/// The lock `lock_id` was taken over: its holder's release and extend do nothing.
#[track_caller]
fn assert_no_longer_held(backend: &dyn LockBackend, lock_id: &str) {
    assert!(!backend.release(lock_id).unwrap());
    assert_eq!(
        backend.extend(lock_id, Duration::from_secs(5)).unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Memory: one backend, its ManualClock moved to model a skewed writer and reader.
// ---------------------------------------------------------------------------------------------

/// The first clock reading at which a lock stored with expiry `e` is no longer live, whoever
/// reads it: `e + TIME_TOLERANCE_MS`. A reader `s` ms ahead reaches it at true time `e + 1000 - s`.
fn first_dead_reading(e: i64) -> i64 {
    e + TIME_TOLERANCE_MS
}

#[test]
fn memory_reader_two_seconds_ahead_takes_over_a_second_early() {
    let t0 = 1_700_000_000_000;
    let clock = ManualClock::new(t0);
    let backend = MemoryBackend::with_clock(clock.clone());
    // An honest holder takes a 1500 ms lease at true time t0.
    let holder = lease(backend.acquire("job", Duration::from_millis(1500)));
    let e = holder.expires_at_ms;
    assert_eq!(e, t0 + 1500);

    // A reader whose clock is 2 s ahead, at true time t, reads t + 2000.
    // True time e - 1001: its clock reads e + 999 — still live by the tolerance.
    clock.set(e - 1001 + SKEW_MS);
    assert!(backend.is_locked("job").unwrap());
    locked(backend.acquire("job", Duration::from_millis(1500)));
    // True time e - 1000 (500 ms after the holder acquired): its clock reads e + 1000 → taken.
    clock.set(e - 1000 + SKEW_MS);
    assert_eq!(clock.now_ms(), first_dead_reading(e));
    assert!(!backend.is_locked("job").unwrap());
    let taker = lease(backend.acquire("job", Duration::from_millis(1500)));
    assert!(
        taker.fence > holder.fence,
        "the early taker's fence is higher"
    );

    // Back to true time e - 1000 for the honest holder: its lease has a second to go, but its
    // lock is gone — release and extend touch nothing, and report it.
    clock.set(e - 1000);
    assert_no_longer_held(&backend, &holder.lock_id);
    let info = backend.lookup(Lookup::Key("job")).unwrap().expect("taker");
    assert_eq!(info.fence, taker.fence);
    // The taker's expiry is stored from its fast clock: 2 s later than an honest one would be.
    assert_eq!(taker.expires_at_ms, (e - 1000) + SKEW_MS + 1500);
}

#[test]
fn memory_tolerance_absorbs_skew_up_to_one_second() {
    for skew in [0, 1, 500, 999, 1000] {
        let t0 = 1_700_000_000_000;
        let clock = ManualClock::new(t0);
        let backend = MemoryBackend::with_clock(clock.clone());
        let holder = lease(backend.acquire("job", Duration::from_millis(1500)));
        let e = holder.expires_at_ms;
        // At every true time before the holder's lease ends (t < e), a reader `skew` ahead
        // still sees the lock: its clock reads at most e - 1 + skew < e + 1000.
        clock.set(e - 1 + skew);
        assert!(backend.is_locked("job").unwrap(), "skew {skew}");
        locked(backend.acquire("job", Duration::from_millis(1500)));
        // It may take over from true time e + 1000 - skew on, never before e.
        clock.set(first_dead_reading(e));
        let true_takeover = first_dead_reading(e) - skew;
        assert!(
            true_takeover >= e,
            "skew {skew}: takeover before the lease ended"
        );
        lease(backend.acquire("job", Duration::from_millis(1500)));
    }
}

#[test]
fn memory_holder_two_seconds_behind_outlives_itself_only_in_its_own_eyes() {
    let t = 1_700_000_000_000; // true time
    let clock = ManualClock::new(t - SKEW_MS); // the holder's clock, 2 s behind
    let backend = MemoryBackend::with_clock(clock.clone());
    let holder = lease(backend.acquire("job", Duration::from_millis(1000)));
    let e = holder.expires_at_ms;
    assert_eq!(e, t - 1000, "stored 1 s in the (true) past");
    // To the holder itself, the lock looks alive until its clock reads e + 1000 = true t + 2000.
    clock.set(e + 999);
    assert!(backend.is_locked("job").unwrap());
    // To an honest reader at true time t (the moment of acquisition), it is already gone.
    clock.set(t);
    assert!(!backend.is_locked("job").unwrap());
    let honest = lease(backend.acquire("job", Duration::from_millis(1000)));
    assert!(honest.fence > holder.fence);
    // The holder, back on its slow clock, finds its lease gone.
    clock.set(t - SKEW_MS);
    assert!(!backend.release(&holder.lock_id).unwrap());
    assert!(
        backend.is_locked("job").unwrap(),
        "the honest lock is untouched"
    );
}

// ---------------------------------------------------------------------------------------------
// Firestore: two backends on one emulator, one on the system clock, one skewed.
// ---------------------------------------------------------------------------------------------

fn firestore(clock: Option<ManualClock>) -> FirestoreBackend {
    let builder = support::shared_firestore_builder();
    match clock {
        Some(clock) => builder.clock(clock),
        None => builder,
    }
    .build()
    .expect("a Firestore backend for the emulator")
}

#[test]
fn firestore_client_two_seconds_ahead_takes_over_a_second_early() {
    let honest = firestore(None);
    let clock = ManualClock::new(SystemClock.now_ms() + SKEW_MS);
    let ahead = firestore(Some(clock.clone()));
    assert_eq!(ahead.capabilities().time_authority, TimeAuthority::Client);
    let key = unique("ahead");

    let holder = lease(honest.acquire(&key, Duration::from_millis(1500)));
    let e = holder.expires_at_ms;
    // The 2 s-ahead client's clock at true time e - 1001 and e - 1000 (both after the
    // acquisition at e - 1500): locked, then free.
    clock.set(e - 1001 + SKEW_MS);
    assert!(ahead.is_locked(&key).unwrap());
    locked(ahead.acquire(&key, Duration::from_millis(1500)));
    clock.set(e - 1000 + SKEW_MS);
    assert!(!ahead.is_locked(&key).unwrap());
    let taker = lease(ahead.acquire(&key, Duration::from_millis(1500)));
    assert!(taker.fence > holder.fence);
    assert_eq!(taker.expires_at_ms, e - 1000 + SKEW_MS + 1500);

    // The honest holder's lock id no longer matches anything: release and extend do nothing,
    // and the honest client sees the taker's lock.
    assert_no_longer_held(&honest, &holder.lock_id);
    let info = honest.lookup(Lookup::Key(&key)).unwrap().expect("taker");
    assert_eq!(info.fence, taker.fence);
    assert_eq!(info.expires_at_ms, taker.expires_at_ms);
    assert!(ahead.release(&taker.lock_id).unwrap());

    // With 999 ms of skew the same reader waits until after the lease ends (true time e + 1).
    let key = unique("ahead-999");
    let holder = lease(honest.acquire(&key, Duration::from_millis(1500)));
    let e = holder.expires_at_ms;
    clock.set(e + 999); // true time e: the lease's last instant
    locked(ahead.acquire(&key, Duration::from_millis(1500)));
    clock.set(e + 1000); // true time e + 1
    let late = lease(ahead.acquire(&key, Duration::from_millis(1500)));
    assert!(ahead.release(&late.lock_id).unwrap());

    // The skew monitor compares the *system* clock with Firestore's: the injected clock's 2 s
    // go unnoticed (a test seam, not a production clock).
    let measured = ahead.clock_skew().expect("measured on every answer");
    assert!(measured.offset_ms.abs() < 1000, "{measured:?}");
}

#[test]
fn firestore_client_two_seconds_behind_holds_a_lock_only_it_believes_in() {
    let honest = firestore(None);
    let clock = ManualClock::new(SystemClock.now_ms() - SKEW_MS);
    let behind = firestore(Some(clock.clone()));
    let key = unique("behind");

    // Acquired with a 1000 ms TTL on a clock 2 s slow: expiry stored 1 s in the true past.
    let holder = lease(behind.acquire(&key, Duration::from_millis(1000)));
    let e = holder.expires_at_ms;
    // The holder sees its lock alive until its clock reads e + 1000 (true time e + 3000).
    assert!(behind.is_locked(&key).unwrap());
    clock.set(e + 999);
    assert!(behind.is_locked(&key).unwrap());
    assert!(
        behind
            .lookup(Lookup::LockId(&holder.lock_id))
            .unwrap()
            .is_some()
    );
    // Honest clients, whose clocks read at least e + 1000 by now (the true acquisition time),
    // see nothing and take it.
    assert!(!honest.is_locked(&key).unwrap());
    let taker = lease(honest.acquire(&key, Duration::from_millis(1000)));
    assert!(taker.fence > holder.fence);
    // The slow holder's release and extend then do nothing to the honest lock.
    assert_no_longer_held(&behind, &holder.lock_id);
    let info = honest.lookup(Lookup::LockId(&taker.lock_id)).unwrap();
    assert_eq!(info.map(|i| i.expires_at_ms), Some(taker.expires_at_ms));
    assert!(honest.release(&taker.lock_id).unwrap());
}

/// Issue 40, item 4: the line of waiters keeps arrival order across the skew the docs allow
/// (±2 s per client). W, whose clock runs 2 s behind, takes a place; O, whose clock runs 2 s
/// ahead, acts 2.5 s after it (by its own clock: the 2.5 s are modelled there, no sleeping),
/// well within the place's 5 s of life. By the clients' clocks W's place would be stored to
/// end 3 s after true time and judged dead by O, who would prune it and be served first:
/// places are taken and judged by Firestore's time instead, which no client clock moves.
#[test]
fn firestore_line_keeps_arrival_order_across_the_documented_skew() {
    let behind_clock = ManualClock::new(0);
    let behind = firestore(Some(behind_clock.clone()));
    let ahead_clock = ManualClock::new(0);
    let ahead = firestore(Some(ahead_clock.clone()));
    let honest = firestore(None);
    let key = unique("skewed-line");
    let (checked, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let held = lease(honest.acquire(&key, TTL));

    // Each clock is set just before its client acts (a ManualClock stands still).
    let started = SystemClock.now_ms();
    behind_clock.set(started - SKEW_MS);
    let first = LockId::generate();
    let refused = behind.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&first)));
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    let line = honest.find_line(&checked, LeaseKind::Lock).unwrap();
    assert_eq!(line.len(), 1, "W's place: {line:?}");
    // Stored by Firestore's time, not by W's clock (which would end it at started + 3 s).
    assert!(
        line[0].expires_at_ms >= started + PLACE_TTL.as_millis(),
        "W's place ends {} ms after the test started",
        line[0].expires_at_ms - started
    );

    // O, 2.5 s after W's place was taken (W renews every 1.7 s, so no later than that).
    ahead_clock.set(SystemClock.now_ms() + SKEW_MS + 2_500);
    let second = LockId::generate();
    let refused = ahead.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&second)));
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    let line = ahead.find_line(&checked, LeaseKind::Lock).unwrap();
    let order: Vec<&str> = line.iter().map(|place| place.place_id.as_str()).collect();
    assert_eq!(
        order,
        [first.as_str(), second.as_str()],
        "O kept W's place, and stands behind it"
    );

    // The key free: the earlier arrival is served first.
    assert!(honest.release(&held.lock_id).unwrap());
    let refused = ahead.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&second)));
    assert_eq!(refused.unwrap(), Acquisition::Locked, "W is ahead of O");
    let Acquisition::Acquired { lease: taken, .. } = behind
        .acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&first)))
        .unwrap()
    else {
        panic!("W, first in line, is granted the free key");
    };
    assert!(behind.release(&taken.lock_id).unwrap());
    let Acquisition::Acquired { lease: taken, .. } = ahead
        .acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&second)))
        .unwrap()
    else {
        panic!("O, next, is granted");
    };
    assert!(ahead.release(&taken.lock_id).unwrap());
    assert!(
        honest
            .find_line(&checked, LeaseKind::Lock)
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Redis and PostgreSQL: the server clock decides; there is no client clock to skew.
// ---------------------------------------------------------------------------------------------

/// The TTL of [`expiry_is_server_derived`]: long enough that the lock is still held when it is
/// looked at, however slow the machine.
const SERVER_TTL_MS: i64 = 60_000;

fn server_lease() -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_millis(SERVER_TTL_MS as u64))
        .heartbeat(Heartbeat::Off)
}

/// Acquires through a `Locker` with a [`SERVER_TTL_MS`] TTL and checks that the expiry is the
/// server's clock plus the TTL, bracketed by two readings of that clock.
fn expiry_is_server_derived<B: LockBackend + 'static>(backend: B, server_now_ms: impl Fn() -> i64) {
    assert_eq!(backend.capabilities().time_authority, TimeAuthority::Server);
    let locker = Locker::with_defaults(backend, server_lease());
    let key = unique("server");
    let before = server_now_ms();
    let guard = locker.lock(&key).unwrap();
    let after = server_now_ms();
    assert!(
        (before + SERVER_TTL_MS..=after + SERVER_TTL_MS).contains(&guard.expires_at_ms()),
        "{before} ≤ {} - {SERVER_TTL_MS} ≤ {after}",
        guard.expires_at_ms()
    );
    assert!(locker.backend().is_locked(&key).unwrap());
    let info = locker
        .backend()
        .lookup(Lookup::LockId(guard.lock_id()))
        .unwrap()
        .expect("held");
    assert_eq!(info.expires_at_ms, guard.expires_at_ms());
    assert_eq!(info.acquired_at_ms + SERVER_TTL_MS, info.expires_at_ms);
    assert!((before..=after).contains(&info.acquired_at_ms));
    assert!(guard.release().unwrap());
}

#[test]
fn redis_expiry_comes_from_the_server_clock() {
    expiry_is_server_derived(
        support::shared_redis_backend(),
        support::shared_redis_now_ms,
    );
}

#[test]
fn postgres_expiry_comes_from_the_server_clock() {
    expiry_is_server_derived(
        support::shared_postgres_backend(),
        support::shared_postgres_now_ms,
    );
}

// ---------------------------------------------------------------------------------------------
// Redis and PostgreSQL: a real process whose clock is an hour behind the servers'.
// ---------------------------------------------------------------------------------------------

/// How far the skewed command's clock is behind the servers': far more than any TTL here, so
/// that an expiry computed from it would be long past by the servers' clock.
#[cfg(feature = "cli")]
const BEHIND_S: i64 = 3600;

/// Runs the `syncguard` command on `url` with its wall clock an hour behind (libfaketime,
/// through Debian's `faketime`); its monotonic clock is left alone, so that its deadlines run
/// true. The test processes and the servers keep the machine's clock.
#[cfg(feature = "cli")]
fn syncguard_an_hour_behind(url: &str, args: &[&str]) -> std::process::Output {
    let faketime = support::require_program("faketime", "faketime");
    std::process::Command::new(faketime)
        .args(["-f", "-1h", crate::cli::BIN, "--url", url])
        .args(args)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env_remove("SYNCGUARD_URL")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run syncguard under faketime")
}

/// A process whose clock reads an hour behind the server's takes locks timed by the server's
/// clock. First the skew is shown to reach it: its metrics file's end time reads an hour early.
/// Then the lock it takes for a minute expires a minute after the server's now, and a client on
/// the right time finds it held. An expiry computed from the process's own clock would be 59
/// minutes past by the server's, and the lock free to anyone.
#[cfg(feature = "cli")]
fn a_process_an_hour_behind_holds_by_the_servers_clock<B: LockBackend>(
    url: &str,
    honest: B,
    server_now_ms: impl Fn() -> i64,
) {
    let metrics = support::scratch_dir("an-hour-behind").join("run.prom");
    let metrics_path = metrics.to_str().expect("a UTF-8 scratch path");
    let run_key = unique("skew-run");
    let run = [
        "run",
        "--key",
        &run_key,
        "--metrics-file",
        metrics_path,
        "--",
        "true",
    ];
    assert_eq!(syncguard_an_hour_behind(url, &run).status.code(), Some(0));
    let text = std::fs::read_to_string(&metrics).expect("the run's metrics file");
    let ended_s = text
        .lines()
        .find(|line| line.starts_with("syncguard_run_end_timestamp_seconds"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .expect("the run's end time");
    let behind_s = server_now_ms() / 1000 - ended_s as i64;
    assert!(
        (BEHIND_S - 600..=BEHIND_S + 600).contains(&behind_s),
        "the command's clock is {behind_s} s behind the server's, not an hour: libfaketime did \
         not reach it"
    );

    let key = unique("skew-acquire");
    let before = server_now_ms();
    let taken = syncguard_an_hour_behind(url, &["acquire", "--key", &key, "--ttl", "60s"]);
    let after = server_now_ms();
    assert_eq!(taken.status.code(), Some(0));
    let printed: serde_json::Value =
        serde_json::from_slice(&taken.stdout).expect("acquire prints JSON");
    let expires_at_ms = printed["expiresAtMs"].as_i64().expect("an expiresAtMs");
    assert!(
        (before + SERVER_TTL_MS..=after + SERVER_TTL_MS).contains(&expires_at_ms),
        "expiry {expires_at_ms} not within the server's clock [{before}, {after}] + 60 s"
    );
    assert!(
        honest.is_locked(&key).unwrap(),
        "the skewed process's lock is held"
    );
    locked(honest.acquire(&key, TTL));
    let lock_id = printed["lockId"].as_str().expect("a lockId");
    assert!(honest.release(lock_id).unwrap());
}

#[cfg(feature = "cli")]
#[test]
fn redis_holds_a_process_an_hour_behind_to_the_servers_clock() {
    a_process_an_hour_behind_holds_by_the_servers_clock(
        &support::shared_redis().url(),
        support::shared_redis_backend(),
        support::shared_redis_now_ms,
    );
}

#[cfg(feature = "cli")]
#[test]
fn postgres_holds_a_process_an_hour_behind_to_the_servers_clock() {
    a_process_an_hour_behind_holds_by_the_servers_clock(
        &support::shared_postgres_with_tables().url(),
        support::shared_postgres_backend(),
        support::shared_postgres_now_ms,
    );
}
