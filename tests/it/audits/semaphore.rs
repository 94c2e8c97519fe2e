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

use super::holds::{self, Fences, Hold, Store, WorkerPlan, Workers, first};
use crate::support::child;

const ENV_PERMITS: &str = "SYNCGUARD_SEM_STRESS_PERMITS";

/// The semaphore's size, which the workers are given and the audit holds them to.
const PERMITS: u32 = 3;
const SECTIONS_PER_THREAD: usize = 3;
/// On the Firestore emulator, which every Firestore test shares: each grant there is a read and
/// a conditioned commit that 32 threads race for, and a longer run slows the other tests'
/// calls past their heartbeats' schedules.
const FIRESTORE_SECTIONS_PER_THREAD: usize = 1;

// ---------------------------------------------------------------------------------------------
// The worker (runs in a child process)
// ---------------------------------------------------------------------------------------------

/// One worker process. Ignored in normal runs: the tests below start it with its environment.
#[test]
#[ignore = "a worker process of the semaphore stress tests"]
fn semaphore_stress_worker_process() {
    if let Some((plan, locker)) = WorkerPlan::from_env() {
        let permits: u32 = std::env::var(ENV_PERMITS).unwrap().parse().unwrap();
        let semaphore = locker.semaphore(&plan.key, permits).expect("a semaphore");
        plan.hold_and_log(|_, _| (false, semaphore.acquire()));
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: workers and audit
// ---------------------------------------------------------------------------------------------

/// What a run found.
#[derive(Debug, Default)]
struct Audit {
    sections: usize,
    /// The most sections seen inside at once.
    peak: usize,
    /// Moments (µs) at which more sections than permits were inside, with how many.
    overfull: Vec<(u64, usize)>,
    fences: Fences,
    failed_releases: usize,
}

fn audit(sections: &[Hold], permits: u32) -> Audit {
    let mut audit = Audit {
        sections: sections.len(),
        // (b), (c)
        fences: Fences::of(sections),
        failed_releases: holds::failed_releases(sections),
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
    audit
}

/// Runs the workers on `store` and audits what they logged.
fn run(store: Store) {
    let workers = Workers {
        name: "semaphore-stress",
        worker_test: child::test_name!(semaphore_stress_worker_process),
        sections: (SECTIONS_PER_THREAD, FIRESTORE_SECTIONS_PER_THREAD),
        env: &[(ENV_PERMITS, PERMITS.to_string())],
    };
    // (d) Every worker passed.
    let audit = audit(&workers.run(store), PERMITS);
    let backend = store.name();
    eprintln!(
        "semaphore stress {backend}: {} sections, at most {} inside at once, {} failed \
         releases",
        audit.sections, audit.peak, audit.failed_releases
    );
    // (d) Every planned section ran (and was logged).
    assert_eq!(
        audit.sections,
        workers.planned(store),
        "{backend}: not every section ran"
    );
    assert!(
        audit.overfull.is_empty(),
        "{backend}: more than {PERMITS} holders at once, {} times, e.g. (µs, holders) {}",
        audit.overfull.len(),
        first(&audit.overfull)
    );
    audit.fences.assert_clean(backend);
}

holds::audit_on_every_store!(run);

/// The audit itself, on made-up logs: each check catches what it is for.
#[test]
fn the_semaphore_audit_catches_overfull_repeats_and_regressions() {
    let section = |fence, asked, start, end, released| Hold {
        writer: false,
        fence,
        asked,
        start,
        end,
        released,
        released_ok: true,
    };
    // Two at a time under 2 permits, fences growing: clean.
    let clean = [
        section(1, 0, 1, 10, 11),
        section(2, 0, 2, 12, 13),
        section(3, 1, 11, 20, 21),
        section(4, 12, 14, 22, 23),
    ];
    let found = audit(&clean, 2);
    assert!(found.overfull.is_empty() && found.fences.repeated.is_empty());
    assert!(found.fences.regressions.is_empty(), "{found:?}");
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
    assert_eq!(found.fences.repeated, vec![2]);
    assert_eq!(found.fences.regressions, vec![(2, 2), (2, 1)]);
}
