//! Listing the locks under a key prefix ([`Driver::list_records`](crate::driver::Driver::list_records)):
//! one statement (`Statements::list`), through its server function — which also reads each
//! lock's holder description — or inline on tables without the functions (set up by the
//! TypeScript SyncGuard: no `holder` column, so no holders), as every operation. Listing the
//! permits under a prefix ([`Driver::list_permit_records`](crate::driver::Driver::list_permit_records))
//! is the same on the permit table (`Statements::permit_list`, ordered by user key then fence),
//! through its server function only, as every semaphore operation; and so is listing the shared
//! holds ([`Driver::list_shared_records`](crate::driver::Driver::list_shared_records)), on the
//! shared table (`Statements::shared_list`).
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
use super::driver::{Feature, PostgresBackend, lock_record};
use super::statements::Op;
use crate::driver::{KeyPrefix, ListLimit, LockList, LockRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

impl PostgresBackend {
    /// The live locks under `prefix`; see the module docs.
    pub(super) fn list(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let rows = self.query(&self.statements.list, list_params(prefix, limit)?)?;
        let found = rows
            .iter()
            .map(|row| lock_record(row, &self.tables, None))
            .collect::<Result<Vec<_>>>()?;
        Ok(LockList::from_sorted(found, limit))
    }

    /// The live permits under `prefix`, by key then fence: the same, from the permit table,
    /// through its server function only (`Statements::permit_list`; without it, the "run
    /// `syncguard setup`" error, as for every semaphore call).
    pub(super) fn permit_listing(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let op = &self.statements.permit_list;
        self.keyed_listing(Feature::Semaphores, op, prefix, limit)
    }

    /// The live shared holds under `prefix`, by key then fence: the same, from the shared
    /// table (`Statements::shared_list`).
    pub(super) fn shared_listing(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let op = &self.statements.shared_list;
        self.keyed_listing(Feature::SharedHolds, op, prefix, limit)
    }

    /// A listing through `op`, a function of `feature` only.
    fn keyed_listing(
        &self,
        feature: Feature,
        op: &Op,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let rows = self.call_function(feature, op, list_params(prefix, limit)?)?;
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
