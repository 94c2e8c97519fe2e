//! An operator's break ([`Driver::break_leases`](crate::driver::Driver::break_leases)) as one
//! statement per kind of lease, sent inline (a break is rare: no server function to install,
//! and it works on tables the TypeScript SyncGuard made, which have none), as an unnamed
//! statement with its parameter types, so through a transaction-mode pooler too. One statement
//! is one transaction: the live holders removed, each replaced by a marker with the next fence
//! of the key's sequence, the counter moved, and the release announced, or nothing.
//!
//! Every break statement takes the parameters [`BREAK_TYPES`]: `$1` storage key, `$2` user key,
//! `$3` the lock's fence key (a semaphore's break ignores it), `$4` the one lock id to break
//! (NULL: every holder), `$5` the delay in ms (NULL: the rest of each broken lease), `$6` the
//! markers' holder text, `$7` the markers' lock ids, drawn by the client (empty: no markers),
//! `$8` tolerance ms, `$9` the largest fence. Each answers rows of `role`, a record's columns
//! and a status' (`stale`, `needed`, `bad_counter`, `malformed`, `repeated`): one
//! `holder` row per live holder removed, one `marker` row per marker written (as the lookups
//! answer records), and one `status` row: `stale` (nothing was done: a grant on the key
//! committed while the statement waited, unseen by its snapshot — send it again), `needed` (the
//! number of marker lock ids the break may need when `$7` has fewer: nothing was done),
//! `bad_counter` (no fence can follow the key's counter: holders were removed, no marker
//! written, as the in-memory store does), `malformed` (the lock row is not a SyncGuard record:
//! left alone), `repeated` (a marker of the key has one of `$7`'s lock ids: this very
//! statement was carried out before — the pool sends a call again once when its connection
//! died before the answer came — and its answer is lost; holds are not broken again).
//!
//! Why each is right, although one statement reads one snapshot, taken before it waited for
//! the key:
//!
//! * **a lock** ([`break_lock`]): `pg_advisory_xact_lock(hashtext(key))` first, the lock every
//!   acquisition of the key takes (the TypeScript SyncGuard's too), then the `DELETE` of the
//!   lock row. A row changed while the statement waited (taken over, renewed, turned into a
//!   marker) is re-checked on its latest version (READ COMMITTED's re-evaluation), so the
//!   holder removed is the current one, never a marker; a row deleted meanwhile is skipped; a
//!   row inserted meanwhile (the key was free at the snapshot) is not seen, and the break
//!   answers nothing held, as if it came first — true at a moment while it ran. The fence
//!   counter is moved by `INSERT … ON CONFLICT DO UPDATE`, which works on its latest version;
//!   the marker is inserted from the `DELETE`'s answer, so after it.
//! * **shared holds and permits** ([`break_holds`]): readers and permits are rows of their own,
//!   so a grant committed while the statement waited inserts a row its snapshot cannot see,
//!   which it would leave behind with a fence below the markers'. Every grant moves the
//!   counter the fences come from (the lock's, for readers, taken under the advisory lock; the
//!   semaphore's row, which permit acquirers lock), so the statement locks that counter row,
//!   reads its latest value and compares it with its snapshot's: equal, nothing was granted
//!   since the snapshot and every hold is seen; different, it does nothing and answers
//!   `stale`. Rows of the key renewed or released meanwhile are re-checked or skipped, as a
//!   lock's.
//!
//! Liveness and now are the server's clock ([`NOW_MS`]), read once, after the wait; a
//! marker's expiry is `driver::marker_expiry`'s rule written in SQL ([`marker_expiry`]), for it
//! needs that clock.

use postgres::types::Type;

use super::record_sql::{NOW_MS, Quoted, holder_of};
use crate::driver::LOCK_ID_LENGTH;

/// The parameters of every break statement (see the module docs).
pub(super) const BREAK_TYPES: &[Type] = &[
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT_ARRAY,
    Type::INT8,
    Type::INT8,
];

/// The record columns of a `status` row.
const NO_RECORD: &str = "NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::text, \
                         NULL::text, NULL::text";

/// The status columns of a record's row (named: the first row's names are the answer's).
const NO_STATUS: &str = "NULL::boolean AS stale, NULL::bigint AS needed, \
     NULL::bigint AS bad_counter, NULL::boolean AS malformed, NULL::boolean AS repeated";

/// Whether a row of `table` (quoted) of the key is a marker this statement wrote (`repeated`).
fn repeated(table: &str) -> String {
    format!("EXISTS (SELECT 1 FROM {table} r WHERE r.key = $1 AND r.lock_id = ANY ($7))")
}

/// Whether the lock id of row `p` is not a break's marker (`driver::is_marker`, in SQL).
fn not_a_marker(p: &str) -> String {
    format!("NOT (length({p}.lock_id) = {LOCK_ID_LENGTH} AND right({p}.lock_id, 1) = '-')")
}

/// The expiry of the marker that takes the place of the broken row `b` (whose `now_ms` is the
/// statement's clock): `driver::marker_expiry` with the delay `$5`.
fn marker_expiry(b: &str) -> String {
    format!(
        "CASE WHEN $5::bigint IS NULL THEN GREATEST({b}.expires_at_ms, {b}.now_ms + 1)\n\
         ELSE {b}.now_ms + $5 END"
    )
}

/// Breaks the key's lock: its row, unless a marker, replaced by a marker (see the module
/// docs). `with_holder`: the table has the `holder` column (`setup` adds it), which keeps the
/// break's note; tables the TypeScript SyncGuard made lack it, and their marker has no holder
/// text.
pub(super) fn break_lock(tables: &Quoted<'_>, with_holder: bool) -> String {
    let Quoted {
        locks,
        fences,
        released,
        sound_l,
        ..
    } = tables;
    let (holder_column, holder_value, holder_read) = if with_holder {
        (", holder", ", $7[1] || ' ' || $6", holder_of("l"))
    } else {
        ("", "", "NULL::text".to_owned())
    };
    format!(
        "WITH serialized AS (SELECT pg_advisory_xact_lock(hashtext($1::text))),\n\
         clock AS (SELECT {NOW_MS} AS now_ms FROM serialized),\n\
         gone AS (\n\
             DELETE FROM {locks} l USING clock c\n\
             WHERE l.key = $1 AND {sound_l} AND {not_marker}\n\
               AND ($4::text IS NULL OR l.lock_id = $4)\n\
             RETURNING l.key, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence, l.user_key,\n\
                 {holder_read} AS holder, l.expires_at_ms > c.now_ms - $8 AS live, c.now_ms),\n\
         counter AS (\n\
             INSERT INTO {fences} AS f (fence_key, fence, key_debug)\n\
             SELECT $3, 1, $2 FROM gone WHERE gone.live AND cardinality($7) > 0\n\
             ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1\n\
             WHERE f.fence >= 0 AND f.fence < $9\n\
             RETURNING f.fence),\n\
         marker AS (\n\
             INSERT INTO {locks} AS l (key, lock_id, expires_at_ms, acquired_at_ms, fence,\n\
                 user_key{holder_column})\n\
             SELECT b.key, $7[1], {expiry}, b.now_ms, lpad(n.fence::text, 15, '0'),\n\
                 b.user_key{holder_value}\n\
             FROM gone b, counter n WHERE b.live\n\
             RETURNING l.key, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence, l.user_key,\n\
                 {holder_read} AS holder)\n\
         {answer}\
         UNION ALL\n\
         SELECT 'status', {NO_RECORD}, false, NULL::bigint,\n\
             CASE WHEN cardinality($7) > 0 AND EXISTS (SELECT 1 FROM gone WHERE live)\n\
                 AND NOT EXISTS (SELECT 1 FROM counter) THEN\n\
                 COALESCE((SELECT f.fence FROM {fences} f WHERE f.fence_key = $3), -1) END,\n\
             (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1), {repeated}",
        // A repeat finds its marker in the key's one row, which it never breaks.
        repeated = repeated(locks),
        not_marker = not_a_marker("l"),
        expiry = marker_expiry("b"),
        answer = answer(released),
    )
}

/// Where a holds table takes its turn and draws its fences: the readers' from the key's lock
/// counter, under the lock's advisory lock; the permits' from the semaphore's row, which
/// permit acquirers lock.
pub(super) enum Counter {
    /// The key's lock fence counter (shared holds).
    Lock,
    /// The semaphore's own counter (permits).
    Semaphore,
}

/// Breaks the holds (shared holds or permits) of the key in `table` (quoted): the live ones,
/// not markers, each replaced by a marker, fences drawn from `counter` in the broken holds'
/// fence order (see the module docs).
pub(super) fn break_holds(tables: &Quoted<'_>, table: &str, counter: Counter) -> String {
    let Quoted {
        fences,
        semaphores,
        released,
        ..
    } = tables;
    // `latest` locks the counter row (`f`) after the key's turn is taken, and answers its
    // latest value; `seen` is the snapshot's.
    let (turn, counter_table, counter_key) = match counter {
        Counter::Lock => (
            format!(
                "serialized AS (SELECT pg_advisory_xact_lock(hashtext($1::text))),\n\
                 clock AS (SELECT {NOW_MS} AS now_ms FROM serialized),\n\
                 latest AS (SELECT f.fence FROM {fences} f, clock c\n\
                     WHERE f.fence_key = $3 FOR UPDATE OF f),\n"
            ),
            fences,
            "f.fence_key = $3",
        ),
        Counter::Semaphore => (
            format!(
                "latest AS (SELECT f.fence FROM {semaphores} f WHERE f.key = $1 FOR UPDATE),\n\
                 clock AS (SELECT {NOW_MS} AS now_ms FROM (SELECT count(*) FROM latest) AS waited),\n"
            ),
            semaphores,
            "f.key = $1",
        ),
    };
    let wanted = format!(
        "p.key = $1 AND {} AND ($4::text IS NULL OR p.lock_id = $4)",
        not_a_marker("p")
    );
    format!(
        "WITH {turn}\
         seen AS (SELECT f.fence FROM {counter_table} f WHERE {counter_key}),\n\
         fresh AS (SELECT c.now_ms FROM clock c\n\
             WHERE (SELECT fence FROM seen) IS NOT DISTINCT FROM (SELECT fence FROM latest)),\n\
         candidates AS (SELECT count(*) AS n FROM {table} p WHERE {wanted}),\n\
         go AS (SELECT f.now_ms FROM fresh f, candidates k\n\
             WHERE (cardinality($7) = 0 OR k.n <= cardinality($7)) AND NOT {repeated}),\n\
         gone AS (\n\
             DELETE FROM {table} p USING go c WHERE {wanted}\n\
             RETURNING p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence, p.user_key,\n\
                 p.holder, p.expires_at_ms > c.now_ms - $8 AS live, c.now_ms),\n\
         broken AS (\n\
             SELECT g.*, row_number() OVER (ORDER BY g.fence COLLATE \"C\") AS n FROM gone g\n\
             WHERE g.live AND cardinality($7) > 0),\n\
         counter AS (\n\
             UPDATE {counter_table} f SET fence = f.fence + b.total\n\
             FROM (SELECT count(*) AS total FROM broken) b\n\
             WHERE {counter_key} AND b.total > 0\n\
               AND f.fence >= 0 AND f.fence + b.total <= $9\n\
             RETURNING f.fence, b.total),\n\
         marker AS (\n\
             INSERT INTO {table} AS p\n\
                 (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)\n\
             SELECT b.key, $7[b.n], {expiry}, b.now_ms,\n\
                 lpad((n.fence - n.total + b.n)::text, 15, '0'), b.user_key, $6\n\
             FROM broken b, counter n\n\
             RETURNING p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence, p.user_key,\n\
                 p.holder)\n\
         {answer}\
         UNION ALL\n\
         SELECT 'status', {NO_RECORD}, NOT EXISTS (SELECT 1 FROM fresh),\n\
             CASE WHEN EXISTS (SELECT 1 FROM fresh) AND NOT EXISTS (SELECT 1 FROM go)\n\
                 AND NOT {repeated} THEN (SELECT n FROM candidates) END,\n\
             CASE WHEN EXISTS (SELECT 1 FROM broken) AND NOT EXISTS (SELECT 1 FROM counter)\n\
                 THEN COALESCE((SELECT fence FROM latest), -1) END,\n\
             NULL::boolean, {repeated}",
        repeated = repeated(table),
        expiry = marker_expiry("b"),
        answer = answer(released),
    )
}

/// The rows of the holders removed (each live one announced on the release channel, with its
/// user key, as a release is) and of the markers written, from the CTEs `gone` and `marker`.
fn answer(released: &str) -> String {
    format!(
        "SELECT 'holder' AS role, g.key, g.lock_id, g.expires_at_ms, g.acquired_at_ms, g.fence,\n\
             g.user_key, g.holder, {NO_STATUS}\n\
         FROM gone g, LATERAL (SELECT pg_notify('{released}', g.user_key) WHERE g.live)\n\
             AS announced\n\
         WHERE g.live\n\
         UNION ALL\n\
         SELECT 'marker', m.key, m.lock_id, m.expires_at_ms, m.acquired_at_ms, m.fence,\n\
             m.user_key, m.holder, {NO_STATUS}\n\
         FROM marker m\n"
    )
}
