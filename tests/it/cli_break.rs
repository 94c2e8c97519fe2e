//! `syncguard break` on every store and topology (issue 42): a held `run --on-lost kill` job is
//! broken; its command is gone before the next holder's command starts, and the next fence is
//! higher. And: `status` shows the break while its marker lives, a repeated break answers
//! "nothing held" (exit 1), and a permit is broken by its lock id alone.
//!
//! The jobs log what they do (their start with `$SYNCGUARD_FENCE`, and the broken job its end,
//! from a trap on SIGTERM); the order of the log is what is checked, not the time anything took.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::cli::{Scratch, read, wait_for};
use crate::cli_shared::start;
use crate::cli_store::Store;
use crate::support;

/// The broken job: logs its start and fence, then works until SIGTERM, which it logs as its
/// end before it exits.
const BROKEN_JOB: &str = r#"trap 'echo "A end" >> "$1"; exit 143' TERM
echo "A start $SYNCGUARD_FENCE" >> "$1"
while :; do sleep 0.05; done"#;

/// The next holder's job: logs its start and fence.
const NEXT_JOB: &str = r#"echo "B start $SYNCGUARD_FENCE" >> "$1""#;

/// How long the broken job's place stays taken: long enough that the broken job hears of the
/// break (run renews every second here) and ends first, whatever the machine's load.
const DELAY: &str = "5s";

/// Waits for `child` to exit (failing the test after 2 minutes).
fn exit_of(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `syncguard ARGS` on `store`: exit code and stdout as JSON.
fn json_of(store: &Store, args: &[&str]) -> (i32, Json) {
    let (code, out) = store.output(args);
    let json = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {out}"));
    (code, json)
}

fn fence(value: &Json) -> u64 {
    value
        .as_str()
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("a fence: {value}"))
}

/// The fence logged on the line that starts with `prefix`, and where that line is.
fn logged(lines: &[&str], prefix: &str, log: &str) -> (usize, u64) {
    let (at, line) = (lines.iter().enumerate())
        .find(|(_, line)| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in the log:\n{log}"));
    let fence = line[prefix.len()..].trim().parse().unwrap_or(0);
    (at, fence)
}

/// The issue's "Done when": a held `run --on-lost kill` job is broken while another `run`
/// waits for the key. The broken job's command ends (its trap logs it) before the waiting
/// one's starts, the broken run exits 76, and the fences go broken < marker < next.
fn a_broken_job_ends_before_the_next_starts(store: &Store) {
    let scratch = Scratch::new("break");
    let key = support::unique("break-job");
    let log = scratch.arg("log");
    let mut broken = start(
        store,
        &key,
        &["--ttl", "6s", "--on-lost", "kill"],
        BROKEN_JOB,
        &log,
    );
    wait_for("the first job to start", || {
        read(&scratch.path("log")).contains("A start")
    });
    let mut next = start(store, &key, &[], NEXT_JOB, &log);
    wait_for("the second run to wait in line", || {
        !store.waiting_pids(&key).is_empty()
    });
    let (code, answer) = json_of(
        store,
        &[
            "break", "--key", &key, "--reason", "stuck", "--delay", DELAY,
        ],
    );
    assert_eq!(code, 0, "break: {answer}");
    assert_eq!(answer["ok"], Json::Bool(true), "{answer}");
    let broken_fence = fence(&answer["broken"][0]["fence"]);
    let marker_fence = fence(&answer["markers"][0]["fence"]);
    assert!(marker_fence > broken_fence, "{answer}");
    assert!(answer["broken"][0]["holder"].as_str().is_some(), "{answer}");

    let status = exit_of(&mut broken.0, "the broken run");
    assert_eq!(status.code(), Some(76), "the broken run exits as lost");
    let status = exit_of(&mut next.0, "the next run");
    assert_eq!(status.code(), Some(0), "the next run");

    let ran = read(&scratch.path("log"));
    let lines: Vec<&str> = ran.lines().collect();
    let (started, first_fence) = logged(&lines, "A start", &ran);
    let (ended, _) = logged(&lines, "A end", &ran);
    let (next_started, next_fence) = logged(&lines, "B start", &ran);
    assert!(
        started < ended && ended < next_started,
        "the broken command was gone before the next started:\n{ran}"
    );
    assert_eq!(
        first_fence, broken_fence,
        "the broken job's own fence:\n{ran}"
    );
    assert!(
        next_fence > marker_fence,
        "the next fence is above the marker's and the broken one's:\n{ran}"
    );
}

/// While the marker lives, `status` shows the key held (exit 0) and who broke it, why, when
/// and until when; a repeated break answers "nothing held" (exit 1) and leaves the marker; an
/// `acquire` is refused. A permit is broken by its lock id, with no delay: its place is free at
/// once and the other permit holds on.
fn a_break_is_shown_and_not_repeated(store: &Store) {
    let key = support::unique("break-shown");
    let (code, held) = json_of(
        store,
        &[
            "acquire", "--key", &key, "--ttl", "60s", "--holder", "a worker",
        ],
    );
    assert_eq!(code, 0, "{held}");
    let (code, answer) = json_of(
        store,
        &[
            "break",
            "--key",
            &key,
            "--reason",
            "hung since 02:00",
            "--delay",
            "60s",
        ],
    );
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["broken"][0]["holder"], "a worker", "{answer}");
    assert_eq!(answer["broken"][0]["fence"], held["fence"], "{answer}");
    let until = &answer["markers"][0]["untilMs"];

    let (code, status) = json_of(store, &["status", "--key", &key]);
    assert_eq!(code, 0, "a marker is a live lease: {status}");
    let broken = &status["broken"];
    assert_eq!(broken["kind"], "lock", "{status}");
    assert_eq!(broken["reason"], "hung since 02:00", "{status}");
    assert!(
        broken["by"]
            .as_str()
            .is_some_and(|by| by.ends_with(" syncguard")),
        "by HOST:PID syncguard: {status}"
    );
    assert_eq!(&broken["untilMs"], until, "{status}");
    assert!(broken["atMs"].as_i64() <= until.as_i64(), "{status}");
    assert_eq!(status["fence"], answer["markers"][0]["fence"], "{status}");

    let (code, again) = json_of(store, &["break", "--key", &key]);
    assert_eq!(code, 1, "a repeated break: {again}");
    assert_eq!(
        again,
        serde_json::json!({"ok": false, "reason": "nothing held"})
    );
    let (_, still) = json_of(store, &["status", "--key", &key]);
    assert_eq!(still["broken"], status["broken"], "the first marker stays");
    let (code, refused) = json_of(store, &["acquire", "--key", &key]);
    assert_eq!(code, 1, "the marker keeps the key: {refused}");
    // The operator ends the delay early: the marker is released by its lock id.
    let (_, raw) = json_of(store, &["status", "--key", &key, "--raw"]);
    let marker_id = raw["lockId"].as_str().expect("the marker's lock id");
    let (code, released) = json_of(store, &["release", "--lock-id", marker_id]);
    assert_eq!(code, 0, "the marker released: {released}");
    let (code, next) = json_of(store, &["acquire", "--key", &key]);
    assert_eq!(code, 0, "free once the marker is released: {next}");
    assert!(fence(&next["fence"]) > fence(&status["fence"]), "{next}");

    let permits = support::unique("break-permit");
    let take = || {
        json_of(
            store,
            &[
                "acquire",
                "--key",
                &permits,
                "--permits",
                "2",
                "--ttl",
                "60s",
            ],
        )
    };
    let ((_, first), (_, second)) = (take(), take());
    let lock_id = first["lockId"].as_str().expect("a lock id");
    let args = [
        "break",
        "--key",
        &permits,
        "--permits",
        "2",
        "--lock-id",
        lock_id,
    ];
    let (code, one) = json_of(store, &[&args[..], &["--delay", "0"]].concat());
    assert_eq!(code, 0, "{one}");
    assert_eq!(one["broken"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(
        one["markers"],
        serde_json::json!([]),
        "no marker without a delay"
    );
    let (_, status) = json_of(store, &["status", "--key", &permits]);
    let shown = status["permits"].as_array().expect("the permits");
    assert_eq!(shown.len(), 1, "{status}");
    assert_eq!(
        shown[0]["fence"], second["fence"],
        "the other permit holds on"
    );
    assert!(
        status.get("broken").is_none(),
        "no marker, no break shown: {status}"
    );
    let (code, third) = take();
    assert_eq!(
        code, 0,
        "the broken permit's place is free at once: {third}"
    );
}

on_every_store!(
    a_broken_job_ends_before_the_next_starts,
    a_break_is_shown_and_not_repeated,
);
