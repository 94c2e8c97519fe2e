//! What `acquire` and `run` hold: the key's lock (exclusively, the default: flock's `-x`), a
//! shared hold of it (`--shared`, flock's `-s`), or one of N permits of its semaphore
//! (`--permits N`). The one place where the commands choose among them, so that everything
//! after (heartbeat, loss, min-hold, release) is the same [`syncguard::LockGuard`]'s — or, for
//! several keys (exclusive only), the same [`Held`] set's.

use std::time::Duration;

use syncguard::{LockBackend, LockError, Locker};

use crate::held::Held;
use crate::keys::Keys;

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

    /// Takes the hold on `keys`, waiting up to `wait` (with the locker's options: the same
    /// for one key and for several, which `Locker::try_lock_all_for` takes all or none).
    pub fn take(
        self,
        locker: &Locker<Box<dyn LockBackend>>,
        keys: &Keys,
        wait: Duration,
    ) -> syncguard::Result<Option<Held>> {
        let key = match (keys, self) {
            (Keys::One(key), _) => key,
            (Keys::Several(keys), Hold::Exclusive) => {
                return locker.try_lock_all_for(keys, wait);
            }
            // `Keys::of` refuses these before any I/O; kept an error rather than a panic.
            (Keys::Several(_), Hold::Shared | Hold::Permit(_)) => {
                return Err(LockError::invalid_argument(
                    "--key may repeat only for exclusive locks",
                ));
            }
        };
        let guard = match self {
            Hold::Exclusive => locker.try_lock_for(key, wait),
            Hold::Shared => locker.rw_lock(key)?.try_read_for(wait),
            Hold::Permit(permits) => locker.semaphore(key, permits)?.try_acquire_for(wait),
        }?;
        Ok(guard.map(Held::from))
    }

    /// What kept the hold from being taken, for `run`'s note: `(what, "is" | "are")`.
    pub fn what_was_held(self, keys: &Keys) -> (String, &'static str) {
        let key = match keys {
            Keys::One(key) => key,
            Keys::Several(_) => {
                return (format!("some of the locks on {}", keys.quoted()), "are");
            }
        };
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
