//! `syncguard run` on its failure paths (issue 40, items 5 to 8): a `run` stopped while its
//! command runs, a store that refuses connections or never answers while `run` connects, and the
//! `--metrics-file` of runs that end with an error.
//!
//! Waits poll a condition under a deadline; nothing asserts timings.

use std::fs::File;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::{Started, pg_url, read, redis_url, scratch_and_key, sg, syncguard, wait_for};
use crate::cli_metrics::{expect_figures, metrics};
use crate::support::{PG_PASSWORD, PgServer, RedisServer, free_port};

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
        &waiting_run(
            &key,
            r#"echo new >> "$0"; sleep 0.5; echo end >> "$0""#,
            &log_arg,
        ),
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

/// The arguments of a run that waits up to 20 s for `key` and then runs the shell `script`
/// with `arg` as its `$0`.
fn waiting_run<'a>(key: &'a str, script: &'a str, arg: &'a str) -> [&'a str; 10] {
    [
        "run", "--key", key, "--wait", "20s", "--", "sh", "-c", script, arg,
    ]
}

/// Starts `run -v --wait 20s` and `acquire -v --wait 20s` on `url` (whose store is down) and
/// waits until each says it will try connecting again (or has exited: before the fix each gave
/// up at once); `restart` then brings the store back, and the run must take its lock and run its
/// command, the acquire take its own.
fn waits_through_a_store_that_is_down(url: &str, restart: impl FnOnce()) {
    let (scratch, key) = scratch_and_key("store-down");
    let ran = scratch.path("ran");
    let ran_arg = scratch.arg("ran");
    let run_stderr = scratch.path("run.stderr");
    let acquire_stderr = scratch.path("acquire.stderr");
    let acquire_stdout = scratch.path("acquire.stdout");
    let mut run = start(
        &[
            &["-v", "--url", url][..],
            &waiting_run(&key, r#"echo ran > "$0""#, &ran_arg),
        ]
        .concat(),
        &run_stderr,
    );
    let acquired_key = format!("{key}-acquired");
    let mut acquire = Started(
        syncguard(&[
            "-v",
            "--url",
            url,
            "acquire",
            "--key",
            &acquired_key,
            "--wait",
            "20s",
        ])
        .stdout(File::create(&acquire_stdout).expect("create the stdout file"))
        .stderr(File::create(&acquire_stderr).expect("create the stderr file"))
        .spawn()
        .expect("start syncguard"),
    );
    for (child, stderr) in [(&mut run, &run_stderr), (&mut acquire, &acquire_stderr)] {
        wait_for("a retry of the connection, or an exit", || {
            read(stderr).contains("trying again within --wait")
                || child.0.try_wait().expect("try_wait").is_some()
        });
    }
    restart();
    let status = exited(&mut run.0, &run_stderr);
    assert_eq!(
        status.code(),
        Some(0),
        "run waited for the store; stderr:\n{}",
        read(&run_stderr)
    );
    assert_eq!(read(&ran), "ran\n", "the command ran");
    let status = exited(&mut acquire.0, &acquire_stderr);
    assert_eq!(
        status.code(),
        Some(0),
        "acquire waited for the store; stderr:\n{}",
        read(&acquire_stderr)
    );
    let printed: serde_json::Value =
        serde_json::from_str(&read(&acquire_stdout)).expect("acquire printed JSON");
    assert_eq!(printed["ok"], true, "acquire took the lock: {printed}");
}

/// Item 6, Redis: a server that refuses connections when `run --wait` starts, and comes back
/// within the wait.
#[test]
fn wait_goes_on_while_redis_refuses_connections() {
    let mut server = RedisServer::start();
    server.stop();
    let url = server.url();
    waits_through_a_store_that_is_down(&url, || server.restart());
}

/// Item 6, PostgreSQL: as for Redis, on a cluster of its own (with its tables set up first).
#[test]
fn wait_goes_on_while_postgres_refuses_connections() {
    let mut server = PgServer::start();
    let url = server.url();
    sg(&url, &["setup"]).expect_code(0);
    server.stop();
    waits_through_a_store_that_is_down(&url, || server.restart());
}

/// Item 6: what waiting cannot mend still fails at once, `--wait` or not: refused credentials
/// (exit 3, `AuthFailed`). The wait outlasts the deadline `sg` gives a command to exit.
#[test]
fn run_does_not_wait_through_refused_credentials() {
    let url = pg_url().replacen(PG_PASSWORD, "wrong-password", 1);
    let out = sg(&url, &["run", "--key", "k", "--wait", "10m", "--", "true"]);
    out.expect_error(3, "AuthFailed");
}

/// Item 7: SIGTERM while `run` is still connecting (to a server that accepts connections and
/// never answers) exits 143 and writes the metrics file.
#[test]
fn sigterm_while_connecting_writes_the_metrics_file() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let port = listener.local_addr().expect("its address").port();
    let accepted = Arc::new(AtomicBool::new(false));
    thread::spawn({
        let accepted = Arc::clone(&accepted);
        move || {
            // Connections are kept open, unanswered, until the test process ends.
            let mut kept = Vec::new();
            for connection in listener.incoming().flatten() {
                accepted.store(true, Ordering::SeqCst);
                kept.push(connection);
            }
        }
    });
    let (scratch, key) = scratch_and_key("sigterm-connecting");
    // A folder of its own: run's stderr is beside it.
    std::fs::create_dir(scratch.path("prom")).expect("create the folder");
    let file = scratch.path("prom/job.prom");
    let stderr = scratch.path("stderr");
    let url = format!("redis://127.0.0.1:{port}/");
    let mut run = start(
        &[
            "--url",
            &url,
            "run",
            "--key",
            &key,
            "--metrics-file",
            &scratch.arg("prom/job.prom"),
            "--",
            "true",
        ],
        &stderr,
    );
    wait_for("run to connect", || accepted.load(Ordering::SeqCst));
    send("-TERM", run.0.id());
    let status = exited(&mut run.0, &stderr);
    assert_eq!(status.code(), Some(143), "stderr:\n{}", read(&stderr));
    expect_figures(&metrics(&file, &key), 143, false, false);
}

/// Item 8: runs refused before they reach a store (exit 2: a bad key, a bad `--grace`, a bad
/// `--min-hold`, a bad `--holder`, a `memory:` URL, no URL) and one whose store cannot be reached (exit 3) each
/// write the metrics file with their exit code.
#[test]
fn runs_that_end_with_an_error_write_the_metrics_file() {
    let (scratch, key) = scratch_and_key("metrics-errors");
    let file = scratch.path("job.prom");
    let file_arg = scratch.arg("job.prom");
    let refused = format!("redis://127.0.0.1:{}/", free_port());
    let cases: [(&str, &[&str], &str, u8); 7] = [
        (&refused, &[], &key, 3),
        (&refused, &[], "", 2),
        (&refused, &["--ttl", "2s", "--grace", "5s"], &key, 2),
        (&refused, &["--min-hold", "0s"], &key, 2),
        (&refused, &["--holder", ""], &key, 2),
        ("memory:", &[], &key, 2),
        ("", &[], &key, 2),
    ];
    for (url, extra, run_key, code) in cases {
        let _ = std::fs::remove_file(&file);
        let mut args = vec!["run", "--key", run_key, "--metrics-file", &file_arg];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        let out = if url.is_empty() {
            let mut command = syncguard(&args);
            let output = command.output().expect("run syncguard");
            assert_eq!(output.status.code(), Some(2), "{output:?}");
            None
        } else {
            Some(sg(url, &args))
        };
        if let Some(out) = out {
            out.expect_code(i32::from(code));
        }
        expect_figures(&metrics(&file, run_key), code, false, false);
    }
}
