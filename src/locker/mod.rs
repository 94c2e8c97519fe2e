//! [`Locker`]: acquisition with retries, RAII guards, and the shared heartbeat.

mod fences;
mod guard;
mod heartbeat;
mod lease;
pub(crate) mod multi_lock;
mod options;
mod orphans;
mod retry;
pub(crate) mod rw_lock;
pub(crate) mod semaphore;
mod store;
mod wake;

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use rand::RngExt as _;

pub use self::guard::LockGuard;
pub use self::options::{Heartbeat, LockOptions};
pub use self::retry::{Backoff, Jitter};

use self::fences::FenceWatch;
use self::guard::GuardStore;
use self::heartbeat::Scheduler;
use self::lease::{Grant, HeldLease, Terms};
use self::options::LostCallback;
use self::orphans::Orphans;
use self::store::{Origin, Store, Unheld};
use self::wake::{Waiting, Wakeups};
use crate::cancel::CancelToken;
use crate::driver::{Acquisitions, Driver, KeySet, LeaseKind, LeaseRef, Line, Permits};
use crate::error::{ErrorCode, LockError, Result};
use crate::key::Key;
use crate::line::PLACE_RENEWAL;
use crate::lock_id::LockId;
use crate::observe::{Acquired, LockObserver, NotAcquired, Observers, Refusal};
use crate::time::Ttl;

/// Takes locks from a backend and hands out guards that release on drop and are kept alive
/// by one shared heartbeat (a scheduler thread and at most four workers).
///
/// Cheap to clone (clones share the backend, the defaults and the heartbeat), `Send`
/// and `Sync`. Everything blocks the calling thread; no async runtime is involved.
///
/// ```
/// use syncguard::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// {
///     let guard = locker.lock("nightly-report")?; // waits until held
///     assert!(locker.try_lock("nightly-report")?.is_none()); // held: no wait
///     // ... critical section; the heartbeat keeps the lease alive ...
/// } // released here
/// let total = locker.with_lock("nightly-report", |guard| guard.fence().value())?;
/// assert_eq!(total, 2);
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub struct Locker<B> {
    shared: Arc<Shared<B>>,
}

struct Shared<B> {
    backend: B,
    defaults: LockOptions,
    scheduler: Arc<Scheduler>,
    wakeups: Arc<Wakeups>,
    orphans: Arc<Orphans>,
    fences: FenceWatch,
    /// Told what each acquisition and lease lived through; leases keep the set they began with.
    observers: RwLock<Observers>,
    /// Itself, for the thread that releases orphaned locks.
    this: Weak<Shared<B>>,
}

impl<B> Drop for Shared<B> {
    fn drop(&mut self) {
        // The locker and every guard are gone: nothing is left to renew.
        self.scheduler.shutdown();
    }
}

impl<B: Driver + 'static> Store for Shared<B> {
    fn driver(&self) -> &dyn Driver {
        &self.backend
    }

    fn released(&self, key: &Key) {
        self.wakeups.released(key.as_str());
    }

    fn release_later(&self, unheld: Unheld) {
        if let Some(this) = self.this.upgrade() {
            self.orphans.adopt(unheld, this);
        }
    }
}

impl<B: Driver + 'static> GuardStore for Shared<B> {
    fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }
}

impl<B> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.shared.backend)
            .field("defaults", &self.shared.defaults)
            .finish()
    }
}

impl<B: Driver + 'static> Locker<B> {
    /// A locker over `backend` with the default [`LockOptions`].
    pub fn new(backend: B) -> Self {
        Self::with_defaults(backend, LockOptions::default())
    }

    /// A locker over `backend` whose [`lock`](Locker::lock), [`try_lock`](Locker::try_lock)
    /// and [`with_lock`](Locker::with_lock) use `defaults`.
    pub fn with_defaults(backend: B, defaults: LockOptions) -> Self {
        let observers = Observers::new(backend.describe().backend);
        #[cfg(feature = "metrics")]
        let observers = observers.with(Arc::new(crate::metrics::Metrics::new(
            backend.describe().backend,
        )));
        Locker {
            shared: Arc::new_cyclic(|this| Shared {
                backend,
                defaults,
                scheduler: Arc::new(Scheduler::new()),
                wakeups: Arc::new(Wakeups::default()),
                orphans: Arc::new(Orphans::default()),
                fences: FenceWatch::default(),
                observers: RwLock::new(observers),
                this: this.clone(),
            }),
        }
    }

    /// Adds `observer`, told from now on what the acquisitions and leases of this locker (and
    /// of its clones, which share it) live through: see [`observe`](crate::observe). Leases
    /// acquired before keep the observers they began with.
    #[must_use]
    pub fn with_observer(self, observer: Arc<dyn LockObserver>) -> Self {
        let mut observers = self
            .shared
            .observers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *observers = observers.with(observer);
        drop(observers);
        self
    }

    /// The backend, for direct single-attempt operations and lookups.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The options `lock`, `try_lock` and `with_lock` use.
    pub fn defaults(&self) -> &LockOptions {
        &self.shared.defaults
    }

    /// Takes the lock on `key`, waiting while someone else holds it — as long as it takes,
    /// like `Mutex::lock`, unless the defaults set a [`timeout`](LockOptions::timeout) or
    /// a [`cancel`](LockOptions::cancel) token (then `AcquisitionTimeout` or `Aborted`). A
    /// release the backend announces wakes the wait at once; otherwise it polls with capped
    /// backoff.
    ///
    /// Transient failures (`NetworkTimeout`, `ServiceUnavailable`, `RateLimited`: a store
    /// that is down or stalled) do not end the wait: they are retried like contention, and the
    /// last one is returned if the wait ends with it. Any other failure ends it at once. An
    /// acquisition whose answer was lost ([`LockError::is_in_doubt`]) is released in the
    /// background, so it never holds the key for nobody.
    pub fn lock(&self, key: &str) -> Result<LockGuard> {
        self.lock_with(key, &self.shared.defaults)
    }

    /// Takes the lock on `key` if it is free right now (one attempt, no waiting; a failure is
    /// returned as it is).
    pub fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.acquire(key, &self.once())
    }

    /// Takes the lock on `key`, waiting up to `timeout`; `Ok(None)` if it stayed held.
    pub fn try_lock_for(&self, key: &str, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(key, &self.up_to(timeout))
    }

    /// The defaults for one attempt: what every `try_` call without a timeout uses.
    pub(crate) fn once(&self) -> LockOptions {
        self.shared.defaults.clone().max_retries(0)
    }

    /// The defaults for a wait of at most `timeout`: what every `try_…_for` call uses.
    pub(crate) fn up_to(&self, timeout: Duration) -> LockOptions {
        self.shared
            .defaults
            .clone()
            .timeout(timeout)
            .max_retries(u32::MAX)
    }

    /// Takes the lock on `key` with `options`, waiting as they say; `AcquisitionTimeout` if the
    /// lock stayed held, `Aborted` if the cancel token fired.
    pub fn lock_with(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        self.acquire(key, options)?.ok_or_else(|| {
            LockError::new(
                ErrorCode::AcquisitionTimeout,
                format!(
                    "the lock stayed held by another owner (timeout {:?}, {} retries)",
                    options.timeout, options.max_retries
                ),
            )
            .with_key(key)
        })
    }

    /// Runs `f` while holding the lock on `key` (acquired as by [`lock`](Locker::lock)) and
    /// always releases afterwards, also when `f` panics. `f`'s result is returned as is; a
    /// failed release goes to `on_release_error` (default: a log warning) and never replaces it.
    pub fn with_lock<T>(&self, key: &str, f: impl FnOnce(&LockGuard) -> T) -> Result<T> {
        let guard = self.lock(key)?;
        let output = f(&guard);
        let on_release_error = self.shared.defaults.on_release_error.clone();
        let key = guard.key().to_owned();
        if let Err(error) = guard.release() {
            guard::report_release_error(on_release_error.as_ref(), &key, &error);
        }
        Ok(output)
    }

    /// The retry loop for the lock on `key`. `Ok(None)` when the lock stayed held past the
    /// timeout or retry budget.
    fn acquire(&self, key: &str, options: &LockOptions) -> Result<Option<LockGuard>> {
        // The public edge: everything below works on validated values.
        self.acquire_target(Key::new(key)?, Target::Lock, options)
    }

    /// The retry loop for one key's lock, permit or shared hold.
    fn acquire_target(
        &self,
        key: Key,
        target: Target,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>> {
        let guards = self.acquire_set(&KeySet::one(key), target, options)?;
        Ok(guards.and_then(|guards| guards.into_iter().next()))
    }

    /// The retry loop, for every kind of lock, and the one place its outcome is observed (for
    /// each key of `keys`). `Ok(None)` when it stayed held past the timeout or retry budget;
    /// otherwise a guard per key, in the set's order.
    fn acquire_set(
        &self,
        keys: &KeySet,
        target: Target,
        options: &LockOptions,
    ) -> Result<Option<Vec<LockGuard>>> {
        let observers = self
            .shared
            .observers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let start = Instant::now();
        let mut attempts: u32 = 0;
        let result = self.take(keys, target, options, &observers, start, &mut attempts);
        if observers.is_empty() {
            return result;
        }
        let wait = start.elapsed();
        let why = match &result {
            Ok(Some(guards)) => {
                for guard in guards {
                    observers.emit(target.kind(), guard.lease_key(), |observer, subject| {
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
            Ok(None) if options.max_retries == 0 || options.timeout.is_zero() => Refusal::Held,
            Ok(None) => Refusal::Timeout,
            Err(error) if error.code() == ErrorCode::Aborted => Refusal::Cancelled,
            Err(error) => Refusal::Error(error.code()),
        };
        for key in keys {
            observers.emit(target.kind(), key, |observer, subject| {
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

    /// [`acquire_set`](Self::acquire_set) without the observing; `attempts` counts the
    /// attempts sent to the store.
    fn take(
        &self,
        keys: &KeySet,
        target: Target,
        options: &LockOptions,
        observers: &Observers,
        start: Instant,
        tried: &mut u32,
    ) -> Result<Option<Vec<LockGuard>>> {
        let (ttl, holder) = options.checked()?;
        // min_hold: the store is asked for the hold at least, so that its record outlasts the
        // hold whatever becomes of this process or its connection (renewals keep it so).
        let length = options
            .min_hold
            .map_or(ttl, |hold| ttl.max(lease::covering(hold)));
        // Before acquiring: a thread that cannot start must not leave a lock behind. It renews
        // leases and reports them lost at their deadlines, also with the heartbeat off.
        let store: Weak<dyn Store> = self.shared.this.clone();
        self.shared.scheduler.ensure_running(store)?;
        let kind = target.kind();
        let first_key = &keys.as_slice()[0];
        let aborted = || {
            LockError::new(ErrorCode::Aborted, "the wait was cancelled")
                .with_key(first_key.as_str())
        };
        let cancel = options.cancel.as_ref();
        let mut attempts: u32 = 0;
        // Registered as a waiter before the first attempt (a map entry per key, no I/O), so
        // that a release during any attempt is heard; the count of releases heard is read before
        // each attempt, so a release between an attempt and the sleep after it ends that sleep
        // at once. The driver's watch (other processes' releases) starts only on contention.
        let waiting = (options.max_retries > 0 && !options.timeout.is_zero())
            .then(|| self.shared.wakeups.enter(keys.as_slice()));
        // The waiter's place in the key's line: one id for all its attempts, so that a repeated
        // request is one place. A single attempt takes none but heeds the line; with the line
        // off, every attempt barges. A waiter of several keys stands on each of their lines
        // with the one ticket its first refusal answered (`Line::WaitAt`).
        let place = (waiting.is_some() && options.wait_in_line).then(LockId::generate);
        let mut line = match &place {
            Some(place) => Line::Wait(place),
            None if options.wait_in_line => Line::Keep,
            None => Line::Ignore,
        };
        // Whether a place may be stored: an attempt that waits in line was sent.
        let mut in_line = false;
        // A transient failure (timeout, unreachable store) does not end the wait: it is tried
        // again like contention, and reported only if the wait ends with it.
        let mut failure: Option<LockError> = None;
        let outcome = loop {
            if cancel.is_some_and(CancelToken::is_cancelled) {
                break Err(aborted());
            }
            let heard = waiting.as_ref().map_or(0, Waiting::heard);
            // Granted fences must be above what this locker had seen when it asked.
            let seen: Vec<_> = keys
                .iter()
                .map(|key| self.shared.fences.highest(key, kind.sequence()))
                .collect();
            let sent = Instant::now();
            *tried = tried.saturating_add(1);
            in_line |= place.is_some();
            let backend = &self.shared.backend;
            let holder = holder.as_ref();
            let attempt = match target {
                Target::Lock => backend
                    .try_acquire(first_key, length, holder, line)
                    .map(Acquisitions::from),
                Target::Permit(permits) => backend
                    .try_acquire_permit(first_key, permits, length, holder, line)
                    .map(Acquisitions::from),
                Target::Shared => backend
                    .try_acquire_shared(first_key, length, holder, line)
                    .map(Acquisitions::from),
                Target::All => backend.try_acquire_all(keys, length, holder, line),
            };
            match attempt {
                Ok(Acquisitions::Acquired(leases)) => {
                    break Ok(Some((leases, sent, seen)));
                }
                Ok(Acquisitions::Locked { ticket }) => {
                    if let Some(ticket) = ticket {
                        line = line.at(ticket);
                    }
                    failure = None;
                    if let Some(waiting) = &waiting {
                        waiting.listen(&self.shared.backend);
                    }
                }
                Err(error) => {
                    self.release_if_in_doubt(keys, kind, length, &error);
                    if !error.code().is_transient() {
                        break Err(error);
                    }
                    if failure.is_none() {
                        log::warn!(
                            "syncguard: acquiring {} on {keys} failed, will retry: {error}",
                            target.what()
                        );
                    }
                    failure = Some(error);
                }
            }
            let mut gave_up = || failure.take().map_or(Ok(None), Err);
            if attempts >= options.max_retries {
                break gave_up();
            }
            attempts = attempts.saturating_add(1);
            let delay_ms = retry::retry_delay_ms(
                attempts,
                options.retry_delay,
                options.max_retry_delay,
                options.backoff,
                options.jitter,
                rand::rng().random::<f64>(),
            );
            // In line, each attempt renews the waiter's place: it must come before the place
            // lapses, however long the backoff has grown.
            let delay_ms = match place {
                Some(_) => delay_ms.min(PLACE_RENEWAL.as_secs_f64() * 1000.0),
                None => delay_ms,
            };
            let Some(delay) = retry::clamp_to_timeout(delay_ms, start.elapsed(), options.timeout)
            else {
                break gave_up();
            };
            if let Some(waiting) = &waiting {
                waiting.sleep(heard, delay, cancel);
            }
        };
        drop(waiting);
        let (leases, sent, seen) = match outcome {
            Ok(Some(granted)) => granted,
            ended => {
                if let (true, Some(place)) = (in_line, &place) {
                    for key in keys {
                        self.leave_line(key, kind, place);
                    }
                }
                return ended.map(|_| None);
            }
        };
        // A driver bug, never seen from the bundled ones: given back at once.
        if leases.len() != keys.len() {
            self.give_back(keys, kind, length, &leases);
            return Err(LockError::internal(format!(
                "the backend granted {} leases for {} keys",
                leases.len(),
                keys.len()
            ))
            .with_key(first_key.as_str()));
        }
        let mut checked = Vec::with_capacity(leases.len());
        for ((key, (lease, version)), seen) in keys.iter().zip(&leases).zip(seen) {
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
                    // All or none: every key of the set is given back.
                    self.give_back(keys, kind, length, &leases);
                    return Err(error);
                }
            }
        }
        // Several keys are lost as a whole: the first loss cancels the set's token and runs the
        // caller's `on_lock_lost` once.
        let on_lock_lost = match target {
            Target::All if keys.len() > 1 => Some(lost_together(options.on_lock_lost.clone())),
            _ => options.on_lock_lost.clone(),
        };
        let guards = checked
            .into_iter()
            .map(|(key, lock_id, lease, version)| {
                let held = Arc::new(HeldLease::new(
                    Grant {
                        key: key.clone(),
                        lock_id,
                        kind,
                        lease,
                        version,
                        sent,
                        ttl,
                        length,
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
            .collect();
        Ok(Some(guards))
    }

    /// Releases the leases granted for `keys` that the caller will not hold (a fence check or
    /// a driver bug refused the set): each is released now, or later if that fails.
    fn give_back(
        &self,
        keys: &KeySet,
        kind: LeaseKind,
        length: Ttl,
        leases: &[(crate::driver::Lease, Option<crate::driver::Version>)],
    ) {
        for (key, (lease, version)) in keys.iter().zip(leases) {
            let Ok(lock_id) = LockId::new(&lease.lock_id) else {
                // Malformed: it cannot be named to the store; it expires at its TTL.
                continue;
            };
            let given_back = LeaseRef::new(&lock_id)
                .with_key(key)
                .with_kind(kind)
                .with_version(version.as_ref());
            if self.shared.backend.release_lease(given_back).is_err() {
                self.shared.release_later(Unheld::now(
                    key,
                    &lock_id,
                    kind,
                    length,
                    Origin::FailedRelease,
                ));
            }
        }
    }

    /// An acquisition that failed without an answer may still be applied by the store: its
    /// lock id is released in the background ([`LockError::in_doubt`]).
    /// A waiter that gave up leaves the line at once; if the store cannot be told now, its
    /// place lapses on its own within [`PLACE_TTL`](crate::driver::PLACE_TTL).
    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) {
        if let Err(error) = self.shared.backend.leave_line(key, kind, place) {
            log::info!(
                "syncguard: leaving the line of key {key} failed ({error}); the place lapses on its own"
            );
        }
    }

    fn release_if_in_doubt(&self, keys: &KeySet, kind: LeaseKind, ttl: Ttl, error: &LockError) {
        for (named, lock_id) in error.in_doubt_leases() {
            // The key the doubt is about: the one it names (several keys), or the only one.
            let key = keys
                .iter()
                .find(|key| named == Some(key.as_str()))
                .unwrap_or(&keys.as_slice()[0]);
            match LockId::new(lock_id) {
                Ok(lock_id) => {
                    self.shared.release_later(Unheld::now(
                        key,
                        &lock_id,
                        kind,
                        ttl,
                        Origin::InDoubt,
                    ));
                }
                Err(_) => {
                    log::error!("syncguard: a backend reported a malformed lock id in doubt");
                }
            }
        }
    }
}

/// What an acquisition asks for: the key's lock, a permit of the key's semaphore, or a shared
/// hold of the key's lock.
#[derive(Debug, Clone, Copy)]
enum Target {
    Lock,
    Permit(Permits),
    Shared,
    /// The locks of every key of a set, all or none.
    All,
}

impl Target {
    fn kind(self) -> LeaseKind {
        match self {
            Target::Lock | Target::All => LeaseKind::Lock,
            Target::Permit(_) => LeaseKind::Permit,
            Target::Shared => LeaseKind::Shared,
        }
    }

    /// For messages: what was being acquired.
    fn what(self) -> String {
        match self {
            Target::Lock => "the lock".to_owned(),
            Target::Permit(permits) => format!("a permit of the semaphore ({permits} permits)"),
            Target::Shared => "a shared hold of the lock".to_owned(),
            Target::All => "the locks".to_owned(),
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
