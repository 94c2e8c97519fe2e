//! The statements on a table of holds keyed by `(key, lock id)`, written once for the two such
//! tables: permits (`<lock table>_permits`, `permit_sql.rs`) and shared holds (`<lock
//! table>_shared`, `shared_sql.rs`). Releasing one hold, renewing a batch, reading the live
//! holds of a key and listing those under a key prefix are one statement each, through their
//! functions only; the two acquire functions share their last steps here (the repeated call
//! answered, the hold granted).

use postgres::types::Type;

use super::op::Op;
use super::record_sql::{NOW_MS, Quoted, ROW_COLUMNS};

/// `$1` storage key, `$2` lock id, `$3` tolerance ms → one row: `live` (NULL when no such hold
/// was stored; else whether it was live). Announces a removal on the lock table's release
/// channel, with the user key.
pub(super) fn release(tables: &Quoted<'_>, name: &str, table: &str) -> Op {
    let released = &tables.released;
    Op::steps(
        tables.names,
        name,
        &[Type::TEXT, Type::TEXT, Type::INT8],
        "OUT live boolean",
        String::new(),
        format!(
            "DECLARE\n  gone_expires_at_ms bigint;\n  gone_key text;\n\
             BEGIN\n\
             DELETE FROM {table} p WHERE p.key = $1 AND p.lock_id = $2\n\
                 RETURNING p.expires_at_ms, p.user_key INTO gone_expires_at_ms, gone_key;\n\
             IF FOUND THEN\n\
                 live := gone_expires_at_ms > {NOW_MS} - $3;\n\
                 PERFORM pg_notify('{released}', gone_key);\n\
             END IF;\n\
             END"
        ),
    )
    .function_only()
}

/// `$1` storage keys, `$2` lock ids, `$3` ttls ms, `$4` tolerance ms → one row per hold, in the
/// order given: `ord`, `expires_at_ms` (null unless extended), `present`. Only live holds are
/// extended; an expired one is answered as such and left for the next acquisition or release
/// to remove (deleting it here could take two rows an acquirer is deleting in the other order).
pub(super) fn renew(tables: &Quoted<'_>, name: &str, table: &str) -> Op {
    Op::query(
        tables.names,
        name,
        &[
            Type::TEXT_ARRAY,
            Type::TEXT_ARRAY,
            Type::INT8_ARRAY,
            Type::INT8,
        ],
        "ord bigint, expires_at_ms bigint, present boolean",
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
             wanted AS (SELECT w.key, w.lock_id, w.ttl_ms, w.ord\n\
                 FROM unnest($1::text[], $2::text[], $3::bigint[])\n\
                 WITH ORDINALITY AS w(key, lock_id, ttl_ms, ord)),\n\
             renewed AS (\n\
                 UPDATE {table} AS p SET expires_at_ms = c.now_ms + w.ttl_ms\n\
                 FROM wanted w, clock c\n\
                 WHERE p.key = w.key AND p.lock_id = w.lock_id\n\
                   AND p.expires_at_ms > c.now_ms - $4\n\
                 RETURNING p.key, p.lock_id, p.expires_at_ms),\n\
             expired AS (\n\
                 SELECT p.key, p.lock_id FROM {table} p, wanted w, clock c\n\
                 WHERE p.key = w.key AND p.lock_id = w.lock_id\n\
                   AND p.expires_at_ms <= c.now_ms - $4)\n\
             SELECT w.ord, r.expires_at_ms,\n\
                    (r.lock_id IS NOT NULL OR d.lock_id IS NOT NULL) AS present\n\
             FROM wanted w\n\
             LEFT JOIN renewed r ON r.key = w.key AND r.lock_id = w.lock_id\n\
             LEFT JOIN expired d ON d.key = w.key AND d.lock_id = w.lock_id\n\
             ORDER BY w.ord"
        ),
    )
}

/// `$1` storage key, `$2` tolerance ms → the live holds of the key, as the lookups' rows
/// (`holder` as given), in fence order, at most `limit`.
pub(super) fn of_key(tables: &Quoted<'_>, name: &str, table: &str, limit: u32) -> Op {
    Op::query(
        tables.names,
        name,
        &[Type::TEXT, Type::INT8],
        ROW_COLUMNS,
        format!(
            "SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,\n\
                    p.user_key, p.holder\n\
             FROM {table} p\n\
             WHERE p.key = $1 AND p.expires_at_ms > {NOW_MS} - $2\n\
             ORDER BY p.fence COLLATE \"C\"\n\
             LIMIT {limit}"
        ),
    )
}

/// `$1` prefix, `$2` tolerance ms, `$3` rows at most → the live holds whose user key starts
/// with the prefix, as [`of_key`] answers them, in user-key byte order then fence order.
pub(super) fn under_prefix(tables: &Quoted<'_>, name: &str, table: &str) -> Op {
    Op::query(
        tables.names,
        name,
        &[Type::TEXT, Type::INT8, Type::INT8],
        ROW_COLUMNS,
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms)\n\
             SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,\n\
                    p.user_key, p.holder\n\
             FROM {table} p, clock c\n\
             WHERE starts_with(p.user_key, $1) AND p.expires_at_ms > c.now_ms - $2\n\
             ORDER BY p.user_key COLLATE \"C\", p.fence COLLATE \"C\"\n\
             LIMIT $3"
        ),
    )
}

/// PL/pgSQL of an acquire function, once `fence` holds the fence of a hold already stored
/// under the caller's lock id `$2` (the row `alias` of `table`), if any: such a hold is this
/// very call made again (the pool repeats a call once when its connection died before the
/// answer came), so it is answered as granted, with its fence, its expiry renewed to `$3` ms
/// from `now_ms` — not counted as another holder's, nor inserted a second time.
pub(super) fn answer_repeat(table: &str, alias: &str) -> String {
    format!(
        "IF fence IS NOT NULL THEN\n\
         UPDATE {table} {alias} SET expires_at_ms = now_ms + $3\n\
         WHERE {alias}.key = $1 AND {alias}.lock_id = $2\n\
         RETURNING {alias}.expires_at_ms INTO expires_at_ms;\n\
         RETURN;\n\
         END IF;\n"
    )
}

/// PL/pgSQL of an acquire function that grants the hold: answers the fence drawn (`counter`)
/// and the expiry, `$3` ms from `now_ms`, and inserts the hold with the holder `$8`; `fence` is
/// the value the row stores (an expression of the function's variables).
pub(super) fn grant(table: &str, fence: &str) -> String {
    format!(
        "fence := lpad(counter::text, 15, '0');\n\
         expires_at_ms := now_ms + $3;\n\
         INSERT INTO {table}\n\
         (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)\n\
         VALUES ($1, $2, now_ms + $3, now_ms, {fence}, $4, $8);\n"
    )
}
