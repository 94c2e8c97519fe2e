//! Several keys held together (DESIGN §12, "Several keys"): [`Locker::lock_all`] and its
//! `try_` forms, and the [`MultiLockGuard`] that holds every key.
//!
//! All or none: an attempt takes every key or none ([`Request::all`](crate::driver::Request::all)), and a
//! waiting caller holds none of the keys while it waits — so no mix of `lock_all` and `lock`
//! over overlapping keys can deadlock, whatever the order the callers name the keys in. Each
//! key is a lease of its own (its lock id, its fence, its renewals by the one heartbeat, at the
//! same times since they were granted together); the guard is lost as a whole when any of them
//! is lost, and releases them all.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LockOptions;
use super::Locker;
use super::guard::LockGuard;
use crate::cancel::{CancelToken, OnCancel};
use crate::driver::Mode;
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
        let guards = self.acquire_set(&keys, Mode::Exclusive, options)?;
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

    /// The earliest expiry among the leases as the backend last reported them
    /// ([`LockGuard::expires_at_ms`]).
    pub fn expires_at_ms(&self) -> i64 {
        (self.guards.iter())
            .map(LockGuard::expires_at_ms)
            .min()
            .unwrap_or_default()
    }

    /// When the keys' [`min_hold`](crate::LockOptions::min_hold) ends, the earliest of them
    /// ([`LockGuard::min_hold_until_ms`]); `None` without a `min_hold`.
    pub fn min_hold_until_ms(&self) -> Option<i64> {
        (self.guards.iter())
            .map(LockGuard::min_hold_until_ms)
            .min()
            .flatten()
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
        if count == 1 {
            // A set of one fails as its one guard does.
            return match failed.pop() {
                Some((_, error)) => Err(error),
                None => Ok(all),
            };
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

/// One key's guard as a set of one: lost, released and detached as the guard itself is (its
/// own `on_lock_lost`, its own errors), for code that holds one key or several alike.
impl From<LockGuard> for MultiLockGuard {
    fn from(guard: LockGuard) -> Self {
        MultiLockGuard::new(vec![guard])
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("guards", &self.guards)
            .finish()
    }
}

/// Several keys taken one at a time (`driver::acquire_one_by_one`) through an outage between two of
/// them: what was taken and could not be given back is reported in doubt, and a `Locker`
/// releases it in the background.
#[cfg(test)]
mod outage_between_keys {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use crate::backend::LockBackend;
    use crate::driver::*;
    use crate::error::{ErrorCode, LockError, Result};
    use crate::locker::{LockOptions, Locker};
    use crate::memory::MemoryBackend;

    /// The in-memory store without its own set acquisition, with failures injected: the next
    /// acquisition of `failing_key`, and the next `failing_releases` releases.
    #[derive(Default)]
    struct Outage {
        inner: MemoryBackend,
        failing_key: Mutex<Option<String>>,
        failing_releases: Mutex<u32>,
        released: Mutex<Vec<String>>,
    }

    fn unavailable() -> LockError {
        LockError::new(ErrorCode::ServiceUnavailable, "injected by the test")
    }

    impl Driver for Outage {
        /// The in-memory store's, without its own set acquisition: the crate takes sets one
        /// key at a time here.
        fn describe(&self) -> Capabilities {
            Capabilities {
                native_sets: false,
                ..self.inner.describe()
            }
        }
        fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
            let mut failing = self.failing_key.lock().unwrap();
            if request.key().map(Key::as_str) == failing.as_deref() {
                *failing = None;
                return Err(unavailable());
            }
            drop(failing);
            self.inner.try_acquire(request)
        }
        fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
            let mut failing = self.failing_releases.lock().unwrap();
            if *failing > 0 {
                *failing -= 1;
                return Err(unavailable());
            }
            drop(failing);
            self.released
                .lock()
                .unwrap()
                .push(lease.lock_id.as_str().to_owned());
            self.inner.release_lease(lease)
        }

        delegate_driver!(self, &self.inner; extend_leases, key_is_locked, find,
            find_line, leave_line);
    }

    fn outage(failing_key: &str, failing_releases: u32) -> Outage {
        let outage = Outage::default();
        *outage.failing_key.lock().unwrap() = Some(failing_key.to_owned());
        *outage.failing_releases.lock().unwrap() = failing_releases;
        outage
    }

    /// The in-memory store with a bug: it grants `key`'s permit twice in one answer.
    struct Doubling {
        inner: MemoryBackend,
        key: &'static str,
    }

    impl Driver for Doubling {
        fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
            let first = self.inner.try_acquire(request)?;
            if request.key().map(Key::as_str) != Some(self.key) {
                return Ok(first);
            }
            match (first, self.inner.try_acquire(request)?) {
                (Acquisitions::Acquired(mut one), Acquisitions::Acquired(two)) => {
                    one.extend(two);
                    Ok(Acquisitions::Acquired(one))
                }
                (first, _) => Ok(first),
            }
        }

        delegate_driver!(self, &self.inner; describe, release_lease, extend_leases,
            key_is_locked, find, find_line, leave_line);
    }

    /// A key answered with two leases is refused as a driver bug, and every lease taken is
    /// given back on its own key: the keys before it, and both of its leases.
    #[test]
    fn a_key_granted_twice_is_given_back_whole() {
        let store = Doubling {
            inner: MemoryBackend::new(),
            key: "b",
        };
        let keys = KeySet::new(&["a", "b"]).unwrap();
        let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
        let request = Request::all(&keys, ttl).mode(Mode::Permit(Permits::new(3).unwrap()));
        let error = acquire_one_by_one(&store, &request).unwrap_err();
        assert_eq!(error.code(), ErrorCode::Internal);
        for key in ["a", "b"] {
            let held = store
                .inner
                .find(Find::Key(&Key::new(key).unwrap(), LeaseKind::Permit))
                .unwrap();
            assert!(held.is_empty(), "{key}: {held:?}");
        }
    }

    #[test]
    fn what_could_not_be_given_back_is_in_doubt() {
        let keys = KeySet::new(&["a", "b", "c"]).unwrap();
        let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
        let store = outage("c", 1);
        let error = acquire_one_by_one(&store, &Request::all(&keys, ttl)).unwrap_err();
        assert_eq!(error.code(), ErrorCode::ServiceUnavailable);
        let doubts = error.in_doubt_leases();
        assert_eq!(
            doubts.len(),
            1,
            "a could not be given back, b was: {doubts:?}"
        );
        assert_eq!(doubts[0].0, Some("a"));
        let held = store
            .inner
            .find(Find::Key(&Key::new("a").unwrap(), LeaseKind::Lock))
            .unwrap();
        assert_eq!(held[0].lock_id, doubts[0].1);
        assert!(!store.inner.key_is_locked(&Key::new("b").unwrap()).unwrap());

        // Refused with a failed give-back: an error in doubt, not a refusal that hides a lock.
        let store = outage("none", 1);
        let _other = store.inner.acquire("c", Duration::from_secs(60)).unwrap();
        let error = acquire_one_by_one(&store, &Request::all(&keys, ttl)).unwrap_err();
        let doubts: Vec<_> = error.in_doubt_leases().iter().map(|d| d.0).collect();
        assert_eq!(doubts, [Some("a")]);
    }

    #[test]
    fn a_locker_releases_what_an_outage_left_between_keys_and_takes_the_set() {
        let store = Arc::new(outage("b", 1));
        let locker = Locker::new(Arc::clone(&store));
        let options = LockOptions::default()
            .ttl(Duration::from_secs(60))
            .timeout(Duration::from_secs(120));
        let all = locker.lock_all_with(&["a", "b"], &options).unwrap();
        let a = all.guards()[0].lock_id().to_owned();
        // The first `a` was not given back by the attempt: the orphan thread released it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !store.released.lock().unwrap().iter().any(|id| *id != a) {
            assert!(
                Instant::now() < deadline,
                "the lease left in doubt was never released"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(all.release().unwrap());
    }
}

/// A set's loss, told: every token is cancelled before anyone hears of it.
#[cfg(test)]
mod loss_told {
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    use crate::backend::LockBackend as _;
    use crate::cancel::CancelToken;
    use crate::locker::{Heartbeat, LockOptions, Locker};
    use crate::memory::MemoryBackend;
    use crate::observe::{LockObserver, Lost};

    /// On each loss it is told of, reads whether a lease's lost token and its set's are
    /// cancelled.
    #[derive(Default)]
    struct TokensWhenTold {
        tokens: OnceLock<[CancelToken; 2]>,
        seen: Mutex<Vec<[bool; 2]>>,
    }

    impl LockObserver for TokensWhenTold {
        fn lost(&self, _: &Lost<'_>) {
            if let Some(tokens) = self.tokens.get() {
                let cancelled = tokens.each_ref().map(CancelToken::is_cancelled);
                let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                seen.push(cancelled);
            }
        }
    }

    /// Whoever is told of a loss, an observer first, finds the lease's lost token and its set's
    /// already cancelled: no one sees a lease lost while work handed its token runs on.
    #[test]
    fn a_loss_is_told_after_its_tokens_are_cancelled() {
        let observer = Arc::new(TokensWhenTold::default());
        let locker = Locker::new(MemoryBackend::new()).with_observer(observer.clone());
        let options = LockOptions::default()
            .ttl(Duration::from_secs(30))
            .heartbeat(Heartbeat::Every(Duration::from_millis(20)));
        let set = locker.lock_all_with(&["a", "b"], &options).unwrap();
        let taken = &set.guards()[1];
        let tokens = [taken.lost_token(), set.lost_token()];
        assert!(observer.tokens.set(tokens).is_ok());
        assert!(locker.backend().release(taken.lock_id()).unwrap());
        let give_up = Instant::now() + Duration::from_secs(60);
        let told = loop {
            let seen = observer.seen.lock().unwrap().clone();
            if !seen.is_empty() {
                break seen;
            }
            assert!(Instant::now() < give_up, "the loss was never told");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(told, [[true, true]]);
        assert!(!set.release().unwrap());
    }
}
