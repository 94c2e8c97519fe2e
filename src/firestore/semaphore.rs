//! Semaphores ([`Driver::try_acquire_permit`](crate::driver::Driver::try_acquire_permit) and
//! the permit leases): every operation is a change to the semaphore's one document, made by
//! a read of it and a compare-and-set commit of the whole document (precondition: its
//! `updateTime` as read, or "does not exist"), read and applied again when another writer of
//! the same semaphore got in between.
//!
//! How such a document is changed — compare-and-set commits, combined per document, read
//! again after a lost race or a commit without an answer — is `holders.rs`, shared with the
//! lock's shared holders.
//!
//! No version is handed out with a permit: every acquisition, release and renewal of any
//! permit changes the one document, so a holder's last-seen version would rarely still match
//! and a renewal reads first anyway.

use super::commit::lock_error;
use super::driver::FirestoreBackend;
use super::holders::{HoldersDoc, mismatched};
use super::rest::Document;
use super::semaphore_change::{LineAsk, PermitAnswer, PermitChange, Slots};
use super::semaphore_doc::{SemaphoreDoc, semaphore_document_id};
use crate::driver::{
    Acquisition, Extension, Holder, Key, LeaseRef, Line, LockId, LockRecord, Outcome, Permits,
    PlaceRecord, Ttl, extend_by_key,
};
use crate::error::Result;

/// A semaphore's document as read: the raw document (for the precondition) and its contents.
type Read = (Option<Document>, SemaphoreDoc);

impl FirestoreBackend {
    /// Takes one of `permits` permits of the semaphore on `key`, heeding its `line`; see the
    /// module docs.
    pub(super) fn take_permit(
        &self,
        key: &Key,
        permits: Permits,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        self.check_skew()?;
        let change = PermitChange::Take {
            slots: Slots::Permit(permits),
            ttl,
            holder: holder.cloned(),
            line: LineAsk::of(line),
            lock_id: LockId::generate().into_string(),
            maybe_written: false,
        };
        match self.change_semaphore(key, vec![change])?.pop() {
            Some(Ok(PermitAnswer::Taken(acquisition))) => Ok(acquisition),
            other => Err(mismatched(other)),
        }
    }

    /// The live permits of the semaphore on `key`, in fence order.
    pub(super) fn permits_of(&self, key: &Key) -> Result<Vec<LockRecord>> {
        self.check_skew()?;
        let name = self.semaphore_name(key)?;
        let (_, doc) = self
            .read_semaphore(&name, key)
            .map_err(|e| lock_error(&self.rest, e))?;
        let now = self.now_ms()?;
        Ok(doc
            .permits
            .iter()
            .filter(|permit| permit.is_live(now))
            .map(|permit| permit.record(key.as_str()))
            .collect())
    }

    /// The live places of the semaphore's line of `key`, in line order: one read.
    pub(super) fn permit_line(&self, key: &Key) -> Result<Vec<PlaceRecord>> {
        let name = self.semaphore_name(key)?;
        let (_, doc) = self
            .read_semaphore(&name, key)
            .map_err(|e| lock_error(&self.rest, e))?;
        Ok(doc.line.live(self.line_now_ms()?))
    }

    /// Removes `place` from the semaphore's line of `key` (a write only if it was there).
    pub(super) fn leave_permit_line(&self, key: &Key, place: &LockId) -> Result<()> {
        let change = PermitChange::Leave {
            place: place.clone(),
        };
        match self.change_semaphore(key, vec![change])?.pop() {
            Some(Ok(PermitAnswer::Left)) => Ok(()),
            other => Err(mismatched(other)),
        }
    }

    /// Gives back the permit `lease` names (its key and lock id).
    pub(super) fn give_back_permit(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let change = PermitChange::GiveBack {
            lock_id: lease.lock_id.as_str().to_owned(),
            maybe_removed_live_until: None,
        };
        match self.change_semaphore(key, vec![change])?.pop() {
            Some(Ok(PermitAnswer::GivenBack(outcome))) => Ok(outcome),
            other => Err(mismatched(other)),
        }
    }

    /// Renews the permit `lease` names (its key and lock id) to *now + ttl*.
    pub(super) fn renew_permit(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let target = HoldersDoc::Semaphore(self.semaphore_name(key)?);
        let mut answers = self.renew_holders(&target, key, &[(lease.lock_id, ttl)])?;
        answers.pop().unwrap_or_else(|| Err(mismatched(None)))
    }

    /// Renews the permit leases of a batch: one commit per semaphore, for all its permits in
    /// the batch (and whatever else this backend changes in it meanwhile). One answer per
    /// lease, in order.
    pub(super) fn renew_permit_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        extend_by_key(leases, |key, items| {
            self.renew_holders(
                &HoldersDoc::Semaphore(self.semaphore_name(key)?),
                key,
                items,
            )
        })
    }

    /// The full name of the semaphore document of `key`.
    fn semaphore_name(&self, key: &Key) -> Result<String> {
        let id = semaphore_document_id(key.as_str())?;
        Ok(self.rest.document_name(&self.semaphore_collection, &id))
    }

    /// Makes `changes` to the semaphore on `key` (see `holders.rs`).
    fn change_semaphore(
        &self,
        key: &Key,
        changes: Vec<PermitChange>,
    ) -> Result<Vec<Result<PermitAnswer>>> {
        let target = HoldersDoc::Semaphore(self.semaphore_name(key)?);
        Ok(self.change_holders(&target, key, changes))
    }

    /// The semaphore document `name` (of `key`), read without a transaction.
    pub(super) fn read_semaphore(&self, name: &str, key: &Key) -> super::commit::OpResult<Read> {
        let [document] = self.rest.batch_get([name])?;
        let doc = SemaphoreDoc::parse(document.as_ref(), key.as_str())?;
        Ok((document, doc))
    }
}
