//! A shared hold's acquire function (`Statements::shared_acquire`); its release, renewal and
//! readings are `holds_sql.rs`'s, as the permits' are.
//!
//! A shared hold (a reader) of a key's lock is a row of `<lock table>_shared`, beside the lock
//! record: its own lock id, expiry and holder, and a fence drawn from the key's LOCK fence
//! counter, so fences order every grant of the key. Its operations exist only as server
//! functions, as the semaphore's do (on tables without them: `InvalidArgument`, run setup).
//! The shared acquire function takes the same advisory lock as the exclusive one, so the two
//! take turns per key and each later step reads a fresh snapshot that sees the other's
//! writes; it reads the lock row (a live lock refuses it) with the line's probe, deletes its
//! key's expired readers (and sometimes a few long-expired ones of any key, as permit
//! acquisitions do), answers a reader already stored under its own lock id as the pool's
//! repeat (renewed, granted, as a permit), decides THE RULE (a reader passes reader places,
//! never an exclusive one), draws the fence and inserts its row. The exclusive acquire
//! function asks whether a live reader exists in the statement that reads the lock row, with
//! one index probe: a key with a live reader is held, with no statement or write more.
//! Release, renewal (a batch), `readers` and the listing are the permit table's statements on
//! the shared table (the same code, `holds_sql.rs`). The statement sent inline for a lock
//! (tables without the functions) never reads the shared table, which such tables lack: there
//! are no readers there.

use super::holds_sql;
use super::line_sql::{LINE_DECLARATIONS, admit_by_line, line_probe};
use super::lock_sql::{ACQUIRE_TYPES, LockSql};
use super::op::Op;
use super::record_sql::{NOW_MS, Quoted};
use super::sweep_sql::sweep_expired;
use crate::driver::LeaseKind;

/// The acquire function of a shared hold (function only; see the module docs): the parameters
/// and answer of the lock's.
pub(super) fn acquire(tables: &Quoted<'_>) -> Op {
    let (locks, shared, line, sound_l) =
        (&tables.locks, &tables.shared, &tables.line, &tables.sound_l);
    Op::steps(
        tables.names,
        "sacquire",
        ACQUIRE_TYPES,
        "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, \
         OUT places_ahead bigint",
        String::new(),
        format!(
            "DECLARE\n  now_ms bigint;\n  held boolean;\n  counter bigint;\n\
             {LINE_DECLARATIONS}\
             BEGIN\n\
             PERFORM pg_advisory_xact_lock(hashtext($1));\n\
             now_ms := {NOW_MS};\n\
             SELECT l.expires_at_ms > now_ms - $7, l.key IS NOT NULL AND NOT {sound_l},\n\
                 {probe}\n\
                 INTO held, malformed, queued\n\
                 FROM (SELECT 1) AS one LEFT JOIN {locks} l ON l.key = $1;\n\
             IF malformed THEN RETURN; END IF;\n\
             {sweep}\
             SELECT s.fence INTO fence FROM {shared} s WHERE s.key = $1 AND s.lock_id = $2;\n\
             {repeat}\
             {line_rule}\
             {draw_fence}\
             {grant}\
             END",
            probe = line_probe(line, LeaseKind::Lock, "$1"),
            sweep = sweep_expired(shared),
            repeat = holds_sql::answer_repeat(shared, "s"),
            line_rule = admit_by_line(line, LeaseKind::Shared, "CASE WHEN held THEN 0 ELSE 1 END"),
            draw_fence = LockSql { tables }.draw_fence_or_refuse(),
            grant = holds_sql::grant(shared, "fence"),
        ),
    )
    .function_only()
}
