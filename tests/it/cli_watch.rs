//! `syncguard watch` on every store: it follows 200 acquisitions and releases made by the
//! library in this process, printing one JSON line per state it sees, every state one that
//! happened, in order, up to the final holder and its release; SIGTERM and SIGINT end it with
//! exit 0; `--until-free` exits 0 at the first free state.
//!
//! Nothing is timed: each line is awaited with a generous deadline, and only what the lines say
//! and their order are checked.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use syncguard::{Lease, LockBackend};

use crate::cli_store::Store;
use crate::support;

/// How many times the library takes and gives back the key while `watch` follows it.
const CYCLES: usize = 200;

/// How long one awaited line may take before the test fails: generous, for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A running `syncguard watch` and the lines it printed so far.
struct Watching {
    child: Child,
    lines: Receiver<Json>,
}

impl Watching {
    fn start(store: &Store, args: &[&str]) -> Watching {
        let mut child = store
            .command(&[&["watch"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start syncguard watch");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let parsed = serde_json::from_str(&line)
                    .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
                if sender.send(parsed).is_err() {
                    break;
                }
            }
        });
        Watching { child, lines }
    }

    /// The next line, failing the test when none comes within [`PATIENCE`].
    fn next(&self, what: &str) -> Json {
        self.lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|error| panic!("{what}: no line from watch ({error})"))
    }

    /// Sends `signal` and answers the exit code.
    fn stop(mut self, signal: libc::c_int) -> Option<i32> {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child, which has not been waited for yet.
        unsafe { libc::kill(pid, signal) };
        self.exit_code()
    }

    /// Waits for the command's end (at most [`PATIENCE`]) and answers its exit code.
    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "watch did not end");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The library's backend for the store the command uses.
fn library(store: &Store) -> Box<dyn LockBackend> {
    if store.url.starts_with("firestore:") {
        Box::new(support::shared_firestore_backend())
    } else {
        syncguard::connect(&store.url).expect("connect the library")
    }
}

fn acquired(backend: &dyn LockBackend, key: &str) -> Lease {
    backend
        .acquire(key, Duration::from_secs(60))
        .expect("acquire")
        .lease()
        .expect("the key is free")
}

/// The fence of a `held` line with one holder.
fn held_fence(line: &Json) -> Option<&str> {
    (line["state"] == "held")
        .then(|| line["holders"].as_array())
        .flatten()
        .filter(|holders| holders.len() == 1)
        .and_then(|holders| holders[0]["fence"].as_str())
}

fn follows_a_stream_of_acquisitions_and_releases(store: &Store) {
    let key = support::unique("cli-watch-stream");
    let backend = library(store);
    let watching = Watching::start(store, &["--key", &key]);
    assert_eq!(
        watching.next("the first state"),
        serde_json::json!({"state": "free"})
    );
    let mut granted = Vec::new();
    for _ in 0..CYCLES {
        let lease = acquired(backend.as_ref(), &key);
        granted.push(lease.fence.to_string());
        assert!(backend.release(&lease.lock_id).expect("release"));
    }
    let last = acquired(backend.as_ref(), &key);
    let last_fence = last.fence.to_string();
    granted.push(last_fence.clone());
    let mut lines = Vec::new();
    while lines.last().and_then(held_fence) != Some(last_fence.as_str()) {
        lines.push(watching.next("the stream's last holder"));
    }
    assert!(backend.release(&last.lock_id).expect("release"));
    let end = watching.next("the last release");
    assert_eq!(end, serde_json::json!({"state": "released"}));
    let mut before: Option<&str> = None;
    let mut held_before = false;
    for line in &lines {
        match line["state"].as_str() {
            Some("held") => {
                let fence = held_fence(line).expect("one holder with a fence");
                assert!(granted.iter().any(|granted| granted == fence), "{line}");
                assert!(before.is_none_or(|before| fence > before), "{lines:?}");
                (before, held_before) = (Some(fence), true);
            }
            Some("released" | "expired") => {
                assert!(held_before, "free twice in a row: {lines:?}");
                held_before = false;
            }
            _ => panic!("not a state of the stream: {line}"),
        }
    }
    assert_eq!(watching.stop(libc::SIGTERM), Some(0), "SIGTERM ends watch");
}

fn until_free_exits_at_the_first_free_state(store: &Store) {
    let key = support::unique("cli-watch-until-free");
    let backend = library(store);
    let mut free = Watching::start(store, &["--key", &key, "--until-free"]);
    assert_eq!(
        free.next("a free key"),
        serde_json::json!({"state": "free"})
    );
    assert_eq!(free.exit_code(), Some(0), "a free key: at once");

    let held = acquired(backend.as_ref(), &key);
    let mut waiting = Watching::start(store, &["--key", &key, "--until-free"]);
    assert_eq!(
        held_fence(&waiting.next("a held key")),
        Some(held.fence.to_string().as_str())
    );
    let interrupted = Watching::start(store, &["--key", &key]);
    interrupted.next("a plain watch");
    assert!(backend.release(&held.lock_id).expect("release"));
    assert_eq!(
        waiting.next("the release"),
        serde_json::json!({"state": "released"})
    );
    assert_eq!(waiting.exit_code(), Some(0), "--until-free ends once free");
    assert_eq!(interrupted.stop(libc::SIGINT), Some(0), "SIGINT ends watch");
}

on_every_store!(
    follows_a_stream_of_acquisitions_and_releases,
    until_free_exits_at_the_first_free_state,
);
