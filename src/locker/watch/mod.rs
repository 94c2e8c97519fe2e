//! Watching a key without holding it: [`Locker::watch`] answers a [`Watch`], a blocking
//! iterator of the key's [`KeyState`]s.
//!
//! A watch reads the key through [`Driver::find`] — nothing else: it takes no lease and no
//! place in line — when it starts, whenever a release of the key is heard (the waiters'
//! machinery, [`wake`](super::wake): Redis pub/sub, PostgreSQL `LISTEN`, the in-memory
//! store's own list), at the earliest seen expiry plus the liveness tolerance (so an expiry
//! is reported though nobody announces it), and at least every [`WATCH_POLL_INTERVAL`]. The
//! poll is what sees acquisitions (no store announces them), and releases where no
//! notification comes: through PgBouncer, on Firestore, over a dropped connection.
//!
//! Each read is compared with the one before, and a change is reported: intermediate states
//! between two reads merge, but the last state read is always reported, so the latest state is
//! never missed.

mod state;

pub use self::state::{BreakInfo, KeyState};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::state::Seen;
use super::Locker;
use super::retry::{Backoff, Jitter, retry_delay_ms};
use super::store::Store;
use super::wake::Waiting;
use crate::cancel::CancelToken;
use crate::driver::{Driver, Find, LeaseKind, LockRecord};
use crate::error::{ErrorCode, LockError, Result};
use crate::key::Key;
use crate::time::{Clock as _, SystemClock, TIME_TOLERANCE_MS};

/// The longest a [`Watch`] goes without reading its key: the bound on how late it reports an
/// acquisition on every store, and a release on a store that does not announce releases
/// (PostgreSQL through PgBouncer in transaction mode, Firestore) or whose announcement was
/// lost. One second, the liveness tolerance ([`TIME_TOLERANCE_MS`]): a state that old is
/// within what every client already allows for, for one small read a second per watch.
pub const WATCH_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The first wait after a failed read; it doubles with each failure in a row, up to
/// [`WATCH_POLL_INTERVAL`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(50);

impl<B: Driver + 'static> Locker<B> {
    /// Follows the state of the lock on `key` — its exclusive holder, or its shared holders —
    /// without holding it or standing in its line: see [`Watch`]. `InvalidArgument` for a bad
    /// key, before any I/O.
    ///
    /// ```
    /// use syncguard::{KeyState, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let mut watch = locker.watch("deploy")?;
    /// assert_eq!(watch.next().transpose()?, Some(KeyState::Free)); // the state now
    /// let guard = locker.lock("deploy")?;
    /// let Some(KeyState::Held { holders }) = watch.next().transpose()? else { panic!() };
    /// assert_eq!(holders[0].fence, *guard.fence());
    /// drop(guard);
    /// assert_eq!(watch.next().transpose()?, Some(KeyState::Released));
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn watch(&self, key: &str) -> Result<Watch> {
        self.watch_as(key, LeaseKind::Lock)
    }

    /// Follows the holders of `kind` on `key`: [`LeaseKind::Permit`] for the permits of its
    /// semaphore, [`LeaseKind::Shared`] for its shared holders only, [`LeaseKind::Lock`] as
    /// [`watch`](Locker::watch). `InvalidArgument` for a bad key, or a kind the store does not
    /// keep, before any I/O.
    pub fn watch_as(&self, key: &str, kind: LeaseKind) -> Result<Watch> {
        let key = Key::new(key)?;
        let capabilities = self.shared.backend.describe();
        let kept = match kind {
            LeaseKind::Lock => true,
            LeaseKind::Permit => capabilities.semaphores,
            LeaseKind::Shared => capabilities.shared_mode,
        };
        if !kept {
            return Err(LockError::invalid_argument(format!(
                "the {} backend keeps no {kind:?} leases to watch",
                capabilities.backend
            )));
        }
        let waiting = self.shared.wakeups.enter(std::slice::from_ref(&key));
        let store: Arc<dyn Store> = self.shared.clone();
        waiting.listen(store.driver());
        Ok(Watch {
            with_shared: kind == LeaseKind::Lock && capabilities.shared_mode,
            store,
            key,
            kind,
            waiting,
            cancel: None,
            seen: Seen::default(),
            next_read: None,
            heard_at_read: 0,
            heard_at_last_state: None,
            failures: 0,
        })
    }

    /// Waits until nothing holds the lock on `key` (as [`watch`](Locker::watch) sees it),
    /// at most `timeout`: `true` once it is free (at once if it is now), `false` at the
    /// timeout. Takes nothing: another may take the key before the caller does.
    pub fn wait_until_free(&self, key: &str, timeout: Duration) -> Result<bool> {
        self.watch(key)?.wait_until_free(timeout)
    }
}

/// A key's states, one [`KeyState`] per change, for as long as it is followed: a blocking
/// iterator ([`Locker::watch`], [`Locker::watch_as`]). `Send`; dropping it stops it.
///
/// The first item is the state now. Then each change is reported when a read sees it: a
/// release at once where the store announces releases (Redis, PostgreSQL without a pooler,
/// memory), within [`WATCH_POLL_INTERVAL`] otherwise and for every acquisition; an expiry
/// [`TIME_TOLERANCE_MS`] after the holder's expiry. Changes between two reads merge (a holder
/// that came and went unseen is not reported), but the last state read is always reported:
/// the latest state is never missed, and a key that ends free is reported free.
///
/// A read that fails for a transient reason (`ServiceUnavailable`, `NetworkTimeout`,
/// `RateLimited`: a store restarting or failing over) is tried again, with backoff up to
/// [`WATCH_POLL_INTERVAL`], without an item (a debug log line says so); the watch then reports
/// what it finds. Any other failure is an `Err` item, and the watch reads again a poll later.
///
/// `next` blocks until there is a change; [`next_timeout`](Watch::next_timeout) waits at most
/// a while, and [`with_cancel`](Watch::with_cancel) ends the iteration from another thread.
pub struct Watch {
    store: Arc<dyn Store>,
    key: Key,
    kind: LeaseKind,
    /// A lock watch reads the shared holders too, when the lock has none.
    with_shared: bool,
    /// Registered with the locker's waiters: the count of releases heard for the key.
    waiting: Waiting,
    cancel: Option<CancelToken>,
    seen: Seen,
    /// When to read next; `None`: now.
    next_read: Option<Instant>,
    /// Releases heard before the last read: one heard after it wakes the watch.
    heard_at_read: u64,
    /// Releases heard before the read that last reported a state.
    heard_at_last_state: Option<u64>,
    /// Failed reads in a row.
    failures: u32,
}

impl Watch {
    /// Ends the iteration when `cancel` is cancelled: [`next`](Iterator::next) answers `None`
    /// then, at once even while it waits.
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// The key watched (NFC-normalised).
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// The holders watched: the lock's, a semaphore's permits, or the shared holders.
    pub fn kind(&self) -> LeaseKind {
        self.kind
    }

    /// The next state, waiting at most `timeout` for a change: `None` when none came by then
    /// (or the watch was cancelled).
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<KeyState>> {
        self.next_by(Instant::now().checked_add(timeout))
    }

    /// Waits until nothing holds the key, at most `timeout`: `true` once it is free (at once if
    /// a fresh read finds it free), `false` at the timeout. Consumes the states on the way.
    /// `Aborted` when the watch is cancelled.
    pub fn wait_until_free(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now().checked_add(timeout);
        if self.seen.is_free() {
            // Free when last read: confirmed by a read now rather than trusted.
            match self.read() {
                Some(Err(error)) => return Err(error),
                Some(Ok(_)) | None if self.failures == 0 && self.seen.is_free() => {
                    return Ok(true);
                }
                _ => {}
            }
        }
        loop {
            match self.next_by(deadline) {
                Some(Ok(state)) if state.is_free() => return Ok(true),
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error),
                None if self.is_cancelled() => {
                    return Err(LockError::new(
                        ErrorCode::Aborted,
                        "the wait for the key to be free was cancelled",
                    )
                    .with_key(self.key.as_str()));
                }
                None => return Ok(false),
            }
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// The next change, or `None` once `deadline` has passed or the watch is cancelled.
    fn next_by(&mut self, deadline: Option<Instant>) -> Option<Result<KeyState>> {
        loop {
            if self.is_cancelled() {
                return None;
            }
            let now = Instant::now();
            match self.next_read {
                Some(at) if at > now => {
                    let until = deadline.map_or(at, |deadline| deadline.min(at));
                    if until <= now {
                        return None;
                    }
                    self.waiting
                        .sleep(self.heard_at_read, 1, until - now, self.cancel.as_ref());
                    if self.waiting.heard() != self.heard_at_read {
                        self.next_read = None;
                    }
                }
                _ => {
                    if let Some(reported) = self.read() {
                        return Some(reported);
                    }
                }
            }
        }
    }

    /// One read of the key, and when to read next: the state to report when it changed, an
    /// error that is not transient, or `None`.
    fn read(&mut self) -> Option<Result<KeyState>> {
        let heard = self.waiting.heard();
        self.heard_at_read = heard;
        let found = match self.read_holders() {
            Ok(found) => found,
            Err(error) => {
                self.failures = self.failures.saturating_add(1);
                if !error.code().is_transient() {
                    self.next_read = Instant::now().checked_add(WATCH_POLL_INTERVAL);
                    return Some(Err(error));
                }
                let delay = retry_delay(self.failures);
                log::debug!(
                    "syncguard: a watch's read failed ({error}); reading again in {delay:?}"
                );
                self.next_read = Instant::now().checked_add(delay);
                return None;
            }
        };
        self.failures = 0;
        let now_ms = SystemClock.now_ms();
        let released_heard = self.heard_at_last_state.is_some_and(|at| at != heard);
        let state = self.seen.read(found, now_ms, released_heard);
        if state.is_some() {
            self.heard_at_last_state = Some(heard);
        }
        self.next_read = Instant::now().checked_add(self.next_check_in(now_ms));
        state.map(Ok)
    }

    /// The key's live holders watched. A lock's shared holders are read when it has no
    /// exclusive holder: as a shared and an exclusive holder never overlap, two reads that
    /// both find nothing mean the key was free at some moment between them.
    fn read_holders(&self) -> Result<Vec<LockRecord>> {
        let driver = self.store.driver();
        let found = driver.find(Find::Key(&self.key, self.kind))?;
        if !found.is_empty() || !self.with_shared {
            return Ok(found);
        }
        driver.find(Find::Key(&self.key, LeaseKind::Shared))
    }

    /// How long until the next read: the poll interval, or less when a holder seen expires
    /// (and leaves the store's tolerance) sooner. An expiry already past on the client clock is
    /// left to the poll (a store clock behind the client's keeps it longer).
    fn next_check_in(&self, now_ms: i64) -> Duration {
        self.seen
            .earliest_expiry_ms()
            .map(|expiry| expiry.saturating_add(TIME_TOLERANCE_MS) - now_ms)
            .and_then(|left| u64::try_from(left).ok())
            .filter(|left| *left > 0)
            .map_or(WATCH_POLL_INTERVAL, |left| {
                Duration::from_millis(left).min(WATCH_POLL_INTERVAL)
            })
    }
}

/// The wait after `failures` failed reads in a row.
fn retry_delay(failures: u32) -> Duration {
    let delay_ms = retry_delay_ms(
        failures,
        FIRST_RETRY_DELAY,
        WATCH_POLL_INTERVAL,
        Backoff::Exponential,
        Jitter::None,
        0.0,
    );
    Duration::try_from_secs_f64(delay_ms / 1000.0).unwrap_or(WATCH_POLL_INTERVAL)
}

impl Iterator for Watch {
    type Item = Result<KeyState>;

    /// The next state: the state now the first time, then the next change, waiting as long as
    /// it takes. `None` only once the watch is cancelled ([`with_cancel`](Watch::with_cancel)).
    fn next(&mut self) -> Option<Result<KeyState>> {
        self.next_by(None)
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("key_hash", &crate::hash::hash_key(self.key.as_str()))
            .field("kind", &self.kind)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_reads_back_off_up_to_the_poll_interval() {
        assert_eq!(retry_delay(1), FIRST_RETRY_DELAY);
        assert_eq!(retry_delay(2), FIRST_RETRY_DELAY * 2);
        assert_eq!(retry_delay(40), WATCH_POLL_INTERVAL);
    }

    /// A break is reported as `Broken`, with who broke the key, why, and until when; the end
    /// of its delay as `Expired`. (On memory: the other stores break through the same seam.)
    #[test]
    fn a_break_and_the_end_of_its_delay_are_reported() {
        use crate::locker::breaking::BreakOptions;

        let locker = Locker::new(crate::MemoryBackend::new());
        let guard = locker.lock("broken").unwrap();
        let mut watch = locker.watch("broken").unwrap();
        let patience = Duration::from_secs(10);
        let first = watch.next_timeout(patience).unwrap().unwrap();
        assert!(matches!(first, KeyState::Held { .. }));
        let options = BreakOptions::new()
            .by("ops:1 syncguard")
            .reason("hung")
            .delay(Duration::from_millis(100));
        let broken = locker.break_key("broken", &options).unwrap();
        let KeyState::Broken(info) = watch.next_timeout(patience).unwrap().unwrap() else {
            panic!("the break is not reported as one");
        };
        assert_eq!(
            (info.by.as_str(), info.reason.as_deref()),
            ("ops:1 syncguard", Some("hung"))
        );
        assert_eq!(info.fence, broken.markers[0].fence);
        assert!(info.fence > *guard.fence());
        assert_eq!(info.until_ms, broken.markers[0].expires_at_ms);
        assert_eq!(
            watch.next_timeout(patience).unwrap().unwrap(),
            KeyState::Expired,
            "the end of the break's delay"
        );
        drop(guard);
    }

    #[test]
    fn a_watch_is_send() {
        fn send<T: Send>() {}
        send::<Watch>();
    }
}
