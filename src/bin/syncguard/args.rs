//! The command line, as clap parses it: the global options, the commands and their
//! arguments, with the checks clap makes while parsing (`--permits`, `list --limit`) and the
//! ones made on the parsed arguments before any backend is reached.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use syncguard::driver::MAX_PERMITS;
use syncguard::{DEFAULT_LIST_LIMIT, LeaseKind, LockError, MAX_LIST_LIMIT};

use crate::duration::parse_duration;
use crate::help::{BREAK_HELP, LIST_HELP, STATUS_HELP, WATCH_HELP, examples, exit_codes, run_help};
use crate::input;
use crate::lock_ids::LockIds;
use crate::outcome::EXIT_NOT_ACQUIRED;

/// Distributed locks for shell scripts and cron jobs (Redis, PostgreSQL, Firestore).
#[derive(Parser)]
#[command(
    name = "syncguard",
    version,
    after_help = concat!(examples!(), "\n\n", exit_codes!()),
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Backend: redis://…, rediss://…, redis-cluster://h1:p1,h2:p2/,
    /// redis-sentinel://s1:p1,s2:p2/NAME, postgres://…, firestore://PROJECT[/DATABASE]
    /// (memory: is refused: its locks live inside one process)
    #[arg(long, global = true, env = "SYNCGUARD_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// Print on stderr what syncguard does: each backend operation (every acquisition
    /// attempt, renewal and release, with hashed keys and lock ids) and the library's notes
    /// and warnings. -vv adds trace lines. With -q, both apply: -q silences a skip, -v still
    /// prints what it saw.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Break a key (an operator's forced release): remove its live holder(s) whatever their
    /// lock ids, and keep the key from anyone for --delay (default: the rest of the broken
    /// lease) so that the broken holder stops first; prints what was broken (exit 1 and
    /// {"ok":false,"reason":"nothing held"} if nothing was).
    #[command(after_help = BREAK_HELP)]
    Break {
        #[command(flatten)]
        args: BreakArgs,
    },
    /// Show who leads the election KEY (the holder of the lock on it, as Locker::campaign
    /// takes it): {"value","term","sinceMs","expiresAtMs"}, or null and exit 1 when nobody
    /// does.
    #[command(after_help = "Example:\n  syncguard leader --key scheduler\n  \
        → {\"value\":\"node-a:8080\",\"term\":\"000000000000007\",\"sinceMs\":…,\"expiresAtMs\":…}\n  \
        syncguard leader --key scheduler --watch   (one line per change, until SIGTERM/SIGINT: exit 0)")]
    Leader {
        /// The election's name: the key of its lock.
        #[arg(long, allow_hyphen_values = true)]
        key: String,
        /// Follow the leader: a line with the leader now, then one at each change (another
        /// leader or term, a proclaimed value, or null), until SIGTERM or SIGINT (exit 0). Read
        /// again at each release the store announces, and at least once a second.
        #[arg(long)]
        watch: bool,
    },
    /// Follow a key's state without holding it: one JSON line per state ("held" with its
    /// holders, "free", "released", "expired", "broken") until SIGTERM or SIGINT (exit 0).
    #[command(after_help = WATCH_HELP)]
    Watch {
        /// The key to follow.
        #[arg(long, allow_hyphen_values = true)]
        key: String,
        /// Follow the key's shared holders only (acquire/run --shared).
        #[arg(long, conflicts_with = "permits")]
        shared: bool,
        /// Follow the permits of the key's semaphore (acquire/run --permits N; N, if given, is
        /// checked and otherwise unused) instead of its lock.
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1",
              value_parser = parse_permits)]
        permits: Option<u32>,
        /// Exit 0 at the first free state ("free", "released" or "expired"): at once if the
        /// key is free now.
        #[arg(long)]
        until_free: bool,
    },
    /// Create the PostgreSQL tables (idempotent); the other backends need none.
    #[command(after_help = "Example:\n  syncguard --url postgres://app@db/app setup")]
    Setup,
}

/// `--permits`: a number from 1 to [`MAX_PERMITS`], checked before any backend is reached.
fn parse_permits(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|permits| (1..=MAX_PERMITS).contains(permits))
        .ok_or_else(|| format!("must be a number from 1 to {MAX_PERMITS}"))
}

/// `break`'s arguments (checked before any I/O by [`crate::break_key`]).
#[derive(clap::Args)]
pub struct BreakArgs {
    /// The key whose holders are broken.
    #[arg(long, allow_hyphen_values = true)]
    pub key: String,
    /// Break the key's shared holders (acquire/run --shared) instead of its lock.
    #[arg(short = 's', long, conflicts_with = "permits")]
    pub shared: bool,
    /// Break the permits of the key's semaphore (acquire/run --permits N) instead of its lock:
    /// all of them, or the one --lock-id names. N is checked as acquire checks it (1 to 1000)
    /// and otherwise not used: every permit of the key is a candidate.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    pub permits: Option<u32>,
    /// Break only the holder granted under this lock id (a permit, a shared holder, or the
    /// lock while that lease still holds it).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub lock_id: Option<String>,
    /// Why: stored with the marker and shown by `status` while the delay lasts.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub reason: Option<String>,
    /// How long each broken holder's place stays taken after the break, so that the broken
    /// holder (which learns at its next renewal: run --on-lost kill ends its command) stops
    /// before anyone else starts. 0: free at once. [default: the rest of the broken lease]
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub delay: Option<Duration>,
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
pub struct LockArgs {
    /// The lock's key. May repeat (exclusive locks only): every key is held together, all or
    /// none, waiting while any is held without holding the others (see docs/cli.md).
    #[arg(
        long = "key",
        value_name = "KEY",
        required = true,
        allow_hyphen_values = true
    )]
    pub keys: Vec<String>,
    /// Lease length: 500ms, 30s, 1m30s, 2h, 1d, or milliseconds (`run` renews it every third of
    /// ttl minus --grace).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How long to wait while someone else holds it.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub wait: Duration,
    /// While waiting (--wait), take no place in the key's line: take the lock whenever it is
    /// free, ahead of the waiters in line (as TypeScript SyncGuard clients do). Without it,
    /// waiters are served in the order they came.
    #[arg(long)]
    pub no_line: bool,
    /// Who holds the lock, as `status` shows it (at most 256 bytes, no control or format
    /// characters). [default: run: HOST:PID PROGRAM (run's own pid, the file name of the
    /// command, never its arguments); acquire: HOST:PPID (the process that ran acquire)]
    #[arg(long, allow_hyphen_values = true, value_name = "TEXT")]
    pub holder: Option<String>,
    /// Take one of N permits of the key's semaphore instead of the lock: at most N holders at
    /// a time (1 to 1000; give every holder of the key the same N). The semaphore is stored
    /// apart from the key's lock.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    pub permits: Option<u32>,
    /// Hold the key shared (flock -s): any number of shared holders at once, and none beside
    /// the exclusive lock (a plain run/acquire); waits in the key's line behind a waiting
    /// exclusive holder. Not seen by TypeScript SyncGuard clients.
    #[arg(short = 's', long, conflicts_with_all = ["permits", "exclusive"])]
    pub shared: bool,
    /// Hold the key exclusively (flock -x): the default, accepted for flock's scripts.
    #[arg(short = 'x', long, conflicts_with = "permits")]
    pub exclusive: bool,
    /// Print nothing when the lock stays held (flock(1)'s habit), so that cron mails nothing
    /// for a skip: acquire prints no {"ok":false} line (exit 1 says it), run no note on stderr
    /// (its exit code, 75 or -E N, says it), nor, with --min-hold, the note that the hold was
    /// set. Errors (exit 2, 3), a lost lease (76) and a hold not set still print. -E 0 alone
    /// does not imply it.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `release` and `extend`: the lock ids they act on.
#[derive(clap::Args)]
pub struct LockIdArgs {
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
    pub fn checked(self) -> syncguard::Result<LockIds> {
        LockIds::of(self.lock_ids, self.acquired.as_deref())
    }
}

/// `release` and `extend`: the lock id is a semaphore permit's or a shared hold's, of `--key`
/// (both are found by their key and lock id; a lock by its lock id alone).
#[derive(clap::Args)]
pub struct PermitOf {
    /// The lock id is a permit's (acquire --permits): of the semaphore on --key.
    #[arg(long, requires = "key", conflicts_with = "shared")]
    pub permit: bool,
    /// The lock id is a shared hold's (acquire --shared): of the lock on --key.
    #[arg(long, requires = "key")]
    pub shared: bool,
    /// The key (with --permit or --shared).
    #[arg(long, allow_hyphen_values = true)]
    pub key: Option<String>,
}

impl PermitOf {
    /// `--key` alone names nothing a lock id could be found under: bad usage (exit 2), checked
    /// before any I/O, with the key's own check.
    pub fn check(&self) -> syncguard::Result<()> {
        if self.key.is_some() && !self.permit && !self.shared {
            return Err(LockError::invalid_argument(
                "--key names a permit's semaphore (--permit) or a shared hold's lock (--shared): give one",
            ));
        }
        self.key.as_deref().map(input::key).transpose().map(drop)
    }

    /// What the lock id of `--key` is: a shared hold's, or a permit's.
    pub fn kind(&self) -> LeaseKind {
        if self.shared {
            LeaseKind::Shared
        } else {
            LeaseKind::Permit
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_1_to_max() {
        assert_eq!(parse_permits("1"), Ok(1));
        assert_eq!(parse_permits("1000"), Ok(MAX_PERMITS));
        for bad in ["0", "1001", "-1", "two", ""] {
            assert!(parse_permits(bad).is_err(), "{bad}");
        }
    }
}
