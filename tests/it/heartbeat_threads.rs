//! One heartbeat thread per `Locker`, however many guards it holds. The count runs in a process
//! of its own (this binary again, running only that test), so that no other test's lockers add
//! threads while it counts.

use std::time::{Duration, Instant};

use crate::support::child;
use syncguard::{LockGuard, LockOptions, Locker, MemoryBackend, generate_lock_id};

/// Set in the child process: the count may run.
const ENV_ALONE: &str = "SYNCGUARD_TEST_HEARTBEAT_THREADS_ALONE";

/// Threads named like the heartbeat scheduler. A new thread takes its name once it runs, so
/// callers wait for the count they expect rather than reading it once.
fn heartbeat_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "syncguard-hb")
        .count()
}

/// All threads of this process, named or not yet.
fn all_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_thousand_guards_share_one_heartbeat_thread() {
    let test = child::test_name!(a_thousand_guards_share_one_heartbeat_thread_alone);
    let output = child::one_test(test)
        .env(ENV_ALONE, "1")
        .output()
        .expect("run the count in a child process");
    child::assert_output_passed(test, &output);
}

/// The count itself, in the child process `a_thousand_guards_share_one_heartbeat_thread`
/// starts, where it is the only test; on its own it does nothing.
#[test]
#[ignore = "run by a_thousand_guards_share_one_heartbeat_thread, in a process of its own"]
fn a_thousand_guards_share_one_heartbeat_thread_alone() {
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
    assert_eq!(all_threads(), before + 1);

    // Clones share the thread too.
    let clone = locker.clone();
    let more = clone.lock(&format!("many:{run}:clone")).unwrap();
    assert_eq!(all_threads(), before + 1);

    // Without heartbeat, no thread is needed at all.
    let quiet = Locker::with_defaults(
        MemoryBackend::new(),
        LockOptions::default().heartbeat(syncguard::Heartbeat::Off),
    );
    let _quiet_guard = quiet.lock("quiet").unwrap();
    assert_eq!(all_threads(), before + 1);

    for guard in guards {
        assert!(guard.release().unwrap());
    }
    drop(more);
    drop(clone);
    drop(locker);
    // The thread ends once the locker and all its guards are gone.
    await_thread_count(0);
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
