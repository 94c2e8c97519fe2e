//! Several keys held together (DESIGN §12, "Several keys"): [`Locker::lock_all`] and its
//! `try_` forms, and the [`MultiLockGuard`] that holds every key.
//!
//! All or none: an attempt takes every key or none ([`Driver::try_acquire_all`]), and a
//! waiting caller holds none of the keys while it waits — so no mix of `lock_all` and `lock`
//! over overlapping keys can deadlock, whatever the order the callers name the keys in. Each
//! key is a lease of its own (its lock id, its fence, its renewals by the one heartbeat, at the
//! same times since they were granted together); the guard is lost as a whole when any of them
//! is lost, and releases them all.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LockOptions;
use super::guard::LockGuard;
use super::{Locker, Target};
use crate::cancel::{CancelToken, OnCancel};
use crate::driver::{Driver, KeySet, Lease};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;

impl<B: Driver + 'static> Locker<B> {
    /// Takes the locks on every one of `keys` — 1 to [`MAX_KEYS`](crate::driver::MAX_KEYS),
    /// duplicates collapsed, in any order — waiting while any of them is held, as
    /// [`lock`](Locker::lock) does for one. All or none: the wait holds none of the keys, and
    /// the guard holds all of them.
    ///
    /// A bad key among good ones, no key or too many are refused (`InvalidArgument`) before
    /// anything is sent.
    ///
    /// ```
    /// use syncguard::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let both = locker.lock_all(&["acct:2", "acct:1"])?;
    /// assert_eq!(both.keys(), ["acct:1", "acct:2"]); // one fixed order
    /// assert!(locker.try_lock("acct:1")?.is_none());
    /// for guard in both.guards() {
    ///     println!("{} with fence {}", guard.key(), guard.fence());
    /// }
    /// both.release()?; // or let it drop
    /// assert!(locker.try_lock_all(&["acct:1", "acct:2"])?.is_some());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn lock_all<S: AsRef<str>>(&self, keys: &[S]) -> Result<MultiLockGuard> {
        self.lock_all_with(keys, self.defaults())
    }

    /// Takes the locks on every one of `keys` if all are free right now (one attempt, no
    /// waiting); `Ok(None)` if any is held, and then none is.
    pub fn try_lock_all<S: AsRef<str>>(&self, keys: &[S]) -> Result<Option<MultiLockGuard>> {
        self.acquire_all(keys, &self.once())
    }

    /// Takes the locks on every one of `keys`, waiting up to `timeout`; `Ok(None)` if some
    /// stayed held.
    pub fn try_lock_all_for<S: AsRef<str>>(
        &self,
        keys: &[S],
        timeout: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire_all(keys, &self.up_to(timeout))
    }

    /// Takes the locks on every one of `keys` with `options` (each lease gets its TTL,
    /// heartbeat, `min_hold`, holder text), waiting as they say; `AcquisitionTimeout` if some
    /// stayed held, `Aborted` if the cancel token fired. `on_lock_lost` runs once, at the first
    /// loss among the keys.
    pub fn lock_all_with<S: AsRef<str>>(
        &self,
        keys: &[S],
        options: &LockOptions,
    ) -> Result<MultiLockGuard> {
        let guard = self.acquire_all(keys, options)?;
        guard.ok_or_else(|| {
            LockError::new(
                ErrorCode::AcquisitionTimeout,
                format!(
                    "some of the {} keys stayed held by other owners (timeout {:?}, {} retries)",
                    keys.len(),
                    options.timeout,
                    options.max_retries
                ),
            )
        })
    }

    fn acquire_all<S: AsRef<str>>(
        &self,
        keys: &[S],
        options: &LockOptions,
    ) -> Result<Option<MultiLockGuard>> {
        // The public edge: every key validated before any I/O.
        let keys = KeySet::new(keys)?;
        let guards = self.acquire_set(&keys, Target::All, options)?;
        Ok(guards.map(MultiLockGuard::new))
    }
}

/// The locks on several keys, held together ([`Locker::lock_all`]). Dropping it releases every
/// one of them; [`release`](MultiLockGuard::release) does the same and reports the outcome.
///
/// Each key is a [`LockGuard`] of its own (lock id, fence, expiry: see
/// [`guards`](MultiLockGuard::guards)), renewed by the `Locker`'s heartbeat. The set is *lost*
/// as soon as any of them is: [`check`](MultiLockGuard::check) fails, the
/// [`lost_token`](MultiLockGuard::lost_token) is cancelled and `on_lock_lost` runs once. The
/// keys still held stay held until the guard is released or dropped, so that no one else
/// enters while the work stops.
#[must_use = "dropping the guard releases every lock at once"]
pub struct MultiLockGuard {
    /// One per key, in the set's order.
    guards: Vec<LockGuard>,
    /// Cancelled when any lease is lost.
    lost: CancelToken,
    /// What relays each lease's loss to `lost` (the leases' tokens hold it weakly).
    _relay: Arc<dyn OnCancel>,
}

impl MultiLockGuard {
    fn new(guards: Vec<LockGuard>) -> Self {
        let lost = CancelToken::new();
        let relay: Arc<dyn OnCancel> = Arc::new(lost.clone());
        for guard in &guards {
            guard.lost_token().notify(Arc::downgrade(&relay));
        }
        MultiLockGuard {
            guards,
            lost,
            _relay: relay,
        }
    }

    /// The keys, NFC-normalised, in the one order every caller takes them in (their UTF-8
    /// bytes).
    pub fn keys(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::key).collect()
    }

    /// Each key's guard, in [`keys`](MultiLockGuard::keys) order: its lock id, fence and
    /// expiry. They are released with the set, not one by one.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing tokens, one per key in [`keys`](MultiLockGuard::keys) order: pass each to
    /// what its key protects.
    pub fn fences(&self) -> Vec<&Fence> {
        self.guards.iter().map(LockGuard::fence).collect()
    }

    /// The fence of `key` (in any form that normalises to one of the keys), if it is one of
    /// them.
    pub fn fence(&self, key: &str) -> Option<&Fence> {
        let key = crate::key::Key::new(key).ok()?;
        self.guards
            .iter()
            .find(|guard| guard.key() == key.as_str())
            .map(LockGuard::fence)
    }

    /// The earliest local deadline among the leases ([`LockGuard::deadline`]): the set is lost
    /// then unless renewals are confirmed first.
    pub fn deadline(&self) -> Instant {
        self.guards
            .iter()
            .map(LockGuard::deadline)
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// Whether any lease is lost. Once true, stays true. Costs no I/O.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// A token cancelled when any lease is lost.
    pub fn lost_token(&self) -> CancelToken {
        self.lost.clone()
    }

    /// `Ok(())` while every lease is held; otherwise the first lost one's `LockLost` error.
    /// Costs no I/O.
    pub fn check(&self) -> Result<()> {
        self.guards.iter().try_for_each(LockGuard::check)
    }

    /// Replaces every lease's TTL with `ttl` from now ([`LockGuard::extend`], each key in
    /// turn); `Ok(true)` if all were still held and extended. Stops at the first failure.
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        let mut all = true;
        for guard in &self.guards {
            all &= guard.extend(ttl)?;
        }
        Ok(all)
    }

    /// Releases every key (each one tried, whatever became of the others). `Ok(true)` if each
    /// was still held and is now released (or kept for its `min_hold`), `Ok(false)` if any had
    /// already expired or been taken over; an error if any release failed, naming every key
    /// that failed (those locks are released in the background, or expire).
    pub fn release(self) -> Result<bool> {
        self.release_each(LockGuard::release)
    }

    /// [`release`](MultiLockGuard::release), ignoring `min_hold` ([`LockGuard::release_without_hold`]).
    pub fn release_without_hold(self) -> Result<bool> {
        self.release_each(LockGuard::release_without_hold)
    }

    fn release_each(self, release: fn(LockGuard) -> Result<bool>) -> Result<bool> {
        let count = self.guards.len();
        let mut all = true;
        let mut failed: Vec<(String, LockError)> = Vec::new();
        for guard in self.guards {
            let key = guard.key().to_owned();
            match release(guard) {
                Ok(released) => all &= released,
                Err(error) => failed.push((key, error)),
            }
        }
        let Some((first_key, first)) = failed.first() else {
            return Ok(all);
        };
        let each: Vec<String> = failed
            .iter()
            .map(|(key, error)| format!("{key}: {}", error.message()))
            .collect();
        Err(LockError::new(
            first.code(),
            format!(
                "{} of the {count} keys could not be released ({})",
                failed.len(),
                each.join("; ")
            ),
        )
        .with_key(first_key.as_str()))
    }

    /// Gives up the guard without releasing: every lease stays in the store until it expires
    /// (its TTL, or `min_hold` if longer), and its renewals stop. Returns the leases, one per
    /// key in [`keys`](MultiLockGuard::keys) order.
    pub fn detach(self) -> Vec<Lease> {
        self.guards.into_iter().map(LockGuard::detach).collect()
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("guards", &self.guards)
            .finish()
    }
}
