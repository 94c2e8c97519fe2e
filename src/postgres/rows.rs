//! What every PostgreSQL operation is asked with and read by: a key's storage key and its fence
//! counter's, the one row an operation answers and its columns, and the error for a row that is
//! not a SyncGuard record.

use postgres::Row;

use super::tables::TableNames;
use crate::driver::{Key, make_storage_key};
use crate::error::{LockError, Result};

/// PostgreSQL's storage-key limit in bytes (keys longer than this are hashed).
pub const STORAGE_KEY_LIMIT: usize = 1700;

/// The storage key of `key`, refusing what PostgreSQL text cannot store (before any I/O).
pub(super) fn storage_key_of(key: &Key) -> Result<String> {
    if key.as_str().contains('\0') {
        return Err(LockError::invalid_argument(
            "PostgreSQL text cannot hold NUL characters; this key cannot be locked here",
        ));
    }
    make_storage_key("", key.as_str(), STORAGE_KEY_LIMIT, 0)
}

/// The `fence_key` of the counter row that belongs to a storage key.
pub(super) fn fence_key_of(storage_key: &str) -> Result<String> {
    make_storage_key("", &format!("fence:{storage_key}"), STORAGE_KEY_LIMIT, 0)
}

/// The one row an operation answers (`what` names it in the error when there is none).
pub(super) fn answer_row<'a>(rows: &'a [Row], what: &str) -> Result<&'a Row> {
    rows.first()
        .ok_or_else(|| LockError::internal(format!("{what} returned no row")))
}

pub(super) fn column<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> Result<T> {
    row.try_get(name)
        .map_err(|_| LockError::internal(format!("unexpected result column {name}")))
}

/// The error for a row that is not a SyncGuard lock record (see `record_sql::sound`, the same
/// rule in SQL): `Internal`, naming the key, whichever operation came across it.
pub(super) fn not_a_record(tables: &TableNames, key: &str) -> LockError {
    LockError::internal(format!(
        "the row of key {key:?} in table {} is not a SyncGuard lock record (a fence that is not \
         15 digits, a malformed lock id, or a NULL): syncguard neither takes it over nor \
         changes it; repair or delete that row",
        tables.lock_table()
    ))
    .with_key(key)
}
