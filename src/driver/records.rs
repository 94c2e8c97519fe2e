//! Stored leases as a store reads them back, raw ([`LockRecord`]), how one is looked up
//! ([`Find`]), and how a store builds a listing of them.

use std::fmt;

use super::lease::LeaseKind;
use crate::fence::Fence;
use crate::hash::hash_key;
use crate::key::Key;
use crate::listing::{Coverage, ListLimit, LockList};
use crate::lock_id::LockId;

/// What [`Driver::find`](crate::driver::Driver::find) looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Find<'a> {
    /// The live leases of a kind on a key: its lock (none or one), the permits of its
    /// semaphore (at most [`MAX_PERMITS`](crate::driver::MAX_PERMITS)) or its shared holders,
    /// in fence order.
    Key(&'a Key, LeaseKind),
    /// The live lock stored under a lock id (none or one).
    LockId(&'a LockId),
}

/// A stored lease, raw: what [`Driver::find`](crate::driver::Driver::find) answers. Sanitised views
/// ([`LockInfo`](crate::LockInfo)) are made from it in one place.
#[derive(Clone, PartialEq, Eq)]
pub struct LockRecord {
    /// The (normalised) user key.
    pub key: String,
    /// The lock id.
    pub lock_id: String,
    /// Expiry, Unix ms of the store's time authority.
    pub expires_at_ms: i64,
    /// Acquisition time, Unix ms of the store's time authority.
    pub acquired_at_ms: i64,
    /// The fencing token of the acquisition.
    pub fence: Fence,
    /// Who holds it, as described when it was acquired ([`Holder`](crate::driver::Holder)); `None` when no
    /// description was given or the store keeps none (a lock the TypeScript SyncGuard took).
    pub holder: Option<String>,
}

impl fmt::Debug for LockRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRecord")
            .field("key", &self.key)
            .field("lock_id_hash", &hash_key(&self.lock_id))
            .field("expires_at_ms", &self.expires_at_ms)
            .field("acquired_at_ms", &self.acquired_at_ms)
            .field("fence", &self.fence)
            .field("holder", &self.holder)
            .finish()
    }
}

/// How a driver builds a listing's answer: here, with the records it is made of, so the
/// listing types need nothing from the driver.
impl LockList<LockRecord> {
    /// The list made of `found` — live records under the prefix, in any order, each lock (or
    /// permit) at most once — for a store that reads candidates unordered: sorted by key (then
    /// fence: a semaphore's permits share its key) and cut at `limit`. `exhausted` says whether
    /// the store read every candidate (else its work bound stopped it).
    pub fn from_unsorted(mut found: Vec<LockRecord>, limit: ListLimit, exhausted: bool) -> Self {
        found.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.fence.cmp(&b.fence)));
        let mut list = LockList::from_sorted(found, limit);
        if !exhausted {
            list.coverage = Coverage::WorkBoundReached;
        }
        list
    }

    /// The list made of `found` — live records under the prefix, sorted by key (then fence) —
    /// read by a store in key order up to one more than `limit`: more than `limit` means the
    /// limit was reached.
    pub fn from_sorted(mut found: Vec<LockRecord>, limit: ListLimit) -> Self {
        let coverage = if found.len() > limit.get() {
            Coverage::LimitReached
        } else {
            Coverage::Complete
        };
        found.truncate(limit.get());
        LockList {
            locks: found,
            coverage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock_id::generate_lock_id;

    fn records(keys: &[&str]) -> Vec<LockRecord> {
        keys.iter()
            .map(|key| LockRecord {
                key: (*key).to_owned(),
                lock_id: generate_lock_id(),
                expires_at_ms: 2,
                acquired_at_ms: 1,
                fence: Fence::from_counter(1).unwrap(),
                holder: None,
            })
            .collect()
    }

    fn keys(list: &LockList<LockRecord>) -> Vec<&str> {
        list.locks
            .iter()
            .map(|record| record.key.as_str())
            .collect()
    }

    #[test]
    fn unsorted_records_are_sorted_cut_and_covered() {
        let two = ListLimit::new(2).unwrap();
        let list = LockList::from_unsorted(records(&["c", "a", "b"]), two, true);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::LimitReached)
        );
        let list = LockList::from_unsorted(records(&["b", "a"]), two, true);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::Complete)
        );
        let list = LockList::from_unsorted(records(&["c", "a", "b"]), two, false);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::WorkBoundReached)
        );
        let list = LockList::from_sorted(records(&["a", "b", "c"]), two);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::LimitReached)
        );
    }
}
