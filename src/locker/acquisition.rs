//! The one retry loop, for every kind of lease and for several keys at once. A lease's way
//! through it reads top to bottom: [`take`](Locker::take) plans the request; a [`Waiter`]
//! attempts it until it is granted, refused for good or out of time (standing in line between
//! attempts, releasing what an unanswered attempt may have taken); what the store granted is
//! checked against the fences seen ([`check_grant`](Locker::check_grant), which gives it all
//! back on a fault); and each lease becomes a guard the heartbeat renews
//! ([`hold`](Locker::hold)).

use std::sync::{Arc, Weak};
use std::time::Instant;

use rand::RngExt as _;

use super::guard::{GuardStore, LockGuard};
use super::lease::{Grant, HeldLease, Terms, covering};
use super::options::{LockOptions, LostCallback};
use super::pace::Standing;
use super::retry;
use super::store::{Origin, Store, Unheld};
use super::wake::Waiting;
use super::{Locker, Shared};
use crate::cancel::CancelToken;
use crate::driver::{
    self, Acquisitions, Driver, KeySet, Lease, LeaseKind, Line, Mode, Request, Version,
};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::key::Key;
use crate::line::PLACE_RENEWAL;
use crate::lock_id::LockId;
use crate::observe::{Acquired, NotAcquired, Observers, Refusal};
use crate::time::Ttl;

/// One acquisition as planned from its options: what is asked of the store, and the terms
/// its leases are held on.
struct Plan<'a> {
    keys: &'a KeySet,
    mode: Mode,
    options: &'a LockOptions,
    /// The TTL renewals ask for.
    ttl: Ttl,
    /// What the store is asked for first: the TTL, or the `min_hold` if longer.
    length: Ttl,
}

/// What the store granted: a lease per key, with the time the attempt was sent and the
/// highest fence of each key this locker had seen then.
struct Granted {
    leases: Vec<(Lease, Option<Version>)>,
    sent: Instant,
    seen: Vec<Option<Fence>>,
}

/// Leases that passed [`Locker::check_grant`]: each with its key and parsed lock id.
struct Checked<'k> {
    leases: Vec<(&'k Key, LockId, Lease, Option<Version>)>,
    sent: Instant,
}

impl<B: Driver + 'static> Locker<B> {
    /// The retry loop for one key's lock, permit or shared hold.
    pub(crate) fn acquire_key(
        &self,
        key: Key,
        mode: Mode,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>> {
        let guards = self.acquire_set(&KeySet::one(key), mode, options)?;
        Ok(guards.and_then(|guards| guards.into_iter().next()))
    }

    /// The retry loop, and the one place its outcome is observed (for each key of `keys`).
    /// `Ok(None)` when it stayed held past the timeout or retry budget; otherwise a guard per
    /// key, in the set's order.
    pub(crate) fn acquire_set(
        &self,
        keys: &KeySet,
        mode: Mode,
        options: &LockOptions,
    ) -> Result<Option<Vec<LockGuard>>> {
        let observers = self.observers();
        let start = Instant::now();
        let mut attempts: u32 = 0;
        let result = self.take(keys, mode, options, &observers, start, &mut attempts);
        if observers.is_empty() {
            return result;
        }
        let wait = start.elapsed();
        let why = match &result {
            Ok(Some(guards)) => {
                for guard in guards {
                    observers.emit(mode.kind(), guard.lease_key(), |observer, subject| {
                        observer.acquired(&Acquired {
                            subject,
                            wait,
                            attempts,
                            fence: guard.fence(),
                        })
                    });
                }
                return result;
            }
            Ok(None) if !options.waits() => Refusal::Held,
            Ok(None) => Refusal::Timeout,
            Err(error) if error.code() == ErrorCode::Aborted => Refusal::Cancelled,
            Err(error) => Refusal::Error(error.code()),
        };
        for key in keys {
            observers.emit(mode.kind(), key, |observer, subject| {
                observer.not_acquired(&NotAcquired {
                    subject,
                    why,
                    wait,
                    attempts,
                })
            });
        }
        result
    }

    /// [`acquire_set`](Self::acquire_set) without the observing; `tried` counts the attempts
    /// sent to the store.
    fn take(
        &self,
        keys: &KeySet,
        mode: Mode,
        options: &LockOptions,
        observers: &Observers,
        start: Instant,
        tried: &mut u32,
    ) -> Result<Option<Vec<LockGuard>>> {
        let (ttl, holder) = options.checked()?;
        let plan = Plan {
            keys,
            mode,
            options,
            ttl,
            // min_hold: the store is asked for the hold at least, so that its record outlasts
            // the hold whatever becomes of this process or its connection (renewals keep it).
            length: options.min_hold.map_or(ttl, |hold| ttl.max(covering(hold))),
        };
        // Before acquiring: a thread that cannot start must not leave a lock behind. It renews
        // leases and reports them lost at their deadlines, also with the heartbeat off.
        let store: Weak<dyn Store> = self.shared.this.clone();
        self.shared.scheduler.ensure_running(store)?;
        // The waiter's place in the keys' lines: one id for all its attempts, so that a
        // repeated request is one place. A single attempt takes none but heeds the line; with
        // the line off, every attempt barges.
        let place = (options.waits() && options.wait_in_line).then(LockId::generate);
        let request = Request::all(keys, plan.length)
            .mode(mode)
            .holder(holder.as_ref());
        let mut waiter = Waiter::new(&self.shared, request, &plan, place.as_ref(), start);
        let granted = loop {
            match waiter.attempt(tried) {
                Ok(Some(granted)) => break granted,
                Ok(None) if waiter.pause() => {}
                Ok(None) => return waiter.give_up(Ok(())).map(|()| None),
                Err(error) => return waiter.give_up(Err(error)).map(|()| None),
            }
        };
        drop(waiter);
        let checked = self.check_grant(&plan, granted)?;
        Ok(Some(self.hold(&plan, checked, observers)))
    }

    /// The leases granted, checked: one per key, each lock id well formed and each fence above
    /// what this locker had seen when it asked. Otherwise every one is given back (all or
    /// none) and the fault answered.
    fn check_grant<'k>(&self, plan: &Plan<'k>, granted: Granted) -> Result<Checked<'k>> {
        let Granted { leases, sent, seen } = granted;
        let kind = plan.mode.kind();
        // A driver bug, never seen from the bundled ones: given back at once.
        if leases.len() != plan.keys.len() {
            self.shared.give_back(plan, &leases);
            return Err(LockError::internal(format!(
                "the backend granted {} leases for {} keys",
                leases.len(),
                plan.keys.len()
            ))
            .with_key(plan.keys.as_slice()[0].as_str()));
        }
        let mut checked = Vec::with_capacity(leases.len());
        for ((key, (lease, version)), seen) in plan.keys.iter().zip(&leases).zip(seen) {
            let verdict = LockId::new(&lease.lock_id)
                .map_err(|_| {
                    LockError::internal("the backend granted a malformed lock id")
                        .with_key(key.as_str())
                })
                .and_then(|lock_id| {
                    self.shared
                        .fences
                        .check(key, kind.sequence(), lease.fence, seen)
                        .map(|()| lock_id)
                });
            match verdict {
                Ok(lock_id) => checked.push((key, lock_id, lease.clone(), version.clone())),
                Err(error) => {
                    self.shared.give_back(plan, &leases);
                    return Err(error);
                }
            }
        }
        Ok(Checked {
            leases: checked,
            sent,
        })
    }

    /// A guard per checked lease, each scheduled with the heartbeat. Several keys are lost as
    /// a whole: the first loss cancels the set's token and runs the caller's `on_lock_lost`
    /// once.
    fn hold(&self, plan: &Plan<'_>, checked: Checked<'_>, observers: &Observers) -> Vec<LockGuard> {
        let options = plan.options;
        let on_lock_lost = match plan.keys.len() {
            1 => options.on_lock_lost.clone(),
            _ => Some(lost_together(options.on_lock_lost.clone())),
        };
        let sent = checked.sent;
        checked
            .leases
            .into_iter()
            .map(|(key, lock_id, lease, version)| {
                let held = Arc::new(HeldLease::new(
                    Grant {
                        key: key.clone(),
                        lock_id,
                        kind: plan.mode.kind(),
                        lease,
                        version,
                        sent,
                        ttl: plan.ttl,
                        length: plan.length,
                    },
                    Terms {
                        heartbeat: options.heartbeat,
                        max_hold: options.max_hold,
                        min_hold: options.min_hold,
                        on_lock_lost: on_lock_lost.clone(),
                        observers: observers.clone(),
                    },
                ));
                self.shared.scheduler.schedule(&held);
                let store: Arc<dyn GuardStore> = self.shared.clone();
                LockGuard::new(held, store, options.on_release_error.clone())
            })
            .collect()
    }
}

/// A request being attempted until it is granted, refused for good or out of time.
struct Waiter<'a, B: Driver + 'static> {
    shared: &'a Shared<B>,
    request: Request<'a>,
    plan: &'a Plan<'a>,
    start: Instant,
    /// Registered as a waiter before the first attempt (a map entry per key, no I/O), so that
    /// a release during any attempt is heard; the count of releases heard is read before each
    /// attempt, so a release between an attempt and the pause after it ends the pause at once.
    /// The driver's watch (other processes' releases) starts only on contention.
    waiting: Option<Waiting>,
    heard: u64,
    place: Option<&'a LockId>,
    /// An attempt that waits in line was sent: a place may be stored.
    in_line: bool,
    /// Where the last refusal said this waiter stands in line (`None` when it took no place,
    /// or the last attempt failed): the line's pace ([`Standing::pause`]) then decides its
    /// pauses, not the options' backoff.
    standing: Option<Standing>,
    /// A transient failure (timeout, unreachable store) does not end the wait: it is tried
    /// again like contention, and reported only if the wait ends with it.
    failure: Option<LockError>,
    retries: u32,
}

impl<'a, B: Driver + 'static> Waiter<'a, B> {
    fn new(
        shared: &'a Shared<B>,
        request: Request<'a>,
        plan: &'a Plan<'a>,
        place: Option<&'a LockId>,
        start: Instant,
    ) -> Self {
        let options = plan.options;
        // A waiter of several keys stands on each of their lines with the one ticket its
        // first refusal answered (`Line::WaitAt`).
        let line = match place {
            Some(place) => Line::Wait(place),
            None if options.wait_in_line => Line::Keep,
            None => Line::Ignore,
        };
        Waiter {
            shared,
            request: request.line(line),
            plan,
            start,
            waiting: options
                .waits()
                .then(|| shared.wakeups.enter(plan.keys.as_slice())),
            heard: 0,
            place,
            in_line: false,
            standing: None,
            failure: None,
            retries: 0,
        }
    }

    /// One attempt: the leases when granted; `None` after a refusal or a transient failure
    /// (then it stands in line, or the failure is kept); an error that ends the wait.
    fn attempt(&mut self, tried: &mut u32) -> Result<Option<Granted>> {
        if self
            .plan
            .options
            .cancel
            .as_ref()
            .is_some_and(CancelToken::is_cancelled)
        {
            return Err(LockError::new(ErrorCode::Aborted, "the wait was cancelled")
                .with_key(self.request.first_key().as_str()));
        }
        self.heard = self.waiting.as_ref().map_or(0, Waiting::heard);
        // Granted fences must be above what this locker had seen when it asked.
        let kind = self.plan.mode.kind();
        let seen = (self.plan.keys.iter())
            .map(|key| self.shared.fences.highest(key, kind.sequence()))
            .collect();
        let sent = Instant::now();
        *tried = tried.saturating_add(1);
        self.in_line |= self.place.is_some();
        match driver::acquire(&self.shared.backend, &self.request) {
            Ok(Acquisitions::Acquired(leases)) => Ok(Some(Granted { leases, sent, seen })),
            Ok(Acquisitions::Locked { ticket, position }) => {
                let round_trip = sent.elapsed();
                self.refused(ticket);
                self.standing = match (self.place, position) {
                    (Some(_), Some(position)) => Some(Standing {
                        position,
                        mode: self.plan.mode,
                        announced: self.waiting.as_ref().is_some_and(Waiting::announced),
                        round_trip,
                    }),
                    _ => None,
                };
                Ok(None)
            }
            Err(error) => {
                self.standing = None;
                self.failed(error).map(|()| None)
            }
        }
    }

    /// Refused: the waiter's next attempts carry its ticket, and it hears of releases.
    fn refused(&mut self, ticket: Option<u64>) {
        if let Some(ticket) = ticket {
            self.request = self.request.line(self.request.line.at(ticket));
        }
        self.failure = None;
        if let Some(waiting) = &self.waiting {
            waiting.listen(&self.shared.backend);
        }
    }

    /// Failed: what may have been taken is released later; a transient failure is kept and
    /// tried again, any other ends the wait.
    fn failed(&mut self, error: LockError) -> Result<()> {
        self.shared.release_if_in_doubt(self.plan, &error);
        if !error.code().is_transient() {
            return Err(error);
        }
        if self.failure.is_none() {
            log::warn!(
                "syncguard: acquiring {} failed, will retry: {error}",
                self.request
            );
        }
        self.failure = Some(error);
        Ok(())
    }

    /// Waits before the next attempt; `false` when the retry budget or the timeout is spent.
    fn pause(&mut self) -> bool {
        let options = self.plan.options;
        if self.retries >= options.max_retries {
            return false;
        }
        self.retries = self.retries.saturating_add(1);
        let random = rand::rng().random::<f64>();
        // In line, the line sets the pace (one policy, in `pace`): the store's load stays
        // bounded however many wait, and only those a release may concern wake at it.
        let (delay_ms, releases) = match self.standing {
            Some(standing) => {
                let pause = standing.pause(random);
                (pause.delay.as_secs_f64() * 1000.0, pause.releases)
            }
            None => (self.backoff_ms(random), 1),
        };
        let Some(delay) = retry::clamp_to_timeout(delay_ms, self.start.elapsed(), options.timeout)
        else {
            return false;
        };
        if let Some(waiting) = &self.waiting {
            waiting.sleep(self.heard, releases, delay, options.cancel.as_ref());
        }
        true
    }

    /// The options' backoff before the next attempt, for a waiter that does not know its place
    /// (no line, or its last attempt failed). In line, each attempt renews the waiter's place:
    /// it must come before the place lapses, however long the backoff has grown.
    fn backoff_ms(&self, random: f64) -> f64 {
        let options = self.plan.options;
        let delay_ms = retry::retry_delay_ms(
            self.retries,
            options.retry_delay,
            options.max_retry_delay,
            options.backoff,
            options.jitter,
            random,
        );
        match self.place {
            Some(_) => delay_ms.min(PLACE_RENEWAL.as_secs_f64() * 1000.0),
            None => delay_ms,
        }
    }

    /// Ends a wait that was not granted: its places leave the lines, and a transient failure
    /// that ended it is its answer.
    fn give_up(mut self, ended: Result<()>) -> Result<()> {
        self.waiting = None;
        if let (true, Some(place)) = (self.in_line, self.place) {
            for key in self.plan.keys {
                self.shared.leave_line(key, self.plan.mode.kind(), place);
            }
        }
        ended?;
        self.failure.take().map_or(Ok(()), Err)
    }
}

impl<B: Driver + 'static> Shared<B> {
    /// Releases the leases granted for a plan's keys that the caller will not hold (a fence
    /// check or a driver bug refused the set): each is released now, or later if that fails.
    fn give_back(&self, plan: &Plan<'_>, leases: &[(Lease, Option<Version>)]) {
        let kind = plan.mode.kind();
        for (key, (lease, version)) in plan.keys.iter().zip(leases) {
            let released =
                driver::release_granted(&self.backend, key, kind, lease, version.as_ref());
            if released.is_err()
                && let Ok(lock_id) = LockId::new(&lease.lock_id)
            {
                self.release_later(Unheld::now(
                    key,
                    &lock_id,
                    kind,
                    plan.length,
                    Origin::FailedRelease,
                ));
            }
        }
    }

    /// A waiter that gave up leaves the line at once; if the store cannot be told now, its
    /// place lapses on its own within [`PLACE_TTL`](crate::driver::PLACE_TTL).
    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) {
        if let Err(error) = self.backend.leave_line(key, kind, place) {
            log::info!(
                "syncguard: leaving the line of key {key} failed ({error}); the place lapses on its own"
            );
        }
    }

    /// An acquisition that failed without an answer may still be applied by the store: its
    /// lock id is released in the background ([`LockError::in_doubt`]).
    fn release_if_in_doubt(&self, plan: &Plan<'_>, error: &LockError) {
        for (named, lock_id) in error.in_doubt_leases() {
            // The key the doubt is about: the one it names (several keys), or the only one.
            let key = (plan.keys.iter())
                .find(|key| named == Some(key.as_str()))
                .unwrap_or(&plan.keys.as_slice()[0]);
            match LockId::new(lock_id) {
                Ok(lock_id) => self.release_later(Unheld::now(
                    key,
                    &lock_id,
                    plan.mode.kind(),
                    plan.length,
                    Origin::InDoubt,
                )),
                Err(_) => {
                    log::error!("syncguard: a backend reported a malformed lock id in doubt");
                }
            }
        }
    }
}

/// The `on_lock_lost` of each lease of several keys taken together: the first loss among them
/// runs `callback` once.
fn lost_together(callback: Option<LostCallback>) -> LostCallback {
    let fired = std::sync::atomic::AtomicBool::new(false);
    Arc::new(move |error: &LockError| {
        if !fired.swap(true, std::sync::atomic::Ordering::SeqCst)
            && let Some(callback) = &callback
        {
            callback(error);
        }
    })
}
