//! The lease state machine: one held lease, shared by its guard and the heartbeat, and the one
//! path by which it is renewed, released, lost or handed over.
//!
//! ```text
//!   Held ──renewal applied──▶ Held          (deadline and next renewal move on)
//!   Held ──renewal: gone────▶ Lost{confirmed}   (the store said so: nothing to release)
//!   Held ──deadline passed──▶ Lost{unconfirmed} (releasing is still worth a try)
//!   Held | Lost{unconfirmed} ──release──▶ Releasing ──▶ Released
//!                   (before min_hold ends: the release is an extension to the hold's end)
//!   Held ──detach──▶ Detached              (kept in the store, forgotten here)
//! ```
//!
//! With a `min_hold`, the acquisition and every renewal inside the hold ask the store for at
//! least what is left of the hold (the lease's *length*), while the heartbeat keeps renewing on
//! the schedule of the lease's own TTL. The store's record thus never ends before the hold,
//! whether or not the release at the end reaches the store, and the local deadline (send time
//! plus length) is never before the hold's end either.
//!
//! No lock is held across a call to the store. A renewal marks the lease `renewing` before it
//! is sent; a release waits until no renewal is in flight and then moves to `Releasing`, after
//! which no renewal can begin — so no renewal of a lease is ever sent after its release began.
//! The deadline check does not wait for a renewal in flight: a lease is declared lost at its
//! local deadline even while a renewal hangs, and a renewal that comes back after that does not
//! revive it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::driver::Lease;
use crate::driver::{Driver, DriverExt as _, Extension, LeaseKind, LeaseRef, Outcome, Version};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::holder::Holder;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::locker::options::{Heartbeat, LostCallback};
use crate::locker::store::{Origin, Store, Unheld};
use crate::observe::{self, LockObserver, Observers, Release, Subject};
use crate::time::Ttl;

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Held,
    Releasing,
    Released,
    /// Handed over to the program ([`LockGuard::detach`](crate::LockGuard::detach)): neither
    /// renewed nor released here.
    Detached,
    /// `confirmed`: the store said the lock is gone (so releasing would be pointless);
    /// otherwise the lease ran past its deadline without a successful renewal.
    Lost {
        confirmed: bool,
    },
}

/// What the state lock guards.
struct State {
    phase: Phase,
    /// The store's version of the record, from the last acquire or renewal.
    version: Option<Version>,
    /// A renewal has been sent and has not come back.
    renewing: bool,
}

/// What a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock was deleted.
    Removed,
    /// Released before its `min_hold` ended: set to expire then, and left in the store.
    Kept,
    /// It was gone already (or released before).
    Absent,
}

/// What a renewal came to.
pub(crate) enum Renewal {
    /// The store renewed it: the lease goes on.
    Renewed,
    /// The lease is over: released, handed over, or lost (and reported).
    Ended,
    /// The store could not be asked; the lease goes on until its deadline.
    Failed(LockError),
}

/// Whether a renewal may go out.
pub(crate) enum Begin {
    /// Send this.
    Send(Ticket),
    /// Another renewal of this lease is in flight.
    Busy,
    /// Nothing to send: the lease is over, or `max_hold` has passed.
    Done(Renewal),
}

/// A renewal on its way to the store.
pub(crate) struct Ticket {
    version: Option<Version>,
    /// The TTL later renewals ask for (the lease's own, or cut short by `max_hold`).
    renewal_ttl: Ttl,
    /// What this one asks for: at least the rest of a `min_hold`.
    length: Ttl,
    sent: Instant,
}

impl Ticket {
    /// The TTL sent to the store.
    pub(crate) fn ttl(&self) -> Ttl {
        self.length
    }
}

/// A held lease: shared by its guard and the heartbeat scheduler.
pub(crate) struct HeldLease {
    key: Key,
    lock_id: LockId,
    kind: LeaseKind,
    fence: Fence,
    heartbeat: Heartbeat,
    on_lock_lost: Option<LostCallback>,
    observers: Observers,
    /// The end of the hold (loss, release or hand-over) has been told to the observers: the
    /// first of them to swap it ends the hold, whatever order the events race in.
    hold_ended: AtomicBool,
    /// The release has been told to the observers.
    release_observed: AtomicBool,
    lost_token: CancelToken,
    /// When renewals stop (`LockOptions::max_hold`): the lease then ends at its last expiry.
    hold_until: Option<Instant>,
    /// Until when a release keeps the lock (`LockOptions::min_hold`).
    hold_at_least_until: Option<Instant>,
    /// The same, in Unix ms of the store's time authority.
    hold_at_least_until_ms: Option<i64>,
    /// Instants below are stored as nanoseconds since `base`, so readers never block.
    base: Instant,
    ttl_ms: AtomicI64,
    /// When the lease runs out locally: the send time of the last successful acquire/extend
    /// plus its TTL. The store's expiry is never earlier (it starts counting later).
    deadline_ns: AtomicU64,
    /// When the heartbeat should renew next.
    next_due_ns: AtomicU64,
    /// Moves on whenever the renewal schedule does; older heartbeat entries are then stale.
    generation: AtomicU64,
    expires_at_ms: AtomicI64,
    lost: AtomicBool,
    lost_reported: AtomicBool,
    /// A renewal was cut short, or refused, by `max_hold`: the lease ends at it.
    at_max_hold: AtomicBool,
    /// Ran out before a renewal was confirmed, and not yet handed to the background release
    /// (a renewal may still have been applied: the lock may be in the store for nobody).
    lapsed: AtomicBool,
    /// Set when the phase leaves `Held`; readable without the state lock.
    finished: AtomicBool,
    state: Mutex<State>,
    /// Signalled when a renewal comes back.
    settled: Condvar,
}

/// How a lease was granted, for [`HeldLease::new`].
pub(crate) struct Grant {
    pub key: Key,
    pub lock_id: LockId,
    /// A lock or a permit.
    pub kind: LeaseKind,
    pub lease: Lease,
    pub version: Option<Version>,
    /// When the acquire was sent.
    pub sent: Instant,
    /// The lease's TTL, which renewals ask for.
    pub ttl: Ttl,
    /// What the acquisition asked for: the TTL, or the `min_hold` if longer.
    pub length: Ttl,
}

/// What the holder asked for, for [`HeldLease::new`].
pub(crate) struct Terms {
    pub heartbeat: Heartbeat,
    pub max_hold: Option<Duration>,
    pub min_hold: Option<Duration>,
    pub on_lock_lost: Option<LostCallback>,
    pub observers: Observers,
}

impl HeldLease {
    pub(crate) fn new(grant: Grant, terms: Terms) -> Self {
        let hold_until = terms.max_hold.and_then(|hold| grant.sent.checked_add(hold));
        // Counted from the answer, not the send: the store's clock at the grant, from which
        // `hold_at_least_until_ms` counts, is between the two, so renewals inside the hold
        // never ask for less than the hold the guard reports (a slow acquisition would
        // otherwise cut the record short of it by its round trip). Never past `max_hold`.
        let hold_at_least_until = terms
            .min_hold
            .and_then(|hold| Instant::now().checked_add(hold))
            .map(|end| hold_until.map_or(end, |until| end.min(until)));
        let held = HeldLease {
            key: grant.key,
            lock_id: grant.lock_id,
            kind: grant.kind,
            fence: grant.lease.fence,
            heartbeat: terms.heartbeat,
            on_lock_lost: terms.on_lock_lost,
            observers: terms.observers,
            hold_ended: AtomicBool::new(false),
            release_observed: AtomicBool::new(false),
            lost_token: CancelToken::new(),
            hold_until,
            hold_at_least_until,
            // The store's clock at the acquisition is its expiry less what was asked for.
            hold_at_least_until_ms: terms.min_hold.map(|hold| {
                grant
                    .lease
                    .expires_at_ms
                    .saturating_sub(grant.length.as_millis())
                    .saturating_add(covering(hold).as_millis())
            }),
            base: grant.sent,
            ttl_ms: AtomicI64::new(0),
            deadline_ns: AtomicU64::new(0),
            next_due_ns: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            expires_at_ms: AtomicI64::new(0),
            lost: AtomicBool::new(false),
            lost_reported: AtomicBool::new(false),
            at_max_hold: AtomicBool::new(false),
            lapsed: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            state: Mutex::new(State {
                phase: Phase::Held,
                version: grant.version,
                renewing: false,
            }),
            settled: Condvar::new(),
        };
        held.set_renewal(
            grant.sent,
            grant.ttl,
            grant.length,
            grant.lease.expires_at_ms,
        );
        held
    }

    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    pub(crate) fn lock_id(&self) -> &LockId {
        &self.lock_id
    }

    pub(crate) fn kind(&self) -> LeaseKind {
        self.kind
    }

    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    pub(crate) fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms.load(Ordering::Acquire)
    }

    pub(crate) fn lost_token(&self) -> CancelToken {
        self.lost_token.clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state once no renewal is in flight (waits for one to come back).
    fn settled_state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state();
        while state.renewing {
            state = self
                .settled
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state
    }

    /// The TTL renewals use: the last one asked for.
    pub(crate) fn ttl(&self) -> Ttl {
        // Only ever stored from a `Ttl`.
        Ttl::from_checked_millis(self.ttl_ms.load(Ordering::Acquire))
    }

    /// How often the heartbeat renews this lease; `None` when it does not.
    pub(crate) fn interval(&self) -> Option<Duration> {
        self.heartbeat.interval_for(self.ttl().as_duration())
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.at(self.deadline_ns.load(Ordering::Acquire))
    }

    pub(crate) fn next_due(&self) -> Instant {
        self.at(self.next_due_ns.load(Ordering::Acquire))
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A new schedule: entries scheduled before are stale from now on.
    pub(crate) fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether the lease can no longer be counted on. Latches: once true, stays true.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.latch_lost();
            return true;
        }
        false
    }

    /// Latches the loss for every reader: the token work waits on first (and the tokens it
    /// relays to, a set's), then the flag `is_lost` reads, so that whoever sees the lease lost
    /// finds its token cancelled.
    fn latch_lost(&self) {
        self.lost_token.cancel();
        self.lost.store(true, Ordering::Release);
    }

    /// Whether renewals and releases still go out for this lease.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// The `LockLost` error for this lease.
    pub(crate) fn lost_error(&self) -> LockError {
        self.error(
            ErrorCode::LockLost,
            &format!(
                "the lease on key {} was lost: the lock expired or was taken over",
                self.key
            ),
        )
    }

    /// Takes a renewal out for sending, for `ttl` (or the lease's own). With `wait`, waits for
    /// a renewal in flight to come back first (a guard's extension); otherwise answers `Busy`.
    pub(crate) fn begin_renewal(&self, ttl: Option<Ttl>, wait: bool) -> Begin {
        let mut state = if wait {
            self.settled_state()
        } else {
            self.state()
        };
        if state.phase != Phase::Held {
            return Begin::Done(Renewal::Ended);
        }
        if state.renewing {
            return Begin::Busy;
        }
        if self.is_lost() {
            self.mark_lost(&mut state, false);
            drop(state);
            self.report_lost(
                self.why_lost("it ran out before a renewal succeeded"),
                false,
            );
            return Begin::Done(Renewal::Ended);
        }
        let sent = Instant::now();
        let mut ttl = ttl.unwrap_or_else(|| self.ttl());
        // min_hold: the store keeps the lock at least until the hold ends.
        let mut length = self.min_hold_left().map_or(ttl, |left| ttl.max(left));
        if let Some(until) = self.hold_until {
            // max_hold: the lease may last until `until` and no longer.
            let left = until.saturating_duration_since(sent);
            let left_ms = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
            if left_ms < 1 {
                // Renewals stop; the deadline check reports the end.
                self.at_max_hold.store(true, Ordering::Release);
                return Begin::Done(Renewal::Ended);
            }
            if left_ms <= length.as_millis() {
                self.at_max_hold.store(true, Ordering::Release);
                length = Ttl::from_checked_millis(left_ms);
                ttl = ttl.min(length);
            }
        }
        state.renewing = true;
        Begin::Send(Ticket {
            version: state.version.clone(),
            renewal_ttl: ttl,
            length,
            sent,
        })
    }

    /// The lease as the store is told about it, with the version of `ticket`.
    pub(crate) fn lease_ref<'a>(&'a self, ticket: &'a Ticket) -> LeaseRef<'a> {
        LeaseRef::new(&self.lock_id)
            .with_key(&self.key)
            .with_kind(self.kind)
            .with_version(ticket.version.as_ref())
    }

    /// Applies the store's answer to a renewal.
    pub(crate) fn finish_renewal(
        &self,
        ticket: Ticket,
        answer: Result<Outcome<Extension>>,
    ) -> Renewal {
        let mut state = self.state();
        state.renewing = false;
        self.settled.notify_all();
        match answer {
            Ok(Outcome::Applied(extension)) => {
                if state.phase != Phase::Held {
                    // Declared lost at its deadline while this was in flight: the program may
                    // have been told, so it stays lost.
                    Renewal::Ended
                } else if Instant::now() >= self.deadline() {
                    self.mark_lost(&mut state, false);
                    drop(state);
                    self.report_lost(
                        self.why_lost("a renewal came back after it had run out"),
                        false,
                    );
                    Renewal::Ended
                } else {
                    let Extension {
                        expires_at_ms,
                        version,
                    } = extension;
                    state.version = version;
                    self.set_renewal(
                        ticket.sent,
                        ticket.renewal_ttl,
                        ticket.length,
                        expires_at_ms,
                    );
                    drop(state);
                    self.observe(|observer, subject| {
                        observer.renewed(&observe::Renewed { subject })
                    });
                    Renewal::Renewed
                }
            }
            Ok(Outcome::NotFound | Outcome::Expired | Outcome::NotOwner) => {
                self.mark_lost(&mut state, true);
                drop(state);
                self.report_lost("the lock was gone when its lease was renewed", true);
                Renewal::Ended
            }
            Err(error) => {
                drop(state);
                let left = self.deadline().saturating_duration_since(Instant::now());
                self.observe(|observer, subject| {
                    observer.renewal_failed(&observe::RenewalFailed {
                        subject,
                        code: error.code(),
                        left,
                    })
                });
                Renewal::Failed(error)
            }
        }
    }

    /// Renews the lease for `ttl` (or its own TTL) through `driver`, waiting for a renewal in
    /// flight first: [`LockGuard::extend`](crate::LockGuard::extend), and with `holder` a
    /// leader's [`proclaim`](crate::Leadership::proclaim), which stores the new holder text in
    /// the same step (the heartbeat's renewals never carry one, so they never replace it).
    pub(crate) fn renew(
        &self,
        driver: &dyn Driver,
        ttl: Option<Ttl>,
        holder: Option<&Holder>,
    ) -> Renewal {
        match self.begin_renewal(ttl, true) {
            Begin::Send(ticket) => {
                let lease = self.lease_ref(&ticket);
                let lease = match holder {
                    Some(holder) => lease.with_holder(holder),
                    None => lease,
                };
                let answer = driver.extend_lease(lease, ticket.length);
                self.finish_renewal(ticket, answer)
            }
            Begin::Busy => Renewal::Failed(LockError::internal(
                "a renewal of this lease was still in flight",
            )),
            Begin::Done(renewal) => renewal,
        }
    }

    /// Declares the lease lost if its deadline has passed without a renewal; reports it once.
    /// Never waits for a renewal in flight.
    pub(crate) fn expire_if_overdue(&self) {
        if self.is_finished() && !matches!(self.state().phase, Phase::Lost { .. }) {
            return;
        }
        if Instant::now() < self.deadline() {
            return;
        }
        let mut state = self.state();
        let why = match state.phase {
            Phase::Held | Phase::Lost { .. } => {
                self.why_lost("it ran out before a renewal succeeded")
            }
            _ => return,
        };
        self.mark_lost(&mut state, false);
        drop(state);
        self.report_lost(why, false);
    }

    /// Releases the lease through `driver`, once. Waits for a renewal in flight to come back
    /// first, so that none is sent after the release. Before `min_hold` has passed, and with
    /// `keep_hold`, the lock is kept: one extension sets it to expire when the hold ends (if it
    /// fails, the store's record still lasts until then at least: see the module docs).
    pub(crate) fn release(&self, driver: &dyn Driver, keep_hold: bool) -> Result<Released> {
        let result = self.release_in_store(driver, keep_hold);
        if !self.release_observed.swap(true, Ordering::AcqRel) {
            let how = match &result {
                Ok(Released::Removed) => Release::Released,
                Ok(Released::Kept) => Release::KeptForMinHold,
                Ok(Released::Absent) => Release::AlreadyGone,
                Err(error) => Release::Error(error.code()),
            };
            let held_for = self.base.elapsed();
            let after_loss = self.hold_ended.swap(true, Ordering::AcqRel);
            self.observe(|observer, subject| {
                observer.released(&observe::Released {
                    subject,
                    held_for,
                    how,
                    after_loss,
                })
            });
        }
        result
    }

    /// [`release`](Self::release) without the observing.
    fn release_in_store(&self, driver: &dyn Driver, keep_hold: bool) -> Result<Released> {
        let version = {
            let mut state = self.settled_state();
            match state.phase {
                Phase::Held | Phase::Lost { confirmed: false } => {
                    self.set_phase(&mut state, Phase::Releasing);
                    state.version.clone()
                }
                Phase::Lost { confirmed: true } | Phase::Releasing | Phase::Released => {
                    self.set_phase(&mut state, Phase::Released);
                    return Ok(Released::Absent);
                }
                Phase::Detached => return Ok(Released::Absent),
            }
        };
        let lease = LeaseRef::new(&self.lock_id)
            .with_key(&self.key)
            .with_kind(self.kind)
            .with_version(version.as_ref());
        let result = match self.min_hold_left().filter(|_| keep_hold) {
            Some(left) => driver
                .extend_lease(lease, left)
                .map(|outcome| match outcome {
                    Outcome::Applied(extension) => {
                        self.expires_at_ms
                            .store(extension.expires_at_ms, Ordering::Release);
                        Released::Kept
                    }
                    _ => Released::Absent,
                }),
            None => driver.release_lease(lease).map(|outcome| match outcome {
                Outcome::Applied(()) => Released::Removed,
                _ => Released::Absent,
            }),
        };
        self.set_phase(&mut self.state(), Phase::Released);
        match result {
            Err(error) if error.key().is_none() => Err(error.with_key(self.key.as_str())),
            result => result,
        }
    }

    /// What is left of `min_hold`, rounded up to a whole millisecond; `None` once it is over
    /// (or without one).
    pub(crate) fn min_hold_left(&self) -> Option<Ttl> {
        let left = self
            .hold_at_least_until?
            .saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| covering(left))
    }

    /// When `min_hold` ends; `None` without one.
    pub(crate) fn min_hold_end(&self) -> Option<Instant> {
        self.hold_at_least_until
    }

    /// When `min_hold` ends, in Unix ms of the store's time authority; `None` without one.
    pub(crate) fn min_hold_end_ms(&self) -> Option<i64> {
        self.hold_at_least_until_ms
    }

    /// Stops renewing and releasing: the lock stays in the store until its expiry, under the
    /// returned lease, whose `expires_at_ms` is the last the store confirmed. Waits for a
    /// renewal in flight, so that the expiry returned is the latest.
    pub(crate) fn detach(&self) -> Lease {
        let mut state = self.settled_state();
        let held = state.phase == Phase::Held;
        self.set_phase(&mut state, Phase::Detached);
        drop(state);
        // A lease handed over is never released here: the guard's drop finds nothing to say.
        self.release_observed.store(true, Ordering::Release);
        if held && !self.hold_ended.swap(true, Ordering::AcqRel) {
            let held_for = self.base.elapsed();
            self.observe(|observer, subject| {
                observer.detached(&observe::Detached { subject, held_for })
            });
        }
        Lease {
            lock_id: self.lock_id.as_str().to_owned(),
            fence: self.fence,
            expires_at_ms: self.expires_at_ms(),
        }
    }

    /// Why a lease that ran out is lost: `max_hold`, when a renewal was cut short or refused
    /// by it, else `otherwise`.
    fn why_lost<'a>(&self, otherwise: &'a str) -> &'a str {
        if self.at_max_hold.load(Ordering::Acquire) {
            "it reached its max_hold and was not renewed any further"
        } else {
            otherwise
        }
    }

    fn set_phase(&self, state: &mut State, phase: Phase) {
        state.phase = phase;
        if phase != Phase::Held {
            self.finished.store(true, Ordering::Release);
        }
    }

    fn mark_lost(&self, state: &mut State, confirmed: bool) {
        self.latch_lost();
        if state.phase == Phase::Held && !confirmed {
            self.lapsed.store(true, Ordering::Release);
        }
        if matches!(state.phase, Phase::Held | Phase::Lost { confirmed: false }) {
            self.set_phase(state, Phase::Lost { confirmed });
        }
    }

    /// A lease that ran out unconfirmed is released in the background at once, rather than
    /// left in the store until the guard is dropped: the program has been told it is lost,
    /// and a renewal applied late may have kept it alive there. Once per lease.
    /// Not during a `min_hold`: the record must then stay until the hold ends.
    pub(crate) fn release_if_lapsed(&self, store: &dyn Store) {
        if self.lapsed.swap(false, Ordering::AcqRel) && self.min_hold_left().is_none() {
            store.release_later(Unheld::now(
                &self.key,
                &self.lock_id,
                self.kind,
                self.ttl(),
                Origin::Lapsed,
            ));
        }
    }

    /// Tells the program (once) that the lease is lost: the observers, then the callback or a
    /// log line (the lost token was cancelled when the loss latched). Called without the state
    /// lock.
    fn report_lost(&self, why: &str, by_renewal: bool) {
        if self.lost_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        let held_for = self.base.elapsed();
        let ends_hold = !self.hold_ended.swap(true, Ordering::AcqRel);
        self.observe(|observer, subject| {
            observer.lost(&observe::Lost {
                subject,
                held_for,
                by_renewal,
                ends_hold,
            })
        });
        let message = format!("lost the lock on key {}: {why}", self.key);
        let error = self.error(ErrorCode::LockLost, &message);
        match &self.on_lock_lost {
            Some(callback) => {
                if catch_unwind(AssertUnwindSafe(|| callback(&error))).is_err() {
                    log::error!("syncguard: the on_lock_lost callback panicked");
                }
            }
            None => log::warn!("syncguard: {message}"),
        }
    }

    /// Tells the observers about this lease.
    fn observe(&self, call: impl Fn(&dyn LockObserver, Subject<'_>)) {
        self.observers.emit(self.kind, &self.key, call);
    }

    fn error(&self, code: ErrorCode, message: &str) -> LockError {
        LockError::new(code, message)
            .with_key(self.key.as_str())
            .with_lock_id(self.lock_id.as_str())
    }

    /// After the store granted `length` from `sent`: the deadline moves on by `length`, the next
    /// renewal is due on the schedule of `ttl`.
    fn set_renewal(&self, sent: Instant, ttl: Ttl, length: Ttl, expires_at_ms: i64) {
        let since_base = sent.saturating_duration_since(self.base);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let interval = self
            .heartbeat
            .interval_for(ttl.as_duration())
            .unwrap_or(ttl.as_duration());
        let length = length.as_duration();
        self.ttl_ms.store(ttl.as_millis(), Ordering::Release);
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.next_due_ns.store(
            ns(since_base).saturating_add(ns(interval)),
            Ordering::Release,
        );
        self.deadline_ns
            .store(ns(since_base).saturating_add(ns(length)), Ordering::Release);
    }

    fn at(&self, ns: u64) -> Instant {
        self.base
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or_else(|| self.base + Duration::from_secs(u64::from(u32::MAX)))
    }
}

/// The shortest TTL that lasts `d`: `d` rounded up to a whole millisecond, within a TTL's bounds
/// (a `min_hold` is validated to fit).
pub(crate) fn covering(d: Duration) -> Ttl {
    let ms = i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX);
    Ttl::from_checked_millis(ms)
}
