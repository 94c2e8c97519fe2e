//! Listing the locks under a key prefix ([`Driver::list_records`](crate::driver::Driver::list_records)):
//! one statement (`Statements::list`), through its server function — which also reads each
//! lock's holder description — or inline on tables without the functions (set up by the
//! TypeScript SyncGuard: no `holder` column, so no holders), as every operation. Listing the
//! permits under a prefix ([`LeaseKind::Permit`]) is the same on the permit table
//! (`Statements::permit_list`, ordered by user key then fence), through its server function
//! only (without it, the "run `syncguard setup`" error), as every semaphore operation; and so is
//! listing the shared holds ([`LeaseKind::Shared`]), on the shared table
//! (`Statements::shared_list`).
//!
//! The rows whose user key starts with the prefix (`starts_with`: no `LIKE` pattern to
//! escape), live by the server's clock, in byte order of the user key (`COLLATE "C"`, the
//! order every backend lists in), one more than the limit (to tell whether it was reached).
//! A row that is not a SyncGuard lock record among them, live or expired, is an `Internal`
//! error naming its key, as in every other operation (the same rule, `record_sql::sound`).
//!
//! The user key has no index, so the server reads the whole lock table and keeps the first
//! rows in a top-N sort: time grows with the table's rows, memory with the limit. The
//! statement's deadline ([`PostgresBuilder::statement_timeout`](super::PostgresBuilder::statement_timeout))
//! bounds it: a listing that does not finish in time fails with `NetworkTimeout`.

use super::client::Param;
use super::driver::PostgresBackend;
use super::records::lock_record;
use crate::driver::{KeyPrefix, LeaseKind, ListLimit, LockList, LockRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

impl PostgresBackend {
    /// The live leases of `kind` under `prefix`; see the module docs.
    pub(super) fn list(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let params = list_params(prefix, limit)?;
        let rows = match self.keyed(kind) {
            Some(keyed) => self.call_function(keyed.feature, keyed.list, params)?,
            None => self.query(&self.statements.list, params)?,
        };
        let found = rows
            .iter()
            .map(|row| lock_record(row, &self.tables, None))
            .collect::<Result<Vec<_>>>()?;
        Ok(LockList::from_sorted(found, limit))
    }
}

/// A listing's parameters: `$1` the prefix, `$2` the tolerance, `$3` one more row than
/// `limit` (to tell whether it was reached).
fn list_params(prefix: &KeyPrefix, limit: ListLimit) -> Result<Vec<Param>> {
    if prefix.as_str().contains('\0') {
        return Err(LockError::invalid_argument(
            "PostgreSQL text cannot hold NUL characters; no key here starts with this prefix",
        ));
    }
    // `limit` is at most MAX_LIST_LIMIT: the conversion cannot fail.
    let rows_at_most = i64::try_from(limit.get())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    Ok(vec![
        prefix.as_str().into(),
        TIME_TOLERANCE_MS.into(),
        rows_at_most.into(),
    ])
}
