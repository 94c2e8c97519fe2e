//! What the threads behind a [`Locker`](crate::Locker) need of it: its store, a way to tell its
//! waiters that a key was released, and the background release of locks nobody holds any
//! more. Holding it keeps the locker's shared state alive.

use std::time::Duration;

use crate::driver::{Driver, LeaseKind};
use crate::key::Key;
use crate::lock_id::LockId;

pub(crate) trait Store: Send + Sync {
    fn driver(&self) -> &dyn Driver;

    /// One of this locker's leases on `key` was released: its waiters may try now.
    fn released(&self, key: &Key);

    /// Releases `lock_id`, a lock (or a permit: `kind`) on `key` for `ttl` that nobody holds,
    /// in the background ([`orphans`](crate::locker::orphans)).
    fn release_later(
        &self,
        key: &Key,
        lock_id: &LockId,
        kind: LeaseKind,
        ttl: Duration,
        origin: Origin,
    );
}

/// Why a lock is released in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// An acquisition whose answer was lost: the store may still apply it.
    InDoubt,
    /// A guard's lease ran out before a renewal was confirmed; one may still have been
    /// applied.
    Lapsed,
    /// A guard's release failed.
    FailedRelease,
}
