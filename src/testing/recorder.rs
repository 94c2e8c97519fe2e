//! [`Recorder`]: a backend wrapper for the guard contracts, which logs each call in order (so a
//! test can prove what was or was not sent) and injects failures.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::driver::{
    Acquisitions, Driver, Extension, Find, Key, LeaseKind, LeaseRef, LockRecord, Outcome, Request,
    Ttl,
};
use crate::{ErrorCode, LockBackend, LockError, LockOptions, Locker, Result};

/// What a recorded call was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// An acquisition of this (normalised) key.
    Acquire(String),
    /// A release of this lock id.
    Release(String),
    /// An extension of this lock id.
    Extend(String),
    /// `is_locked` on this key.
    IsLocked(String),
    /// A lookup, either way.
    Lookup,
}

/// A backend wrapper that logs every call at its start, in order, and injects failures.
pub struct Recorder<B> {
    inner: B,
    log: Mutex<Vec<Call>>,
    /// The keys of the acquisitions answered [`Acquisitions::Locked`], each when its answer came.
    found_held: Mutex<Vec<String>>,
    /// Fail this many upcoming extends with `NetworkTimeout`.
    pub(super) failing_extends: AtomicU32,
    /// Fail every extend with `NetworkTimeout` while set.
    pub(super) extends_down: AtomicBool,
    /// Fail every release with `ServiceUnavailable` while set.
    pub(super) releases_down: AtomicBool,
    /// Fail this many upcoming acquisitions with `ServiceUnavailable`, sending nothing.
    pub(super) failing_acquires: AtomicU32,
    /// Send this many upcoming acquisitions, then lose their answers: `NetworkTimeout`, in doubt.
    pub(super) lost_acquire_answers: AtomicU32,
    /// Which renewals to hold (blocked in the call, as behind a stalled network).
    renewals_hang: (Mutex<Hang>, Condvar),
}

/// Which renewals [`Recorder`] holds, and how many it holds now.
#[derive(Default)]
struct Hang {
    /// Every renewal.
    all: bool,
    /// The renewals of this lock id, and the calls they are in.
    lease: Option<String>,
    /// Renewals held in their calls now.
    held: usize,
}

impl Hang {
    fn holds(&self, lock_id: &str) -> bool {
        self.all || self.lease.as_deref() == Some(lock_id)
    }
}

impl<B: Driver> Recorder<B> {
    /// Wraps `inner`, recording from now on.
    pub fn new(inner: B) -> Arc<Self> {
        Arc::new(Recorder {
            inner,
            log: Mutex::new(Vec::new()),
            found_held: Mutex::new(Vec::new()),
            failing_extends: AtomicU32::new(0),
            extends_down: AtomicBool::new(false),
            releases_down: AtomicBool::new(false),
            failing_acquires: AtomicU32::new(0),
            lost_acquire_answers: AtomicU32::new(0),
            renewals_hang: (Mutex::new(Hang::default()), Condvar::new()),
        })
    }

    /// Makes renewals hang (`true`) until called again with `false`.
    pub fn hang_renewals(&self, hang: bool) {
        let (flag, changed) = &self.renewals_hang;
        flag.lock().unwrap().all = hang;
        changed.notify_all();
    }

    /// Makes the renewals of `lock_id` hang — and with them the call they are sent in, as a
    /// request that never comes back holds up all it carries — until called again with `None`.
    pub fn hang_renewals_of(&self, lock_id: Option<&str>) {
        let (flag, changed) = &self.renewals_hang;
        flag.lock().unwrap().lease = lock_id.map(str::to_owned);
        changed.notify_all();
    }

    /// How many renewals hang in their calls now.
    pub fn renewals_hanging(&self) -> usize {
        self.renewals_hang.0.lock().unwrap().held
    }

    fn wait_while_renewals_hang(&self, lock_id: &str) {
        let (flag, changed) = &self.renewals_hang;
        let mut hang = flag.lock().unwrap();
        if !hang.holds(lock_id) {
            return;
        }
        hang.held += 1;
        while hang.holds(lock_id) {
            hang = changed.wait(hang).unwrap();
        }
        hang.held -= 1;
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.log.lock().unwrap().clone()
    }

    /// How many times `call` was made.
    pub fn count(&self, call: &Call) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == call)
            .count()
    }

    /// How many acquisitions of `key` have come back found held ([`Acquisitions::Locked`]):
    /// unlike [`count`](Recorder::count), which counts calls as they start, only answers.
    pub fn found_held(&self, key: &str) -> usize {
        self.found_held
            .lock()
            .unwrap()
            .iter()
            .filter(|k| *k == key)
            .count()
    }

    fn record(&self, call: Call) {
        self.log.lock().unwrap().push(call);
    }
}

/// Counts one down, if any are left.
fn take_one(budget: &AtomicU32) -> bool {
    budget
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl<B: Driver> Recorder<B> {
    /// An acquisition, recorded as one acquisition per key, with the failures asked for
    /// injected for the request as a whole (a lost answer leaves every lease in doubt).
    fn acquisition(&self, request: &Request<'_>) -> Result<Acquisitions> {
        for key in request.keys() {
            self.record(Call::Acquire(key.to_string()));
        }
        if take_one(&self.failing_acquires) {
            return Err(injected(ErrorCode::ServiceUnavailable));
        }
        match self.inner.try_acquire(request)? {
            Acquisitions::Acquired(mut leases) if take_one(&self.lost_acquire_answers) => {
                let lost = injected(ErrorCode::NetworkTimeout);
                Err(match (request.key(), leases.pop()) {
                    (Some(_), Some((lease, _))) => lost.in_doubt(lease.lock_id),
                    (_, last) => {
                        let doubts = (request.keys().iter())
                            .zip(leases.into_iter().chain(last))
                            .map(|(key, (lease, _))| (key.to_string(), lease.lock_id));
                        lost.in_doubt_all(doubts)
                    }
                })
            }
            refused @ Acquisitions::Locked { .. } => {
                let mut found_held = self.found_held.lock().unwrap();
                found_held.extend(request.keys().iter().map(Key::to_string));
                Ok(refused)
            }
            acquisitions => Ok(acquisitions),
        }
    }
}

fn injected(code: ErrorCode) -> LockError {
    LockError::new(code, "injected by the test")
}

impl<B: Driver> Driver for Recorder<B> {
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        self.acquisition(request)
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.record(Call::Release(lease.lock_id.as_str().to_owned()));
        if self.releases_down.load(Ordering::SeqCst) {
            return Err(injected(ErrorCode::ServiceUnavailable));
        }
        self.inner.release_lease(lease)
    }

    /// Records each lease's renewal and fails those asked for, and hands the rest to the inner
    /// store's own batch renewal, so the contracts exercise it (a store's batch path is where
    /// each lease must get its own answer).
    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> = Vec::new();
        let mut forwarded = Vec::new();
        for (lease, ttl) in leases {
            self.record(Call::Extend(lease.lock_id.as_str().to_owned()));
            self.wait_while_renewals_hang(lease.lock_id.as_str());
            let budget = self.failing_extends.load(Ordering::SeqCst);
            if budget > 0 {
                self.failing_extends.store(budget - 1, Ordering::SeqCst);
                answers.push(Some(Err(injected(ErrorCode::NetworkTimeout))));
            } else if self.extends_down.load(Ordering::SeqCst) {
                answers.push(Some(Err(injected(ErrorCode::NetworkTimeout))));
            } else {
                answers.push(None);
                forwarded.push((*lease, *ttl));
            }
        }
        let mut inner = self.inner.extend_leases(&forwarded).into_iter();
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    inner.next().unwrap_or_else(|| {
                        Err(LockError::internal(
                            "the store answered fewer renewals than sent",
                        ))
                    })
                })
            })
            .collect()
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        self.record(Call::IsLocked(key.to_string()));
        self.inner.key_is_locked(key)
    }

    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        // Only lookups of a lock are recorded, as they always were: who holds permits or a
        // lock shared is a read of its own.
        if !matches!(by, Find::Key(_, LeaseKind::Permit | LeaseKind::Shared)) {
            self.record(Call::Lookup);
        }
        self.inner.find(by)
    }

    delegate_driver!(self, &self.inner; describe, list_records, find_line, leave_line, break_leases, watch_releases);
}

/// A [`Locker`] over a [`Recorder`] of `backend`, with `defaults`, and the recorder.
pub(super) fn recorded_locker<B: LockBackend + 'static>(
    backend: B,
    defaults: LockOptions,
) -> (Locker<Arc<Recorder<B>>>, Arc<Recorder<B>>) {
    let recorder = Recorder::new(backend);
    (
        Locker::with_defaults(Arc::clone(&recorder), defaults),
        recorder,
    )
}
