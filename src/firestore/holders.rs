//! Changes to a document of permit-like leases ([`PermitChange`]: take, give back, renew, leave
//! the line): a semaphore's document (its permits) or a key's fence counter document (the
//! lock's shared holders, DESIGN §12). Either is one document that every holder's acquisition,
//! release and renewal rewrites, by a read and a compare-and-set commit of the whole document
//! (precondition: its `updateTime` as read, or "does not exist"), read and applied again when
//! another writer got in between, up to [`HOLDER_ATTEMPTS`] times, pausing less than the time a
//! lease it renews has left.
//!
//! The changes one backend makes to one document at the same time go in one commit (the
//! [`Combiner`](super::combiner::Combiner)): its own holders never race each other, and those
//! that meet share a write. Each attempt is one pass through the combiner, and a change that
//! lost a race pauses and comes back on its own: a release or a renewal then never waits out
//! the pauses of another change that keeps losing (with the pauses inside one combined write,
//! releases waited up to 12 s behind a reader's acquisition). An acquisition stops trying
//! once a third of its TTL is spent ([`PermitChange::overdue`]): the lease it would get would
//! be mostly gone by the Locker's count, which starts when it asked.
//!
//! A commit without a usable answer (a lost connection, a garbled answer) is read again once:
//! an acquisition that finds its own lock id in the document was taken by that commit and
//! answers that lease (never a second one, never "full" against itself); a release that finds
//! its lease gone while it would still be live removed it (nothing else removes a live lease)
//! and answers so; a renewal renews again.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::commit::{Attempt, OpResult, lock_error, unchanged_since, with_retries_up_to};
use super::counter_doc::CounterDoc;
use super::document::LockDoc;
use super::driver::FirestoreBackend;
use super::lock_take::live_lock;
use super::rest::{Document, Transaction};
use super::semaphore_change::{
    Applied, Committed, PermitAnswer, PermitChange, Step, Tried, mismatched,
};
use super::semaphore_doc::SemaphoreDoc;
use super::transaction::{Decided, Transacted, transact};
use crate::driver::{Extension, Key, LockId, Outcome, TIME_TOLERANCE_MS, Ttl};
use crate::error::{LockError, Result};

/// Attempts of a write whose commit keeps meeting other writers of the same document (every
/// holder writes it) before it gives up with `ServiceUnavailable`.
const HOLDER_ATTEMPTS: u32 = 12;

/// The document a [`PermitChange`] is made to.
pub(super) enum HoldersDoc {
    /// A semaphore's document (full name): its permits, counter and line.
    Semaphore(String),
    /// A key's lock document and fence counter document (full names): the lock's shared
    /// holders, its counter and its line are in the counter document, which alone is written;
    /// the lock document is read to see whether a writer holds the key.
    Readers {
        lock_name: String,
        counter_name: String,
    },
}

/// A document as read (or remembered), ready for the changes and its write.
enum Source {
    /// A semaphore's document: the precondition of its write.
    Semaphore(Value),
    /// A fence counter document (its holders, counter and line moved out to be changed) and
    /// the key's lock document as read.
    Counter {
        shell: CounterDoc,
        lock_read: Option<Document>,
    },
}

impl HoldersDoc {
    /// The name its changes are combined under: the document written.
    fn name(&self) -> &str {
        match self {
            HoldersDoc::Semaphore(name) => name,
            HoldersDoc::Readers { counter_name, .. } => counter_name,
        }
    }
}

impl FirestoreBackend {
    /// Makes `changes` to the document `target` (of `key`). One answer per change, in order.
    ///
    /// Each attempt goes through the combiner, with the changes other threads of this backend
    /// make to the document meanwhile: one read and one commit for all. A change whose commit
    /// lost a race is submitted again by its own caller, after its own pause (shorter than a
    /// lease it renews has left), up to [`HOLDER_ATTEMPTS`] times: so a release or a renewal
    /// never waits out another change's pauses, and joins whichever write comes next.
    pub(super) fn change_holders(
        &self,
        target: &HoldersDoc,
        key: &Key,
        changes: Vec<PermitChange>,
    ) -> Vec<Result<PermitAnswer>> {
        let mut answers: Vec<Option<Result<PermitAnswer>>> = changes.iter().map(|_| None).collect();
        // (index, change, whether a commit of it went unanswered already)
        let mut pending: Vec<(usize, PermitChange, bool)> = changes
            .into_iter()
            .enumerate()
            .map(|(at, change)| (at, change, false))
            .collect();
        let asked = Instant::now();
        let done = with_retries_up_to(HOLDER_ATTEMPTS, &self.rest, &self.aborted_retries, || {
            let (positions, submitted): (Vec<(usize, bool)>, Vec<PermitChange>) = pending
                .drain(..)
                .map(|(at, change, unanswered)| ((at, unanswered), change))
                .unzip();
            let tried = self
                .holders
                .submit(target.name(), submitted, |changes, last| {
                    self.write_holders(target, key, changes, last)
                });
            let mut pause_at_most: Option<Duration> = None;
            for ((at, unanswered), tried) in positions.into_iter().zip(tried) {
                let Tried { change, step } = match tried {
                    Ok(tried) => tried,
                    Err(error) => {
                        answers[at] = Some(Err(error));
                        continue;
                    }
                };
                let (within, unanswered) = match step {
                    Step::Answered(answer) => {
                        answers[at] = Some(answer);
                        continue;
                    }
                    Step::Again(within) => (within, unanswered),
                    Step::AgainUnanswered(error, _) if unanswered => {
                        answers[at] = Some(Err(change.failed(&error, key)));
                        continue;
                    }
                    Step::AgainUnanswered(_, within) => (within, true),
                };
                if let Some(answer) = change.overdue(asked) {
                    answers[at] = Some(answer);
                    continue;
                }
                if let Some(within) = within {
                    pause_at_most = Some(pause_at_most.map_or(within, |p| p.min(within)));
                }
                pending.push((at, change, unanswered));
            }
            Ok(match (pending.is_empty(), pause_at_most) {
                (true, _) => Attempt::Done(()),
                (false, Some(within)) => Attempt::ConflictWithin(within),
                (false, None) => Attempt::Conflict,
            })
        });
        if let Err(error) = done {
            for (at, change, _) in &pending {
                answers[*at] = Some(Err(change.failed(&error, key)));
            }
        }
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(mismatched(None))))
            .collect()
    }

    /// Renews leases held in `target` (of `key`) in one commit: each live one to *now + its
    /// ttl*; an expired one is removed (`Expired`), never revived; an absent one is
    /// `NotFound`. One outcome per item, in order.
    pub(super) fn renew_holders(
        &self,
        target: &HoldersDoc,
        key: &Key,
        items: &[(&LockId, Ttl)],
    ) -> Result<Vec<Result<Outcome<Extension>>>> {
        self.check_skew()?;
        let changes = items
            .iter()
            .map(|(lock_id, ttl)| PermitChange::Renew {
                lock_id: lock_id.as_str().to_owned(),
                ttl: *ttl,
            })
            .collect();
        Ok(self
            .change_holders(target, key, changes)
            .into_iter()
            .map(|answer| match answer {
                Ok(PermitAnswer::Renewed(outcome)) => Ok(outcome),
                other => Err(mismatched(Some(other))),
            })
            .collect())
    }

    /// Makes `change` alone to `target` (of `key`), read and committed in one read-write
    /// transaction (`transaction.rs`): a writer that comes between its read and its commit
    /// waits for it, so holders renewing back to back cannot keep it out (an operator's
    /// break). One attempt, for [`with_retries`](super::commit::with_retries); not through
    /// the combiner: this backend's other changes to the document wait for it instead of
    /// sharing its write, and a semaphore's document it remembers is read again, as after
    /// any other writer's.
    pub(super) fn change_in_transaction(
        &self,
        target: &HoldersDoc,
        key: &Key,
        change: &mut PermitChange,
    ) -> OpResult<Attempt<PermitAnswer>> {
        let decide = |transaction: &Transaction| {
            let (source, mut doc) = self.read_holders(Some(transaction), target, key)?;
            let now = self.now_ms()?;
            let writer = source.writer(key, now)?;
            let applied = change.apply(&mut doc, now, self.line_now_ms()?, writer.is_some(), key);
            if !applied.wrote {
                return Ok(Decided::Answer(applied));
            }
            let write = source.write(target, key, &doc, writer.as_ref())?;
            Ok(Decided::Write {
                writes: vec![write],
                answer: applied,
            })
        };
        Ok(match transact(&self.rest, decide)? {
            Transacted::Done(applied) => Attempt::Done(applied.answer?),
            Transacted::Conflict => Attempt::Conflict,
            Transacted::Unanswered(applied) => {
                change.may_have_been_written(&applied);
                Attempt::Conflict
            }
        })
    }

    /// One attempt at `changes` (the combiner's write): each handed back with its step.
    fn write_holders(
        &self,
        target: &HoldersDoc,
        key: &Key,
        mut changes: Vec<PermitChange>,
        last: &mut Option<Committed>,
    ) -> Vec<Result<Tried>> {
        let steps = match self.attempt_holders(target, key, &mut changes, last) {
            Ok(steps) => steps,
            Err(error) => {
                let error = lock_error(&self.rest, error);
                changes
                    .iter()
                    .map(|change| Step::Answered(Err(change.failed(&error, key))))
                    .collect()
            }
        };
        changes
            .into_iter()
            .zip(steps)
            .map(|(change, step)| Ok(Tried { change, step }))
            .collect()
    }

    /// Applies `changes` in order to `target` as read (or, for a semaphore, as this backend's
    /// `last` commit left it), and commits it if any changed it: one step per change.
    ///
    /// Answers worked out from `last` rather than a read are only given when its commit
    /// succeeds, which proves the document was still as `last` says; changes that write
    /// nothing are answered from a read. A fence counter document is never remembered: a
    /// reader's acquisition needs the lock document read beside it.
    fn attempt_holders(
        &self,
        target: &HoldersDoc,
        key: &Key,
        changes: &mut [PermitChange],
        last: &mut Option<Committed>,
    ) -> OpResult<Vec<Step>> {
        let (source, doc, now, applied, writer) = loop {
            let remembered = last.take();
            let from_memory = remembered.is_some();
            let (source, mut doc) = match remembered {
                Some(Committed { update_time, doc }) => {
                    (Source::Semaphore(json!({ "updateTime": update_time })), doc)
                }
                None => self.read_holders(None, target, key)?,
            };
            let now = self.now_ms()?;
            let line_now = self.line_now_ms()?;
            let writer = source.writer(key, now)?;
            let applied: Vec<Applied> = changes
                .iter()
                .map(|change| change.apply(&mut doc, now, line_now, writer.is_some(), key))
                .collect();
            if applied.iter().any(|applied| applied.wrote) {
                break (source, doc, now, applied, writer);
            }
            if !from_memory {
                return Ok(answered(applied));
            }
        };
        let write = source.write(target, key, &doc, writer.as_ref())?;
        match self.rest.commit_versions(vec![write]) {
            Ok(Some(times)) => {
                if let Source::Semaphore(_) = source {
                    *last = times
                        .into_iter()
                        .next()
                        .flatten()
                        .map(|update_time| Committed { update_time, doc });
                }
                Ok(answered(applied))
            }
            Ok(None) => Ok(applied
                .iter()
                .map(|a| Step::Again(within(a, now)))
                .collect()),
            Err(error) if error.is_aborted() => {
                self.aborted_retries.fetch_add(1, Ordering::Relaxed);
                Ok(applied
                    .iter()
                    .map(|a| Step::Again(within(a, now)))
                    .collect())
            }
            Err(error) => {
                if error.may_have_been_applied() {
                    for (change, applied) in changes.iter_mut().zip(&applied) {
                        change.may_have_been_written(applied);
                    }
                }
                if !error.is_worth_retrying_now() {
                    return Err(error.into());
                }
                let error = self.rest.lock_error(error);
                log::debug!("syncguard: Firestore holders' write read again: {error}");
                Ok(applied
                    .iter()
                    .map(|a| {
                        let copy = LockError::new(error.code(), error.message());
                        Step::AgainUnanswered(copy, within(a, now))
                    })
                    .collect())
            }
        }
    }

    /// `target` (of `key`) read in one `batchGet`, inside `transaction` when given.
    fn read_holders(
        &self,
        transaction: Option<&Transaction>,
        target: &HoldersDoc,
        key: &Key,
    ) -> OpResult<(Source, SemaphoreDoc)> {
        Ok(match target {
            HoldersDoc::Semaphore(name) => {
                let (read, doc) = self.read_semaphore_in(transaction, name, key)?;
                (Source::Semaphore(unchanged_since(read.as_ref())), doc)
            }
            HoldersDoc::Readers {
                lock_name,
                counter_name,
            } => {
                let [lock_read, counter_read] =
                    (self.rest).batch_get_in(transaction, [lock_name, counter_name])?;
                let mut shell =
                    CounterDoc::parse(counter_name.clone(), counter_read, key.as_str())?;
                let doc = SemaphoreDoc {
                    counter: shell.counter,
                    permits: std::mem::take(&mut shell.readers),
                    line: std::mem::take(&mut shell.line),
                };
                (Source::Counter { shell, lock_read }, doc)
            }
        })
    }
}

impl Source {
    /// The key's live exclusive lock at `now`, for a fence counter document (a semaphore has
    /// none).
    fn writer(&self, key: &Key, now: i64) -> Result<Option<LockDoc>> {
        match self {
            Source::Semaphore(_) => Ok(None),
            Source::Counter { lock_read, .. } => live_lock(lock_read.as_ref(), key.as_str(), now),
        }
    }

    /// The write of `doc` over `target`, applied only if it is still as read (or remembered);
    /// `writer` is the key's live lock as [`writer`](Source::writer) found it.
    fn write(
        &self,
        target: &HoldersDoc,
        key: &Key,
        doc: &SemaphoreDoc,
        writer: Option<&LockDoc>,
    ) -> Result<Value> {
        match (self, target) {
            (Source::Semaphore(precondition), HoldersDoc::Semaphore(name)) => Ok(json!({
                "update": { "name": name, "fields": doc.fields(key.as_str())? },
                "currentDocument": precondition,
            })),
            (Source::Counter { shell, .. }, _) => {
                let written = CounterDoc {
                    name: shell.name.clone(),
                    read: shell.read.clone(),
                    counter: doc.counter,
                    line: doc.line.clone(),
                    readers: doc.permits.clone(),
                };
                written.place_write(key.as_str(), writer)
            }
            (Source::Semaphore(_), HoldersDoc::Readers { .. }) => Err(LockError::internal(
                "a Firestore fence counter document was remembered as a semaphore's",
            )),
        }
    }
}

/// The steps of changes applied to a document that was written (or needed no write).
fn answered(applied: Vec<Applied>) -> Vec<Step> {
    applied
        .into_iter()
        .map(|applied| Step::Answered(applied.answer))
        .collect()
}

/// How soon a change that lost its commit must try again: before the lease it renews or
/// removes runs out (by the expiry read, with the tolerance), if it does.
fn within(applied: &Applied, now: i64) -> Option<Duration> {
    let expiry = applied.live_until.filter(|_| applied.wrote)?;
    let left = expiry.saturating_add(TIME_TOLERANCE_MS).saturating_sub(now);
    Some(Duration::from_millis(u64::try_from(left).unwrap_or(0)))
}
