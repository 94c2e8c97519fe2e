//! [`Locker`]: acquisition with retries, RAII guards, and the shared heartbeat.

mod acquisition;
pub(crate) mod breaking;
mod due_permits;
mod fences;
mod guard;
mod heartbeat;
pub(crate) mod lead;
pub(crate) mod leader_watch;
pub(crate) mod leadership;
mod lease;
pub(crate) mod multi_lock;
mod options;
mod orphans;
mod pace;
mod retry;
pub(crate) mod rw_lock;
pub(crate) mod semaphore;
mod store;
mod wake;
pub(crate) mod watch;

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

pub use self::guard::LockGuard;
pub use self::options::{Heartbeat, LockOptions};
pub use self::retry::{Backoff, Jitter};

use self::fences::FenceWatch;
use self::guard::GuardStore;
use self::heartbeat::Scheduler;
use self::orphans::Orphans;
use self::store::{Store, Unheld};
use self::wake::Wakeups;
use crate::driver::{Driver, Mode};
use crate::error::{ErrorCode, LockError, Result};
use crate::key::Key;
use crate::observe::{LockObserver, Observers};

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

    /// The observers now: what an acquisition or a break about to begin tells.
    pub(crate) fn observers(&self) -> Observers {
        self.shared
            .observers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
        self.acquire_key(Key::new(key)?, Mode::Exclusive, options)
    }
}
