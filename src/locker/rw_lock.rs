//! [`RwLock`]: a key's lock in two modes — shared (any number of readers) and exclusive (one
//! writer, the lock every other call takes) — each holder through a [`LockGuard`].

use std::fmt;
use std::time::Duration;

use super::{LockGuard, LockOptions, Locker};
use crate::backend::{LockInfo, LockInfoDebug};
use crate::driver::Driver;
use crate::driver::{Find, LeaseKind, Mode};
use crate::error::{ErrorCode, LockError, Result};
use crate::key::Key;

/// A key's lock in shared and exclusive modes: [`Locker::rw_lock`]. Cheap to clone; `Send` and
/// `Sync`.
///
/// [`read`](RwLock::read) takes a shared hold: any number of readers hold the key at once, and
/// no writer while they do. [`write`](RwLock::write) is the key's lock itself, exactly what
/// [`Locker::lock`] takes (a plain `lock("k")` and `rw_lock("k").write()` exclude each other
/// and every reader). Each reader holds a [`LockGuard`] of its own, as a permit does: its own
/// lock id, a fence from the key's fence counter (fences order every grant of the key, shared
/// or exclusive), its TTL renewed by the heartbeat, its own loss signal, `min_hold`, `release`
/// or drop; one reader's expiry or loss leaves the others' holds as they are.
///
/// Waiting follows the key's line ([`LockOptions::wait_in_line`]): readers at the head of the
/// line are granted together, and a reader that comes after a waiting writer waits behind it —
/// a stream of readers cannot keep a writer out, and a writer that dies in line holds readers
/// up only until its place lapses. There is no upgrade or downgrade in this version: release
/// one hold and take the other (another waiter may come between).
///
/// The TypeScript SyncGuard knows exclusive records only: it can take the lock while Rust
/// readers hold the key shared.
pub struct RwLock<B> {
    locker: Locker<B>,
    key: Key,
}

impl<B: Driver + 'static> Locker<B> {
    /// The lock on `key` in two modes: many readers or one writer (see [`RwLock`]).
    /// `InvalidArgument` for a bad key, before any I/O.
    ///
    /// ```
    /// use syncguard::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let dataset = locker.rw_lock("dataset")?;
    /// let a = dataset.read()?;
    /// let b = dataset.try_read()?.expect("readers share");
    /// assert!(dataset.try_write()?.is_none()); // readers hold it
    /// assert!(locker.try_lock("dataset")?.is_none()); // the same lock as write()
    /// assert_eq!(dataset.readers()?.len(), 2);
    /// assert!(b.fence() > a.fence());
    /// drop((a, b));
    /// let writer = dataset.write()?;
    /// assert!(dataset.try_read()?.is_none()); // a writer holds it
    /// # drop(writer);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn rw_lock(&self, key: &str) -> Result<RwLock<B>> {
        Ok(RwLock {
            locker: self.clone(),
            key: Key::new(key)?,
        })
    }
}

impl<B: Driver + 'static> RwLock<B> {
    /// The key (NFC-normalised).
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// Takes a shared hold, waiting while a writer holds the key or waits ahead — as long as
    /// it takes unless the locker's defaults set a [`timeout`](LockOptions::timeout) or a
    /// [`cancel`](LockOptions::cancel) token, as [`Locker::lock`] does.
    pub fn read(&self) -> Result<LockGuard> {
        self.read_with(self.locker.defaults())
    }

    /// Takes a shared hold if it can be had right now (one attempt, no waiting, no place in
    /// line; refused while a writer waits in line).
    pub fn try_read(&self) -> Result<Option<LockGuard>> {
        self.attempt(Mode::Shared, &self.locker.once())
    }

    /// Takes a shared hold, waiting up to `timeout`; `Ok(None)` if a writer kept it.
    pub fn try_read_for(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.attempt(Mode::Shared, &self.locker.up_to(timeout))
    }

    /// Takes a shared hold with `options`; `AcquisitionTimeout` if a writer kept the key,
    /// `Aborted` if the cancel token fired.
    pub fn read_with(&self, options: &LockOptions) -> Result<LockGuard> {
        self.attempt(Mode::Shared, options)?
            .ok_or_else(|| self.timed_out("a writer kept", options))
    }

    /// Takes the key's lock exclusively, waiting while readers or a writer hold it: exactly
    /// [`Locker::lock`].
    pub fn write(&self) -> Result<LockGuard> {
        self.write_with(self.locker.defaults())
    }

    /// [`Locker::try_lock`] on the key.
    pub fn try_write(&self) -> Result<Option<LockGuard>> {
        self.attempt(Mode::Exclusive, &self.locker.once())
    }

    /// [`Locker::try_lock_for`] on the key.
    pub fn try_write_for(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.attempt(Mode::Exclusive, &self.locker.up_to(timeout))
    }

    /// [`Locker::lock_with`] on the key.
    pub fn write_with(&self, options: &LockOptions) -> Result<LockGuard> {
        self.attempt(Mode::Exclusive, options)?
            .ok_or_else(|| self.timed_out("readers or a writer kept", options))
    }

    /// Who holds the key shared now: the live readers, in fence order. Sanitised: hashes only.
    pub fn readers(&self) -> Result<Vec<LockInfo>> {
        Ok(self
            .readers_raw()?
            .into_iter()
            .map(|raw| raw.info)
            .collect())
    }

    /// [`readers`](RwLock::readers) with the raw key and lock ids.
    pub fn readers_raw(&self) -> Result<Vec<LockInfoDebug>> {
        Ok(self
            .locker
            .backend()
            .find(Find::Key(&self.key, LeaseKind::Shared))?
            .into_iter()
            .map(LockInfoDebug::from)
            .collect())
    }

    fn timed_out(&self, kept: &str, options: &LockOptions) -> LockError {
        LockError::new(
            ErrorCode::AcquisitionTimeout,
            format!(
                "{kept} the key (timeout {:?}, {} retries)",
                options.timeout, options.max_retries
            ),
        )
        .with_key(self.key.as_str())
    }

    fn attempt(&self, mode: Mode, options: &LockOptions) -> Result<Option<LockGuard>> {
        self.locker.acquire_key(self.key.clone(), mode, options)
    }
}

impl<B> Clone for RwLock<B> {
    fn clone(&self) -> Self {
        RwLock {
            locker: self.locker.clone(),
            key: self.key.clone(),
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for RwLock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("key_hash", &crate::hash::hash_key(self.key.as_str()))
            .field("locker", &self.locker)
            .finish()
    }
}
