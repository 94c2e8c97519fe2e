//! Compare-and-set commits: every write is conditioned on the document being as read (its
//! `updateTime`, or its absence), and an operation whose commit meets a transaction (ABORTED)
//! or loses a race ([`Attempt::Conflict`]) reads and tries again, a bounded number of times.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::rest::{Document, RestClient, RestError, integer_value, string_value};
use crate::driver::Holder;
use crate::error::{ErrorCode, LockError, Result};

/// Attempts of an operation whose commit keeps conflicting before giving up.
const CAS_ATTEMPTS: u32 = 6;

/// Why an operation failed, until it reaches the caller: a REST call, kept typed so that a
/// conflict (ABORTED) is told apart from a failure, or anything else, already a [`LockError`].
pub(super) enum OpError {
    Rest(RestError),
    Lock(LockError),
}

impl From<RestError> for OpError {
    fn from(error: RestError) -> Self {
        OpError::Rest(error)
    }
}

impl From<LockError> for OpError {
    fn from(error: LockError) -> Self {
        OpError::Lock(error)
    }
}

pub(super) type OpResult<T> = std::result::Result<T, OpError>;

/// The write of a lock's renewal, applied only if the document is unchanged since
/// `update_time`: the plain one, or the one that also replaces the holder text when `holder`
/// is given (a leader's proclaim).
pub(super) fn extension_write(
    name: &str,
    expires_at_ms: i64,
    holder: Option<&Holder>,
    update_time: &str,
) -> Value {
    match holder {
        None => renewal_write(name, expires_at_ms, update_time),
        Some(holder) => proclaim_write(name, expires_at_ms, holder, update_time),
    }
}

/// The write that moves a lock document's expiry, if it is unchanged since `update_time`.
fn renewal_write(name: &str, expires_at_ms: i64, update_time: &str) -> Value {
    json!({
        "update": { "name": name, "fields": { "expiresAtMs": integer_value(expires_at_ms) } },
        "updateMask": { "fieldPaths": ["expiresAtMs"] },
        "currentDocument": { "updateTime": update_time },
    })
}

/// The write that moves a lock document's expiry and replaces its holder text, if it is
/// unchanged since `update_time`. A shape of its own, so that the plain renewal
/// ([`renewal_write`]) stays the one-field write the TypeScript SyncGuard also makes.
fn proclaim_write(name: &str, expires_at_ms: i64, holder: &Holder, update_time: &str) -> Value {
    json!({
        "update": { "name": name, "fields": {
            "expiresAtMs": integer_value(expires_at_ms),
            "holder": string_value(holder.as_str()),
        }},
        "updateMask": { "fieldPaths": ["expiresAtMs", "holder"] },
        "currentDocument": { "updateTime": update_time },
    })
}

/// The outcome of one read-and-commit attempt.
pub(super) enum Attempt<T> {
    Done(T),
    /// The commit's precondition failed: the document changed after the read.
    Conflict,
    /// As [`Conflict`](Attempt::Conflict), and the next attempt must start within this
    /// (a lease it renews runs out then).
    ConflictWithin(Duration),
}

/// The precondition that a document is still as read: same `updateTime`, or still absent.
pub(super) fn unchanged_since(document: Option<&Document>) -> Value {
    match document {
        Some(document) => json!({ "updateTime": document.update_time() }),
        None => json!({ "exists": false }),
    }
}

/// The error the caller sees: a REST failure names the endpoint, the project and the database.
pub(super) fn lock_error(rest: &RestClient, error: OpError) -> LockError {
    match error {
        OpError::Rest(error) => rest.lock_error(error),
        OpError::Lock(error) => error,
    }
}

/// Runs an operation made of a read and a compare-and-set commit, again (after a short jittered
/// pause) when the commit met a transaction (ABORTED, counted in `aborted_retries`) or lost a
/// race ([`Attempt::Conflict`]).
pub(super) fn with_retries<T>(
    rest: &RestClient,
    aborted_retries: &AtomicU64,
    attempt: impl FnMut() -> OpResult<Attempt<T>>,
) -> Result<T> {
    with_retries_up_to(CAS_ATTEMPTS, rest, aborted_retries, attempt)
}

/// [`with_retries`] with up to `attempts` attempts, for documents with many writers (a
/// semaphore's: every holder of every permit writes it), where a lost race is common and
/// says nothing about the outcome. Pauses stop growing at the sixth attempt's.
pub(super) fn with_retries_up_to<T>(
    attempts: u32,
    rest: &RestClient,
    aborted_retries: &AtomicU64,
    mut attempt: impl FnMut() -> OpResult<Attempt<T>>,
) -> Result<T> {
    let mut tries = 1;
    loop {
        let mut pause_at_most = Duration::MAX;
        match attempt() {
            Ok(Attempt::Done(value)) => return Ok(value),
            Ok(Attempt::Conflict) => {}
            Ok(Attempt::ConflictWithin(within)) => pause_at_most = within,
            Err(OpError::Rest(error)) if error.is_aborted() => {
                aborted_retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => return Err(lock_error(rest, error)),
        }
        if tries >= attempts {
            return Err(LockError::new(
                ErrorCode::ServiceUnavailable,
                format!("Firestore kept changing under this operation ({attempts} attempts)"),
            ));
        }
        // Jittered, so that writers who met here do not meet again at the next attempt.
        let base = 10u64 << tries.min(CAS_ATTEMPTS);
        let pause = Duration::from_millis(base / 2 + rand::random_range(0..=base / 2));
        std::thread::sleep(pause.min(pause_at_most));
        tries += 1;
    }
}
