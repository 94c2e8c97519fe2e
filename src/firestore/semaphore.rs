//! Semaphores ([`Driver::try_acquire_permit`](crate::driver::Driver::try_acquire_permit) and
//! the permit leases): every operation is one read of the semaphore's document and one
//! compare-and-set commit of the whole document (precondition: its `updateTime` as read, or
//! "does not exist"), retried when another writer of the same semaphore got in between.
//!
//! Why compare-and-set and not a server-side transaction: as for locks (see the module docs),
//! Firestore's transactions lock what they read, and a semaphore's document is read by every
//! acquirer, so its holders' releases and renewals would starve behind them. A lost race here
//! says nothing about the outcome (unlike a lock's acquisition, where it means "someone else
//! took it"): the operation reads again, up to [`SEMAPHORE_ATTEMPTS`] times.
//!
//! No version is handed out with a permit: every acquisition, release and renewal of any
//! permit changes the one document, so a holder's last-seen version would rarely still match
//! and a renewal reads first anyway.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::commit::{Attempt, OpError, OpResult, lock_error, unchanged_since, with_retries_up_to};
use super::driver::FirestoreBackend;
use super::rest::{Document, RestError};
use super::semaphore_doc::{Permit, SemaphoreDoc, semaphore_document_id};
use crate::driver::{
    Acquisition, Extension, Holder, Key, LeaseRef, LockId, LockRecord, Outcome, Permits, Ttl,
    in_order,
};
use crate::error::{LockError, Result};
use crate::fence::Fence;

/// Attempts of a semaphore operation whose commit keeps meeting other writers of the same
/// semaphore (every permit's holder writes its document) before it gives up with
/// `ServiceUnavailable`.
const SEMAPHORE_ATTEMPTS: u32 = 12;

/// A semaphore's document as read: the raw document (for the precondition) and its contents.
type Read = (Option<Document>, SemaphoreDoc);

impl FirestoreBackend {
    /// Takes one of `permits` permits of the semaphore on `key`; see the module docs.
    pub(super) fn take_permit(
        &self,
        key: &Key,
        permits: Permits,
        ttl: Ttl,
        holder: Option<&Holder>,
    ) -> Result<Acquisition> {
        self.check_skew()?;
        let name = self.semaphore_name(key)?;
        with_retries_up_to(
            SEMAPHORE_ATTEMPTS,
            &self.rest,
            &self.aborted_retries,
            || {
                let (read, mut doc) = self.read_semaphore(&name, key)?;
                let now = self.now_ms()?;
                // Only live permits count; the expired ones go with this commit, if there is one.
                doc.reclaim(now);
                if doc.permits.len() >= permits.get() as usize {
                    return Ok(Attempt::Done(Acquisition::Locked));
                }
                // Checked before the commit: a counter at the limit writes nothing.
                let counter = doc.counter + 1;
                let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
                let lock_id = LockId::generate().into_string();
                let expires_at_ms = now.saturating_add(ttl.as_millis());
                doc.counter = counter;
                doc.permits.push(Permit {
                    lock_id: lock_id.clone(),
                    fence,
                    expires_at_ms,
                    acquired_at_ms: now,
                    holder: holder.map(Holder::to_string),
                });
                let write = semaphore_write(&name, key, read.as_ref(), &doc)?;
                match self.rest.commit_versions(vec![write]) {
                    Ok(Some(_)) => Ok(Attempt::Done(Acquisition::granted(
                        lock_id,
                        fence,
                        expires_at_ms,
                        None,
                    ))),
                    Ok(None) => Ok(Attempt::Conflict),
                    // As for locks: the permit may be held although no answer says so; the caller
                    // gets the lock id it would hold, to release it.
                    Err(error) if !error.is_aborted() && error.may_have_been_applied() => {
                        let error = self.rest.lock_error(error).with_key(key.as_str());
                        Err(OpError::Lock(error.in_doubt(lock_id)))
                    }
                    Err(error) => Err(error.into()),
                }
            },
        )
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

    /// Gives back the permit `lease` names (its key and lock id).
    pub(super) fn give_back_permit(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let name = self.semaphore_name(key)?;
        let lock_id = lease.lock_id.as_str();
        let mut unanswered = false;
        with_retries_up_to(
            SEMAPHORE_ATTEMPTS,
            &self.rest,
            &self.aborted_retries,
            || {
                let (read, mut doc) = self.read_semaphore(&name, key)?;
                let Some(at) = doc.position(lock_id) else {
                    return Ok(Attempt::Done(Outcome::NotFound));
                };
                let now = self.now_ms()?;
                let permit = doc.permits.remove(at);
                let outcome = if permit.is_live(now) {
                    Outcome::Applied(())
                } else {
                    Outcome::Expired
                };
                // The document is written anyway: expired permits of others go with it.
                doc.reclaim(now);
                let write = semaphore_write(&name, key, read.as_ref(), &doc)?;
                let committed = self.rest.commit_versions(vec![write]);
                Ok(match self.after_commit(committed, &mut unanswered)? {
                    true => Attempt::Done(outcome),
                    false => Attempt::Conflict,
                })
            },
        )
    }

    /// Renews the permit `lease` names (its key and lock id) to *now + ttl*.
    pub(super) fn renew_permit(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let mut answers = self.extend_permits_of(key, &[(lease.lock_id, ttl)])?;
        Ok(answers.pop().unwrap_or(Outcome::NotFound))
    }

    /// Renews the permit leases of a batch: one commit per semaphore, for all its permits in
    /// the batch. One answer per lease, in order.
    pub(super) fn renew_permit_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        let mut answers = Vec::with_capacity(leases.len());
        // By semaphore (its key), in the batch's order within each.
        type Group<'a> = (&'a Key, Vec<(usize, &'a LockId, Ttl)>);
        let mut by_key: BTreeMap<&str, Group<'_>> = BTreeMap::new();
        for (i, (lease, ttl)) in leases.iter().enumerate() {
            match lease.permit_key() {
                Ok(key) => by_key
                    .entry(key.as_str())
                    .or_insert_with(|| (key, Vec::new()))
                    .1
                    .push((i, lease.lock_id, *ttl)),
                Err(error) => answers.push((i, Err(error))),
            }
        }
        for (key, group) in by_key.into_values() {
            let items: Vec<(&LockId, Ttl)> = group
                .iter()
                .map(|(_, lock_id, ttl)| (*lock_id, *ttl))
                .collect();
            match self.extend_permits_of(key, &items) {
                Ok(outcomes) => {
                    answers.extend(
                        group
                            .iter()
                            .map(|(i, ..)| *i)
                            .zip(outcomes.into_iter().map(Ok)),
                    );
                }
                Err(error) => answers.extend(
                    group
                        .iter()
                        .map(|(i, ..)| (*i, Err(LockError::new(error.code(), error.message())))),
                ),
            }
        }
        in_order(leases.len(), answers)
    }

    /// Renews permits of the semaphore on `key` in one commit: each live one to *now + its
    /// ttl*; an expired one is removed (`Expired`), never revived; an absent one is
    /// `NotFound`. One outcome per item, in order.
    fn extend_permits_of(
        &self,
        key: &Key,
        items: &[(&LockId, Ttl)],
    ) -> Result<Vec<Outcome<Extension>>> {
        let name = self.semaphore_name(key)?;
        let mut unanswered = false;
        with_retries_up_to(
            SEMAPHORE_ATTEMPTS,
            &self.rest,
            &self.aborted_retries,
            || {
                let (read, mut doc) = self.read_semaphore(&name, key)?;
                let now = self.now_ms()?;
                let mut outcomes = Vec::with_capacity(items.len());
                let mut changed = false;
                for (lock_id, ttl) in items {
                    let outcome = match doc.position(lock_id.as_str()) {
                        None => Outcome::NotFound,
                        Some(at) if doc.permits[at].is_live(now) => {
                            let expires_at_ms = now.saturating_add(ttl.as_millis());
                            doc.permits[at].expires_at_ms = expires_at_ms;
                            Outcome::Applied(Extension {
                                expires_at_ms,
                                version: None,
                            })
                        }
                        Some(at) => {
                            doc.permits.remove(at);
                            Outcome::Expired
                        }
                    };
                    changed |= !matches!(outcome, Outcome::NotFound);
                    outcomes.push(outcome);
                }
                if !changed {
                    return Ok(Attempt::Done(outcomes));
                }
                let write = semaphore_write(&name, key, read.as_ref(), &doc)?;
                let committed = self.rest.commit_versions(vec![write]);
                Ok(match self.after_commit(committed, &mut unanswered)? {
                    true => Attempt::Done(outcomes),
                    false => Attempt::Conflict,
                })
            },
        )
    }

    /// Whether a release's or renewal's commit happened (`false`: read again and decide). A
    /// commit without a usable answer is read again once, as a lock's release is: if it did
    /// happen, the new read shows it.
    fn after_commit(
        &self,
        committed: std::result::Result<Option<Vec<Option<String>>>, RestError>,
        unanswered: &mut bool,
    ) -> OpResult<bool> {
        match committed {
            Ok(times) => Ok(times.is_some()),
            Err(error) if !*unanswered && error.is_worth_retrying_now() => {
                *unanswered = true;
                let error = self.rest.lock_error(error);
                log::debug!("syncguard: Firestore semaphore write read again: {error}");
                Ok(false)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The full name of the semaphore document of `key`.
    fn semaphore_name(&self, key: &Key) -> Result<String> {
        let id = semaphore_document_id(key.as_str())?;
        Ok(self.rest.document_name(&self.semaphore_collection, &id))
    }

    /// The semaphore document `name` (of `key`), read without a transaction.
    fn read_semaphore(&self, name: &str, key: &Key) -> OpResult<Read> {
        let [document] = self.rest.batch_get([name])?;
        let doc = SemaphoreDoc::parse(document.as_ref(), key.as_str())?;
        Ok((document, doc))
    }
}

/// The write of `doc`, whole, over the document `name` as `read` (or where none was).
fn semaphore_write(
    name: &str,
    key: &Key,
    read: Option<&Document>,
    doc: &SemaphoreDoc,
) -> Result<Value> {
    Ok(json!({
        "update": { "name": name, "fields": doc.fields(key.as_str())? },
        "currentDocument": unchanged_since(read),
    }))
}
