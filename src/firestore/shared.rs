//! Shared holds of a lock (readers, DESIGN §12): each a lease of its own (lock id, fence from
//! the lock's counter, expiry, holder), kept in the key's fence counter document
//! (`readers_doc.rs`) beside the counter and the lock's line.
//!
//! acquire: one `batchGet` of the lock and counter documents, then one `commit` of the counter
//! document (the reader added, expired ones dropped, the counter raised), conditioned on its
//! `updateTime` as read: every exclusive grant writes the counter document too, so a writer
//! that got in between makes this commit fail, and a reader that got in first makes the
//! writer's fail. A refused single attempt writes nothing; a refused waiter writes its place.
//! release and renewal: one `batchGet` of the counter document and one `commit` of it. A
//! heartbeat's renewals of readers of one key share one commit. A lost race (another reader
//! or writer of the key changed the document) reads again, up to [`SHARED_ATTEMPTS`] times.
//!
//! A commit without a usable answer is read again once: an acquisition that finds its own
//! lock id was taken by that commit and answers that hold (never a second one); a release
//! that finds its reader gone while it would still be live removed it; a renewal renews again.

use std::time::Duration;

use super::commit::{Attempt, OpResult, lock_error, with_retries_up_to};
use super::counter_doc::CounterDoc;
use super::driver::FirestoreBackend;
use super::lock_take::live_lock;
use super::readers_doc::MAX_READERS;
use super::semaphore_doc::Permit;
use crate::driver::{
    Acquisition, Extension, Holder, Key, KeyPrefix, LeaseRef, Line, ListLimit, LockId, LockList,
    LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl, extend_by_key, is_live,
};
use crate::error::Result;
use crate::fence::Fence;

/// Attempts of a shared-hold write whose commit keeps meeting other writers of the key's
/// counter document (every reader's acquisition, release and renewal writes it), as for a
/// semaphore's document.
const SHARED_ATTEMPTS: u32 = 12;

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
        // The same lock id at every attempt: a later attempt recognises an earlier one's
        // commit whose answer was lost.
        let lock_id = LockId::generate().into_string();
        let mut maybe_written = false;
        let mut unanswered = false;
        let taken = with_retries_up_to(SHARED_ATTEMPTS, &self.rest, &self.aborted_retries, || {
            self.take_shared_once(
                key,
                ttl,
                holder,
                line,
                &lock_id,
                &mut maybe_written,
                &mut unanswered,
            )
        });
        taken.map_err(|error| {
            let error = error.with_key(key.as_str());
            if maybe_written {
                error.in_doubt(lock_id.clone())
            } else {
                error
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn take_shared_once(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
        lock_id: &str,
        maybe_written: &mut bool,
        unanswered: &mut bool,
    ) -> OpResult<Attempt<Acquisition>> {
        let [lock_name, counter_name] = self.lock_names(key.as_str())?;
        let [lock_read, counter_read] = self.rest.batch_get([&lock_name, &counter_name])?;
        let mut counter_doc = CounterDoc::parse(counter_name, counter_read, key.as_str())?;
        let now = self.now_ms()?;
        if let Some(at) = counter_doc.reader(lock_id)
            && counter_doc.readers[at].is_live(now)
        {
            // An earlier commit of this acquisition went through, its answer lost: the hold
            // is this caller's, and nothing more is written.
            let reader = &counter_doc.readers[at];
            return Ok(Attempt::Done(Acquisition::granted(
                lock_id.to_owned(),
                reader.fence,
                reader.expires_at_ms,
                None,
            )));
        }
        // Read after any earlier commit: it was not applied (or its hold is gone already).
        *maybe_written = false;
        let held = live_lock(lock_read.as_ref(), key.as_str(), now)?;
        if held.is_some() && line.place().is_none() {
            return Ok(Attempt::Done(Acquisition::Locked));
        }
        counter_doc.reclaim(now);
        let free = usize::from(held.is_none() && counter_doc.readers.len() < MAX_READERS);
        let admission = counter_doc
            .line
            .admit(line, free, true, self.line_now_ms()?, holder);
        if !admission.granted {
            // Nothing to write for a single attempt, nor for a waiter whose place is fresh.
            if line.place().is_none() || !admission.changed {
                return Ok(Attempt::Done(Acquisition::Locked));
            }
            // The waiter's place, in the counter document alone (as a lock waiter's is).
            let write = counter_doc.place_write(key.as_str(), held.as_ref())?;
            return Ok(match self.rest.commit_versions(vec![write])? {
                Some(_) => Attempt::Done(Acquisition::Locked),
                None => Attempt::Conflict,
            });
        }
        // Checked before the commit: a counter past the limit writes nothing.
        let fence =
            Fence::from_counter(counter_doc.counter + 1).map_err(|e| e.with_key(key.as_str()))?;
        let expires_at_ms = now.saturating_add(ttl.as_millis());
        counter_doc.readers.push(Permit {
            lock_id: lock_id.to_owned(),
            fence,
            expires_at_ms,
            acquired_at_ms: now,
            holder: holder.map(Holder::to_string),
        });
        let write = counter_doc.write(key.as_str(), fence);
        match self.rest.commit_versions(vec![write]) {
            Ok(Some(_)) => Ok(Attempt::Done(Acquisition::granted(
                lock_id.to_owned(),
                fence,
                expires_at_ms,
                None,
            ))),
            // Another reader, a writer or a waiter changed the counter document: read again
            // (a lost race says nothing here: readers do not exclude each other).
            Ok(None) => Ok(Attempt::Conflict),
            Err(error) if error.is_aborted() => Err(error.into()),
            Err(error) => {
                if error.may_have_been_applied() {
                    *maybe_written = true;
                }
                if *unanswered || !error.is_worth_retrying_now() {
                    return Err(error.into());
                }
                *unanswered = true;
                let error = self.rest.lock_error(error);
                log::debug!("syncguard: Firestore shared acquisition read again: {error}");
                Ok(Attempt::Conflict)
            }
        }
    }

    /// Gives back the shared hold `lease` names (its key and lock id).
    pub(super) fn give_back_shared(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        let key = lease.permit_key()?;
        let lock_id = lease.lock_id.as_str();
        // The expiry of the reader a commit without an answer may have removed.
        let mut maybe_removed_live_until: Option<i64> = None;
        let mut unanswered = false;
        with_retries_up_to(SHARED_ATTEMPTS, &self.rest, &self.aborted_retries, || {
            let mut counter_doc = self.read_counter_doc(key)?;
            let now = self.now_ms()?;
            let Some(at) = counter_doc.reader(lock_id) else {
                // Gone while it would still be live: only this release's own earlier commit,
                // whose answer was lost, removes a live reader.
                let outcome = match maybe_removed_live_until {
                    Some(until) if is_live(until, now, TIME_TOLERANCE_MS) => Outcome::Applied(()),
                    _ => Outcome::NotFound,
                };
                return Ok(Attempt::Done(outcome));
            };
            let reader = counter_doc.readers.remove(at);
            let live = reader.is_live(now);
            // The document is written anyway: expired readers of others go with it.
            counter_doc.reclaim(now);
            let fence =
                Fence::from_counter(counter_doc.counter).map_err(|e| e.with_key(key.as_str()))?;
            let write = counter_doc.write(key.as_str(), fence);
            match self.rest.commit_versions(vec![write]) {
                Ok(Some(_)) => Ok(Attempt::Done(if live {
                    Outcome::Applied(())
                } else {
                    Outcome::Expired
                })),
                Ok(None) => Ok(Attempt::Conflict),
                Err(error) if error.is_aborted() => Err(error.into()),
                Err(error) => {
                    if error.may_have_been_applied() && live {
                        maybe_removed_live_until = Some(reader.expires_at_ms);
                    }
                    if unanswered || !error.is_worth_retrying_now() {
                        return Err(error.into());
                    }
                    unanswered = true;
                    Ok(Attempt::Conflict)
                }
            }
        })
    }

    /// Renews the shared holds of a batch: one commit per key, for all its readers in the
    /// batch. One answer per lease, in order.
    pub(super) fn renew_shared_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        extend_by_key(leases, |key, items| {
            self.renew_shared_of(key, items)
                .map(|outcomes| outcomes.into_iter().map(Ok).collect())
        })
    }

    /// Renews readers of the lock on `key` in one commit: each live one to *now + its ttl*;
    /// an expired one is removed (`Expired`), never revived; an absent one is `NotFound`.
    /// One outcome per item, in order.
    fn renew_shared_of(
        &self,
        key: &Key,
        items: &[(&LockId, Ttl)],
    ) -> Result<Vec<Outcome<Extension>>> {
        self.check_skew()?;
        with_retries_up_to(SHARED_ATTEMPTS, &self.rest, &self.aborted_retries, || {
            let mut counter_doc = self.read_counter_doc(key)?;
            let now = self.now_ms()?;
            let mut wrote = false;
            // The earliest expiry (as read) of a reader renewed: a retry must come before it.
            let mut first_expiry: Option<i64> = None;
            let outcomes: Vec<Outcome<Extension>> = items
                .iter()
                .map(
                    |(lock_id, ttl)| match counter_doc.reader(lock_id.as_str()) {
                        None => Outcome::NotFound,
                        Some(at) if counter_doc.readers[at].is_live(now) => {
                            let reader = &mut counter_doc.readers[at];
                            first_expiry = Some(
                                first_expiry
                                    .map_or(reader.expires_at_ms, |e| e.min(reader.expires_at_ms)),
                            );
                            reader.expires_at_ms = now.saturating_add(ttl.as_millis());
                            wrote = true;
                            Outcome::Applied(Extension {
                                expires_at_ms: reader.expires_at_ms,
                                version: None,
                            })
                        }
                        Some(at) => {
                            // Expired: removed, never revived.
                            counter_doc.readers.remove(at);
                            wrote = true;
                            Outcome::Expired
                        }
                    },
                )
                .collect();
            if !wrote {
                return Ok(Attempt::Done(outcomes));
            }
            counter_doc.reclaim(now);
            let fence =
                Fence::from_counter(counter_doc.counter).map_err(|e| e.with_key(key.as_str()))?;
            let write = counter_doc.write(key.as_str(), fence);
            let conflict = || match first_expiry {
                Some(expiry) => {
                    let left = expiry.saturating_add(TIME_TOLERANCE_MS).saturating_sub(now);
                    Attempt::ConflictWithin(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
                }
                None => Attempt::Conflict,
            };
            match self.rest.commit_versions(vec![write]) {
                Ok(Some(_)) => Ok(Attempt::Done(outcomes)),
                Ok(None) => Ok(conflict()),
                Err(error) if error.is_aborted() => Err(error.into()),
                // A renewal is renewed again after a commit without an answer.
                Err(error) if error.is_worth_retrying_now() => Ok(conflict()),
                Err(error) => Err(error.into()),
            }
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
