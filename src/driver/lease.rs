//! A lease as the store grants it ([`Lease`]), how a release or an extension names one
//! ([`LeaseRef`], [`LeaseKind`], [`Version`]) and what they did ([`Outcome`], [`Extension`]).

use std::fmt;

use crate::error::Result;
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::holder::Holder;
use crate::key::Key;
use crate::lock_id::LockId;

/// A held lock, as returned by a successful acquire.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    /// The handle for release, extend and ownership checks. Keep it secret: whoever has it can
    /// release the lock.
    pub lock_id: String,
    /// The fencing token of this acquisition.
    pub fence: Fence,
    /// When the lock expires, in Unix ms of the backend's time authority.
    pub expires_at_ms: i64,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock_id_hash", &hash_key(&self.lock_id))
            .field("fence", &self.fence)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

/// Which lease a release or extension is about. The lock id always; the key and the store's
/// [`Version`] when the holder knows them (a [`LockGuard`](crate::LockGuard) does), so a store
/// can go straight to the record instead of finding it by lock id first. A driver must still
/// check the stored lock id: the key and version are hints for speed, never proof of ownership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef<'a> {
    /// The lock id the lease was granted under.
    pub lock_id: &'a LockId,
    /// The key, when known.
    pub key: Option<&'a Key>,
    /// The store's version of the record as last seen, when known.
    pub version: Option<&'a Version>,
    /// A lock, or a permit of a semaphore ([`permit`](LeaseRef::permit)).
    pub kind: LeaseKind,
    /// For an extension: the holder text to store from now on ([`with_holder`](LeaseRef::with_holder)).
    pub holder: Option<&'a Holder>,
}

impl<'a> LeaseRef<'a> {
    /// A lease known only by its lock id (as from `syncguard release --lock-id`).
    pub fn new(lock_id: &'a LockId) -> Self {
        LeaseRef {
            lock_id,
            key: None,
            version: None,
            kind: LeaseKind::Lock,
            holder: None,
        }
    }

    /// A permit of the semaphore on `key`, granted under `lock_id`: a permit is found by
    /// both.
    pub fn permit(lock_id: &'a LockId, key: &'a Key) -> Self {
        LeaseRef {
            kind: LeaseKind::Permit,
            ..LeaseRef::new(lock_id).with_key(key)
        }
    }

    /// A shared hold of the lock on `key`, granted under `lock_id`: found by both.
    pub fn shared(lock_id: &'a LockId, key: &'a Key) -> Self {
        LeaseRef {
            kind: LeaseKind::Shared,
            ..LeaseRef::new(lock_id).with_key(key)
        }
    }

    /// The key of a permit or a shared hold (`InvalidArgument` for one made without it by
    /// hand).
    pub fn permit_key(&self) -> Result<&'a Key> {
        self.key.ok_or_else(|| {
            crate::error::LockError::invalid_argument(
                "a permit or a shared hold is named by its key and its lock id; the key is missing",
            )
        })
    }

    /// With the key the lease was granted on.
    #[must_use]
    pub fn with_key(mut self, key: &'a Key) -> Self {
        self.key = Some(key);
        self
    }

    /// A lock or a permit ([`LeaseKind`]).
    #[must_use]
    pub fn with_kind(mut self, kind: LeaseKind) -> Self {
        self.kind = kind;
        self
    }

    /// An extension that also replaces the lease's holder text with `holder` (a leader's
    /// [`proclaim`](crate::Leadership::proclaim)): a lock's only. A release ignores it.
    #[must_use]
    pub fn with_holder(mut self, holder: &'a Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// With the store's version of the record.
    #[must_use]
    pub fn with_version(mut self, version: Option<&'a Version>) -> Self {
        self.version = version;
        self
    }
}

/// What a lease holds: a key's lock, one permit of the key's semaphore (stored apart; see
/// [`Mode::Permit`](crate::driver::Mode::Permit)), or a shared hold of the key's lock
/// ([`Mode::Shared`](crate::driver::Mode::Shared)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LeaseKind {
    /// The lock on the key (held exclusively).
    #[default]
    Lock,
    /// A permit of the semaphore on the key: its [`LeaseRef`] always names the key.
    Permit,
    /// A shared hold of the lock on the key: its [`LeaseRef`] always names the key.
    Shared,
}

impl LeaseKind {
    /// The fence sequence and the line this kind of lease takes part in: a shared hold shares
    /// the lock's ([`Mode::Shared`](crate::driver::Mode::Shared)).
    pub fn sequence(self) -> LeaseKind {
        match self {
            LeaseKind::Lock | LeaseKind::Shared => LeaseKind::Lock,
            LeaseKind::Permit => LeaseKind::Permit,
        }
    }
}

/// A store's version of a lock record, opaque to everything but its driver (a Firestore
/// document's update time, say).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Version(String);

impl Version {
    /// Wraps the store's own representation.
    pub fn new(version: impl Into<String>) -> Self {
        Version(version.into())
    }

    /// The store's own representation.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({:?})", self.0)
    }
}

/// What a release or an extension did, and why not when it did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Outcome<T> {
    /// It took effect.
    Applied(T),
    /// No lock is stored under the lock id.
    NotFound,
    /// The lock was there but had expired (a release removed it).
    Expired,
    /// The record the lease named now holds another lock (a key or version that no longer
    /// matches the lock id).
    NotOwner,
}

impl<T> Outcome<T> {
    /// The value, if it took effect.
    pub fn applied(self) -> Option<T> {
        match self {
            Outcome::Applied(value) => Some(value),
            _ => None,
        }
    }

    /// Whether it took effect.
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied(_))
    }
}

/// A successful extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// The new expiry, in Unix ms of the store's time authority.
    pub expires_at_ms: i64,
    /// The store's new version of the record, if it has versions.
    pub version: Option<Version>,
}
