//! `syncguard run`: takes the lock, runs the command as a process group of its own while the
//! heartbeat renews the lease, and releases the lock once every process of the group is gone.
//!
//! Here: the arguments checked, the signals caught from the start, the backend connected to
//! and the lock taken within `--wait`, the command started. Then the [`Supervisor`] waits for
//! the events of the other threads and its own timers, and ends the command's group however
//! the run ends; [`Releasing`] gives the lock back at the end. With `--on-lost kill`, the
//! lease's local deadline bounds all of it: SIGTERM `--grace` before it, SIGKILL at it, so that
//! the group is gone before the store's record can expire and another holder take the lock.
//!
//! Several keys (`--key` repeated) are held together and supervised as one lease
//! ([`crate::held::Held`]): the earliest lease's deadline bounds the group, and the loss of any
//! key is the set's loss.

use std::io;
use std::process::Command as Process;
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use syncguard::driver::Holder;
use syncguard::{CancelToken, ErrorCode, Heartbeat, LockBackend, LockError, LockOptions, Locker};

use crate::args::{LockArgs, OnLost, RunFlags};
use crate::group::{Group, become_subreaper};
use crate::hold::Hold;
use crate::keys::Keys;
use crate::metrics_file::Figures;
use crate::outcome::{EXIT_LOST, Outcome, error_exit_code};
use crate::release_at_end::{Ending, Releasing};
use crate::supervisor::{Event, Supervisor, signal_exit};
use crate::waiting::waiting;
use crate::{connecting, held, holder, input};

/// The signals `run` acts on: while it waits for the lock they end the wait; once the command
/// runs they go to its whole group and start the `--grace` countdown.
const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// How long the release at the end may take before `run` exits anyway (the lease then runs
/// out at its TTL): a backend that is down must not hold the exit up for a pool timeout.
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// What `run` was asked to do.
pub struct RunArgs {
    /// One key, or several held together (the lock only).
    pub keys: Keys,
    /// What to hold: the lock, a shared hold of it, or a permit.
    pub hold: Hold,
    pub ttl: Duration,
    pub wait: Duration,
    /// Whether it waits in the key's line (not `--no-line`).
    pub line: bool,
    /// `--grace`, or its default.
    pub grace: Duration,
    /// Who holds the lock (`--holder`, or `HOST:PID PROGRAM`).
    pub holder: Option<Holder>,
    /// `-q`: nothing printed when the lock stays held.
    pub quiet: bool,
    /// The rest, as given.
    pub flags: RunFlags,
}

/// `run`, from its command line to its exit code; `connect` opens the backend (the URL's own
/// checks included) and is called only once the arguments have passed theirs, so that bad
/// usage exits 2 without reaching the backend. With `--metrics-file`, the run's figures are
/// written however it ends: an argument or the URL refused, a backend error, a signal while
/// connecting included.
pub fn run(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>> + Send + 'static,
    lock: LockArgs,
    grace: Option<Duration>,
    flags: RunFlags,
) -> syncguard::Result<Outcome> {
    let metrics_file = flags.metrics_file.clone();
    let mut figures = Figures::new(&lock.keys.join(","));
    let outcome = RunArgs::checked(lock, grace, flags)
        .and_then(|args| run_recording(connect, args, &mut figures));
    if let Some(path) = metrics_file {
        figures.exit_code = match &outcome {
            Ok(Outcome::Exit(code) | Outcome::Printed(_, code)) => *code,
            Ok(Outcome::Lines(_)) => 0,
            Err(error) => error_exit_code(error),
        };
        figures.write_or_warn(&path);
    }
    outcome
}

impl RunArgs {
    /// `run`'s arguments, checked before any I/O.
    fn checked(
        lock: LockArgs,
        grace: Option<Duration>,
        flags: RunFlags,
    ) -> syncguard::Result<RunArgs> {
        let hold = Hold::of(lock.shared, lock.permits);
        let keys = Keys::of(&lock.keys, hold == Hold::Exclusive)?;
        let grace = grace_for(grace, lock.ttl, flags.on_lost)?;
        if let Some(min_hold) = flags.min_hold {
            LockOptions::default()
                .min_hold(min_hold)
                .validate()
                .map_err(|error| input::named("--min-hold", &error))?;
        }
        let holder = match lock.holder.as_deref() {
            Some(given) => Some(holder::given(given)?),
            None => flags
                .command
                .first()
                .and_then(|program| holder::of_run(program)),
        };
        Ok(RunArgs {
            hold,
            keys,
            ttl: lock.ttl,
            wait: lock.wait,
            line: !lock.no_line,
            grace,
            holder,
            quiet: lock.quiet,
            flags,
        })
    }
}

/// [`run`], noting in `figures` what happened (all but the exit code, which [`run`] adds).
fn run_recording(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>> + Send + 'static,
    args: RunArgs,
    figures: &mut Figures,
) -> syncguard::Result<Outcome> {
    figures.key = args.keys.as_slice().join(",");
    let Some((program, program_args)) = args.flags.command.split_first() else {
        return Err(LockError::invalid_argument("run needs a command after --"));
    };
    // The library's heartbeat renews the lease, often enough that two renewals and their
    // retries fit before the group must be told to stop; it reports the loss at once when a
    // renewal finds the lock gone, and at the local deadline even while a renewal hangs.
    let interval = renewal_interval(args.ttl, args.grace, args.flags.on_lost);
    let mut options = waiting(LockOptions::default())
        .ttl(args.ttl)
        .heartbeat(Heartbeat::Every(interval))
        .wait_in_line(args.line);
    if let Some(hold) = args.flags.min_hold {
        // The lease lasts until the hold ends from the acquisition on, and the release at the
        // end keeps it so (see LockOptions::min_hold); a command that never started is
        // released at once instead (Ending::NeverStarted).
        options = options.min_hold(hold);
    }
    if let Some(holder) = args.holder {
        options = options.holder(holder.into_string());
    }
    input::ttl(args.ttl)?;
    // The TTL is valid, the holder and the hold were checked: what is left to refuse is a TTL
    // too short for the renewals (1ms: the renewal interval cannot be below it).
    options.validate().map_err(|error| {
        LockError::invalid_argument(format!(
            "--ttl {}: too short for run, which renews the lease while the command runs: {}",
            humantime::format_duration(args.ttl),
            error.message()
        ))
    })?;
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

    // Connecting is part of the wait (a store that is down is waited for, see `connecting`),
    // on a thread of its own so that a signal ends `run` while a store does not answer.
    let asked = Instant::now();
    let connecting = thread::Builder::new()
        .name("syncguard-connect".to_owned())
        .spawn({
            let (events, cancel, wait) = (events.clone(), cancel.clone(), args.wait);
            move || {
                let connected = connecting::within(connect, wait, &cancel);
                let _ = events.send(Event::Connected(connected));
            }
        });
    if let Err(error) = connecting {
        stop_forwarding();
        return Err(LockError::internal(format!(
            "could not start the connecting thread: {error}"
        )));
    }
    let connected = loop {
        match inbox.recv() {
            Ok(Event::Connected(connected)) => break connected,
            Ok(Event::Signal(signal)) => {
                figures.wait = asked.elapsed();
                stop_forwarding();
                return Ok(Outcome::Exit(signal_exit(signal)));
            }
            // Nothing else is sent before the lock is held.
            Ok(Event::Lost(_) | Event::Exited(_)) => {}
            Err(mpsc::RecvError) => {
                break Err(LockError::internal("the connecting thread ended unheard"));
            }
        }
    };
    let backend = match connected {
        Ok(backend) => backend,
        Err(error) => {
            figures.wait = asked.elapsed();
            stop_forwarding();
            return Err(error);
        }
    };

    let lost_events = Mutex::new(events.clone());
    let options = options.cancel(cancel).on_lock_lost(move |error| {
        if let Ok(sender) = lost_events.lock() {
            let _ = sender.send(Event::Lost(error.message().to_owned()));
        }
    });
    let locker = Locker::with_defaults(backend, options);
    let releasing = Releasing {
        limit: args.ttl.saturating_add(RELEASE_LIMIT),
        quiet: args.quiet,
    };
    // The lock, a permit or several keys' locks: from here on all are Held, supervised alike.
    let wait = args.wait.saturating_sub(asked.elapsed());
    let acquired = args.hold.take(&locker, &args.keys, wait);
    figures.wait = asked.elapsed();
    figures.acquired = matches!(acquired, Ok(Some(_)));
    let early_signal = inbox.try_iter().find_map(|event| match event {
        Event::Signal(signal) => Some(signal),
        _ => None,
    });
    let guard = match (acquired, early_signal) {
        (Ok(Some(guard)), None) => guard,
        (Ok(Some(guard)), Some(signal)) => {
            releasing.release(guard, locker, Ending::NeverStarted);
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
            if args.quiet {
                return Ok(Outcome::Exit(args.flags.conflict_exit_code));
            }
            let (held, is) = args.hold.what_was_held(&args.keys);
            if args.wait.is_zero() {
                eprintln!("syncguard: {held} {is} held; not running the command");
            } else {
                eprintln!(
                    "syncguard: {held} stayed held for {}; not running the command",
                    humantime::format_duration(args.wait)
                );
            }
            return Ok(Outcome::Exit(args.flags.conflict_exit_code));
        }
    };

    let deadline = guard.deadline();
    let too_late = args.flags.on_lost == OnLost::Kill
        && Instant::now() >= deadline.checked_sub(args.grace).unwrap_or(deadline);
    if guard.is_lost() || too_late {
        // The lease ran out (or would be ending) before the command could start: it must not
        // run unlocked.
        figures.lost = true;
        eprintln!(
            "syncguard: lost the lock on {} before the command started; not running it",
            args.keys.quoted()
        );
        releasing.release(guard, locker, Ending::NeverStarted);
        stop_forwarding();
        return Ok(Outcome::Exit(EXIT_LOST));
    }
    become_subreaper();
    let mut process = Process::new(program);
    process.args(program_args).envs(held::environment(&guard));
    let exits = events.clone();
    let group = match Group::spawn(&mut process, move |status| {
        let _ = exits.send(Event::Exited(status));
    }) {
        Ok(group) => group,
        Err(error) => {
            releasing.release(guard, locker, Ending::NeverStarted);
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

    let started = Instant::now();
    figures.started = true;
    // If run dies from here on (SIGKILL), or stalls past the lease's deadline, the watcher
    // ends the whole group.
    let watcher = group.watch(args.grace);
    let (code, lost) = Supervisor {
        group: &group,
        guard: &guard,
        watcher: watcher.as_ref(),
        on_lost: args.flags.on_lost,
        grace: args.grace,
        ttl: args.ttl,
    }
    .supervise(&inbox, args.flags.max_runtime);
    figures.ran = started.elapsed();
    figures.lost = lost || guard.is_lost();
    // The group is gone: release in every case, a lost lease included: a renewal applied
    // without its answer may have kept it alive in the store. First, as a waiter starts on
    // it: the watcher has no group left to end, and a signal from here on has nothing to stop.
    releasing.release(guard, locker, Ending::Ran);
    if let Some(watcher) = watcher {
        watcher.dismiss();
    }
    stop_forwarding();
    Ok(Outcome::Exit(code))
}

/// How often `run` renews the lease: a third of the time it may go unconfirmed before the
/// command's group is told to stop (`ttl − grace` with `--on-lost kill`, the whole TTL with
/// `warn`), so that two more renewals, and retries, fit in before that.
fn renewal_interval(ttl: Duration, grace: Duration, on_lost: OnLost) -> Duration {
    let window = match on_lost {
        OnLost::Kill => ttl.saturating_sub(grace),
        OnLost::Warn => ttl,
    };
    (window / 3).max(Duration::from_millis(1))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_fit_three_times_before_the_sigterm() {
        let (ttl, grace) = (Duration::from_secs(30), Duration::from_secs(6));
        assert_eq!(
            renewal_interval(ttl, grace, OnLost::Kill),
            Duration::from_secs(8)
        );
        assert_eq!(
            renewal_interval(ttl, grace, OnLost::Warn),
            Duration::from_secs(10)
        );
        assert_eq!(
            renewal_interval(
                Duration::from_millis(2),
                Duration::from_millis(1),
                OnLost::Kill
            ),
            Duration::from_millis(1)
        );
    }

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
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
