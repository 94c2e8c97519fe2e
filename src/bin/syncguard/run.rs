//! `syncguard run`: takes the lock, runs the command as a process group of its own while the
//! heartbeat keeps the lease alive, and releases the lock once every process of the group is
//! gone.
//!
//! One thread (the supervisor, here) waits for events from the others: signals `run` receives,
//! the lease's loss (reported by the library at the lease's local deadline), the command's
//! exit (from the reaper), and its own timers (`--max-runtime`, `--grace`). Whatever ends the
//! command — a signal, the loss, `--max-runtime` — ends it the same way: the signal to the
//! whole group, `SIGKILL` to the group after `--grace`, then a wait until the group is empty.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command as Process, ExitStatus};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use syncguard::{CancelToken, ErrorCode, LockBackend, LockError, LockGuard, LockOptions, Locker};

use crate::group::{Group, become_subreaper};
use crate::{EXIT_LOST, EXIT_MAX_RUNTIME, OnLost, Outcome, waiting};

/// The signals `run` acts on: while it waits for the lock they end the wait; once the command
/// runs they go to its whole group and start the `--grace` countdown.
const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// How long the release at the end may take before `run` exits anyway (the lease then runs
/// out at its TTL): a backend that is down must not hold the exit up for a pool timeout.
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// How often the supervisor looks whether the group is gone once the command has exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// What `run` was asked to do.
pub struct RunArgs {
    pub key: String,
    pub ttl: Duration,
    pub wait: Duration,
    pub on_lost: OnLost,
    pub grace: Duration,
    pub max_runtime: Option<Duration>,
    pub conflict_exit_code: u8,
    pub command: Vec<String>,
}

/// What the supervisor waits for.
enum Event {
    Signal(libc::c_int),
    Lost(String),
    Exited(io::Result<ExitStatus>),
}

/// Why the group is being terminated; the first reason decides the exit code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// `run` got this signal: the exit code is the command's.
    Signal,
    /// The lease was lost: 76.
    Lost,
    /// `--max-runtime` passed: 124.
    MaxRuntime,
}

pub fn run(backend: Box<dyn LockBackend>, args: RunArgs) -> syncguard::Result<Outcome> {
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(LockError::invalid_argument("run needs a command after --"));
    };
    let (events, inbox) = mpsc::channel::<Event>();

    // Signals are caught from the start: one arriving while we wait for the lock ends the wait
    // (nothing runs, nothing is left locked); later ones go to the command's group.
    let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS)
        .map_err(|e| LockError::internal(format!("could not install signal handlers: {e}")))?;
    let signal_handle = signals.handle();
    let cancel = CancelToken::new();
    let forwarder = thread::Builder::new()
        .name("syncguard-signals".to_owned())
        .spawn({
            let (events, cancel) = (events.clone(), cancel.clone());
            move || {
                for signal in signals.forever() {
                    cancel.cancel();
                    if events.send(Event::Signal(signal)).is_err() {
                        break;
                    }
                }
            }
        })
        .map_err(|e| LockError::internal(format!("could not start the signal thread: {e}")))?;
    let stop_forwarding = move || {
        signal_handle.close();
        let _ = forwarder.join();
    };

    // The library reports the loss at the lease's local deadline (the send time of the last
    // renewal the store confirmed, plus the TTL) even while a renewal hangs.
    let lost_events = Mutex::new(events.clone());
    let options = waiting(LockOptions::default())
        .ttl(args.ttl)
        .cancel(cancel)
        .on_lock_lost(move |error| {
            if let Ok(sender) = lost_events.lock() {
                let _ = sender.send(Event::Lost(error.message().to_owned()));
            }
        });
    let locker = Locker::with_defaults(backend, options);
    let acquired = locker.try_lock_for(&args.key, args.wait);
    let early_signal = inbox.try_iter().find_map(|event| match event {
        Event::Signal(signal) => Some(signal),
        _ => None,
    });
    let guard = match (acquired, early_signal) {
        (Ok(Some(guard)), None) => guard,
        (Ok(Some(guard)), Some(signal)) => {
            release_within(guard, locker, RELEASE_LIMIT);
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
            let key = &args.key;
            if args.wait.is_zero() {
                eprintln!("syncguard: the lock on {key:?} is held; not running the command");
            } else {
                eprintln!(
                    "syncguard: the lock on {key:?} stayed held for {}; not running the command",
                    humantime::format_duration(args.wait)
                );
            }
            return Ok(Outcome::Exit(args.conflict_exit_code));
        }
    };

    if guard.is_lost() {
        // The lease ran out before the command could start: it must not run unlocked.
        eprintln!(
            "syncguard: lost the lock on {:?} before the command started; not running it",
            args.key
        );
        release_within(guard, locker, RELEASE_LIMIT);
        stop_forwarding();
        return Ok(Outcome::Exit(EXIT_LOST));
    }
    become_subreaper();
    let mut process = Process::new(program);
    process
        .args(program_args)
        .env("SYNCGUARD_FENCE", guard.fence().to_string())
        .env("SYNCGUARD_LOCK_ID", guard.lock_id())
        .env("SYNCGUARD_KEY", guard.key());
    let exits = events.clone();
    let group = match Group::spawn(&mut process, move |status| {
        let _ = exits.send(Event::Exited(status));
    }) {
        Ok(group) => group,
        Err(error) => {
            release_within(guard, locker, RELEASE_LIMIT);
            stop_forwarding();
            eprintln!("error: Internal: could not start {program:?}: {error}");
            // As shells do: 127 not found, 126 found but not runnable.
            return Ok(Outcome::Exit(if error.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            }));
        }
    };

    let code = Supervisor {
        group: &group,
        on_lost: args.on_lost,
        grace: args.grace,
    }
    .supervise(&inbox, args.max_runtime);
    stop_forwarding();
    release_within(guard, locker, RELEASE_LIMIT);
    Ok(Outcome::Exit(code))
}

/// Watches the running group.
struct Supervisor<'a> {
    group: &'a Group,
    on_lost: OnLost,
    grace: Duration,
}

impl Supervisor<'_> {
    /// Waits until the command has exited and every process of its group is gone, ending the
    /// group on a signal, on loss or at `max_runtime`; returns `run`'s exit code.
    fn supervise(&self, inbox: &mpsc::Receiver<Event>, max_runtime: Option<Duration>) -> u8 {
        let started = Instant::now();
        let mut max_runtime_at = max_runtime.and_then(|limit| started.checked_add(limit));
        let mut stop: Option<Stop> = None;
        let mut kill_at: Option<Instant> = None;
        let mut status: Option<io::Result<ExitStatus>> = None;
        loop {
            if status.is_some() && self.group.is_gone() {
                break;
            }
            let now = Instant::now();
            if max_runtime_at.is_some_and(|at| now >= at) {
                max_runtime_at = None;
                if let Some(limit) = max_runtime {
                    eprintln!(
                        "syncguard: the command ran for --max-runtime {}; terminating its process group",
                        humantime::format_duration(limit)
                    );
                }
                self.terminate(&mut stop, &mut kill_at, Stop::MaxRuntime, libc::SIGTERM);
            }
            if kill_at.is_some_and(|at| now >= at) {
                kill_at = None;
                eprintln!(
                    "syncguard: the command's process group was still running {} after it was told to stop; sending SIGKILL",
                    humantime::format_duration(self.grace)
                );
                self.group.signal(libc::SIGKILL);
            }
            let wake = [
                max_runtime_at,
                kill_at,
                status.as_ref().map(|_| now + GROUP_POLL),
            ]
            .into_iter()
            .flatten()
            .min();
            let event = match wake {
                Some(at) => match inbox.recv_timeout(at.saturating_duration_since(now)) {
                    Ok(event) => event,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match inbox.recv() {
                    Ok(event) => event,
                    Err(mpsc::RecvError) => break,
                },
            };
            match event {
                Event::Signal(signal) => {
                    self.terminate(&mut stop, &mut kill_at, Stop::Signal, signal);
                }
                Event::Lost(why) => match self.on_lost {
                    OnLost::Kill => {
                        eprintln!("syncguard: {why}; terminating the command's process group");
                        self.terminate(&mut stop, &mut kill_at, Stop::Lost, libc::SIGTERM);
                    }
                    OnLost::Warn => {
                        eprintln!("syncguard: {why}; the command runs on (--on-lost warn)");
                    }
                },
                Event::Exited(exited) => status = Some(exited),
            }
        }
        match stop {
            Some(Stop::Lost) => EXIT_LOST,
            Some(Stop::MaxRuntime) => EXIT_MAX_RUNTIME,
            Some(Stop::Signal) | None => match status {
                Some(Ok(status)) => exit_code(status),
                Some(Err(error)) => {
                    eprintln!("error: Internal: waiting for the command failed: {error}");
                    1
                }
                None => 1,
            },
        }
    }

    /// Sends `signal` to the group and, the first time the group is told to stop, starts the
    /// `--grace` countdown to `SIGKILL`; the first reason is kept.
    fn terminate(
        &self,
        stop: &mut Option<Stop>,
        kill_at: &mut Option<Instant>,
        reason: Stop,
        signal: libc::c_int,
    ) {
        if self.group.is_gone() {
            return;
        }
        self.group.signal(signal);
        if stop.is_none() {
            *stop = Some(reason);
            *kill_at = Instant::now().checked_add(self.grace);
        }
    }
}

/// Releases the lock on a thread of its own and waits for it at most `limit`: if the backend
/// does not answer by then, `run` says so and exits anyway, and the lease runs out at its TTL.
fn release_within(guard: LockGuard, locker: Locker<Box<dyn LockBackend>>, limit: Duration) {
    // A lost lease has nothing to release: the record expired with the lease (its expiry is
    // the local deadline plus at most one trip to the backend), or the backend said it was
    // gone; and a backend that failed every renewal would only hold the exit up. Detached, it
    // is neither renewed nor released.
    let lost = guard.is_lost();
    let guard = if lost {
        let _expired = guard.detach();
        None
    } else {
        Some(guard)
    };
    let (done, outcome) = mpsc::channel();
    let releasing = thread::Builder::new()
        .name("syncguard-release".to_owned())
        .spawn(move || {
            let released = guard.map(LockGuard::release);
            // The backend's connections close here too, within the same limit.
            drop(locker);
            let _ = done.send(released);
        });
    if releasing.is_err() {
        eprintln!("syncguard: could not start the release; the lock expires at its ttl");
        return;
    }
    match outcome.recv_timeout(limit) {
        Ok(None | Some(Ok(_))) => {}
        Ok(Some(Err(error))) => {
            eprintln!("syncguard: releasing the lock failed (it expires at its ttl): {error}");
        }
        Err(_) => eprintln!(
            "syncguard: releasing the lock did not finish within {}; exiting anyway (it expires at its ttl)",
            humantime::format_duration(limit)
        ),
    }
}

/// The exit code of a process ended by `signal`, as shells report it.
fn signal_exit(signal: libc::c_int) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}

/// The command's exit code, or 128+n when signal n ended it (as shells report it).
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => signal_exit(signal),
        (None, None) => 1,
    }
}
