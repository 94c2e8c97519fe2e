//! `syncguard run` on its failure paths (issue 40, items 5 to 8): a `run` stopped while its
//! command runs, a store that refuses connections or never answers while `run` connects, and the
//! `--metrics-file` of runs that end with an error.
//!
//! Waits poll a condition under a deadline; nothing asserts timings.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{Started, read, redis_url, scratch_and_key, sg, syncguard, wait_for};

/// How long a process may take to exit before the test calls it a hang.
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`) to the process `pid` alone.
fn send(signal: &str, pid: u32) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Starts the binary with `args`, its stderr to `stderr`.
fn start(args: &[&str], stderr: &Path) -> Started {
    let child = syncguard(args)
        .stdout(Stdio::null())
        .stderr(File::create(stderr).expect("create the stderr file"))
        .spawn()
        .expect("start syncguard");
    Started(child)
}

/// Waits for `child` to exit (failing the test if it does not within [`EXIT_DEADLINE`]).
fn exited(child: &mut Child, stderr: &Path) -> ExitStatus {
    let deadline = Instant::now() + EXIT_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "syncguard did not exit; stderr:\n{}",
            read(stderr)
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Item 5: `run --ttl 3s --grace 1s` stopped with SIGSTOP (`run` alone, not its command) while
/// its command appends a line every few milliseconds. A second `run --wait` on the key enters
/// once the lease lapsed and writes its marker; no line of the old command may follow it: the
/// watcher ended the old group at the lease's local deadline although `run` was stopped.
/// Run on Redis, where a lapse is cheap (the watcher is the same for every store).
#[test]
fn a_stopped_run_s_command_is_gone_before_the_next_holder_enters() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("stopped-run");
    let log = scratch.path("log");
    let log_arg = scratch.arg("log");
    let writer = r#"i=0; while :; do echo "old $i" >> "$0"; i=$((i+1)); sleep 0.02; done"#;
    let old_stderr = scratch.path("old.stderr");
    let mut old = start(
        &[
            "--url", &url, "run", "--key", &key, "--ttl", "3s", "--grace", "1s", "--", "sh", "-c",
            writer, &log_arg,
        ],
        &old_stderr,
    );
    wait_for("the old command to write", || read(&log).contains("old 1"));
    send("-STOP", old.0.id());

    let entered = sg(
        &url,
        &[
            "run",
            "--key",
            &key,
            "--wait",
            "20s",
            "--",
            "sh",
            "-c",
            r#"echo new >> "$0"; sleep 0.5; echo end >> "$0""#,
            &log_arg,
        ],
    );
    send("-CONT", old.0.id());
    entered.expect_code(0);
    let text = read(&log);
    let late: Vec<&str> = text
        .lines()
        .skip_while(|line| *line != "new")
        .filter(|line| line.starts_with("old"))
        .collect();
    assert!(
        late.is_empty(),
        "the old command wrote {} lines after the next holder entered:\n{text}",
        late.len()
    );
    assert!(text.contains("end"), "the new holder ran:\n{text}");
    let status = exited(&mut old.0, &old_stderr);
    assert_eq!(
        status.code(),
        Some(76),
        "the resumed run reports the lost lease; stderr:\n{}",
        read(&old_stderr)
    );
}
