//! The lost-answer contracts (DESIGN §12, "Lost answers"): every kind of acquisition — a
//! lock, a permit, a shared hold, a set of keys — driven through the [`Locker`] by several
//! threads over a [`Nemesis`] that loses an answer, or repeats a call as a pool would, at
//! every step: a first attempt, an attempt in line, a grant, a renewal, a release and leaving
//! the line. The schedule is the same for every kind, so each step is struck deterministically.
//!
//! What is checked, while it runs and once everyone is done:
//! - never two exclusive holders of a key, never a writer beside a reader, never more holders
//!   than permits — among the guards that believe they hold, and against the store's records
//!   ([`Driver::find`] by key and kind);
//! - a waiter stands once on each line, with one ticket on all its keys (the nemesis checks
//!   after every refusal);
//! - every waiter is granted once the keys are free (each waits with a generous timeout);
//! - every record and place left behind is never renewed once its holder or waiter is gone:
//!   a record lives at most its TTL from its grant, a place no longer than it was when
//!   everyone was done, so the key is free for others within TTL + [`PLACE_TTL`] + the
//!   tolerance — checked from their own expiries, then by a single attempt that must be
//!   granted;
//! - no place is left behind ([`Driver::find_line`] is empty).
//!
//! Each takes the backend by value; its keys are its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::driver::{
    Acquisition, Driver, DriverExt as _, Find, Key, LeaseKind, LeaseRef, LockId, LockRecord,
    Mode as DriverMode, PLACE_TTL, Permits, Request, TIME_TOLERANCE_MS, Ttl,
};
use crate::{
    CancelToken, Heartbeat, LockBackend, LockGuard, LockOptions, Locker, MultiLockGuard, Result,
};

use super::nemesis::{Fault, Nemesis, Step, Strike};
use super::support::{CLOCK_SLACK_MS, PATIENCE, unique_key, wait_until};

mod differential;

pub use differential::the_rule_agrees_with_the_model;

/// Lock waiters lose answers and have calls repeated at every step, and each is served.
pub fn lost_answers_on_locks<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("lost-lock");
    let scenario = Scenario {
        holders: vec![Want::Lock(key.clone())],
        waiters: vec![Want::Lock(key.clone()); 4],
        late_holders: Vec::new(),
        quitters: vec![Want::Lock(key.clone()); 2],
    };
    scenario.run(backend);
}

/// Permit waiters (two permits) lose answers and have calls repeated at every step.
pub fn lost_answers_on_permits<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("lost-permit");
    let scenario = Scenario {
        holders: vec![Want::Permit(key.clone()); PERMITS as usize],
        waiters: vec![Want::Permit(key.clone()); 4],
        late_holders: Vec::new(),
        quitters: vec![Want::Permit(key.clone()); 2],
    };
    scenario.run(backend);
}

/// Readers and writers of one key lose answers and have calls repeated at every step.
pub fn lost_answers_on_shared_holds<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("lost-shared");
    let scenario = Scenario {
        holders: vec![Want::Write(key.clone())],
        waiters: vec![
            Want::Read(key.clone()),
            Want::Write(key.clone()),
            Want::Read(key.clone()),
            Want::Read(key.clone()),
        ],
        late_holders: Vec::new(),
        quitters: vec![Want::Write(key.clone()), Want::Read(key.clone())],
    };
    scenario.run(backend);
}

/// Sets of overlapping keys, and a single key among them, lose answers and have calls
/// repeated at every step. The first waiter is a set `{b, c}` whose first refusal's answer is
/// lost: it stands on `b` (`c` is free), and its retry carries no ticket; then `c` is taken, so
/// a later attempt meets a key that newly refuses it, and must stand there with the ticket it
/// has on `b` (issue 40, item 1).
pub fn lost_answers_on_sets<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("lost-set");
    let [a, b, c] = ["a", "b", "c"].map(|suffix| format!("{prefix}:{suffix}"));
    let scenario = Scenario {
        holders: vec![Want::All(vec![a.clone(), b.clone()])],
        waiters: vec![
            Want::All(vec![b.clone(), c.clone()]),
            Want::All(vec![a.clone(), b.clone()]),
            Want::Lock(a.clone()),
            Want::All(vec![c.clone(), a.clone()]),
        ],
        late_holders: vec![Want::Lock(c.clone())],
        quitters: vec![Want::All(vec![a.clone(), b.clone()]), Want::Lock(c)],
    };
    scenario.run(backend);
}

/// The permits of every semaphore here.
const PERMITS: u32 = 2;

/// The lease of every acquisition: short, so that a lease a repeated grant left behind lapses
/// soon, and renewed often, so that renewals are struck while the first holders hold.
const TTL: Duration = Duration::from_secs(6);
const RENEW_EVERY: Duration = Duration::from_millis(500);

/// How long a waiter waits before the contract declares it never granted: far beyond what
/// the scenario needs (a few leases and places lapsing), so only a wedged line reaches it.
const WAITER_PATIENCE: Duration = Duration::from_secs(60);

/// How long a quitter waits before it gives up and leaves the line.
const QUITTER_PATIENCE: Duration = Duration::from_millis(300);

/// How many times each waiter takes and gives back its keys.
const ROUNDS: usize = 2;

/// The schedule: two strikes of each step, one of each fault. The first grants (the first
/// holders') are left alone, so the scenario starts from a known state.
fn schedule() -> Vec<Strike> {
    use Fault::{LoseAnswer, Repeat};
    vec![
        Strike::new(Step::FirstAttempt, 1, LoseAnswer),
        Strike::new(Step::FirstAttempt, 2, Repeat),
        Strike::new(Step::InLine, 1, LoseAnswer),
        Strike::new(Step::InLine, 3, Repeat),
        Strike::new(Step::Grant, 3, LoseAnswer),
        Strike::new(Step::Grant, 5, Repeat),
        Strike::new(Step::Renewal, 1, LoseAnswer),
        Strike::new(Step::Renewal, 2, Repeat),
        Strike::new(Step::Release, 1, LoseAnswer),
        Strike::new(Step::Release, 2, Repeat),
        Strike::new(Step::LeaveLine, 1, LoseAnswer),
        Strike::new(Step::LeaveLine, 2, Repeat),
    ]
}

/// What one acquisition asks for.
#[derive(Debug, Clone)]
enum Want {
    Lock(String),
    Permit(String),
    Read(String),
    Write(String),
    All(Vec<String>),
}

/// How a lease holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Shared,
    Permit,
}

impl Want {
    fn mode(&self) -> Mode {
        match self {
            Want::Lock(_) | Want::Write(_) | Want::All(_) => Mode::Exclusive,
            Want::Read(_) => Mode::Shared,
            Want::Permit(_) => Mode::Permit,
        }
    }

    fn keys(&self) -> Vec<String> {
        match self {
            Want::Lock(key) | Want::Permit(key) | Want::Read(key) | Want::Write(key) => {
                vec![key.clone()]
            }
            Want::All(keys) => keys.clone(),
        }
    }

    /// The line this acquisition stands in.
    fn line_kind(&self) -> LeaseKind {
        match self {
            Want::Permit(_) => LeaseKind::Permit,
            _ => LeaseKind::Lock,
        }
    }

    fn acquire<B: LockBackend + 'static>(
        &self,
        locker: &Locker<B>,
        options: &LockOptions,
    ) -> Result<MultiLockGuard> {
        let one = match self {
            Want::Lock(key) => locker.lock_with(key, options)?,
            Want::Permit(key) => locker.semaphore(key, PERMITS)?.acquire_with(options)?,
            Want::Read(key) => locker.rw_lock(key)?.read_with(options)?,
            Want::Write(key) => locker.rw_lock(key)?.write_with(options)?,
            Want::All(keys) => return locker.lock_all_with(keys, options),
        };
        Ok(one.into())
    }
}

/// A guard that believes it holds a key: its mode, its lock id, and its lost token.
type Believer = (Mode, String, CancelToken);

/// Who believes it holds what, and what was found wrong.
#[derive(Default)]
struct Ledger {
    /// Per key, the (mode, lock id, lost token) of each guard that believes it holds it (until
    /// its token says the lease was lost).
    holding: Mutex<HashMap<String, Vec<Believer>>>,
    violations: Mutex<Vec<String>>,
}

impl Ledger {
    /// `held` was granted to `who`: checked against the other believers, then against the
    /// store's records.
    fn enter<B: Driver>(&self, store: &B, who: &str, want: &Want, held: &MultiLockGuard) {
        let mode = want.mode();
        {
            let mut holding = lock(&self.holding);
            for guard in held.guards() {
                let others = holding.entry(guard.key().to_owned()).or_default();
                // A guard told its lease is lost no longer believes it holds (that it was
                // told so at all is a finding of its own, made when it gives back).
                others.retain(|(_, _, lost)| !lost.is_cancelled());
                let clash = match mode {
                    Mode::Exclusive => !others.is_empty(),
                    Mode::Shared => others.iter().any(|(m, _, _)| *m == Mode::Exclusive),
                    Mode::Permit => others.len() >= PERMITS as usize,
                };
                if clash {
                    self.violation(format!(
                        "{who} ({mode:?}) was granted {} beside {:?}",
                        guard.key(),
                        others.iter().map(|(m, _, _)| m).collect::<Vec<_>>()
                    ));
                }
                others.push((mode, guard.lock_id().to_owned(), guard.lost_token()));
            }
        }
        for guard in held.guards() {
            if let Some(wrong) = disagreement(store, mode, guard) {
                self.violation(format!("{who}: {wrong}"));
            }
        }
    }

    /// `held` (of `who`) is about to be given back: nobody believes in it any more. Every
    /// call of the nemesis is applied, so no lease is ever lost: a guard told otherwise is a
    /// finding.
    fn leave(&self, who: &str, held: &MultiLockGuard) {
        let mut holding = lock(&self.holding);
        for guard in held.guards() {
            if let Some(others) = holding.get_mut(guard.key()) {
                others.retain(|(_, lock_id, _)| lock_id != guard.lock_id());
            }
        }
        drop(holding);
        for guard in held.guards() {
            if let Err(lost) = guard.check() {
                self.violation(format!(
                    "{who} was told its lease was lost, though every call was applied: {lost}"
                ));
            }
        }
    }

    fn violation(&self, what: String) {
        lock(&self.violations).push(what);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the store's records say against a guard that believes it holds (nothing when they
/// agree, when the guard knows its lease is lost, or when the store cannot be read).
fn disagreement<B: Driver>(store: &B, mode: Mode, guard: &LockGuard) -> Option<String> {
    let key = Key::new(guard.key()).ok()?;
    let ours = |records: &[LockRecord]| records.iter().any(|r| r.lock_id == guard.lock_id());
    let wrong = match mode {
        Mode::Exclusive => {
            let record = store.find(Find::Key(&key, LeaseKind::Lock)).ok()?;
            let readers = store
                .find(Find::Key(&key, LeaseKind::Shared))
                .unwrap_or_default();
            match record.first() {
                Some(r) if r.lock_id == guard.lock_id() && readers.is_empty() => None,
                Some(r) if r.lock_id == guard.lock_id() => Some(format!(
                    "a writer holds {key} beside {} readers",
                    readers.len()
                )),
                _ => Some(format!("an exclusive holder of {key} is not the store's")),
            }
        }
        Mode::Shared => {
            let readers = store.find(Find::Key(&key, LeaseKind::Shared)).ok()?;
            let writer = store.find(Find::Key(&key, LeaseKind::Lock)).ok()?;
            match (ours(&readers), writer.is_empty()) {
                (true, true) => None,
                (true, false) => Some(format!("a reader holds {key} beside a writer")),
                (false, _) => Some(format!("a reader of {key} is not among the store's")),
            }
        }
        Mode::Permit => {
            let permits = store.find(Find::Key(&key, LeaseKind::Permit)).ok()?;
            if !ours(&permits) {
                Some(format!("a permit holder of {key} is not among the store's"))
            } else if permits.len() > PERMITS as usize {
                Some(format!(
                    "{} permits of {PERMITS} held on {key}",
                    permits.len()
                ))
            } else {
                None
            }
        }
    };
    // Looked at last: a lease lost meanwhile explains any disagreement.
    wrong.filter(|_| !guard.is_lost())
}

/// One run: the first holders take the keys; the waiters start one after another (each once
/// the one before has made its first attempt) and wait; the quitters stand in line and give
/// up; once renewals and attempts in line were struck the first holders let go, and every
/// waiter takes and gives back its keys [`ROUNDS`] times.
struct Scenario {
    holders: Vec<Want>,
    waiters: Vec<Want>,
    /// Taken once every waiter has made its first attempt, so that a waiter's next attempt
    /// meets a key that newly refuses it.
    late_holders: Vec<Want>,
    quitters: Vec<Want>,
}

impl Scenario {
    fn run<B: LockBackend + 'static>(self, backend: B) {
        let nemesis = Arc::new(Nemesis::new(backend, schedule()));
        let ledger = Arc::new(Ledger::default());
        let reported = Arc::clone(&ledger);
        let defaults = LockOptions::default()
            .ttl(TTL)
            .heartbeat(Heartbeat::Every(RENEW_EVERY))
            .timeout(WAITER_PATIENCE)
            .on_lock_lost(move |lost| {
                reported.violation(format!("a lease was reported lost: {lost}"));
            });
        let locker = Locker::with_defaults(Arc::clone(&nemesis), defaults.clone());

        let take = |wants: &[Want]| -> Vec<MultiLockGuard> {
            wants
                .iter()
                .map(|want| {
                    let held = want
                        .acquire(&locker, &defaults)
                        .expect("the first holders find their keys free");
                    ledger.enter(nemesis.inner(), "a first holder", want, &held);
                    held
                })
                .collect()
        };
        let mut first = take(&self.holders);

        let mut waiters = Vec::new();
        for (n, want) in self.waiters.iter().enumerate() {
            let (locker, ledger, store) =
                (locker.clone(), Arc::clone(&ledger), Arc::clone(&nemesis));
            let (want, options) = (want.clone(), defaults.clone());
            let sent_before = nemesis.acquisitions_sent();
            waiters.push(thread::spawn(move || -> std::result::Result<(), String> {
                for round in 0..ROUNDS {
                    let who = format!("waiter {n} ({want:?}), round {round}");
                    let held = want
                        .acquire(&locker, &options)
                        .map_err(|error| format!("{who} was never granted: {error}"))?;
                    ledger.enter(store.inner(), &who, &want, &held);
                    ledger.leave(&who, &held);
                    // An error is a lost answer: the Locker then releases in the background.
                    let _ = held.release();
                }
                Ok(())
            }));
            wait_until(&format!("waiter {n}'s first attempt"), PATIENCE, || {
                nemesis.acquisitions_sent() > sent_before
            });
        }

        first.extend(take(&self.late_holders));
        let quitting = defaults.clone().timeout(QUITTER_PATIENCE);
        for want in &self.quitters {
            if let Ok(held) = want.acquire(&locker, &quitting) {
                ledger.enter(nemesis.inner(), "a quitter", want, &held);
                ledger.leave("a quitter", &held);
                let _ = held.release();
            }
        }
        wait_until(
            "renewals and attempts in line to be struck",
            PATIENCE,
            || nemesis.calls(Step::Renewal) >= 2 && nemesis.calls(Step::InLine) >= 3,
        );
        for held in first {
            ledger.leave("a first holder", &held);
            let _ = held.release();
        }

        let failures: Vec<String> = waiters
            .into_iter()
            .filter_map(|waiter| match waiter.join() {
                Ok(Ok(())) => None,
                Ok(Err(failure)) => Some(failure),
                Err(_) => Some("a waiter panicked".to_owned()),
            })
            .collect();
        let lines = self.lines();
        assert!(
            failures.is_empty(),
            "every waiter is granted once the keys are free: {failures:?}; the lines now: {}; \
             found on the way: {:?}",
            describe_lines(nemesis.inner(), &lines),
            nemesis.violations()
        );
        let mut violations = lock(&ledger.violations).clone();
        violations.extend(nemesis.violations());
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(
            nemesis.unstruck(),
            [],
            "the schedule was not carried out: the scenario no longer reaches every step"
        );
        settle(nemesis.inner(), &lines);
    }

    /// Every (key, line) the scenario stood in.
    fn lines(&self) -> Vec<(String, LeaseKind)> {
        let mut lines: Vec<(String, LeaseKind)> = Vec::new();
        for want in self
            .holders
            .iter()
            .chain(&self.waiters)
            .chain(&self.quitters)
        {
            for key in want.keys() {
                let line = (key, want.line_kind());
                if !lines.contains(&line) {
                    lines.push(line);
                }
            }
        }
        lines
    }
}

/// Once everyone is done: what is left lapses on its own expiry, never renewed, and then the
/// keys are free for a single attempt and no place is left.
fn settle<B: LockBackend>(store: &B, lines: &[(String, LeaseKind)]) {
    let ttl_ms = i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX);
    // Records and places as everyone left them (each expiry as it was then).
    let mut places_then: HashMap<String, i64> = HashMap::new();
    for (key, kind) in lines {
        let checked = Key::new(key).expect("a key of the contract");
        for record in records(store, &checked, *kind) {
            assert!(
                record.expires_at_ms - record.acquired_at_ms <= ttl_ms + CLOCK_SLACK_MS,
                "a record of {key} left behind was renewed after its holder was gone: it \
                 would keep the key from others beyond its TTL"
            );
        }
        for place in store.find_line(&checked, *kind).expect("find_line") {
            places_then.insert(place.place_id, place.expires_at_ms);
        }
    }
    // Everything left lapses within TTL + PLACE_TTL + the tolerance: generous.
    let lapse = TTL + PLACE_TTL.as_duration() + tolerance() + PATIENCE;
    wait_until("what was left behind to lapse", lapse, || {
        lines.iter().all(|(key, kind)| {
            let checked = Key::new(key).expect("a key of the contract");
            let places = store.find_line(&checked, *kind).expect("find_line");
            for place in &places {
                let then = places_then.get(&place.place_id);
                assert!(
                    then.is_some_and(|then| place.expires_at_ms <= *then),
                    "a place on {key} was taken or renewed after every waiter was gone"
                );
            }
            places.is_empty() && records(store, &checked, *kind).is_empty()
        })
    });
    for (key, kind) in lines {
        let checked = Key::new(key).expect("a key of the contract");
        let ttl = Ttl::new(TTL).expect("the contract's TTL");
        let mode = match kind {
            LeaseKind::Permit => DriverMode::Permit(Permits::new(PERMITS).expect("permits")),
            _ => DriverMode::Exclusive,
        };
        let lease_kind = mode.kind();
        let granted = store.acquire_one(&Request::one(&checked, ttl).mode(mode));
        let Ok(Acquisition::Acquired { lease, version }) = granted else {
            panic!("{key} is not free for a single attempt once everything lapsed: {granted:?}");
        };
        let lock_id = LockId::new(&lease.lock_id).expect("a granted lock id");
        let given_back = LeaseRef::new(&lock_id)
            .with_key(&checked)
            .with_kind(lease_kind)
            .with_version(version.as_ref());
        let _ = store.release_lease(given_back);
        assert!(
            store
                .find_line(&checked, *kind)
                .expect("find_line")
                .is_empty(),
            "a place is left on {key}"
        );
    }
}

/// The live records of `key` that the line `kind` guards: the lock and its readers, or the
/// semaphore's permits.
fn records<B: LockBackend>(store: &B, key: &Key, kind: LeaseKind) -> Vec<LockRecord> {
    match kind {
        LeaseKind::Permit => (store.find(Find::Key(key, LeaseKind::Permit))).expect("permits"),
        _ => {
            // A store without a shared mode has no readers to wait for.
            let mut records = (store.find(Find::Key(key, LeaseKind::Shared))).unwrap_or_default();
            records.extend(store.find(Find::Key(key, LeaseKind::Lock)).expect("find"));
            records
        }
    }
}

fn tolerance() -> Duration {
    Duration::from_millis(u64::try_from(TIME_TOLERANCE_MS).unwrap_or(0))
}

/// The lines, for a failure message: per line, each place's ticket and holder text.
fn describe_lines<B: LockBackend>(store: &B, lines: &[(String, LeaseKind)]) -> String {
    lines
        .iter()
        .map(|(key, kind)| {
            let places = Key::new(key)
                .and_then(|checked| store.find_line(&checked, *kind))
                .map(|places| {
                    places
                        .iter()
                        .map(|p| format!("ticket {} (shared: {})", p.ticket, p.shared))
                        .collect::<Vec<_>>()
                });
            format!("{key} {kind:?}: {places:?}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}
