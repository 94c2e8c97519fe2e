//! `syncguard`: distributed locks for shell scripts and cron jobs — a distributed `flock(1)`.
//!
//! Every command prints one JSON object on stdout (`list`: one a line, for each lock); errors
//! are one line on stderr,
//! `error: <Code>: <message>`. The exit codes, and what `run` does on each signal, are in one
//! table, [`EXIT_CODES`], which `--help` prints.
//!
//! Modules: [`duration`] parses durations; [`holder`] says who holds a lock taken here;
//! [`input`] checks the input before any backend is reached; [`keys`] are the keys `--key`
//! names (one, or several held together); [`hold`] and [`held`] what is taken and what is
//! then held; [`run`] is the `run` supervisor;
//! [`group`] the process group it runs the command in; [`metrics_file`] writes
//! `run --metrics-file`; [`verbose`] is `-v`.

mod connecting;
mod duration;
mod group;
mod held;
mod hold;
mod holder;
mod input;
mod keys;
mod lock_ids;
mod metrics_file;
mod run;
mod verbose;
mod watcher;

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use syncguard::driver::{Holder, MAX_PERMITS};
use syncguard::{
    Backoff, CancelToken, Coverage, DEFAULT_LIST_LIMIT, ErrorCode, Heartbeat, Jitter, LockBackend,
    LockError, LockList, LockOptions, Locker, MAX_LIST_LIMIT, get_by_id, get_by_id_raw, get_by_key,
    get_by_key_raw,
};

use crate::duration::parse_duration;
use crate::hold::Hold;
use crate::keys::Keys;
use crate::lock_ids::LockIds;

/// The text of [`EXIT_CODES`], as a macro so that `concat!` can put it into the help.
macro_rules! exit_codes {
    () => {
        "\
Exit codes:
  0        success (run: the command's own exit code, passed through, whatever it is)
  1        a negative answer: acquire found the lock held; release/extend/status found none
  2        bad usage or argument (including a memory: URL, which means nothing across processes)
  3        a backend error: unreachable, credentials refused, tables missing, a record or key
           the backend holds that syncguard cannot use (e.g. a Redis key of another type)
  75 or N  run: the lock was not acquired within --wait (N from -E/--conflict-exit-code)
  76       run: the lock was lost (or about to be: no renewal confirmed --grace before the
           lease's deadline) while the command ran (--on-lost kill)
  124      run: the command reached --max-runtime
  126/127  run: the command could not be executed / was not found
  128+n    run: the command was killed by signal n (or run got signal n while waiting)
A command's own exit code may be any of these: pick an -E code it never uses.

Signals (run):
  TERM INT HUP QUIT  while waiting for the lock: stop waiting, run nothing, exit 128+n.
                     while the command runs: sent on to its whole process group (with SIGCONT);
                     SIGKILL to the group if it is still there --grace later; exit with the
                     command's code once every process of the group is gone; then release.
  KILL               cannot be passed on: the whole group is killed with run (Linux: by a watcher
                     process and a parent-death signal); the lock expires at --ttl.
  others             their default effect on run itself."
    };
}

/// Exit codes, and what `run` does on each signal: the one table, shown by `--help` and
/// `run --help` (and copied in the README's CLI section).
pub const EXIT_CODES: &str = exit_codes!();

/// The top-level help's examples.
macro_rules! examples {
    () => {
        "\
Examples:
  export SYNCGUARD_URL=redis://127.0.0.1:6379/
  # cron on several machines: the report runs once per schedule (at most 2 hours); the key
  # stays held 5 minutes at least, so the others skip it, exiting 0 and printing nothing
  # (-E 0 -q: cron mails nothing for a skip)
  syncguard run --key nightly-report --min-hold 5m --max-runtime 2h -E 0 -q -- ./make-report.sh
  # every machine runs the job, one at a time
  syncguard run --key reindex --wait 1h -- ./reindex.sh
  # at most 3 machines export at once (a semaphore: one of 3 permits instead of the lock)
  syncguard run --key partner-export --permits 3 --wait 1h -- ./export.sh
  # several commands under one lock: nothing runs unless acquire succeeded
  if out=$(syncguard acquire --key deploy --ttl 5m); then
    ./deploy.sh
    syncguard release --lock-id \"$(printf '%s' \"$out\" | jq -r .lockId)\"
  fi"
    };
}

/// Distributed locks for shell scripts and cron jobs (Redis, PostgreSQL, Firestore).
#[derive(Parser)]
#[command(
    name = "syncguard",
    version,
    after_help = concat!(examples!(), "\n\n", exit_codes!()),
    disable_help_subcommand = true
)]
struct Cli {
    /// Backend: redis://…, rediss://…, redis-cluster://h1:p1,h2:p2/,
    /// redis-sentinel://s1:p1,s2:p2/NAME, postgres://…, firestore://PROJECT[/DATABASE]
    /// (memory: is refused: its locks live inside one process)
    #[arg(long, global = true, env = "SYNCGUARD_URL", hide_env_values = true)]
    url: Option<String>,
    /// Print on stderr what syncguard does: each backend operation (every acquisition
    /// attempt, renewal and release, with hashed keys and lock ids) and the library's notes
    /// and warnings. -vv adds trace lines. With -q, both apply: -q silences a skip, -v still
    /// prints what it saw.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// `run --help`'s epilogue, before the exit codes.
macro_rules! run_help {
    () => {
        "\
Example:
  syncguard run --key nightly-report --wait 10m --max-runtime 1h -- ./make-report.sh --full

The command runs in a process group of its own (so, from an interactive shell, it cannot read
the terminal: give it input from a file or a pipe), with SYNCGUARD_FENCE, SYNCGUARD_LOCK_ID
and SYNCGUARD_KEY in its environment, while run renews the lease every third of --ttl minus
--grace (--on-lost warn: of --ttl). The lock is released only once every process of the group
has exited, background jobs included. With --on-lost kill, the lease's local deadline (the send
time of the last renewal the backend confirmed, plus --ttl; the backend's record never expires
earlier) bounds the group: SIGTERM at the deadline minus --grace, SIGKILL at the deadline, so
that it is gone before another holder can take the lock; a renewal that finds the lock gone
ends it at once the same way. At --max-runtime and on a signal, the group gets SIGTERM, then
SIGKILL after --grace. At the end run releases the lock, after a loss too (a renewal may have
been applied although its answer never came), waiting at most 2s for the backend (once a
renewal in flight has come back); if it does not answer, run says so and exits, and the lock
expires at its ttl.

With several --key (exclusive locks only), run holds every key's lock together, all or none: it
waits while any is held without holding the others, and the set is lost as a whole when any lease
is. SYNCGUARD_KEY, SYNCGUARD_FENCE and SYNCGUARD_LOCK_ID then hold one value per key, one per
line, in the keys' byte order (NFC, duplicates collapsed): read them with
  printf '%s\\n' \"$SYNCGUARD_FENCE\" | while read -r fence; do …; done

With --permits N, run holds one of the N permits of the key's semaphore instead of the lock, so
that at most N commands run at once under that key; all of the above applies to the permit
(SYNCGUARD_LOCK_ID and SYNCGUARD_FENCE are the permit's), and the exit codes say \"lock\" for it.
The semaphore is not the key's lock: `run --key K` and `run --key K --permits 1` do not exclude
each other. Give every run on one key the same N.

"
    };
}

#[derive(Subcommand)]
enum Command {
    /// Take a lock (or, with --permits, one of the permits of a semaphore) and keep it until
    /// --ttl (it is not released when this command exits).
    #[command(
        after_help = "Example:\n  syncguard acquire --key deploy --ttl 5m --wait 30s\n  \
        → {\"ok\":true,\"lockId\":\"…\",\"fence\":\"000000000000001\",\"expiresAtMs\":…}  (exit 1 and \
        {\"ok\":false,\"reason\":\"locked\"} if held)\n  \
        syncguard acquire --key export --permits 3\n  \
        → the same, plus \"permits\":3 (exit 1 and {\"ok\":false,\"reason\":\"locked\"} if all 3 are held);\n  \
        give it back with: syncguard release --permit --key export --lock-id \"$id\"\n  \
        out=$(syncguard acquire --key acct:1 --key acct:2 --ttl 5m)\n  \
        → one line per key, in key order, each with its \"key\"; give them back with:\n  \
        syncguard release --acquired \"$out\""
    )]
    Acquire {
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Release a lock (or a semaphore's permit: --permit --key K) taken with `acquire`.
    #[command(
        after_help = "Example:\n  syncguard release --lock-id \"$id\"   → {\"ok\":true}\n  \
        syncguard release --permit --key export --lock-id \"$id\"   → {\"ok\":true}\n  \
        syncguard release --acquired \"$out\"   (what acquire --key a --key b printed)\n\n\
        Several lock ids: every one is tried; {\"ok\":true} (exit 0) when each was held, else\n\
        {\"ok\":false,\"notHeld\":[positions from 1]} (exit 1); if the backend failed on some,\n\
        one error line naming each by position (exit 3)."
    )]
    Release {
        #[command(flatten)]
        ids: LockIdArgs,
        #[command(flatten)]
        permit: PermitOf,
    },
    /// Set a held lock (or a semaphore's permit: --permit --key K) to expire --ttl from now.
    #[command(
        after_help = "Example:\n  syncguard extend --lock-id \"$id\" --ttl 5m   → {\"ok\":true,\"expiresAtMs\":…}\n  \
        syncguard extend --permit --key export --lock-id \"$id\" --ttl 5m\n  \
        syncguard extend --acquired \"$out\" --ttl 5m   (several: every one tried; \"expiresAtMs\" the\n  \
        earliest; {\"ok\":false,\"notHeld\":[positions from 1]} and exit 1 if some were not held)"
    )]
    Extend {
        #[command(flatten)]
        ids: LockIdArgs,
        /// New lease length, from now.
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
        #[command(flatten)]
        permit: PermitOf,
    },
    /// Show the live lock on a key or held under a lock id (exit 1 and `null` if none); with
    /// --key, also the holders of the key's semaphore, if it has any.
    #[command(after_help = STATUS_HELP)]
    Status {
        /// The key to look at.
        #[arg(
            long,
            allow_hyphen_values = true,
            required_unless_present = "lock_id",
            conflicts_with = "lock_id"
        )]
        key: Option<String>,
        /// The lock id to look for.
        #[arg(long, allow_hyphen_values = true)]
        lock_id: Option<String>,
        /// Include the raw key and lock id (otherwise only their hashes).
        #[arg(long)]
        raw: bool,
    },
    /// List the live locks, sorted by key: one JSON object a line, as `status` prints one
    /// (exit 0, also when there are none); with --permits, the permits of the semaphores
    /// instead, sorted by key then fence.
    #[command(after_help = LIST_HELP)]
    List {
        /// Only the locks whose key starts with this (default: every lock).
        #[arg(long, default_value = "", allow_hyphen_values = true)]
        prefix: String,
        /// The most locks to print.
        #[arg(long, default_value_t = DEFAULT_LIST_LIMIT, value_parser = parse_list_limit)]
        limit: usize,
        /// Include the raw keys and lock ids (otherwise only their hashes).
        #[arg(long)]
        raw: bool,
        /// List the held permits of semaphores (acquire/run --permits) instead of locks.
        #[arg(long, conflicts_with = "shared")]
        permits: bool,
        /// List the shared holders of locks (acquire/run --shared) instead of exclusive locks.
        #[arg(long)]
        shared: bool,
    },
    /// Run a command while holding the lock (a distributed flock(1)), or with --permits N one
    /// of the N permits of the key's semaphore; release once every process it started has
    /// exited.
    #[command(after_help = concat!(run_help!(), exit_codes!()))]
    Run {
        #[command(flatten)]
        lock: LockArgs,
        /// How long the command's process group has between SIGTERM and SIGKILL. With --on-lost
        /// kill, SIGTERM goes out --grace before the lease's local deadline, so --grace may be
        /// at most half of --ttl (the rest is for renewals). [default: 5s, or half of --ttl if
        /// that is less]
        #[arg(long, value_parser = parse_duration)]
        grace: Option<Duration>,
        #[command(flatten)]
        flags: RunFlags,
    },
    /// Create the PostgreSQL tables (idempotent); the other backends need none.
    #[command(after_help = "Example:\n  syncguard --url postgres://app@db/app setup")]
    Setup,
}

/// `list --help`'s epilogue.
const LIST_HELP: &str = "\
Example:
  syncguard list --prefix report: --raw
  → {\"keyHash\":\"…\",\"lockIdHash\":\"…\",\"expiresAtMs\":…,\"acquiredAtMs\":…,\"fence\":\"…\",\"key\":\"report:daily\",\"lockId\":\"…\"}

The work is bounded: when more locks match than --limit, the first ones are printed and a note
on stderr says so; a backend that stops at its own bound first (Redis: keys scanned; Firestore:
pages read) prints what it found and says that locks may be missing. Both exit 0.

With --permits, the held permits of semaphores (acquire/run --permits) are listed instead of
locks: one line per permit, sorted by key, then fence; --limit counts permits.";

/// `status --help`'s epilogue.
const STATUS_HELP: &str = "\
Example:
  syncguard status --key deploy --raw

With --key, the holders of the key's semaphore (taken with acquire/run --permits), if it has
any, are added as \"permits\": an array of the objects status prints for a lock, in fence
order (lock ids hashed unless --raw). A key whose lock is free but whose semaphore is held
prints {\"permits\":[…]} alone (exit 0); a key with neither prints null (exit 1).
The lock's shared holders (acquire/run --shared) are added as \"readers\", in fence order.
Waiters in line for the lock are added as \"waiters\" (for the semaphore: \"permitWaiters\"),
in the order they will be served: [{\"placeHash\",\"expiresAtMs\",\"holder\",\"shared\"}, …]. Where the
store keeps no semaphores (PostgreSQL tables without this version's setup), the lock is shown
alone. --lock-id finds locks only.";

/// `--permits`: a number from 1 to [`MAX_PERMITS`], checked before any backend is reached.
fn parse_permits(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|permits| (1..=MAX_PERMITS).contains(permits))
        .ok_or_else(|| format!("must be a number from 1 to {MAX_PERMITS}"))
}

/// `list --limit`: a number from 1 to [`MAX_LIST_LIMIT`].
fn parse_list_limit(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|limit| (1..=MAX_LIST_LIMIT).contains(limit))
        .ok_or_else(|| format!("must be a number from 1 to {MAX_LIST_LIMIT}"))
}

/// The lock a command takes: `acquire` and `run` share these.
#[derive(clap::Args)]
struct LockArgs {
    /// The lock's key. May repeat (exclusive locks only): every key is held together, all or
    /// none, waiting while any is held without holding the others (see docs/cli.md).
    #[arg(
        long = "key",
        value_name = "KEY",
        required = true,
        allow_hyphen_values = true
    )]
    keys: Vec<String>,
    /// Lease length: 500ms, 30s, 1m30s, 2h, 1d, or milliseconds (`run` renews it every third of
    /// ttl minus --grace).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait while someone else holds it.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// Who holds the lock, as `status` shows it (at most 256 bytes, no control or format
    /// characters). [default: run: HOST:PID PROGRAM (run's own pid, the file name of the
    /// command, never its arguments); acquire: HOST:PPID (the process that ran acquire)]
    #[arg(long, allow_hyphen_values = true, value_name = "TEXT")]
    holder: Option<String>,
    /// Take one of N permits of the key's semaphore instead of the lock: at most N holders at
    /// a time (1 to 1000; give every holder of the key the same N). The semaphore is stored
    /// apart from the key's lock.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    permits: Option<u32>,
    /// Hold the key shared (flock -s): any number of shared holders at once, and none beside
    /// the exclusive lock (a plain run/acquire); waits in the key's line behind a waiting
    /// exclusive holder. Not seen by TypeScript SyncGuard clients.
    #[arg(short = 's', long, conflicts_with_all = ["permits", "exclusive"])]
    shared: bool,
    /// Hold the key exclusively (flock -x): the default, accepted for flock's scripts.
    #[arg(short = 'x', long, conflicts_with = "permits")]
    exclusive: bool,
    /// Print nothing when the lock stays held (flock(1)'s habit), so that cron mails nothing
    /// for a skip: acquire prints no {"ok":false} line (exit 1 says it), run no note on stderr
    /// (its exit code, 75 or -E N, says it), nor, with --min-hold, the note that the hold was
    /// set. Errors (exit 2, 3), a lost lease (76) and a hold not set still print. -E 0 alone
    /// does not imply it.
    #[arg(short, long)]
    quiet: bool,
}

/// `release` and `extend`: the lock ids they act on.
#[derive(clap::Args)]
struct LockIdArgs {
    /// The lock id `acquire` printed. May repeat: each is tried (acquire with several keys
    /// prints one per key).
    #[arg(
        long = "lock-id",
        value_name = "ID",
        required_unless_present = "acquired",
        allow_hyphen_values = true
    )]
    lock_ids: Vec<String>,
    /// What `acquire` printed (its lines, one per key: out=$(syncguard acquire --key a --key
    /// b …); release --acquired "$out"): every lock id in it. For locks only: a permit or a
    /// shared hold needs --permit/--shared --key K --lock-id ID.
    #[arg(
        long,
        value_name = "OUTPUT",
        conflicts_with_all = ["lock_ids", "permit", "shared"],
        allow_hyphen_values = true
    )]
    acquired: Option<String>,
}

impl LockIdArgs {
    /// The ids, checked before any I/O.
    fn checked(self) -> syncguard::Result<LockIds> {
        LockIds::of(self.lock_ids, self.acquired.as_deref())
    }
}

/// `release` and `extend`: the lock id is a semaphore permit's or a shared hold's, of `--key`
/// (both are found by their key and lock id; a lock by its lock id alone).
#[derive(clap::Args)]
struct PermitOf {
    /// The lock id is a permit's (acquire --permits): of the semaphore on --key.
    #[arg(long, requires = "key", conflicts_with = "shared")]
    permit: bool,
    /// The lock id is a shared hold's (acquire --shared): of the lock on --key.
    #[arg(long, requires = "key")]
    shared: bool,
    /// The key (with --permit or --shared).
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,
}

impl PermitOf {
    /// `--key` alone names nothing a lock id could be found under: bad usage (exit 2), checked
    /// before any I/O, with the key's own check.
    fn check(&self) -> syncguard::Result<()> {
        if self.key.is_some() && !self.permit && !self.shared {
            return Err(LockError::invalid_argument(
                "--key names a permit's semaphore (--permit) or a shared hold's lock (--shared): give one",
            ));
        }
        self.key.as_deref().map(input::key).transpose().map(drop)
    }

    /// Releases the lease `lock_id` names: `true` when this call removed it.
    fn release(&self, backend: &dyn LockBackend, lock_id: &str) -> syncguard::Result<bool> {
        match (self.key.as_deref(), self.shared) {
            (Some(key), true) => backend.release_shared(key, lock_id),
            (Some(key), false) => backend.release_permit(key, lock_id),
            (None, _) => backend.release(lock_id),
        }
    }

    /// Extends the lease `lock_id` names by `ttl`: its new expiry, if it was live.
    fn extend(
        &self,
        backend: &dyn LockBackend,
        lock_id: &str,
        ttl: Duration,
    ) -> syncguard::Result<Option<i64>> {
        match (self.key.as_deref(), self.shared) {
            (Some(key), true) => backend.extend_shared(key, lock_id, ttl),
            (Some(key), false) => backend.extend_permit(key, lock_id, ttl),
            (None, _) => backend.extend(lock_id, ttl),
        }
    }
}

/// `run`'s own flags, handed to the supervisor as they are.
#[derive(clap::Args)]
pub struct RunFlags {
    /// What to do if the lock is lost while the command runs.
    #[arg(long, value_enum, default_value = "kill")]
    pub on_lost: OnLost,
    /// Longest the command may run (timeout(1)'s limit): then its process group is ended
    /// as on loss, run exits 124 and the lock is released. Default: no limit.
    #[arg(long, value_parser = parse_duration)]
    pub max_runtime: Option<Duration>,
    /// Hold the lock at least this long after acquiring it, even when the command ends
    /// sooner, fails or is killed, or the backend is unreachable at its end: the lease is
    /// taken (and renewed) to last until acquisition + D at least; when the command ends,
    /// run sets it to end then and exits at once, leaving the record to expire, and says
    /// on stderr until when it holds. Not for a command that never started: the lock is
    /// then released at once. Cron on several machines then runs a job once per schedule:
    /// make D longer than the machines' clock skew plus cron's start jitter, and shorter
    /// than the schedule's period. Default: none.
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub min_hold: Option<Duration>,
    /// Exit code when the lock was not acquired within --wait (as flock(1)'s -E).
    #[arg(
        short = 'E',
        long,
        default_value_t = EXIT_NOT_ACQUIRED,
        value_name = "N"
    )]
    pub conflict_exit_code: u8,
    /// When run ends, however it ends (ran, skipped, lost, a signal, --max-runtime, an
    /// error), write its figures to this file in the Prometheus text format, for
    /// node_exporter's textfile collector (name it *.prom in the collector's folder): a
    /// temporary file in the same folder, renamed over PATH. A file that cannot be written is
    /// a warning on stderr (with -q too), never a changed exit code. See docs/cli.md.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,
    /// The command and its arguments (after `--`), passed on as they are, byte for byte,
    /// whatever their encoding.
    #[arg(
        last = true,
        required = true,
        value_name = "CMD",
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
}

/// What `run` does when the lease is lost.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// End the command's process group (SIGTERM --grace before the lease's local deadline,
    /// SIGKILL at it) and exit 76.
    Kill,
    /// Only warn on stderr; the command runs on.
    Warn,
}

/// What a command ends with.
pub enum Outcome {
    /// One JSON line on stdout, then this exit code.
    Printed(Value, u8),
    /// One JSON line on stdout for each value (perhaps none), then exit 0.
    Lines(Vec<Value>),
    /// Only this exit code (`run`: the command wrote its own output).
    Exit(u8),
}

/// `run`: the lock was not acquired within `--wait` (unless `--conflict-exit-code` says
/// otherwise); `EX_TEMPFAIL`, as flock(1) uses.
const EXIT_NOT_ACQUIRED: u8 = 75;
/// `run`: the lease was lost while the command ran.
pub const EXIT_LOST: u8 = 76;
/// `run`: the command reached `--max-runtime` (as timeout(1) exits).
pub const EXIT_MAX_RUNTIME: u8 = 124;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match execute(cli) {
        Ok(Outcome::Printed(value, code)) => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{value}");
            ExitCode::from(code)
        }
        Ok(Outcome::Lines(values)) => {
            let mut stdout = std::io::stdout().lock();
            for value in values {
                let _ = writeln!(stdout, "{value}");
            }
            ExitCode::SUCCESS
        }
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        Err(error) => fail(&error),
    }
}

/// What clap could not parse: help and version go to stdout (exit 0); everything else is one
/// `InvalidArgument` line with one hint (exit 2).
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    // clap's message spans lines (the names of missing arguments follow on the next ones, then
    // the usage and its own hint); keep the message itself, on one line, and add one hint.
    let text = error.to_string();
    let message: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty() && !line.starts_with("tip:"))
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    fail(&LockError::invalid_argument(format!(
        "{message} (see --help)"
    )))
}

/// Prints the error line and exits with [`error_exit_code`].
fn fail(error: &LockError) -> ExitCode {
    eprintln!("error: {}: {}", error.code(), error.message());
    ExitCode::from(error_exit_code(error))
}

/// The exit code of a command that ended with `error`: 2 for bad input, 3 for everything else.
pub fn error_exit_code(error: &LockError) -> u8 {
    if error.code() == ErrorCode::InvalidArgument {
        2
    } else {
        3
    }
}

fn execute(cli: Cli) -> syncguard::Result<Outcome> {
    verbose::install(cli.verbose);
    let url = cli.url.filter(|url| !url.trim().is_empty());
    // `run` checks its own arguments first, and the URL when it connects, so that its
    // --metrics-file is written whatever it refuses.
    if !matches!(cli.command, Command::Run { .. }) {
        backend_url(url.as_deref())?;
    }
    // Every command checks its input before it calls this: bad usage exits 2 at once, without
    // waiting for a server that may never answer (see `input`).
    let backend = || connect(url.as_deref());
    match cli.command {
        Command::Acquire { lock } => {
            let holder = match lock.holder.as_deref() {
                Some(given) => Some(holder::given(given)?),
                None => holder::of_acquire(),
            };
            let keys = Keys::of(
                &lock.keys,
                Hold::of(lock.shared, lock.permits) == Hold::Exclusive,
            )?;
            input::ttl(lock.ttl)?;
            let options = acquire_options(&lock, holder);
            options.validate()?;
            // --wait covers connecting too: a store that is restarting is waited for.
            let asked = Instant::now();
            let backend = connecting::within(backend, lock.wait, &CancelToken::new())?;
            let wait = lock.wait.saturating_sub(asked.elapsed());
            acquire(backend, &lock, &keys, options, wait)
        }
        Command::Release { ids, permit } => {
            let ids = ids.checked()?;
            permit.check()?;
            let backend = backend()?;
            let release = |id: &str| {
                permit
                    .release(backend.as_ref(), id)
                    .map(|released| released.then_some(()))
            };
            if let Some(id) = ids.single() {
                let released = release(id)?.is_some();
                return Ok(Outcome::Printed(
                    json!({ "ok": released }),
                    u8::from(!released),
                ));
            }
            let (_, not_held) = ids.each("released", release)?;
            Ok(several_answered(json!({ "ok": true }), not_held))
        }
        Command::Extend { ids, ttl, permit } => {
            let ids = ids.checked()?;
            input::ttl(ttl)?;
            permit.check()?;
            let backend = backend()?;
            let extend = |id: &str| permit.extend(backend.as_ref(), id, ttl);
            if let Some(id) = ids.single() {
                return Ok(match extend(id)? {
                    Some(expires_at_ms) => {
                        Outcome::Printed(json!({ "ok": true, "expiresAtMs": expires_at_ms }), 0)
                    }
                    None => Outcome::Printed(json!({ "ok": false }), 1),
                });
            }
            let (expiries, not_held) = ids.each("extended", extend)?;
            // The set lasts as long as its earliest lease.
            let earliest = expiries.into_iter().min();
            Ok(several_answered(
                json!({ "ok": true, "expiresAtMs": earliest }),
                not_held,
            ))
        }
        Command::Status { key, lock_id, raw } => {
            key.as_deref().map(input::key).transpose()?;
            lock_id.as_deref().map(input::lock_id).transpose()?;
            status(backend()?.as_ref(), key.as_deref(), lock_id.as_deref(), raw)
        }
        Command::List {
            prefix,
            limit,
            raw,
            permits,
            shared,
        } => {
            input::prefix(&prefix)?;
            let listed = match (permits, shared) {
                (true, _) => Listed::Permits,
                (false, true) => Listed::Shared,
                (false, false) => Listed::Locks,
            };
            list(backend()?.as_ref(), &prefix, limit, raw, listed)
        }
        Command::Run { lock, grace, flags } => {
            let url = url.clone();
            run::run(move || connect(url.as_deref()), lock, grace, flags)
        }
        Command::Setup => setup(backend_url(url.as_deref())?),
    }
}

/// The URL given (`--url`, `SYNCGUARD_URL`), if it names a backend a command can use.
fn backend_url(url: Option<&str>) -> syncguard::Result<&str> {
    let url = url.ok_or_else(|| {
        LockError::invalid_argument("no backend URL: pass --url or set SYNCGUARD_URL")
    })?;
    if scheme(url) == "memory" {
        return Err(LockError::invalid_argument(
            "memory: keeps its locks inside one process, so a lock taken by one syncguard \
             command means nothing to the next; use redis://, postgres:// or firestore://",
        ));
    }
    Ok(url)
}

/// The backend the URL names (see [`backend_url`]), observed with `-v`.
fn connect(url: Option<&str>) -> syncguard::Result<Box<dyn LockBackend>> {
    syncguard::connect(backend_url(url)?).map(verbose::observed)
}

/// `release`/`extend` of several lock ids, every one tried: `all_held` (exit 0) when each lease
/// was there, else `{"ok":false,"notHeld":[positions from 1]}` (exit 1).
fn several_answered(all_held: Value, not_held: Vec<usize>) -> Outcome {
    if not_held.is_empty() {
        Outcome::Printed(all_held, 0)
    } else {
        Outcome::Printed(json!({ "ok": false, "notHeld": not_held }), 1)
    }
}

/// `acquire`'s lease: no heartbeat, as this process ends now and the lease must outlive it
/// until --ttl.
fn acquire_options(lock: &LockArgs, holder: Option<Holder>) -> LockOptions {
    let options = waiting(LockOptions::default())
        .ttl(lock.ttl)
        .heartbeat(Heartbeat::Off);
    match holder {
        Some(holder) => options.holder(holder.into_string()),
        None => options,
    }
}

fn acquire(
    backend: Box<dyn LockBackend>,
    lock: &LockArgs,
    keys: &Keys,
    options: LockOptions,
    wait: Duration,
) -> syncguard::Result<Outcome> {
    let locker = Locker::with_defaults(backend, options);
    let hold = Hold::of(lock.shared, lock.permits);
    let Some(held) = hold.take(&locker, keys, wait)? else {
        if lock.quiet {
            return Ok(Outcome::Exit(1));
        }
        return Ok(Outcome::Printed(
            json!({ "ok": false, "reason": "locked" }),
            1,
        ));
    };
    // The lock outlives this process: the caller releases it with `release`.
    let leases = held.detach();
    if let Keys::Several(keys) = keys {
        // One line per key, in key order, each naming its key: `release --acquired` takes
        // them back.
        let lines = keys
            .iter()
            .zip(leases)
            .map(|(key, lease)| {
                json!({
                    "ok": true,
                    "key": key,
                    "lockId": lease.lock_id,
                    "fence": lease.fence,
                    "expiresAtMs": lease.expires_at_ms,
                })
            })
            .collect();
        return Ok(Outcome::Lines(lines));
    }
    let Some(lease) = leases.into_iter().next() else {
        return Err(LockError::internal("the acquisition returned no lease"));
    };
    let mut printed = json!({
        "ok": true,
        "lockId": lease.lock_id,
        "fence": lease.fence,
        "expiresAtMs": lease.expires_at_ms,
    });
    // A permit's or a shared hold's lock id means nothing without its key and `--permit` or
    // `--shared`: say which it is.
    if let Some(fields) = printed.as_object_mut() {
        match hold {
            Hold::Permit(permits) => drop(fields.insert("permits".to_owned(), json!(permits))),
            Hold::Shared => drop(fields.insert("shared".to_owned(), json!(true))),
            Hold::Exclusive => {}
        }
    }
    Ok(Outcome::Printed(printed, 0))
}

/// `--grace` when not given.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// `run`'s `--grace`: as given, or [`DEFAULT_GRACE`] capped at half of `ttl`. With `--on-lost
/// kill` the group gets SIGTERM `grace` before the lease's local deadline, and the renewals
/// have the rest of the TTL: a grace above half of it would leave them less than the grace.
fn grace_for(
    grace: Option<Duration>,
    ttl: Duration,
    on_lost: OnLost,
) -> syncguard::Result<Duration> {
    let most = ttl / 2;
    match grace {
        None => Ok(DEFAULT_GRACE.min(most)),
        Some(grace) if on_lost == OnLost::Kill && grace > most => {
            Err(LockError::invalid_argument(format!(
                "--grace {} is more than half of --ttl {}: with --on-lost kill, run sends SIGTERM \
                 --grace before the lease could run out, and the rest of the ttl is for renewals; \
                 give a shorter --grace or a longer --ttl",
                humantime::format_duration(grace),
                humantime::format_duration(ttl)
            )))
        }
        Some(grace) => Ok(grace),
    }
}

/// The pace of a wait: between acquisition attempts (jittered), and between attempts to
/// connect to a store that is down.
pub const RETRY_DELAY: Duration = Duration::from_millis(250);

/// Long `--wait`s poll at a steady pace: exponential backoff would leave minutes between
/// attempts, taking the lock long after it was freed.
pub fn waiting(options: LockOptions) -> LockOptions {
    options
        .backoff(Backoff::Fixed)
        .jitter(Jitter::Equal)
        .retry_delay(RETRY_DELAY)
}

fn status(
    backend: &dyn LockBackend,
    key: Option<&str>,
    lock_id: Option<&str>,
    raw: bool,
) -> syncguard::Result<Outcome> {
    let (found, permits, readers): (Option<Value>, Vec<Value>, Vec<Value>) =
        match (key, lock_id, raw) {
            (Some(key), _, false) => (
                get_by_key(backend, key)?.map(|info| json!(info)),
                shown_unless_refused(backend.permit_holders(key))?,
                shown_unless_refused(backend.readers(key))?,
            ),
            (Some(key), _, true) => (
                get_by_key_raw(backend, key)?.map(|info| json!(info)),
                shown_unless_refused(backend.permit_holders_raw(key))?,
                shown_unless_refused(backend.readers_raw(key))?,
            ),
            // Permits and shared holds are found by their key: a lock id alone names locks only.
            (None, Some(id), false) => (
                get_by_id(backend, id)?.map(|info| json!(info)),
                Vec::new(),
                Vec::new(),
            ),
            (None, Some(id), true) => (
                get_by_id_raw(backend, id)?.map(|info| json!(info)),
                Vec::new(),
                Vec::new(),
            ),
            (None, None, _) => {
                return Err(LockError::invalid_argument(
                    "status needs --key or --lock-id",
                ));
            }
        };
    let live = found.is_some() || !permits.is_empty() || !readers.is_empty();
    let (waiters, permit_waiters) = match key {
        Some(key) => (
            shown_unless_refused(backend.line(key))?,
            shown_unless_refused(backend.permit_line(key))?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let shown = with_extras(
        found,
        [
            ("readers", readers),
            ("permits", permits),
            ("waiters", waiters),
            ("permitWaiters", permit_waiters),
        ],
    );
    Ok(Outcome::Printed(shown, u8::from(!live)))
}

/// The permits or waiters `status` shows beside the lock: none where the store keeps no
/// semaphores. `InvalidArgument` here, for a key the lock lookup accepted, is the store refusing semaphores
/// (a backend without them, PostgreSQL tables without this version's semaphore functions): a
/// store that cannot hold a permit has no holders, and the lock's status stands.
fn shown_unless_refused<T: serde::Serialize>(
    holders: syncguard::Result<Vec<T>>,
) -> syncguard::Result<Vec<Value>> {
    match holders {
        Ok(holders) => Ok(json_values(&holders)),
        Err(error) if error.code() == ErrorCode::InvalidArgument => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// What `status` prints: the lock's object as before, with each of `extras` (`"permits"`, the
/// semaphore's holders; `"waiters"` and `"permitWaiters"`, the lock's and the semaphore's lines)
/// added only when it has entries, so that the output for a key nobody else uses is unchanged
/// (and stays what `list` prints for it); `{"permits":[…]}` alone when only the semaphore is
/// held; `null` when nothing is.
fn with_extras<const N: usize>(lock: Option<Value>, extras: [(&str, Vec<Value>); N]) -> Value {
    if extras.iter().all(|(_, values)| values.is_empty()) {
        return lock.unwrap_or(Value::Null);
    }
    let mut shown = match lock {
        Some(Value::Object(fields)) => fields,
        // A lock's info always serialises to an object; anything else is kept under a name
        // rather than lost.
        Some(other) => serde_json::Map::from_iter([("lock".to_owned(), other)]),
        None => serde_json::Map::new(),
    };
    for (name, values) in extras {
        if !values.is_empty() {
            shown.insert(name.to_owned(), Value::Array(values));
        }
    }
    Value::Object(shown)
}

/// `list`: the locks (or the semaphores' permits), one JSON line each; a note on stderr when
/// that is not all of them.
/// What `list` lists.
#[derive(Clone, Copy)]
enum Listed {
    Locks,
    Permits,
    Shared,
}

fn list(
    backend: &dyn LockBackend,
    prefix: &str,
    limit: usize,
    raw: bool,
    listed: Listed,
) -> syncguard::Result<Outcome> {
    let (lines, coverage) = match (listed, raw) {
        (Listed::Locks, true) => json_lines(backend.list_raw(prefix, limit)?),
        (Listed::Locks, false) => json_lines(backend.list(prefix, limit)?),
        (Listed::Permits, true) => json_lines(backend.list_permits_raw(prefix, limit)?),
        (Listed::Permits, false) => json_lines(backend.list_permits(prefix, limit)?),
        (Listed::Shared, true) => json_lines(backend.list_shared_raw(prefix, limit)?),
        (Listed::Shared, false) => json_lines(backend.list_shared(prefix, limit)?),
    };
    let what = match listed {
        Listed::Locks => "locks",
        Listed::Permits => "permits",
        Listed::Shared => "shared holders",
    };
    match coverage {
        Coverage::Complete => {}
        Coverage::LimitReached => eprintln!(
            "syncguard: more {what} match than --limit {limit}: these are the first; raise \
             --limit or narrow --prefix"
        ),
        _ => {
            let name = backend.capabilities().backend;
            eprintln!(
                "syncguard: the listing stopped at the {name} backend's bound on its work: \
                 {what} may be missing; {}",
                work_bound_advice(name)
            );
        }
    }
    Ok(Outcome::Lines(lines))
}

/// What lifts a backend's bound on a listing's work. Redis' bound counts every key `SCAN`
/// examines, under the prefix or not, so a narrower prefix does not help there.
fn work_bound_advice(backend: &str) -> String {
    match backend {
        "redis" => format!(
            "raise the URL parameter list_scan_budget (default {}) above the number of keys \
             in the database: every key counts, under --prefix or not",
            syncguard::redis::DEFAULT_LIST_SCAN_BUDGET
        ),
        _ => "narrow --prefix".to_owned(),
    }
}

/// One JSON value per listed lock or permit, and whether that is all of them.
fn json_lines<T: serde::Serialize>(listed: LockList<T>) -> (Vec<Value>, Coverage) {
    (json_values(&listed.locks), listed.coverage)
}

/// One JSON value per lock or permit.
fn json_values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items.iter().map(|item| json!(item)).collect()
}

/// `setup`: creates the PostgreSQL tables; the other backends need nothing, which it says.
fn setup(url: &str) -> syncguard::Result<Outcome> {
    if matches!(scheme(url).as_str(), "postgres" | "postgresql") {
        return setup_postgres(url);
    }
    // Still a check that the URL is one this build can use.
    let backend = syncguard::connect(url)?;
    eprintln!(
        "syncguard: the {} backend needs no setup; nothing to do",
        backend.capabilities().backend
    );
    Ok(Outcome::Printed(json!({ "ok": true }), 0))
}

// The `cli` feature brings every backend, PostgreSQL's among them.
fn setup_postgres(url: &str) -> syncguard::Result<Outcome> {
    syncguard::postgres::PostgresBackend::connect(url.trim())?.setup_schema()?;
    Ok(Outcome::Printed(json!({ "ok": true }), 0))
}

/// The URL's scheme, lowercased (`""` when it has none).
fn scheme(url: &str) -> String {
    url.trim()
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn permits_are_1_to_max() {
        assert_eq!(parse_permits("1"), Ok(1));
        assert_eq!(parse_permits("1000"), Ok(MAX_PERMITS));
        for bad in ["0", "1001", "-1", "two", ""] {
            assert!(parse_permits(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_adds_permits_and_waiters_only_when_there_are_any() {
        let with_permits = |lock, permits| with_extras(lock, [("permits", permits)]);
        let lock = json!({ "fence": "000000000000001" });
        assert_eq!(with_permits(None, Vec::new()), Value::Null);
        assert_eq!(with_permits(Some(lock.clone()), Vec::new()), lock);
        let permit = json!({ "fence": "000000000000002" });
        assert_eq!(
            with_permits(Some(lock.clone()), vec![permit.clone()]),
            json!({ "fence": "000000000000001", "permits": [permit.clone()] })
        );
        assert_eq!(
            with_permits(None, vec![permit.clone()]),
            json!({ "permits": [permit] })
        );
        let waiter = json!({ "holder": "host:1 job" });
        assert_eq!(
            with_extras(
                Some(lock),
                [("permits", Vec::new()), ("waiters", vec![waiter.clone()])]
            ),
            json!({ "fence": "000000000000001", "waiters": [waiter] })
        );
    }

    #[test]
    fn grace_defaults_to_5s_or_half_the_ttl() {
        assert_eq!(grace_for(None, secs(30), OnLost::Kill).ok(), Some(secs(5)));
        assert_eq!(
            grace_for(None, secs(3), OnLost::Kill).ok(),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            grace_for(None, secs(3), OnLost::Warn).ok(),
            Some(Duration::from_millis(1_500))
        );
    }

    #[test]
    fn grace_above_half_the_ttl_is_refused_with_on_lost_kill_only() {
        assert_eq!(
            grace_for(Some(secs(15)), secs(30), OnLost::Kill).ok(),
            Some(secs(15))
        );
        let refused = grace_for(Some(secs(16)), secs(30), OnLost::Kill).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidArgument);
        assert!(refused.message().contains("--grace 16s"), "{refused}");
        assert_eq!(
            grace_for(Some(secs(60)), secs(30), OnLost::Warn).ok(),
            Some(secs(60))
        );
    }
}
