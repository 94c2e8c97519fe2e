//! The `syncguard` command against real Redis and PostgreSQL servers started by the tests: every
//! command's JSON and exit code, `run`'s handling of its command and the command's whole process
//! group (environment, exit codes, signals, lost leases, `--max-runtime`, `--grace`,
//! contention), and the errors and their exit codes (`memory:` is refused).
//!
//! The binary is spawned directly (never through a shell), with `SYNCGUARD_URL` removed from
//! its environment unless a test sets it. Its output goes to files, so a command it leaves
//! behind can never block a test on a pipe. Waits poll a condition under a deadline; nothing
//! asserts timings.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::{
    PG_PASSWORD, RedisServer, free_port, scratch_dir, shared_postgres, shared_postgres_with_tables,
    shared_redis, unique,
};
use redis::Commands as _;
use serde_json::{Value as Json, json};
use syncguard::driver::{generate_lock_id, hash_key};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_syncguard");

/// How long anything may take before the test calls it a hang.
const DEADLINE: Duration = Duration::from_secs(30);
/// `--ttl` of a `run` whose lease must stay held until the test takes it away: renewed every
/// third of it, it outlasts any pause of a loaded machine (a lease lost on its own would fail
/// the test's "it was held" checks).
pub(crate) const HELD_TTL: &str = "5s";

/// Passwords the tests put in URLs; no output of the binary may ever contain them.
const SECRETS: [&str; 2] = [PG_PASSWORD, "hunter2"];

/// A `sh -c` script that waits (at most 30 s, so nothing outlives the test run for long) until
/// the file `$1` exists.
pub(crate) const WAIT_FOR_GO_FILE: &str =
    r#"i=0; while [ ! -e "$1" ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i+1)); done"#;

pub(crate) fn redis_url() -> String {
    shared_redis().url()
}

/// The shared cluster's URL, once its default tables exist.
pub(crate) fn pg_url() -> String {
    shared_postgres_with_tables().url()
}

on_redis_and_postgres!(
    acquire_status_extend_release,
    list_prints_what_status_prints_sorted,
    acquire_when_held_reports_locked_and_wait_waits,
    run_when_free,
    run_when_held_exits_75_without_running,
    sigterm_ends_the_whole_group_before_the_release,
    loss_ends_the_whole_group_before_another_holder_can_acquire,
    loss_ends_a_group_that_ignores_sigterm_before_another_holder_can_acquire,
    a_lease_that_ran_out_unanswered_is_released_at_the_end,
    min_hold_outlasts_a_black_hole_at_the_end,
    max_runtime_ends_the_whole_group_with_124,
    a_group_that_ignores_sigterm_is_killed_after_the_grace,
    conflict_exit_code_is_chosen,
    status_shows_who_holds_the_lock,
    the_readme_crontab_line_runs_the_job_once,
    the_readme_crontab_line_keeps_out_a_machine_that_starts_after_the_job,
    quiet_conflicts_print_nothing,
    with_wait_every_machine_runs_the_job_in_turn,
);

/// A directory under `CARGO_TARGET_TMPDIR`, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        Scratch(scratch_dir(&format!("cli-{name}")))
    }

    pub(crate) fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// `path(file)` as an argument for a child.
    pub(crate) fn arg(&self, file: &str) -> String {
        self.path(file).to_string_lossy().into_owned()
    }
}

/// A scratch directory and a key of its own for the test `name`.
pub(crate) fn scratch_and_key(name: &str) -> (Scratch, String) {
    (Scratch::new(name), unique(name))
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `ready` every few milliseconds until it holds, or fails the test.
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A pid a command wrote to `path` (`echo $$ > path`), once it is complete.
fn written_pid(path: &Path) -> Option<u32> {
    let text = read(path);
    text.ends_with('\n')
        .then(|| text.trim().parse().ok())
        .flatten()
}

fn pid_alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether `pid` is a live process: it exists and is not a zombie (a process killed after its
/// parent died may stay a zombie until init reaps it, and init in a container may never do).
fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`: the state follows the last `)` (comm may contain one).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

// ---------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------

/// The binary with `args`, no stdin, and no `SYNCGUARD_URL` from the test's environment.
pub(crate) fn syncguard(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("SYNCGUARD_URL")
        .stdin(Stdio::null());
    command
}

/// `syncguard --url URL args…` run to completion.
pub(crate) fn sg(url: &str, args: &[&str]) -> Finished {
    sg_env(url, args, &[])
}

/// [`sg`] with these variables added to the binary's environment.
pub(crate) fn sg_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Finished {
    let mut command = syncguard(&with_url(url, args));
    command.envs(env.iter().copied());
    Running::start(command).finish()
}

fn with_url<'a>(url: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    all
}

/// A started binary whose stdout and stderr go to files.
pub(crate) struct Running {
    child: Child,
    what: String,
    files: Scratch,
}

impl Running {
    fn start(mut command: Command) -> Running {
        let what = format!("{command:?}");
        let files = Scratch::new("io");
        let stdout = File::create(files.path("stdout")).expect("create the stdout file");
        let stderr = File::create(files.path("stderr")).expect("create the stderr file");
        let child = command
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {what}: {e}"));
        Running { child, what, files }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub(crate) fn stderr_so_far(&self) -> String {
        read(&self.files.path("stderr"))
    }

    /// Sends SIGTERM (with `kill`, as an operator would) and waits for the exit.
    pub(crate) fn terminate(self) -> Finished {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {}", self.what);
        self.finish()
    }

    /// Waits for the exit (failing the test if it does not come within the deadline).
    pub(crate) fn finish(mut self) -> Finished {
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not exit within {DEADLINE:?}; stderr:\n{}",
                    self.what,
                    self.stderr_so_far()
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        Finished::new(
            self.what.clone(),
            status,
            read(&self.files.path("stdout")),
            self.stderr_so_far(),
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A started command whose output the test does not keep (see [`Running`] for one whose output
/// it reads), killed if the test ends before it did.
pub(crate) struct Started(pub(crate) Child);

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// What a finished run of the binary printed, and how it exited.
pub(crate) struct Finished {
    what: String,
    status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    fn new(what: String, status: ExitStatus, stdout: String, stderr: String) -> Finished {
        for secret in SECRETS {
            assert!(
                !stdout.contains(secret) && !stderr.contains(secret),
                "{what} printed a password:\nstdout: {stdout}\nstderr: {stderr}"
            );
        }
        Finished {
            what,
            status,
            stdout,
            stderr,
        }
    }

    pub(crate) fn context(&self) -> String {
        format!(
            "{}\nexit: {:?}\nstdout: {}\nstderr: {}",
            self.what, self.status, self.stdout, self.stderr
        )
    }

    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    pub(crate) fn expect_code(&self, code: i32) -> &Finished {
        assert_eq!(self.code(), Some(code), "{}", self.context());
        self
    }

    /// Fails unless nothing was printed, on stdout or stderr; `why` says why that matters.
    fn expect_silent(&self, why: &str) {
        assert!(
            self.stdout.is_empty() && self.stderr.is_empty(),
            "expected no output ({why}): {}",
            self.context()
        );
    }

    /// Fails unless stderr contains `part`; `why` says what it tells, for the failure message.
    pub(crate) fn expect_stderr(&self, part: &str, why: &str) {
        assert!(self.stderr.contains(part), "{why}: {}", self.context());
    }

    /// Fails unless none of `pids` (0: a pid never written) was alive once the run had
    /// exited: its whole group was gone before it did.
    fn expect_group_gone(&self, pids: &[u32]) {
        assert!(
            pids.iter().all(|&pid| pid == 0 || !pid_alive(pid)),
            "the group was gone before run exited: {}",
            self.context()
        );
    }

    /// Stdout as JSON, which must be exactly one line.
    pub(crate) fn json(&self) -> Json {
        let line = self.stdout.strip_suffix('\n').unwrap_or(&self.stdout);
        assert!(
            !line.is_empty() && !line.contains('\n'),
            "expected one line of JSON on stdout: {}",
            self.context()
        );
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.context()))
    }

    /// Exit `code` and stdout exactly `expected` (as JSON).
    pub(crate) fn expect_json(&self, code: i32, expected: &Json) {
        self.expect_code(code);
        assert_eq!(&self.json(), expected, "{}", self.context());
    }

    /// Exit `exit`, nothing on stdout, and exactly one line `error: <code>: <message>` on
    /// stderr.
    pub(crate) fn expect_error(&self, exit: i32, code: &str) {
        self.expect_code(exit);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one line on stderr: {}",
            self.context()
        );
        let prefix = format!("error: {code}: ");
        assert!(
            lines[0].starts_with(&prefix) && lines[0].len() > prefix.len(),
            "expected `{prefix}<message>`: {}",
            self.context()
        );
        assert!(
            self.stdout.is_empty(),
            "expected nothing on stdout: {}",
            self.context()
        );
    }
}

/// The fields `status` prints for a lock or a permit (without `--raw`), sorted.
const INFO_FIELDS: [&str; 6] = [
    "acquiredAtMs",
    "expiresAtMs",
    "fence",
    "holder",
    "keyHash",
    "lockIdHash",
];

/// The fields of a JSON object, sorted.
fn fields(value: &Json) -> Vec<&str> {
    let mut names: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("expected an object, got {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names
}

pub(crate) fn str_field<'a>(value: &'a Json, name: &str) -> &'a str {
    value[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name} is not a string in {value}"))
}

fn int_field(value: &Json, name: &str) -> i64 {
    value[name]
        .as_i64()
        .unwrap_or_else(|| panic!("{name} is not an integer in {value}"))
}

fn assert_fence(fence: &str) {
    assert!(
        fence.len() == 15 && fence.bytes().all(|b| b.is_ascii_digit()) && fence != "0".repeat(15),
        "not a fence: {fence:?}"
    );
}

fn assert_lock_id(lock_id: &str) {
    assert!(
        lock_id.len() == 22
            && lock_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "not a lock id: {lock_id:?}"
    );
}

/// `acquire --key key args…`, which must succeed; its JSON, checked for shape.
pub(crate) fn acquire(url: &str, key: &str, args: &[&str]) -> Json {
    let mut all = vec!["acquire", "--key", key];
    all.extend_from_slice(args);
    let out = sg(url, &all);
    out.expect_code(0);
    let acquired = out.json();
    assert_eq!(
        fields(&acquired),
        ["expiresAtMs", "fence", "lockId", "ok"],
        "{}",
        out.context()
    );
    assert_eq!(acquired["ok"], json!(true));
    assert_lock_id(str_field(&acquired, "lockId"));
    assert_fence(str_field(&acquired, "fence"));
    assert!(int_field(&acquired, "expiresAtMs") > 0);
    acquired
}

pub(crate) fn release(url: &str, lock_id: &str) {
    sg(url, &["release", "--lock-id", lock_id]).expect_json(0, &json!({"ok": true}));
}

pub(crate) fn expect_unlocked(url: &str, key: &str) {
    sg(url, &["status", "--key", key]).expect_json(1, &Json::Null);
}

/// `status --key key` shows the lock `holder` (what `acquire` printed) holds.
fn expect_held_by(url: &str, key: &str, holder: &Json, why: &str) {
    let status = sg(url, &["status", "--key", key]);
    status.expect_code(0);
    assert_eq!(
        str_field(&status.json(), "lockIdHash"),
        hash_key(str_field(holder, "lockId")),
        "{why}: {}",
        status.context()
    );
}

/// `holder` (what `acquire` printed) still holds `key` (`why`); then its lease is released.
fn expect_held_then_release(url: &str, key: &str, holder: &Json, why: &str) {
    expect_held_by(url, key, holder, why);
    release(url, str_field(holder, "lockId"));
}

// ---------------------------------------------------------------------------------------------
// list
// ---------------------------------------------------------------------------------------------

/// `status --key` exits 0 and shows `count` permits of the key's semaphore.
pub(crate) fn expect_permits_in_status(url: &str, key: &str, count: usize) {
    let status = sg(url, &["status", "--key", key]);
    status.expect_code(0);
    assert_eq!(
        status.json()["permits"].as_array().map(Vec::len),
        Some(count),
        "{}",
        status.context()
    );
}

/// Stdout's lines, each a JSON object.
pub(crate) fn json_lines(out: &Finished) -> Vec<Json> {
    out.stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line is not JSON ({e}): {}", out.context()))
        })
        .collect()
}

/// `list` prints, one line each, exactly what `status` prints for each live lock under the
/// prefix (hashes only, or `--raw`), sorted by key; `--limit` keeps the first and says so on
/// stderr; no lock at all is exit 0 and no output; a bad `--limit` is bad usage.
fn list_prints_what_status_prints_sorted(url: &str) {
    let root = unique("list");
    let prefix = format!("{root}:");
    let mut keys: Vec<String> = ["b", "a", "c"]
        .iter()
        .map(|name| format!("{prefix}{name}"))
        .collect();
    let holders: Vec<Json> = keys
        .iter()
        .map(|key| acquire(url, key, &["--ttl", "30s"]))
        .collect();
    let outside = acquire(url, &format!("{root}-outside"), &["--ttl", "30s"]);
    keys.sort();
    let status_of = |key: &str, raw: bool| {
        let mut args = vec!["status", "--key", key];
        if raw {
            args.push("--raw");
        }
        let out = sg(url, &args);
        out.expect_code(0);
        out.json()
    };

    let listed = sg(url, &["list", "--prefix", &prefix]);
    listed.expect_code(0);
    let expected: Vec<Json> = keys.iter().map(|key| status_of(key, false)).collect();
    assert_eq!(json_lines(&listed), expected, "{}", listed.context());
    assert!(listed.stderr.is_empty(), "{}", listed.context());

    let raw = sg(url, &["list", "--raw", "--prefix", &prefix]);
    raw.expect_code(0);
    let expected_raw: Vec<Json> = keys.iter().map(|key| status_of(key, true)).collect();
    assert_eq!(json_lines(&raw), expected_raw, "{}", raw.context());

    let first = sg(url, &["list", "--prefix", &prefix, "--limit", "2"]);
    first.expect_code(0);
    assert_eq!(json_lines(&first), expected[..2], "{}", first.context());
    assert!(first.stderr.contains("--limit 2"), "{}", first.context());

    let none = sg(url, &["list", "--prefix", &format!("{root}:none")]);
    none.expect_code(0);
    assert!(
        none.stdout.is_empty() && none.stderr.is_empty(),
        "{}",
        none.context()
    );

    for bad in ["0", "1001", "many"] {
        sg(url, &["list", "--limit", bad]).expect_error(2, "InvalidArgument");
    }

    for holder in holders.iter().chain([&outside]) {
        release(url, str_field(holder, "lockId"));
    }
    let after = sg(url, &["list", "--prefix", &prefix]);
    after.expect_code(0);
    assert!(after.stdout.is_empty(), "{}", after.context());
}

/// `list` on a Cluster: every primary is scanned (the library's own test checks keys on all
/// three; here the command's output).
#[test]
fn list_on_a_cluster() {
    list_prints_what_status_prints_sorted(&crate::support::shared_cluster().url());
}

// ---------------------------------------------------------------------------------------------
// acquire, status, extend, release
// ---------------------------------------------------------------------------------------------

fn acquire_status_extend_release(url: &str) {
    let key = unique("lifecycle");
    let acquired = acquire(url, &key, &["--ttl", "30s"]);
    let lock_id = str_field(&acquired, "lockId");
    let fence = str_field(&acquired, "fence");
    let expires_at_ms = int_field(&acquired, "expiresAtMs");

    // The lease outlives the acquire command: a later process sees it.
    let by_key = sg(url, &["status", "--key", &key]);
    by_key.expect_code(0);
    let info = by_key.json();
    assert_eq!(fields(&info), INFO_FIELDS, "{}", by_key.context());
    // acquire's default holder: this machine and the process that ran it (this test).
    assert_eq!(
        str_field(&info, "holder"),
        format!("{}:{}", hostname(), std::process::id()),
        "{}",
        by_key.context()
    );
    assert_eq!(str_field(&info, "keyHash"), hash_key(&key));
    assert_eq!(str_field(&info, "lockIdHash"), hash_key(lock_id));
    assert_eq!(str_field(&info, "fence"), fence);
    assert_eq!(int_field(&info, "expiresAtMs"), expires_at_ms);
    assert_eq!(expires_at_ms - int_field(&info, "acquiredAtMs"), 30_000);

    let by_id = sg(url, &["status", "--lock-id", lock_id]);
    by_id.expect_code(0);
    assert_eq!(by_id.json(), info, "{}", by_id.context());

    let mut raw = info.clone();
    raw["key"] = json!(key);
    raw["lockId"] = json!(lock_id);
    sg(url, &["status", "--raw", "--key", &key]).expect_json(0, &raw);
    sg(url, &["status", "--lock-id", lock_id, "--raw"]).expect_json(0, &raw);

    let extended = sg(url, &["extend", "--lock-id", lock_id, "--ttl", "60s"]);
    extended.expect_code(0);
    let extended = extended.json();
    assert_eq!(fields(&extended), ["expiresAtMs", "ok"]);
    assert_eq!(extended["ok"], json!(true));
    let new_expiry = int_field(&extended, "expiresAtMs");
    assert!(
        new_expiry > expires_at_ms,
        "extending a 30 s lease to 60 s moves its expiry later: {expires_at_ms} → {new_expiry}"
    );
    let after_extend = sg(url, &["status", "--key", &key]);
    after_extend.expect_code(0);
    assert_eq!(int_field(&after_extend.json(), "expiresAtMs"), new_expiry);

    release(url, lock_id);
    sg(url, &["release", "--lock-id", lock_id]).expect_json(1, &json!({"ok": false}));
    sg(url, &["extend", "--lock-id", lock_id, "--ttl", "30s"])
        .expect_json(1, &json!({"ok": false}));
    expect_unlocked(url, &key);
    sg(url, &["status", "--lock-id", lock_id]).expect_json(1, &Json::Null);
    sg(url, &["status", "--raw", "--lock-id", lock_id]).expect_json(1, &Json::Null);

    // The next acquisition of the key gets a larger fence.
    let again = acquire(url, &key, &[]);
    assert!(str_field(&again, "fence") > fence);
    release(url, str_field(&again, "lockId"));
}

fn acquire_when_held_reports_locked_and_wait_waits(url: &str) {
    let key = unique("contention");
    let first = acquire(url, &key, &["--ttl", "30s"]);
    let locked = json!({"ok": false, "reason": "locked"});
    sg(url, &["acquire", "--key", &key]).expect_json(1, &locked);
    sg(url, &["acquire", "--key", &key, "--wait", "200ms"]).expect_json(1, &locked);

    // A waiter gets the lock once another process releases it.
    let mut waiter = Running::start(syncguard(&with_url(
        url,
        &["acquire", "--key", &key, "--wait", "30s"],
    )));
    expect_held_by(url, &key, &first, "the first holder still holds the lock");
    assert!(
        waiter.is_running(),
        "acquire --wait 30s ended while the lock was held: {}",
        waiter.stderr_so_far()
    );
    release(url, str_field(&first, "lockId"));
    let waited = waiter.finish();
    waited.expect_code(0);
    let second = waited.json();
    assert_eq!(second["ok"], json!(true), "{}", waited.context());
    assert!(str_field(&second, "fence") > str_field(&first, "fence"));
    expect_held_then_release(url, &key, &second, "the waiter holds the lock");
}

#[test]
fn an_acquired_lease_runs_out_at_its_ttl() {
    let url = redis_url();
    let key = unique("runs-out");
    let first = acquire(&url, &key, &["--ttl", "300ms"]);
    wait_for("the lease to run out", || {
        sg(&url, &["status", "--key", &key]).code() == Some(1)
    });
    let second = acquire(&url, &key, &[]);
    assert!(str_field(&second, "fence") > str_field(&first, "fence"));
    sg(&url, &["release", "--lock-id", str_field(&first, "lockId")])
        .expect_json(1, &json!({"ok": false}));
    release(&url, str_field(&second, "lockId"));
}

#[test]
fn unknown_lock_ids_are_not_held() {
    let url = redis_url();
    let lock_id = generate_lock_id();
    sg(&url, &["release", "--lock-id", &lock_id]).expect_json(1, &json!({"ok": false}));
    sg(&url, &["extend", "--lock-id", &lock_id, "--ttl", "5s"])
        .expect_json(1, &json!({"ok": false}));
    sg(&url, &["status", "--lock-id", &lock_id]).expect_json(1, &Json::Null);
    expect_unlocked(&url, &unique("never-locked"));
}

/// Lock ids are base64url, so one in 64 starts with `-`; keys may too. An option that takes a
/// value takes the next argument whatever it starts with (as getopt does), so
/// `release --lock-id "$id"` works for every id.
#[test]
fn values_may_start_with_a_dash() {
    let url = redis_url();
    let lock_id = format!("-{}", &generate_lock_id()[1..]);
    sg(&url, &["release", "--lock-id", &lock_id]).expect_json(1, &json!({"ok": false}));
    sg(&url, &["extend", "--lock-id", &lock_id, "--ttl", "5s"])
        .expect_json(1, &json!({"ok": false}));
    sg(&url, &["status", "--lock-id", &lock_id]).expect_json(1, &Json::Null);

    let key = format!("-{}", unique("dash"));
    let acquired = acquire(&url, &key, &[]);
    let status = sg(&url, &["status", "--raw", "--key", &key]);
    status.expect_code(0);
    assert_eq!(str_field(&status.json(), "key"), key);
    release(&url, str_field(&acquired, "lockId"));
}

#[test]
fn durations_in_every_unit() {
    let url = redis_url();
    for (ttl, ms) in [
        ("500ms", 500),
        ("1500", 1_500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1m30s", 90_000),
        ("1d", 86_400_000),
    ] {
        let key = unique("duration");
        let acquired = acquire(&url, &key, &["--ttl", ttl]);
        // Redis' clock stamps both ends of the lease from one reading.
        let status = sg(&url, &["status", "--key", &key]);
        status.expect_code(0);
        let info = status.json();
        assert_eq!(
            int_field(&info, "expiresAtMs") - int_field(&info, "acquiredAtMs"),
            ms,
            "--ttl {ttl}"
        );
        let _ = sg(
            &url,
            &["release", "--lock-id", str_field(&acquired, "lockId")],
        );
    }
}

#[test]
fn the_url_comes_from_the_flag_anywhere_or_the_environment() {
    let url = redis_url();

    // --url after the subcommand.
    let key = unique("url-after");
    let out = Running::start(syncguard(&["acquire", "--key", &key, "--url", &url])).finish();
    out.expect_code(0);
    release(&url, str_field(&out.json(), "lockId"));

    // SYNCGUARD_URL alone.
    let key = unique("url-env");
    let mut command = syncguard(&["acquire", "--key", &key]);
    command.env("SYNCGUARD_URL", &url);
    let out = Running::start(command).finish();
    out.expect_code(0);
    let lock_id = str_field(&out.json(), "lockId").to_owned();
    let mut command = syncguard(&["release", "--lock-id", &lock_id]);
    command.env("SYNCGUARD_URL", &url);
    Running::start(command)
        .finish()
        .expect_json(0, &json!({"ok": true}));

    // The flag wins over the environment (as flags do over environment variables).
    let key = unique("url-both");
    let mut command = syncguard(&["--url", &url, "acquire", "--key", &key]);
    command.env("SYNCGUARD_URL", "mysql://user:hunter2@elsewhere/db");
    let out = Running::start(command).finish();
    out.expect_code(0);
    release(&url, str_field(&out.json(), "lockId"));
}

/// A `memory:` lock would live and die with one command: every command refuses it, saying why.
#[test]
fn memory_urls_are_refused() {
    let scratch = Scratch::new("memory");
    let marker = scratch.arg("ran");
    let lock_id = generate_lock_id();
    for url in ["memory:", "MEMORY://"] {
        for args in [
            vec!["acquire", "--key", "job"],
            vec!["status", "--key", "job"],
            vec!["release", "--lock-id", &lock_id],
            vec!["extend", "--lock-id", &lock_id, "--ttl", "5s"],
            vec!["run", "--key", "job", "--", "touch", &marker],
            vec!["setup"],
        ] {
            let out = sg(url, &args);
            out.expect_error(2, "InvalidArgument");
            assert!(out.stderr.contains("memory:"), "{}", out.context());
        }
    }
    assert!(!Path::new(&marker).exists(), "run ran its command");
}

// ---------------------------------------------------------------------------------------------
// setup
// ---------------------------------------------------------------------------------------------

#[test]
fn setup_creates_the_tables_idempotently() {
    let base = pg_url();
    // Tables of their own, so that this really creates them.
    let suffix = &hash_key(&generate_lock_id())[..12];
    let url = format!("{base}?table=cli_locks_{suffix}&fence_table=cli_fences_{suffix}");
    sg(&url, &["setup"]).expect_json(0, &json!({"ok": true}));
    let mut client = shared_postgres().client();
    for table in [
        format!("cli_locks_{suffix}"),
        format!("cli_fences_{suffix}"),
    ] {
        let found: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .expect("look the table up")
            .get(0);
        assert!(found, "setup created {table}");
    }
    sg(&url, &["setup"]).expect_json(0, &json!({"ok": true}));

    let key = unique("setup");
    let acquired = acquire(&url, &key, &[]);
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM cli_locks_{suffix}"), &[])
        .expect("count the locks")
        .get(0);
    assert_eq!(rows, 1, "the lock went into the new table");
    release(&url, str_field(&acquired, "lockId"));
}

#[test]
fn missing_tables_are_a_backend_error_that_says_to_run_setup() {
    let suffix = &hash_key(&generate_lock_id())[..12];
    let url = format!(
        "{}?table=cli_absent_{suffix}&fence_table=cli_absent_f_{suffix}",
        pg_url()
    );
    let out = sg(&url, &["acquire", "--key", &unique("absent")]);
    out.expect_error(3, "Internal");
    assert!(
        out.stderr.contains("run `syncguard setup`"),
        "{}",
        out.context()
    );
}

/// Deployment scripts may run `setup` whatever the backend: elsewhere it succeeds and says, in
/// one line, that there was nothing to do.
#[test]
fn setup_elsewhere_is_a_no_op() {
    let out = sg(&redis_url(), &["setup"]);
    out.expect_json(0, &json!({"ok": true}));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].contains("no setup"),
        "one line saying nothing is needed: {}",
        out.context()
    );
}

// ---------------------------------------------------------------------------------------------
// run
// ---------------------------------------------------------------------------------------------

/// A `sh -c` script: writes the three variables to `$1`, runs `$2 --url $3 status --raw --key
/// $SYNCGUARD_KEY` into `$4` (what another process sees while the command runs), then prints
/// `from-cmd`.
const REPORT_ENV: &str = r#"printf '%s\n%s\n%s\n' "$SYNCGUARD_FENCE" "$SYNCGUARD_LOCK_ID" "$SYNCGUARD_KEY" > "$1"
"$2" --url "$3" status --raw --key "$SYNCGUARD_KEY" > "$4"
echo from-cmd"#;

fn run_when_free(url: &str) {
    let (scratch, key) = scratch_and_key("run-free");
    let (env_file, status_file) = (scratch.arg("env"), scratch.arg("status"));
    let out = sg(
        url,
        &[
            "run",
            "--key",
            &key,
            "--",
            "sh",
            "-c",
            REPORT_ENV,
            "sh",
            &env_file,
            BIN,
            url,
            &status_file,
        ],
    );
    out.expect_code(0);
    assert_eq!(
        out.stdout,
        "from-cmd\n",
        "stdout is the command's: {}",
        out.context()
    );

    let env = read(Path::new(&env_file));
    let lines: Vec<&str> = env.lines().collect();
    let [fence, lock_id, env_key] = lines[..] else {
        panic!("the command saw: {env:?}");
    };
    assert_fence(fence);
    assert_lock_id(lock_id);
    assert_eq!(env_key, key);

    // While it ran, the lock was held under exactly that id and fence.
    let seen: Json = serde_json::from_str(read(Path::new(&status_file)).trim())
        .expect("the status the command printed");
    assert_eq!(str_field(&seen, "lockId"), lock_id, "{seen}");
    assert_eq!(str_field(&seen, "key"), key);
    assert_eq!(str_field(&seen, "fence"), fence);

    // Released when the command exited.
    sg(url, &["status", "--lock-id", lock_id]).expect_json(1, &Json::Null);
    expect_unlocked(url, &key);
}

fn run_when_held_exits_75_without_running(url: &str) {
    let (scratch, key) = scratch_and_key("run-held");
    let holder = acquire(url, &key, &[]);
    let marker = scratch.arg("ran");
    for wait in [None, Some("0s"), Some("200ms")] {
        let mut args = vec!["run", "--key", &key];
        if let Some(wait) = wait {
            args.extend(["--wait", wait]);
        }
        args.extend(["--", "touch", &marker]);
        sg(url, &args).expect_code(75);
        assert!(
            !Path::new(&marker).exists(),
            "the command ran without the lock (--wait {wait:?})"
        );
    }
    expect_held_then_release(url, &key, &holder, "the holder's lock is untouched");
}

/// This machine's host name, as `gethostname(2)` gives it (Linux).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read the host name")
        .trim()
        .to_owned()
}

/// The holder `status` shows for `key` (by key, and the same by lock id and with `--raw`).
fn status_holder(url: &str, key: &str) -> Json {
    let by_key = sg(url, &["status", "--key", key]);
    by_key.expect_code(0);
    let info = by_key.json();
    let raw = sg(url, &["status", "--raw", "--key", key]);
    raw.expect_code(0);
    let raw = raw.json();
    assert_eq!(raw["holder"], info["holder"], "{raw}");
    let by_id = sg(url, &["status", "--lock-id", str_field(&raw, "lockId")]);
    by_id.expect_code(0);
    // Not the whole object: a renewal between the calls moves the expiry.
    let by_id = by_id.json();
    assert_eq!(by_id["lockIdHash"], info["lockIdHash"], "{by_id}");
    assert_eq!(by_id["holder"], info["holder"], "{by_id}");
    info["holder"].clone()
}

/// `status` shows who holds a lock: `run`'s default `HOST:PID PROGRAM` (its own pid, the
/// command's file name, never its arguments: they carry passwords) while the command runs,
/// also in `list`; `--holder` in its place, and `acquire --holder`; a lock the TypeScript way
/// (no holder) shows `null`, which `acquire_status_extend_release` and the storage tests cover.
fn status_shows_who_holds_the_lock(url: &str) {
    let (scratch, key) = scratch_and_key("holder");
    let (pid_file, go) = (scratch.path("pid"), scratch.arg("go"));
    // `Finished` fails the test if any output shows the password.
    let secret = "--password=hunter2";
    let (running, _) = start_run(url, &key, &[], &pid_file, WAIT_FOR_GO_FILE, &[&go, secret]);
    let expected = format!("{}:{} sh", hostname(), running.pid());
    assert_eq!(status_holder(url, &key), json!(expected));
    let listed = sg(url, &["list", "--raw", "--prefix", &key]);
    listed.expect_code(0);
    let listed = json_lines(&listed);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["holder"], json!(expected), "{listed:?}");
    File::create(&go).unwrap();
    running.finish().expect_code(0);
    expect_unlocked(url, &key);

    let (pid_file, go) = (scratch.path("pid2"), scratch.arg("go2"));
    let described = "nightly report — web-1 \"blue\"";
    let (running, _) = start_run(
        url,
        &key,
        &["--holder", described],
        &pid_file,
        WAIT_FOR_GO_FILE,
        &[&go],
    );
    assert_eq!(status_holder(url, &key), json!(described));
    File::create(&go).unwrap();
    running.finish().expect_code(0);

    let acquired = acquire(url, &key, &["--holder", "deploy by alice"]);
    assert_eq!(status_holder(url, &key), json!("deploy by alice"));
    release(url, str_field(&acquired, "lockId"));
}

/// A program whose file name is longer than a holder may be is cut to 256 bytes, on a
/// character boundary.
#[test]
fn a_long_program_name_is_cut_to_fit_the_holder() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("holder-long");
    let (pid_file, go) = (scratch.path("pid"), scratch.arg("go"));
    // 254 bytes: as long as a file name may be.
    let name = "é".repeat(127);
    let program = scratch.path(&name);
    std::os::unix::fs::symlink("/bin/sh", &program).expect("link the shell under a long name");
    let (running, _) = start_program(
        &url,
        &key,
        &[],
        &program.to_string_lossy(),
        &pid_file,
        WAIT_FOR_GO_FILE,
        &[&go],
    );
    let holder = status_holder(&url, &key);
    let holder = holder.as_str().expect("a holder");
    let full = format!("{}:{} {name}", hostname(), running.pid());
    assert!(holder.len() <= 256 && holder.len() >= 255, "{holder}");
    assert!(full.starts_with(holder), "{holder}");
    File::create(&go).unwrap();
    running.finish().expect_code(0);
}

/// `run` passes its command line on as bytes, whatever their encoding: a program whose file
/// name has the byte 0xff (a link to the shell) runs, an argument that is not UTF-8 reaches it
/// byte for byte, and the holder shows the name with U+FFFD for the byte.
#[test]
fn run_passes_a_command_line_that_is_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;

    let url = redis_url();
    let (scratch, key) = scratch_and_key("not-utf8");
    let program = scratch.0.join(OsStr::from_bytes(b"job\xff"));
    std::os::unix::fs::symlink("/bin/sh", &program).expect("link the shell under the name");
    let argument = OsStr::from_bytes(b"caf\xe9 \xff\xfe-\x80");
    let (got, status) = (scratch.path("got"), scratch.path("status"));
    let mut command = syncguard(&["--url", &url, "run", "--key", &key, "--"]);
    command
        .arg(&program)
        .arg("-c")
        .arg(r#"printf '%s' "$1" > "$2"; "$3" --url "$4" status --key "$SYNCGUARD_KEY" > "$5""#)
        .arg("job")
        .arg(argument)
        .arg(&got)
        .args([BIN, &url])
        .arg(&status);
    Running::start(command).finish().expect_code(0);
    assert_eq!(
        std::fs::read(&got).unwrap_or_default(),
        argument.as_bytes(),
        "the argument reached the command byte for byte"
    );
    let shown: Json = serde_json::from_str(&read(&status)).expect("status printed JSON");
    let holder = shown["holder"].as_str().unwrap_or_default();
    assert!(holder.ends_with(" job\u{FFFD}"), "{shown}");
    expect_unlocked(&url, &key);
}

/// A holder with a Unicode format character (here U+202E, which shows what follows it
/// reversed) is refused before anything is sent, the message naming the code point.
#[test]
fn a_holder_with_a_bidi_override_exits_2_naming_it() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("holder-bidi");
    let marker = scratch.arg("ran");
    for command in [
        vec!["acquire", "--key", &key, "--holder", "job\u{202E}gpj.exe"],
        vec![
            "run",
            "--key",
            &key,
            "--holder",
            "a\u{202E}b",
            "--",
            "touch",
            &marker,
        ],
    ] {
        let out = sg(&url, &command);
        out.expect_error(2, "InvalidArgument");
        out.expect_stderr("U+202E", "the error names the code point");
    }
    expect_unlocked(&url, &key);
    assert!(!Path::new(&marker).exists(), "run ran its command");
}

#[test]
fn run_passes_the_exit_code_through_and_releases() {
    let url = redis_url();
    let key = unique("run-exit");
    sg(&url, &["run", "--key", &key, "--", "sh", "-c", "exit 7"]).expect_code(7);
    expect_unlocked(&url, &key);
    sg(&url, &["run", "--key", &key, "--", "false"]).expect_code(1);
    expect_unlocked(&url, &key);
}

#[test]
fn run_reports_death_by_signal_as_128_plus_n() {
    let url = redis_url();
    let key = unique("run-signal");
    sg(
        &url,
        &["run", "--key", &key, "--", "sh", "-c", "kill -TERM $$"],
    )
    .expect_code(143);
    expect_unlocked(&url, &key);
    sg(
        &url,
        &["run", "--key", &key, "--", "sh", "-c", "kill -KILL $$"],
    )
    .expect_code(137);
    expect_unlocked(&url, &key);
}

/// Starts `run --key key extra… -- sh -c 'echo $$ > pid_file; script' pid_file script_args…`
/// (so `$1`… in `script` are `script_args`) and waits until the command runs, which it does
/// only once the lock is held (which `status` confirms); returns the process and the command's
/// pid.
pub(crate) fn start_run(
    url: &str,
    key: &str,
    extra: &[&str],
    pid_file: &Path,
    script: &str,
    script_args: &[&str],
) -> (Running, u32) {
    start_program(url, key, extra, "sh", pid_file, script, script_args)
}

/// As [`start_run`], with `shell` (a path to a POSIX shell) in place of `sh`.
fn start_program(
    url: &str,
    key: &str,
    extra: &[&str],
    shell: &str,
    pid_file: &Path,
    script: &str,
    script_args: &[&str],
) -> (Running, u32) {
    let script = format!("echo $$ > \"$0\"; {script}");
    let pid_path = pid_file.to_string_lossy().into_owned();
    let mut args = vec!["--url", url, "run", "--key", key];
    args.extend_from_slice(extra);
    args.extend(["--", shell, "-c", &script, &pid_path]);
    args.extend_from_slice(script_args);
    let mut running = Running::start(syncguard(&args));
    wait_for("the command to start under the lock", || {
        assert!(
            running.is_running(),
            "syncguard run ended early: {}",
            running.stderr_so_far()
        );
        written_pid(pid_file).is_some()
    });
    let pid = written_pid(pid_file).expect("the pid");
    // The command runs under the lock.
    sg(url, &["status", "--key", key]).expect_code(0);
    (running, pid)
}

/// `run` ends with 76, saying the lease was lost, and the command `pid` is gone.
pub(crate) fn expect_lost(running: Running, pid: u32) {
    let out = running.finish();
    out.expect_code(76);
    assert!(
        out.stderr.to_lowercase().contains("lost"),
        "stderr says the lock was lost: {}",
        out.context()
    );
    wait_for("the command to be gone", || !pid_alive(pid));
}

/// Deletes syncguard's lock record for `key` from the shared Redis, as an operator (or an
/// eviction) might; returns how many records went.
pub(crate) fn delete_redis_lock(key: &str) -> i64 {
    shared_redis()
        .connection()
        .del(format!("syncguard:{key}"))
        .expect("DEL")
}

/// A lock deleted under a running command ends it with 76, and says so on stderr, `-q` or not
/// (`-q` silences conflicts only).
#[test]
fn run_terminates_the_command_when_the_lease_is_lost() {
    let key = run_whose_lock_is_taken_away(
        &redis_url(),
        "run-lost",
        &["--ttl", HELD_TTL, "-q"],
        |key, _| assert_eq!(delete_redis_lock(key), 1),
    );
    expect_unlocked(&redis_url(), &key);
}

/// Starts `run` (with `options`) on `url`, whose command notes its lock id and sleeps; then
/// `take_away(key, lock id)` removes the lock behind the run's back: the run must end its
/// command and exit 76 ([`expect_lost`]). Answers the key.
fn run_whose_lock_is_taken_away(
    url: &str,
    name: &str,
    options: &[&str],
    take_away: impl FnOnce(&str, &str),
) -> String {
    let (scratch, key) = scratch_and_key(name);
    let lock_id_file = scratch.arg("lock-id");
    let (running, pid) = start_run(
        url,
        &key,
        options,
        &scratch.path("pid"),
        r#"echo "$SYNCGUARD_LOCK_ID" > "$1"; exec sleep 30"#,
        &[&lock_id_file],
    );
    wait_for("the lock id", || {
        read(Path::new(&lock_id_file)).ends_with('\n')
    });
    take_away(&key, read(Path::new(&lock_id_file)).trim());
    expect_lost(running, pid);
    key
}

#[test]
fn run_kills_a_command_that_ignores_sigterm_after_the_grace_period() {
    let (scratch, key) = scratch_and_key("run-grace");
    let pid_file = scratch.path("pid");
    let (never, got_term) = (scratch.arg("never"), scratch.arg("got-term"));
    // Notes SIGTERM in a file and carries on; would run for up to 30 s.
    let stubborn = format!(r#"trap 'echo TERM > "$2"' TERM; {WAIT_FOR_GO_FILE}"#);
    let (running, pid) = start_run(
        &redis_url(),
        &key,
        &["--ttl", HELD_TTL, "--grace", "2s"],
        &pid_file,
        &stubborn,
        &[&never, &got_term],
    );
    delete_redis_lock(&key);
    let out = running.finish();
    out.expect_code(76);
    wait_for("the command to be gone", || !pid_alive(pid));
    assert_eq!(
        read(Path::new(&got_term)),
        "TERM\n",
        "SIGTERM came first: {}",
        out.context()
    );
}

#[test]
fn run_with_on_lost_warn_lets_the_command_finish() {
    let (scratch, key) = scratch_and_key("run-warn");
    let (go, done) = (scratch.arg("go"), scratch.arg("done"));
    let script = format!(r#"{WAIT_FOR_GO_FILE}; [ -e "$1" ] && echo survived > "$2"; exit 3"#);
    let (mut running, pid) = start_run(
        &redis_url(),
        &key,
        &["--ttl", HELD_TTL, "--on-lost=warn"],
        &scratch.path("pid"),
        &script,
        &[&go, &done],
    );
    delete_redis_lock(&key);
    wait_for("the warning about the lost lease", || {
        running.stderr_so_far().to_lowercase().contains("lost")
    });
    assert!(
        running.is_running() && pid_alive(pid),
        "the command keeps running after the warning"
    );
    File::create(&go).expect("create the go file");
    let out = running.finish();
    out.expect_code(3);
    assert_eq!(read(Path::new(&done)), "survived\n");
}

#[test]
fn run_forwards_sigterm_to_the_command() {
    let (scratch, key) = scratch_and_key("run-sigterm");
    let (running, pid) = start_run(
        &redis_url(),
        &key,
        &[],
        &scratch.path("pid"),
        "exec sleep 30",
        &[],
    );
    let out = running.terminate();
    out.expect_code(143);
    wait_for("the command to be gone", || !pid_alive(pid));
    expect_unlocked(&redis_url(), &key);
}

#[test]
fn two_runs_on_one_key() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("run-race");
    let (fence_1, go, end_1) = (
        scratch.arg("fence-1"),
        scratch.arg("go"),
        scratch.arg("end-1"),
    );
    let first_script =
        format!(r#"echo "$SYNCGUARD_FENCE" > "$2"; {WAIT_FOR_GO_FILE}; echo end > "$3""#);
    let (first, _) = start_run(
        &redis_url(),
        &key,
        &[],
        &scratch.path("pid-1"),
        &first_script,
        &[&go, &fence_1, &end_1],
    );
    wait_for("the first command's fence", || {
        read(Path::new(&fence_1)).ends_with('\n')
    });

    // --wait 0s: one attempt, then 75 without running.
    let marker = scratch.arg("second-ran");
    sg(
        &url,
        &["run", "--key", &key, "--wait", "0s", "--", "touch", &marker],
    )
    .expect_code(75);
    assert!(!Path::new(&marker).exists());

    // A long --wait: runs once the first has finished, with a larger fence.
    let third_file = scratch.arg("third");
    let third_script = r#"if [ -e "$2" ]; then after=after; else after=during; fi
echo "$SYNCGUARD_FENCE $after" > "$1""#;
    let mut third = Running::start(syncguard(&[
        "--url",
        &url,
        "run",
        "--key",
        &key,
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        third_script,
        "sh",
        &third_file,
        &end_1,
    ]));
    // The first still holds the lock.
    sg(&url, &["status", "--key", &key]).expect_code(0);
    assert!(
        third.is_running() && !Path::new(&third_file).exists(),
        "the waiting run neither ran nor gave up while the first held the lock: {}",
        third.stderr_so_far()
    );
    File::create(&go).expect("create the go file");
    first.finish().expect_code(0);
    third.finish().expect_code(0);

    let first_fence = read(Path::new(&fence_1)).trim().to_owned();
    let third_seen = read(Path::new(&third_file));
    let (third_fence, when) = third_seen
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("the third command wrote {third_seen:?}"));
    assert_eq!(
        when, "after",
        "the waiting run ran after the first finished"
    );
    assert_fence(&first_fence);
    assert_fence(third_fence);
    assert!(
        third_fence > first_fence.as_str(),
        "{third_fence} > {first_fence}"
    );
    expect_unlocked(&url, &key);
}

#[test]
fn run_terminates_the_command_when_the_lease_is_lost_on_postgres() {
    run_whose_lock_is_taken_away(
        &pg_url(),
        "run-lost-pg",
        &["--ttl", HELD_TTL],
        |_, lock_id| {
            let deleted = shared_postgres()
                .client()
                .execute(
                    "DELETE FROM syncguard_locks WHERE lock_id = $1",
                    &[&lock_id],
                )
                .expect("delete the lock row");
            assert_eq!(deleted, 1);
        },
    );
}

#[test]
fn run_loses_the_lease_when_the_server_goes_away() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (scratch, key) = scratch_and_key("run-server-gone");
    let (running, pid) = start_run(
        &url,
        &key,
        &["--ttl", "1s"],
        &scratch.path("pid"),
        "exec sleep 30",
        &[],
    );
    // Renewals now fail until the lease has run out: then the lease counts as lost.
    redis.stop();
    expect_lost(running, pid);
}

#[test]
fn sigterm_while_waiting_for_the_lock_ends_run_without_the_command() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("run-sigterm-waiting");
    let holder = acquire(&url, &key, &[]);
    let marker = scratch.arg("ran");
    let mut waiting = Running::start(syncguard(&[
        "--url", &url, "run", "--key", &key, "--wait", "60s", "--", "touch", &marker,
    ]));
    assert!(waiting.is_running(), "{}", waiting.stderr_so_far());
    let out = waiting.terminate();
    assert!(
        out.code() == Some(143) || out.status.signal() == Some(15),
        "ended by (or as if by) SIGTERM: {}",
        out.context()
    );
    assert!(!Path::new(&marker).exists(), "the command ran");
    expect_held_then_release(&url, &key, &holder, "the holder's lock is untouched");
}

#[test]
fn run_passes_stdin_through() {
    let scratch = Scratch::new("run-stdin");
    let input = scratch.path("input");
    std::fs::write(&input, "line one\nline two\n").expect("write the input");
    let url = redis_url();
    let key = unique("run-stdin");
    let mut command = syncguard(&["--url", &url, "run", "--key", &key, "--", "cat"]);
    command.stdin(File::open(&input).expect("open the input"));
    let out = Running::start(command).finish();
    out.expect_code(0);
    assert_eq!(out.stdout, "line one\nline two\n", "{}", out.context());
}

/// `run` killed with SIGKILL can pass nothing on: its whole group ends with it (Linux) — the
/// command by the parent-death signal, its orphaned grandchild (which ignores SIGTERM) by
/// `run`'s watcher.
#[cfg(target_os = "linux")]
#[test]
fn the_whole_group_ends_when_run_is_killed() {
    let files = GroupFiles::new("run-killed");
    let key = unique("run-killed");
    let (running, pid, grandchild) = files.start_run(&redis_url(), &key, &[], "ignore");
    let sent = Command::new("kill")
        .args(["-KILL", &running.pid()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let out = running.finish();
    assert_eq!(out.status.signal(), Some(9), "{}", out.context());
    let deadline = Instant::now() + DEADLINE;
    while process_running(pid) || process_running(grandchild) {
        if Instant::now() >= deadline {
            files.stop();
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!(
                "the command ({pid}: {}) or its grandchild ({grandchild}: {}) outlived the \
                 killed run by {DEADLINE:?}",
                process_running(pid),
                process_running(grandchild)
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// After a `--wait` longer than the TTL, `run` confirms the lease with a renewal before it
/// starts the command: counted from when the wait began, the lease would be over already.
#[test]
fn run_after_a_wait_longer_than_the_ttl_runs_the_command() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("run-long-wait");
    let holder = acquire(&url, &key, &["--ttl", "60s"]);
    let marker = scratch.arg("ran");
    let waiting = Running::start(syncguard(&[
        "--url", &url, "run", "--key", &key, "--ttl", "2s", "--wait", "60s", "--", "touch", &marker,
    ]));
    let began = Instant::now();
    wait_for("a wait longer than the ttl", || {
        began.elapsed() > Duration::from_secs(3)
    });
    release(&url, str_field(&holder, "lockId"));
    let out = waiting.finish();
    out.expect_code(0);
    assert!(Path::new(&marker).exists(), "{}", out.context());
    expect_unlocked(&url, &key);
}

/// Like the shells (and `env`, `nice`, `timeout`): 127 when the command is not found, 126 when
/// it cannot be executed, with an error line; the lock is released.
#[test]
fn run_reports_a_command_that_cannot_start_as_the_shells_do() {
    let url = redis_url();
    let scratch = Scratch::new("run-cannot-start");
    let not_executable = scratch.path("data.txt");
    std::fs::write(&not_executable, "not a program\n").expect("write the file");
    let not_executable = not_executable.to_string_lossy().into_owned();
    for (program, code) in [
        ("/nonexistent/syncguard-test-program", 127),
        (not_executable.as_str(), 126),
    ] {
        let key = unique("run-cannot-start");
        let out = sg(&url, &["run", "--key", &key, "--", program]);
        out.expect_code(code);
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("error: "),
            "one error line: {}",
            out.context()
        );
        expect_unlocked(&url, &key);
    }
}

// ---------------------------------------------------------------------------------------------
// run: the command's whole process group
// ---------------------------------------------------------------------------------------------

/// A `sh -c` script for a grandchild of `run`: writes its pid to `$2`, then appends `tick` to
/// `$1` every 20 ms until the file `$3` exists or `$2` is gone (the test's scratch directory
/// was removed), for at most 1500 ticks. `$4` says what it does on SIGTERM: `0` dies (the
/// default), `ignore` ignores it (and so do its `sleep`s), a number n writes n more ticks first.
const GRANDCHILD: &str = r#"echo $$ > "$2"
case "$4" in 0) ;; ignore) trap '' TERM ;; *) trap 'n=$4' TERM ;; esac
n=-1; i=0
while [ "$n" -ne 0 ] && [ -e "$2" ] && [ ! -e "$3" ] && [ "$i" -lt 1500 ]; do
  echo tick >> "$1"; sleep 0.02; i=$((i+1))
  if [ "$n" -gt 0 ]; then n=$((n-1)); fi
done"#;

/// `run`'s command for the group tests: starts [`GRANDCHILD`] in the background with `$1`…`$4`
/// and waits for it — so a TERM to the command itself ends it at once, leaving the grandchild
/// orphaned.
const PARENT_OF_GRANDCHILD: &str = r#"sh -c "$5" grandchild "$1" "$2" "$3" "$4" & wait"#;

/// The files of one group test.
struct GroupFiles {
    scratch: Scratch,
}

impl GroupFiles {
    fn new(name: &str) -> GroupFiles {
        GroupFiles {
            scratch: Scratch::new(name),
        }
    }

    fn log(&self) -> PathBuf {
        self.scratch.path("log")
    }

    /// The script arguments for [`PARENT_OF_GRANDCHILD`]; `on_term` as [`GRANDCHILD`]'s `$4`.
    fn script_args<'a>(&'a self, on_term: &'a str, paths: &'a [String; 3]) -> [&'a str; 5] {
        [&paths[0], &paths[1], &paths[2], on_term, GRANDCHILD]
    }

    fn paths(&self) -> [String; 3] {
        [
            self.scratch.arg("log"),
            self.scratch.arg("grandchild-pid"),
            self.scratch.arg("stop"),
        ]
    }

    /// Waits until the grandchild has written; its pid.
    fn grandchild_ticking(&self) -> u32 {
        wait_for("the grandchild to write", || {
            read(&self.log()).contains("tick")
        });
        written_pid(&self.scratch.path("grandchild-pid")).expect("the grandchild's pid")
    }

    /// The log's lines.
    fn lines(&self) -> Vec<String> {
        read(&self.log()).lines().map(str::to_owned).collect()
    }

    /// Asserts the log ends with the second holder's one `marker` line, after some ticks.
    fn expect_marker_last(&self, context: &str) {
        let lines = self.lines();
        let markers = lines.iter().filter(|line| *line == "marker").count();
        assert_eq!(markers, 1, "one marker: {lines:?}\n{context}");
        assert_eq!(
            lines.last().map(String::as_str),
            Some("marker"),
            "a process of the first run's group wrote after the second holder took the lock: \
             {lines:?}\n{context}"
        );
        assert!(lines.len() > 1, "the grandchild wrote: {lines:?}");
    }

    /// `run --key key extra… --` [`PARENT_OF_GRANDCHILD`] with `on_term` as the grandchild's
    /// `$4`, started and ticking: the run, the command's pid and the grandchild's.
    fn start_run(
        &self,
        url: &str,
        key: &str,
        extra: &[&str],
        on_term: &str,
    ) -> (Running, u32, u32) {
        let paths = self.paths();
        let (running, pid) = start_run(
            url,
            key,
            extra,
            &self.scratch.path("pid"),
            PARENT_OF_GRANDCHILD,
            &self.script_args(on_term, &paths),
        );
        (running, pid, self.grandchild_ticking())
    }

    /// Ends any grandchild left behind by a failing implementation.
    fn stop(&self) {
        File::create(self.scratch.path("stop")).expect("create the stop file");
    }
}

/// `run --wait 30s -- sh -c 'echo marker >> log'`: the second holder, started now; it waits
/// for the lock, then appends its marker.
fn second_holder(url: &str, key: &str, log: &Path) -> Running {
    let log = log.to_string_lossy().into_owned();
    Running::start(syncguard(&[
        "--url",
        url,
        "run",
        "--key",
        key,
        "--wait",
        "30s",
        "--",
        "sh",
        "-c",
        r#"echo marker >> "$1""#,
        "sh",
        &log,
    ]))
}

/// SIGTERM to `run` goes to the whole group, and the lock is released only once every process
/// in it is gone: the orphaned grandchild, which writes 25 more ticks after SIGTERM, writes
/// them all before the second holder (waiting for the lock meanwhile) writes its marker.
fn sigterm_ends_the_whole_group_before_the_release(url: &str) {
    let files = GroupFiles::new("run-term-group");
    let key = unique("run-term-group");
    // --grace may be at most half of --ttl.
    let (first, pid, grandchild) =
        files.start_run(url, &key, &["--ttl", "60s", "--grace", "20s"], "25");
    let second = second_holder(url, &key, &files.log());

    let out = first.terminate();
    // The command (the grandchild's parent) died of the SIGTERM.
    out.expect_code(143);
    out.expect_group_gone(&[pid, grandchild]);
    second.finish().expect_code(0);
    files.stop();
    files.expect_marker_last(&out.context());
    expect_unlocked(url, &key);
}

/// The address of the server in `url` (`…@127.0.0.1:PORT/…`), and `url` through `proxy`.
fn proxied(url: &str, proxy: &FaultProxy) -> String {
    let (head, rest) = url.split_once("127.0.0.1:").expect("a loopback URL");
    let port_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    format!("{head}127.0.0.1:{}{}", proxy.port(), &rest[port_len..])
}

fn server_addr(url: &str) -> SocketAddr {
    let (_, rest) = url.split_once("127.0.0.1:").expect("a loopback URL");
    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
    SocketAddr::from(([127, 0, 0, 1], port.parse::<u16>().expect("a port")))
}

/// The lease's `expiresAtMs` in the store, read directly.
fn stored_expiry(url: &str, key: &str) -> i64 {
    let status = sg(url, &["status", "--key", key]);
    status.expect_code(0);
    int_field(&status.json(), "expiresAtMs")
}

/// On loss, the group gets SIGTERM --grace before the lease's local deadline — which is before
/// the store's record expires, so before anyone else can take the lock — and `run` exits 76
/// once it is gone: here the grandchild obeys the SIGTERM.
fn loss_ends_the_whole_group_before_another_holder_can_acquire(url: &str) {
    loss_ends_the_group_before_another_holder_can_acquire(
        url,
        "run-lost-group",
        &["--ttl", "3s", "--grace", "1s"],
        "0",
    );
}

/// As above, with a group that ignores SIGTERM: the SIGKILL at the lease's local deadline
/// (not --grace after it) ends it before the store's record expires. A grace of 2 s is far
/// longer than the 500 ms between the local deadline and the record's expiry plus the second
/// holder's polling: a group killed --grace after the deadline would be caught writing.
fn loss_ends_a_group_that_ignores_sigterm_before_another_holder_can_acquire(url: &str) {
    loss_ends_the_group_before_another_holder_can_acquire(
        url,
        "run-lost-stubborn",
        &["--ttl", "6s", "--grace", "2s"],
        "ignore",
    );
}

/// `run extra…` loses its lease, its grandchild doing `on_term` on SIGTERM; the grandchild
/// must have written its last tick before the second holder writes its marker.
///
/// `run` reaches the server through a proxy that delays each request by 500 ms, then swallows
/// everything; the second holder connects directly. The store counts a lease from when a
/// renewal arrives, `run` from when it sent it, so the lease runs out locally 500 ms before the
/// store's record does: wide enough that a loaded machine cannot flip the order, while a
/// signal later than the local deadline (such as when the stuck renewal finally fails), one
/// to the command alone, or a release before the group is gone, lets the grandchild write
/// after the marker.
fn loss_ends_the_group_before_another_holder_can_acquire(
    url: &str,
    name: &str,
    extra: &[&str],
    on_term: &str,
) {
    let files = GroupFiles::new(name);
    let key = unique(name);
    let proxy = FaultProxy::start(server_addr(url));
    let through_proxy = proxied(url, &proxy);
    let (first, pid, grandchild) = files.start_run(&through_proxy, &key, extra, on_term);

    // Two renewals confirmed by the store after the latency began: the second was surely
    // delayed, so the local deadline is ahead of the store's expiry by the latency.
    proxy.set_latency(Duration::from_millis(500));
    let mut expiry = stored_expiry(url, &key);
    for renewal in ["first", "second"] {
        wait_for(&format!("the {renewal} delayed renewal"), || {
            let now = stored_expiry(url, &key);
            let renewed = now != expiry;
            expiry = now;
            renewed
        });
    }
    let second = second_holder(url, &key, &files.log());
    proxy.set_mode(Mode::BlackHole);

    let out = first.finish();
    files.stop();
    out.expect_code(76);
    assert!(
        out.stderr.to_lowercase().contains("lost"),
        "stderr says the lock was lost: {}",
        out.context()
    );
    out.expect_group_gone(&[pid, grandchild]);
    second.finish().expect_code(0);
    files.expect_marker_last(&out.context());
}

/// A renewal can be applied by the store although its answer never comes back: the lease then
/// runs out here while the store keeps the record. `run` releases the lease once the command
/// is gone (here with `--on-lost warn`, so that the command outlives the loss), rather than
/// leaving the record to a TTL that such a renewal may have extended — as the test does here,
/// by extending the lock by its lock id while `run`'s own renewals are refused.
fn a_lease_that_ran_out_unanswered_is_released_at_the_end(url: &str) {
    let (scratch, key) = scratch_and_key("run-lost-release");
    let proxy = FaultProxy::start(server_addr(url));
    let through_proxy = proxied(url, &proxy);
    let (go, lock_id_file) = (scratch.arg("go"), scratch.arg("lock-id"));
    let script = format!(r#"echo "$SYNCGUARD_LOCK_ID" > "$2"; {WAIT_FOR_GO_FILE}"#);
    let (running, _) = start_run(
        &through_proxy,
        &key,
        &["--ttl", "3s", "--on-lost=warn"],
        &scratch.path("pid"),
        &script,
        &[&go, &lock_id_file],
    );
    wait_for("the lock id", || {
        read(Path::new(&lock_id_file)).ends_with('\n')
    });
    let lock_id = read(Path::new(&lock_id_file)).trim().to_owned();

    // From now on nothing of `run`'s reaches the server; the store keeps the lease for 60 s.
    proxy.set_mode(Mode::Refuse);
    proxy.cut_all();
    sg(url, &["extend", "--lock-id", &lock_id, "--ttl", "60s"]).expect_code(0);
    wait_for("run to report the loss", || {
        running.stderr_so_far().contains("lost the lock")
    });

    // The release at the end gets through again.
    proxy.set_mode(Mode::Pass);
    File::create(&go).expect("create the go file");
    let out = running.finish();
    out.expect_code(0);
    let status = sg(url, &["status", "--key", &key]);
    assert_eq!(
        status.code(),
        Some(1),
        "the lease was released when run ended: {}\n{}",
        status.context(),
        out.context()
    );
}

/// `run --ttl 5s --min-hold 30s` whose connection to the store goes into a black hole (a proxy
/// that accepts and forwards nothing) while its command runs, and stays so until `run` has
/// exited: neither the last renewals nor the release at the end reach the store. The key is
/// still held 8 s after the start — after the 5 s TTL and the store's tolerance — until the
/// hold's end, as a direct connection sees; `run` passes the command's exit code and says the
/// hold is set.
fn min_hold_outlasts_a_black_hole_at_the_end(url: &str) {
    let (scratch, key) = scratch_and_key("run-min-hold-outage");
    let proxy = FaultProxy::start(server_addr(url));
    let through_proxy = proxied(url, &proxy);
    let go = scratch.arg("go");
    let started = Instant::now();
    let (running, _) = start_run(
        &through_proxy,
        &key,
        &["--ttl", "5s", "--min-hold", "30s"],
        &scratch.path("pid"),
        WAIT_FOR_GO_FILE,
        &[&go],
    );
    proxy.set_mode(Mode::BlackHole);
    File::create(&go).expect("create the go file");
    let out = running.finish();
    proxy.set_mode(Mode::Pass);
    out.expect_code(0);

    wait_for("8 s since the start", || {
        started.elapsed() >= Duration::from_secs(8)
    });
    let status = sg(url, &["status", "--raw", "--key", &key]);
    status.expect_code(0);
    let info = status.json();
    assert!(
        int_field(&info, "expiresAtMs") >= int_field(&info, "acquiredAtMs") + 25_000,
        "the record ends with the 30 s hold, not with a 5 s lease: {}\n{}",
        status.context(),
        out.context()
    );
    out.expect_stderr("hold set until", "run says the hold is set");
    release(url, str_field(&info, "lockId"));
}

/// A hold is for a job that ran: a `run --min-hold` whose command could not start releases the
/// lock at once.
#[test]
fn a_run_whose_command_never_started_releases_at_once() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("min-hold-never-started");
    let missing = scratch.arg("no-such-program");
    sg(
        &url,
        &["run", "--key", &key, "--min-hold", "1m", "--", &missing],
    )
    .expect_code(127);
    expect_unlocked(&url, &key);
}

/// `--max-runtime`: the group is ended as on loss, `run` exits 124 (as timeout(1) does) once it
/// is gone, and the lock is released.
fn max_runtime_ends_the_whole_group_with_124(url: &str) {
    let files = GroupFiles::new("run-max-runtime");
    let key = unique("run-max-runtime");
    let paths = files.paths();
    let pid_file = files.scratch.path("pid");
    let pid_arg = pid_file.to_string_lossy().into_owned();
    let script = format!(r#"echo $$ > "$0"; {PARENT_OF_GRANDCHILD}"#);
    let mut args = vec![
        "--url",
        url,
        "run",
        "--key",
        &key,
        "--max-runtime",
        "3s",
        "--ttl",
        "60s",
        "--grace",
        "20s",
        "--",
        "sh",
        "-c",
        &script,
        &pid_arg,
    ];
    args.extend(files.script_args("0", &paths));
    let out = Running::start(syncguard(&args)).finish();
    files.stop();
    out.expect_code(124);
    out.expect_stderr("--max-runtime", "stderr names the limit");
    // Started at once, the command and the grandchild are all but sure to have written their
    // pids within the 3 s; one that had not was ended before it could (0: not written).
    let pids = [
        written_pid(&pid_file).unwrap_or(0),
        written_pid(&files.scratch.path("grandchild-pid")).unwrap_or(0),
    ];
    out.expect_group_gone(&pids);
    expect_unlocked(url, &key);
}

/// A group that ignores SIGTERM (the orphaned grandchild, and its `sleep`s) gets SIGKILL
/// `--grace` after the SIGTERM; then the lock is released.
fn a_group_that_ignores_sigterm_is_killed_after_the_grace(url: &str) {
    let files = GroupFiles::new("run-grace-group");
    let key = unique("run-grace-group");
    let (first, pid, grandchild) = files.start_run(url, &key, &["--grace", "1s"], "ignore");
    let out = first.terminate();
    files.stop();
    // The exit code is the command's: its parent shell died of the SIGTERM.
    out.expect_code(143);
    out.expect_stderr("SIGKILL", "stderr says the group was killed");
    out.expect_group_gone(&[pid, grandchild]);
    expect_unlocked(url, &key);
}

/// `-E`/`--conflict-exit-code` picks the exit code for "not acquired" (cron: 0 mails nothing);
/// the command does not run.
fn conflict_exit_code_is_chosen(url: &str) {
    let (scratch, key) = scratch_and_key("run-conflict");
    let holder = acquire(url, &key, &[]);
    let marker = scratch.arg("ran");
    for (args, code) in [
        (vec!["-E", "0"], 0),
        (vec!["--conflict-exit-code", "9", "--wait", "200ms"], 9),
        (vec!["--conflict-exit-code=255"], 255),
        (vec![], 75),
    ] {
        let mut all = vec!["run", "--key", &key];
        all.extend(args);
        all.extend(["--", "touch", &marker]);
        let out = sg(url, &all);
        out.expect_code(code);
        out.expect_stderr("held", "stderr says why the command did not run");
        assert!(
            !Path::new(&marker).exists(),
            "the command ran without the lock"
        );
    }
    for bad in ["256", "-1", "x"] {
        sg(
            url,
            &["run", "--key", &key, "-E", bad, "--", "touch", &marker],
        )
        .expect_error(2, "InvalidArgument");
    }
    assert!(
        !Path::new(&marker).exists(),
        "the command ran without the lock"
    );
    expect_held_then_release(url, &key, &holder, "the holder's lock is untouched");
}

/// The example in `syncguard --help` for several commands under one lock, run as printed (by
/// `sh`, with a `jq` stand-in): nothing runs unless `acquire` succeeded, and the lock is
/// released afterwards.
#[test]
fn the_help_example_never_runs_unlocked() {
    let url = redis_url();
    let scratch = Scratch::new("help-example");
    let key = unique("help-example");
    let help = Running::start(syncguard(&["--help"])).finish();
    help.expect_code(0);
    let lines: Vec<&str> = help.stdout.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.trim_start().starts_with("if out=$(syncguard acquire"))
        .unwrap_or_else(|| panic!("no acquire example in the help: {}", help.context()));
    let end = start
        + lines[start..]
            .iter()
            .position(|line| line.trim() == "fi")
            .expect("the example's `fi`");
    let example = lines[start..=end].join("\n");
    assert!(example.contains("--key deploy"), "{example}");
    let example = example.replace("--key deploy", &format!("--key '{key}'"));

    // `syncguard` and `jq` on the PATH; `./deploy.sh` records what it saw.
    let bin = scratch.path("bin");
    std::fs::create_dir_all(&bin).expect("create the bin directory");
    std::os::unix::fs::symlink(BIN, bin.join("syncguard")).expect("link the binary");
    let jq = bin.join("jq");
    std::fs::write(
        &jq,
        "#!/bin/sh\n[ \"$1 $2\" = \"-r .lockId\" ] || exit 2\n\
         sed -n 's/.*\"lockId\":\"\\([^\"]*\\)\".*/\\1/p'\n",
    )
    .expect("write the jq stand-in");
    let deploy = scratch.path("deploy.sh");
    std::fs::write(
        &deploy,
        format!("#!/bin/sh\nsyncguard status --key '{key}' > deployed\n"),
    )
    .expect("write deploy.sh");
    for file in [&jq, &deploy] {
        std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("make it executable");
    }
    let path = format!(
        "{}:{}",
        bin.to_string_lossy(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_example = || {
        let mut command = Command::new("sh");
        command
            .args(["-c", &example])
            .current_dir(&scratch.0)
            .env("PATH", &path)
            .env("SYNCGUARD_URL", &url)
            .stdin(Stdio::null());
        Running::start(command).finish()
    };
    let deployed = scratch.path("deployed");

    // Held by someone else: deploy.sh does not run.
    let holder = acquire(&url, &key, &[]);
    run_example();
    assert!(
        !deployed.exists(),
        "deploy.sh ran while another held the lock"
    );
    release(&url, str_field(&holder, "lockId"));

    // Free: deploy.sh runs under the lock, which is released afterwards.
    let out = run_example();
    out.expect_code(0);
    let seen: Json = serde_json::from_str(read(&deployed).trim())
        .unwrap_or_else(|e| panic!("deploy.sh saw no lock ({e}): {}", out.context()));
    assert_eq!(str_field(&seen, "keyHash"), hash_key(&key));
    expect_unlocked(&url, &key);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_arguments_exit_2_and_acquire_nothing() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("invalid");
    let long_key = "k".repeat(600);
    let long_holder = "h".repeat(257);
    let marker = scratch.arg("ran");
    let cases = [
        // URLs
        vec![
            "--url",
            "mysql://user:hunter2@db/app",
            "acquire",
            "--key",
            &key,
        ],
        vec![
            "--url",
            "redis://:hunter2@127.0.0.1:notaport/",
            "acquire",
            "--key",
            &key,
        ],
        vec![
            "--url",
            "postgres://app:hunter2@[::1/db",
            "acquire",
            "--key",
            &key,
        ],
        vec!["--url", "", "acquire", "--key", &key],
        vec!["acquire", "--key", &key], // no URL at all
        // durations
        vec!["--url", &url, "acquire", "--key", &key, "--ttl", "abc"],
        vec!["--url", &url, "acquire", "--key", &key, "--ttl", "0"],
        vec![
            "--url",
            &url,
            "acquire",
            "--key",
            &key,
            "--wait",
            "5 parsecs",
        ],
        vec![
            "--url", &url, "run", "--key", &key, "--ttl", "abc", "--", "touch", &marker,
        ],
        // --grace more than half of --ttl (with --on-lost kill, the default)
        vec![
            "--url", &url, "run", "--key", &key, "--ttl", "3s", "--grace", "2s", "--", "touch",
            &marker,
        ],
        // holders: empty, over 256 bytes, a control character
        vec!["--url", &url, "acquire", "--key", &key, "--holder", ""],
        vec![
            "--url",
            &url,
            "acquire",
            "--key",
            &key,
            "--holder",
            &long_holder,
        ],
        vec![
            "--url", &url, "run", "--key", &key, "--holder", "a\nb", "--", "touch", &marker,
        ],
        // keys and lock ids
        vec!["--url", &url, "acquire", "--ttl", "30s"],
        vec!["--url", &url, "acquire", "--key", &long_key],
        vec!["--url", &url, "run", "--", "touch", &marker],
        vec!["--url", &url, "status"],
        vec!["--url", &url, "release", "--lock-id", "short"],
        vec![
            "--url",
            &url,
            "extend",
            "--lock-id",
            "short",
            "--ttl",
            "30s",
        ],
        vec!["--url", &url, "status", "--lock-id", "short"],
    ];
    for args in &cases {
        Running::start(syncguard(args))
            .finish()
            .expect_error(2, "InvalidArgument");
    }
    // a min-hold below 1 ms, or longer than a lease can be
    for hold in ["0s", "400y"] {
        let args = [
            "run",
            "--key",
            &key,
            "--min-hold",
            hold,
            "--",
            "touch",
            &marker,
        ];
        sg(&url, &args).expect_error(2, "InvalidArgument");
    }

    // A bad URL in the environment is just as invalid.
    let mut command = syncguard(&["acquire", "--key", &key]);
    command.env("SYNCGUARD_URL", "mysql://user:hunter2@db/app");
    Running::start(command)
        .finish()
        .expect_error(2, "InvalidArgument");

    expect_unlocked(&url, &key);
    assert!(!Path::new(&marker).exists(), "run ran its command");
}

/// A missing argument is named in the error line: the user must not need `--help` to learn
/// what to add.
#[test]
fn missing_arguments_are_named() {
    let url = redis_url();
    let lock_id = generate_lock_id();
    for (args, missing) in [
        (vec!["--url", &url, "acquire", "--ttl", "30s"], "--key"),
        (vec!["--url", &url, "run", "--", "true"], "--key"),
        (vec!["--url", &url, "status", "--raw"], "--key"),
        (vec!["--url", &url, "release"], "--lock-id"),
        (
            vec!["--url", &url, "extend", "--lock-id", &lock_id],
            "--ttl",
        ),
    ] {
        let out = Running::start(syncguard(&args)).finish();
        out.expect_error(2, "InvalidArgument");
        out.expect_stderr(missing, &format!("the error names {missing}"));
    }
}

/// A usage error is one line with one hint: clap's own closing hint is not repeated.
#[test]
fn usage_errors_give_one_hint() {
    let url = redis_url();
    let key = unique("one-hint");
    for args in [
        vec!["--url", &url, "acquire", "--key", &key, "--ttl", "abc"],
        vec!["--url", &url, "acquire", "--key", &key, "--frobnicate"],
        vec!["--url", &url, "acquire", "--ttl", "5s"],
        vec![
            "--url",
            &url,
            "run",
            "--key",
            &key,
            "--max-runtime",
            "soon",
            "--",
            "true",
        ],
    ] {
        let out = Running::start(syncguard(&args)).finish();
        out.expect_error(2, "InvalidArgument");
        assert_eq!(
            out.stderr.matches("--help").count(),
            1,
            "one hint: {}",
            out.context()
        );
    }
    expect_unlocked(&url, &key);
}

#[test]
fn usage_errors_exit_2() {
    let url = redis_url();
    let key = unique("usage");
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["--url", &url, "acquire", "--key", &key, "--frobnicate"],
        vec!["--url", &url, "run", "--key", &key],
        vec!["--url", &url, "release"],
    ] {
        let out = Running::start(syncguard(&args)).finish();
        out.expect_code(2);
        assert!(!out.stderr.is_empty(), "{}", out.context());
    }
    expect_unlocked(&url, &key);
}

#[test]
fn help_for_every_command() {
    for command in ["", "acquire", "release", "extend", "status", "run", "setup"] {
        let mut args: Vec<&str> = command.split_whitespace().collect();
        args.push("--help");
        let out = Running::start(syncguard(&args)).finish();
        out.expect_code(0);
        assert!(out.stdout.contains("Usage:"), "{}", out.context());
        let lower = out.stdout.to_lowercase();
        let example = lower
            .find("example")
            .unwrap_or_else(|| panic!("no example in the help: {}", out.context()));
        // e.g. `syncguard --url redis://… acquire --key nightly`
        let shown = lower[example..]
            .lines()
            .any(|line| line.contains("syncguard") && line.contains(command));
        assert!(shown, "the example shows the command: {}", out.context());
    }
}

/// The exit codes and signals are one table: the README's CLI section and the CLI reference
/// (`docs/cli.md`) show exactly what `--help` and `run --help` print.
#[test]
fn the_exit_code_table_is_the_same_everywhere() {
    let help = Running::start(syncguard(&["--help"])).finish();
    help.expect_code(0);
    let start = help
        .stdout
        .find("Exit codes:")
        .unwrap_or_else(|| panic!("no exit codes in the help: {}", help.context()));
    let table = help.stdout[start..].trim_end();
    assert!(table.contains("Signals (run):"), "{table}");
    let run_help = Running::start(syncguard(&["run", "--help"])).finish();
    assert!(run_help.stdout.contains(table), "{}", run_help.context());
    for page in ["README.md", "docs/cli.md"] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page))
            .unwrap_or_else(|e| panic!("read {page}: {e}"));
        assert!(
            text.contains(&format!("```text\n{table}\n```")),
            "{page} shows the table --help prints:\n{table}"
        );
    }
}

#[test]
fn backend_down_exits_3() {
    let redis = format!("redis://:hunter2-down@127.0.0.1:{}/", free_port());
    let postgres = format!(
        "postgres://syncguard:hunter2-down@127.0.0.1:{}/postgres",
        free_port()
    );
    let scratch = Scratch::new("down");
    let marker = scratch.arg("ran");
    let key = unique("down");
    let lock_id = generate_lock_id();
    // Started all at once: connecting may take up to the connect timeout.
    let mut running = Vec::new();
    for url in [&redis, &postgres] {
        for args in [
            vec!["acquire", "--key", &key],
            vec!["status", "--key", &key],
            vec!["status", "--lock-id", &lock_id],
            vec!["release", "--lock-id", &lock_id],
            vec!["extend", "--lock-id", &lock_id, "--ttl", "5s"],
            vec!["run", "--key", &key, "--", "touch", &marker],
        ] {
            running.push(Running::start(syncguard(&with_url(url, &args))));
        }
    }
    for run in running {
        run.finish().expect_error(3, "ServiceUnavailable");
    }
    assert!(!Path::new(&marker).exists(), "run ran its command");
}

#[test]
fn rejected_credentials_exit_3() {
    let redis = RedisServer::start_with_password("the-right-one");
    let wrong_redis = format!("redis://:hunter2-wrong@127.0.0.1:{}/", redis.port);
    let wrong_pg = format!(
        "postgres://syncguard:hunter2-wrong@127.0.0.1:{}/postgres",
        shared_postgres().port
    );
    let key = unique("auth");
    for url in [&wrong_redis, &wrong_pg] {
        sg(url, &["acquire", "--key", &key]).expect_error(3, "AuthFailed");
    }
}

/// Three "machines" run `line` (the command's arguments, `JOB` standing for the job) as cron
/// starts it, 0.3 s apart; the job is a 2 s script that records each run. Returns the runs.
fn cron_on_three_machines(url: &str, name: &str, line: &[&str]) -> (Vec<Finished>, usize) {
    let (scratch, key) = scratch_and_key(name);
    let log = scratch.arg("runs");
    let job = format!("echo run >> '{log}'; sleep 2");
    let args: Vec<&str> = line
        .iter()
        .map(|arg| match *arg {
            "KEY" => key.as_str(),
            "JOB" => job.as_str(),
            other => other,
        })
        .collect();
    let mut machines = Vec::new();
    for machine in 0..3 {
        if machine > 0 {
            // cron's start jitter between machines, not a synchronisation
            thread::sleep(Duration::from_millis(300));
        }
        machines.push(Running::start(syncguard(&with_url(url, &args))));
    }
    let finished: Vec<Finished> = machines.into_iter().map(Running::finish).collect();
    let runs = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .count();
    (finished, runs)
}

/// The arguments of the README's crontab line, for `key` and the shell command `job`.
fn readme_crontab_line<'a>(key: &'a str, job: &'a str) -> [&'a str; 14] {
    [
        "run",
        "--key",
        key,
        "--min-hold",
        "1m",
        "--max-runtime",
        "2h",
        "-E",
        "0",
        "-q",
        "--",
        "sh",
        "-c",
        job,
    ]
}

/// The README's crontab line: with cron starting it on three machines within 0.6 s and a 2 s
/// job, the job runs exactly once and every machine exits 0 (the others find the key held,
/// also after the job ended, by `--min-hold`), and none prints anything (`-q`), so cron mails
/// nothing: neither the two that skip nor the one that ran (its hold was set).
fn the_readme_crontab_line_runs_the_job_once(url: &str) {
    let line = readme_crontab_line("KEY", "JOB");
    let (machines, runs) = cron_on_three_machines(url, "crontab-once", &line);
    for machine in &machines {
        machine.expect_code(0);
        machine.expect_silent("cron mails any output");
    }
    assert_eq!(runs, 1, "the job ran once per schedule");
}

/// The README's crontab line when the job is quick: the first machine's job has ended, and its
/// `run` exited, before the next machines start. Nothing holds the key for the job any more:
/// only `--min-hold` keeps the others out, and they exit 0 without running it.
fn the_readme_crontab_line_keeps_out_a_machine_that_starts_after_the_job(url: &str) {
    let (scratch, key) = scratch_and_key("crontab-quick");
    let log = scratch.arg("runs");
    let job = format!("echo run >> '{log}'");
    let line = readme_crontab_line(&key, &job);
    for machine in 0..3 {
        // Each starts once the one before has exited: its job is over.
        let finished = Running::start(syncguard(&with_url(url, &line))).finish();
        finished.expect_code(0);
        finished.expect_silent("cron mails any output");
        let runs = read(Path::new(&log)).lines().count();
        assert_eq!(runs, 1, "machine {machine}: the job ran once per schedule");
    }
}

/// `-q`: a conflict, at once or after `--wait`, prints nothing (`run`: not on stderr either;
/// `acquire`: no `{"ok":false}` line), and the exit code says it; errors still print.
fn quiet_conflicts_print_nothing(url: &str) {
    let (scratch, key) = scratch_and_key("quiet");
    let holder = acquire(url, &key, &[]);
    // The semaphore is apart from the lock: its one permit is held too.
    let permit = sg(url, &["acquire", "--key", &key, "--permits", "1"]);
    permit.expect_code(0);
    let permit_id = permit.json()["lockId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let marker = scratch.arg("ran");
    for (args, code) in [
        (vec!["run", "-q"], 75),
        (vec!["run", "--quiet", "--wait", "200ms"], 75),
        (vec!["run", "-q", "-E", "0"], 0),
        (vec!["run", "-q", "--permits", "1", "--wait", "0s"], 75),
    ] {
        let mut all = args;
        all.extend(["--key", &key, "--", "touch", &marker]);
        let out = sg(url, &all);
        out.expect_code(code);
        out.expect_silent("a quiet conflict");
        assert!(
            !Path::new(&marker).exists(),
            "the command ran without the lock"
        );
    }
    for args in [
        vec!["acquire", "-q", "--key", &key],
        vec!["acquire", "--quiet", "--key", &key, "--wait", "200ms"],
    ] {
        let out = sg(url, &args);
        out.expect_code(1);
        out.expect_silent("a quiet conflict");
    }
    // Errors still print.
    sg(
        url,
        &[
            "run", "-q", "--key", &key, "--ttl", "abc", "--", "touch", &marker,
        ],
    )
    .expect_error(2, "InvalidArgument");
    sg(url, &["acquire", "-q", "--key", ""]).expect_error(2, "InvalidArgument");
    sg(
        url,
        &[
            "release",
            "--permit",
            "--key",
            &key,
            "--lock-id",
            &permit_id,
        ],
    )
    .expect_json(0, &json!({"ok": true}));
    expect_held_then_release(url, &key, &holder, "the holder's lock is untouched");
}

/// The other pattern (docs/cli.md): every machine runs the job, one at a time (`--wait`).
fn with_wait_every_machine_runs_the_job_in_turn(url: &str) {
    let line = [
        "run", "--key", "KEY", "--wait", "1m", "--", "sh", "-c", "JOB",
    ];
    let (machines, runs) = cron_on_three_machines(url, "crontab-each", &line);
    for machine in &machines {
        machine.expect_code(0);
    }
    assert_eq!(runs, 3, "each machine ran the job");
}

// ---------------------------------------------------------------------------------------------
// Semaphores: --permits N
// ---------------------------------------------------------------------------------------------

on_redis_and_postgres!(
    semaphore_run_admits_at_most_n_at_once,
    semaphore_acquire_status_extend_release,
);

/// A `run --permits N` command: logs `start`, waits (at most 30 s) until `$2` starts are in
/// the log, so that the first ones are known to overlap, then logs `end`.
const PERMIT_JOB: &str = r#"echo start >> "$1"
i=0; while [ "$(grep -c start "$1")" -lt "$2" ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.2; echo end >> "$1""#;

/// The most `start`s without their `end` at any point of the log (lines appended in order).
fn most_at_once(log: &str) -> (usize, usize) {
    let (mut running, mut most, mut starts) = (0usize, 0usize, 0usize);
    for line in log.lines() {
        match line {
            "start" => {
                starts += 1;
                running += 1;
                most = most.max(running);
            }
            "end" => running = running.saturating_sub(1),
            other => panic!("unexpected line {other:?} in the log:\n{log}"),
        }
    }
    (most, starts)
}

/// Five `run --permits 2 --wait` on one key, started together: each command runs, exits 0,
/// and never more than 2 at once; the first two do overlap (each waits for the other to start),
/// so a semaphore of 1 (or the lock) would fail the test too.
fn semaphore_run_admits_at_most_n_at_once(url: &str) {
    let (scratch, key) = scratch_and_key("permits-run");
    let log = scratch.arg("log");
    let runs: Vec<Running> = (0..5)
        .map(|_| {
            Running::start(syncguard(&with_url(
                url,
                &[
                    "run",
                    "--key",
                    &key,
                    "--permits",
                    "2",
                    "--wait",
                    "2m",
                    "--",
                    "sh",
                    "-c",
                    PERMIT_JOB,
                    "job",
                    &log,
                    "2",
                ],
            )))
        })
        .collect();
    for run in runs {
        run.finish().expect_code(0);
    }
    let text = read(Path::new(&log));
    let (most, starts) = most_at_once(&text);
    assert_eq!(starts, 5, "every command ran:\n{text}");
    assert_eq!(most, 2, "2 commands at once, never more:\n{text}");
    assert_eq!(
        text.lines().filter(|line| *line == "end").count(),
        5,
        "{text}"
    );
    // Every permit was given back, and the key's lock was never involved.
    expect_unlocked(url, &key);
}

/// `acquire --permits` prints what it prints for a lock plus `permits`; `status --key` adds the
/// holders (with their descriptions; raw lock ids with `--raw`) to the key's lock, or shows them
/// alone; the lock and the semaphore on one key are apart; `extend`/`release --permit --key`
/// work on a permit and a plain `release` does not touch it.
fn semaphore_acquire_status_extend_release(url: &str) {
    let key = unique("permits-cli");
    let acquire_permit = |holder: &str| {
        let out = sg(
            url,
            &[
                "acquire",
                "--key",
                &key,
                "--permits",
                "2",
                "--holder",
                holder,
                "--ttl",
                "30s",
            ],
        );
        out.expect_code(0);
        let acquired = out.json();
        assert_eq!(
            fields(&acquired),
            ["expiresAtMs", "fence", "lockId", "ok", "permits"],
            "{}",
            out.context()
        );
        assert_eq!(acquired["ok"], json!(true));
        assert_eq!(acquired["permits"], json!(2));
        assert_lock_id(str_field(&acquired, "lockId"));
        assert_fence(str_field(&acquired, "fence"));
        acquired
    };
    let first = acquire_permit("first");
    let second = acquire_permit("second");
    assert!(str_field(&second, "fence") > str_field(&first, "fence"));
    sg(url, &["acquire", "--key", &key, "--permits", "2"])
        .expect_json(1, &json!({"ok": false, "reason": "locked"}));

    // Only the semaphore is held: status shows its holders alone, in fence order.
    let status = sg(url, &["status", "--key", &key]);
    status.expect_code(0);
    let shown = status.json();
    assert_eq!(fields(&shown), ["permits"], "{}", status.context());
    let holders = shown["permits"].as_array().expect("an array of permits");
    assert_eq!(holders.len(), 2, "{shown}");
    for (holder, (acquired, described)) in
        holders.iter().zip([(&first, "first"), (&second, "second")])
    {
        assert_eq!(fields(holder), INFO_FIELDS, "{shown}");
        assert_eq!(holder["holder"], json!(described), "{shown}");
        assert_eq!(
            str_field(holder, "lockIdHash"),
            hash_key(str_field(acquired, "lockId"))
        );
        assert_eq!(holder["fence"], acquired["fence"], "{shown}");
    }
    let raw = sg(url, &["status", "--raw", "--key", &key]);
    raw.expect_code(0);
    let raw = raw.json();
    let raw_ids: Vec<&str> = raw["permits"]
        .as_array()
        .expect("an array of permits")
        .iter()
        .map(|holder| str_field(holder, "lockId"))
        .collect();
    assert_eq!(
        raw_ids,
        [str_field(&first, "lockId"), str_field(&second, "lockId")],
        "{raw}"
    );

    // `list --permits` shows the permits (a line each, in fence order); `list`, the locks only.
    let listed = sg(url, &["list", "--permits", "--raw", "--prefix", &key]);
    listed.expect_code(0);
    let listed_ids: Vec<String> = json_lines(&listed)
        .iter()
        .map(|line| str_field(line, "lockId").to_owned())
        .collect();
    assert_eq!(listed_ids, raw_ids, "{}", listed.context());
    let locks = sg(url, &["list", "--prefix", &key]);
    locks.expect_code(0);
    assert!(json_lines(&locks).is_empty(), "{}", locks.context());

    // The key's lock is another thing: free, and then shown with the permits added.
    let lock = acquire(url, &key, &[]);
    let status = sg(url, &["status", "--key", &key]);
    status.expect_code(0);
    let shown = status.json();
    assert_eq!(
        str_field(&shown, "lockIdHash"),
        hash_key(str_field(&lock, "lockId")),
        "{shown}"
    );
    assert_eq!(
        shown["permits"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );
    release(url, str_field(&lock, "lockId"));

    // extend and release name a permit by its key and lock id.
    let first_id = str_field(&first, "lockId");
    let permit = |command: &str, extra: &[&str]| on_permit(url, command, &key, first_id, extra);
    let extended = permit("extend", &["--ttl", "1h"]);
    extended.expect_code(0);
    assert!(
        int_field(&extended.json(), "expiresAtMs") > int_field(&first, "expiresAtMs"),
        "{}",
        extended.context()
    );
    sg(url, &["release", "--lock-id", first_id]).expect_json(1, &json!({"ok": false}));
    permit("release", &[]).expect_json(0, &json!({"ok": true}));
    permit("release", &[]).expect_json(1, &json!({"ok": false}));
    permit("extend", &["--ttl", "1h"]).expect_json(1, &json!({"ok": false}));
    expect_permits_in_status(url, &key, 1);
    on_permit(url, "release", &key, str_field(&second, "lockId"), &[])
        .expect_json(0, &json!({"ok": true}));
    expect_unlocked(url, &key);
}

/// `command --permit --key key --lock-id lock_id extra…`: `release` or `extend` of a permit.
fn on_permit(url: &str, command: &str, key: &str, lock_id: &str, extra: &[&str]) -> Finished {
    let mut args = vec![command, "--permit", "--key", key, "--lock-id", lock_id];
    args.extend_from_slice(extra);
    sg(url, &args)
}

/// A `run --permits 1` killed with SIGKILL (and its command with it) cannot give its permit
/// back: another holder is refused until the permit's TTL runs out, then gets it.
#[test]
fn semaphore_permit_of_a_killed_run_is_freed_at_its_ttl() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("permits-killed");
    let (pid_file, go) = (scratch.path("pid"), scratch.arg("go"));
    let (running, pid) = start_run(
        &url,
        &key,
        &["--permits", "1", "--ttl", HELD_TTL],
        &pid_file,
        WAIT_FOR_GO_FILE,
        &[&go],
    );
    let status = sg(&url, &["status", "--key", &key]);
    status.expect_code(0);
    assert_eq!(
        status.json()["permits"][0]["holder"],
        json!(format!("{}:{} sh", hostname(), running.pid())),
        "the run holds the permit: {}",
        status.context()
    );
    let sent = Command::new("kill")
        .args(["-KILL", &running.pid()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -KILL {}", running.pid());
    // The command too, where the parent-death signal has not ended it already (Linux does:
    // then this kill finds nothing, which is fine).
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let out = running.finish();
    assert_eq!(out.status.signal(), Some(9), "{}", out.context());
    wait_for("the command to be gone", || !process_running(pid));

    // Nothing gave the permit back: it is held until its TTL (renewed every second or so, it
    // has most of the 5 s left).
    sg(&url, &["acquire", "--key", &key, "--permits", "1"])
        .expect_json(1, &json!({"ok": false, "reason": "locked"}));

    let mut taken = None;
    wait_for("the killed run's permit to run out", || {
        let out = sg(&url, &["acquire", "--key", &key, "--permits", "1"]);
        match out.code() {
            Some(0) => {
                taken = Some(out.json());
                true
            }
            Some(1) => false,
            _ => panic!("acquire failed: {}", out.context()),
        }
    });
    let taken = taken.expect("acquired");
    assert_eq!(taken["permits"], json!(1), "{taken}");
    on_permit(&url, "release", &key, str_field(&taken, "lockId"), &[])
        .expect_json(0, &json!({"ok": true}));
    let _ = File::create(&go);
}

/// `--permits` out of 1..=1000 (or not a number), and `--permit`/`--key` without each other on
/// release and extend, are bad usage (exit 2) found before any I/O: against a server that is
/// not there the error is the usage error, and run runs nothing.
#[test]
fn semaphore_bad_permits_are_usage_errors_before_any_io() {
    let down = format!("redis://127.0.0.1:{}/", free_port());
    let scratch = Scratch::new("permits-bad");
    let marker = scratch.arg("ran");
    let key = unique("permits-bad");
    let lock_id = generate_lock_id();
    let mut cases: Vec<(Vec<&str>, &str)> = Vec::new();
    for permits in ["0", "1001", "two"] {
        cases.push((
            vec!["acquire", "--key", &key, "--permits", permits],
            "--permits",
        ));
    }
    for permits in ["0", "1001"] {
        let run = vec![
            "run",
            "--key",
            &key,
            "--permits",
            permits,
            "--",
            "touch",
            &marker,
        ];
        cases.push((run, "--permits"));
    }
    cases.extend([
        (vec!["release", "--permit", "--lock-id", &lock_id], "--key"),
        (
            vec!["release", "--key", &key, "--lock-id", &lock_id],
            "--permit",
        ),
        (
            vec!["extend", "--permit", "--lock-id", &lock_id, "--ttl", "5s"],
            "--key",
        ),
    ]);
    for (args, names) in cases {
        let out = sg(&down, &args);
        out.expect_error(2, "InvalidArgument");
        out.expect_stderr(names, "the error names the flag");
    }
    assert!(!Path::new(&marker).exists(), "run ran its command");
    // 1000 is allowed: then the backend is reached, and is down.
    sg(&down, &["acquire", "--key", &key, "--permits", "1000"])
        .expect_error(3, "ServiceUnavailable");
}
