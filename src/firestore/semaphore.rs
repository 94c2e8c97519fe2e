//! Semaphores ([`Driver::try_acquire_permit`](crate::driver::Driver::try_acquire_permit) and
//! the permit leases): every operation is a change to the semaphore's one document, made by
//! a read of it and a compare-and-set commit of the whole document (precondition: its
//! `updateTime` as read, or "does not exist"), read and applied again when another writer of
//! the same semaphore got in between.
//!
//! Why compare-and-set and not a server-side transaction: as for locks (see the module docs),
//! Firestore's transactions lock what they read, and a semaphore's document is read by every
//! acquirer, so its holders' releases and renewals would starve behind them. A lost race here
//! says nothing about the outcome (unlike a lock's acquisition, where it means "someone else
//! took it"): the operation reads again, up to [`SEMAPHORE_ATTEMPTS`] times, pausing less
//! than the time a permit it renews has left.
//!
//! The changes one backend makes to one semaphore at the same time go in one commit (see
//! [`Combiner`](super::combiner::Combiner)): its own acquisitions, releases and renewals never
//! race each other, and a heartbeat's renewals that meet share a write.
//!
//! A commit without a usable answer (a lost connection, a garbled answer) is read again once:
//! an acquisition that finds its own lock id in the document was taken by that commit and
//! answers that permit (never a second one, never "full" against itself); a release that finds
//! its permit gone while it would still be live removed it (nothing else removes a live permit)
//! and answers so; a renewal renews again.
//!
//! No version is handed out with a permit: every acquisition, release and renewal of any
//! permit changes the one document, so a holder's last-seen version would rarely still match
//! and a renewal reads first anyway.

use std::time::Duration;

use serde_json::{Value, json};

use super::commit::{Attempt, lock_error, unchanged_since, with_retries_up_to};
use super::driver::FirestoreBackend;
use super::rest::Document;
use super::semaphore_change::{Applied, Committed, LineAsk, PermitAnswer, PermitChange};
use super::semaphore_doc::{SemaphoreDoc, semaphore_document_id};
use crate::driver::{
    Acquisition, Extension, Holder, Key, LeaseRef, Line, LockId, LockRecord, Outcome, Permits,
    PlaceRecord, TIME_TOLERANCE_MS, Ttl, extend_by_key,
};
use crate::error::{LockError, Result};

/// Attempts of a semaphore write whose commit keeps meeting other writers of the same
/// semaphore (every permit's holder writes its document) before it gives up with
/// `ServiceUnavailable`.
const SEMAPHORE_ATTEMPTS: u32 = 12;

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
            permits,
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
        let mut answers = self.renew_permits_of(key, &[(lease.lock_id, ttl)])?;
        answers.pop().unwrap_or_else(|| Err(mismatched(None)))
    }

    /// Renews the permit leases of a batch: one commit per semaphore, for all its permits in
    /// the batch (and whatever else this backend changes in it meanwhile). One answer per
    /// lease, in order.
    pub(super) fn renew_permit_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        extend_by_key(leases, |key, items| self.renew_permits_of(key, items))
    }

    /// Renews permits of the semaphore on `key` in one commit: each live one to *now + its
    /// ttl*; an expired one is removed (`Expired`), never revived; an absent one is
    /// `NotFound`. One outcome per item, in order.
    fn renew_permits_of(
        &self,
        key: &Key,
        items: &[(&LockId, Ttl)],
    ) -> Result<Vec<Result<Outcome<Extension>>>> {
        let changes = items
            .iter()
            .map(|(lock_id, ttl)| PermitChange::Renew {
                lock_id: lock_id.as_str().to_owned(),
                ttl: *ttl,
            })
            .collect();
        Ok(self
            .change_semaphore(key, changes)?
            .into_iter()
            .map(|answer| match answer {
                Ok(PermitAnswer::Renewed(outcome)) => Ok(outcome),
                other => Err(mismatched(Some(other))),
            })
            .collect())
    }

    /// Makes `changes` to the semaphore on `key`, together with the changes other threads of
    /// this backend make to it meanwhile (one commit for all). One answer per change, in order.
    fn change_semaphore(
        &self,
        key: &Key,
        changes: Vec<PermitChange>,
    ) -> Result<Vec<Result<PermitAnswer>>> {
        let name = self.semaphore_name(key)?;
        Ok(self.semaphores.submit(&name, changes, |changes, last| {
            self.write_semaphore(&name, key, changes, last)
        }))
    }

    /// Applies `changes` in order to the semaphore document `name` (of `key`) as read (or as
    /// this backend's `last` commit left it), and commits it if any changed it; read and
    /// applied again after a lost race (pausing less than a permit it renews has left), or
    /// once after a commit without a usable answer.
    ///
    /// Answers worked out from `last` rather than a read are only given when its commit
    /// succeeds, which proves the document was still as `last` says; changes that write
    /// nothing are answered from a read.
    fn write_semaphore(
        &self,
        name: &str,
        key: &Key,
        mut changes: Vec<PermitChange>,
        last: &mut Option<Committed>,
    ) -> Vec<Result<PermitAnswer>> {
        let mut unanswered = false;
        let written = with_retries_up_to(
            SEMAPHORE_ATTEMPTS,
            &self.rest,
            &self.aborted_retries,
            || {
                let (precondition, doc, now, applied) = loop {
                    let remembered = last.take();
                    let from_memory = remembered.is_some();
                    let (precondition, mut doc) = match remembered {
                        Some(Committed { update_time, doc }) => {
                            (json!({ "updateTime": update_time }), doc)
                        }
                        None => {
                            let (read, doc) = self.read_semaphore(name, key)?;
                            (unchanged_since(read.as_ref()), doc)
                        }
                    };
                    let now = self.now_ms()?;
                    let line_now = self.line_now_ms()?;
                    let applied: Vec<Applied> = changes
                        .iter()
                        .map(|change| change.apply(&mut doc, now, line_now, key))
                        .collect();
                    if applied.iter().any(|applied| applied.wrote) {
                        break (precondition, doc, now, applied);
                    }
                    if !from_memory {
                        return Ok(Attempt::Done(answers(applied)));
                    }
                };
                let write = semaphore_write(name, key, precondition, &doc)?;
                match self.rest.commit_versions(vec![write]) {
                    Ok(Some(times)) => {
                        *last = times
                            .into_iter()
                            .next()
                            .flatten()
                            .map(|update_time| Committed { update_time, doc });
                        Ok(Attempt::Done(answers(applied)))
                    }
                    Ok(None) => Ok(conflict(&applied, now)),
                    Err(error) if error.is_aborted() => Err(error.into()),
                    Err(error) => {
                        if error.may_have_been_applied() {
                            for (change, applied) in changes.iter_mut().zip(&applied) {
                                change.may_have_been_written(applied);
                            }
                        }
                        if unanswered || !error.is_worth_retrying_now() {
                            return Err(error.into());
                        }
                        unanswered = true;
                        let error = self.rest.lock_error(error);
                        log::debug!("syncguard: Firestore semaphore write read again: {error}");
                        Ok(conflict(&applied, now))
                    }
                }
            },
        );
        match written {
            Ok(answers) => answers,
            Err(error) => changes
                .iter()
                .map(|change| Err(change.failed(&error, key)))
                .collect(),
        }
    }

    /// The full name of the semaphore document of `key`.
    fn semaphore_name(&self, key: &Key) -> Result<String> {
        let id = semaphore_document_id(key.as_str())?;
        Ok(self.rest.document_name(&self.semaphore_collection, &id))
    }

    /// The semaphore document `name` (of `key`), read without a transaction.
    fn read_semaphore(&self, name: &str, key: &Key) -> super::commit::OpResult<Read> {
        let [document] = self.rest.batch_get([name])?;
        let doc = SemaphoreDoc::parse(document.as_ref(), key.as_str())?;
        Ok((document, doc))
    }
}

/// The answers of changes applied to a document that was written (or needed no write).
fn answers(applied: Vec<Applied>) -> Vec<Result<PermitAnswer>> {
    applied.into_iter().map(|applied| applied.answer).collect()
}

/// A lost race: try again, before the first permit being renewed runs out (by the expiry
/// read, with the tolerance), if any is.
fn conflict(applied: &[Applied], now: i64) -> Attempt<Vec<Result<PermitAnswer>>> {
    let first_expiry = applied
        .iter()
        .filter(|applied| applied.wrote)
        .filter_map(|applied| applied.live_until)
        .min();
    match first_expiry {
        Some(expiry) => {
            let left = expiry.saturating_add(TIME_TOLERANCE_MS).saturating_sub(now);
            Attempt::ConflictWithin(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
        }
        None => Attempt::Conflict,
    }
}

/// A change answered with another kind of answer than it asks for: a bug.
fn mismatched(answer: Option<Result<PermitAnswer>>) -> LockError {
    match answer {
        Some(Err(error)) => error,
        _ => LockError::internal("a Firestore semaphore change got another change's answer"),
    }
}

/// The write of `doc`, whole, over the document `name`, if it is as `precondition` says.
fn semaphore_write(
    name: &str,
    key: &Key,
    precondition: Value,
    doc: &SemaphoreDoc,
) -> Result<Value> {
    Ok(json!({
        "update": { "name": name, "fields": doc.fields(key.as_str())? },
        "currentDocument": precondition,
    }))
}
