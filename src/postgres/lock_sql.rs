//! A lock's statements: one SQL statement per operation, one round trip each, one implicit
//! transaction each, and the steps of a lock's acquisition in PL/pgSQL ([`LockSql`]), written
//! once for the acquire function (one key, `$1`) and the acquire function of a set (several
//! keys, `$1[i]`, `set_sql.rs`): reading the key's lock row (with the probes for live readers
//! and for the line), drawing the fence and writing the lock row. The line's steps are
//! `line_sql.rs`'s.
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
//!   not always contiguous (the specification asks for no repeats and no decreases). The fence
//!   counter is one `INSERT … ON CONFLICT DO UPDATE SET fence = fence + 1`, which PostgreSQL
//!   performs atomically also when the row is absent and two callers race (no duplicate fence
//!   1). The function form tries that lock first (`pg_try_advisory_xact_lock`); when another
//!   acquisition of the key holds it, an attempt the line refuses with nothing to write is
//!   answered from an unlocked read and never waits for it (`line_sql::refuse_unlocked`); every
//!   other one waits for the lock and reads again.
//! * **release** is `DELETE … WHERE lock_id = $1`: ownership is the `WHERE`, and a concurrent
//!   writer of the same row makes it wait and re-check (READ COMMITTED's re-evaluation).
//!   Liveness is judged on the deleted row, so an expired lock is reported absent (and removed).
//! * **extend** is `UPDATE … WHERE lock_id = $1 AND <live>`, re-checked the same way: it never
//!   revives an expired lock.
//! * **is_locked** and **lookup** only read; the opt-in cleanup deletes rows far past expiry,
//!   re-checked under the row lock, so a row renewed meanwhile is kept.
//!
//! Time is the server's `clock_timestamp()` in whole milliseconds, read once per statement
//! (`record_sql::NOW_MS`).

use postgres::types::Type;

use super::line_sql::{LINE_DECLARATIONS, admit_by_line, line_probe, refuse_unlocked};
use super::op::{Op, Sql};
use super::record_sql::{NOW_MS, Quoted, ROW_COLUMNS, acquire_types, holder_of, sound};

/// The lock acquire function's parameters (see `Statements::acquire`); the statement sent
/// inline takes the first seven.
pub(super) const ACQUIRE_TYPES: &[Type] =
    &acquire_types(Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT);

/// The columns of a lock record, as the statements sent inline write and read them (no
/// `holder`: tables the TypeScript SyncGuard created lack it).
const ROW: &str = "key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key";

/// Where a lock's acquisition finds its tables (quoted names) and the rule for a sound row.
pub(super) struct LockSql<'a> {
    pub tables: &'a Quoted<'a>,
}

/// One key of an acquisition, as SQL expressions: `$1`, `$2`, … for one key; `$1[i]`, … for
/// the `i`-th of a set.
pub(super) struct KeyArgs<'a> {
    pub key: &'a str,
    pub lock_id: &'a str,
    pub user_key: &'a str,
    pub fence_key: &'a str,
}

/// The key of a single-key acquisition: the function's parameters.
const ONE_KEY: KeyArgs<'static> = KeyArgs {
    key: "$1",
    lock_id: "$2",
    user_key: "$4",
    fence_key: "$5",
};

impl LockSql<'_> {
    /// Reads the key's lock row into `held` (a live lock of another lock id, or a live reader:
    /// no slot free), `malformed` (the row is not a SyncGuard record), `own` (the row holds
    /// this lock id: the call repeated) and `queued` (the line's probe), in one statement.
    pub fn read(&self, args: &KeyArgs<'_>) -> String {
        let (locks, shared, sound_l) = (
            &self.tables.locks,
            &self.tables.shared,
            &self.tables.sound_l,
        );
        let (key, lock_id) = (args.key, args.lock_id);
        let probe = line_probe(&self.tables.line, crate::driver::LeaseKind::Lock, key);
        format!(
            "SELECT (l.expires_at_ms > now_ms - $7 AND l.lock_id <> {lock_id}) IS TRUE\n\
                 OR EXISTS (SELECT 1 FROM {shared} s WHERE s.key = {key}\n\
                     AND s.expires_at_ms > now_ms - $7),\n\
                 l.key IS NOT NULL AND NOT {sound_l}, l.lock_id = {lock_id}, {probe}\n\
                 INTO held, malformed, own, queued\n\
                 FROM (SELECT 1) AS one LEFT JOIN {locks} l ON l.key = {key};\n"
        )
    }

    /// Draws the key's next fence into `counter` (NULL when its counter can be followed by no
    /// fence: below 0, or at the largest fence `$6`).
    pub fn draw_fence(&self, args: &KeyArgs<'_>) -> String {
        let (fences, fence_key, user_key) = (&self.tables.fences, args.fence_key, args.user_key);
        format!(
            "INSERT INTO {fences} AS f (fence_key, fence, key_debug) VALUES ({fence_key}, 1, {user_key})\n\
                 ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1\n\
                 WHERE f.fence >= 0 AND f.fence < $6\n\
                 RETURNING f.fence INTO counter;\n"
        )
    }

    /// [`draw_fence`](LockSql::draw_fence) for one key (`$1`); when no fence can follow its
    /// counter, answers the counter (`bad_counter`) and returns, with nothing written.
    pub fn draw_fence_or_refuse(&self) -> String {
        format!(
            "{draw_fence}\
             IF counter IS NULL THEN\n\
                 SELECT f.fence INTO bad_counter FROM {fences} f WHERE f.fence_key = $5;\n\
                 RETURN;\n\
             END IF;\n",
            draw_fence = self.draw_fence(&ONE_KEY),
            fences = self.tables.fences,
        )
    }

    /// Writes the lock row with the fence `counter`, expiring `$3` ms from `now_ms`, with the
    /// holder `$8`, unless a live lock of another lock id holds the key (then nothing is
    /// written and `into`, its fence and expiry, stays NULL).
    pub fn write_lock(&self, args: &KeyArgs<'_>, into: &str) -> String {
        let locks = &self.tables.locks;
        let (key, lock_id, user_key) = (args.key, args.lock_id, args.user_key);
        format!(
            "INSERT INTO {locks} AS l (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)\n\
                 VALUES ({key}, {lock_id}, now_ms + $3, now_ms, lpad(counter::text, 15, '0'), {user_key},\n\
                         {lock_id} || ' ' || $8)\n\
                 ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id,\n\
                     expires_at_ms = EXCLUDED.expires_at_ms,\n\
                     acquired_at_ms = EXCLUDED.acquired_at_ms,\n\
                     fence = EXCLUDED.fence, user_key = EXCLUDED.user_key,\n\
                     holder = EXCLUDED.holder\n\
                 WHERE l.expires_at_ms <= EXCLUDED.acquired_at_ms - $7\n\
                    OR l.lock_id = EXCLUDED.lock_id\n\
                 RETURNING l.fence, l.expires_at_ms INTO {into};\n"
        )
    }
}

/// A lock's free slots once its row is read ([`LockSql::read`]): one unless it is held.
const FREE: &str = "CASE WHEN held THEN 0 ELSE 1 END";

/// The lock's acquisition: the statement sent inline (the advisory lock first, then each step
/// reading the one before, see the module docs) and the function taking its steps one by one.
pub(super) fn acquire(tables: &Quoted<'_>) -> Op {
    let (locks, fences, line, sound_l) =
        (&tables.locks, &tables.fences, &tables.line, &tables.sound_l);
    let lock_sql = LockSql { tables };
    Op::steps(
        tables.names,
        "acquire",
        ACQUIRE_TYPES,
        "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, \
         OUT places_ahead bigint",
        format!(
            "WITH serialized AS (SELECT pg_advisory_xact_lock(hashtext($1::text))),\n\
             clock AS (SELECT {NOW_MS} AS now_ms FROM serialized),\n\
             free AS (SELECT now_ms FROM clock WHERE NOT EXISTS (\n\
                 SELECT 1 FROM {locks} l WHERE l.key = $1\n\
                 AND ((l.expires_at_ms > clock.now_ms - $7 AND l.lock_id <> $2)\n\
                      OR NOT {sound_l}))),\n\
             counter AS (\n\
                 INSERT INTO {fences} AS f (fence_key, fence, key_debug)\n\
                 SELECT $5, 1, $4 FROM free\n\
                 ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1\n\
                 WHERE f.fence >= 0 AND f.fence < $6\n\
                 RETURNING f.fence),\n\
             taken AS (\n\
                 INSERT INTO {locks} AS l ({ROW})\n\
                 SELECT $1, $2, free.now_ms + $3, free.now_ms,\n\
                        lpad(counter.fence::text, 15, '0'), $4\n\
                 FROM free, counter WHERE counter.fence <= $6\n\
                 ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id,\n\
                     expires_at_ms = EXCLUDED.expires_at_ms,\n\
                     acquired_at_ms = EXCLUDED.acquired_at_ms,\n\
                     fence = EXCLUDED.fence, user_key = EXCLUDED.user_key\n\
                 WHERE l.expires_at_ms <= EXCLUDED.acquired_at_ms - $7\n\
                    OR l.lock_id = EXCLUDED.lock_id\n\
                 RETURNING l.fence, l.expires_at_ms)\n\
             SELECT (SELECT fence FROM taken) AS fence,\n\
                    (SELECT expires_at_ms FROM taken) AS expires_at_ms,\n\
                    CASE WHEN EXISTS (SELECT 1 FROM free)\n\
                         AND NOT EXISTS (SELECT 1 FROM counter) THEN\n\
                        (SELECT f.fence FROM {fences} f WHERE f.fence_key = $5) END\n\
                        AS bad_counter,\n\
                    CASE WHEN (SELECT fence FROM counter) IS NULL THEN\n\
                        (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1) END\n\
                        AS malformed"
        ),
        format!(
            "DECLARE\n  now_ms bigint;\n  held boolean;\n  own boolean;\n  counter bigint;\n\
             {LINE_DECLARATIONS}\
             BEGIN\n\
             IF NOT pg_try_advisory_xact_lock(hashtext($1)) THEN\n\
             now_ms := {NOW_MS};\n\
             {lock_read}\
             IF malformed IS NOT TRUE AND own IS NOT TRUE THEN\n\
             {refusal}\
             END IF;\n\
             PERFORM pg_advisory_xact_lock(hashtext($1));\n\
             END IF;\n\
             now_ms := {NOW_MS};\n\
             {lock_read}\
             IF malformed THEN RETURN; END IF;\n\
             IF own IS NOT TRUE THEN\n\
             {lock_line}\
             END IF;\n\
             {draw_fence}\
             {write_lock}\
             END",
            lock_read = lock_sql.read(&ONE_KEY),
            refusal = refuse_unlocked(line, crate::driver::LeaseKind::Lock, FREE),
            lock_line = admit_by_line(line, crate::driver::LeaseKind::Lock, FREE),
            draw_fence = lock_sql.draw_fence_or_refuse(),
            write_lock = lock_sql.write_lock(&ONE_KEY, "fence, expires_at_ms"),
        ),
    )
    .inline_takes_first(7)
}

/// `$1` lock id, `$2` tolerance ms: deletes the lock (a sound record) and announces its release.
pub(super) fn release(tables: &Quoted<'_>) -> Op {
    let (locks, released, sound_l) = (&tables.locks, &tables.released, &tables.sound_l);
    Op::steps(
        tables.names,
        "release",
        &[Type::TEXT, Type::INT8],
        "OUT live boolean, OUT malformed_key text",
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
             gone AS (DELETE FROM {locks} l WHERE l.lock_id = $1 AND {sound_l}\n\
                 RETURNING l.expires_at_ms, l.user_key)\n\
             SELECT gone.expires_at_ms > clock.now_ms - $2 AS live, NULL::text AS malformed_key\n\
             FROM gone, clock,\n\
                 LATERAL (SELECT pg_notify('{released}', gone.user_key)) AS announced\n\
             UNION ALL\n\
             SELECT NULL, COALESCE(l.user_key, l.key) FROM {locks} l\n\
             WHERE NOT EXISTS (SELECT 1 FROM gone) AND l.lock_id = $1 AND NOT {sound_l}"
        ),
        format!(
            "DECLARE\n  gone_expires_at_ms bigint;\n  gone_key text;\n\
             BEGIN\n\
             DELETE FROM {locks} l WHERE l.lock_id = $1 AND {sound_l}\n\
                 RETURNING l.expires_at_ms, l.user_key INTO gone_expires_at_ms, gone_key;\n\
             IF FOUND THEN\n\
                 live := gone_expires_at_ms > {NOW_MS} - $2;\n\
                 PERFORM pg_notify('{released}', gone_key);\n\
             ELSE\n\
                 SELECT COALESCE(l.user_key, l.key) INTO malformed_key FROM {locks} l\n\
                 WHERE l.lock_id = $1 AND NOT {sound_l};\n\
             END IF;\n\
             END"
        ),
    )
}

/// `$1` lock id, `$2` ttl ms, `$3` tolerance ms: extends a live lock (a sound record).
pub(super) fn extend(tables: &Quoted<'_>) -> Op {
    Op::query(
        tables.names,
        "extend",
        &[Type::TEXT, Type::INT8, Type::INT8],
        "expires_at_ms bigint, present boolean, malformed_key text",
        extension(tables, ""),
    )
}

/// [`extend`]'s statement, and `$4` the holder description stored too (a leader's proclaim:
/// `LeaseRef::holder`). Sent inline only: a proclaim is rare, and the hot extension keeps its
/// statement and function as they are. Needs the `holder` column (`setup` adds it).
pub(super) fn proclaim(tables: &Quoted<'_>) -> Sql {
    Sql {
        text: extension(tables, ", holder = l.lock_id || ' ' || $4").into(),
        types: &[Type::TEXT, Type::INT8, Type::INT8, Type::TEXT],
    }
}

/// The extension of a live lock by its lock id, with `also_set` (more `SET` assignments, or
/// nothing).
fn extension(tables: &Quoted<'_>, also_set: &str) -> String {
    let Quoted { locks, sound_l, .. } = tables;
    format!(
        "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
             renewed AS (\n\
                 UPDATE {locks} AS l SET expires_at_ms = c.now_ms + $2{also_set} FROM clock c\n\
                 WHERE l.lock_id = $1 AND l.expires_at_ms > c.now_ms - $3 AND {sound_l}\n\
                 RETURNING l.expires_at_ms)\n\
             SELECT (SELECT expires_at_ms FROM renewed) AS expires_at_ms,\n\
                    EXISTS (SELECT 1 FROM {locks} WHERE lock_id = $1) AS present,\n\
                    CASE WHEN NOT EXISTS (SELECT 1 FROM renewed) THEN\n\
                        (SELECT COALESCE(l.user_key, l.key) FROM {locks} l\n\
                         WHERE l.lock_id = $1 AND NOT {sound_l}) END AS malformed_key"
    )
}

/// `$1` lock ids, `$2` their ttls ms, `$3` tolerance ms: extends the live locks, skipping rows
/// another transaction has locked.
pub(super) fn extend_many(tables: &Quoted<'_>) -> Op {
    let Quoted { locks, sound_l, .. } = tables;
    let sound_x = sound("x");
    Op::query(
        tables.names,
        "renew",
        &[Type::TEXT_ARRAY, Type::INT8_ARRAY, Type::INT8],
        "lock_id text, expires_at_ms bigint, present boolean, live boolean,\n\
         malformed_key text",
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
             wanted AS (SELECT w.lock_id, w.ttl_ms\n\
                 FROM unnest($1::text[], $2::bigint[]) AS w(lock_id, ttl_ms)),\n\
             target AS (\n\
                 SELECT l.key, l.lock_id, w.ttl_ms\n\
                 FROM {locks} l JOIN wanted w ON l.lock_id = w.lock_id, clock c\n\
                 WHERE l.expires_at_ms > c.now_ms - $3 AND {sound_l}\n\
                 FOR UPDATE OF l SKIP LOCKED),\n\
             renewed AS (\n\
                 UPDATE {locks} AS l SET expires_at_ms = c.now_ms + t.ttl_ms\n\
                 FROM target t, clock c\n\
                 WHERE l.key = t.key AND l.lock_id = t.lock_id\n\
                   AND l.expires_at_ms > c.now_ms - $3\n\
                 RETURNING l.lock_id, l.expires_at_ms)\n\
             SELECT w.lock_id, r.expires_at_ms,\n\
                    x.lock_id IS NOT NULL AS present,\n\
                    COALESCE(x.expires_at_ms > c.now_ms - $3, false) AS live,\n\
                    CASE WHEN r.lock_id IS NULL AND x.lock_id IS NOT NULL AND NOT {sound_x}\n\
                        THEN COALESCE(x.user_key, x.key) END AS malformed_key\n\
             FROM wanted w CROSS JOIN clock c\n\
             LEFT JOIN renewed r ON r.lock_id = w.lock_id\n\
             LEFT JOIN {locks} x ON x.lock_id = w.lock_id"
        ),
    )
}

/// `$1` key, `$2` tolerance ms: whether the key's lock is live, and its row sound.
pub(super) fn is_locked(tables: &Quoted<'_>) -> Op {
    let Quoted { locks, sound_l, .. } = tables;
    Op::query(
        tables.names,
        "locked",
        &[Type::TEXT, Type::INT8],
        "locked boolean, malformed boolean",
        format!(
            "SELECT EXISTS (SELECT 1 FROM {locks}\n\
             WHERE key = $1 AND expires_at_ms > {NOW_MS} - $2) AS locked,\n\
             (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1) AS malformed"
        ),
    )
}

/// As [`is_locked`], deleting first the key's row when it expired more than `$3` ms ago.
pub(super) fn is_locked_with_cleanup(tables: &Quoted<'_>) -> Op {
    let Quoted { locks, sound_l, .. } = tables;
    Op::query(
        tables.names,
        "sweep",
        &[Type::TEXT, Type::INT8, Type::INT8],
        "locked boolean, malformed boolean",
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
             swept AS (DELETE FROM {locks} l USING clock c\n\
                 WHERE l.key = $1 AND l.expires_at_ms < c.now_ms - $3 AND {sound_l})\n\
             SELECT EXISTS (SELECT 1 FROM {locks} l, clock c\n\
                 WHERE l.key = $1 AND l.expires_at_ms > c.now_ms - $2) AS locked,\n\
             (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1) AS malformed"
        ),
    )
}

/// `$1` the lock's `by` column (`key` or `lock_id`), `$2` tolerance ms: its live row, or one
/// that is not a SyncGuard record.
pub(super) fn lookup(tables: &Quoted<'_>, name: &str, by: &str) -> Op {
    let Quoted { locks, sound_l, .. } = tables;
    reading_holders(tables, name, &[Type::TEXT, Type::INT8], |holder| {
        format!(
            "SELECT {ROW}, {holder} AS holder FROM {locks} l WHERE l.{by} = $1\n\
             AND (l.expires_at_ms > {NOW_MS} - $2 OR NOT {sound_l})"
        )
    })
}

/// `$1` prefix, `$2` tolerance ms, `$3` rows at most: the rows whose user key starts with the
/// prefix that are live or not SyncGuard records, in user-key byte order.
pub(super) fn list(tables: &Quoted<'_>) -> Op {
    let Quoted { locks, sound_l, .. } = tables;
    let types = &[Type::TEXT, Type::INT8, Type::INT8];
    reading_holders(tables, "list", types, |holder| {
        format!(
            "WITH clock AS (SELECT {NOW_MS} AS now_ms)\n\
             SELECT l.key, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence,\n\
                    l.user_key, {holder} AS holder\n\
             FROM {locks} l, clock c\n\
             WHERE starts_with(COALESCE(l.user_key, l.key), $1)\n\
               AND (l.expires_at_ms > c.now_ms - $2 OR NOT {sound_l})\n\
             ORDER BY COALESCE(l.user_key, l.key) COLLATE \"C\"\n\
             LIMIT $3"
        )
    })
}

/// An operation reading lock rows with their holder description (`text` of the expression
/// that reads it): the function reads the `holder` column, which `setup` installs; the
/// statement sent inline reads none (always NULL), for tables the TypeScript SyncGuard created
/// lack it.
fn reading_holders(
    tables: &Quoted<'_>,
    name: &str,
    types: &'static [Type],
    text: impl Fn(&str) -> String,
) -> Op {
    Op::query_in_function(
        tables.names,
        name,
        types,
        ROW_COLUMNS,
        text("NULL::text"),
        text(&holder_of("l")),
    )
}
