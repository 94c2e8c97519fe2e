//! The two tables, their names, and creating them.

use postgres::GenericClient;

use super::errors::{Site, map_error};
use super::statements::Statements;
use crate::error::{LockError, Result};

/// The DDL for the default table names, as shipped in `src/postgres/schema.sql`.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

const DEFAULT_LOCK_TABLE: &str = "syncguard_locks";
const DEFAULT_FENCE_TABLE: &str = "syncguard_fence_counters";
/// PostgreSQL truncates identifiers beyond 63 bytes; the longest derived name is the index
/// `idx_<lock table>_lock_id`.
const MAX_IDENTIFIER: usize = 63;
const LONGEST_INDEX_AFFIXES: usize = "idx_".len() + "_lock_id".len();

/// The lock table and the fence counter table. Names are lowercase SQL identifiers
/// (`[a-z_][a-z0-9_]*`, the lock table at most 51 bytes so that its index names fit), and the
/// two must differ: validated here, so nothing else can reach the SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    lock_table: String,
    fence_table: String,
}

impl Default for TableNames {
    fn default() -> Self {
        TableNames {
            lock_table: DEFAULT_LOCK_TABLE.to_owned(),
            fence_table: DEFAULT_FENCE_TABLE.to_owned(),
        }
    }
}

impl TableNames {
    /// Custom names; `InvalidArgument` unless both are valid and different.
    pub fn new(lock_table: &str, fence_table: &str) -> Result<TableNames> {
        validate_identifier(
            "lock table",
            lock_table,
            MAX_IDENTIFIER - LONGEST_INDEX_AFFIXES,
        )?;
        validate_identifier("fence table", fence_table, MAX_IDENTIFIER)?;
        if lock_table == fence_table {
            return Err(LockError::invalid_argument(
                "the lock table and the fence table must differ: cleaning up locks must never \
                 touch fence counters",
            ));
        }
        Ok(TableNames {
            lock_table: lock_table.to_owned(),
            fence_table: fence_table.to_owned(),
        })
    }

    /// The lock table (default `syncguard_locks`).
    pub fn lock_table(&self) -> &str {
        &self.lock_table
    }

    /// The fence counter table (default `syncguard_fence_counters`).
    pub fn fence_table(&self) -> &str {
        &self.fence_table
    }
}

fn validate_identifier(what: &str, name: &str, max_len: usize) -> Result<()> {
    let mut bytes = name.bytes();
    let well_formed = bytes
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !well_formed || name.len() > max_len {
        return Err(LockError::invalid_argument(format!(
            "invalid {what} name: use a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most \
             {max_len} bytes"
        )));
    }
    Ok(())
}

/// The DDL for `tables`: [`SCHEMA_SQL`] with the names replaced. Idempotent
/// (`CREATE … IF NOT EXISTS`, `CREATE OR REPLACE FUNCTION`); for applying by hand or in a
/// migration tool.
///
/// ```
/// use syncguard::postgres::{TableNames, schema_sql};
/// let ddl = schema_sql(&TableNames::new("app_locks", "app_fences")?);
/// assert!(ddl.contains("CREATE UNIQUE INDEX IF NOT EXISTS idx_app_locks_lock_id ON app_locks (lock_id)"));
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn schema_sql(tables: &TableNames) -> String {
    let tables_part = SCHEMA_SQL
        .split_once(FUNCTIONS_HEADING)
        .map_or(SCHEMA_SQL, |(tables_part, _)| tables_part);
    // The names are validated identifiers, so plain substitution cannot inject anything.
    let tables_part = tables_part
        .replace(DEFAULT_FENCE_TABLE, &tables.fence_table)
        .replace(DEFAULT_LOCK_TABLE, &tables.lock_table);
    format!(
        "{tables_part}{FUNCTIONS_HEADING}{}",
        Statements::new(tables).functions_ddl()
    )
}

/// Where `schema.sql` turns from the tables (as the TypeScript SyncGuard has them) to the server
/// functions, which are generated from the statements.
const FUNCTIONS_HEADING: &str = "-- Server functions (syncguard for Rust; the TypeScript \
SyncGuard does not use them). Each does what\n-- one statement of the backend does, with plans \
cached per server connection: without them\n-- the statements are sent inline, planned on every \
call. Generated from the source; the\n-- version suffix changes with the statements.\n";

/// Creates both tables and their indexes if they do not exist yet, in one transaction that
/// concurrent callers take turns at. Safe to call at every start-up.
///
/// ```no_run
/// use syncguard::postgres::{TableNames, setup_schema};
/// let mut client = postgres::Client::connect("postgres://app@localhost/app", postgres::NoTls)
///     .map_err(|e| syncguard::LockError::internal(e.to_string()))?;
/// setup_schema(&mut client, &TableNames::default())?;
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn setup_schema(client: &mut impl GenericClient, tables: &TableNames) -> Result<()> {
    client
        .batch_execute(&setup_sql(tables))
        .map_err(|e| map_error(&e, &Site::unknown()))
}

/// What [`setup_schema`] runs: the DDL behind an advisory lock, so concurrent callers take
/// turns. A multi-statement simple query runs as one implicit transaction.
pub(crate) fn setup_sql(tables: &TableNames) -> String {
    format!(
        "SELECT pg_advisory_xact_lock(hashtext('syncguard:setup_schema'));\n{}",
        schema_sql(tables)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(TableNames::new("app_locks", "app_fences").is_ok());
        assert!(TableNames::new("_x1", "_x2").is_ok());
        for (lock, fence) in [
            ("locks", "locks"),
            ("Locks", "fences"),
            ("1locks", "fences"),
            ("locks; DROP TABLE users", "fences"),
            ("locks", "fences\""),
            ("public.locks", "fences"),
            ("", "fences"),
            ("locks", ""),
            ("lócks", "fences"),
        ] {
            let err = TableNames::new(lock, fence).unwrap_err();
            assert_eq!(
                err.code(),
                crate::ErrorCode::InvalidArgument,
                "{lock:?} {fence:?}"
            );
        }
        assert!(TableNames::new(&"l".repeat(51), "f").is_ok());
        assert!(TableNames::new(&"l".repeat(52), "f").is_err());
        assert!(TableNames::new("l", &"f".repeat(63)).is_ok());
        assert!(TableNames::new("l", &"f".repeat(64)).is_err());
    }

    /// `schema.sql` is what `setup_schema` runs for the default names, server functions
    /// included: `SYNCGUARD_BLESS=1 cargo test --features postgres --lib schema` rewrites it
    /// after a statement changes.
    #[test]
    fn schema_sql_is_what_setup_runs() {
        let expected = schema_sql(&TableNames::default());
        if std::env::var_os("SYNCGUARD_BLESS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/postgres/schema.sql");
            std::fs::write(path, &expected).unwrap();
        }
        assert!(
            SCHEMA_SQL == expected,
            "src/postgres/schema.sql is out of date: run SYNCGUARD_BLESS=1 cargo test --features \
             postgres --lib schema"
        );
        assert!(SCHEMA_SQL.contains("CREATE OR REPLACE FUNCTION syncguard_locks_acquire_v3("));
    }

    #[test]
    fn schema_for_custom_names_mentions_no_default() {
        let ddl = schema_sql(&TableNames::new("a_locks", "a_fences").unwrap());
        assert!(!ddl.contains("syncguard_locks") && !ddl.contains("syncguard_fence_counters"));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_locks ("));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_fences ("));
        assert!(ddl.contains("idx_a_locks_expires ON a_locks (expires_at_ms)"));
        assert_eq!(schema_sql(&TableNames::default()), SCHEMA_SQL);
    }
}
