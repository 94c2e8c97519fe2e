//! A read and a commit inside one read-write transaction, for the rare operation that must
//! not lose the documents it read to another writer before its commit: an operator's break.
//!
//! Every other mutation here is a compare-and-set commit of documents read without a
//! transaction (see the module docs of `firestore`): a writer that commits between the read
//! and the commit makes it fail, and it reads again. A holder that renews back to back lands
//! there at every attempt, and would keep a break out for as long as it renews. Firestore's
//! transactions lock the documents they read, found or missing, until they commit or roll
//! back: a commit of another writer that comes in between waits for the transaction (the
//! emulator and Firestore both), then meets the documents as the transaction left them — its
//! own precondition fails, and it reads again. The transaction's own precondition still holds.
//!
//! Requests: `beginTransaction`, the reads, `commit`; or `rollback` in place of the commit
//! when nothing is written or the operation fails before its commit, and after a commit
//! without a usable answer (had it been lost on its way, the documents would stay locked
//! until Firestore ends the transaction itself).

use serde_json::Value;

use super::commit::OpResult;
use super::rest::{RestClient, Transaction};

/// What an operation decided from the documents it read in its transaction.
pub(super) enum Decided<T> {
    /// Nothing to write: this is the answer.
    Answer(T),
    /// These writes, and this answer once they are committed.
    Write { writes: Vec<Value>, answer: T },
}

/// How a transaction ended.
pub(super) enum Transacted<T> {
    /// Committed (or nothing to write): the answer.
    Done(T),
    /// The commit's precondition failed (not expected while the transaction holds the
    /// documents): read and decide again.
    Conflict,
    /// The commit got no usable answer and may have been applied: the answer it carried, to
    /// recognise it by when the documents are read again.
    Unanswered(T),
}

/// Begins a transaction, reads and decides in it with `decide`, and commits what it decided
/// (or rolls it back). Firestore's ABORTED (the transaction met another one) comes back as
/// the error it is, for [`with_retries`](super::commit::with_retries) to try again.
pub(super) fn transact<T>(
    rest: &RestClient,
    decide: impl FnOnce(&Transaction) -> OpResult<Decided<T>>,
) -> OpResult<Transacted<T>> {
    let transaction = rest.begin_transaction()?;
    let (writes, answer) = match decide(&transaction) {
        Ok(Decided::Write { writes, answer }) => (writes, answer),
        Ok(Decided::Answer(answer)) => {
            roll_back(rest, &transaction);
            return Ok(Transacted::Done(answer));
        }
        Err(error) => {
            roll_back(rest, &transaction);
            return Err(error);
        }
    };
    match rest.commit_versions_in(&transaction, writes) {
        Ok(Some(_)) => Ok(Transacted::Done(answer)),
        Ok(None) => Ok(Transacted::Conflict),
        Err(error)
            if !error.is_aborted()
                && error.may_have_been_applied()
                && error.is_worth_retrying_now() =>
        {
            roll_back(rest, &transaction);
            let error = rest.lock_error(error);
            log::debug!("syncguard: Firestore transaction's commit read again: {error}");
            Ok(Transacted::Unanswered(answer))
        }
        Err(error) => Err(error.into()),
    }
}

/// Ends `transaction` without writing. A rollback that fails leaves the documents locked until
/// Firestore ends the transaction itself: later writers wait longer, nothing is lost.
fn roll_back(rest: &RestClient, transaction: &Transaction) {
    if let Err(error) = rest.rollback(transaction) {
        let error = rest.lock_error(error);
        log::debug!("syncguard: Firestore transaction not rolled back: {error}");
    }
}
