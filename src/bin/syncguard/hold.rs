//! What `acquire` and `run` hold: the key's lock (exclusively, the default: flock's `-x`), a
//! shared hold of it (`--shared`, flock's `-s`), or one of N permits of its semaphore
//! (`--permits N`). The one place where the commands choose among them, so that everything
//! after (heartbeat, loss, min-hold, release) is the same [`LockGuard`]'s.

use std::time::Duration;

use syncguard::{LockBackend, LockGuard, Locker};

/// The kind of hold a command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The key's lock, alone.
    Exclusive,
    /// A shared hold of the key's lock: beside other shared holders, never beside the lock.
    Shared,
    /// One of this many permits of the key's semaphore.
    Permit(u32),
}

impl Hold {
    /// From the command line's `--shared` and `--permits` (clap keeps them apart).
    pub fn of(shared: bool, permits: Option<u32>) -> Hold {
        match (shared, permits) {
            (_, Some(permits)) => Hold::Permit(permits),
            (true, None) => Hold::Shared,
            (false, None) => Hold::Exclusive,
        }
    }

    /// Takes the hold on `key`, waiting up to `wait`.
    pub fn take(
        self,
        locker: &Locker<Box<dyn LockBackend>>,
        key: &str,
        wait: Duration,
    ) -> syncguard::Result<Option<LockGuard>> {
        match self {
            Hold::Exclusive => locker.try_lock_for(key, wait),
            Hold::Shared => locker.rw_lock(key)?.try_read_for(wait),
            Hold::Permit(permits) => locker.semaphore(key, permits)?.try_acquire_for(wait),
        }
    }

    /// What kept the hold from being taken, for `run`'s note: `(what, "is" | "are")`.
    pub fn what_was_held(self, key: &str) -> (String, &'static str) {
        match self {
            Hold::Exclusive => (format!("the lock on {key:?}"), "is"),
            Hold::Shared => (format!("the lock on {key:?} (a writer)"), "is"),
            Hold::Permit(n) => (
                format!("all {n} permits of the semaphore on {key:?}"),
                "are",
            ),
        }
    }
}
