//! Multi-process semaphore audit: "never more than N holders" checked from the outside, on
//! every real backend.
//!
//! As `stress` does for locks, the test re-executes its own binary as several worker
//! processes, each running several threads that take a permit of one semaphore (of
//! [`PERMITS`]) a few times. For every permit a thread logs its fence and four times on this
//! machine's clock: when it asked (before `acquire`), when its section started (after
//! `acquire` returned), when the section ended (before `release`) and when `release` returned.
//! The auditor then checks:
//! - (a) at no moment more than [`PERMITS`] sections overlap. A section lies strictly inside
//!   the time its permit was held, so more overlapping sections than permits means more
//!   holders than permits;
//! - (b) no fence was granted twice;
//! - (c) no fence regression: a permit asked for after another one's release returned was
//!   granted after that one, so its fence is higher;
//! - (d) every worker process passed and every planned section ran.
//!
//! Permits are held for milliseconds against a TTL of seconds that the guards' heartbeat
//! renews anyway, and nothing injects faults: so no holder outlives its permit and no overlap
//! is excused. The waits are generous (no timing is asserted); the run is small enough for CI
//! on two cores.

use std::path::PathBuf;
use std::time::Duration;

use super::workers::{self, Grant, append_log, fence_regressions, now_us, repeated_fences};
use crate::support::{self, child};
use syncguard::Locker;
use syncguard::driver::generate_lock_id;

const ENV_URL: &str = "SYNCGUARD_SEM_STRESS_URL";
const ENV_DIR: &str = "SYNCGUARD_SEM_STRESS_DIR";
const ENV_KEY: &str = "SYNCGUARD_SEM_STRESS_KEY";
const ENV_PERMITS: &str = "SYNCGUARD_SEM_STRESS_PERMITS";
const ENV_THREADS: &str = "SYNCGUARD_SEM_STRESS_THREADS";
const ENV_SECTIONS: &str = "SYNCGUARD_SEM_STRESS_SECTIONS";

/// The semaphore's size, which the workers are given and the audit holds them to.
const PERMITS: u32 = 3;
const PROCESSES: usize = 8;
const THREADS: usize = 4;
#[cfg(any(feature = "redis", feature = "postgres"))]
const SECTIONS_PER_THREAD: usize = 3;
/// On the Firestore emulator, which every Firestore test shares: each grant there is a read and
/// a conditioned commit that 32 threads race for, and a longer run slows the other tests'
/// calls past their heartbeats' schedules.
#[cfg(feature = "firestore")]
const FIRESTORE_SECTIONS_PER_THREAD: usize = 1;

// ---------------------------------------------------------------------------------------------
// The worker (runs in a child process)
// ---------------------------------------------------------------------------------------------

/// One worker process. Ignored in normal runs: the tests below start it with its environment.
#[test]
#[ignore = "a worker process of the semaphore stress tests"]
fn semaphore_stress_worker_process() {
    let (Ok(url), Ok(dir)) = (std::env::var(ENV_URL), std::env::var(ENV_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let key = std::env::var(ENV_KEY).unwrap();
    let permits: u32 = std::env::var(ENV_PERMITS).unwrap().parse().unwrap();
    let threads: usize = std::env::var(ENV_THREADS).unwrap().parse().unwrap();
    let sections: usize = std::env::var(ENV_SECTIONS).unwrap().parse().unwrap();
    let locker =
        Locker::with_defaults(workers::connect_patiently(&url), workers::waiting_options());
    let semaphore = locker.semaphore(&key, permits).expect("a semaphore");
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (semaphore, dir) = (&semaphore, &dir);
            scope.spawn(move || {
                for _ in 0..sections {
                    let asked = now_us();
                    let permit = semaphore
                        .acquire()
                        .unwrap_or_else(|error| panic!("no permit: {error}"));
                    let start = now_us();
                    // Long enough, next to an acquisition's round trips (tens of ms on the
                    // Firestore emulator), that sections of different threads overlap and the
                    // semaphore is held full (20 ms × 96 sections: well under a second per run).
                    std::thread::sleep(Duration::from_millis(20));
                    let end = now_us();
                    let fence = permit.fence().value();
                    // A failed release leaves the permit to expire: the audit needs nothing
                    // from it (a later grant still gets a higher fence), so it is only counted.
                    let released_ok = permit.release().is_ok();
                    let released = now_us();
                    append_log(
                        dir,
                        &format!(
                            "{fence} {asked} {start} {end} {released} {}\n",
                            u8::from(released_ok)
                        ),
                    );
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// The parent: workers and audit
// ---------------------------------------------------------------------------------------------

/// One permit as a worker logged it; times in µs since 1970 on this machine's clock.
#[derive(Clone, Copy, Debug)]
struct Section {
    fence: u64,
    asked: u64,
    start: u64,
    end: u64,
    released: u64,
}

/// What a run found.
#[derive(Debug, Default)]
struct Audit {
    sections: usize,
    /// The most sections seen inside at once.
    peak: usize,
    /// Moments (µs) at which more sections than permits were inside, with how many.
    overfull: Vec<(u64, usize)>,
    repeated_fences: Vec<u64>,
    /// `(earlier, later)`: `later` was asked for after `earlier`'s release returned, yet its
    /// fence is not higher.
    regressions: Vec<(u64, u64)>,
    failed_releases: usize,
}

fn parse_log(log: &str) -> (Vec<Section>, usize) {
    let mut failed_releases = 0;
    let sections = log
        .lines()
        .map(|line| {
            let fields: Vec<u64> = line
                .split(' ')
                .map(|field| {
                    field
                        .parse()
                        .unwrap_or_else(|_| panic!("a bad line: {line:?}"))
                })
                .collect();
            assert_eq!(fields.len(), 6, "a torn log line: {line:?}");
            failed_releases += usize::from(fields[5] == 0);
            Section {
                fence: fields[0],
                asked: fields[1],
                start: fields[2],
                end: fields[3],
                released: fields[4],
            }
        })
        .collect();
    (sections, failed_releases)
}

fn audit(sections: &[Section], permits: u32) -> Audit {
    let mut audit = Audit {
        sections: sections.len(),
        ..Audit::default()
    };
    // (a) A sweep over the sections' [start, end]. At equal times a start counts before an
    // end: both permits were held at that instant (the earlier one is released only after its
    // end, the later one was granted before its start), so the tie is an overlap.
    let mut events: Vec<(u64, bool)> = sections
        .iter()
        .flat_map(|s| [(s.start, false), (s.end, true)])
        .collect();
    events.sort_unstable();
    let mut inside = 0usize;
    for (at, is_end) in events {
        if is_end {
            inside -= 1;
        } else {
            inside += 1;
            audit.peak = audit.peak.max(inside);
            if inside > permits as usize {
                audit.overfull.push((at, inside));
            }
        }
    }
    let grants: Vec<Grant> = sections
        .iter()
        .map(|s| Grant {
            fence: s.fence,
            asked: s.asked,
            released: s.released,
        })
        .collect();
    // (b)
    audit.repeated_fences = repeated_fences(&grants);
    // (c)
    audit.regressions = fence_regressions(&grants);
    audit
}

/// Runs the workers against `url` (with `env` for them besides), `per_thread` sections a thread, and
/// audits what they logged.
fn run(backend: &str, url: &str, env: &[(&str, String)], per_thread: usize) {
    let dir = support::scratch_dir("semaphore-stress");
    let key = format!("semaphore-stress:{}", generate_lock_id());
    let mut all_env = vec![
        (ENV_URL, url.to_owned()),
        (ENV_DIR, dir.display().to_string()),
        (ENV_KEY, key),
        (ENV_PERMITS, PERMITS.to_string()),
        (ENV_THREADS, THREADS.to_string()),
        (ENV_SECTIONS, per_thread.to_string()),
    ];
    all_env.extend(env.iter().cloned());
    // (d) Every worker passed.
    workers::run_processes(
        child::test_name!(semaphore_stress_worker_process),
        PROCESSES,
        &all_env,
        &dir,
        || {},
    );
    let (sections, failed_releases) = parse_log(&workers::read_log(&dir));
    let audit = Audit {
        failed_releases,
        ..audit(&sections, PERMITS)
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_clean(backend, &audit, PROCESSES * THREADS * per_thread);
}

/// The first few of `found`, for a failure message.
fn first<T: std::fmt::Debug>(found: &[T]) -> String {
    format!("{:?}", &found[..found.len().min(5)])
}

fn assert_clean(backend: &str, audit: &Audit, planned: usize) {
    eprintln!(
        "semaphore stress {backend}: {} sections, at most {} inside at once, {} failed \
         releases",
        audit.sections, audit.peak, audit.failed_releases
    );
    // (d) Every planned section ran (and was logged).
    assert_eq!(audit.sections, planned, "{backend}: not every section ran");
    assert!(
        audit.overfull.is_empty(),
        "{backend}: more than {PERMITS} holders at once, {} times, e.g. (µs, holders) {}",
        audit.overfull.len(),
        first(&audit.overfull)
    );
    assert!(
        audit.repeated_fences.is_empty(),
        "{backend}: fences granted twice: {}",
        first(&audit.repeated_fences)
    );
    assert!(
        audit.regressions.is_empty(),
        "{backend}: {} fences not above one given back before they were asked for, e.g. \
         (given back, later) {}",
        audit.regressions.len(),
        first(&audit.regressions)
    );
}

/// The audit itself, on made-up logs: each check catches what it is for.
#[test]
fn the_semaphore_audit_catches_overfull_repeats_and_regressions() {
    let section = |fence, asked, start, end, released| Section {
        fence,
        asked,
        start,
        end,
        released,
    };
    // Two at a time under 2 permits, fences growing: clean.
    let clean = [
        section(1, 0, 1, 10, 11),
        section(2, 0, 2, 12, 13),
        section(3, 1, 11, 20, 21),
        section(4, 12, 14, 22, 23),
    ];
    let found = audit(&clean, 2);
    assert!(found.overfull.is_empty() && found.repeated_fences.is_empty());
    assert!(found.regressions.is_empty(), "{found:?}");
    assert_eq!(found.peak, 2);
    // The same under 1 permit: overfull.
    assert!(!audit(&clean, 1).overfull.is_empty());
    // A section starting at the very µs another ends counts as an overlap.
    let touching = [section(1, 0, 1, 10, 11), section(2, 0, 10, 12, 13)];
    assert_eq!(audit(&touching, 1).overfull, vec![(10, 2)]);
    // Fence 2 again, and fence 1 asked for after fence 2 was given back.
    let bad = [
        section(2, 0, 1, 2, 3),
        section(2, 4, 5, 6, 7),
        section(1, 8, 9, 10, 11),
    ];
    let found = audit(&bad, 3);
    assert_eq!(found.repeated_fences, vec![2]);
    assert_eq!(found.regressions, vec![(2, 2), (2, 1)]);
}

#[cfg(feature = "redis")]
#[test]
fn semaphore_stress_redis() {
    run(
        "redis",
        &support::shared_redis().url(),
        &[],
        SECTIONS_PER_THREAD,
    );
}

#[cfg(feature = "redis")]
#[test]
fn semaphore_stress_redis_cluster() {
    run(
        "redis cluster",
        &support::shared_cluster().url(),
        &[],
        SECTIONS_PER_THREAD,
    );
}

#[cfg(feature = "postgres")]
#[test]
fn semaphore_stress_postgres() {
    run(
        "postgres",
        &support::shared_postgres_with_tables().url(),
        &[],
        SECTIONS_PER_THREAD,
    );
}

#[cfg(feature = "postgres")]
#[test]
fn semaphore_stress_pgbouncer() {
    // PgBouncer fronts the shared cluster: its tables must exist there.
    support::shared_postgres_with_tables();
    run(
        "pgbouncer",
        &support::shared_pgbouncer().url(),
        &[],
        SECTIONS_PER_THREAD,
    );
}

#[cfg(feature = "firestore")]
#[test]
fn semaphore_stress_firestore() {
    // `firestore://PROJECT` talks to the emulator `FIRESTORE_EMULATOR_HOST` names.
    run(
        "firestore",
        &format!("firestore://{}", support::FIRESTORE_PROJECT),
        &[(
            "FIRESTORE_EMULATOR_HOST",
            support::shared_firestore().host(),
        )],
        FIRESTORE_SECTIONS_PER_THREAD,
    );
}
