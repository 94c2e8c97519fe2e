//! Worker processes that share a log: what the multi-process audits ([`lock`](super::lock),
//! [`semaphore`](super::semaphore), [`rw`](super::rw)) have in common. The parent starts several
//! copies of one ignored worker test (see [`child`]) with the same environment, waits for them
//! all, and fails unless each ran its test to success; the workers append one line per event
//! to a log in a shared directory, which the parent then audits with the fence checks below.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::child;

/// Microseconds since 1970 on this machine's clock: every worker runs on this machine, so the
/// times different processes log are on one scale.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Appends `line` to the shared log in `dir`.
pub fn append_log(dir: &Path, line: &str) {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .expect("open the shared log");
    // One write per line, on a file opened for appending: a line lands whole, never
    // interleaved with another process's.
    log.write_all(line.as_bytes())
        .expect("append to the shared log");
}

/// The shared log in `dir`, once the workers are done.
pub fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).expect("the shared log")
}

/// Connects to `url` from a worker, retrying transient failures for up to a minute: connecting
/// can meet an injected fault, or a server busy with the other workers, as a real job would.
/// How a worker thread of an audit waits: in line, patiently, and retrying often.
pub fn waiting_options() -> syncguard::LockOptions {
    syncguard::LockOptions::default()
        .ttl(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(5))
        // In line, a slot freed goes to the first waiter at its next attempt. Where no release
        // is heard from other processes (PgBouncer in transaction mode, Firestore), that
        // attempt comes when its backoff ends: with the default ceiling (1 s) the 32 threads
        // would hand over about once a second.
        .max_retry_delay(Duration::from_millis(100))
        // Waiting is the point: 32 threads for a few slots on a loaded machine. A wait this
        // long only ends a run that is stuck.
        .timeout(Duration::from_secs(120))
        .max_retries(u32::MAX)
}

pub fn connect_patiently(url: &str) -> Box<dyn syncguard::LockBackend> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match syncguard::connect(url) {
            Ok(backend) => break backend,
            Err(error) if Instant::now() < deadline && error.code().is_transient() => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("the worker could not connect: {error}"),
        }
    }
}

/// Starts `processes` copies of the worker test `worker_test`, each with `env` and its output
/// in files under `dir`; calls `meanwhile` every 200 ms until they have all exited (a fault
/// injector, or nothing), then fails the test unless every one of them ran its test to
/// success. Fails too if they are not done within ten minutes, rather than hang.
pub fn run_processes(
    worker_test: &str,
    processes: usize,
    env: &[(&str, String)],
    dir: &Path,
    mut meanwhile: impl FnMut(),
) {
    let output = |i: usize, stream: &str| dir.join(format!("worker-{i}.{stream}"));
    let mut workers: Vec<(usize, Child)> = (0..processes)
        .map(|i| {
            let file =
                |stream| File::create(output(i, stream)).expect("a file for a worker's output");
            let mut command = child::one_test(worker_test);
            for (name, value) in env {
                command.env(name, value);
            }
            let worker = command
                .stdout(file("stdout"))
                .stderr(file("stderr"))
                .spawn()
                .expect("start a worker process");
            (i, worker)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut statuses = Vec::new();
    while !workers.is_empty() {
        assert!(Instant::now() < deadline, "the workers did not finish");
        meanwhile();
        workers.retain_mut(|(i, worker)| match worker.try_wait() {
            Ok(Some(status)) => {
                statuses.push((*i, status));
                false
            }
            _ => true,
        });
        std::thread::sleep(Duration::from_millis(200));
    }
    for (i, status) in statuses {
        let read = |stream| std::fs::read_to_string(output(i, stream)).unwrap_or_default();
        child::assert_passed(worker_test, status, &read("stdout"), &read("stderr"));
    }
}

/// One grant as an audit sees it: its fence, when it was asked for and when its release
/// returned (µs on this machine's clock).
#[derive(Clone, Copy, Debug)]
pub struct Grant {
    pub fence: u64,
    pub asked: u64,
    pub released: u64,
}

/// Fences granted more than once.
pub fn repeated_fences(grants: &[Grant]) -> Vec<u64> {
    let mut seen = std::collections::HashSet::new();
    grants
        .iter()
        .filter(|grant| !seen.insert(grant.fence))
        .map(|grant| grant.fence)
        .collect()
}

/// `(given back, later)` pairs where `later` was asked for after a grant with fence `given back`
/// was released, yet its fence is not higher: every grant asked for after some were given
/// back must have a fence above theirs.
pub fn fence_regressions(grants: &[Grant]) -> Vec<(u64, u64)> {
    let mut by_release: Vec<&Grant> = grants.iter().collect();
    by_release.sort_by_key(|grant| grant.released);
    let highest_so_far: Vec<u64> = by_release
        .iter()
        .scan(0, |highest, grant| {
            *highest = (*highest).max(grant.fence);
            Some(*highest)
        })
        .collect();
    grants
        .iter()
        .filter_map(|later| {
            let given_back_before = by_release.partition_point(|g| g.released < later.asked);
            (given_back_before > 0 && highest_so_far[given_back_before - 1] >= later.fence)
                .then(|| (highest_so_far[given_back_before - 1], later.fence))
        })
        .collect()
}
