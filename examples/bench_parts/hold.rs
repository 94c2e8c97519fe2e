//! The `hold` scenario: many guards held at once through one `Locker` with the heartbeat on.
//!
//! The guards are locks of keys of their own, or with `--semaphores N` permits spread over `N`
//! semaphores (the guards' share each, rounded up). The line reports what the guards cost
//! (heap bytes, counted by the bench's allocator; the process's RSS before and after taking
//! them), how long taking them took, and over the hold: how many were lost, the renewals and
//! renewal requests the heartbeat made per second, and the CPU its threads used.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use syncguard::{Heartbeat, LockError, LockGuard, LockOptions};

use crate::{BenchError, COUNTING, Ctx, LIVE_BYTES, Scenario};

/// How many guards the scenario keeps at once, unless `--guards` says.
pub const HOLD_GUARDS: usize = 10_000;

/// The heartbeat's threads as `/proc/*/task/*/comm` shows them: the scheduler and its workers
/// (and, for versions that named it `syncguard-heartbeat`, the first 15 bytes Linux kept).
#[cfg(target_os = "linux")]
const HEARTBEAT_COMMS: [&str; 3] = ["syncguard-hb", "syncguard-hb-w", "syncguard-heart"];

/// What the scenario does.
#[derive(Debug, Clone, Copy)]
pub struct HoldPlan {
    pub guards: usize,
    /// Semaphores the guards are permits of; `None`: each guard locks a key of its own.
    pub semaphores: Option<usize>,
    pub ttl: Duration,
    pub hold: Duration,
}

impl Default for HoldPlan {
    fn default() -> Self {
        HoldPlan {
            guards: HOLD_GUARDS,
            semaphores: None,
            ttl: crate::TTL,
            hold: Duration::ZERO,
        }
    }
}

/// The scenario's JSON line. Field order is the output order.
#[derive(Serialize)]
pub struct HoldReport {
    backend: &'static str,
    scenario: &'static str,
    guards: usize,
    /// Semaphores the guards are permits of (absent: locks of their own keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    semaphores: Option<usize>,
    /// Threads that took the guards at once (1: one by one).
    threads: usize,
    ttl_ms: u128,
    hold_ms: u128,
    /// How long taking them all took.
    take_ms: u128,
    bytes_per_guard: i64,
    /// The process's resident memory before taking the guards and once they are taken, and
    /// its peak at the end of the hold (Linux only; `null` elsewhere).
    rss_before_kib: Option<u64>,
    rss_after_kib: Option<u64>,
    rss_peak_kib: Option<u64>,
    heartbeat_threads: Option<usize>,
    lost: usize,
    renewals_per_s: f64,
    /// Calls of the backend's batch renewal per second.
    renewal_requests_per_s: f64,
    /// CPU time of the heartbeat's threads over the hold, in % of one core (Linux only).
    heartbeat_cpu_pct: Option<f64>,
}

/// Takes the planned guards with the heartbeat on (one by one, or in a burst from `threads`
/// threads at once, each taking its share), measures what they cost, holds them for the
/// planned time, counts the ones lost, releases the rest.
pub fn run_hold(ctx: &Ctx, plan: HoldPlan, threads: usize) -> Result<HoldReport, BenchError> {
    let lost = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&lost);
    let options = LockOptions::default()
        .ttl(plan.ttl)
        .heartbeat(Heartbeat::Auto)
        .on_lock_lost(move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
        });
    // Built before measuring: the caller's key strings and handles are not the guards' cost.
    let keys: Vec<String> = (0..plan.semaphores.unwrap_or(plan.guards))
        .map(|n| ctx.key(Scenario::Hold, n))
        .collect();
    let semaphores = match plan.semaphores {
        Some(count) => {
            let permits = u32::try_from(plan.guards.div_ceil(count))
                .map_err(|_| crate::unexpected("too many permits for one semaphore"))?;
            keys.iter()
                .map(|key| ctx.locker.semaphore(key, permits))
                .collect::<Result<Vec<_>, LockError>>()?
        }
        None => Vec::new(),
    };
    // The `n`th guard: a lock of its own key, or a permit of semaphore `n` modulo their count.
    let take = |n: usize| match semaphores.get(n % semaphores.len().max(1)) {
        Some(semaphore) => semaphore.acquire_with(&options),
        None => ctx.locker.lock_with(&keys[n], &options),
    };

    let rss_before_kib = rss_kib("VmRSS:");
    let taking_since = Instant::now();
    COUNTING.store(true, Ordering::SeqCst);
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    // The vector is measured too: holding a guard takes room for the guard itself.
    let mut guards = Vec::with_capacity(plan.guards);
    let acquired = take_all(plan.guards, threads, &take, &mut guards);
    let after = LIVE_BYTES.load(Ordering::SeqCst);
    COUNTING.store(false, Ordering::SeqCst);
    let take_ms = taking_since.elapsed().as_millis();
    acquired?;
    let rss_after_kib = rss_kib("VmRSS:");

    let renewed_before = ctx.renewals.load(Ordering::Relaxed);
    let requested_before = ctx.renewal_requests.load(Ordering::Relaxed);
    let cpu_before = heartbeat_cpu();
    let held_since = Instant::now();
    std::thread::sleep(plan.hold);
    let renewals = ctx.renewals.load(Ordering::Relaxed) - renewed_before;
    let requests = ctx.renewal_requests.load(Ordering::Relaxed) - requested_before;
    let cpu = heartbeat_cpu()
        .zip(cpu_before)
        .map(|(end, start)| end - start);
    let held_for = held_since.elapsed().as_secs_f64();
    let heartbeat_threads = heartbeat_threads();
    let rss_peak_kib = rss_kib("VmHWM:");
    let per_guard = (after - before) as f64 / plan.guards as f64;
    let lost_while_held = guards.iter().filter(|guard| guard.is_lost()).count();
    for guard in guards {
        // A lost guard's lock may be gone already: that is counted above, not an error here.
        let _ = guard.release()?;
    }
    let per_s = |count: usize| {
        if held_for > 0.0 {
            (count as f64 / held_for).round()
        } else {
            0.0
        }
    };
    Ok(HoldReport {
        backend: ctx.backend().capabilities().backend,
        scenario: Scenario::Hold.name(),
        guards: plan.guards,
        semaphores: plan.semaphores,
        threads: threads.max(1),
        ttl_ms: plan.ttl.as_millis(),
        hold_ms: plan.hold.as_millis(),
        take_ms,
        bytes_per_guard: per_guard.round() as i64,
        rss_before_kib,
        rss_after_kib,
        rss_peak_kib,
        heartbeat_threads,
        lost: lost_while_held.max(lost.load(Ordering::Relaxed)),
        renewals_per_s: per_s(renewals),
        renewal_requests_per_s: per_s(requests),
        heartbeat_cpu_pct: cpu
            .filter(|_| held_for > 0.0)
            .map(|cpu| (cpu.as_secs_f64() / held_for * 1000.0).round() / 10.0),
    })
}

/// Takes guards `0..count` with `take` into `guards`: one by one, or from `threads` threads at
/// once, each taking its share.
fn take_all(
    count: usize,
    threads: usize,
    take: &(impl Fn(usize) -> Result<LockGuard, LockError> + Sync),
    guards: &mut Vec<LockGuard>,
) -> Result<(), LockError> {
    if threads <= 1 {
        return (0..count).try_for_each(|n| {
            guards.push(take(n)?);
            Ok(())
        });
    }
    let share = count.div_ceil(threads);
    std::thread::scope(|scope| {
        let takers: Vec<_> = (0..count)
            .step_by(share)
            .map(|start| {
                let end = (start + share).min(count);
                scope.spawn(move || (start..end).map(take).collect::<Result<Vec<_>, _>>())
            })
            .collect();
        let mut first_error = None;
        for taker in takers {
            match taker.join() {
                Ok(Ok(taken)) => guards.extend(taken),
                Ok(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                Err(_) => {
                    first_error.get_or_insert(LockError::internal("a taker thread panicked"));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// The heartbeat's threads of this process, by their `/proc/self/task` directories.
#[cfg(target_os = "linux")]
fn heartbeat_tasks() -> Option<Vec<std::path::PathBuf>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let found = tasks
        .flatten()
        .map(|task| task.path())
        .filter(|task| {
            std::fs::read_to_string(task.join("comm"))
                .is_ok_and(|comm| HEARTBEAT_COMMS.contains(&comm.trim_end()))
        })
        .collect();
    Some(found)
}

/// How many threads of this process are syncguard heartbeat threads.
#[cfg(target_os = "linux")]
fn heartbeat_threads() -> Option<usize> {
    heartbeat_tasks().map(|tasks| tasks.len())
}

/// The CPU time the heartbeat's threads have used so far (`schedstat`'s first field, in ns).
#[cfg(target_os = "linux")]
fn heartbeat_cpu() -> Option<Duration> {
    let mut nanos = 0;
    for task in heartbeat_tasks()? {
        let schedstat = std::fs::read_to_string(task.join("schedstat")).ok()?;
        nanos += schedstat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(nanos))
}

/// One `kB` line of `/proc/self/status` (`VmRSS:`, `VmHWM:`), in KiB.
#[cfg(target_os = "linux")]
fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Thread names are not portably readable: unknown.
#[cfg(not(target_os = "linux"))]
fn heartbeat_threads() -> Option<usize> {
    None
}

#[cfg(not(target_os = "linux"))]
fn heartbeat_cpu() -> Option<Duration> {
    None
}

#[cfg(not(target_os = "linux"))]
fn rss_kib(_field: &str) -> Option<u64> {
    None
}
