//! Releasing and extending leases on PostgreSQL ([`Driver::release_lease`],
//! [`Driver::extend_leases`]): a lock by its lock id alone (its statement, inline too on tables
//! without this version's functions), a permit or a shared hold by its key and lock id (their
//! functions only, [`Keyed`]). A heartbeat's batch is one statement per kind of lease in it. A
//! lock's extension that carries a holder text (a leader's proclaim) has a statement of its
//! own, so that the others keep theirs.
//!
//! [`Driver::release_lease`]: crate::driver::Driver::release_lease
//! [`Driver::extend_leases`]: crate::driver::Driver::extend_leases

use postgres::Row;
use postgres::error::SqlState;

use super::client::Param;
use super::driver::{Keyed, PostgresBackend};
use super::errors::ServerError;
use super::rows::not_a_record;
use super::rows::storage_key_of;
use super::rows::{answer_row, column};
use super::tables::TableNames;
use crate::driver::{Extension, Holder, LeaseRef, Outcome, TIME_TOLERANCE_MS, Ttl};
use crate::error::{ErrorCode, LockError, Result};

impl PostgresBackend {
    /// Releases the lock `lease` names, by its lock id (one statement).
    pub(super) fn release_lock(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let rows = self.query(
            &self.statements.release,
            vec![lease.lock_id.as_str().into(), TIME_TOLERANCE_MS.into()],
        )?;
        let Some(row) = rows.first() else {
            return Ok(Outcome::NotFound);
        };
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        // The statement answers no row when nothing was found, its function a row of NULLs.
        release_outcome(row)
    }

    /// Releases the permit or shared hold `lease` names (one call of `keyed`'s function).
    pub(super) fn release_keyed_lease(
        &self,
        keyed: Keyed<'_>,
        lease: LeaseRef<'_>,
    ) -> Result<Outcome<()>> {
        let key = lease.permit_key()?;
        let storage_key = storage_key_of(key)?;
        let rows = self.call_function(
            keyed.feature,
            keyed.release,
            vec![
                storage_key.as_str().into(),
                lease.lock_id.as_str().into(),
                TIME_TOLERANCE_MS.into(),
            ],
        )?;
        release_outcome(answer_row(&rows, "release")?)
    }

    /// Extends the permits or shared holds among `leases` in one call of `keyed`'s function
    /// (one statement): one answer per lease, in order. A lease whose key cannot be stored gets
    /// its own error, before any I/O.
    pub(super) fn extend_keyed_leases(
        &self,
        keyed: Keyed<'_>,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> = Vec::with_capacity(leases.len());
        let (mut keys, mut lock_ids, mut ttls, mut sent) = (vec![], vec![], vec![], vec![]);
        for (index, (lease, ttl)) in leases.iter().enumerate() {
            if lease.holder.is_some() {
                answers.push(Some(Err(LockError::invalid_argument(
                    "only a lock's holder text can be replaced",
                ))));
                continue;
            }
            match lease.permit_key().and_then(storage_key_of) {
                Ok(storage_key) => {
                    keys.push(storage_key);
                    lock_ids.push(lease.lock_id.as_str().to_owned());
                    ttls.push(ttl.as_millis());
                    sent.push(index);
                    answers.push(None);
                }
                Err(error) => answers.push(Some(Err(error))),
            }
        }
        if !sent.is_empty() {
            let rows = self.call_function(
                keyed.feature,
                keyed.renew,
                vec![
                    keys.into(),
                    lock_ids.into(),
                    ttls.into(),
                    TIME_TOLERANCE_MS.into(),
                ],
            );
            match rows {
                Ok(rows) => {
                    for row in &rows {
                        let answer = extension_outcome(row);
                        let position = column::<i64>(row, "ord")
                            .ok()
                            .and_then(|ord| usize::try_from(ord).ok())
                            .and_then(|ord| sent.get(ord.wrapping_sub(1)));
                        if let Some(&index) = position {
                            answers[index] = Some(answer);
                        }
                    }
                }
                Err(error) => {
                    for &index in &sent {
                        answers[index] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(skipped())))
            .collect()
    }

    /// Extends the locks among `leases`: one answer per lease, in order. One lease (a guard's
    /// extension) is one statement of its own; several (a heartbeat's batch) one statement for
    /// them all.
    pub(super) fn extend_lock_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        if let [(lease, ttl)] = leases {
            return vec![self.extend_lock(*lease, *ttl)];
        }
        if leases.iter().any(|(lease, _)| lease.holder.is_some()) {
            // A proclaim among them (rare): each lease on its own.
            return (leases.iter())
                .map(|(lease, ttl)| self.extend_lock(*lease, *ttl))
                .collect();
        }
        let lock_ids: Vec<String> = leases
            .iter()
            .map(|(lease, _)| lease.lock_id.as_str().to_owned())
            .collect();
        let ttls: Vec<i64> = leases.iter().map(|(_, ttl)| ttl.as_millis()).collect();
        let rows = match self.query(
            &self.statements.extend_many,
            vec![lock_ids.into(), ttls.into(), TIME_TOLERANCE_MS.into()],
        ) {
            Ok(rows) => rows,
            Err(error) => {
                return leases
                    .iter()
                    .map(|_| Err(LockError::new(error.code(), error.message())))
                    .collect();
            }
        };
        let mut answers: std::collections::HashMap<String, Result<Outcome<Extension>>> = rows
            .iter()
            .map(|row| {
                let lock_id: String = column(row, "lock_id")?;
                let outcome = renewal_outcome(row, &self.tables);
                Ok((lock_id, outcome))
            })
            .collect::<Result<_>>()
            .unwrap_or_default();
        leases
            .iter()
            .map(|(lease, _)| {
                (answers.remove(lease.lock_id.as_str())).unwrap_or_else(|| Err(skipped()))
            })
            .collect()
    }

    /// Extends the lock `lease` names, by its lock id (one statement); with its holder text
    /// when it carries one ([`proclaim`](Self::proclaim)).
    fn extend_lock(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let params = vec![
            lease.lock_id.as_str().into(),
            ttl.as_millis().into(),
            TIME_TOLERANCE_MS.into(),
        ];
        let rows = match lease.holder {
            Some(holder) => self.proclaim(params, holder)?,
            None => self.query(&self.statements.extend, params)?,
        };
        let row = answer_row(&rows, "extend")?;
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        extension_outcome(row)
    }
}

impl PostgresBackend {
    /// The extension `params` (`extend`'s) storing `holder` too, by its own statement sent
    /// inline. On tables without the `holder` column (made by the TypeScript SyncGuard, where
    /// no acquisition stores a holder text either) the extension alone.
    fn proclaim(&self, mut params: Vec<Param>, holder: &Holder) -> Result<Vec<Row>> {
        params.push(holder.as_str().into());
        match self.connections.query(&self.statements.proclaim, &params) {
            // Refused before it ran.
            Err(error) if lacks_holder(&error) => {
                params.pop();
                self.query(&self.statements.extend, params)
            }
            answer => answer,
        }
    }
}

/// Whether `error` says the lock table has no `holder` column (the statement did not run).
pub(super) fn lacks_holder(error: &LockError) -> bool {
    ServerError::state_of(error) == Some(&SqlState::UNDEFINED_COLUMN)
        && error.message().contains("holder")
}

/// A release's row: `live` NULL when nothing was stored under the lease, else whether it was
/// live.
fn release_outcome(row: &Row) -> Result<Outcome<()>> {
    Ok(match column::<Option<bool>>(row, "live")? {
        Some(true) => Outcome::Applied(()),
        Some(false) => Outcome::Expired,
        None => Outcome::NotFound,
    })
}

/// The answer for a lease a batch renewal's rows did not mention.
fn skipped() -> LockError {
    LockError::internal("the batch renewal skipped a lease")
}

/// One lease's row of the batch renewal.
fn renewal_outcome(row: &Row, tables: &TableNames) -> Result<Outcome<Extension>> {
    if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
        return Err(not_a_record(tables, &key));
    }
    if let Some(expires_at_ms) = column::<Option<i64>>(row, "expires_at_ms")? {
        return Ok(Outcome::Applied(Extension {
            expires_at_ms,
            version: None,
        }));
    }
    match (
        column::<bool>(row, "present")?,
        column::<bool>(row, "live")?,
    ) {
        (false, _) => Ok(Outcome::NotFound),
        (true, false) => Ok(Outcome::Expired),
        // Skipped: another transaction holds the row. Transient: the heartbeat tries again.
        (true, true) => Err(LockError::new(
            ErrorCode::ServiceUnavailable,
            "the lock row is locked by another transaction; renewal postponed",
        )),
    }
}

/// One lease's row of an extension, a lock's (once its `malformed_key` is checked) or a
/// permit's renewal: `expires_at_ms` when extended, else whether it was `present`.
fn extension_outcome(row: &Row) -> Result<Outcome<Extension>> {
    Ok(match column::<Option<i64>>(row, "expires_at_ms")? {
        Some(expires_at_ms) => Outcome::Applied(Extension {
            expires_at_ms,
            version: None,
        }),
        // Found, but expired: left in place, never extended.
        None if column::<bool>(row, "present")? => Outcome::Expired,
        None => Outcome::NotFound,
    })
}
