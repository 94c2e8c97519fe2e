//! Leader election across processes, audited from their logs: three processes campaign on one
//! name through `examples/leader.rs` (its `lead`, compiled in here, so the children run exactly
//! what the example does). The leader is killed (SIGKILL), then the next is stopped (SIGSTOP);
//! each time another is elected. From the logs: the terms only grow, and no two leaders'
//! work — from its `start` line to its last `tick` — ran at once.
//!
//! The children are this test binary again, each running the ignored test [`campaigner`]. The
//! takeover times (signal → next `start`) are printed on stderr, never asserted: measure them
//! with `cargo test --all-features --test it leaders:: -- --nocapture`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::child::{self, test_name};
use crate::support::{scratch_dir, shared_postgres_with_tables, shared_redis};
use syncguard::testing::support::{unique_key, wait_until};

// Its `main` is the example's own; the children call its `lead`.
#[allow(dead_code)]
#[path = "../../examples/leader.rs"]
mod leader_example;

const ENV_URL: &str = "SYNCGUARD_LEADER_URL";
const ENV_NAME: &str = "SYNCGUARD_LEADER_NAME";
const ENV_VALUE: &str = "SYNCGUARD_LEADER_VALUE";
const ENV_LOG: &str = "SYNCGUARD_LEADER_LOG";

/// How long the test waits for any step: far above the 3 s lease the example takes.
const PATIENCE: Duration = Duration::from_secs(60);

/// A campaigner: leads the name it is given, logging to its file, until it is killed. Does
/// nothing in a normal run (no environment).
#[test]
#[ignore = "a child process of the leaders tests"]
fn campaigner() {
    let (Ok(url), Ok(name), Ok(value), Ok(log)) = (
        std::env::var(ENV_URL),
        std::env::var(ENV_NAME),
        std::env::var(ENV_VALUE),
        std::env::var(ENV_LOG),
    ) else {
        return;
    };
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("the campaigner's log");
    let locker = leader_example::campaigner(syncguard::connect(&url).expect("connect"));
    leader_example::lead(&locker, &name, &value, &mut log).expect("lead");
}

#[test]
fn on_redis() {
    a_killed_and_a_stopped_leader_are_succeeded(&shared_redis().url());
}

#[test]
fn on_postgres() {
    a_killed_and_a_stopped_leader_are_succeeded(&shared_postgres_with_tables().url());
}

/// One line of a campaigner's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    at_ms: u128,
    start: bool,
    term: u64,
}

/// A campaigner process and its log.
struct Campaigner {
    process: Child,
    log: PathBuf,
}

impl Campaigner {
    fn start(url: &str, name: &str, index: usize, dir: &Path) -> Campaigner {
        let log = dir.join(format!("campaigner-{index}.log"));
        let output = File::create(dir.join(format!("campaigner-{index}.out"))).expect("a file");
        let process = child::one_test(test_name!(campaigner))
            .env(ENV_URL, url)
            .env(ENV_NAME, name)
            .env(ENV_VALUE, format!("campaigner-{index}"))
            .env(ENV_LOG, &log)
            .stdout(Stdio::null())
            .stderr(output)
            .spawn()
            .expect("start a campaigner");
        Campaigner { process, log }
    }

    /// Its `start` and `tick` lines so far (`stop` lines end no interval: a stopped process's
    /// work ends at its last line).
    fn events(&self) -> Vec<Event> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            // A line being written as the file is read has no newline yet: skipped.
            .filter(|line| !line.is_empty())
            .filter_map(|line| {
                let mut words = line.split(' ');
                let at_ms = words.next()?.parse().ok()?;
                let start = match words.next()? {
                    "start" => true,
                    "tick" => false,
                    _ => return None,
                };
                let term = words.next()?.strip_prefix("term=")?.parse().ok()?;
                Some(Event { at_ms, start, term })
            })
            .collect()
    }

    /// The term it was last elected in.
    fn last_term(&self) -> Option<u64> {
        self.events().iter().rev().find(|e| e.start).map(|e| e.term)
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.process.id().to_string())
            .status()
            .is_ok_and(|status| status.success());
        assert!(sent, "kill -{name} {}", self.process.id());
    }
}

impl Drop for Campaigner {
    fn drop(&mut self) {
        // A stopped process dies of SIGKILL all the same.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The campaigner leading now: the one elected last, with a term above `above`, once it has
/// ticked.
fn leader_above(campaigners: &[Campaigner], above: u64) -> usize {
    let mut found = None;
    wait_until(
        &format!("a leader with a term above {above}"),
        PATIENCE,
        || {
            found = campaigners
                .iter()
                .position(|c| c.events().iter().any(|e| e.term > above && !e.start));
            found.is_some()
        },
    );
    found.unwrap_or_default()
}

fn a_killed_and_a_stopped_leader_are_succeeded(url: &str) {
    let dir = scratch_dir("leaders");
    let name = unique_key("leaders");
    let mut campaigners: Vec<Campaigner> = (0..3)
        .map(|i| Campaigner::start(url, &name, i, &dir))
        .collect();

    let first = leader_above(&campaigners, 0);
    let first_term = campaigners[first].last_term().unwrap_or_default();
    let killed_at = unix_ms();
    campaigners[first]
        .process
        .kill()
        .expect("SIGKILL the leader");
    let _ = campaigners[first].process.wait();

    let second = leader_above(&campaigners, first_term);
    let second_term = campaigners[second].last_term().unwrap_or_default();
    let stopped_at = unix_ms();
    campaigners[second].signal("STOP");

    let third = leader_above(&campaigners, second_term);
    assert!(
        first != second && second != third && third != first,
        "three leaders in turn: {first}, {second}, {third}"
    );
    let takeovers = [
        ("SIGKILL", killed_at, second, second_term),
        (
            "SIGSTOP",
            stopped_at,
            third,
            campaigners[third].last_term().unwrap_or_default(),
        ),
    ];
    for (signal, sent_at, next, term) in takeovers {
        let elected = (campaigners[next].events().iter())
            .find(|e| e.start && e.term == term)
            .map_or(0, |e| e.at_ms);
        eprintln!(
            "leaders ({url}): after {signal}, campaigner {next} started term {term} {} ms later",
            elected.saturating_sub(sent_at)
        );
    }

    // Every process stops before the audit: the logs are final.
    let logs: Vec<Vec<Event>> = campaigners
        .drain(..)
        .map(|campaigner| {
            let events = campaigner.events();
            drop(campaigner);
            events
        })
        .collect();
    audit(&logs);
}

/// Terms only grow in the order the leaders started, and each leader's work (its `start` to
/// its last `tick` in that term) ended before the next one started.
fn audit(logs: &[Vec<Event>]) {
    // (term) → (campaigner, start, last line)
    let mut terms: BTreeMap<u64, (usize, u128, u128)> = BTreeMap::new();
    for (campaigner, events) in logs.iter().enumerate() {
        for event in events {
            let entry = terms
                .entry(event.term)
                .or_insert((campaigner, event.at_ms, event.at_ms));
            assert_eq!(entry.0, campaigner, "term {} led twice", event.term);
            if event.start {
                entry.1 = event.at_ms;
            }
            entry.2 = entry.2.max(event.at_ms);
        }
    }
    assert!(terms.len() >= 3, "three terms at least: {terms:?}");
    let led: Vec<_> = terms.iter().collect();
    for pair in led.windows(2) {
        let ((term, (was, _, ended)), (next_term, (next, started, _))) = (pair[0], pair[1]);
        assert!(
            ended < started,
            "campaigner {was}'s term {term} was still working at {ended} when campaigner \
             {next}'s term {next_term} started at {started}"
        );
    }
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}
