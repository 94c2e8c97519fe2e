//! A set's refused attempt whose answer is lost (issue 40, item 1), through the command: the
//! store put the waiter in line, the answer never came, and the waiter tries again. It must keep
//! the one place (and ticket) it has, so that neither it nor a single-key waiter behind it is
//! wedged.
//!
//! X = `run --key A --key B --wait 30s` behind a proxy that holds back the answer to its first
//! attempt (refused: A is held) until X's own call deadline gives up on it; Y = `run --key A
//! --wait 30s` arrives meanwhile; B is taken by a third holder before X tries again, so X's
//! retry meets a newly refusing key. Then A and B are given back, and both X and Y must run
//! their commands and exit 0. Every step waits for a condition (the proxy held the answer back,
//! `status` shows the waiter in line), never for a guessed time.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use serde_json::Value as Json;

use crate::cli::{Scratch, read, syncguard, wait_for};
use crate::cli_store::Store;
use crate::support;
use crate::support::proxy::FaultProxy;

/// A started `run`, killed if the test ends before it did (a failed assertion must not leave
/// commands behind that outlive the servers).
struct Started(Child);

impl Started {
    /// Its exit code, once it has exited.
    fn exit_code(&mut self) -> Option<i32> {
        self.0
            .try_wait()
            .expect("try_wait")
            .map(|status| status.code().unwrap_or(-1))
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `store`'s command, with its traffic through `proxy` (in front of the store's `upstream`
/// port).
fn through(store: &Store, upstream: u16, proxy: &FaultProxy, args: &[&str]) -> Command {
    let proxied = format!("127.0.0.1:{}", proxy.port());
    let url = store
        .url
        .replace(&format!("127.0.0.1:{upstream}"), &proxied);
    let mut command = syncguard(&[&["--url", url.as_str()], args].concat());
    // The emulator's address, for a `firestore://` URL (no other store reads it).
    command.env("FIRESTORE_EMULATOR_HOST", &proxied);
    command
}

fn start(mut command: Command) -> Started {
    Started(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start syncguard"),
    )
}

/// Takes `key` for `--ttl 2m`: its lock id.
fn take(store: &Store, key: &str) -> String {
    let (code, out) = store.output(&["acquire", "--key", key, "--ttl", "2m"]);
    assert_eq!(code, 0, "acquire {key}: {out}");
    let acquired: Json = serde_json::from_str(out.trim()).expect("acquire prints JSON");
    acquired["lockId"].as_str().expect("a lock id").to_owned()
}

fn give_back(store: &Store, lock_id: &str) {
    let (code, out) = store.output(&["release", "--lock-id", lock_id]);
    assert_eq!(code, 0, "release: {out}");
}

/// The holder texts of `key`'s line, in line order.
fn waiting(store: &Store, key: &str) -> Vec<String> {
    store.status(key)["waiters"]
        .as_array()
        .map(|waiters| {
            waiters
                .iter()
                .filter_map(|waiter| waiter["holder"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn a_sets_lost_refusal_wedges_nobody(store: &Store, upstream: u16) {
    let scratch = Scratch::new("lost-answer");
    let (a, b) = (
        support::unique("lost-answer-a"),
        support::unique("lost-answer-b"),
    );
    let log = scratch.arg("runs");
    let job = |name: &str| format!("echo {name} >> '{log}'");
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], upstream)));
    let (x_holder, y_holder) = (support::unique("x"), support::unique("y"));

    let held_a = take(store, &a);
    // The holder text travels only with X's writes: the first is its first (refused) attempt.
    proxy.hold_answer_to(x_holder.as_bytes());
    let x_job = job("x");
    let mut x = start(through(
        store,
        upstream,
        &proxy,
        &[
            "run", "--key", &a, "--key", &b, "--wait", "30s", "--holder", &x_holder, "--", "sh",
            "-c", &x_job,
        ],
    ));
    wait_for("X's first answer to be held back", || {
        proxy.answers_cut() == 1
    });
    let y_job = job("y");
    let mut y = start(store.command(&[
        "run", "--key", &a, "--wait", "30s", "--holder", &y_holder, "--", "sh", "-c", &y_job,
    ]));
    wait_for("Y to stand in A's line", || {
        waiting(store, &a).contains(&y_holder)
    });
    // X still waits for its lost answer (until its call deadline): B is taken before it
    // tries again.
    let held_b = take(store, &b);
    wait_for("X to try again and stand in B's line", || {
        waiting(store, &b).contains(&x_holder)
    });
    give_back(store, &held_a);
    give_back(store, &held_b);
    let mut codes = (None, None);
    wait_for("X and Y to exit", || {
        codes = (x.exit_code(), y.exit_code());
        codes.0.is_some() && codes.1.is_some()
    });
    assert_eq!(codes, (Some(0), Some(0)), "X and Y both ran (exit codes)");
    let runs = read(&scratch.path("runs"));
    let mut ran: Vec<&str> = runs.lines().collect();
    ran.sort_unstable();
    assert_eq!(ran, ["x", "y"], "each ran its command once");
    assert!(
        waiting(store, &a).is_empty() && waiting(store, &b).is_empty(),
        "no place left behind"
    );
}

#[test]
fn on_redis() {
    let store = Store::redis();
    a_sets_lost_refusal_wedges_nobody(&store, support::shared_redis().port);
}

#[test]
fn on_postgres() {
    let store = Store::postgres();
    a_sets_lost_refusal_wedges_nobody(&store, support::shared_postgres().port);
}

#[test]
fn through_pgbouncer() {
    let store = Store::pgbouncer();
    a_sets_lost_refusal_wedges_nobody(&store, support::shared_pgbouncer().port);
}

#[test]
fn on_firestore() {
    let store = Store::firestore();
    a_sets_lost_refusal_wedges_nobody(&store, support::shared_firestore().port);
}
