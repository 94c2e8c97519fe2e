//! A bounded heartbeat per `Locker`, however many guards it holds: one scheduler thread and at
//! most four renewal workers. The count runs in a process of its own (this binary again,
//! running only that test), so that no other test's lockers add threads while it counts.

use std::time::{Duration, Instant};

use crate::support::child;
use syncguard::driver::generate_lock_id;
use syncguard::testing::recorder::Recorder;
use syncguard::{LockGuard, LockOptions, Locker, MemoryBackend};

/// Set in the child process: the count may run.
const ENV_ALONE: &str = "SYNCGUARD_TEST_HEARTBEAT_THREADS_ALONE";

/// Threads named `name`. A new thread takes its name once it runs, so callers wait for the
/// count they expect rather than reading it once.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

/// The heartbeat's scheduler threads.
fn heartbeat_threads() -> usize {
    threads_named("syncguard-hb")
}

/// The heartbeat's renewal workers.
fn worker_threads() -> usize {
    threads_named("syncguard-hb-w")
}

/// All threads of this process, named or not yet.
fn all_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_thousand_guards_share_a_bounded_heartbeat() {
    let test = child::test_name!(a_thousand_guards_share_a_bounded_heartbeat_alone);
    let output = child::one_test(test)
        .env(ENV_ALONE, "1")
        .output()
        .expect("run the count in a child process");
    child::assert_output_passed(test, &output);
}

/// The count itself, in the child process `a_thousand_guards_share_a_bounded_heartbeat`
/// starts, where it is the only test; on its own it does nothing.
#[test]
#[ignore = "run by a_thousand_guards_share_a_bounded_heartbeat, in a process of its own"]
fn a_thousand_guards_share_a_bounded_heartbeat_alone() {
    if std::env::var_os(ENV_ALONE).is_none() {
        return;
    }
    assert_eq!(heartbeat_threads(), 0);
    let before = all_threads();
    let locker = Locker::with_defaults(
        MemoryBackend::new(),
        LockOptions::default().ttl(Duration::from_secs(30)),
    );
    let run = generate_lock_id();
    let guards: Vec<LockGuard> = (0..1000)
        .map(|i| locker.lock(&format!("many:{run}:{i}")).unwrap())
        .collect();
    await_thread_count(1);
    // Nothing is due for 10 s: no worker yet, one thread in all.
    assert_eq!(all_threads(), before + 1);

    // Clones share the heartbeat too.
    let clone = locker.clone();
    let more = clone.lock(&format!("many:{run}:clone")).unwrap();
    assert_eq!(all_threads(), before + 1);

    // Many leases due all the time (5 000 renewals a second): renewals go to workers, never
    // more than four. Leases of 3 s, so that a loaded machine's pauses cannot end one.
    let busy = Locker::with_defaults(
        MemoryBackend::new(),
        LockOptions::default().ttl(Duration::from_secs(3)),
    );
    let busy_guards: Vec<LockGuard> = (0..5000)
        .map(|i| busy.lock(&format!("busy:{run}:{i}")).unwrap())
        .collect();
    await_thread_count(2);
    let deadline = Instant::now() + Duration::from_secs(15);
    while worker_threads() == 0 {
        assert!(Instant::now() < deadline, "no renewal worker started");
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..50 {
        assert!(worker_threads() <= 4, "{} workers", worker_threads());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(busy_guards.iter().all(|guard| !guard.is_lost()));
    drop(busy_guards);
    drop(busy);

    for guard in guards {
        assert!(guard.release().unwrap());
    }
    drop(more);
    drop(clone);
    drop(locker);
    // The threads end once the lockers and all their guards are gone.
    await_thread_count(0);
    await_no_workers();

    // Renewal calls that never come back: a worker waits in each, and no more than four are
    // started however many leases fall due meanwhile (those are reported lost at their
    // deadlines instead). Each lease is taken once the one before it is stuck in its call (or,
    // past four, has waited out its deadline), so every renewal is a call of its own.
    let recorder = Recorder::new(MemoryBackend::new());
    recorder.hang_renewals(true);
    let stuck = Locker::with_defaults(
        recorder.clone(),
        LockOptions::default().ttl(Duration::from_secs(3)),
    );
    let mut stuck_guards = Vec::new();
    // Dropped first when an assertion fails: a guard's release waits for its renewal in flight.
    let unhang = Unhang(&recorder);
    for i in 0..5 {
        let guard = stuck.lock(&format!("stuck:{run}:{i}")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while recorder.renewals_hanging() < (i + 1).min(4) || (i >= 4 && !guard.is_lost()) {
            assert!(
                Instant::now() < deadline,
                "lease {i}: {} renewals stuck, lost: {}",
                recorder.renewals_hanging(),
                guard.is_lost()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        stuck_guards.push(guard);
    }
    assert_eq!(recorder.renewals_hanging(), 4, "a worker per stuck call");
    assert!(worker_threads() <= 4, "{} workers", worker_threads());
    drop(unhang);
    drop(stuck_guards);
    drop(stuck);
    await_thread_count(0);
    await_no_workers();
}

/// Lets the stuck renewals go when dropped.
struct Unhang<'a>(&'a Recorder<MemoryBackend>);

impl Drop for Unhang<'_> {
    fn drop(&mut self) {
        self.0.hang_renewals(false);
    }
}

fn await_no_workers() {
    let deadline = Instant::now() + Duration::from_secs(15);
    while worker_threads() > 0 {
        assert!(
            Instant::now() < deadline,
            "renewal workers outlived their locker"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn await_thread_count(expected: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let count = heartbeat_threads();
        if count == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {expected} heartbeat threads, found {count}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
