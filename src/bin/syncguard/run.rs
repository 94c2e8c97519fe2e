//! `syncguard run`: takes the lock, runs the command as a process group of its own while the
//! heartbeat renews the lease, and releases the lock once every process of the group is gone.
//!
//! One thread (the supervisor, here) waits for events from the others: signals `run` receives,
//! the lease's loss (reported by the library), the command's exit (from the reaper), and its
//! own timers (`--max-runtime`, `--grace`, and the lease's local deadline, which it reads from
//! the guard whenever a timer fires: each renewal moves it on). Whatever ends the command — a signal, the
//! loss, `--max-runtime` — ends it the same way: the signal to the whole group, `SIGKILL` to the
//! group after `--grace`, then a wait until the group is empty. With `--on-lost kill`, the
//! deadline bounds all of it: SIGTERM `--grace` before it, SIGKILL at it, so that the group is
//! gone before the store's record can expire and another holder take the lock.
//!
//! Several keys (`--key` repeated) are held together and supervised as one lease ([`Held`]):
//! the earliest lease's deadline bounds the group, and the loss of any key is the set's loss.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command as Process, ExitStatus};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use syncguard::driver::{Holder, TIME_TOLERANCE_MS};
use syncguard::{CancelToken, ErrorCode, Heartbeat, LockBackend, LockError, LockOptions, Locker};

use crate::group::{Group, become_subreaper};
use crate::held::Held;
use crate::hold::Hold;
use crate::keys::Keys;
use crate::metrics_file::Figures;
use crate::watcher::Watcher;
use crate::{EXIT_LOST, EXIT_MAX_RUNTIME, LockArgs, OnLost, Outcome, RunFlags, waiting};

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
    /// One key, or several held together (the lock only).
    pub keys: Keys,
    /// What to hold: the lock, a shared hold of it, or a permit.
    pub hold: Hold,
    pub ttl: Duration,
    pub wait: Duration,
    /// `--grace`, or its default.
    pub grace: Duration,
    /// Who holds the lock (`--holder`, or `HOST:PID PROGRAM`).
    pub holder: Option<Holder>,
    /// `-q`: nothing printed when the lock stays held.
    pub quiet: bool,
    /// The rest, as given.
    pub flags: RunFlags,
}

/// What the supervisor waits for.
enum Event {
    /// The backend, or why it could not be reached within `--wait`.
    Connected(syncguard::Result<Box<dyn LockBackend>>),
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
            Err(error) => crate::error_exit_code(error),
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
        let grace = crate::grace_for(grace, lock.ttl, flags.on_lost)?;
        if let Some(min_hold) = flags.min_hold {
            LockOptions::default()
                .min_hold(min_hold)
                .validate()
                .map_err(|error| crate::input::named("--min-hold", &error))?;
        }
        let holder = match lock.holder.as_deref() {
            Some(given) => Some(crate::holder::given(given)?),
            None => flags
                .command
                .first()
                .and_then(|program| crate::holder::of_run(program)),
        };
        Ok(RunArgs {
            hold,
            keys,
            ttl: lock.ttl,
            wait: lock.wait,
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
        .heartbeat(Heartbeat::Every(interval));
    if let Some(hold) = args.flags.min_hold {
        // The lease lasts until the hold ends from the acquisition on, and the release at the
        // end keeps it so (see LockOptions::min_hold); a command that never started is
        // released at once instead (Ending::NeverStarted).
        options = options.min_hold(hold);
    }
    if let Some(holder) = args.holder {
        options = options.holder(holder.into_string());
    }
    crate::input::ttl(args.ttl)?;
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
                let connected = crate::connecting::within(connect, wait, &cancel);
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
    let release_limit = args.ttl.saturating_add(RELEASE_LIMIT);
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
            release_within(
                guard,
                locker,
                Ending::NeverStarted,
                release_limit,
                args.quiet,
            );
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
        release_within(
            guard,
            locker,
            Ending::NeverStarted,
            release_limit,
            args.quiet,
        );
        stop_forwarding();
        return Ok(Outcome::Exit(EXIT_LOST));
    }
    become_subreaper();
    let mut process = Process::new(program);
    process.args(program_args).envs(guard.environment());
    let exits = events.clone();
    let group = match Group::spawn(&mut process, move |status| {
        let _ = exits.send(Event::Exited(status));
    }) {
        Ok(group) => group,
        Err(error) => {
            release_within(
                guard,
                locker,
                Ending::NeverStarted,
                release_limit,
                args.quiet,
            );
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
    if let Some(watcher) = watcher {
        watcher.dismiss();
    }
    stop_forwarding();
    // The group is gone: release in every case, a lost lease included: a renewal applied
    // without its answer may have kept it alive in the store.
    release_within(guard, locker, Ending::Ran, release_limit, args.quiet);
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

/// How often the supervisor passes the lease's deadline on to the watcher: a quarter of the
/// grace (within bounds), so that a renewal confirmed before `run`'s own SIGTERM (`--grace`
/// before the deadline) reaches the watcher before its SIGTERM (half the grace before it).
fn forward_interval(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Watches the running group.
struct Supervisor<'a> {
    group: &'a Group,
    /// The lease (or leases): its local deadline moves on with each renewal.
    guard: &'a Held,
    /// The process that ends the group if `run` dies or is not scheduled: told each deadline
    /// (with `--on-lost kill`) and when `run` itself begins to end the group.
    watcher: Option<&'a Watcher>,
    on_lost: OnLost,
    grace: Duration,
    ttl: Duration,
}

impl Supervisor<'_> {
    /// Waits until the command has exited and every process of its group is gone, ending the
    /// group on a signal, on loss, as the lease's local deadline nears (`--on-lost kill`:
    /// SIGTERM `--grace` before it, SIGKILL at it) or at `max_runtime`; returns `run`'s exit
    /// code, and whether the lease was lost (or about to be) meanwhile.
    fn supervise(
        &self,
        inbox: &mpsc::Receiver<Event>,
        max_runtime: Option<Duration>,
    ) -> (u8, bool) {
        let kill_on_loss = self.on_lost == OnLost::Kill;
        let started = Instant::now();
        let mut max_runtime_at = max_runtime.and_then(|limit| started.checked_add(limit));
        let mut stop: Option<Stop> = None;
        let mut kill_at: Option<Instant> = None;
        let mut killed_at_deadline = false;
        let mut lost = false;
        let mut status: Option<io::Result<ExitStatus>> = None;
        // The watcher enforces the deadline too, for a `run` that is not scheduled to.
        let forwarding = self.watcher.filter(|_| kill_on_loss);
        let mut forwarded: Option<Instant> = None;
        loop {
            if status.is_some() && self.group.is_gone() {
                let deadline = self.guard.deadline();
                let term_at = deadline.checked_sub(self.grace).unwrap_or(deadline);
                if kill_on_loss && stop.is_none() && Instant::now() >= term_at {
                    // Seen only now, e.g. by a `run` that was stopped while its watcher ended
                    // the group at the deadline: the lease ended first, as far as we know.
                    eprintln!(
                        "syncguard: the lease ran out (no renewal confirmed for {}) before the \
                         end of the command's process group was seen; another holder may have \
                         taken the lock since",
                        humantime::format_duration(self.ttl.saturating_sub(self.grace))
                    );
                    stop = Some(Stop::Lost);
                }
                break;
            }
            if let Some(watcher) = forwarding {
                let deadline = self.guard.deadline();
                if forwarded != Some(deadline) {
                    watcher.hold_until(deadline);
                    forwarded = Some(deadline);
                }
            }
            let now = Instant::now();
            // With --on-lost kill, the lease's local deadline bounds everything: SIGTERM
            // --grace before it, SIGKILL at it, whatever else is going on. Read afresh each
            // time: a renewal since the timer was set moves it on.
            let deadline = self.guard.deadline();
            let term_at = (kill_on_loss && stop.is_none())
                .then(|| deadline.checked_sub(self.grace).unwrap_or(deadline));
            let deadline_kill = (kill_on_loss && !killed_at_deadline).then_some(deadline);
            if term_at.is_some_and(|at| now >= at) {
                eprintln!(
                    "syncguard: the lease is about to be lost: no renewal confirmed for {}; \
                     terminating the command's process group {} before the lease's deadline",
                    humantime::format_duration(self.ttl.saturating_sub(self.grace)),
                    humantime::format_duration(self.grace)
                );
                self.terminate(&mut stop, &mut kill_at, Stop::Lost, libc::SIGTERM);
            }
            if deadline_kill.is_some_and(|at| now >= at) {
                killed_at_deadline = true;
                kill_at = None;
                if !self.group.is_gone() {
                    eprintln!(
                        "syncguard: the lease ran out here (no renewal confirmed for {}); \
                         sending SIGKILL to the command's process group",
                        humantime::format_duration(self.ttl)
                    );
                    self.group.signal(libc::SIGKILL);
                }
            }
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
            let deadline = self.guard.deadline();
            let term_at = (kill_on_loss && stop.is_none())
                .then(|| deadline.checked_sub(self.grace).unwrap_or(deadline));
            let deadline_kill = (kill_on_loss && !killed_at_deadline).then_some(deadline);
            let wake = [
                max_runtime_at,
                kill_at,
                term_at,
                deadline_kill,
                status.as_ref().map(|_| now + GROUP_POLL),
                forwarding.map(|_| now + forward_interval(self.grace)),
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
                Event::Lost(why) => {
                    lost = true;
                    match self.on_lost {
                        OnLost::Kill => {
                            eprintln!("syncguard: {why}; terminating the command's process group");
                            self.terminate(&mut stop, &mut kill_at, Stop::Lost, libc::SIGTERM);
                        }
                        OnLost::Warn => {
                            eprintln!("syncguard: {why}; the command runs on (--on-lost warn)");
                        }
                    }
                }
                Event::Exited(exited) => status = Some(exited),
                Event::Connected(_) => {}
            }
        }
        let code = match stop {
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
        };
        (code, lost || stop == Some(Stop::Lost))
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
            // Nothing is left to signal. A lease that ran out while `run` was not scheduled
            // (the watcher ended the group meanwhile) is still how the run ended.
            if reason == Stop::Lost && stop.is_none() {
                *stop = Some(Stop::Lost);
            }
            return;
        }
        self.group.signal(signal);
        if stop.is_none() {
            *stop = Some(reason);
            *kill_at = Instant::now().checked_add(self.grace);
            if let Some(watcher) = self.watcher {
                watcher.ending();
            }
        }
    }
}

/// Whether the command ran: `--min-hold` holds the lock for a job that ran, not for one that
/// never started.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The command ran: a `--min-hold` keeps the lock until it ends.
    Ran,
    /// It never started (a signal while acquiring, the lease lost before the start, a command
    /// that could not be executed): the lock is released at once.
    NeverStarted,
}

/// What the release at the end came to, and what the lease looked like just before it.
struct Released {
    outcome: syncguard::Result<bool>,
    /// When `--min-hold` ends (store time), if it was kept.
    hold_until_ms: Option<i64>,
    /// The last expiry the store confirmed.
    expires_at_ms: i64,
}

/// Releases the lease, whatever became of it: one the store confirmed lost costs nothing (the
/// library knows there is nothing to release), and one that ran out here unconfirmed may have
/// been kept alive in the store by a renewal whose answer never came back (applied late, e.g.
/// behind a PgBouncer `PAUSE`): releasing it frees the key now instead of a TTL later.
fn release(guard: Held, locker: Locker<Box<dyn LockBackend>>, ending: Ending) -> Released {
    let hold_until_ms = guard.min_hold_until_ms().filter(|_| ending == Ending::Ran);
    let expires_at_ms = guard.expires_at_ms();
    let outcome = match ending {
        Ending::Ran => guard.release(),
        Ending::NeverStarted => guard.release_without_hold(),
    };
    // The backend's connections close here too, within the same limit.
    drop(locker);
    Released {
        outcome,
        hold_until_ms,
        expires_at_ms,
    }
}

/// Releases the lease on a thread of its own and waits for it at most `limit`: if the backend
/// does not answer by then, `run` says so and exits anyway, and the lease runs out at its TTL
/// (with `--min-hold`, at the hold's end at the earliest). `quiet` (`-q`): no note when all
/// went well.
pub fn release_within(
    guard: Held,
    locker: Locker<Box<dyn LockBackend>>,
    ending: Ending,
    limit: Duration,
    quiet: bool,
) {
    let (done, outcome) = mpsc::channel();
    let releasing = thread::Builder::new()
        .name("syncguard-release".to_owned())
        .spawn(move || {
            let _ = done.send(release(guard, locker, ending));
        });
    if releasing.is_err() {
        eprintln!("syncguard: could not start the release; the lock expires at its ttl");
        return;
    }
    match outcome.recv_timeout(limit) {
        Ok(released) => report(&released, quiet),
        Err(_) => eprintln!(
            "syncguard: releasing the lock did not finish within {}; exiting anyway (it expires \
             at its ttl{})",
            humantime::format_duration(limit),
            if ending == Ending::Ran {
                ", or when --min-hold ends if later"
            } else {
                ""
            }
        ),
    }
}

/// Says on stderr what became of the lock: with `--min-hold`, whether the hold is set and until
/// when (unless `quiet`: a hold set as asked is the one outcome cron need not mail about);
/// otherwise only what went wrong, if anything.
fn report(released: &Released, quiet: bool) {
    let Some(hold_until_ms) = released.hold_until_ms else {
        if let Err(error) = &released.outcome {
            eprintln!("syncguard: releasing the lock failed (it expires at its ttl): {error}");
        }
        return;
    };
    let expires = released.expires_at_ms;
    match &released.outcome {
        Ok(true) if quiet => {}
        Ok(true) => eprintln!(
            "syncguard: --min-hold: hold set until {}",
            timestamp(hold_until_ms)
        ),
        Ok(false) => eprintln!(
            "syncguard: --min-hold: hold not set: the lock was gone already (lost or taken over)"
        ),
        // The acquisition and every renewal asked the store for the hold at least, so the
        // record lasts until then whether or not this last call got through (the store's own
        // tolerance covers the few ms by which the renewals' clocks and the acquisition's
        // differ).
        Err(error) if expires.saturating_add(TIME_TOLERANCE_MS) >= hold_until_ms => eprintln!(
            "syncguard: --min-hold: hold set until {} (setting the lock to end then failed: \
             {error}; it expires at {})",
            timestamp(hold_until_ms),
            timestamp(expires)
        ),
        Err(error) => eprintln!(
            "syncguard: --min-hold: hold not set: lease expires at {}: {error}",
            timestamp(expires)
        ),
    }
}

/// `ms` (Unix ms) as an RFC 3339 UTC timestamp.
fn timestamp(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0).unsigned_abs());
    humantime::format_rfc3339_millis(at).to_string()
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
}
