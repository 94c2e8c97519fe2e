//! [`Nemesis`]: a driver wrapper that loses answers, or repeats calls as a pool would, at the
//! steps of an acquisition's life chosen by a schedule (DESIGN §12, "Lost answers").
//!
//! Every call is applied to the store first. Then, when the schedule names it ("the 2nd
//! renewal", "the 1st attempt in line"), its answer is lost — the call fails with
//! `NetworkTimeout`, and an acquisition that was granted is reported in doubt with its lock
//! ids, as the bundled drivers report a request sent and never answered — or the call is sent
//! a second time and the second answer is the one returned, as a connection pool that retries
//! a request does. A granted acquisition repeated leaves the first call's lease behind, known
//! to nobody: it lapses at its TTL, which is what a store without request ids does.
//!
//! While it runs it checks the rule of the line after each refusal it sees: a waiter stands
//! at most once on a line, and with one ticket on every line of its keys (the ticket the
//! refusal answered, when it answered one). What it found is [`Nemesis::violations`].
//!

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::driver::{
    Acquisitions, Driver, Extension, Key, LeaseKind, LeaseRef, Line, LockId, Outcome, Request, Ttl,
};
use crate::{ErrorCode, LockError, Result};

/// A step of an acquisition's life, as the nemesis tells them apart by a call and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// A refused acquisition whose waiter was not seen before (or a single attempt refused).
    FirstAttempt,
    /// A refused acquisition of a waiter already seen: an attempt in line.
    InLine,
    /// A granted acquisition.
    Grant,
    /// A renewal (one batch of [`Driver::extend_leases`], a guard's extension being a batch of
    /// one).
    Renewal,
    /// A release.
    Release,
    /// A waiter leaving the line ([`Driver::leave_line`]).
    LeaveLine,
}

/// What the nemesis does to a call it strikes, after the store applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The answer never arrives: `NetworkTimeout`, in doubt for a granted acquisition.
    LoseAnswer,
    /// The call is sent again, and the second answer is returned.
    Repeat,
}

/// One entry of a schedule: the `nth` call (from 1) of `step` suffers `fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strike {
    /// Which step.
    pub step: Step,
    /// Which call of that step, counted from 1 across every thread.
    pub nth: u32,
    /// What happens to it.
    pub fault: Fault,
}

impl Strike {
    /// The `nth` call of `step` suffers `fault`.
    pub fn new(step: Step, nth: u32, fault: Fault) -> Self {
        Strike { step, nth, fault }
    }
}

#[derive(Default)]
struct State {
    /// Acquisitions sent to the store, whatever their answer.
    sent: u32,
    calls: HashMap<Step, u32>,
    /// The place ids of the waiters seen refused, to tell a first attempt from one in line.
    waiters: HashSet<String>,
    struck: Vec<Strike>,
    violations: Vec<String>,
}

/// A driver wrapper that loses answers and repeats calls by a schedule of [`Strike`]s. See
/// the [module docs](self).
pub struct Nemesis<B> {
    inner: B,
    schedule: Vec<Strike>,
    state: Mutex<State>,
}

impl<B: Driver> Nemesis<B> {
    /// Wraps `inner`, striking the calls `schedule` names.
    pub fn new(inner: B, schedule: Vec<Strike>) -> Self {
        Nemesis {
            inner,
            schedule,
            state: Mutex::new(State::default()),
        }
    }

    /// The store underneath, for checks that must not be struck.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// How many calls of `step` were made so far (struck or not).
    pub fn calls(&self, step: Step) -> u32 {
        self.state().calls.get(&step).copied().unwrap_or(0)
    }

    /// How many acquisitions were sent to the store so far, whatever their answer (an error
    /// too).
    pub fn acquisitions_sent(&self) -> u32 {
        self.state().sent
    }

    /// The strikes of the schedule that have happened so far.
    pub fn struck(&self) -> Vec<Strike> {
        self.state().struck.clone()
    }

    /// The strikes of the schedule that have not happened (yet).
    pub fn unstruck(&self) -> Vec<Strike> {
        let struck = self.struck();
        self.schedule
            .iter()
            .filter(|strike| !struck.contains(strike))
            .copied()
            .collect()
    }

    /// What the checks after each refusal found wrong, in the order found.
    pub fn violations(&self) -> Vec<String> {
        self.state().violations.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panicking test thread must not hide what the others recorded.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a call of `step` and answers the fault the schedule has for it.
    fn strike(&self, step: Step) -> Option<Fault> {
        let mut state = self.state();
        let count = state.calls.entry(step).or_insert(0);
        *count += 1;
        let nth = *count;
        let strike = self
            .schedule
            .iter()
            .find(|strike| strike.step == step && strike.nth == nth)
            .copied()?;
        state.struck.push(strike);
        Some(strike.fault)
    }

    /// The step of an acquisition asked with `line`, granted or not.
    fn acquisition_step(&self, line: Line<'_>, granted: bool) -> Step {
        if granted {
            return Step::Grant;
        }
        match line.place() {
            Some(place) if !self.state().waiters.insert(place.as_str().to_owned()) => Step::InLine,
            _ => Step::FirstAttempt,
        }
    }

    /// One acquisition: applied, then struck as the schedule says. After each refusal the
    /// waiter's places are checked.
    fn acquisition(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let (keys, kind, line) = (request.keys(), request.mode.kind().sequence(), request.line);
        let call = || self.inner.try_acquire(request);
        let answer = call();
        self.state().sent += 1;
        let answer = answer?;
        self.check_places(keys, kind, line, &answer);
        let granted = match &answer {
            Acquisitions::Acquired(leases) => Some(leases),
            Acquisitions::Locked { .. } => None,
        };
        match self.strike(self.acquisition_step(line, granted.is_some())) {
            None => Ok(answer),
            Some(Fault::LoseAnswer) => {
                let lost = lost_answer();
                Err(match granted {
                    Some(leases) => lost.in_doubt_all(
                        keys.iter()
                            .zip(leases)
                            .map(|(key, (lease, _))| (key.to_string(), lease.lock_id.clone())),
                    ),
                    None => lost,
                })
            }
            Some(Fault::Repeat) => {
                let again = call()?;
                self.check_places(keys, kind, line, &again);
                Ok(again)
            }
        }
    }

    /// After a refusal of a waiter: it stands at most once on each line of its keys, with one
    /// ticket on all of them, the one the refusal answered (if it answered one).
    fn check_places(&self, keys: &[Key], kind: LeaseKind, line: Line<'_>, answer: &Acquisitions) {
        let (Acquisitions::Locked { ticket, .. }, Some(place)) = (answer, line.place()) else {
            return;
        };
        let mut tickets = Vec::new();
        for key in keys {
            // A read that fails is no finding: the nemesis checks the rule, not the network.
            let Ok(places) = self.inner.find_line(key, kind) else {
                return;
            };
            let mine: Vec<u64> = places
                .iter()
                .filter(|stood| stood.place_id == place.as_str())
                .map(|stood| stood.ticket)
                .collect();
            if mine.len() > 1 {
                self.violation(format!(
                    "a waiter stands {} times on the line of {key}",
                    mine.len()
                ));
            }
            tickets.extend(mine);
        }
        tickets.extend(*ticket);
        tickets.sort_unstable();
        tickets.dedup();
        if tickets.len() > 1 {
            self.violation(format!(
                "a waiter of {} keys holds several tickets: {tickets:?} (answered {ticket:?})",
                keys.len()
            ));
        }
    }

    fn violation(&self, what: String) {
        self.state().violations.push(what);
    }

    /// A call that has no lease to report in doubt (renewal, release, leaving the line):
    /// applied, then struck.
    fn plain<T>(&self, step: Step, call: impl Fn() -> Result<T>) -> Result<T> {
        let answer = call()?;
        match self.strike(step) {
            None => Ok(answer),
            Some(Fault::LoseAnswer) => Err(lost_answer()),
            Some(Fault::Repeat) => call(),
        }
    }
}

fn lost_answer() -> LockError {
    LockError::new(
        ErrorCode::NetworkTimeout,
        "the nemesis lost the answer (the store applied the call)",
    )
}

impl<B: Driver> Driver for Nemesis<B> {
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        self.acquisition(request)
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.plain(Step::Release, || self.inner.release_lease(lease))
    }

    /// The whole batch is one renewal step: its answers are lost together, or it is sent
    /// twice (through the store's own batch path, which the heartbeat uses).
    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        let answers = self.inner.extend_leases(leases);
        match self.strike(Step::Renewal) {
            None => answers,
            Some(Fault::LoseAnswer) => answers.iter().map(|_| Err(lost_answer())).collect(),
            Some(Fault::Repeat) => self.inner.extend_leases(leases),
        }
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        self.plain(Step::LeaveLine, || self.inner.leave_line(key, kind, place))
    }

    delegate_driver!(self, &self.inner; describe, key_is_locked, find, list_records, find_line, break_leases, watch_releases);
}
