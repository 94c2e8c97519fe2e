//! Throughput, latency and memory of syncguard operations against one backend.
//!
//! ```text
//! cargo run --release --example bench                                   # in-process memory backend
//! cargo run --release --example bench -- --url redis://127.0.0.1/ --threads 4
//! cargo run --release --example bench -- --scenario cycle,extend --seconds 10
//! ```
//!
//! The backend comes from `--url`, else `$SYNCGUARD_URL`, else `memory:` (see
//! [`syncguard::connect`]). Each scenario prints one JSON line on stdout:
//!
//! ```text
//! {"backend":"memory","scenario":"cycle","threads":1,"ops":…,"ops_per_s":…,"p50_us":…,"p99_us":…}
//! {"backend":"memory","scenario":"hold","guards":10000,"threads":1,…,"lost":0,…}
//! ```
//!
//! Timed scenarios (each runs `--seconds` on `--threads` threads; latency is per operation, in
//! microseconds to one decimal):
//!
//! - `cycle`: `LockBackend::acquire` then `release`, each thread on its own key.
//! - `guard`: `Locker::lock` then releasing the guard, each thread on its own key.
//! - `contended`: every thread locks the same key through `Locker::lock_with` (retry delay
//!   1 ms, timeout 60 s, unlimited retries); one operation is one acquisition + release, waits
//!   included.
//! - `semaphore`: every thread takes a permit of one semaphore of `--permits` (default 4)
//!   through `Semaphore::acquire_with` (the same options as `contended`) and gives it back at
//!   once. One operation is one acquisition + release; the latencies are the acquisitions'
//!   alone, waits included (the line adds `"permits"`).
//! - `shared`: every thread takes one key's lock through `RwLock` (the same options as
//!   `contended`), one hold in ten exclusively (`write_with`), the others shared
//!   (`read_with`), and gives it back at once; one operation is one acquisition + release.
//! - `extend`: each thread holds one guard (`Locker::lock`) and extends it over and over
//!   (`LockGuard::extend`: the key is known, as for every renewal of a held lock).
//! - `lookup`: each thread holds one lease and looks it up by key over and over.
//! - `multi`: each thread takes `--keys` keys of its own (default 2) together through
//!   `Locker::lock_all` and releases the set (`MultiLockGuard::release`: a release per key);
//!   the latencies are the set acquisitions' alone. The line adds `"keys"`.
//!
//! - `handoff`: a holder releases a lock that `--waiters` waiters (default 1) of another
//!   `Locker` (its own connections, as another process would have) wait for with default
//!   options, lined up one after another; each releases as soon as it holds the lock. One
//!   operation is the time from a release to the next waiter holding the lock.
//!
//! `--line off` makes the waiters of `contended`, `semaphore` and `handoff` barge
//! (`LockOptions::wait_in_line(false)`) instead of waiting in line; their lines say `"line"`.
//!
//! And `hold`: `--guards` guards (default 10 000) held at once through one `Locker` with the
//! heartbeat on, with TTL `--ttl` (default 30 s) for `--hold` (default: none): locks of keys of
//! their own, or with `--semaphores N` permits spread over `N` semaphores. It reports the
//! heap bytes they cost (counted by this program's global allocator: the guards, the
//! heartbeat's bookkeeping and, for `memory:`, the backend's own records), the process's RSS
//! before and after taking them, how long that took, how many heartbeat threads run and the
//! CPU they used over the hold (Linux only; `null` elsewhere), how many guards were lost while
//! held, and the renewals and renewal requests the heartbeat made per second.
//!
//! Two more run only when named:
//!
//! - `line-load`: `--waiters` waiters wait `--seconds` for a key held throughout; the line
//!   gives their acquisition attempts per second (`bench_parts/line_load.rs`).
//! - `process-handoff`: `--rounds` handoffs of a lock from one `syncguard run` to a waiting
//!   `syncguard run --wait` (the `--syncguard` binary, default the one beside this program);
//!   `--line off` passes them `--no-line` (`bench_parts/process_handoff.rs`).
//!
//! Keys are `syncguard-bench:<random run id>:<scenario>:<n>`, so concurrent runs against a
//! shared server do not collide; everything taken is released before the scenario ends.
//! Backends never delete fence counters, so each run leaves one counter per key it used
//! (about 10 000 for `hold`) on a real server.
//!
//! Built with the feature `metrics` and run with `SYNCGUARD_BENCH_RECORDER=1`, it first installs
//! a metrics recorder (a registry of atomics, as an exporter keeps), to measure what recording
//! the `syncguard_*` metrics costs.
//!
//! Exit status: 0 on success, 2 for bad usage, 3 when a lock operation fails
//! (`error: <Code>: <message>` on stderr).

// The crate's duration parser (humantime's forms or plain milliseconds), compiled in: an
// example reaches only the public API.
#[path = "../src/duration.rs"]
mod duration;
#[path = "bench_parts/hold.rs"]
mod hold;
#[path = "bench_parts/line_load.rs"]
mod line_load;
#[path = "bench_parts/process_handoff.rs"]
mod process_handoff;
#[cfg(feature = "metrics")]
#[path = "bench_parts/recorder.rs"]
mod recorder;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::duration::parse_duration;
use crate::hold::{HoldPlan, run_hold};
use serde::Serialize;
use syncguard::driver::{Driver, Extension, LeaseKind, LeaseRef, Outcome, Ttl};
use syncguard::{AcquireOutcome, Lease, LockBackend, LockError, LockOptions, Locker, Lookup};

const USAGE: &str = "\
bench: throughput, latency and memory of syncguard operations

USAGE:
    cargo run --release --example bench -- [OPTIONS]

OPTIONS:
    --url URL           backend to measure (default: $SYNCGUARD_URL, else memory:)
    --threads N         client threads in each timed scenario, and the threads the hold
                        scenario takes its guards from at once, a burst (default: 1)
    --seconds S         length of each timed scenario, in seconds (default: 3)
    --scenario NAMES    comma-separated scenarios to run (default: all), from:
                        cycle, guard, contended, semaphore, shared, extend, lookup,
                        multi, handoff, hold; and, only when named, line-load and
                        process-handoff
    --permits N         permits of the semaphore scenario's semaphore (default: 4)
    --waiters N         waiters the handoff and line-load scenarios line up (default: 1)
    --rounds N          handoffs the process-handoff scenario measures (default: 10)
    --syncguard PATH    the CLI process-handoff runs (default: syncguard beside bench)
    --keys N            keys the multi scenario holds together, 1 to 64 (default: 2)
    --line on|off       waiters wait in line, or barge (default: on)
    --guards N          guards the hold scenario keeps (default: 10000)
    --semaphores N      the hold scenario's guards are permits of N semaphores
                        (default: locks of keys of their own)
    --ttl D             their TTL, e.g. 3s or 3000ms (default: 30s)
    --hold D            how long they are held (default: 0s)
    -h, --help          print this help

Prints one JSON line per scenario on stdout. Exit status: 0 success, 2 bad usage,
3 a lock operation failed.";

/// Lease length for everything the benchmark takes.
const TTL: Duration = Duration::from_secs(30);

/// In the `shared` scenario, one hold in this many is a writer's.
const SHARED_WRITER_EVERY: usize = 10;

/// The size of the `semaphore` scenario's semaphore, unless `--permits` says.
const PERMITS: u32 = 4;

// ---------------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------------

/// The system allocator, counting live heap bytes while [`COUNTING`] is on.
///
/// Counting is switched on only around the `hold` measurement, so the timed scenarios run
/// without the shared atomic. The difference between two readings taken inside one counting
/// window is exactly the change in live bytes over that window.
struct CountingAllocator;

/// Net bytes allocated while counting was on.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

/// Whether allocations are being counted.
static COUNTING: AtomicBool = AtomicBool::new(false);

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Adds `delta` bytes to [`LIVE_BYTES`] when counting is on.
fn record(delta: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
    }
}

/// A block size as a signed byte count (layout sizes never exceed `isize::MAX`).
fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the `GlobalAlloc`
// contract; the wrapper only updates a counter.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        record(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller vouches for `new_size`.
        let new_ptr = unsafe { System.realloc(ptr, layout, new_size) };
        if !new_ptr.is_null() {
            record(signed(new_size) - signed(layout.size()));
        }
        new_ptr
    }
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

/// One benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Cycle,
    Guard,
    Contended,
    Semaphore,
    Shared,
    Extend,
    Lookup,
    Handoff,
    Hold,
    Multi,
    LineLoad,
    ProcessHandoff,
}

impl Scenario {
    /// All scenarios, in the order they run by default.
    const ALL: [Scenario; 10] = [
        Scenario::Cycle,
        Scenario::Guard,
        Scenario::Contended,
        Scenario::Semaphore,
        Scenario::Shared,
        Scenario::Extend,
        Scenario::Lookup,
        Scenario::Multi,
        Scenario::Handoff,
        Scenario::Hold,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Cycle => "cycle",
            Scenario::Guard => "guard",
            Scenario::Contended => "contended",
            Scenario::Semaphore => "semaphore",
            Scenario::Shared => "shared",
            Scenario::Extend => "extend",
            Scenario::Lookup => "lookup",
            Scenario::Handoff => "handoff",
            Scenario::Hold => "hold",
            Scenario::Multi => "multi",
            Scenario::LineLoad => "line-load",
            Scenario::ProcessHandoff => "process-handoff",
        }
    }

    fn from_name(name: &str) -> Option<Scenario> {
        (Scenario::ALL.into_iter())
            .chain([Scenario::LineLoad, Scenario::ProcessHandoff])
            .find(|s| s.name() == name)
    }
}

/// The parsed command line.
#[derive(Debug)]
struct Args {
    url: String,
    threads: usize,
    duration: Duration,
    scenarios: Vec<Scenario>,
    hold: HoldPlan,
    permits: u32,
    /// Whether waiters wait in line (`--line on`, the default) or barge (`--line off`).
    line: bool,
    /// How many waiters the `handoff` scenario lines up.
    waiters: usize,
    /// How many keys the `multi` scenario holds together.
    keys: usize,
    /// How many handoffs `process-handoff` measures.
    rounds: usize,
    /// The CLI `process-handoff` runs.
    syncguard: Option<std::path::PathBuf>,
}

/// What the command line asked for.
enum Command {
    Run(Args),
    Help,
}

/// Parses the command line (without the program name). `Err` holds the message for a usage
/// error.
fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut url = None;
    let mut threads = 1;
    let mut duration = Duration::from_secs(3);
    let mut scenarios = Scenario::ALL.to_vec();
    let mut permits = PERMITS;
    let mut line = true;
    let mut waiters = 1;
    let mut keys = 2;
    let mut hold = HoldPlan::default();
    let mut rounds = 10;
    let mut syncguard = None;
    while let Some(arg) = argv.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        if !arg.starts_with('-') {
            // Not echoed: a misplaced URL may carry a password.
            return Err("unexpected argument; options start with --".to_owned());
        }
        // Both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        if !matches!(
            flag.as_str(),
            "--url"
                | "--threads"
                | "--seconds"
                | "--scenario"
                | "--guards"
                | "--semaphores"
                | "--ttl"
                | "--hold"
                | "--permits"
                | "--line"
                | "--waiters"
                | "--keys"
                | "--rounds"
                | "--syncguard"
        ) {
            return Err(format!("unknown option {flag}"));
        }
        let value = match inline.or_else(|| argv.next()) {
            Some(value) => value,
            None => return Err(format!("{flag} needs a value")),
        };
        match flag.as_str() {
            "--url" => url = Some(value),
            "--syncguard" => syncguard = Some(value.into()),
            "--rounds" => {
                rounds =
                    value.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                        format!("--rounds wants a whole number >= 1, not {value:?}")
                    })?;
            }
            "--guards" => {
                hold.guards = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n >= 1)
                    .ok_or_else(|| format!("--guards wants a whole number >= 1, not {value:?}"))?;
            }
            "--semaphores" => {
                hold.semaphores = Some(value.parse().ok().filter(|&n: &usize| n >= 1).ok_or_else(
                    || format!("--semaphores wants a whole number >= 1, not {value:?}"),
                )?);
            }
            "--permits" => {
                permits = value
                    .parse()
                    .ok()
                    .filter(|&n: &u32| n >= 1)
                    .ok_or_else(|| format!("--permits wants a whole number >= 1, not {value:?}"))?;
            }
            "--line" => {
                line = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("--line wants on or off, not {value:?}")),
                };
            }
            "--waiters" => {
                waiters = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n >= 1)
                    .ok_or_else(|| format!("--waiters wants a whole number >= 1, not {value:?}"))?;
            }
            "--keys" => {
                keys = value
                    .parse()
                    .ok()
                    .filter(|n: &usize| (1..=syncguard::driver::MAX_KEYS).contains(n))
                    .ok_or_else(|| {
                        format!("--keys wants a whole number from 1 to 64, not {value:?}")
                    })?;
            }
            "--ttl" => {
                hold.ttl = parse_duration(&value)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| format!("--ttl wants a duration like 3s, not {value:?}"))?;
            }
            "--hold" => {
                hold.hold = parse_duration(&value)
                    .ok()
                    .ok_or_else(|| format!("--hold wants a duration like 10s, not {value:?}"))?;
            }
            "--threads" => {
                threads = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n >= 1)
                    .ok_or_else(|| format!("--threads wants a whole number >= 1, not {value:?}"))?;
            }
            "--seconds" => {
                duration = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| format!("--seconds wants a number above 0, not {value:?}"))?;
            }
            _ => {
                scenarios = value
                    .split(',')
                    .map(|name| {
                        Scenario::from_name(name.trim())
                            .ok_or_else(|| format!("unknown scenario {name:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
        }
    }
    let url = url
        .or_else(|| std::env::var("SYNCGUARD_URL").ok())
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| "memory:".to_owned());
    Ok(Command::Run(Args {
        url,
        threads,
        duration,
        scenarios,
        hold,
        permits,
        line,
        waiters,
        keys,
        rounds,
        syncguard,
    }))
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a run stopped.
#[derive(Debug)]
enum BenchError {
    /// A lock operation failed.
    Lock(LockError),
    /// The backend answered something the scenario rules out (a lock held by nobody else
    /// reported busy, a held lease reported gone, …).
    Unexpected(String),
}

impl From<LockError> for BenchError {
    fn from(error: LockError) -> Self {
        BenchError::Lock(error)
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `Code: message`.
            BenchError::Lock(error) => write!(f, "{error}"),
            BenchError::Unexpected(message) => f.write_str(message),
        }
    }
}

fn unexpected(message: impl Into<String>) -> BenchError {
    BenchError::Unexpected(message.into())
}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

/// The JSON line of a timed scenario. Field order is the output order.
#[derive(Serialize)]
struct TimedReport {
    backend: &'static str,
    scenario: &'static str,
    threads: usize,
    ops: usize,
    ops_per_s: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    /// The semaphore's size, for the `semaphore` scenario only.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    /// Whether the waiters waited in line, for the scenarios that wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<bool>,
    /// The waiters lined up, for `handoff`.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters: Option<usize>,
    /// The keys held together, for `multi`.
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<usize>,
}

// ---------------------------------------------------------------------------------------------
// Timed scenarios
// ---------------------------------------------------------------------------------------------

/// The locker every scenario goes through; `locker.backend()` gives the raw backend.
type BenchLocker = Locker<Box<dyn LockBackend>>;

/// What the scenario threads share.
struct Ctx {
    locker: BenchLocker,
    /// Another locker on its own connections (the same store for `memory:`), for `handoff`.
    other: BenchLocker,
    /// Renewals the heartbeat made, and the batch renewal calls that made them.
    renewals: Arc<AtomicUsize>,
    renewal_requests: Arc<AtomicUsize>,
    /// Random per run, so that runs against a shared server never share a key.
    run_id: String,
    duration: Duration,
    /// The `semaphore` scenario's semaphore size.
    permits: u32,
    /// Whether waiters wait in line.
    line: bool,
    /// The `handoff` scenario's waiters.
    waiters: usize,
    /// The `multi` scenario's keys per set.
    keys: usize,
}

impl Ctx {
    fn backend(&self) -> &dyn LockBackend {
        self.locker.backend().as_ref()
    }

    /// The `n`th key of `scenario` in this run.
    fn key(&self, scenario: Scenario, n: usize) -> String {
        format!("syncguard-bench:{}:{}:{n}", self.run_id, scenario.name())
    }
}

/// One thread's latencies (ns per operation, which keeps in-process backends readable) and how
/// long its timed loop ran.
struct Samples {
    nanos: Vec<u64>,
    elapsed: Duration,
}

/// Runs `op` back to back for `duration`, timing each call.
fn timed_loop(
    duration: Duration,
    mut op: impl FnMut() -> Result<(), BenchError>,
) -> Result<Samples, BenchError> {
    let mut nanos = Vec::with_capacity(1 << 16);
    let start = Instant::now();
    let deadline = start + duration;
    let mut before = start;
    while before < deadline {
        op()?;
        let after = Instant::now();
        let took = after.duration_since(before).as_nanos();
        nanos.push(u64::try_from(took).unwrap_or(u64::MAX));
        before = after;
    }
    Ok(Samples {
        nanos,
        elapsed: start.elapsed(),
    })
}

/// Runs `op` back to back for `duration`; each call returns how long the part of it that is
/// measured took (the acquisition, when the release that follows is not to be counted).
fn timed_part_loop(
    duration: Duration,
    mut op: impl FnMut() -> Result<Duration, BenchError>,
) -> Result<Samples, BenchError> {
    let mut nanos = Vec::with_capacity(1 << 16);
    let start = Instant::now();
    let deadline = start + duration;
    while Instant::now() < deadline {
        let took = op()?.as_nanos();
        nanos.push(u64::try_from(took).unwrap_or(u64::MAX));
    }
    Ok(Samples {
        nanos,
        elapsed: start.elapsed(),
    })
}

/// Acquires `key`, which nobody else uses, with the raw backend.
fn acquire_own(backend: &dyn LockBackend, key: &str) -> Result<Lease, BenchError> {
    match backend.acquire(key, TTL)? {
        AcquireOutcome::Acquired(lease) => Ok(lease),
        AcquireOutcome::Locked => Err(unexpected(format!(
            "{key} was reported locked, but only this thread uses it"
        ))),
    }
}

/// Releases a lease this thread holds, expecting it to be there.
fn release_own(backend: &dyn LockBackend, lease: &Lease) -> Result<(), BenchError> {
    if backend.release(&lease.lock_id)? {
        Ok(())
    } else {
        Err(unexpected("a held lock was already gone when released"))
    }
}

/// Releases a guard, expecting it to still hold its lock. The same path as dropping it, but
/// a failure is reported instead of logged.
fn release_guard(guard: syncguard::LockGuard) -> Result<(), BenchError> {
    if guard.release()? {
        Ok(())
    } else {
        Err(unexpected("a guard's lock was already gone when released"))
    }
}

/// Runs `op` for the configured time on one held lease of this thread, then releases it.
/// Threads take their lease before `start` and begin timing together.
fn with_held_lease(
    ctx: &Ctx,
    scenario: Scenario,
    thread: usize,
    start: &Barrier,
    mut op: impl FnMut(&dyn LockBackend, &str, &Lease) -> Result<(), BenchError>,
) -> Result<Samples, BenchError> {
    let backend = ctx.backend();
    let key = ctx.key(scenario, thread);
    let lease = acquire_own(backend, &key);
    start.wait();
    let lease = lease?;
    let result = timed_loop(ctx.duration, || op(backend, &key, &lease));
    let released = release_own(backend, &lease);
    let samples = result?;
    released?;
    Ok(samples)
}

/// How the contended scenarios wait: retry often, for as long as a loaded machine may need, in
/// line or not.
fn contended_options(line: bool) -> LockOptions {
    LockOptions::default()
        .wait_in_line(line)
        .retry_delay(Duration::from_millis(1))
        .timeout(Duration::from_secs(60))
        .max_retries(u32::MAX)
}

/// The body of one thread of a timed scenario. Every path calls `start.wait()` exactly once.
fn scenario_thread(
    ctx: &Ctx,
    scenario: Scenario,
    thread: usize,
    start: &Barrier,
) -> Result<Samples, BenchError> {
    let backend = ctx.backend();
    match scenario {
        Scenario::Cycle => {
            let key = ctx.key(scenario, thread);
            start.wait();
            timed_loop(ctx.duration, || {
                let lease = acquire_own(backend, &key)?;
                release_own(backend, &lease)
            })
        }
        Scenario::Guard => {
            let key = ctx.key(scenario, thread);
            start.wait();
            timed_loop(ctx.duration, || release_guard(ctx.locker.lock(&key)?))
        }
        Scenario::Contended => {
            let key = ctx.key(scenario, 0);
            let options = contended_options(ctx.line);
            start.wait();
            timed_loop(ctx.duration, || {
                release_guard(ctx.locker.lock_with(&key, &options)?)
            })
        }
        Scenario::Shared => {
            let rw = ctx.locker.rw_lock(&ctx.key(scenario, 0));
            let options = contended_options(ctx.line);
            start.wait();
            let rw = rw?;
            let mut n = thread;
            timed_loop(ctx.duration, || {
                n += 1;
                // One hold in ten is a writer's, spread over the threads.
                let guard = if n.is_multiple_of(SHARED_WRITER_EVERY) {
                    rw.write_with(&options)?
                } else {
                    rw.read_with(&options)?
                };
                release_guard(guard)
            })
        }
        Scenario::Semaphore => {
            let semaphore = ctx.locker.semaphore(&ctx.key(scenario, 0), ctx.permits);
            let options = contended_options(ctx.line);
            start.wait();
            let semaphore = semaphore?;
            timed_part_loop(ctx.duration, || {
                let before = Instant::now();
                let permit = semaphore.acquire_with(&options)?;
                let took = before.elapsed();
                release_guard(permit)?;
                Ok(took)
            })
        }
        Scenario::Extend => {
            let key = ctx.key(scenario, thread);
            let guard = ctx.locker.lock(&key);
            start.wait();
            let guard = guard?;
            let result = timed_loop(ctx.duration, || {
                if guard.extend(TTL)? {
                    Ok(())
                } else {
                    Err(unexpected("a held guard's lock was gone when extended"))
                }
            });
            let released = release_guard(guard);
            let samples = result?;
            released?;
            Ok(samples)
        }
        Scenario::Multi => {
            // Each thread its own keys: one set acquisition and its release per operation.
            let keys: Vec<String> = (0..ctx.keys)
                .map(|n| ctx.key(scenario, thread * ctx.keys + n))
                .collect();
            start.wait();
            timed_part_loop(ctx.duration, || {
                let before = Instant::now();
                let all = ctx.locker.lock_all(&keys)?;
                let took = before.elapsed();
                if all.release()? {
                    Ok(took)
                } else {
                    Err(unexpected("a set's locks were gone when released"))
                }
            })
        }
        Scenario::Lookup => {
            with_held_lease(
                ctx,
                scenario,
                thread,
                start,
                |backend, key, _| match backend.lookup(Lookup::Key(key))? {
                    Some(_) => Ok(()),
                    None => Err(unexpected("a held lock was not found by key")),
                },
            )
        }
        Scenario::Hold | Scenario::Handoff | Scenario::LineLoad | Scenario::ProcessHandoff => {
            start.wait();
            Err(unexpected("not a timed scenario"))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The handoff scenario
// ---------------------------------------------------------------------------------------------

/// For `--seconds`: `--waiters` waiters on the other locker block in `lock`, each once the one
/// before is in line (or, with `--line off`, once started); the holder releases, and each waiter
/// releases as soon as it holds the lock. One sample is the time from a release to the next
/// holder holding the lock: `--waiters` samples a round.
fn run_handoff(ctx: &Ctx) -> Result<TimedReport, BenchError> {
    let mut nanos = Vec::new();
    let start = Instant::now();
    let mut round = 0;
    let options = LockOptions::default().wait_in_line(ctx.line);
    while start.elapsed() < ctx.duration {
        let key = ctx.key(Scenario::Handoff, round);
        round += 1;
        let held = ctx.locker.lock(&key)?;
        // When the lock was last released, for the next holder's sample.
        let released: Mutex<Option<Instant>> = Mutex::new(None);
        let samples: Mutex<Vec<u64>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            let mut waiters = Vec::new();
            for n in 0..ctx.waiters {
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let (key, options, released, samples) = (&key, &options, &released, &samples);
                waiters.push(scope.spawn(move || {
                    let _ = ready_tx.send(());
                    let guard = ctx.other.lock_with(key, options)?;
                    let acquired = Instant::now();
                    let mut last = released.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(released) = *last {
                        let waited = acquired.saturating_duration_since(released);
                        samples
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX));
                    }
                    *last = Some(Instant::now());
                    drop(last);
                    release_guard(guard)
                }));
                let _ = ready_rx.recv();
                let in_line = |count: usize| {
                    ctx.backend()
                        .waiters(key, LeaseKind::Lock)
                        .map(|line| line.len() > count)
                        .unwrap_or(true)
                };
                // Long enough for the waiter to find the lock held and start waiting.
                let began = Instant::now();
                while ctx.line && !in_line(n) && began.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if !ctx.line {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            *released.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            release_guard(held)?;
            for waiter in waiters {
                waiter
                    .join()
                    .unwrap_or_else(|_| Err(unexpected("a waiter panicked")))?;
            }
            Ok::<_, BenchError>(())
        })?;
        nanos.extend(samples.into_inner().unwrap_or_else(PoisonError::into_inner));
    }
    nanos.sort_unstable();
    let ops = nanos.len();
    Ok(TimedReport {
        backend: ctx.backend().capabilities().backend,
        scenario: Scenario::Handoff.name(),
        threads: ctx.waiters + 1,
        ops,
        ops_per_s: (ops as f64 / start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        p50_us: percentile_us(&nanos, 0.50),
        p99_us: percentile_us(&nanos, 0.99),
        permits: None,
        line: Some(ctx.line),
        waiters: Some(ctx.waiters),
        keys: None,
    })
}

/// Runs a timed scenario on `threads` threads and summarises it.
fn run_timed(ctx: &Ctx, scenario: Scenario, threads: usize) -> Result<TimedReport, BenchError> {
    let start = Barrier::new(threads);
    let results: Vec<Result<Samples, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let start = &start;
                scope.spawn(move || scenario_thread(ctx, scenario, thread, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(unexpected("a benchmark thread panicked")))
            })
            .collect()
    });
    let mut nanos = Vec::new();
    let mut elapsed = Duration::ZERO;
    for result in results {
        let samples = result?;
        nanos.extend_from_slice(&samples.nanos);
        elapsed = elapsed.max(samples.elapsed);
    }
    nanos.sort_unstable();
    let ops = nanos.len();
    let ops_per_s = if elapsed.is_zero() {
        0.0
    } else {
        (ops as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0
    };
    Ok(TimedReport {
        backend: ctx.backend().capabilities().backend,
        scenario: scenario.name(),
        threads,
        ops,
        ops_per_s,
        p50_us: percentile_us(&nanos, 0.50),
        p99_us: percentile_us(&nanos, 0.99),
        permits: (scenario == Scenario::Semaphore).then_some(ctx.permits),
        line: matches!(
            scenario,
            Scenario::Contended | Scenario::Semaphore | Scenario::Shared
        )
        .then_some(ctx.line),
        waiters: None,
        keys: (scenario == Scenario::Multi).then_some(ctx.keys),
    })
}

/// The nearest-rank percentile `p` (in `0..=1`) of sorted nanosecond samples, in µs to one
/// decimal; `None` when empty.
fn percentile_us(sorted: &[u64], p: f64) -> Option<f64> {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    let nanos = sorted.get(rank.saturating_sub(1)).copied()?;
    Some((nanos as f64 / 100.0).round() / 10.0)
}

// ---------------------------------------------------------------------------------------------
// Counting renewals
// ---------------------------------------------------------------------------------------------

/// The backend under test, counting the renewals that succeed (cheaper than telemetry, which
/// hashes every key) and the batch renewal calls.
struct CountingRenewals {
    inner: Box<dyn LockBackend>,
    renewals: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl CountingRenewals {
    fn count(&self, answers: &[syncguard::Result<Outcome<Extension>>]) {
        let applied = answers
            .iter()
            .filter(|answer| matches!(answer, Ok(Outcome::Applied(_))))
            .count();
        self.renewals.fetch_add(applied, Ordering::Relaxed);
    }
}

impl Driver for CountingRenewals {
    fn extend_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<syncguard::Result<Outcome<Extension>>> {
        let answers = self.inner.extend_leases(leases);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.count(&answers);
        answers
    }

    syncguard::delegate_driver!(self, &self.inner; describe, try_acquire, release_lease, key_is_locked, find, list_records, find_line, leave_line, break_leases, watch_releases);
}

// ---------------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------------

/// Connects and runs the chosen scenarios, printing a line after each.
fn run(args: &Args) -> Result<(), BenchError> {
    let renewals = Arc::new(AtomicUsize::new(0));
    let renewal_requests = Arc::new(AtomicUsize::new(0));
    let backend: Box<dyn LockBackend> = Box::new(CountingRenewals {
        inner: syncguard::connect(&args.url)?,
        renewals: Arc::clone(&renewals),
        requests: Arc::clone(&renewal_requests),
    });
    let memory = backend.capabilities().backend == "memory";
    let locker = Locker::new(backend);
    let other = if memory {
        // `memory:` opens a new, separate store each time: wait on the same one.
        locker.clone()
    } else {
        Locker::new(syncguard::connect(&args.url)?)
    };
    let ctx = Ctx {
        locker,
        other,
        renewals,
        renewal_requests,
        run_id: syncguard::driver::generate_lock_id(),
        duration: args.duration,
        permits: args.permits,
        line: args.line,
        waiters: args.waiters,
        keys: args.keys,
    };
    for &scenario in &args.scenarios {
        let line = match scenario {
            Scenario::Hold => serde_json::to_string(&run_hold(&ctx, args.hold, args.threads)?),
            Scenario::Handoff => serde_json::to_string(&run_handoff(&ctx)?),
            Scenario::LineLoad => serde_json::to_string(&line_load::run(
                &ctx.locker,
                syncguard::connect(&args.url)?,
                &ctx.key(scenario, 0),
                args.waiters,
                args.line,
                args.duration,
            )?),
            Scenario::ProcessHandoff => {
                let syncguard = (args.syncguard.clone())
                    .or_else(process_handoff::default_syncguard)
                    .ok_or_else(|| unexpected("where is syncguard? give --syncguard"))?;
                let plan = process_handoff::Plan {
                    url: &args.url,
                    syncguard: &syncguard,
                    key_prefix: &ctx.key(scenario, 0),
                    rounds: args.rounds,
                    line: args.line,
                };
                let backend = ctx.backend().capabilities().backend.to_owned();
                serde_json::to_string(&process_handoff::run(&plan, backend).map_err(unexpected)?)
            }
            timed => serde_json::to_string(&run_timed(&ctx, timed, args.threads)?),
        }
        .map_err(|e| unexpected(format!("could not encode the report: {e}")))?;
        // Written line by line, so a reader sees each scenario as soon as it ends.
        writeln!(std::io::stdout(), "{line}")
            .map_err(|e| unexpected(format!("could not write to stdout: {e}")))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    #[cfg(feature = "metrics")]
    if std::env::var_os("SYNCGUARD_BENCH_RECORDER").is_some_and(|v| v == "1") {
        recorder::install();
    }
    // The command `process-handoff`'s `syncguard run`s start: this program again.
    if std::env::args().nth(1).as_deref() == Some("--stamp") {
        return process_handoff::stamp(std::env::args().skip(2));
    }
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(args)) => args,
        Ok(Command::Help) => {
            // A closed pipe (`bench --help | head`) is not worth a panic.
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n(try --help)");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(3)
        }
    }
}
