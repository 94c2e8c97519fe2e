//! The `process-handoff` scenario: a lock handed from one `syncguard run` to a waiting
//! `syncguard run --wait` — two processes, as cron jobs hand it on.
//!
//! Each round, a holder `syncguard run --key K -- bench --stamp D FILE` holds the key for a
//! random 0.6–4 s (its command sleeps that long, then writes the time as its last act), and a
//! waiter `syncguard run --wait 60s --key K -- bench --stamp 0 FILE` is started once the
//! holder's command runs (its command writes the time as its first act). One sample is the
//! waiter's command start minus the holder's command end (the wall clock, one machine). With
//! `--line off` both pass `--no-line` (they barge); the CLI must have it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::RngExt as _;
use serde::Serialize;

/// The shortest and longest a holder holds the lock, in milliseconds.
const HOLD_MS: (u64, u64) = (600, 4_000);

/// How long the waiter may wait, as `run --wait` is given it.
const WAIT: &str = "60s";

/// The longest a round waits for the holder's command to start.
const HOLDER_START: Duration = Duration::from_secs(30);

/// What the scenario is asked for.
pub struct Plan<'a> {
    pub url: &'a str,
    /// The `syncguard` binary.
    pub syncguard: &'a Path,
    /// Keys are `<prefix><round>`.
    pub key_prefix: &'a str,
    pub rounds: usize,
    pub line: bool,
}

/// The scenario's JSON line.
#[derive(Serialize)]
pub struct Report {
    backend: String,
    scenario: &'static str,
    line: bool,
    rounds: usize,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    min_ms: Option<f64>,
    max_ms: Option<f64>,
    /// Every sample, in round order.
    samples_ms: Vec<f64>,
}

/// The `syncguard` beside this program (`target/release/examples/bench` →
/// `target/release/syncguard`).
pub fn default_syncguard() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("syncguard"))
}

/// `bench --stamp MS FILE`, the command the scenario's `run`s start: writes the wall clock
/// (ns since the epoch) to `FILE.start` at once, sleeps `MS` ms, then writes it to `FILE` as
/// its last act.
pub fn stamp(mut argv: impl Iterator<Item = String>) -> ExitCode {
    let (Some(ms), Some(file)) = (argv.next(), argv.next()) else {
        eprintln!("error: --stamp wants MS FILE");
        return ExitCode::from(2);
    };
    let Ok(ms) = ms.parse::<u64>() else {
        eprintln!("error: --stamp wants milliseconds, not {ms:?}");
        return ExitCode::from(2);
    };
    if ms == 0 {
        return write_now(Path::new(&file));
    }
    let started = write_now(&PathBuf::from(format!("{file}.start")));
    std::thread::sleep(Duration::from_millis(ms));
    match write_now(Path::new(&file)) {
        code if code == ExitCode::SUCCESS => started,
        code => code,
    }
}

fn write_now(file: &Path) -> ExitCode {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    match std::fs::write(file, now.to_string()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: could not write {}: {error}", file.display());
            ExitCode::from(3)
        }
    }
}

fn read_stamp(file: &Path) -> Result<i128, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("could not read {}: {e}", file.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{} holds no time: {e}", file.display()))
}

/// Runs the rounds; `Err` with what went wrong.
pub fn run(plan: &Plan<'_>, backend: String) -> Result<Report, String> {
    let bench = std::env::current_exe().map_err(|e| format!("where is bench? {e}"))?;
    let dir =
        std::env::temp_dir().join(format!("syncguard-process-handoff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("could not create {dir:?}: {e}"))?;
    let mut samples_ms = Vec::with_capacity(plan.rounds);
    for round in 0..plan.rounds {
        let sample = one_round(plan, &bench, &dir, round);
        samples_ms.push(sample?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut sorted = samples_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| {
        (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
    };
    Ok(Report {
        backend,
        scenario: "process-handoff",
        line: plan.line,
        rounds: plan.rounds,
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        min_ms: sorted.first().copied(),
        max_ms: sorted.last().copied(),
        samples_ms,
    })
}

/// One holder, one waiter: the waiter's start minus the holder's end, in ms.
fn one_round(plan: &Plan<'_>, bench: &Path, dir: &Path, round: usize) -> Result<f64, String> {
    let key = format!("{}{round}", plan.key_prefix);
    let (ended, began) = (
        dir.join(format!("end-{round}")),
        dir.join(format!("begin-{round}")),
    );
    let hold_ms = rand::rng().random_range(HOLD_MS.0..=HOLD_MS.1);
    let mut holder = spawn_run(plan, &key, None, bench, hold_ms, &ended)?;
    let holding = PathBuf::from(format!("{}.start", ended.display()));
    let asked = Instant::now();
    while !holding.exists() {
        if asked.elapsed() > HOLDER_START {
            let _ = holder.kill();
            return Err(format!("the holder of {key} did not start its command"));
        }
        if let Ok(Some(status)) = holder.try_wait() {
            return Err(format!("the holder of {key} ended first: {status}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let waiter = spawn_run(plan, &key, Some(WAIT), bench, 0, &began)?;
    for (who, child) in [("holder", holder), ("waiter", waiter)] {
        let output = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the {who} failed: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "the {who} of {key} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    let gap_ns = read_stamp(&began)? - read_stamp(&ended)?;
    Ok((gap_ns as f64 / 1e4).round() / 100.0)
}

/// `syncguard run [--wait W] [--no-line] --url U --key K -- bench --stamp MS FILE`.
fn spawn_run(
    plan: &Plan<'_>,
    key: &str,
    wait: Option<&str>,
    bench: &Path,
    stamp_ms: u64,
    file: &Path,
) -> Result<Child, String> {
    let mut command = Command::new(plan.syncguard);
    command
        .arg("run")
        .arg("--url")
        .arg(plan.url)
        .arg("--key")
        .arg(key);
    if let Some(wait) = wait {
        command.arg("--wait").arg(wait);
    }
    if !plan.line {
        command.arg("--no-line");
    }
    command
        .arg("--")
        .arg(bench)
        .arg("--stamp")
        .arg(stamp_ms.to_string())
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", plan.syncguard.display()))
}
