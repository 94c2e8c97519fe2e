//! The seam between the generic machinery (retries, guards, heartbeat, telemetry) and each
//! store: [`LockBackend`], the values it exchanges, and the lookup helpers built on it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::key::hash_key;

/// Single-attempt lock operations against one store. No method retries; the
/// [`Locker`](crate::Locker) adds retries, guards and the heartbeat on top.
///
/// Every implementation follows the SyncGuard contract:
/// - keys are checked with [`normalize_and_validate_key`](crate::normalize_and_validate_key),
///   lock ids with [`validate_lock_id`](crate::validate_lock_id) and TTLs with
///   [`ttl_to_ms`](crate::ttl_to_ms) **before any I/O** (`InvalidArgument`);
/// - liveness is [`is_live`](crate::is_live) with [`TIME_TOLERANCE_MS`](crate::TIME_TOLERANCE_MS)
///   against the backend's time authority;
/// - `acquire`, `release` and `extend` are atomic; release and extend resolve the lock id,
///   check liveness and ownership, and mutate in one step, and never resurrect an expired lock;
/// - fences grow with every acquisition of a key and their counters are never deleted;
/// - `is_locked` and `lookup` are read-only.
///
/// `release` and `extend` are idempotent and safe to call without owning the lock: they answer
/// `false` / `None` when the lock is absent.
pub trait LockBackend: Send + Sync {
    /// Takes the lock on `key` for `ttl` if nobody holds it.
    /// Contention is [`AcquireOutcome::Locked`], not an error.
    fn acquire(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome>;

    /// Removes the lock held under `lock_id`. `true` when this call removed it; `false` when it
    /// was absent (expired, released, or never existed).
    fn release(&self, lock_id: &str) -> Result<bool>;

    /// Sets the expiry of the live lock held under `lock_id` to *now + ttl* (replacing, not
    /// adding to, the remaining time). `Some(new expires_at_ms)` on success, `None` when the
    /// lock is absent or expired.
    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>>;

    /// Whether a live lock exists on `key`.
    fn is_locked(&self, key: &str) -> Result<bool>;

    /// The live lock on a key, or held under a lock id; `None` for expired and missing alike.
    /// Sanitised: hashes only.
    fn lookup(&self, by: Lookup<'_>) -> Result<Option<LockInfo>>;

    /// What this backend is and guarantees.
    fn capabilities(&self) -> Capabilities;

    /// [`release`](LockBackend::release), also saying why nothing was released when the
    /// backend could tell without extra I/O. Used by telemetry; the default knows no reasons.
    fn release_outcome(&self, lock_id: &str) -> Result<MutationOutcome<()>> {
        Ok(if self.release(lock_id)? {
            MutationOutcome::Applied(())
        } else {
            MutationOutcome::NotApplied(None)
        })
    }

    /// [`extend`](LockBackend::extend), also saying why nothing was extended when the backend
    /// could tell without extra I/O. Used by telemetry; the default knows no reasons.
    fn extend_outcome(&self, lock_id: &str, ttl: Duration) -> Result<MutationOutcome<i64>> {
        Ok(match self.extend(lock_id, ttl)? {
            Some(expires_at_ms) => MutationOutcome::Applied(expires_at_ms),
            None => MutationOutcome::NotApplied(None),
        })
    }

    /// [`lookup`](LockBackend::lookup) with the raw key and lock id, for debugging.
    /// All bundled backends implement it; wrappers should forward it. The default answers
    /// `Internal`.
    fn lookup_raw(&self, by: Lookup<'_>) -> Result<Option<LockInfoDebug>> {
        let _ = by;
        Err(LockError::internal(format!(
            "raw lookups are not implemented by this LockBackend (over the {} backend); \
             a wrapper must forward lookup_raw",
            self.capabilities().backend
        )))
    }
}

macro_rules! forward_lock_backend {
    ($($wrapper:ident),*) => {$(
        impl<B: LockBackend + ?Sized> LockBackend for $wrapper<B> {
            fn acquire(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome> {
                (**self).acquire(key, ttl)
            }
            fn release(&self, lock_id: &str) -> Result<bool> {
                (**self).release(lock_id)
            }
            fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
                (**self).extend(lock_id, ttl)
            }
            fn is_locked(&self, key: &str) -> Result<bool> {
                (**self).is_locked(key)
            }
            fn lookup(&self, by: Lookup<'_>) -> Result<Option<LockInfo>> {
                (**self).lookup(by)
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn release_outcome(&self, lock_id: &str) -> Result<MutationOutcome<()>> {
                (**self).release_outcome(lock_id)
            }
            fn extend_outcome(&self, lock_id: &str, ttl: Duration) -> Result<MutationOutcome<i64>> {
                (**self).extend_outcome(lock_id, ttl)
            }
            fn lookup_raw(&self, by: Lookup<'_>) -> Result<Option<LockInfoDebug>> {
                (**self).lookup_raw(by)
            }
        }
    )*};
}

forward_lock_backend!(Box, Arc);

/// Names the backend, so `Box<dyn LockBackend>` (from [`connect`](crate::connect)) can be
/// debug-printed and unwrapped.
impl fmt::Debug for dyn LockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockBackend({})", self.capabilities().backend)
    }
}

/// The answer to [`LockBackend::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an acquired lease stays held until released or expired"]
pub enum AcquireOutcome {
    /// The lock is now held under the returned lease.
    Acquired(Lease),
    /// Someone else holds a live lock on the key.
    Locked,
}

impl AcquireOutcome {
    /// The lease, if acquired.
    pub fn lease(self) -> Option<Lease> {
        match self {
            AcquireOutcome::Acquired(lease) => Some(lease),
            AcquireOutcome::Locked => None,
        }
    }
}

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

/// How [`LockBackend::lookup`] finds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// "Is this resource locked?" — direct access by key.
    Key(&'a str),
    /// "Do I still hold this lock?" — reverse lookup by lock id, verified atomically.
    LockId(&'a str),
}

/// A live lock, sanitised: identifiers appear only as [`hash_key`] hashes, so it is safe to log.
/// Serialises with the camelCase names of the TypeScript SyncGuard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockInfo {
    /// `hash_key(key)`.
    pub key_hash: String,
    /// `hash_key(lock_id)`.
    pub lock_id_hash: String,
    /// Expiry in Unix ms of the backend's time authority.
    pub expires_at_ms: i64,
    /// Acquisition time in Unix ms of the backend's time authority.
    pub acquired_at_ms: i64,
    /// The fencing token of the acquisition.
    pub fence: Fence,
}

/// A live lock with its raw key and lock id, from [`get_by_key_raw`] / [`get_by_id_raw`].
/// For debugging: `Debug` still hides the lock id, but the field is there to read.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct LockInfoDebug {
    /// The sanitised part.
    #[serde(flatten)]
    pub info: LockInfo,
    /// The (normalised) user key.
    pub key: String,
    /// The lock id.
    #[serde(rename = "lockId")]
    pub lock_id: String,
}

impl LockInfoDebug {
    /// Builds the record from raw stored values, computing the hashes.
    pub fn new(
        key: impl Into<String>,
        lock_id: impl Into<String>,
        expires_at_ms: i64,
        acquired_at_ms: i64,
        fence: Fence,
    ) -> Self {
        let key = key.into();
        let lock_id = lock_id.into();
        LockInfoDebug {
            info: LockInfo {
                key_hash: hash_key(&key),
                lock_id_hash: hash_key(&lock_id),
                expires_at_ms,
                acquired_at_ms,
                fence,
            },
            key,
            lock_id,
        }
    }
}

impl fmt::Debug for LockInfoDebug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockInfoDebug")
            .field("info", &self.info)
            .field("key", &self.key)
            .field("lock_id", &"<redacted>")
            .finish()
    }
}

/// Which clock decides expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeAuthority {
    /// The store's own clock (Redis `TIME`, PostgreSQL `clock_timestamp()`): client clocks do
    /// not matter.
    Server,
    /// The client's clock (Firestore, memory): keep clients NTP-synchronised.
    Client,
}

/// What a backend is and guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name: `"memory"`, `"redis"`, `"postgres"`, `"firestore"`.
    pub backend: &'static str,
    /// Whether acquisitions return fencing tokens (all bundled backends do).
    pub supports_fencing: bool,
    /// Which clock decides expiry.
    pub time_authority: TimeAuthority,
}

impl Capabilities {
    /// Capabilities of a backend named `backend`.
    pub fn new(
        backend: &'static str,
        supports_fencing: bool,
        time_authority: TimeAuthority,
    ) -> Self {
        Capabilities {
            backend,
            supports_fencing,
            time_authority,
        }
    }
}

/// Why an operation did not take effect, where the backend could tell without extra I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FailureReason {
    /// Acquire: someone else holds the lock.
    Locked,
    /// Release/extend: the lock existed but had expired.
    Expired,
    /// Release/extend: no lock under that lock id.
    NotFound,
}

impl FailureReason {
    /// `"locked"`, `"expired"` or `"not-found"`, the specification's strings.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Locked => "locked",
            FailureReason::Expired => "expired",
            FailureReason::NotFound => "not-found",
        }
    }
}

/// The answer of [`LockBackend::release_outcome`] and [`LockBackend::extend_outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationOutcome<T> {
    /// The mutation took effect (for extend: the new `expires_at_ms`).
    Applied(T),
    /// The lock was absent, with the reason when known.
    NotApplied(Option<FailureReason>),
}

impl<T> MutationOutcome<T> {
    /// The value when applied.
    pub fn applied(self) -> Option<T> {
        match self {
            MutationOutcome::Applied(value) => Some(value),
            MutationOutcome::NotApplied(_) => None,
        }
    }
}

/// The live lock on `key`, sanitised, or `None`.
pub fn get_by_key<B: LockBackend + ?Sized>(backend: &B, key: &str) -> Result<Option<LockInfo>> {
    backend.lookup(Lookup::Key(key))
}

/// The live lock held under `lock_id`, sanitised, or `None`.
pub fn get_by_id<B: LockBackend + ?Sized>(backend: &B, lock_id: &str) -> Result<Option<LockInfo>> {
    backend.lookup(Lookup::LockId(lock_id))
}

/// The live lock on `key` with raw key and lock id, or `None`. For debugging.
pub fn get_by_key_raw<B: LockBackend + ?Sized>(
    backend: &B,
    key: &str,
) -> Result<Option<LockInfoDebug>> {
    backend.lookup_raw(Lookup::Key(key))
}

/// The live lock held under `lock_id` with raw key and lock id, or `None`. For debugging.
pub fn get_by_id_raw<B: LockBackend + ?Sized>(
    backend: &B,
    lock_id: &str,
) -> Result<Option<LockInfoDebug>> {
    backend.lookup_raw(Lookup::LockId(lock_id))
}

/// Whether `lock_id` still holds a live lock: a read-only check, for diagnostics.
/// Never use it to gate a mutation (that is what fences are for).
pub fn owns<B: LockBackend + ?Sized>(backend: &B, lock_id: &str) -> Result<bool> {
    Ok(get_by_id(backend, lock_id)?.is_some())
}
