//! Listing the locks under a key prefix ([`Driver::list_records`](crate::driver::Driver::list_records)):
//! one inline statement, on tables set up by syncguard or by the TypeScript SyncGuard alike.
//!
//! The rows whose user key starts with the prefix (`starts_with`: no `LIKE` pattern to
//! escape), live by the server's clock, in byte order of the user key (`COLLATE "C"`, the
//! order every backend lists in), one more than the limit (to tell whether it was reached).
//! A row that is not a SyncGuard lock record among them, live or expired, is an `Internal`
//! error naming its key, as in every other operation (the same rule, `statements::sound`).
//!
//! The user key has no index, so the server reads the whole lock table and keeps the first
//! rows in a top-N sort: time grows with the table's rows, memory with the limit. The
//! statement's deadline ([`PostgresBuilder::statement_timeout`](super::PostgresBuilder::statement_timeout))
//! bounds it: a listing that does not finish in time fails with `NetworkTimeout`.

use postgres::types::Type;

use super::schema::TableNames;
use super::statements::{NOW_MS, Sql, sound};
use super::{PostgresBackend, lock_record};
use crate::driver::{KeyPrefix, ListLimit, LockList, LockRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

/// `$1` prefix, `$2` tolerance ms, `$3` rows at most → the rows under the prefix that are live
/// or not SyncGuard records, in user-key byte order.
fn statement(tables: &TableNames) -> Sql {
    let locks = format!("\"{}\"", tables.lock_table());
    let sound_l = sound("l");
    Sql {
        text: format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms)\n\
             SELECT l.key, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence, l.user_key\n\
             FROM {locks} l, clock c\n\
             WHERE starts_with(COALESCE(l.user_key, l.key), $1)\n\
               AND (l.expires_at_ms > c.now_ms - $2 OR NOT {sound_l})\n\
             ORDER BY COALESCE(l.user_key, l.key) COLLATE \"C\"\n\
             LIMIT $3"
        )
        .into(),
        types: &[Type::TEXT, Type::INT8, Type::INT8],
    }
}

impl PostgresBackend {
    /// The live locks under `prefix`; see the module docs.
    pub(super) fn list(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        if prefix.as_str().contains('\0') {
            return Err(LockError::invalid_argument(
                "PostgreSQL text cannot hold NUL characters; no key here starts with this prefix",
            ));
        }
        // `limit` is at most MAX_LIST_LIMIT: the conversion cannot fail.
        let rows_at_most = i64::try_from(limit.get())
            .unwrap_or(i64::MAX)
            .saturating_add(1);
        let rows = self.connections.query(
            &statement(&self.tables),
            vec![
                prefix.as_str().into(),
                TIME_TOLERANCE_MS.into(),
                rows_at_most.into(),
            ],
        )?;
        let found = rows
            .iter()
            .map(|row| lock_record(row, &self.tables, None))
            .collect::<Result<Vec<_>>>()?;
        Ok(LockList::from_sorted(found, limit))
    }
}
