//! What the threads behind a [`Locker`](crate::Locker) need of it: its store, a way to tell its
//! waiters that a key was released, and the background release of locks nobody holds any
//! more. Holding it keeps the locker's shared state alive.

use std::time::{Duration, Instant};

use crate::driver::{Driver, LeaseKind};
use crate::key::Key;
use crate::lock_id::LockId;
use crate::time::Ttl;

pub(crate) trait Store: Send + Sync {
    fn driver(&self) -> &dyn Driver;

    /// One of this locker's leases on `key` was released: its waiters may try now.
    fn released(&self, key: &Key);

    /// Releases a lock (or a permit) that nobody holds, in the background
    /// ([`orphans`](crate::locker::orphans)).
    fn release_later(&self, unheld: Unheld);
}

/// A lock (or a permit) that nobody holds any more, for the background release.
pub(crate) struct Unheld {
    pub key: Key,
    pub lock_id: LockId,
    pub kind: LeaseKind,
    /// How long the store may keep it: its last TTL.
    pub ttl: Duration,
    pub origin: Origin,
    /// Not released before this (the end of a `min_hold`).
    pub not_before: Option<Instant>,
}

impl Unheld {
    /// One to release from now on.
    pub(crate) fn now(
        key: &Key,
        lock_id: &LockId,
        kind: LeaseKind,
        ttl: Ttl,
        origin: Origin,
    ) -> Unheld {
        Unheld {
            key: key.clone(),
            lock_id: lock_id.clone(),
            kind,
            ttl: ttl.as_duration(),
            origin,
            not_before: None,
        }
    }

    /// Released only once `at` has passed.
    pub(crate) fn not_before(self, at: Option<Instant>) -> Unheld {
        Unheld {
            not_before: at,
            ..self
        }
    }
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
