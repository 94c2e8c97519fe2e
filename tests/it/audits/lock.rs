//! Multi-process stress with a fence audit: "never two holders" checked from the outside.
//!
//! The test re-executes its own binary as several worker processes, each running several
//! threads that take locks on a few keys through a `Locker` and, while holding one, do a
//! deliberately non-atomic read-modify-write on a per-key *resource* (a file holding a counter
//! and the highest fence it has accepted; a write with a lower fence is rejected, as a fenced
//! store would). Every critical section appends `(key, fence, start, end, accepted)` to a
//! shared log. The auditor then checks, per key:
//! - accepted critical sections never overlap in time (mutual exclusion held);
//! - fences grow in the order the sections ran;
//! - the counter equals the number of accepted sections (no lost update, which an overlap
//!   would cause).
//!
//! Faults: while the workers run, the parent keeps cutting their connections (through a
//! fault-injecting proxy), every 200 ms as long as two sections have ended in between, and
//! counts them. The short version runs in
//! `.ci/run`; `SYNCGUARD_STRESS_LONG=1` runs a long one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::workers::{self, append_log, now_us};
use crate::support::{self, child};
use syncguard::driver::generate_lock_id;
use syncguard::{Backoff, LockOptions, Locker};

const ENV_URL: &str = "SYNCGUARD_STRESS_URL";
const ENV_DIR: &str = "SYNCGUARD_STRESS_DIR";
const ENV_KEYS: &str = "SYNCGUARD_STRESS_KEYS";
const ENV_THREADS: &str = "SYNCGUARD_STRESS_THREADS";
const ENV_SECTIONS: &str = "SYNCGUARD_STRESS_SECTIONS";

/// The sizes of a run.
struct Plan {
    processes: usize,
    threads: usize,
    sections_per_thread: usize,
    keys: usize,
}

fn plan() -> Plan {
    if std::env::var_os("SYNCGUARD_STRESS_LONG").is_some() {
        Plan {
            processes: 4,
            threads: 6,
            sections_per_thread: 150,
            keys: 3,
        }
    } else {
        Plan {
            processes: 3,
            threads: 4,
            sections_per_thread: 25,
            keys: 2,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The worker (runs in a child process)
// ---------------------------------------------------------------------------------------------

/// One worker process. Ignored in normal runs: the stress tests start it with its environment.
#[test]
#[ignore = "a worker process of the stress tests"]
fn stress_worker_process() {
    let (Ok(url), Ok(dir)) = (std::env::var(ENV_URL), std::env::var(ENV_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let keys: Vec<String> = std::env::var(ENV_KEYS)
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let threads: usize = std::env::var(ENV_THREADS).unwrap().parse().unwrap();
    let sections: usize = std::env::var(ENV_SECTIONS).unwrap().parse().unwrap();
    let backend = workers::connect_patiently(&url);
    let locker = Locker::with_defaults(
        backend,
        LockOptions::default()
            .ttl(Duration::from_secs(3))
            .backoff(Backoff::Fixed)
            .retry_delay(Duration::from_millis(3))
            .timeout(Duration::from_secs(120))
            .max_retries(u32::MAX),
    );
    let errors = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (locker, keys, dir, errors) = (&locker, &keys, &dir, &errors);
            scope.spawn(move || {
                let mut done = 0;
                let mut turn = thread;
                while done < sections {
                    let key = &keys[turn % keys.len()];
                    turn += 1;
                    let guard = match locker.lock(key) {
                        Ok(guard) => guard,
                        Err(_) => {
                            // A cut connection: try again.
                            errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    };
                    let start = now_us();
                    let accepted = guard.check().is_ok()
                        && fenced_increment(&resource_path(dir, key), guard.fence().value());
                    let end = now_us();
                    append_log(
                        dir,
                        &format!(
                            "{key} {} {start} {end} {}\n",
                            guard.fence().value(),
                            u8::from(accepted)
                        ),
                    );
                    let _ = guard.release();
                    done += 1;
                }
            });
        }
    });
    append_log(
        &dir,
        &format!("# errors {}\n", errors.load(Ordering::Relaxed)),
    );
}

fn resource_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("resource-{}", key.replace(['/', ':'], "_")))
}

/// The protected resource: read the counter, work a little, write it back — not atomic on
/// purpose, so two holders at once would lose an update. It also behaves as a fenced store: a
/// write whose fence is lower than the highest it has accepted is rejected.
fn fenced_increment(path: &Path, fence: u64) -> bool {
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| "0 0".to_owned());
    let mut parts = text
        .split_whitespace()
        .map(|n| n.parse::<u64>().unwrap_or(0));
    let (count, highest) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if fence < highest {
        return false;
    }
    std::thread::sleep(Duration::from_micros(300));
    // Replace atomically (rename), so a reader never sees half a file.
    let temp = path.with_extension(format!("tmp-{}", generate_lock_id()));
    std::fs::write(&temp, format!("{} {fence}", count + 1)).expect("write the resource");
    std::fs::rename(&temp, path).expect("replace the resource");
    true
}

// ---------------------------------------------------------------------------------------------
// The parent: workers, faults, audit
// ---------------------------------------------------------------------------------------------

/// What a run found.
#[derive(Debug, Default)]
struct Audit {
    sections: usize,
    accepted: usize,
    rejected: usize,
    overlaps: usize,
    fence_order_violations: usize,
    counter_mismatches: usize,
    worker_errors: u64,
}

fn run_workers(url: &str, plan: &Plan, mut inject_fault: impl FnMut()) -> Audit {
    let dir = support::scratch_dir("stress");
    // A fault only once two sections have ended since the last one: cutting at a fixed rate, a
    // machine slow enough that reconnecting and a waiter's turn take longer than the rate would
    // never let a worker through (seen: the workers did not finish in ten minutes on a loaded
    // 2-core machine, cut every 200 ms through PostgreSQL's connection handshakes).
    let log = dir.join("log");
    let logged = || std::fs::read_to_string(&log).map_or(0, |log| log.lines().count());
    let mut progress_at_last_fault = 0;
    let run = generate_lock_id();
    let keys: Vec<String> = (0..plan.keys)
        .map(|k| format!("stress:{run}:{k}"))
        .collect();
    workers::run_processes(
        child::test_name!(stress_worker_process),
        plan.processes,
        &[
            (ENV_URL, url.to_owned()),
            (ENV_DIR, dir.display().to_string()),
            (ENV_KEYS, keys.join(",")),
            (ENV_THREADS, plan.threads.to_string()),
            (ENV_SECTIONS, plan.sections_per_thread.to_string()),
        ],
        &dir,
        || {
            let progress = logged();
            if progress >= progress_at_last_fault + 2 {
                progress_at_last_fault = progress;
                inject_fault();
            }
        },
    );
    audit(&dir, &keys, plan)
}

fn audit(dir: &Path, keys: &[String], plan: &Plan) -> Audit {
    let log = workers::read_log(dir);
    let mut audit = Audit::default();
    let mut by_key: BTreeMap<&str, Vec<(u64, u64, u64, bool)>> = BTreeMap::new();
    for line in log.lines() {
        if let Some(errors) = line.strip_prefix("# errors ") {
            audit.worker_errors += errors.parse::<u64>().unwrap();
            continue;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 5, "a torn log line: {line:?}");
        let parse = |i: usize| fields[i].parse::<u64>().unwrap();
        by_key
            .entry(fields[0])
            .or_default()
            .push((parse(1), parse(2), parse(3), fields[4] == "1"));
    }
    for sections in by_key.values_mut() {
        audit.sections += sections.len();
        let mut accepted: Vec<_> = sections.iter().filter(|s| s.3).copied().collect();
        audit.accepted += accepted.len();
        audit.rejected += sections.len() - accepted.len();
        accepted.sort_by_key(|s| s.1);
        for pair in accepted.windows(2) {
            if pair[1].1 < pair[0].2 {
                audit.overlaps += 1;
            }
            if pair[1].0 <= pair[0].0 {
                audit.fence_order_violations += 1;
            }
        }
    }
    for key in keys {
        let text =
            std::fs::read_to_string(resource_path(dir, key)).unwrap_or_else(|_| "0 0".into());
        let count: usize = text.split_whitespace().next().unwrap().parse().unwrap();
        let accepted = by_key
            .get(key.as_str())
            .map_or(0, |s| s.iter().filter(|s| s.3).count());
        if count != accepted {
            audit.counter_mismatches += 1;
        }
    }
    assert_eq!(
        audit.sections,
        plan.processes * plan.threads * plan.sections_per_thread,
        "every critical section was logged"
    );
    let _ = std::fs::remove_dir_all(dir);
    audit
}

fn assert_clean(backend: &str, audit: &Audit, faults: u64) {
    eprintln!("stress {backend}: {audit:?}, faults injected: {faults}");
    assert_eq!(audit.overlaps, 0, "{backend}: two holders at once");
    assert_eq!(
        audit.fence_order_violations, 0,
        "{backend}: fences out of order"
    );
    assert_eq!(audit.counter_mismatches, 0, "{backend}: lost updates");
    assert!(audit.accepted > 0);
}

/// Runs the workers through a fault proxy that cuts every live connection each time the
/// parent checks on them (every 200 ms) and two sections have ended since the last cut; returns
/// the audit and the number of cuts.
fn run_with_faults(server_port: u16, url_through: impl Fn(u16) -> String) -> (Audit, u64) {
    let upstream = format!("127.0.0.1:{server_port}")
        .parse()
        .expect("an address");
    let proxy = support::proxy::FaultProxy::start(upstream);
    let plan = plan();
    let mut cuts = 0;
    let audit = run_workers(&url_through(proxy.port()), &plan, || {
        proxy.cut_all();
        cuts += 1;
    });
    (audit, cuts)
}

#[test]
fn stress_redis_with_fence_audit() {
    let server = support::RedisServer::start();
    let (audit, faults) = run_with_faults(server.port, |port| format!("redis://127.0.0.1:{port}/"));
    assert_clean("redis", &audit, faults);
}

#[test]
fn stress_postgres_with_fence_audit() {
    let server = support::PgServer::start();
    syncguard::postgres::PostgresBackend::connect(&server.url())
        .and_then(|backend| backend.setup_schema())
        .expect("schema");
    let direct = server.url();
    let (audit, faults) = run_with_faults(server.port, |port| {
        direct.replace(&format!(":{}/", server.port), &format!(":{port}/"))
    });
    assert_clean("postgres", &audit, faults);
}
