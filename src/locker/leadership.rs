//! Leader election on the one lease machinery: a [`Leadership`] is the exclusive lock on the
//! election's name, whose holder text is the leader's value and whose fence is its term. It
//! is acquired, renewed, lost and released as every lock is; [`Locker::leader`] reads the lock
//! back as a [`Leader`].

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::Locker;
use super::guard::LockGuard;
use super::options::LockOptions;
use crate::cancel::CancelToken;
use crate::driver::{Driver, Find, LeaseKind, LockRecord, is_marker};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::holder::Holder;
use crate::key::Key;

/// This process's leadership of an election: the lock on the election's name, held with the
/// leader's value as its holder text. Its [`term`](Leadership::term) is the lock's fence: every
/// later leader's term is higher, so pass it to whatever the leader writes, and have that store
/// refuse a term lower than the last it accepted.
///
/// The heartbeat renews it as it renews every lock, and it is lost as a lock is: a renewal
/// found it gone (it expired, or an operator broke it), or its lease ran out before a renewal
/// was confirmed. Then [`is_lost`](Leadership::is_lost) turns true and
/// [`lost_token`](Leadership::lost_token) is cancelled. Dropping it resigns.
///
/// ```
/// use syncguard::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let leadership = locker.campaign("scheduler", "node-a:8080")?; // waits until elected
/// let leader = locker.leader("scheduler")?.expect("elected");
/// assert_eq!(leader.value.as_deref(), Some("node-a:8080"));
/// assert_eq!(leader.term, leadership.term());
/// leadership.proclaim("node-a:9090")?; // the same term, a new value
/// assert_eq!(locker.leader("scheduler")?.unwrap().value.as_deref(), Some("node-a:9090"));
/// leadership.resign()?;
/// assert!(locker.leader("scheduler")?.is_none());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[must_use = "dropping the leadership resigns it at once"]
pub struct Leadership {
    guard: LockGuard,
    /// The value as last stored.
    value: Mutex<Holder>,
    /// Held across a proclaim's round trip, so that the value kept here is the one stored last.
    proclaiming: Mutex<()>,
}

/// Who leads an election now, as the store has it ([`Locker::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's value (its holder text); `None` when the name is held by a lock taken
    /// without one.
    pub value: Option<String>,
    /// The leader's term: the fence of its lock.
    pub term: Fence,
    /// When it was elected, in Unix ms of the store's time authority.
    pub since_ms: i64,
    /// When its lease ends unless renewed, in Unix ms of the store's time authority.
    pub expires_at_ms: i64,
}

impl Leader {
    /// The leader a live lock record names; `None` for a break's marker, which holds the name
    /// for nobody.
    pub(crate) fn of(record: &LockRecord) -> Option<Leader> {
        (!is_marker(&record.lock_id)).then(|| Leader {
            value: record.holder.clone(),
            term: record.fence,
            since_ms: record.acquired_at_ms,
            expires_at_ms: record.expires_at_ms,
        })
    }
}

impl Leadership {
    fn new(guard: LockGuard, value: Holder) -> Self {
        Leadership {
            guard,
            value: Mutex::new(value),
            proclaiming: Mutex::new(()),
        }
    }

    /// The election's name (NFC-normalised): the key of its lock.
    pub fn name(&self) -> &str {
        self.guard.key()
    }

    /// The term: the fencing token of this leadership, above every earlier leader's.
    pub fn term(&self) -> Fence {
        *self.guard.fence()
    }

    /// The leader's value, as last stored (by the campaign or a [`proclaim`](Leadership::proclaim)).
    pub fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_str()
            .to_owned()
    }

    /// Stores `new_value` as the leader's value, keeping the term: one renewal of the lease
    /// that also replaces its holder text, so it renews the lease too. `InvalidArgument`
    /// (before any I/O) for a value that is no valid holder text; `LockLost` when the
    /// leadership is gone; a store error leaves the value as it was.
    pub fn proclaim(&self, new_value: &str) -> Result<()> {
        let holder = Holder::new(new_value)?;
        let _one_at_a_time = self
            .proclaiming
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.guard.renew_with_holder(&holder)? {
            *self.value.lock().unwrap_or_else(PoisonError::into_inner) = holder;
            return Ok(());
        }
        Err(self.guard.check().err().unwrap_or_else(|| {
            LockError::new(
                ErrorCode::LockLost,
                "the leadership was gone when proclaimed",
            )
            .with_key(self.name())
        }))
    }

    /// Resigns: releases the lock, so that another campaigner is elected (with a higher
    /// term). A leadership already lost resigns without a word; an error means the store did
    /// not answer (the lock is then released in the background). Dropping the leadership does
    /// the same and logs an error.
    pub fn resign(self) -> Result<()> {
        self.guard.release().map(|_| ())
    }

    /// Whether the leadership is lost (see [`LockGuard::is_lost`]). Costs no I/O.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// `Ok(())` while leading, `LockLost` once lost. Costs no I/O.
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// A token cancelled when the leadership is lost, at the lease's local deadline at the
    /// latest (see [`LockGuard::lost_token`]). [`Locker::lead`] hands its work a token that
    /// is cancelled earlier, a margin before that deadline.
    pub fn lost_token(&self) -> CancelToken {
        self.guard.lost_token()
    }

    /// The lease's local deadline (see [`LockGuard::deadline`]). Costs no I/O.
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// The lease's expiry as the store last reported it, in Unix ms of its time authority.
    pub fn expires_at_ms(&self) -> i64 {
        self.guard.expires_at_ms()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("term", &self.term())
            .field("value", &self.value())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl<B: Driver + 'static> Locker<B> {
    /// Campaigns in the election `name` with `value` (the leader's value, a holder text: shown
    /// by [`leader`](Locker::leader)): waits until elected, as [`lock`](Locker::lock) waits for
    /// a lock, and answers the [`Leadership`]. `value` and `name` are checked before any I/O.
    pub fn campaign(&self, name: &str, value: &str) -> Result<Leadership> {
        self.campaign_with(name, value, self.defaults())
    }

    /// [`campaign`](Locker::campaign) with `options` (a timeout, a cancel token, the lease's
    /// TTL and heartbeat); their holder text is replaced by `value`.
    pub fn campaign_with(
        &self,
        name: &str,
        value: &str,
        options: &LockOptions,
    ) -> Result<Leadership> {
        let value = Holder::new(value)?;
        let options = options.clone().holder(value.as_str());
        let guard = self.lock_with(name, &options)?;
        Ok(Leadership::new(guard, value))
    }

    /// Who leads the election `name` now; `None` when nobody does (also while an operator's
    /// break keeps the name from everyone). One read of the store.
    pub fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let key = Key::new(name)?;
        let records = self.backend().find(Find::Key(&key, LeaseKind::Lock))?;
        Ok(records.first().and_then(Leader::of))
    }
}
