//! Waking waiters when the lock they wait for is released, instead of at their next poll.
//!
//! Every `Locker` has one [`Wakeups`]: a count of the releases heard per watched key, and one
//! condition variable its waiters sleep on. Releases are heard two ways: this `Locker`'s own
//! guards announce theirs, and the driver's [`ReleaseWatch`] (Redis pub/sub, PostgreSQL
//! `LISTEN`, the in-memory store's own list) reports releases from anywhere. A waiter reads the
//! count before each attempt and sleeps until it moves, its poll delay passes, or its
//! [`CancelToken`] fires — so a release between the attempt and the sleep is not missed.
//! Polling stays as the fallback: not every release is announced (a lock that simply expires,
//! a TypeScript SyncGuard peer).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::cancel::{CancelToken, OnCancel};
use crate::driver::{Driver, OnRelease, ReleaseWatch};
use crate::key::Key;

/// The waiters of one `Locker`.
#[derive(Default)]
pub(crate) struct Wakeups {
    state: Mutex<HashMap<String, Watched>>,
    wakeup: Condvar,
    /// The driver's watch, started when the first waiter waits; `None` inside when the store
    /// cannot tell.
    watch: OnceLock<Option<Box<dyn ReleaseWatch>>>,
}

#[derive(Default)]
struct Watched {
    /// Releases heard so far.
    heard: u64,
    /// Waiters of this key right now.
    waiters: usize,
    /// Of those, the ones that asked the driver's watch for its releases.
    listening: usize,
}

impl Wakeups {
    fn state(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A release of `key` was heard: wakes its waiters.
    pub(crate) fn released(&self, key: &str) {
        let mut state = self.state();
        if let Some(watched) = state.get_mut(key) {
            watched.heard += 1;
            drop(state);
            self.wakeup.notify_all();
        }
    }

    /// Registers a waiter of `keys` (one, or several taken together) until the returned
    /// [`Waiting`] is dropped: from now on the releases heard for them are counted, also those
    /// that happen during its first attempt. Costs a map entry per key, no I/O.
    pub(crate) fn enter(self: &Arc<Self>, keys: &[Key]) -> Waiting {
        let mut state = self.state();
        for key in keys {
            state.entry(key.as_str().to_owned()).or_default().waiters += 1;
        }
        drop(state);
        Waiting {
            wakeups: Arc::clone(self),
            keys: keys.to_vec(),
            listening: std::cell::Cell::new(false),
        }
    }

    /// The driver's watch, started on first use (the first time a waiter of this `Locker`
    /// actually waits).
    fn watch(self: &Arc<Self>, driver: &dyn Driver) -> Option<&dyn ReleaseWatch> {
        self.watch
            .get_or_init(|| {
                let wakeups: Weak<Wakeups> = Arc::downgrade(self);
                let on_release: OnRelease = Arc::new(move |key: &str| {
                    if let Some(wakeups) = wakeups.upgrade() {
                        wakeups.released(key);
                    }
                });
                match driver.watch_releases(on_release) {
                    Ok(watch) => watch,
                    Err(error) => {
                        log::info!(
                            "syncguard: cannot hear of releases ({error}); waiters poll instead"
                        );
                        None
                    }
                }
            })
            .as_deref()
    }
}

impl OnCancel for Wakeups {
    fn cancelled(&self) {
        // Take the lock so that a waiter between its check and its sleep cannot miss this.
        drop(self.state());
        self.wakeup.notify_all();
    }
}

/// One waiter of one key (or of several taken together), registered with its `Locker`'s
/// [`Wakeups`].
pub(crate) struct Waiting {
    wakeups: Arc<Wakeups>,
    keys: Vec<Key>,
    /// Whether this waiter asked the driver's watch for its keys' releases.
    listening: std::cell::Cell<bool>,
}

impl Waiting {
    /// Releases of the keys heard so far: read before an attempt, passed to [`sleep`].
    ///
    /// [`sleep`]: Waiting::sleep
    pub(crate) fn heard(&self) -> u64 {
        Self::heard_in(&self.wakeups.state(), &self.keys)
    }

    /// The releases heard of any of `keys` (a sum: any release of one of them moves it).
    fn heard_in(state: &HashMap<String, Watched>, keys: &[Key]) -> u64 {
        keys.iter()
            .filter_map(|key| state.get(key.as_str()))
            .fold(0, |sum, watched| sum.wrapping_add(watched.heard))
    }

    /// Makes sure releases of the keys in other processes are heard too: starts the driver's
    /// watch if this `Locker` has none yet, and asks it for each key no waiter listens for yet.
    pub(crate) fn listen(&self, driver: &dyn Driver) {
        if self.listening.replace(true) {
            return;
        }
        let first: Vec<&Key> = {
            let mut state = self.wakeups.state();
            self.keys
                .iter()
                .filter(|key| {
                    let watched = state.entry(key.as_str().to_owned()).or_default();
                    watched.listening += 1;
                    watched.listening == 1
                })
                .collect()
        };
        if first.is_empty() {
            return;
        }
        if let Some(watch) = self.wakeups.watch(driver) {
            for key in first {
                watch.watch(key);
            }
        }
    }

    /// Whether releases of the keys in other processes are heard now: the driver's watch runs
    /// (started by [`listen`](Waiting::listen)) and its channel is up. Otherwise only this
    /// `Locker`'s own releases are.
    pub(crate) fn announced(&self) -> bool {
        matches!(self.wakeups.watch.get(), Some(Some(watch)) if watch.hearing())
    }

    /// Sleeps until `releases` releases (at least one) are heard after `heard`, `delay`
    /// passes, or `cancel` fires.
    pub(crate) fn sleep(
        &self,
        heard: u64,
        releases: u64,
        delay: Duration,
        cancel: Option<&CancelToken>,
    ) {
        if let Some(cancel) = cancel {
            let wakeups: Arc<dyn OnCancel> = self.wakeups.clone();
            cancel.notify(Arc::downgrade(&wakeups));
        }
        let until = Instant::now().checked_add(delay);
        let mut state = self.wakeups.state();
        loop {
            let heard_now = Self::heard_in(&state, &self.keys);
            if heard_now.wrapping_sub(heard) >= releases.max(1)
                || cancel.is_some_and(CancelToken::is_cancelled)
            {
                return;
            }
            let left = match until {
                Some(until) => until.saturating_duration_since(Instant::now()),
                None => delay,
            };
            if left.is_zero() {
                return;
            }
            state = self
                .wakeups
                .wakeup
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let unheard: Vec<&Key> = {
            let mut state = self.wakeups.state();
            self.keys
                .iter()
                .filter(|key| {
                    let Some(watched) = state.get_mut(key.as_str()) else {
                        return false;
                    };
                    watched.waiters -= 1;
                    let last_listener = if self.listening.get() {
                        watched.listening -= 1;
                        watched.listening == 0
                    } else {
                        false
                    };
                    if watched.waiters == 0 {
                        state.remove(key.as_str());
                    }
                    last_listener
                })
                .collect()
        };
        if unheard.is_empty() {
            return;
        }
        if let Some(Some(watch)) = self.wakeups.watch.get() {
            for key in unheard {
                watch.unwatch(key);
            }
        }
    }
}
