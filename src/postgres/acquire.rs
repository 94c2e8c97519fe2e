//! One key's acquisition on PostgreSQL, in every mode ([`Driver::try_acquire`] with one key):
//! one call of the mode's server function — the lock's `acquire`, a semaphore's
//! `permit_acquire`, a shared hold's `shared_acquire` — with the same parameters
//! ([`acquire_params`]), and its one row read the same way ([`acquisition`]). The lock's
//! statement is also sent inline on tables without this version's functions; the other two have
//! no inline form ([`PostgresBackend::call_function`]). Several keys: `set.rs`.
//!
//! [`Driver::try_acquire`]: crate::driver::Driver::try_acquire

use postgres::Row;

use super::client::Param;
use super::driver::{Feature, PostgresBackend};
use super::errors::ServerError;
use super::line_sql::line_params;
use super::rows::{answer_row, column, fence_key_of, not_a_record, storage_key_of};
use crate::driver::{
    Acquisitions, FENCE_MAX, Holder, Key, Lease, Line, LockId, Mode, Request, TIME_TOLERANCE_MS,
    Ttl,
};
use crate::error::{LockError, Result};
use crate::fence::Fence;

impl PostgresBackend {
    /// `request` for its one key, `key`, in one call of its mode's function.
    pub(super) fn acquire_key(&self, key: &Key, request: &Request<'_>) -> Result<Acquisitions> {
        let storage_key = storage_key_of(key)?;
        let lock_id = LockId::generate().into_string();
        // `$5`: the lock's fence key (a shared hold takes its fence from the lock's counter),
        // or the semaphore's number of permits.
        let fifth: Param = match request.mode {
            Mode::Permit(permits) => i64::from(permits.get()).into(),
            Mode::Exclusive | Mode::Shared => fence_key_of(&storage_key)?.as_str().into(),
        };
        let params = acquire_params(
            storage_key.as_str(),
            lock_id.as_str(),
            request.ttl,
            key.as_str(),
            fifth,
            request.holder,
            request.line,
        );
        let statements = &self.statements;
        let (rows, what) = match request.mode {
            Mode::Exclusive => (self.query(&statements.acquire, params), "acquire"),
            Mode::Shared => {
                let op = &statements.shared_acquire;
                let rows = self.call_function(Feature::SharedHolds, op, params);
                (rows, "shared acquire")
            }
            Mode::Permit(_) => {
                let op = &statements.permit_acquire;
                let rows = self.call_function(Feature::Semaphores, op, params);
                (rows, "permit acquire")
            }
        };
        let rows = rows.map_err(|error| in_doubt_if_unanswered(error, &lock_id, key))?;
        let row = answer_row(&rows, what)?;
        // A semaphore has no lock row to find malformed (its function answers no `malformed`).
        if !matches!(request.mode, Mode::Permit(_))
            && column::<Option<bool>>(row, "malformed")? == Some(true)
        {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        acquisition(row, lock_id, key)
    }
}

/// An acquisition's error: in doubt when it was sent without an answer, for the server may
/// still grant the lock (or the permit) under `lock_id` (the Locker releases it).
fn in_doubt_if_unanswered(error: LockError, lock_id: &str, key: &Key) -> LockError {
    if ServerError::is_unanswered(&error) {
        error.in_doubt(lock_id).with_key(key.as_str())
    } else {
        error
    }
}

/// The parameters of every acquisition — a lock's, a permit's, a shared hold's, and a set's with
/// an array in each of `$1`, `$2`, `$4` and `$5` (see `Statements::acquire`,
/// `Statements::permit_acquire`, `Statements::acquire_all`): the same but `$5`, `fifth` — the
/// lock's fence key, the semaphore's number of permits — and then the line's mode, place and
/// ticket (`line_params`).
pub(super) fn acquire_params(
    storage_key: impl Into<Param>,
    lock_id: impl Into<Param>,
    ttl: Ttl,
    key: impl Into<Param>,
    fifth: impl Into<Param>,
    holder: Option<&Holder>,
    line: Line<'_>,
) -> Vec<Param> {
    let (mode, place, ticket) = line_params(line);
    vec![
        storage_key.into(),
        lock_id.into(),
        ttl.as_millis().into(),
        key.into(),
        fifth.into(),
        (FENCE_MAX as i64).into(),
        TIME_TOLERANCE_MS.into(),
        // The functions only: the lock's statement sent inline never stores a holder, and
        // knows no line.
        holder.map(Holder::as_str).into(),
        mode.into(),
        place.into(),
        ticket.into(),
    ]
}

/// What an acquisition, of a lock, a permit or a shared hold, answered (`fence`,
/// `expires_at_ms`, `bad_counter`, `places_ahead`): granted under `lock_id`; refused before
/// anything was written, for a fence counter no fence can follow; or held by others.
fn acquisition(row: &Row, lock_id: String, key: &Key) -> Result<Acquisitions> {
    let fence: Option<String> = column(row, "fence")?;
    let expires_at_ms: Option<i64> = column(row, "expires_at_ms")?;
    match (fence, expires_at_ms) {
        (Some(fence), Some(expires_at_ms)) => {
            let lease = granted(lock_id, &fence, expires_at_ms, key)?;
            Ok(Acquisitions::Acquired(vec![(lease, None)]))
        }
        _ if let Some(counter) = column::<Option<i64>>(row, "bad_counter")? => {
            Err(bad_counter_error(counter).with_key(key.as_str()))
        }
        _ => Ok(Acquisitions::locked_at(position(row)?)),
    }
}

/// A refused waiter's place in line (`places_ahead`: how many live places stand ahead of its
/// own, on the line where it stands furthest back), when it stands in one. The lock's statement
/// sent inline knows no line and answers no such column.
pub(super) fn position(row: &Row) -> Result<Option<u64>> {
    if !row.columns().iter().any(|c| c.name() == "places_ahead") {
        return Ok(None);
    }
    let ahead = column::<Option<i64>>(row, "places_ahead")?;
    Ok(ahead.and_then(|ahead| u64::try_from(ahead).ok()))
}

/// A granted lock or permit, from the fence text and the expiry the server answered.
pub(super) fn granted(
    lock_id: String,
    fence: &str,
    expires_at_ms: i64,
    key: &Key,
) -> Result<Lease> {
    let fence: Fence = fence.parse()?;
    // Re-issuing through from_counter applies the warning threshold.
    let fence = Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
    Ok(Lease {
        lock_id,
        fence,
        expires_at_ms,
    })
}

/// The error for a fence counter no fence can follow (acquire wrote nothing).
pub(super) fn bad_counter_error(counter: i64) -> LockError {
    if counter >= FENCE_MAX as i64 {
        LockError::internal(format!(
            "the fence counter of this key is {counter}, at the largest fence {FENCE_MAX}: \
             rotate the key namespace"
        ))
    } else {
        LockError::internal(format!(
            "the fence counter of this key is {counter}, below 0: the counter row was edited; \
             set it to at least the largest fence ever issued for the key"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn nul_keys_are_refused_before_io() {
        let key = |k: &str| Key::new(k).unwrap();
        assert_eq!(
            storage_key_of(&key("a\0b")).unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        assert_eq!(storage_key_of(&key("ab")).unwrap(), "ab");
    }
}
