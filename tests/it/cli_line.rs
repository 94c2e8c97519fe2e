//! `syncguard run --wait` waiters are served in the order they arrived, on every store and
//! topology, a waiter killed in line is skipped once its place lapses, and `status` shows the
//! line meanwhile (issue 33).
//!
//! Each waiter starts once `status` shows the one before in line (no guessed sleeps); a job
//! appends its number to a log, so the log's order is the order the lock was granted in. The
//! delay the dead waiter caused is printed (`--nocapture`), never asserted: the waits are
//! generous and only the order is checked.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::cli::{Scratch, read, wait_for};
use crate::cli_store::Store;
use crate::support;

/// Waiters that run their job (the seventh, killed in line, never does).
const WAITERS: usize = 6;
/// The live waiter the dead one is started after.
const DEAD_AFTER: usize = 2;

/// A started waiter, killed if the test ends before it did (a failed assertion must not leave
/// commands behind that outlive the servers).
struct Waiter(Child);

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `run --wait` whose job appends `label` and the time (ns) to `log`.
fn start_waiter(store: &Store, key: &str, log: &Path, label: &str) -> Waiter {
    let job = r#"echo "$1 $(date +%s%N)" >> "$2""#;
    let log = log.to_string_lossy();
    store
        .command(&[
            "run", "--key", key, "--wait", "2m", "--", "sh", "-c", job, "sh", label, &log,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(Waiter)
        .expect("start a waiter")
}

fn waiters_run_in_arrival_order(store: &Store) {
    let scratch = Scratch::new("line");
    let key = support::unique("line-order");
    let log = scratch.path("log");
    let (code, out) = store.output(&["acquire", "--key", &key, "--ttl", "2m"]);
    assert_eq!(code, 0, "acquire: {out}");
    let acquired: Json = serde_json::from_str(out.trim()).expect("acquire prints JSON");
    let lock_id = acquired["lockId"].as_str().expect("a lock id").to_owned();

    let mut live: Vec<(String, Waiter)> = Vec::new();
    let mut in_line: Vec<u32> = Vec::new();
    let mut dead = None;
    for _ in 0..=WAITERS {
        let label = if live.len() == DEAD_AFTER && dead.is_none() {
            "dead".to_owned()
        } else {
            live.len().to_string()
        };
        let waiter = start_waiter(store, &key, &log, &label);
        let pid = waiter.0.id();
        wait_for(&format!("waiter {label} in line"), || {
            store.waiting_pids(&key).contains(&pid)
        });
        in_line.push(pid);
        if label == "dead" {
            let mut waiter = waiter;
            let killed = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .expect("run kill");
            assert!(killed.success());
            let _ = waiter.0.wait();
            dead = Some(pid);
        } else {
            live.push((label, waiter));
        }
    }
    // The line, meanwhile, in arrival order (the dead place shown while it is live).
    let shown = store.waiting_pids(&key);
    let expected: Vec<u32> = in_line
        .iter()
        .copied()
        .filter(|pid| shown.contains(pid))
        .collect();
    assert_eq!(shown, expected, "status shows the line in arrival order");
    assert!(
        shown.len() >= WAITERS,
        "every live waiter is in line: {shown:?}"
    );

    let released = Instant::now();
    let (code, out) = store.output(&["release", "--lock-id", &lock_id]);
    assert_eq!(code, 0, "release: {out}");
    for (label, mut waiter) in live {
        let deadline = Instant::now() + Duration::from_secs(150);
        let status = loop {
            if let Some(status) = waiter.0.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "waiter {label} never ended");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "waiter {label}");
    }
    let ran = read(&log);
    let order: Vec<&str> = ran.lines().filter_map(|l| l.split(' ').next()).collect();
    let expected: Vec<String> = (0..WAITERS).map(|n| n.to_string()).collect();
    assert_eq!(order, expected, "the jobs ran in arrival order:\n{ran}");
    let at = |n: usize| -> u128 {
        ran.lines()
            .nth(n)
            .and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    eprintln!(
        "line on {}: {WAITERS} waiters in order; the waiter killed in line (pid {dead:?}) held \
         the next one back {:.2} s; all done {:.2} s after the release",
        store.url.split('@').next_back().unwrap_or_default(),
        (at(DEAD_AFTER) as f64 - at(DEAD_AFTER - 1) as f64) / 1e9,
        released.elapsed().as_secs_f64(),
    );
    assert!(store.waiting_pids(&key).is_empty(), "nobody left in line");
}

on_every_store!(waiters_run_in_arrival_order);
