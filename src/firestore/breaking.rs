//! An operator's forced release ([`Driver::break_leases`](crate::driver::Driver::break_leases))
//! on Firestore: the live holders a [`BreakOrder`] names removed, a marker lease in the place of
//! each, all in one commit of the documents as read, inside a read-write transaction (DESIGN
//! §4.4, `transaction.rs`).
//!
//! Why a transaction, when every other mutation here is a compare-and-set without one: a
//! holder renewing back to back commits between the break's read and its commit at every
//! attempt, and would keep the break out for as long as it renews. The transaction locks the
//! documents the break read: a renewal (or any writer) that comes in between waits for the
//! break's commit, then fails its own precondition and finds its lease gone.
//!
//! A lock: `beginTransaction`, one `batchGet` of its lock and fence counter documents, then
//! one `commit` of both: the lock document replaced by the marker's (a whole lock document in
//! the TypeScript SyncGuard's format, `holder` the operator's note) and the counter raised to
//! the marker's fence, or, without a marker, the lock document deleted. Permits and shared
//! holds: a change to the one document they are kept in
//! ([`PermitChange::Break`](super::semaphore_change::PermitChange)), which moves its own
//! counter (the semaphore's, or the lock's for readers), made alone in a transaction
//! ([`change_in_transaction`](FirestoreBackend::change_in_transaction)). Nothing to break:
//! the transaction is rolled back. A transaction that meets another (ABORTED) begins again; a
//! commit without a usable answer is read again, and the break it sent is recognised by its
//! markers (or, without markers, by its holders all gone).
//!
//! Liveness and the markers' times are by the client clock, as for every lease here.

use serde_json::json;

use super::commit::{Attempt, OpResult, with_retries};
use super::document::LockDoc;
use super::driver::FirestoreBackend;
use super::holders_break::{BreakAsk, was_applied};
use super::lock_take::LockRead;
use super::rest::Transaction;
use super::semaphore_change::mismatched;
use super::semaphore_change::{PermitAnswer, PermitChange};
use super::transaction::{Decided, Transacted, transact};
use crate::driver::{BreakOrder, Broken, Key, TIME_TOLERANCE_MS, is_live, marker_expiry};
use crate::error::Result;
use crate::fence::Fence;

impl FirestoreBackend {
    /// Breaks the lock `order` names (see the module docs).
    pub(super) fn break_lock(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        // The break a commit without a usable answer carried.
        let mut sent: Option<Broken> = None;
        with_retries(&self.rest, &self.aborted_retries, || {
            self.break_lock_once(order, &mut sent)
        })
    }

    /// Breaks the permits or shared holds `order` names: a change to their document, made in
    /// a transaction, as a lock's break is (see [`break_lock_once`](Self::break_lock_once)).
    pub(super) fn break_held(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        let target = self.holders_doc(order.key, order.kind)?;
        let mut change = PermitChange::Break {
            ask: BreakAsk::of(order),
            sent: None,
        };
        let answer = with_retries(&self.rest, &self.aborted_retries, || {
            self.change_in_transaction(&target, order.key, &mut change)
        });
        match answer {
            Ok(PermitAnswer::Broken(broken)) => Ok(broken),
            other => Err(mismatched(Some(other))),
        }
    }

    /// One read of the lock's documents and one commit, in a transaction: the documents
    /// read are locked until the commit, so a renewal or release of the lock that comes in
    /// between waits for the break and then finds its lease gone, instead of changing the
    /// documents under the break — a holder renewing back to back would otherwise fail the
    /// break's preconditions at every attempt, and keep an operator's break out.
    fn break_lock_once(
        &self,
        order: &BreakOrder<'_>,
        sent: &mut Option<Broken>,
    ) -> OpResult<Attempt<Broken>> {
        let decide = |transaction: &Transaction| self.decide_break(transaction, order, sent);
        Ok(match transact(&self.rest, decide)? {
            Transacted::Done(broken) => Attempt::Done(broken),
            Transacted::Conflict => Attempt::Conflict,
            Transacted::Unanswered(broken) => {
                *sent = Some(broken);
                Attempt::Conflict
            }
        })
    }

    /// What the break of the lock `order` names writes, from its documents read in
    /// `transaction`; or its answer, when it writes nothing.
    fn decide_break(
        &self,
        transaction: &Transaction,
        order: &BreakOrder<'_>,
        sent: &mut Option<Broken>,
    ) -> OpResult<Decided<Broken>> {
        let key: &Key = order.key;
        let names = self.lock_names(key.as_str())?;
        let read = self
            .rest
            .batch_get_in(Some(transaction), [&names[0], &names[1]])?;
        let now = self.now_ms()?;
        let lock = (read[0].as_ref())
            .map(|document| LockDoc::parse(document, Some(key.as_str())))
            .transpose()?;
        if let Some(sent) = sent.take()
            && was_applied(&sent, |id| lock.as_ref().is_some_and(|l| l.lock_id == id))
        {
            return Ok(Decided::Answer(sent));
        }
        let ask = BreakAsk::of(order);
        let Some(lock) = lock.filter(|lock| ask.picks(&lock.lock_id)) else {
            return Ok(Decided::Answer(Broken::default()));
        };
        let delete = json!({
            "delete": lock.name,
            "currentDocument": { "updateTime": lock.update_time },
        });
        let live = is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS);
        let marker_until = marker_expiry(order.delay, lock.expires_at_ms, now).filter(|_| live);
        let mut broken = Broken::default();
        let writes = match marker_until {
            // Expired (removed, not answered), or broken without a marker.
            None => vec![delete],
            Some(expires_at_ms) => {
                // Above the counter and the broken lock's fence both: a lock written by hand
                // may have no counter.
                let lock_read = LockRead::new(key.as_str(), names, read, None, now)?;
                let counter = lock_read.counter.counter.max(lock.fence.value());
                let fence =
                    Fence::from_counter(counter + 1).map_err(|e| e.with_key(key.as_str()))?;
                let marker = ask.marker(fence, expires_at_ms, now);
                let writes =
                    lock_read.take(&marker.lock_id, fence, now, expires_at_ms, Some(&ask.note));
                broken.markers.push(marker.record(key.as_str()));
                writes.into()
            }
        };
        if live {
            broken.holders.push(lock.record());
        }
        Ok(Decided::Write {
            writes,
            answer: broken,
        })
    }
}
