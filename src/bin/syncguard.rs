//! `syncguard`: distributed locks for shell scripts and cron jobs — a distributed `flock(1)`.
//!
//! Every command prints one JSON object on stdout. Exit codes: 0 success, 1 a negative answer
//! (held, absent), 2 bad usage or argument, 3 a backend error, 75 `run` could not get the lock
//! in time, 76 `run` lost the lock while the command ran. Errors are one line on stderr:
//! `error: <Code>: <message>`.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command as Process, ExitCode, ExitStatus};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use syncguard::{
    Backoff, CancelToken, ErrorCode, Heartbeat, Jitter, LockBackend, LockError, LockOptions,
    Locker, get_by_id, get_by_id_raw, get_by_key, get_by_key_raw,
};

const EXAMPLES: &str = "\
Examples:
  export SYNCGUARD_URL=redis://127.0.0.1:6379/
  # cron: run the report on one machine at a time, waiting up to a minute for the lock
  syncguard run --key nightly-report --ttl 60s --wait 1m -- ./make-report.sh
  # take and release a lock around several commands
  id=$(syncguard acquire --key deploy --ttl 5m | jq -r .lockId) && ./deploy.sh; syncguard release --lock-id \"$id\"";

/// Distributed locks for shell scripts and cron jobs (Redis, PostgreSQL, Firestore).
#[derive(Parser)]
#[command(name = "syncguard", version, after_help = EXAMPLES)]
struct Cli {
    /// Backend: redis://…, rediss://…, postgres://…, firestore://PROJECT[/DATABASE], memory:
    #[arg(long, global = true, env = "SYNCGUARD_URL", hide_env_values = true)]
    url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take a lock and keep it until --ttl (it is not released when this command exits).
    #[command(
        after_help = "Example:\n  syncguard acquire --key deploy --ttl 5m --wait 30s\n  \
        → {\"ok\":true,\"lockId\":\"…\",\"fence\":\"000000000000001\",\"expiresAtMs\":…}  (exit 1 and \
        {\"ok\":false,\"reason\":\"locked\"} if held)"
    )]
    Acquire {
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Release a lock taken with `acquire`.
    #[command(after_help = "Example:\n  syncguard release --lock-id \"$id\"   → {\"ok\":true}")]
    Release {
        /// The lock id `acquire` printed.
        #[arg(long, allow_hyphen_values = true)]
        lock_id: String,
    },
    /// Set a held lock to expire --ttl from now.
    #[command(
        after_help = "Example:\n  syncguard extend --lock-id \"$id\" --ttl 5m   → {\"ok\":true,\"expiresAtMs\":…}"
    )]
    Extend {
        /// The lock id `acquire` printed.
        #[arg(long, allow_hyphen_values = true)]
        lock_id: String,
        /// New lease length, from now.
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Show the live lock on a key or held under a lock id (exit 1 and `null` if none).
    #[command(after_help = "Example:\n  syncguard status --key deploy --raw")]
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
    /// Run a command while holding the lock, kept alive by the heartbeat; release afterwards.
    #[command(
        after_help = "Example:\n  syncguard run --key nightly-report --wait 10m -- ./make-report.sh --full\n\n\
        The command gets SYNCGUARD_FENCE, SYNCGUARD_LOCK_ID and SYNCGUARD_KEY in its environment.\n\
        Exit: the command's code (128+n if killed by signal n); 75 if the lock was not acquired\n\
        within --wait (the command does not run); 76 if the lock was lost while it ran."
    )]
    Run {
        #[command(flatten)]
        lock: LockArgs,
        /// What to do if the lock is lost while the command runs.
        #[arg(long, value_enum, default_value = "kill")]
        on_lost: OnLost,
        /// After SIGTERM on loss, how long before SIGKILL.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Create the PostgreSQL tables (idempotent).
    #[command(after_help = "Example:\n  syncguard --url postgres://app@db/app setup")]
    Setup,
}

/// The lock a command takes: `acquire` and `run` share these.
#[derive(clap::Args)]
struct LockArgs {
    /// The lock's key.
    #[arg(long, allow_hyphen_values = true)]
    key: String,
    /// Lease length: 500ms, 30s, 5m, 1h, or milliseconds (`run` renews it every third).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait while someone else holds it.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnLost {
    /// Terminate the command (SIGTERM, then SIGKILL after --grace) and exit 76.
    Kill,
    /// Only warn on stderr; the command runs on.
    Warn,
}

/// What a command ends with.
enum Outcome {
    Printed(Value, u8),
    Exit(u8),
}

const EXIT_NOT_ACQUIRED: u8 = 75;
const EXIT_LOST: u8 = 76;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = error.print();
                return ExitCode::from(
                    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                        2
                    } else {
                        0
                    },
                );
            }
            // clap's message spans lines (the names of missing arguments follow on the next
            // ones); keep everything before the usage block, on one line.
            let text = error.to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|line| !line.starts_with("Usage:"))
                .filter(|line| !line.is_empty() && !line.starts_with("tip:"))
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            return fail(&LockError::invalid_argument(format!(
                "{message} (see --help)"
            )));
        }
    };
    match execute(cli) {
        Ok(Outcome::Printed(value, code)) => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{value}");
            ExitCode::from(code)
        }
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        Err(error) => fail(&error),
    }
}

/// Prints the error line and picks the exit code: 2 for bad input, 3 for everything else.
fn fail(error: &LockError) -> ExitCode {
    eprintln!("error: {}: {}", error.code(), error.message());
    ExitCode::from(if error.code() == ErrorCode::InvalidArgument {
        2
    } else {
        3
    })
}

fn execute(cli: Cli) -> syncguard::Result<Outcome> {
    let url = cli
        .url
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| {
            LockError::invalid_argument("no backend URL: pass --url or set SYNCGUARD_URL")
        })?;
    let backend = || syncguard::connect(&url);
    match cli.command {
        Command::Acquire { lock } => acquire(backend()?, &lock.key, lock.ttl, lock.wait),
        Command::Release { lock_id } => {
            let released = backend()?.release(&lock_id)?;
            Ok(Outcome::Printed(
                json!({ "ok": released }),
                u8::from(!released),
            ))
        }
        Command::Extend { lock_id, ttl } => Ok(match backend()?.extend(&lock_id, ttl)? {
            Some(expires_at_ms) => {
                Outcome::Printed(json!({ "ok": true, "expiresAtMs": expires_at_ms }), 0)
            }
            None => Outcome::Printed(json!({ "ok": false }), 1),
        }),
        Command::Status { key, lock_id, raw } => {
            status(backend()?.as_ref(), key.as_deref(), lock_id.as_deref(), raw)
        }
        Command::Run {
            lock,
            on_lost,
            grace,
            command,
        } => run(
            backend()?,
            &lock.key,
            lock.ttl,
            lock.wait,
            on_lost,
            grace,
            &command,
        ),
        Command::Setup => setup(&url),
    }
}

fn acquire(
    backend: Box<dyn LockBackend>,
    key: &str,
    ttl: Duration,
    wait: Duration,
) -> syncguard::Result<Outcome> {
    // No heartbeat: this process ends now, and the lease must outlive it until --ttl.
    let locker = Locker::with_defaults(
        backend,
        waiting(LockOptions::default())
            .ttl(ttl)
            .heartbeat(Heartbeat::Off),
    );
    let Some(guard) = locker.try_lock_for(key, wait)? else {
        return Ok(Outcome::Printed(
            json!({ "ok": false, "reason": "locked" }),
            1,
        ));
    };
    // The lock outlives this process: the caller releases it with `release`.
    let lease = guard.detach();
    let printed = json!({
        "ok": true,
        "lockId": lease.lock_id,
        "fence": lease.fence,
        "expiresAtMs": lease.expires_at_ms,
    });
    Ok(Outcome::Printed(printed, 0))
}

/// Long `--wait`s poll at a steady pace: exponential backoff would leave minutes between
/// attempts, taking the lock long after it was freed.
fn waiting(options: LockOptions) -> LockOptions {
    options
        .backoff(Backoff::Fixed)
        .jitter(Jitter::Equal)
        .retry_delay(Duration::from_millis(250))
}

fn status(
    backend: &dyn LockBackend,
    key: Option<&str>,
    lock_id: Option<&str>,
    raw: bool,
) -> syncguard::Result<Outcome> {
    let found = match (key, lock_id, raw) {
        (Some(key), _, false) => get_by_key(backend, key)?.map(|info| json!(info)),
        (Some(key), _, true) => get_by_key_raw(backend, key)?.map(|info| json!(info)),
        (None, Some(id), false) => get_by_id(backend, id)?.map(|info| json!(info)),
        (None, Some(id), true) => get_by_id_raw(backend, id)?.map(|info| json!(info)),
        (None, None, _) => {
            return Err(LockError::invalid_argument(
                "status needs --key or --lock-id",
            ));
        }
    };
    let live = found.is_some();
    Ok(Outcome::Printed(
        found.unwrap_or(Value::Null),
        u8::from(!live),
    ))
}

#[cfg(feature = "postgres")]
fn setup(url: &str) -> syncguard::Result<Outcome> {
    let scheme = url
        .trim()
        .split(':')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if !matches!(scheme.as_str(), "postgres" | "postgresql") {
        return Err(LockError::invalid_argument(
            "setup creates the PostgreSQL tables; the other backends need no setup",
        ));
    }
    syncguard::postgres::PostgresBackend::connect(url.trim())?.setup_schema()?;
    Ok(Outcome::Printed(json!({ "ok": true }), 0))
}

#[cfg(not(feature = "postgres"))]
fn setup(_url: &str) -> syncguard::Result<Outcome> {
    Err(LockError::invalid_argument(
        "this build of syncguard lacks the `postgres` feature",
    ))
}

/// What the `run` supervisor waits for.
enum Event {
    Exited(std::io::Result<ExitStatus>),
    Lost(String),
    Signal(i32),
}

fn run(
    backend: Box<dyn LockBackend>,
    key: &str,
    ttl: Duration,
    wait: Duration,
    on_lost: OnLost,
    grace: Duration,
    command: &[String],
) -> syncguard::Result<Outcome> {
    let Some((program, args)) = command.split_first() else {
        return Err(LockError::invalid_argument("run needs a command after --"));
    };
    let (events, inbox) = mpsc::channel::<Event>();

    // Signals are caught from the start: one arriving while we wait for the lock ends the wait
    // (nothing runs, nothing is left locked); later ones go to the command.
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
            .map_err(|e| LockError::internal(format!("could not install signal handlers: {e}")))?;
    let signal_handle = signals.handle();
    let cancel = CancelToken::new();
    let forwarder = thread::spawn({
        let (events, cancel) = (events.clone(), cancel.clone());
        move || {
            for signal in signals.forever() {
                cancel.cancel();
                if events.send(Event::Signal(signal)).is_err() {
                    break;
                }
            }
        }
    });
    let stop_forwarding = move || {
        signal_handle.close();
        let _ = forwarder.join();
    };

    let lost_events = Mutex::new(events.clone());
    let options = waiting(LockOptions::default())
        .ttl(ttl)
        .cancel(cancel)
        .on_lock_lost(move |error| {
            if let Ok(sender) = lost_events.lock() {
                let _ = sender.send(Event::Lost(error.message().to_owned()));
            }
        });
    let locker = Locker::with_defaults(backend, options);
    let acquired = locker.try_lock_for(key, wait);
    let early_signal = inbox.try_iter().find_map(|event| match event {
        Event::Signal(signal) => Some(signal),
        _ => None,
    });
    let guard = match (acquired, early_signal) {
        (Ok(Some(guard)), None) => guard,
        (Ok(Some(guard)), Some(signal)) => {
            release(guard);
            stop_forwarding();
            return Ok(Outcome::Exit(signal_exit(signal)));
        }
        (Err(error), Some(signal)) if error.code() == ErrorCode::Aborted => {
            stop_forwarding();
            return Ok(Outcome::Exit(signal_exit(signal)));
        }
        (Err(error), _) => {
            stop_forwarding();
            return Err(error);
        }
        (Ok(None), _) => {
            stop_forwarding();
            if wait.is_zero() {
                eprintln!("syncguard: the lock on {key:?} is held; not running the command");
            } else {
                eprintln!(
                    "syncguard: the lock on {key:?} stayed held for {wait:?}; not running the command"
                );
            }
            return Ok(Outcome::Exit(EXIT_NOT_ACQUIRED));
        }
    };

    let child = Process::new(program)
        .args(args)
        .env("SYNCGUARD_FENCE", guard.fence().to_string())
        .env("SYNCGUARD_LOCK_ID", guard.lock_id())
        .env("SYNCGUARD_KEY", guard.key())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            release(guard);
            stop_forwarding();
            eprintln!("error: Internal: could not start {program:?}: {error}");
            // As shells do: 127 not found, 126 found but not runnable.
            return Ok(Outcome::Exit(
                if error.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                },
            ));
        }
    };
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return Err(LockError::internal(
            "the command's process id is out of range",
        ));
    };
    thread::spawn(move || {
        let _ = events.send(Event::Exited(child.wait()));
    });

    let send_signal = |signal: i32| {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. The pid is still
        // the command's: it is not reaped until the waiter thread's wait() returns, and every
        // signal is sent before that is observed here.
        unsafe { libc::kill(pid, signal) };
    };
    let mut lost = false;
    let status = loop {
        match inbox.recv() {
            Ok(Event::Exited(status)) => break status,
            Ok(Event::Signal(signal)) => send_signal(signal),
            Ok(Event::Lost(why)) => {
                eprintln!("syncguard: lost the lock on {key:?} while the command ran: {why}");
                if on_lost == OnLost::Kill && !lost {
                    lost = true;
                    send_signal(libc::SIGTERM);
                    match wait_for_exit(&inbox, grace, &send_signal) {
                        Some(status) => break status,
                        None => {
                            send_signal(libc::SIGKILL);
                            break wait_for_exit(&inbox, Duration::from_secs(3600), &send_signal)
                                .unwrap_or_else(|| {
                                    Err(std::io::Error::other("the command did not exit"))
                                });
                        }
                    }
                }
            }
            Err(_) => break Err(std::io::Error::other("lost track of the command")),
        }
    };
    stop_forwarding();
    if lost {
        drop(guard); // the lease is gone; dropping only tries a release if it might not be
        return Ok(Outcome::Exit(EXIT_LOST));
    }
    release(guard);
    let status =
        status.map_err(|e| LockError::internal(format!("waiting for the command failed: {e}")))?;
    Ok(Outcome::Exit(exit_code(status)))
}

/// The exit code of a process ended by `signal`, as shells report it.
fn signal_exit(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}

/// Waits up to `limit` for the command to exit, still forwarding signals meanwhile.
fn wait_for_exit(
    inbox: &mpsc::Receiver<Event>,
    limit: Duration,
    send_signal: &dyn Fn(i32),
) -> Option<std::io::Result<ExitStatus>> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match inbox.recv_timeout(left) {
            Ok(Event::Exited(status)) => return Some(status),
            Ok(Event::Signal(signal)) => send_signal(signal),
            Ok(Event::Lost(_)) => {}
            Err(_) => return None,
        }
    }
}

/// Releases, reporting (not failing on) an error: the command's outcome is what matters now.
fn release(guard: syncguard::LockGuard) {
    if let Err(error) = guard.release() {
        eprintln!("syncguard: releasing the lock failed (it expires at its ttl): {error}");
    }
}

/// The command's exit code, or 128+n when signal n ended it (as shells report it).
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => signal_exit(signal),
        (None, None) => 1,
    }
}

/// `500ms`, `30s`, `5m`, `1h`, or plain milliseconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits.parse().map_err(|_| {
        format!("{text:?} is not a duration (use 500ms, 30s, 5m, 1h or milliseconds)")
    })?;
    let millis = match unit {
        "" | "ms" => Some(value),
        "s" => value.checked_mul(1000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(|| {
        format!("{text:?} is not a duration (use 500ms, 30s, 5m, 1h or milliseconds)")
    })?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "abc",
            "5 m",
            "1.5s",
            "-1s",
            "10d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
