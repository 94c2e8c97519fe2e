//! One SQL statement per operation: one round trip each, one implicit transaction each.
//!
//! Why a single statement is atomic enough, operation by operation:
//!
//! * **acquire** takes `pg_advisory_xact_lock(hashtext(key))` first — the same lock, on the
//!   same storage key, that the TypeScript SyncGuard takes, so mixed fleets serialise. Every
//!   later step reads from the step before (`clock` from `serialized`, `free` from `clock`,
//!   …), which forces that order inside the statement. The statement's snapshot may predate the
//!   advisory lock wait, so `free` can miss a lock committed meanwhile; the final
//!   `INSERT … ON CONFLICT (key) DO UPDATE … WHERE <existing lock expired>` cannot: PostgreSQL
//!   checks the conflict and its `WHERE` against the latest committed row, under a row lock. A
//!   stale `free` therefore costs at most an unused fence number, never a second holder: under
//!   contention a losing acquire may consume a fence number, so fences grow strictly but are
//!   not always contiguous (the specification asks for no repeats and no decreases). The fence counter is one `INSERT … ON CONFLICT DO
//!   UPDATE SET fence = fence + 1`, which PostgreSQL performs atomically also when the row is
//!   absent and two callers race (no duplicate fence 1).
//! * **release** is `DELETE … WHERE lock_id = $1`: ownership is the `WHERE`, and a concurrent
//!   writer of the same row makes it wait and re-check (READ COMMITTED's re-evaluation).
//!   Liveness is judged on the deleted row, so an expired lock is reported absent (and removed).
//! * **extend** is `UPDATE … WHERE lock_id = $1 AND <live>`, re-checked the same way: it never
//!   revives an expired lock.
//! * **is_locked** and **lookup** only read; the opt-in cleanup deletes rows far past expiry,
//!   re-checked under the row lock, so a row renewed meanwhile is kept.
//!
//! Time is the server's `clock_timestamp()` in whole milliseconds, read once per statement.

use postgres::types::Type;

use super::schema::TableNames;

/// One statement: its text, its parameter types (sent along, or used to prepare it once per
/// connection), and its slot in a connection's cache of prepared statements.
pub(crate) struct Sql {
    pub slot: usize,
    pub text: String,
    pub types: &'static [Type],
}

const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The statements for one pair of tables (names are validated identifiers).
pub(crate) struct Statements {
    /// `$1` key, `$2` lock id, `$3` ttl ms, `$4` user key, `$5` fence key, `$6` largest fence,
    /// `$7` tolerance ms → one row: `fence` (text, null unless acquired), `expires_at_ms`,
    /// `counter` (the fence number drawn, null if the lock was seen held).
    pub acquire: Sql,
    /// `$1` lock id, `$2` tolerance ms → no row (not found) or one row: `live` (bool).
    pub release: Sql,
    /// `$1` lock id, `$2` ttl ms, `$3` tolerance ms → one row: `expires_at_ms` (null unless
    /// extended), `present` (bool).
    pub extend: Sql,
    /// `$1` key, `$2` tolerance ms → one row: `locked` (bool).
    pub is_locked: Sql,
    /// `$1` key, `$2` tolerance ms, `$3` cleanup guard ms → one row: `locked` (bool).
    pub is_locked_with_cleanup: Sql,
    /// `$1` key, `$2` tolerance ms → the live row, if any.
    pub lookup_by_key: Sql,
    /// `$1` lock id, `$2` tolerance ms → the live row, if any.
    pub lookup_by_id: Sql,
}

impl Statements {
    pub fn new(tables: &TableNames) -> Statements {
        let locks = format!("\"{}\"", tables.lock_table());
        let fences = format!("\"{}\"", tables.fence_table());
        let row = "key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key";
        let sql = |slot: usize, types: &'static [Type], text: String| Sql { slot, text, types };
        use Type as T;
        Statements {
            acquire: sql(
                0,
                &[
                    T::TEXT,
                    T::TEXT,
                    T::INT8,
                    T::TEXT,
                    T::TEXT,
                    T::INT8,
                    T::INT8,
                ],
                format!(
                    "WITH serialized AS (SELECT pg_advisory_xact_lock(hashtext($1::text))), \
                 clock AS (SELECT {NOW_MS} AS now_ms FROM serialized), \
                 free AS (SELECT now_ms FROM clock WHERE NOT EXISTS ( \
                     SELECT 1 FROM {locks} l WHERE l.key = $1 \
                     AND l.expires_at_ms > clock.now_ms - $7 AND l.lock_id <> $2)), \
                 counter AS ( \
                     INSERT INTO {fences} AS f (fence_key, fence, key_debug) \
                     SELECT $5, 1, $4 FROM free \
                     ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1 \
                     RETURNING f.fence), \
                 taken AS ( \
                     INSERT INTO {locks} AS l ({row}) \
                     SELECT $1, $2, free.now_ms + $3, free.now_ms, \
                            lpad(counter.fence::text, 15, '0'), $4 \
                     FROM free, counter WHERE counter.fence <= $6 \
                     ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id, \
                         expires_at_ms = EXCLUDED.expires_at_ms, \
                         acquired_at_ms = EXCLUDED.acquired_at_ms, \
                         fence = EXCLUDED.fence, user_key = EXCLUDED.user_key \
                     WHERE l.expires_at_ms <= EXCLUDED.acquired_at_ms - $7 \
                        OR l.lock_id = EXCLUDED.lock_id \
                     RETURNING l.fence, l.expires_at_ms) \
                 SELECT (SELECT fence FROM taken) AS fence, \
                        (SELECT expires_at_ms FROM taken) AS expires_at_ms, \
                        (SELECT fence FROM counter) AS counter"
                ),
            ),
            release: sql(
                1,
                &[T::TEXT, T::INT8],
                format!(
                    "WITH clock AS (SELECT {NOW_MS} AS now_ms), \
                 gone AS (DELETE FROM {locks} WHERE lock_id = $1 RETURNING expires_at_ms) \
                 SELECT gone.expires_at_ms > clock.now_ms - $2 AS live FROM gone, clock"
                ),
            ),
            extend: sql(
                2,
                &[T::TEXT, T::INT8, T::INT8],
                format!(
                    "WITH clock AS (SELECT {NOW_MS} AS now_ms), \
                 renewed AS ( \
                     UPDATE {locks} AS l SET expires_at_ms = c.now_ms + $2 FROM clock c \
                     WHERE l.lock_id = $1 AND l.expires_at_ms > c.now_ms - $3 \
                     RETURNING l.expires_at_ms) \
                 SELECT (SELECT expires_at_ms FROM renewed) AS expires_at_ms, \
                        EXISTS (SELECT 1 FROM {locks} WHERE lock_id = $1) AS present"
                ),
            ),
            is_locked: sql(
                3,
                &[T::TEXT, T::INT8],
                format!(
                    "SELECT EXISTS (SELECT 1 FROM {locks} \
                 WHERE key = $1 AND expires_at_ms > {NOW_MS} - $2) AS locked"
                ),
            ),
            is_locked_with_cleanup: sql(
                4,
                &[T::TEXT, T::INT8, T::INT8],
                format!(
                    "WITH clock AS (SELECT {NOW_MS} AS now_ms), \
                 swept AS (DELETE FROM {locks} l USING clock c \
                     WHERE l.key = $1 AND l.expires_at_ms < c.now_ms - $3) \
                 SELECT EXISTS (SELECT 1 FROM {locks} l, clock c \
                     WHERE l.key = $1 AND l.expires_at_ms > c.now_ms - $2) AS locked"
                ),
            ),
            lookup_by_key: sql(
                5,
                &[T::TEXT, T::INT8],
                format!(
                    "SELECT {row} FROM {locks} WHERE key = $1 AND expires_at_ms > {NOW_MS} - $2"
                ),
            ),
            lookup_by_id: sql(
                6,
                &[T::TEXT, T::INT8],
                format!(
                    "SELECT {row} FROM {locks} WHERE lock_id = $1 AND expires_at_ms > {NOW_MS} - $2"
                ),
            ),
        }
    }
}
