//! The highest fence a [`Locker`](crate::Locker) has been granted per key, to notice a fence
//! counter that went backwards.
//!
//! Fence counters are never deleted and never expire, so a fence at or below one this
//! locker was already granted for the same key means the store lost writes: a Redis server
//! restarted without persistence (or from an old snapshot), a failover to a replica that had
//! not received the last increments, a restored backup. Such a fence no longer protects
//! anything — the resource may already have accepted a larger one — so the acquisition is
//! refused. What one process remembers cannot catch a reset it did not see; the store's own
//! durability settings are what keep fences (docs/reliability.md).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::driver::LeaseKind;
use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::key::Key;

/// Most keys remembered; past it the map starts over (a reset is then noticed only for keys
/// acquired since).
const MAX_KEYS: usize = 100_000;

#[derive(Default)]
pub(crate) struct FenceWatch {
    /// A key's lock and its semaphore have fence sequences of their own.
    highest: Mutex<HashMap<(LeaseKind, String), Fence>>,
}

impl FenceWatch {
    /// The highest fence recorded for the lock (or the semaphore: `kind`) on `key`: read
    /// before an acquisition is sent, and given to [`check`](FenceWatch::check) with its grant.
    pub(crate) fn highest(&self, key: &Key, kind: LeaseKind) -> Option<Fence> {
        let highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        highest.get(&(kind, key.as_str().to_owned())).copied()
    }

    /// Records `fence`, granted for the lock (or a permit of the semaphore: `kind`) on `key`;
    /// `Err(Internal)` when it is not above `seen`, the highest recorded before the acquisition
    /// was sent. Not the highest recorded now: a semaphore's permits are granted concurrently,
    /// and a smaller fence may be recorded after a larger one that was granted later.
    pub(crate) fn check(
        &self,
        key: &Key,
        kind: LeaseKind,
        fence: Fence,
        seen: Option<Fence>,
    ) -> Result<()> {
        if let Some(seen) = seen.filter(|seen| fence <= *seen) {
            return Err(LockError::internal(format!(
                "the fence counter of key {key} went backwards: granted fence {fence} after \
                 {seen}; the store lost writes (a restart without persistence, a failover, \
                 a restored backup), so this fence would not protect anything; the lock \
                 was released"
            ))
            .with_key(key.as_str()));
        }
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        if highest.len() >= MAX_KEYS {
            highest.clear();
        }
        let recorded = highest
            .entry((kind, key.as_str().to_owned()))
            .or_insert(fence);
        *recorded = (*recorded).max(fence);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_not_above_the_highest_seen_before_is_refused() {
        let watch = FenceWatch::default();
        let key = Key::new("k").unwrap();
        let other = Key::new("other").unwrap();
        let fence = |n| Fence::from_counter(n).unwrap();
        let grant = |key: &Key, kind, n| {
            let seen = watch.highest(key, kind);
            watch.check(key, kind, fence(n), seen)
        };
        grant(&key, LeaseKind::Lock, 5).unwrap();
        grant(&key, LeaseKind::Lock, 7).unwrap();
        grant(&other, LeaseKind::Lock, 1).unwrap();
        for stale in [7, 6, 1] {
            let error = grant(&key, LeaseKind::Lock, stale).unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::Internal);
            assert_eq!(error.key(), Some("k"));
        }
        grant(&key, LeaseKind::Lock, 8).unwrap();
        // The semaphore on the key counts on its own.
        grant(&key, LeaseKind::Permit, 1).unwrap();
        // Two permits sent at once, granted 3 and 2, recorded 3 first: both are fine.
        let seen = watch.highest(&key, LeaseKind::Permit);
        watch
            .check(&key, LeaseKind::Permit, fence(3), seen)
            .unwrap();
        watch
            .check(&key, LeaseKind::Permit, fence(2), seen)
            .unwrap();
        assert_eq!(watch.highest(&key, LeaseKind::Permit), Some(fence(3)));
    }
}
