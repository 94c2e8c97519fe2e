//! Semaphores ([`Mode::Permit`](crate::driver::Mode::Permit) and the permit leases; taken,
//! given back, renewed, found and listed in `held.rs`, as shared holds are): every operation
//! is a change to the semaphore's one document, made by a read of it and a compare-and-set
//! commit of the whole document (precondition: its `updateTime` as read, or "does not
//! exist"), read and applied again when another writer of the same semaphore got in between.
//!
//! How such a document is changed — compare-and-set commits, combined per document, read
//! again after a lost race or a commit without an answer — is `holders.rs`, shared with the
//! lock's shared holders.
//!
//! No version is handed out with a permit: every acquisition, release and renewal of any
//! permit changes the one document, so a holder's last-seen version would rarely still match
//! and a renewal reads first anyway.

use super::commit::{OpResult, lock_error};
use super::driver::FirestoreBackend;
use super::rest::{Document, Transaction};
use super::semaphore_change::mismatched;
use super::semaphore_change::{PermitAnswer, PermitChange};
use super::semaphore_doc::{SemaphoreDoc, semaphore_document_id};
use crate::driver::{Key, LeaseKind, LockId, PlaceRecord};
use crate::error::Result;

/// A semaphore's document as read: the raw document (for the precondition) and its contents.
type Read = (Option<Document>, SemaphoreDoc);

impl FirestoreBackend {
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
        match self.change_held(key, LeaseKind::Permit, change) {
            Ok(PermitAnswer::Left) => Ok(()),
            other => Err(mismatched(Some(other))),
        }
    }

    /// The full name of the semaphore document of `key`.
    pub(super) fn semaphore_name(&self, key: &Key) -> Result<String> {
        let id = semaphore_document_id(key.as_str())?;
        Ok(self.rest.document_name(&self.semaphore_collection, &id))
    }

    /// The semaphore document `name` (of `key`), read without a transaction.
    pub(super) fn read_semaphore(&self, name: &str, key: &Key) -> OpResult<Read> {
        self.read_semaphore_in(None, name, key)
    }

    /// [`read_semaphore`](FirestoreBackend::read_semaphore) inside `transaction`, when given.
    pub(super) fn read_semaphore_in(
        &self,
        transaction: Option<&Transaction>,
        name: &str,
        key: &Key,
    ) -> OpResult<Read> {
        let [document] = self.rest.batch_get_in(transaction, [name])?;
        let doc = SemaphoreDoc::parse(document.as_ref(), key.as_str())?;
        Ok((document, doc))
    }
}
