//! What a lock user calls on any backend: [`LockBackend`], the values it answers with, and the
//! lookup helpers — written once, over every [`Driver`].

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::driver::{
    Acquisition, BreakNote, Capabilities, Driver, DriverExt, Find, Lease, LeaseKind, LeaseRef,
    LockRecord, Mode, PlaceRecord, Request,
};
use crate::error::Result;
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::key::Key;
use crate::listing::{KeyPrefix, ListLimit, LockList};
use crate::lock_id::LockId;
use crate::time::Ttl;

/// Single-attempt lock operations against one store, with plain arguments: what a lock user
/// calls on a backend. No method retries; the [`Locker`](crate::Locker) adds retries, guards and
/// the heartbeat on top.
///
/// Every backend has these methods, through its [`Driver`]: arguments are validated here,
/// before the store is asked anything (`InvalidArgument`: empty or over-long keys, malformed
/// lock ids, TTLs that are not a positive whole number of milliseconds), and the driver's
/// answers are turned into the forms below. `release` and `extend` are idempotent and safe to
/// call without owning the lock: they answer `false` / `None` when the lock is absent.
///
/// ```
/// use std::time::Duration;
/// use syncguard::{AcquireOutcome, LockBackend, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let AcquireOutcome::Acquired(lease) = backend.acquire("job", Duration::from_secs(10))? else {
///     unreachable!("nobody holds it yet");
/// };
/// assert!(backend.is_locked("job")?);
/// assert_eq!(backend.extend(&lease.lock_id, Duration::from_secs(10))?.is_some(), true);
/// assert!(backend.release(&lease.lock_id)?);
/// assert!(!backend.release(&lease.lock_id)?); // already gone
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub trait LockBackend: Driver {
    /// Takes the lock on `key` for `ttl` if nobody holds it.
    /// Contention is [`AcquireOutcome::Locked`], not an error.
    fn acquire(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome> {
        let (key, ttl) = (Key::new(key)?, Ttl::new(ttl)?);
        Ok(self.acquire_one(&Request::one(&key, ttl))?.into())
    }

    /// Removes the lock held under `lock_id`. `true` when this call removed it; `false` when it
    /// was absent (expired, released, or never existed).
    fn release(&self, lock_id: &str) -> Result<bool> {
        let lock_id = LockId::new(lock_id)?;
        Ok(self.release_lease(LeaseRef::new(&lock_id))?.is_applied())
    }

    /// Sets the expiry of the live lock held under `lock_id` to *now + ttl* (replacing, not
    /// adding to, the remaining time). `Some(new expires_at_ms)` on success, `None` when the
    /// lock is absent or expired.
    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        let (lock_id, ttl) = (LockId::new(lock_id)?, Ttl::new(ttl)?);
        Ok(self
            .extend_lease(LeaseRef::new(&lock_id), ttl)?
            .applied()
            .map(|extension| extension.expires_at_ms))
    }

    /// Whether a live lock exists on `key`.
    fn is_locked(&self, key: &str) -> Result<bool> {
        self.key_is_locked(&Key::new(key)?)
    }

    /// The live lock on a key, or held under a lock id; `None` for expired and missing alike.
    /// Sanitised: hashes only.
    fn lookup(&self, by: Lookup<'_>) -> Result<Option<LockInfo>> {
        Ok(self.lookup_raw(by)?.map(|raw| raw.info))
    }

    /// [`lookup`](LockBackend::lookup) with the raw key and lock id, for debugging.
    fn lookup_raw(&self, by: Lookup<'_>) -> Result<Option<LockInfoDebug>> {
        let record = match by {
            Lookup::Key(key) => {
                let key = Key::new(key)?;
                self.find(Find::Key(&key, LeaseKind::Lock))?
                    .into_iter()
                    .next()
            }
            Lookup::LockId(lock_id) => {
                let lock_id = LockId::new(lock_id)?;
                // Defence in depth: "do I still hold this lock?" must never be answered with
                // another holder's record (a stale index entry, a hand-edited one).
                self.find(Find::LockId(&lock_id))?
                    .into_iter()
                    .find(|record| record.lock_id == lock_id.as_str())
            }
        };
        Ok(record.map(LockInfoDebug::from))
    }

    /// The live leases of `kind` whose key starts with `prefix` (`""`: every key), sorted by
    /// key (then fence: a semaphore's permits and a lock's readers share their key), at most
    /// `limit` (1 to [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT);
    /// [`DEFAULT_LIST_LIMIT`](crate::DEFAULT_LIST_LIMIT) is a good start), and whether that is
    /// all of them ([`LockList::coverage`]). Sanitised: hashes only. For operators: the work is
    /// bounded, and each backend's documentation says what a listing costs there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{Coverage, LeaseKind, LockBackend, MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// for key in ["report:b", "report:a", "backup"] {
    ///     let _ = backend.acquire(key, Duration::from_secs(10))?;
    /// }
    /// let listed = backend.list("report:", LeaseKind::Lock, 10)?;
    /// assert_eq!(listed.locks.len(), 2);
    /// assert_eq!(listed.locks[0].key_hash, syncguard::driver::hash_key("report:a"));
    /// assert_eq!(listed.coverage, Coverage::Complete);
    /// assert_eq!(backend.list("", LeaseKind::Lock, 1)?.coverage, Coverage::LimitReached);
    /// assert!(backend.list("", LeaseKind::Permit, 10)?.locks.is_empty());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    fn list(&self, prefix: &str, kind: LeaseKind, limit: usize) -> Result<LockList<LockInfo>> {
        Ok(self.list_raw(prefix, kind, limit)?.map(|raw| raw.info))
    }

    /// [`list`](LockBackend::list) with the raw keys and lock ids, for debugging.
    fn list_raw(
        &self,
        prefix: &str,
        kind: LeaseKind,
        limit: usize,
    ) -> Result<LockList<LockInfoDebug>> {
        let (prefix, limit) = (KeyPrefix::new(prefix)?, ListLimit::new(limit)?);
        Ok(self
            .list_records(&prefix, kind, limit)?
            .map(LockInfoDebug::from))
    }

    /// Takes what `mode` asks for on `key` for `ttl`: the lock ([`acquire`](LockBackend::acquire)),
    /// a shared hold of it (a reader: see [`Mode::Shared`]) unless a writer holds it or waits
    /// in line, or one of the permits of the key's semaphore ([`Mode::permits`]; the semaphore
    /// is not the key's lock: see [`Mode::Permit`]). Contention is [`AcquireOutcome::Locked`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{AcquireOutcome, LeaseKind, LockBackend, MemoryBackend, Mode};
    ///
    /// let backend = MemoryBackend::new();
    /// let ttl = Duration::from_secs(10);
    /// let two = Mode::permits(2)?;
    /// let first = backend.acquire_as("export", two, ttl)?.lease().expect("free");
    /// let second = backend.acquire_as("export", two, ttl)?.lease().expect("one left");
    /// assert_eq!(backend.acquire_as("export", two, ttl)?, AcquireOutcome::Locked);
    /// assert!(second.fence > first.fence);
    /// assert_eq!(backend.holders("export", LeaseKind::Permit)?.len(), 2);
    /// assert!(backend.release_as("export", LeaseKind::Permit, &first.lock_id)?);
    /// assert!(!backend.is_locked("export")?); // the lock on the key is another thing
    ///
    /// let a = backend.acquire_as("dataset", Mode::Shared, ttl)?.lease().expect("free");
    /// let b = backend.acquire_as("dataset", Mode::Shared, ttl)?.lease().expect("readers share");
    /// assert_eq!(backend.acquire("dataset", ttl)?, AcquireOutcome::Locked); // no writer now
    /// assert_eq!(backend.holders("dataset", LeaseKind::Shared)?.len(), 2);
    /// assert!(backend.release_as("dataset", LeaseKind::Shared, &a.lock_id)?);
    /// assert!(backend.release_as("dataset", LeaseKind::Shared, &b.lock_id)?);
    /// assert!(backend.acquire("dataset", ttl)?.lease().is_some());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    fn acquire_as(&self, key: &str, mode: Mode, ttl: Duration) -> Result<AcquireOutcome> {
        let (key, ttl) = (Key::new(key)?, Ttl::new(ttl)?);
        Ok(self
            .acquire_one(&Request::one(&key, ttl).mode(mode))?
            .into())
    }

    /// Gives back the lease of `kind` on `key` held under `lock_id` (a permit of its
    /// semaphore, a shared hold of its lock, or the lock itself): `true` when this call
    /// removed it, `false` when it was absent.
    fn release_as(&self, key: &str, kind: LeaseKind, lock_id: &str) -> Result<bool> {
        let (key, lock_id) = (Key::new(key)?, LockId::new(lock_id)?);
        let lease = LeaseRef::new(&lock_id).with_key(&key).with_kind(kind);
        Ok(self.release_lease(lease)?.is_applied())
    }

    /// Sets the expiry of the live lease of `kind` on `key` held under `lock_id` to
    /// *now + ttl*; `None` when it is absent or expired.
    fn extend_as(
        &self,
        key: &str,
        kind: LeaseKind,
        lock_id: &str,
        ttl: Duration,
    ) -> Result<Option<i64>> {
        let (key, lock_id, ttl) = (Key::new(key)?, LockId::new(lock_id)?, Ttl::new(ttl)?);
        let lease = LeaseRef::new(&lock_id).with_key(&key).with_kind(kind);
        Ok(self
            .extend_lease(lease, ttl)?
            .applied()
            .map(|extension| extension.expires_at_ms))
    }

    /// Who holds `key` as `kind` says: its lock's holder (none or one), its semaphore's live
    /// permits, or its lock's live readers, in fence order. Sanitised: hashes only.
    fn holders(&self, key: &str, kind: LeaseKind) -> Result<Vec<LockInfo>> {
        Ok(self
            .holders_raw(key, kind)?
            .into_iter()
            .map(|raw| raw.info)
            .collect())
    }

    /// [`holders`](LockBackend::holders) with the raw key and lock ids.
    fn holders_raw(&self, key: &str, kind: LeaseKind) -> Result<Vec<LockInfoDebug>> {
        let key = Key::new(key)?;
        Ok(self
            .find(Find::Key(&key, kind))?
            .into_iter()
            .map(LockInfoDebug::from)
            .collect())
    }

    /// The line of waiters for `key`'s lock (`kind` [`Lock`](LeaseKind::Lock) or
    /// [`Shared`](LeaseKind::Shared): one line) or its semaphore
    /// ([`Permit`](LeaseKind::Permit)): their live places in the order they will be served,
    /// each with its holder text and expiry ([`LockOptions::wait_in_line`]). Empty when nobody
    /// waits, or for a backend without a line. Sanitised: the place ids as hashes.
    ///
    /// [`LockOptions::wait_in_line`]: crate::LockOptions::wait_in_line
    fn waiters(&self, key: &str, kind: LeaseKind) -> Result<Vec<PlaceInfo>> {
        let key = Key::new(key)?;
        Ok(places(self.find_line(&key, kind.sequence())?))
    }

    /// What this backend is and guarantees: its driver's [`Driver::describe`], under the name
    /// a lock user calls. The two cannot be one method: named alike, a call on any
    /// `B: LockBackend` would be ambiguous; on the driver alone, a lock user would have to
    /// import [`Driver`] to call it.
    fn capabilities(&self) -> Capabilities {
        self.describe()
    }
}

/// Every driver is a backend; the methods above are its only implementation.
impl<D: Driver + ?Sized> LockBackend for D {}

/// Names the backend, so `Box<dyn LockBackend>` (from [`connect`](crate::connect)) can be
/// debug-printed and unwrapped.
impl fmt::Debug for dyn LockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockBackend({})", self.describe().backend)
    }
}

fn places(records: Vec<PlaceRecord>) -> Vec<PlaceInfo> {
    records
        .into_iter()
        .map(|record| PlaceInfo {
            place_hash: hash_key(&record.place_id),
            expires_at_ms: record.expires_at_ms,
            holder: record.holder,
            shared: record.shared,
        })
        .collect()
}

/// A waiter's place in a key's line, sanitised: what [`LockBackend::waiters`] returns. Serialises
/// with camelCase names, as [`LockInfo`] does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaceInfo {
    /// `hash_key(place id)`.
    pub place_hash: String,
    /// When the place lapses unless its waiter renews it (each of its attempts does), in Unix
    /// ms of the backend's time authority.
    pub expires_at_ms: i64,
    /// Who waits, as described by its [`holder`](crate::LockOptions::holder) option; `None`
    /// without one.
    pub holder: Option<String>,
    /// Whether it waits for a shared hold (a reader, [`RwLock::read`](crate::RwLock::read)).
    pub shared: bool,
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

impl From<Acquisition> for AcquireOutcome {
    /// A driver's answer for one key, as a lock user sees it (without the store's version).
    fn from(acquisition: Acquisition) -> Self {
        match acquisition {
            Acquisition::Acquired { lease, .. } => AcquireOutcome::Acquired(lease),
            Acquisition::Locked => AcquireOutcome::Locked,
        }
    }
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

/// How [`LockBackend::lookup`] finds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// "Is this resource locked?" — direct access by key.
    Key(&'a str),
    /// "Do I still hold this lock?" — reverse lookup by lock id, verified atomically.
    LockId(&'a str),
}

/// A live lock, sanitised: identifiers appear only as [`hash_key`] hashes, so it is safe to log.
/// Serialises with the camelCase names of the TypeScript SyncGuard, plus `holder` (`null` when
/// there is none).
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
    /// Who holds it, as its holder described itself when acquiring
    /// ([`LockOptions::holder`](crate::LockOptions::holder); the `syncguard` command stores
    /// `host:pid command`). `None` when it gave no description, or the lock was taken by the
    /// TypeScript SyncGuard or through a store that keeps none (PostgreSQL tables without
    /// `syncguard setup`). A description, not an identifier: shown as it is, not hashed.
    pub holder: Option<String>,
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
    /// Builds the record from raw stored values, computing the hashes; no holder (see
    /// [`with_holder`](LockInfoDebug::with_holder)).
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
                holder: None,
            },
            key,
            lock_id,
        }
    }

    /// With the holder description stored with the lock.
    #[must_use]
    pub fn with_holder(mut self, holder: Option<String>) -> Self {
        self.info.holder = holder;
        self
    }
}

impl LockInfoDebug {
    /// Who broke the key and why, when this is a break's marker
    /// ([`Locker::break_key`](crate::Locker::break_key)); `None` for any other lease.
    pub fn break_note(&self) -> Option<BreakNote> {
        let record = LockRecord {
            key: self.key.clone(),
            lock_id: self.lock_id.clone(),
            expires_at_ms: self.info.expires_at_ms,
            acquired_at_ms: self.info.acquired_at_ms,
            fence: self.info.fence,
            holder: self.info.holder.clone(),
        };
        BreakNote::of(&record)
    }
}

impl From<LockRecord> for LockInfoDebug {
    fn from(record: LockRecord) -> Self {
        LockInfoDebug::new(
            record.key,
            record.lock_id,
            record.expires_at_ms,
            record.acquired_at_ms,
            record.fence,
        )
        .with_holder(record.holder)
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

/// The live locks under a key prefix, sanitised, sorted by key: [`LockBackend::list`].
pub fn list_locks<B: LockBackend + ?Sized>(
    backend: &B,
    prefix: &str,
    limit: usize,
) -> Result<LockList<LockInfo>> {
    backend.list(prefix, LeaseKind::Lock, limit)
}

/// The live locks under a key prefix with raw keys and lock ids: [`LockBackend::list_raw`].
/// For debugging.
pub fn list_locks_raw<B: LockBackend + ?Sized>(
    backend: &B,
    prefix: &str,
    limit: usize,
) -> Result<LockList<LockInfoDebug>> {
    backend.list_raw(prefix, LeaseKind::Lock, limit)
}

/// Whether `lock_id` still holds a live lock: a read-only check, for diagnostics.
/// Never use it to gate a mutation (that is what fences are for).
pub fn owns<B: LockBackend + ?Sized>(backend: &B, lock_id: &str) -> Result<bool> {
    Ok(get_by_id(backend, lock_id)?.is_some())
}
