//! Lifecycle hooks: [`LockObserver`]s attached to a [`Locker`](crate::Locker) are told what each
//! acquisition and each lease lived through.
//!
//! This is not the telemetry decorator ([`with_telemetry`](crate::with_telemetry)): that one
//! wraps a backend and reports every call to the store (one `acquire` that found the key held,
//! one `extend`, …). Hooks report at the level of the program: an acquisition that waited 4 s
//! over 12 attempts, a lease renewed 40 times and lost at the 41st, held for 3 min. The two
//! answer different questions and can be used together; both run their callbacks on the thread
//! that saw the event, after the fact, and catch their panics.
//!
//! Events name their key by its hash ([`Subject::key_hash`]); an observer that asks for raw keys
//! ([`LockObserver::raw_keys`]) also gets [`Subject::raw_key`], except for keys that look like
//! they embed credentials, which stay redacted as in telemetry.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use syncguard::observe::{Acquired, LockObserver};
//! use syncguard::{Locker, MemoryBackend};
//!
//! #[derive(Default)]
//! struct Count(AtomicU32);
//!
//! impl LockObserver for Count {
//!     fn acquired(&self, event: &Acquired<'_>) {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         println!("{} {} after {:?}", event.subject.kind(), event.subject.key_hash(), event.wait);
//!     }
//! }
//!
//! let count = Arc::new(Count::default());
//! let locker = Locker::new(MemoryBackend::new()).with_observer(count.clone());
//! drop(locker.lock("nightly-report")?);
//! assert_eq!(count.0.load(Ordering::Relaxed), 1);
//! # Ok::<(), syncguard::LockError>(())
//! ```

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::driver::{Broken, LeaseKind};
use crate::error::ErrorCode;
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::key::Key;
use crate::telemetry::looks_sensitive;

/// Told what a [`Locker`](crate::Locker)'s acquisitions and leases lived through. Every method
/// has a no-op default: implement those you need. Methods run on the thread that saw the event
/// (the caller's for acquisitions and releases, the heartbeat's for renewals and losses), after
/// the fact; keep them cheap. A panic in one is caught and logged, and changes nothing.
pub trait LockObserver: Send + Sync {
    /// Whether events given to this observer carry raw keys ([`Subject::raw_key`]); default
    /// `false` (hashes only). Asked once per event.
    fn raw_keys(&self) -> bool {
        false
    }

    /// A lock or permit was acquired.
    fn acquired(&self, event: &Acquired<'_>) {
        let _ = event;
    }

    /// An acquisition ended without the lock or permit.
    fn not_acquired(&self, event: &NotAcquired<'_>) {
        let _ = event;
    }

    /// The store renewed a lease (heartbeat or [`LockGuard::extend`](crate::LockGuard::extend)).
    fn renewed(&self, event: &Renewed<'_>) {
        let _ = event;
    }

    /// A renewal could not be made; the lease goes on until its local deadline.
    fn renewal_failed(&self, event: &RenewalFailed<'_>) {
        let _ = event;
    }

    /// A lease was lost (once per lease).
    fn lost(&self, event: &Lost<'_>) {
        let _ = event;
    }

    /// A lease was released (once per lease, also after a loss).
    fn released(&self, event: &Released<'_>) {
        let _ = event;
    }

    /// A lease was handed over by [`LockGuard::detach`](crate::LockGuard::detach): no longer
    /// held here.
    fn detached(&self, event: &Detached<'_>) {
        let _ = event;
    }

    /// [`Locker::break_key`](crate::Locker::break_key) was called: what it broke (perhaps
    /// nothing) on its key. Told to the observers of the locker that broke it; the broken
    /// holders' own lockers see a [`Lost`] at their next renewal.
    fn broken(&self, event: &Broke<'_>) {
        let _ = event;
    }
}

/// What an event is about: the kind of lease and its key.
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    backend: &'static str,
    kind: LeaseKind,
    key: &'a Key,
    raw: bool,
}

impl Subject<'_> {
    /// The backend's name ([`Capabilities::backend`](crate::Capabilities::backend)).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// A lock or a permit.
    pub fn kind(&self) -> Kind {
        match self.kind {
            LeaseKind::Lock => Kind::Lock,
            LeaseKind::Permit => Kind::Permit,
            LeaseKind::Shared => Kind::Shared,
        }
    }

    /// The key's hash ([`hash_key`]); computed on each call.
    pub fn key_hash(&self) -> String {
        hash_key(self.key.as_str())
    }

    /// The key itself, for an observer that asked for raw keys, unless it looks like it embeds
    /// a credential.
    pub fn raw_key(&self) -> Option<&str> {
        let key = self.key.as_str();
        (self.raw && !looks_sensitive(key)).then_some(key)
    }
}

impl fmt::Debug for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("backend", &self.backend)
            .field("kind", &self.kind())
            .field("key_hash", &self.key_hash())
            .finish()
    }
}

/// What a lease holds, as events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// The lock on a key.
    Lock,
    /// A permit of a key's semaphore.
    Permit,
    /// A shared hold of a key's lock (a reader).
    Shared,
}

impl Kind {
    /// `"lock"`, `"permit"` or `"shared"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Permit => "permit",
            Kind::Shared => "shared",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`LockObserver::acquired`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Acquired<'a> {
    /// What was acquired.
    pub subject: Subject<'a>,
    /// From the call to the acquisition.
    pub wait: Duration,
    /// Attempts sent to the store, the successful one included (at least 1).
    pub attempts: u32,
    /// The lease's fencing token.
    pub fence: &'a Fence,
}

/// [`LockObserver::not_acquired`].
#[derive(Debug)]
#[non_exhaustive]
pub struct NotAcquired<'a> {
    /// What was asked for.
    pub subject: Subject<'a>,
    /// Why not.
    pub why: Refusal,
    /// From the call to giving up.
    pub wait: Duration,
    /// Attempts sent to the store (0 when cancelled before the first).
    pub attempts: u32,
}

/// Why an acquisition ended without the lock or permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A single attempt (`try_lock`, `try_acquire`) found it held.
    Held,
    /// It stayed held past the timeout or retry budget.
    Timeout,
    /// The cancel token fired.
    Cancelled,
    /// A failure ended it.
    Error(ErrorCode),
}

/// [`LockObserver::renewed`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Renewed<'a> {
    /// The lease.
    pub subject: Subject<'a>,
}

/// [`LockObserver::renewal_failed`].
#[derive(Debug)]
#[non_exhaustive]
pub struct RenewalFailed<'a> {
    /// The lease.
    pub subject: Subject<'a>,
    /// What the failure was.
    pub code: ErrorCode,
    /// Time left before the lease's local deadline (when it is declared lost).
    pub left: Duration,
}

/// [`LockObserver::lost`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Lost<'a> {
    /// The lease.
    pub subject: Subject<'a>,
    /// From the acquisition to the loss.
    pub held_for: Duration,
    /// `true` when a renewal found the lease gone from the store; `false` when it ran past its
    /// local deadline without a successful renewal (or reached its `max_hold`).
    pub by_renewal: bool,
    /// The loss ends the hold; `false` only when a release that had just begun ended it first
    /// (then [`Released`] counts the hold).
    pub ends_hold: bool,
}

/// [`LockObserver::released`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Released<'a> {
    /// The lease.
    pub subject: Subject<'a>,
    /// From the acquisition to the release.
    pub held_for: Duration,
    /// What the release came to.
    pub how: Release,
    /// The lease had been lost before (then [`Lost`] ended the hold, not this).
    pub after_loss: bool,
}

/// What a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The store deleted it.
    Released,
    /// Released before its `min_hold` ended: kept in the store until then.
    KeptForMinHold,
    /// It was gone already.
    AlreadyGone,
    /// The store could not be told (it is retried in the background).
    Error(ErrorCode),
}

/// [`LockObserver::detached`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Detached<'a> {
    /// The lease.
    pub subject: Subject<'a>,
    /// From the acquisition to the hand-over.
    pub held_for: Duration,
}

/// [`LockObserver::broken`]: an operator's forced release
/// ([`Locker::break_key`](crate::Locker::break_key)) and what it came to.
#[derive(Debug)]
#[non_exhaustive]
pub struct Broke<'a> {
    /// What was broken: the kind of holders and their key.
    pub subject: Subject<'a>,
    /// The fences of the live holders removed, in fence order; empty when nothing live was
    /// held.
    pub fences: Vec<&'a Fence>,
    /// The latest expiry of the markers left in their places (Unix ms of the store's time
    /// authority): the key is kept from anyone until then. `None` without markers.
    pub kept_until_ms: Option<i64>,
}

impl<'a> Broke<'a> {
    /// The event for `broken`, on `subject`.
    pub(crate) fn new(subject: Subject<'a>, broken: &'a Broken) -> Self {
        let mut fences: Vec<&Fence> = broken.holders.iter().map(|h| &h.fence).collect();
        fences.sort();
        Broke {
            subject,
            fences,
            kept_until_ms: broken.markers.iter().map(|m| m.expires_at_ms).max(),
        }
    }

    /// Whether any live holder was broken (the metrics' `outcome="broken"`, else `"none"`).
    pub fn broke_any(&self) -> bool {
        !self.fences.is_empty()
    }
}

/// The observers of one locker, and the one place that calls them.
#[derive(Clone)]
pub(crate) struct Observers {
    list: Arc<[Arc<dyn LockObserver>]>,
    backend: &'static str,
}

impl Observers {
    pub(crate) fn new(backend: &'static str) -> Self {
        Observers {
            list: Arc::from(Vec::new()),
            backend,
        }
    }

    /// These and `observer`.
    pub(crate) fn with(&self, observer: Arc<dyn LockObserver>) -> Self {
        let mut list = self.list.to_vec();
        list.push(observer);
        Observers {
            list: list.into(),
            backend: self.backend,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Calls `call` for each observer, with the subject as that observer asked for it (raw key
    /// or not); a panic is caught and logged.
    pub(crate) fn emit(
        &self,
        kind: LeaseKind,
        key: &Key,
        call: impl Fn(&dyn LockObserver, Subject<'_>),
    ) {
        for observer in self.list.iter() {
            let subject = Subject {
                backend: self.backend,
                kind,
                key,
                raw: false,
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let subject = Subject {
                    raw: observer.raw_keys(),
                    ..subject
                };
                call(observer.as_ref(), subject);
            }));
            if outcome.is_err() {
                log::error!("syncguard: a lock observer panicked");
            }
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observers")
            .field("count", &self.list.len())
            .finish()
    }
}
