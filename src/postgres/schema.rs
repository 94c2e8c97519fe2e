//! The tables' DDL ([`SCHEMA_SQL`], generated from the statements) and creating them.

use postgres::GenericClient;

use super::errors::{Site, map_error};
use super::statements::{SERVER_FINGERPRINT, SERVER_SHAPE, Statements};
use super::tables::TableNames;
use crate::error::Result;

/// The DDL for the default table names, as shipped in `src/postgres/schema.sql`.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

/// The DDL for `tables`: what [`SCHEMA_SQL`] is for the default names, written for these.
/// Idempotent (`CREATE … IF NOT EXISTS`, `CREATE OR REPLACE FUNCTION`); for applying by hand or
/// in a migration tool.
///
/// ```
/// use syncguard::postgres::{TableNames, schema_sql};
/// let ddl = schema_sql(&TableNames::new("app_locks", "app_fences")?);
/// assert!(ddl.contains("CREATE UNIQUE INDEX IF NOT EXISTS idx_app_locks_lock_id ON app_locks (lock_id)"));
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn schema_sql(tables: &TableNames) -> String {
    let statements = Statements::new(tables);
    format!(
        "{}{FUNCTIONS_HEADING}{}{}",
        tables_ddl(tables),
        replaced_shapes_ddl(&statements),
        statements.functions_ddl()
    )
}

/// The tables, as the TypeScript SyncGuard has them, plus syncguard's own: written from the
/// names (never by replacing the default names in a text, which goes wrong as soon as one name
/// contains another, `app_locks` beside `syncguard_locks_fences`).
fn tables_ddl(tables: &TableNames) -> String {
    let (locks, fences) = (tables.lock_table(), tables.fence_table());
    let (semaphores, permits) = (tables.semaphore_table(), tables.permit_table());
    let line = tables.line_table();
    let shared = tables.shared_table();
    format!(
        "\
-- syncguard (Rust) and SyncGuard (TypeScript) share these tables: same names, columns, types
-- and indexes (plus syncguard's optional `holder` column, which the TypeScript SyncGuard never
-- writes and ignores). Apply once, e.g. `psql -d myapp -f schema.sql`, or call
-- syncguard::postgres::setup_schema. Safe to run again.
--
-- Written for these table names (index, function, semaphore, permit and line table names follow
-- the lock table's name):
--   lock table:          {locks}
--   fence counter table: {fences}
-- For other names, generate it with syncguard::postgres::schema_sql rather than search and
-- replace, which goes wrong where one name contains another.

-- Locks: one row per held key; deleted on release (or replaced once expired).
CREATE TABLE IF NOT EXISTS {locks} (
  key TEXT PRIMARY KEY,            -- storage key: make_storage_key(\"\", user key, 1700, 0)
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token
  user_key TEXT NOT NULL           -- the NFC-normalised user key
);

-- Release, extend and lookup find a lock by its id.
CREATE UNIQUE INDEX IF NOT EXISTS idx_{locks}_lock_id ON {locks} (lock_id);

-- Finding expired locks (monitoring, cleanup).
CREATE INDEX IF NOT EXISTS idx_{locks}_expires ON {locks} (expires_at_ms);

-- Fence counters: one row per key ever locked. NEVER delete these rows: fences must keep
-- growing across releases, expiries and restarts.
CREATE TABLE IF NOT EXISTS {fences} (
  fence_key TEXT PRIMARY KEY,      -- make_storage_key(\"\", \"fence:\" + storage key, 1700, 0)
  fence BIGINT NOT NULL DEFAULT 0, -- the last fence issued
  key_debug TEXT                   -- the user key, for people reading the table
);

-- Who holds each lock (syncguard for Rust, optional: the TypeScript SyncGuard writes only the
-- columns it names and reads only the fields it knows; tables it created lack it until this
-- runs): the lock
-- id of the lock described, a space, the description. Written and read by the functions below
-- only; a description left from an earlier lock (another lock id) reads as none.
ALTER TABLE {locks} ADD COLUMN IF NOT EXISTS holder TEXT;

-- Semaphores (syncguard for Rust only: the TypeScript SyncGuard has no semaphores and never
-- reads these tables). A semaphore of N permits on a key is stored apart from the lock on that
-- key: a semaphore of one permit on \"k\" is not the lock on \"k\", and neither changes the other's
-- rows or fences. Written and read by the server functions below only.

-- One row per semaphore ever used, holding its own fence sequence (not the key's lock fence
-- counter). Acquirers of a semaphore lock its row, so they take turns. NEVER delete these
-- rows: permit fences must keep growing across releases, expiries and restarts.
CREATE TABLE IF NOT EXISTS {semaphores} (
  key TEXT NOT NULL,               -- storage key, as the lock table's
  fence BIGINT NOT NULL DEFAULT 0, -- the last permit fence issued
  user_key TEXT NOT NULL,          -- the NFC-normalised user key, for people reading the table
  CONSTRAINT {locks}_sem_pk PRIMARY KEY (key)
);

-- One row per permit held; deleted on release, or once expired by the next acquire of its key
-- (or, a minute later, of any key). A permit is named by its key and lock id.
CREATE TABLE IF NOT EXISTS {permits} (
  key TEXT NOT NULL,               -- storage key of the semaphore
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token of the semaphore
  user_key TEXT NOT NULL,          -- the NFC-normalised user key
  holder TEXT,                     -- who holds it, as described at acquisition (NULL: none)
  CONSTRAINT {locks}_permit_pk PRIMARY KEY (key, lock_id)
);

-- Permit acquisitions delete a few permits of any key that expired over a minute ago, the
-- oldest first: a semaphore whose key is never used again leaves no permit row behind.
CREATE INDEX IF NOT EXISTS {locks}_permit_exp ON {permits} (expires_at_ms);

-- The line (syncguard for Rust only: the TypeScript SyncGuard knows no line, never reads this
-- table, and its acquisitions pass the line). One row per waiter's place in the line of a key's
-- lock or of its semaphore; deleted when its waiter is granted or gives up, or once expired by
-- the next acquisition of its line (or, a minute later, by a refused waiter of any key).
-- Written and read by the server functions below only.
CREATE TABLE IF NOT EXISTS {line} (
  key TEXT NOT NULL,               -- storage key of the lock or the semaphore
  kind TEXT NOT NULL,              -- 'lock' or 'permit': the key's lock and semaphore each have one
  place_id TEXT NOT NULL,          -- the waiter's place id, 22 base64url characters
  ticket BIGINT GENERATED ALWAYS AS IDENTITY, -- arrival order at the server; never drawn twice
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms; renewed by each attempt of its waiter
  holder TEXT,                     -- who waits, as described at acquisition (NULL: none)
  CONSTRAINT {locks}_line_pk PRIMARY KEY (key, kind, place_id)
);

-- A line in ticket order, and the probe every acquisition makes for it.
CREATE INDEX IF NOT EXISTS {locks}_line_ticket ON {line} (key, kind, ticket);

-- Whether a place of a lock's line waits for a shared hold (a reader) or for the lock itself
-- (lines made before shared holds have none: their places wait for the lock).
ALTER TABLE {line} ADD COLUMN IF NOT EXISTS shared BOOLEAN NOT NULL DEFAULT false;

-- Refused waiters delete a few places of any key that expired over a minute ago, the oldest
-- first: the line of a key nobody asks for again (a killed waiter of a per-job key) keeps no
-- place behind.
CREATE INDEX IF NOT EXISTS {locks}_line_exp ON {line} (expires_at_ms);

-- Shared holds (readers) of a key's lock (syncguard for Rust only: the TypeScript SyncGuard
-- never reads this table, so it sees the exclusive record alone and can take the lock while
-- readers hold it shared). One row per reader, beside the key's lock record: its own lock id,
-- expiry and holder, and a fence from the key's LOCK fence counter. Deleted on release, or once
-- expired by the next shared acquisition of its key (or, a minute later, of any key). Written
-- and read by the server functions below only; the exclusive acquisition reads it.
CREATE TABLE IF NOT EXISTS {shared} (
  key TEXT NOT NULL,               -- storage key of the lock
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token from the lock's counter
  user_key TEXT NOT NULL,          -- the NFC-normalised user key
  holder TEXT,                     -- who holds it, as described at acquisition (NULL: none)
  CONSTRAINT {locks}_shared_pk PRIMARY KEY (key, lock_id)
);

-- Shared acquisitions delete a few readers of any key that expired over a minute ago.
CREATE INDEX IF NOT EXISTS {locks}_shared_exp ON {shared} (expires_at_ms);

"
    )
}

/// Where `schema.sql` turns from the tables (as the TypeScript SyncGuard has them) to the server
/// functions, which are generated from the statements.
const FUNCTIONS_HEADING: &str = "-- Server functions (syncguard for Rust; the TypeScript \
SyncGuard does not use them). Each does what\n-- one statement of the backend does, with plans \
cached per server connection: without them\n-- the statements are sent inline, planned on every \
call. Generated from the source; the\n-- version suffix changes with the statements.\n";

/// A `DO` block that drops each function of this version's names and signatures whose
/// parameters or result differ from this version's (made by an earlier syncguard, or by hand):
/// `CREATE OR REPLACE` cannot change those, only the body. A function that differs in its body
/// alone is replaced in place, keeping its owner and grants.
fn replaced_shapes_ddl(statements: &Statements) -> String {
    let drops: Vec<String> = statements
        .operations()
        .map(|op| {
            let signature = op.signature();
            format!(
                "IF (SELECT {SERVER_SHAPE} FROM pg_proc p WHERE p.oid = \
                 to_regprocedure('{signature}'))\n    IS DISTINCT FROM '{}' THEN\n  \
                 DROP FUNCTION IF EXISTS {signature};\nEND IF;",
                op.shape()
            )
        })
        .collect();
    format!(
        "-- A function of the same name and parameter types whose parameters or result differ\n\
         -- (an earlier syncguard's) cannot be replaced: it is dropped first.\n\
         DO $replaced$ BEGIN\n{}\nEND $replaced$;\n\n",
        drops.join("\n")
    )
}

/// Creates both tables, their indexes and the server functions if they do not exist yet, and
/// puts back any server function of this version's name that differs from this version's (an
/// earlier syncguard's under the same name, or one replaced by hand), in one transaction that
/// concurrent callers take turns at. Safe to call at every start-up: when everything is there
/// as this version makes it (one read of the catalogs, which compares each function's
/// parameters, result and body by fingerprint), it changes nothing and takes no lock on the
/// tables, so it never waits behind running lock calls nor makes them wait.
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

/// One row, one boolean: whether everything [`setup_sql`] creates is there as this version
/// creates it (the lock and fence tables, the semaphore, permit and line tables, the lock table's
/// indexes and `holder` column, every server function of this version with this version's
/// parameters, result and body — compared by fingerprint, so a function replaced since, by hand
/// or by an earlier syncguard under the same name, is put right). Reads the catalogs only.
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
        format!("to_regclass('{}') IS NOT NULL", tables.line_table()),
        format!("to_regclass('{locks}_line_ticket') IS NOT NULL"),
        format!("to_regclass('{locks}_line_exp') IS NOT NULL"),
        format!(
            "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{locks}') \
             AND attname = 'holder' AND NOT attisdropped)"
        ),
        format!(
            "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{}') \
             AND attname = 'shared' AND NOT attisdropped)",
            tables.line_table()
        ),
        format!("to_regclass('{}') IS NOT NULL", tables.shared_table()),
        format!("to_regclass('{locks}_shared_exp') IS NOT NULL"),
    ];
    present.extend(Statements::new(tables).operations().map(|op| {
        format!(
            "(SELECT {SERVER_FINGERPRINT} FROM pg_proc p WHERE p.oid = to_regprocedure('{}')) \
             IS NOT DISTINCT FROM '{}'",
            op.signature(),
            op.fingerprint()
        )
    }));
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
        assert!(SCHEMA_SQL.contains("CREATE OR REPLACE FUNCTION syncguard_locks_acquire_v8("));
    }

    /// The tables, indexes and columns `ddl` creates or changes, and the table each index is on:
    /// the name after each `CREATE TABLE IF NOT EXISTS`, `ALTER TABLE`, `INDEX IF NOT EXISTS`
    /// and `ON`.
    fn names_made(ddl: &str) -> Vec<String> {
        let mut made = Vec::new();
        for line in ddl.lines().filter(|line| !line.starts_with("--")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            for (i, pair) in words.windows(2).enumerate() {
                let follows = |what: &[&str]| words[..=i].ends_with(what);
                if follows(&["NOT", "EXISTS"]) || follows(&["ALTER", "TABLE"]) || pair[0] == "ON" {
                    made.push(pair[1].trim_end_matches([';', '(']).to_owned());
                }
            }
        }
        made
    }

    /// Names that contain one another, or a default name, get the DDL of exactly these tables:
    /// the tables part is written from the names, never by replacing the defaults in a text.
    #[test]
    fn names_that_contain_one_another_get_their_own_ddl() {
        for (locks, fences) in [
            ("app_locks", "syncguard_locks_fences"),
            ("syncguard_fence_counters", "syncguard_locks"),
            ("app_locks", "app_locks_fences"),
            ("app_fences_locks", "app_fences"),
            ("syncguard_locks_x", "syncguard_fence_counters_x"),
            ("syncguard_locks", "syncguard_locks_fence_counters"),
        ] {
            let tables = TableNames::new(locks, fences).unwrap();
            let ddl = schema_sql(&tables);
            let tables_part = ddl.split_once(FUNCTIONS_HEADING).unwrap().0;
            let index = |suffix: &str| format!("idx_{locks}_{suffix}");
            let expected = [
                locks.to_owned(),
                index("lock_id"),
                locks.to_owned(),
                index("expires"),
                locks.to_owned(),
                fences.to_owned(),
                locks.to_owned(),
                "holder".to_owned(),
                tables.semaphore_table(),
                tables.permit_table(),
                format!("{locks}_permit_exp"),
                tables.permit_table(),
                tables.line_table(),
                format!("{locks}_line_ticket"),
                tables.line_table(),
                tables.line_table(),
                "shared".to_owned(),
                format!("{locks}_line_exp"),
                tables.line_table(),
                tables.shared_table(),
                format!("{locks}_shared_exp"),
                tables.shared_table(),
            ];
            assert_eq!(names_made(tables_part), expected, "{locks} + {fences}");
            assert!(
                tables_part.contains(&format!("CONSTRAINT {locks}_sem_pk PRIMARY KEY"))
                    && tables_part.contains(&format!("CONSTRAINT {locks}_permit_pk PRIMARY KEY"))
                    && tables_part.contains(&format!("CONSTRAINT {locks}_line_pk PRIMARY KEY"))
                    && tables_part.contains(&format!("CONSTRAINT {locks}_shared_pk PRIMARY KEY")),
                "{locks} + {fences}"
            );
            assert!(ddl.contains(&format!("INSERT INTO \"{fences}\" AS f")));
        }
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
        assert!(ddl.contains("CREATE OR REPLACE FUNCTION a_locks_pacquire_v8("));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_locks_line ("));
        assert!(ddl.contains("CREATE OR REPLACE FUNCTION a_locks_line_v8("));
        assert!(ddl.contains("CREATE TABLE IF NOT EXISTS a_locks_shared ("));
        assert!(ddl.contains("CREATE OR REPLACE FUNCTION a_locks_sacquire_v8("));
        assert_eq!(schema_sql(&TableNames::default()), SCHEMA_SQL);
    }
}
