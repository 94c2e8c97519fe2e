//! `syncguard run --shared` (flock's `-s`) beside a plain `run` (flock's `-x`) on every store
//! and topology (issue 34): a stream of readers, one started every 250 ms for 8 s, overlaps; a
//! writer started 1 s in gets the key before the stream ends, and no reader runs while it does;
//! `status` shows the readers meanwhile.
//!
//! Every job logs its start and end; a reader's job waits (at most 10 s) until three reader
//! starts are in the log, so readers are known to overlap if the lock lets them. The starts are
//! the scenario's schedule; nothing is timed: the order of the log is what is checked.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::cli::{Scratch, Started, read};
use crate::cli_store::Store;
use crate::support;

/// A reader's job: log its start, wait until 3 readers started (at most 10 s), stay a moment,
/// log its end.
const READER_JOB: &str = r#"echo "R start" >> "$1"
i=0; while [ "$(grep -c 'R start' "$1")" -lt 3 ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.5; echo "R end" >> "$1""#;

/// The writer's job.
const WRITER_JOB: &str = r#"echo "W start" >> "$1"; sleep 0.3; echo "W end" >> "$1""#;

/// Starts `run --key KEY --wait 2m MODE… -- sh -c JOB sh LOG` (so `$1` in the job is the log).
pub(crate) fn start(store: &Store, key: &str, mode: &[&str], job: &str, log: &str) -> Started {
    let mut args = vec!["run", "--key", key, "--wait", "2m"];
    args.extend_from_slice(mode);
    args.extend_from_slice(&["--", "sh", "-c", job, "sh", log]);
    store
        .command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(Started)
        .expect("start syncguard run")
}

fn readers_overlap_and_a_writer_gets_in(store: &Store) {
    let scratch = Scratch::new("shared");
    let key = support::unique("shared-stream");
    let log = scratch.arg("log");
    let most_readers_shown = |store: &Store, most: &mut usize| {
        let status = store.status(&key);
        *most = (*most).max(status["readers"].as_array().map_or(0, Vec::len));
    };
    let began = Instant::now();
    let mut runs = Vec::new();
    let mut shown = 0;
    for n in 0..32 {
        // One reader every 250 ms for 8 s: the stream the writer must not be starved by; the
        // writer starts 1 s in.
        let due = Duration::from_millis(250 * n);
        if let Some(wait) = due.checked_sub(began.elapsed()) {
            std::thread::sleep(wait);
        }
        runs.push((
            "reader",
            start(store, &key, &["--shared"], READER_JOB, &log),
        ));
        if n == 4 {
            runs.push(("writer", start(store, &key, &["-x"], WRITER_JOB, &log)));
        }
        most_readers_shown(store, &mut shown);
    }
    let deadline = Instant::now() + Duration::from_secs(150);
    for (what, mut run) in runs {
        let status = loop {
            if let Some(status) = run.0.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "a {what} never ended");
            if shown < 2 {
                most_readers_shown(store, &mut shown);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "a {what}");
    }
    let ran = read(&scratch.path("log"));
    let (mut readers, mut most, mut writer_at) = (0usize, 0usize, None);
    let lines: Vec<&str> = ran.lines().collect();
    for (at, line) in lines.iter().enumerate() {
        match *line {
            "R start" => {
                assert!(
                    writer_at.is_none_or(|(_, ended)| ended),
                    "a reader beside the writer:\n{ran}"
                );
                readers += 1;
                most = most.max(readers);
            }
            "R end" => readers -= 1,
            "W start" => {
                assert_eq!(readers, 0, "the writer beside readers:\n{ran}");
                writer_at = Some((at, false));
            }
            "W end" => writer_at = writer_at.map(|(start, _)| (start, true)),
            other => panic!("unexpected line {other:?}:\n{ran}"),
        }
    }
    let (writer_line, _) = writer_at.expect("the writer ran");
    assert!(most >= 3, "at most {most} readers at once:\n{ran}");
    assert!(
        lines[writer_line..].contains(&"R start"),
        "the writer got the key only after the stream ended:\n{ran}"
    );
    assert!(
        shown >= 2,
        "status never showed two readers (most: {shown})"
    );
}

on_every_store!(readers_overlap_and_a_writer_gets_in);
