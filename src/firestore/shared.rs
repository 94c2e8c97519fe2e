//! Shared holds of a lock (readers, DESIGN §12): each a lease of its own (lock id, fence from
//! the lock's counter, expiry, holder), kept in the key's fence counter document
//! (`readers_doc.rs`) beside the counter and the lock's line.
//!
//! Every acquisition, release and renewal of a reader is a change to the counter document
//! made as a semaphore's permits are (`holders.rs`): one `batchGet` of the lock and counter
//! documents, then one `commit` of the counter document (readers added, renewed or removed,
//! expired ones dropped, the counter raised for an acquisition), conditioned on its
//! `updateTime` as read: every exclusive grant writes the counter document too, so a writer
//! that got in between makes this commit fail, and a reader that got in first makes the
//! writer's fail. The changes one backend makes to a key's readers at the same time share one
//! commit, so its readers never race each other. A refused single attempt writes nothing; a
//! refused waiter writes its place. A commit without a usable answer is read again once, as
//! for permits.

use super::commit::lock_error;
use super::counter_doc::CounterDoc;
use super::driver::FirestoreBackend;
use super::holders::{HoldersDoc, mismatched};
use super::semaphore_change::{LineAsk, PermitAnswer, PermitChange, Slots};
use crate::driver::{
    Acquisition, Extension, Holder, Key, KeyPrefix, LeaseRef, Line, ListLimit, LockId, LockList,
    LockRecord, Outcome, Ttl, extend_by_key,
};
use crate::error::Result;

impl FirestoreBackend {
    /// Takes a shared hold of the lock on `key`; see the module docs.
    pub(super) fn take_shared(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        self.check_skew()?;
        let change = PermitChange::Take {
            slots: Slots::Shared,
            ttl,
            holder: holder.cloned(),
            line: LineAsk::of(line),
            // The same lock id at every attempt: a later attempt recognises an earlier one's
            // commit whose answer was lost.
            lock_id: LockId::generate().into_string(),
            maybe_written: false,
        };
        match self.change_readers(key, change)? {
            Ok(PermitAnswer::Taken(acquisition)) => Ok(acquisition),
            other => Err(mismatched(Some(other))),
        }
    }

    /// Gives back the shared hold `lease` names (its key and lock id).
    pub(super) fn give_back_shared(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let change = PermitChange::GiveBack {
            lock_id: lease.lock_id.as_str().to_owned(),
            maybe_removed_live_until: None,
        };
        match self.change_readers(key, change)? {
            Ok(PermitAnswer::GivenBack(outcome)) => Ok(outcome),
            other => Err(mismatched(Some(other))),
        }
    }

    /// Renews the shared holds of a batch: one commit per key, for all its readers in the
    /// batch (and whatever else this backend changes in its counter document meanwhile). One
    /// answer per lease, in order.
    pub(super) fn renew_shared_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        extend_by_key(leases, |key, items| {
            self.renew_holders(&self.readers_doc(key)?, key, items)
        })
    }

    /// Makes `change` to the readers of the lock on `key` (see `holders.rs`).
    fn change_readers(&self, key: &Key, change: PermitChange) -> Result<Result<PermitAnswer>> {
        let target = self.readers_doc(key)?;
        Ok(self
            .change_holders(&target, key, vec![change])
            .pop()
            .unwrap_or_else(|| Err(mismatched(None))))
    }

    /// Where the readers of the lock on `key` are kept: its fence counter document, written
    /// beside a read of its lock document.
    fn readers_doc(&self, key: &Key) -> Result<HoldersDoc> {
        let [lock_name, counter_name] = self.lock_names(key.as_str())?;
        Ok(HoldersDoc::Readers {
            lock_name,
            counter_name,
        })
    }

    /// The live shared holders of the lock on `key`, in fence order: one read.
    pub(super) fn shared_of(&self, key: &Key) -> Result<Vec<LockRecord>> {
        self.check_skew()?;
        let counter_doc = self
            .read_counter_doc(key)
            .map_err(|e| lock_error(&self.rest, e))?;
        let now = self.now_ms()?;
        Ok(counter_doc
            .readers
            .iter()
            .filter(|reader| reader.is_live(now))
            .map(|reader| reader.record(key.as_str()))
            .collect())
    }

    /// The live shared holders of the locks under `prefix`: the fence counter documents in
    /// the range of their `keyDebug` field, read as `list.rs` reads lock documents (bounded
    /// pages), each turned into its live readers in fence order.
    pub(super) fn shared_under(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        self.list_range(
            &self.fence_collection,
            "keyDebug",
            prefix,
            limit,
            |document, now| {
                let key = document
                    .string("keyDebug")
                    .unwrap_or_else(|| document.name().rsplit('/').next().unwrap_or_default())
                    .to_owned();
                let counter_doc =
                    CounterDoc::parse(document.name().to_owned(), Some(document.clone()), &key)?;
                let readers = counter_doc
                    .readers
                    .iter()
                    .filter(|reader| reader.is_live(now))
                    .map(|reader| reader.record(&key))
                    .collect();
                Ok((key, readers))
            },
        )
    }
}
