//! The tables' DDL ([`SCHEMA_SQL`], generated from the statements) and creating them.

use postgres::GenericClient;

use super::errors::{Site, map_error};
use super::statements::Statements;
use super::tables::{DEFAULT_FENCE_TABLE, DEFAULT_LOCK_TABLE, TableNames};
use crate::error::Result;

/// The DDL for the default table names, as shipped in `src/postgres/schema.sql`.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

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
        .replace(DEFAULT_FENCE_TABLE, tables.fence_table())
        .replace(DEFAULT_LOCK_TABLE, tables.lock_table());
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

/// Creates both tables, their indexes and the server functions if they do not exist yet, in
/// one transaction that concurrent callers take turns at. Safe to call at every start-up: when
/// everything is there already (one read of the catalogs), it changes nothing and takes no lock
/// on the tables, so it never waits behind running lock calls nor makes them wait.
///
/// ```no_run
/// use syncguard::postgres::{TableNames, setup_schema};
/// let mut client = postgres::Client::connect("postgres://app@localhost/app", postgres::NoTls)
///     .map_err(|e| syncguard::LockError::internal(e.to_string()))?;
/// setup_schema(&mut client, &TableNames::default())?;
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn setup_schema(client: &mut impl GenericClient, tables: &TableNames) -> Result<()> {
    let installed = client
        .query_one(&installed_sql(tables), &[])
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| map_error(&e, &Site::unknown()))?;
    if installed {
        return Ok(());
    }
    client
        .batch_execute(&setup_sql(tables))
        .map_err(|e| map_error(&e, &Site::unknown()))
}

/// One row, one boolean: whether everything [`setup_sql`] creates is there (the lock and fence
/// tables, the semaphore and permit tables, the lock table's indexes and `holder` column, every
/// server function of this version). Reads the
/// catalogs only.
pub(crate) fn installed_sql(tables: &TableNames) -> String {
    let locks = tables.lock_table();
    let mut present = vec![
        format!("to_regclass('{locks}') IS NOT NULL"),
        format!("to_regclass('{}') IS NOT NULL", tables.fence_table()),
        format!("to_regclass('idx_{locks}_lock_id') IS NOT NULL"),
        format!("to_regclass('idx_{locks}_expires') IS NOT NULL"),
        format!("to_regclass('{}') IS NOT NULL", tables.semaphore_table()),
        format!("to_regclass('{}') IS NOT NULL", tables.permit_table()),
        format!("to_regclass('{locks}_permit_exp') IS NOT NULL"),
        format!(
            "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{locks}') \
             AND attname = 'holder' AND NOT attisdropped)"
        ),
    ];
    present.extend(
        Statements::new(tables)
            .function_signatures()
            .map(|signature| format!("to_regprocedure('{signature}') IS NOT NULL")),
    );
    format!("SELECT {}", present.join("\n  AND "))
}

/// What [`setup_schema`] runs when something is missing: the DDL behind an advisory lock, so
/// concurrent callers take turns, in one implicit transaction (a multi-statement simple query).
///
/// The lock table is locked exclusively before anything else: `CREATE INDEX` takes a share lock
/// on it and `ALTER TABLE` an exclusive one, and a transaction that holds the first while it
/// waits for the second deadlocks with any lock call that holds a weak lock on the table and
/// waits for a stronger one (a read, then a write). Asking for the strongest lock first, it
/// waits its turn instead.
pub(crate) fn setup_sql(tables: &TableNames) -> String {
    let locks = tables.lock_table();
    format!(
        "SELECT pg_advisory_xact_lock(hashtext('syncguard:setup_schema'));\n\
         DO $setup$ BEGIN\n\
         IF to_regclass('{locks}') IS NOT NULL THEN\n\
         LOCK TABLE {locks} IN ACCESS EXCLUSIVE MODE;\n\
         END IF;\n\
         END $setup$;\n{}",
        schema_sql(tables)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_locks_semaphores ("));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_locks_permits ("));
        assert!(ddl.contains("CREATE OR REPLACE FUNCTION a_locks_pacquire_v3("));
        assert_eq!(schema_sql(&TableNames::default()), SCHEMA_SQL);
    }
}
