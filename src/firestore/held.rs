//! The leases kept many to a document — a semaphore's permits (`semaphore.rs`) and a lock's
//! shared holders — taken, given back, renewed, found and listed, each written once with the
//! kind ([`LeaseKind`]) as a parameter: the two differ only in the document they live in
//! ([`HoldersDoc`]) and how many may hold at once ([`Slots`]); every change to either is made
//! by `holders.rs`.
//!
//! Shared holds of a lock (readers, DESIGN §12): each a lease of its own (lock id, fence from
//! the lock's counter, expiry, holder), kept in the key's fence counter document
//! (`readers_doc.rs`) beside the counter and the lock's line. Every acquisition, release and
//! renewal of a reader is a change to the counter document made as a semaphore's permits are
//! (`holders.rs`): one `batchGet` of the lock and counter documents, then one `commit` of the
//! counter document (readers added, renewed or removed, expired ones dropped, the counter
//! raised for an acquisition), conditioned on its `updateTime` as read: every exclusive grant
//! writes the counter document too, so a writer that got in between makes this commit fail,
//! and a reader that got in first makes the writer's fail. The changes one backend makes to a
//! key's readers at the same time share one commit, so its readers never race each other. A
//! refused single attempt writes nothing; a refused waiter writes its place (and learns how
//! many places stand ahead of it). A commit without a usable answer is read again once, as
//! for permits.

use super::commit::lock_error;
use super::counter_doc::CounterDoc;
use super::driver::FirestoreBackend;
use super::holders::HoldersDoc;
use super::semaphore_change::mismatched;
use super::semaphore_change::{LineAsk, PermitAnswer, PermitChange, Slots};
use super::semaphore_doc::{Permit, SemaphoreDoc};
use crate::driver::{
    Acquisitions, Extension, Key, KeyPrefix, LeaseKind, LeaseRef, ListLimit, LockId, LockList,
    LockRecord, Outcome, Request, Ttl, extend_by_key,
};
use crate::error::Result;

impl FirestoreBackend {
    /// The document the leases of `kind` on `key` are kept in: the semaphore's for a permit,
    /// the fence counter document (read beside the lock document) for a shared hold.
    pub(super) fn holders_doc(&self, key: &Key, kind: LeaseKind) -> Result<HoldersDoc> {
        match kind {
            LeaseKind::Permit => Ok(HoldersDoc::Semaphore(self.semaphore_name(key)?)),
            LeaseKind::Lock | LeaseKind::Shared => {
                let [lock_name, counter_name] = self.lock_names(key.as_str())?;
                Ok(HoldersDoc::Readers {
                    lock_name,
                    counter_name,
                })
            }
        }
    }

    /// Makes `change` to the leases of `kind` on `key` (see `holders.rs`): its answer.
    pub(super) fn change_held(
        &self,
        key: &Key,
        kind: LeaseKind,
        change: PermitChange,
    ) -> Result<PermitAnswer> {
        let target = self.holders_doc(key, kind)?;
        self.change_holders(&target, key, vec![change])
            .pop()
            .unwrap_or_else(|| Err(mismatched(None)))
    }

    /// Takes one of `slots` on `key` for `request` (one key, a permit or a shared hold),
    /// heeding its line: the lease, or the refusal with the waiter's place in line.
    pub(super) fn take_held(
        &self,
        key: &Key,
        slots: Slots,
        request: &Request<'_>,
    ) -> Result<Acquisitions> {
        let kind = request.mode.kind();
        let change = PermitChange::Take {
            slots,
            ttl: request.ttl,
            holder: request.holder.cloned(),
            line: LineAsk::of(request.line),
            // The same lock id at every attempt: a later attempt recognises an earlier one's
            // commit whose answer was lost.
            lock_id: LockId::generate().into_string(),
            maybe_written: false,
        };
        match self.change_held(key, kind, change) {
            Ok(PermitAnswer::Taken(acquisitions)) => Ok(acquisitions),
            other => Err(mismatched(Some(other))),
        }
    }

    /// Gives back the permit or shared hold `lease` names (its kind, key and lock id).
    pub(super) fn give_back_held(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let key = lease.permit_key()?;
        let change = PermitChange::GiveBack {
            lock_id: lease.lock_id.as_str().to_owned(),
            maybe_removed_live_until: None,
        };
        match self.change_held(key, lease.kind, change) {
            Ok(PermitAnswer::GivenBack(outcome)) => Ok(outcome),
            other => Err(mismatched(Some(other))),
        }
    }

    /// Renews the permits or shared holds (`kind`) of a batch: one commit per document, for
    /// all its leases in the batch (and whatever else this backend changes in it meanwhile).
    /// One answer per lease, in order.
    pub(super) fn renew_held_leases(
        &self,
        kind: LeaseKind,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        extend_by_key(leases, |key, items| {
            self.renew_holders(&self.holders_doc(key, kind)?, key, items)
        })
    }

    /// The live permits of the semaphore on `key`, or the live shared holders of its lock
    /// (`kind`), in fence order: one read of the one document they are kept in.
    pub(super) fn held_of(&self, key: &Key, kind: LeaseKind) -> Result<Vec<LockRecord>> {
        let held = match kind {
            LeaseKind::Permit => self
                .read_semaphore(&self.semaphore_name(key)?, key)
                .map(|(_, doc)| doc.permits),
            LeaseKind::Lock | LeaseKind::Shared => {
                self.read_counter_doc(key).map(|doc| doc.readers)
            }
        };
        let held = held.map_err(|e| lock_error(&self.rest, e))?;
        Ok(live_records(&held, key.as_str(), self.now_ms()?))
    }

    /// The live permits of the semaphores under `prefix`, or the live shared holders of the
    /// locks under it (`kind`): the semaphore documents in the range of their `key` field, or
    /// the fence counter documents in the range of their `keyDebug` field, read as `list.rs`
    /// reads lock documents (bounded pages), each turned into its live leases in fence order.
    pub(super) fn held_under(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let (collection, key_field) = match kind {
            LeaseKind::Permit => (&self.semaphore_collection, "key"),
            LeaseKind::Lock | LeaseKind::Shared => (&self.fence_collection, "keyDebug"),
        };
        self.list_range(collection, key_field, prefix, limit, |document, now| {
            // A document without the key field is refused by its parse, named by its id.
            let key = document
                .string(key_field)
                .unwrap_or_else(|| document.name().rsplit('/').next().unwrap_or_default())
                .to_owned();
            let held = match kind {
                LeaseKind::Permit => SemaphoreDoc::parse(Some(document), &key)?.permits,
                LeaseKind::Lock | LeaseKind::Shared => {
                    let name = document.name().to_owned();
                    CounterDoc::parse(name, Some(document.clone()), &key)?.readers
                }
            };
            let records = live_records(&held, &key, now);
            Ok((key, records))
        })
    }
}

/// The raw records of the leases of `held` on `key` that are live at `now` (client clock), in
/// the order given.
fn live_records(held: &[Permit], key: &str, now: i64) -> Vec<LockRecord> {
    held.iter()
        .filter(|lease| lease.is_live(now))
        .map(|lease| lease.record(key))
        .collect()
}
