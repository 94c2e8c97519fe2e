//! Several keys at once on PostgreSQL ([`Driver::try_acquire`](crate::driver::Driver::try_acquire)
//! of a set, exclusive): one call of the set's
//! server function, one statement and one transaction, through a transaction-mode pooler too
//! (what it does, step by step: `lock_sql.rs`). On tables without this version's functions
//! (made by the TypeScript SyncGuard or an earlier syncguard, setup not run since) the keys are
//! taken one at a time ([`acquire_one_by_one`]), each by its statement sent inline.

use super::acquire::{acquire_params, bad_counter_error, granted, position};
use super::driver::{PostgresBackend, function_is_missing};
use super::errors::ServerError;
use super::rows::not_a_record;
use super::rows::{answer_row, column, fence_key_of, storage_key_of};
use crate::driver::{Acquisitions, LockId, Request, acquire_one_by_one};
use crate::error::{LockError, Result};

impl PostgresBackend {
    /// [`Driver::try_acquire`](crate::driver::Driver::try_acquire) of several keys, exclusive:
    /// every key of `request` or none, in one call.
    pub(super) fn acquire_set(&self, request: &Request<'_>) -> Result<Acquisitions> {
        if self.functions_known_missing() {
            return acquire_one_by_one(self, request);
        }
        let keys = request.keys();
        let (mut storage_keys, mut fence_keys, mut user_keys) = (vec![], vec![], vec![]);
        for key in keys {
            let storage_key = storage_key_of(key)?;
            fence_keys.push(fence_key_of(&storage_key)?);
            storage_keys.push(storage_key);
            user_keys.push(key.as_str().to_owned());
        }
        let lock_ids: Vec<String> = keys
            .iter()
            .map(|_| LockId::generate().into_string())
            .collect();
        let params = acquire_params(
            storage_keys,
            lock_ids.clone(),
            request.ttl,
            user_keys.clone(),
            fence_keys,
            request.holder,
            request.line,
        );
        let op = &self.statements.acquire_all;
        let rows = match self.connections.query(&op.call, &params) {
            Ok(rows) => rows,
            // Failed before anything ran: one key at a time is safe.
            Err(error) if function_is_missing(op, &error) => {
                self.functions_missing();
                return acquire_one_by_one(self, request);
            }
            // Sent, not answered: the server may still take every key, under these lock ids.
            Err(error) if ServerError::is_unanswered(&error) => {
                return Err(error.in_doubt_all(user_keys.into_iter().zip(lock_ids)));
            }
            Err(error) => return Err(error),
        };
        let row = answer_row(&rows, "the set's acquisition")?;
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        if let Some(counter) = column::<Option<i64>>(row, "bad_counter")? {
            let error = bad_counter_error(counter);
            return Err(match column::<Option<String>>(row, "bad_key")? {
                Some(key) => error.with_key(key),
                None => error,
            });
        }
        let fences = column::<Option<Vec<String>>>(row, "lock_fences")?;
        let expires_at_ms = column::<Option<i64>>(row, "expires_at_ms")?;
        let (Some(fences), Some(expires_at_ms)) = (fences, expires_at_ms) else {
            let ticket = column::<Option<i64>>(row, "ticket")?;
            return Ok(Acquisitions::Locked {
                ticket: ticket.and_then(|ticket| u64::try_from(ticket).ok()),
                position: position(row)?,
            });
        };
        if fences.len() != keys.len() {
            return Err(LockError::internal(format!(
                "the set's acquisition answered {} fences for {} keys",
                fences.len(),
                keys.len()
            )));
        }
        (keys.iter().zip(lock_ids).zip(fences))
            .map(|((key, lock_id), fence)| {
                Ok((granted(lock_id, &fence, expires_at_ms, key)?, None))
            })
            .collect::<Result<Vec<_>>>()
            .map(Acquisitions::Acquired)
    }
}
