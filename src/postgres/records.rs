//! Reading leases back on PostgreSQL ([`Driver::find`](crate::driver::Driver::find)): a key's
//! lock, or the lock under a lock id (a statement each, inline too on tables without this
//! version's functions), a key's permits or shared holds (their functions only), and how every
//! read, the listings too, turns a row into a [`LockRecord`] — or refuses a row that is not a
//! SyncGuard record.

use postgres::Row;

use super::driver::PostgresBackend;
use super::rows::{not_a_record, storage_key_of};
use super::tables::TableNames;
use crate::driver::{Find, LeaseKind, LockRecord, TIME_TOLERANCE_MS};
use crate::error::Result;
use crate::fence::Fence;

impl PostgresBackend {
    /// The live leases `by` looks up, in fence order.
    pub(super) fn find_records(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        let (rows, key) = match by {
            Find::Key(key, kind) => {
                let params = vec![
                    storage_key_of(key)?.as_str().into(),
                    TIME_TOLERANCE_MS.into(),
                ];
                let rows = match self.keyed(kind) {
                    Some(keyed) => self.call_function(keyed.feature, keyed.find, params)?,
                    None => self.query(&self.statements.lookup_by_key, params)?,
                };
                (rows, Some(key.as_str()))
            }
            Find::LockId(lock_id) => {
                let params = vec![lock_id.as_str().into(), TIME_TOLERANCE_MS.into()];
                (self.query(&self.statements.lookup_by_id, params)?, None)
            }
        };
        // A key has one lock: the lookup answers at most one row.
        let take = match by {
            Find::Key(_, LeaseKind::Permit | LeaseKind::Shared) => rows.len(),
            _ => 1,
        };
        (rows.iter().take(take))
            .map(|row| lock_record(row, &self.tables, key))
            .collect()
    }
}

/// A lock row as the lookups return it; one that is not a SyncGuard record is an error naming
/// `key` (or the row's own key, when the lookup was by lock id).
pub(super) fn lock_record(row: &Row, tables: &TableNames, key: Option<&str>) -> Result<LockRecord> {
    let decoded = || -> Option<LockRecord> {
        let lock_id: String = row.try_get("lock_id").ok()?;
        crate::driver::validate_lock_id(&lock_id).ok()?;
        let fence: String = row.try_get("fence").ok()?;
        Some(LockRecord {
            key: row.try_get("user_key").ok()?,
            lock_id,
            expires_at_ms: row.try_get("expires_at_ms").ok()?,
            acquired_at_ms: row.try_get("acquired_at_ms").ok()?,
            fence: fence.parse::<Fence>().ok()?,
            // Only the lookup and list functions answer it; the statements sent inline do not.
            holder: row.try_get::<_, Option<String>>("holder").ok().flatten(),
        })
    };
    decoded().ok_or_else(|| {
        let stored = || -> Option<String> {
            let user_key: Option<String> = row.try_get("user_key").ok()?;
            user_key.or_else(|| row.try_get("key").ok())
        };
        let key = key.map(str::to_owned).or_else(stored).unwrap_or_default();
        not_a_record(tables, &key)
    })
}
