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

use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::key::Key;

/// Most keys remembered; past it the map starts over (a reset is then noticed only for keys
/// acquired since).
const MAX_KEYS: usize = 100_000;

#[derive(Default)]
pub(crate) struct FenceWatch {
    highest: Mutex<HashMap<String, Fence>>,
}

impl FenceWatch {
    /// Records `fence` for `key`; `Err(Internal)` when it is not above the highest recorded.
    pub(crate) fn check(&self, key: &Key, fence: Fence) -> Result<()> {
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        match highest.get(key.as_str()) {
            Some(seen) if fence <= *seen => {
                return Err(LockError::internal(format!(
                    "the fence counter of key {key} went backwards: granted fence {fence} after \
                     {seen}; the store lost writes (a restart without persistence, a failover, \
                     a restored backup), so this fence would not protect anything; the lock \
                     was released"
                ))
                .with_key(key.as_str()));
            }
            Some(_) => {}
            None if highest.len() >= MAX_KEYS => highest.clear(),
            None => {}
        }
        highest.insert(key.as_str().to_owned(), fence);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_not_above_the_highest_seen_is_refused() {
        let watch = FenceWatch::default();
        let key = Key::new("k").unwrap();
        let other = Key::new("other").unwrap();
        let fence = |n| Fence::from_counter(n).unwrap();
        watch.check(&key, fence(5)).unwrap();
        watch.check(&key, fence(7)).unwrap();
        watch.check(&other, fence(1)).unwrap();
        for stale in [7, 6, 1] {
            let error = watch.check(&key, fence(stale)).unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::Internal);
            assert_eq!(error.key(), Some("k"));
        }
        watch.check(&key, fence(8)).unwrap();
    }
}
