//! What a lock user calls on any backend: [`LockBackend`], the values it answers with, and the
//! lookup helpers — written once, over every [`Driver`].

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::driver::{
    Acquisition, Capabilities, Driver, DriverExt, Find, Lease, LeaseKind, LeaseRef, LockRecord,
    Mode, PlaceRecord, Request,
};
use crate::error::Result;
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::key::Key;
use crate::listing::{KeyPrefix, ListLimit, LockList};
use crate::lock_id::LockId;
use crate::permits::Permits;
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

    /// The live locks whose key starts with `prefix` (`""`: every lock), sorted by key, at
    /// most `limit` (1 to [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT);
    /// [`DEFAULT_LIST_LIMIT`](crate::DEFAULT_LIST_LIMIT) is a good start), and whether
    /// that is all of them ([`LockList::coverage`]). Sanitised: hashes only. For operators: the
    /// work is bounded, and each backend's documentation says what a listing costs there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{Coverage, LockBackend, MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// for key in ["report:b", "report:a", "backup"] {
    ///     let _ = backend.acquire(key, Duration::from_secs(10))?;
    /// }
    /// let listed = backend.list("report:", 10)?;
    /// assert_eq!(listed.locks.len(), 2);
    /// assert_eq!(listed.locks[0].key_hash, syncguard::driver::hash_key("report:a"));
    /// assert_eq!(listed.coverage, Coverage::Complete);
    /// assert_eq!(backend.list("", 1)?.coverage, Coverage::LimitReached);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    fn list(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfo>> {
        Ok(self.list_raw(prefix, limit)?.map(|raw| raw.info))
    }

    /// [`list`](LockBackend::list) with the raw keys and lock ids, for debugging.
    fn list_raw(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfoDebug>> {
        let (prefix, limit) = (KeyPrefix::new(prefix)?, ListLimit::new(limit)?);
        Ok(self
            .list_records(&prefix, LeaseKind::Lock, limit)?
            .map(LockInfoDebug::from))
    }

    /// Takes one of the `permits` permits (1 to [`MAX_PERMITS`](crate::driver::MAX_PERMITS)) of
    /// the semaphore on `key` for `ttl`, if fewer than `permits` are held. Contention is
    /// [`AcquireOutcome::Locked`]. The semaphore is not the key's lock: see
    /// [`Mode::Permit`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{AcquireOutcome, LockBackend, MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// let ttl = Duration::from_secs(10);
    /// let first = backend.acquire_permit("export", 2, ttl)?.lease().expect("free");
    /// let second = backend.acquire_permit("export", 2, ttl)?.lease().expect("one left");
    /// assert_eq!(backend.acquire_permit("export", 2, ttl)?, AcquireOutcome::Locked);
    /// assert!(second.fence > first.fence);
    /// assert_eq!(backend.permit_holders("export")?.len(), 2);
    /// assert!(backend.release_permit("export", &first.lock_id)?);
    /// assert!(backend.acquire_permit("export", 2, ttl)?.lease().is_some());
    /// assert!(!backend.is_locked("export")?); // the lock on the key is another thing
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    fn acquire_permit(&self, key: &str, permits: u32, ttl: Duration) -> Result<AcquireOutcome> {
        let (key, permits, ttl) = (Key::new(key)?, Permits::new(permits)?, Ttl::new(ttl)?);
        let request = Request::one(&key, ttl).mode(Mode::Permit(permits));
        Ok(self.acquire_one(&request)?.into())
    }

    /// Gives back the permit of the semaphore on `key` held under `lock_id`: `true` when this
    /// call removed it, `false` when it was absent.
    fn release_permit(&self, key: &str, lock_id: &str) -> Result<bool> {
        let (key, lock_id) = (Key::new(key)?, LockId::new(lock_id)?);
        Ok(self
            .release_lease(LeaseRef::permit(&lock_id, &key))?
            .is_applied())
    }

    /// Sets the expiry of the live permit of the semaphore on `key` held under `lock_id` to
    /// *now + ttl*; `None` when it is absent or expired.
    fn extend_permit(&self, key: &str, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        let (key, lock_id, ttl) = (Key::new(key)?, LockId::new(lock_id)?, Ttl::new(ttl)?);
        Ok(self
            .extend_lease(LeaseRef::permit(&lock_id, &key), ttl)?
            .applied()
            .map(|extension| extension.expires_at_ms))
    }

    /// Who holds the semaphore on `key`: its live permits, in fence order. Sanitised: hashes
    /// only.
    fn permit_holders(&self, key: &str) -> Result<Vec<LockInfo>> {
        Ok(self
            .permit_holders_raw(key)?
            .into_iter()
            .map(|raw| raw.info)
            .collect())
    }

    /// [`permit_holders`](LockBackend::permit_holders) with the raw key and lock ids.
    fn permit_holders_raw(&self, key: &str) -> Result<Vec<LockInfoDebug>> {
        let key = Key::new(key)?;
        Ok(self
            .find(Find::Key(&key, LeaseKind::Permit))?
            .into_iter()
            .map(LockInfoDebug::from)
            .collect())
    }

    /// The live permits of every semaphore whose key starts with `prefix` (`""`: all), sorted
    /// by key then fence, at most `limit` permits (1 to
    /// [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT)), and whether that is all of them: what
    /// [`list`](LockBackend::list) is for locks. Sanitised: hashes only.
    fn list_permits(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfo>> {
        Ok(self.list_permits_raw(prefix, limit)?.map(|raw| raw.info))
    }

    /// [`list_permits`](LockBackend::list_permits) with the raw keys and lock ids.
    fn list_permits_raw(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfoDebug>> {
        let (prefix, limit) = (KeyPrefix::new(prefix)?, ListLimit::new(limit)?);
        Ok(self
            .list_records(&prefix, LeaseKind::Permit, limit)?
            .map(LockInfoDebug::from))
    }

    /// Takes a shared hold of the lock on `key` for `ttl` (a reader: see
    /// [`Mode::Shared`]) unless a writer holds it or waits in line. Contention
    /// is [`AcquireOutcome::Locked`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{AcquireOutcome, LockBackend, MemoryBackend};
    ///
    /// let backend = MemoryBackend::new();
    /// let ttl = Duration::from_secs(10);
    /// let a = backend.acquire_shared("dataset", ttl)?.lease().expect("free");
    /// let b = backend.acquire_shared("dataset", ttl)?.lease().expect("readers share");
    /// assert_eq!(backend.acquire("dataset", ttl)?, AcquireOutcome::Locked); // no writer now
    /// assert_eq!(backend.readers("dataset")?.len(), 2);
    /// assert!(backend.release_shared("dataset", &a.lock_id)?);
    /// assert!(backend.release_shared("dataset", &b.lock_id)?);
    /// assert!(backend.acquire("dataset", ttl)?.lease().is_some());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    fn acquire_shared(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome> {
        let (key, ttl) = (Key::new(key)?, Ttl::new(ttl)?);
        let request = Request::one(&key, ttl).mode(Mode::Shared);
        Ok(self.acquire_one(&request)?.into())
    }

    /// Gives back the shared hold of the lock on `key` held under `lock_id`: `true` when this
    /// call removed it, `false` when it was absent.
    fn release_shared(&self, key: &str, lock_id: &str) -> Result<bool> {
        let (key, lock_id) = (Key::new(key)?, LockId::new(lock_id)?);
        Ok(self
            .release_lease(LeaseRef::shared(&lock_id, &key))?
            .is_applied())
    }

    /// Sets the expiry of the live shared hold of the lock on `key` held under `lock_id` to
    /// *now + ttl*; `None` when it is absent or expired.
    fn extend_shared(&self, key: &str, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        let (key, lock_id, ttl) = (Key::new(key)?, LockId::new(lock_id)?, Ttl::new(ttl)?);
        Ok(self
            .extend_lease(LeaseRef::shared(&lock_id, &key), ttl)?
            .applied()
            .map(|extension| extension.expires_at_ms))
    }

    /// Who holds the lock on `key` shared: its live readers, in fence order. Sanitised: hashes
    /// only.
    fn readers(&self, key: &str) -> Result<Vec<LockInfo>> {
        Ok(self
            .readers_raw(key)?
            .into_iter()
            .map(|raw| raw.info)
            .collect())
    }

    /// [`readers`](LockBackend::readers) with the raw key and lock ids.
    fn readers_raw(&self, key: &str) -> Result<Vec<LockInfoDebug>> {
        let key = Key::new(key)?;
        Ok(self
            .find(Find::Key(&key, LeaseKind::Shared))?
            .into_iter()
            .map(LockInfoDebug::from)
            .collect())
    }

    /// The live shared holders of every lock whose key starts with `prefix`, sorted by key
    /// then fence, at most `limit` (1 to [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT)), and
    /// whether that is all of them: what [`list`](LockBackend::list) is for exclusive locks.
    /// Sanitised: hashes only.
    fn list_shared(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfo>> {
        Ok(self.list_shared_raw(prefix, limit)?.map(|raw| raw.info))
    }

    /// [`list_shared`](LockBackend::list_shared) with the raw keys and lock ids.
    fn list_shared_raw(&self, prefix: &str, limit: usize) -> Result<LockList<LockInfoDebug>> {
        let (prefix, limit) = (KeyPrefix::new(prefix)?, ListLimit::new(limit)?);
        Ok(self
            .list_records(&prefix, LeaseKind::Shared, limit)?
            .map(LockInfoDebug::from))
    }

    /// The line of waiters for the lock on `key`: their live places in the order they will be
    /// served, each with its holder text and expiry ([`LockOptions::wait_in_line`]). Empty when
    /// nobody waits, or for a backend without a line. Sanitised: the place ids as hashes.
    ///
    /// [`LockOptions::wait_in_line`]: crate::LockOptions::wait_in_line
    fn line(&self, key: &str) -> Result<Vec<PlaceInfo>> {
        let key = Key::new(key)?;
        Ok(places(self.find_line(&key, LeaseKind::Lock)?))
    }

    /// [`line`](LockBackend::line) for the semaphore on `key`.
    fn permit_line(&self, key: &str) -> Result<Vec<PlaceInfo>> {
        let key = Key::new(key)?;
        Ok(places(self.find_line(&key, LeaseKind::Permit)?))
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

/// A waiter's place in a key's line, sanitised: what [`LockBackend::line`] returns. Serialises
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
    backend.list(prefix, limit)
}

/// The live locks under a key prefix with raw keys and lock ids: [`LockBackend::list_raw`].
/// For debugging.
pub fn list_locks_raw<B: LockBackend + ?Sized>(
    backend: &B,
    prefix: &str,
    limit: usize,
) -> Result<LockList<LockInfoDebug>> {
    backend.list_raw(prefix, limit)
}

/// Whether `lock_id` still holds a live lock: a read-only check, for diagnostics.
/// Never use it to gate a mutation (that is what fences are for).
pub fn owns<B: LockBackend + ?Sized>(backend: &B, lock_id: &str) -> Result<bool> {
    Ok(get_by_id(backend, lock_id)?.is_some())
}
