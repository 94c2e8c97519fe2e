//! `run`'s supervisor: one thread that, once the command runs, waits for events from the
//! others — signals `run` receives, the lease's loss (reported by the library), the command's
//! exit (from the reaper) — and for its own timers (`--max-runtime`, `--grace`, and the lease's
//! local deadline, which it reads from the guard whenever a timer fires: each renewal moves it
//! on). Whatever ends the command — a signal, the loss, `--max-runtime` — ends it the same way:
//! the signal to the whole group, `SIGKILL` to the group after `--grace`, then a wait until the
//! group is empty.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use syncguard::LockBackend;

use crate::args::OnLost;
use crate::group::Group;
use crate::held::Held;
use crate::outcome::{EXIT_LOST, EXIT_MAX_RUNTIME};
use crate::watcher::Watcher;

/// How often the supervisor looks whether the group is gone once the command has exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// What the supervisor waits for.
pub enum Event {
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

/// How often the supervisor passes the lease's deadline on to the watcher: a quarter of the
/// grace (within bounds), so that a renewal confirmed before `run`'s own SIGTERM (`--grace`
/// before the deadline) reaches the watcher before its SIGTERM (half the grace before it).
fn forward_interval(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Watches the running group.
pub struct Supervisor<'a> {
    pub group: &'a Group,
    /// The lease (or leases): its local deadline moves on with each renewal.
    pub guard: &'a Held,
    /// The process that ends the group if `run` dies or is not scheduled: told each deadline
    /// (with `--on-lost kill`) and when `run` itself begins to end the group.
    pub watcher: Option<&'a Watcher>,
    pub on_lost: OnLost,
    pub grace: Duration,
    pub ttl: Duration,
}

impl Supervisor<'_> {
    /// Waits until the command has exited and every process of its group is gone, ending the
    /// group on a signal, on loss, as the lease's local deadline nears (`--on-lost kill`:
    /// SIGTERM `--grace` before it, SIGKILL at it) or at `max_runtime`; returns `run`'s exit
    /// code, and whether the lease was lost (or about to be) meanwhile.
    pub fn supervise(
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

/// The exit code of a process ended by `signal`, as shells report it.
pub fn signal_exit(signal: libc::c_int) -> u8 {
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
