//! Deleting expired rows in PL/pgSQL, written once for the tables whose rows expire and are
//! left behind by holders or waiters that died: permits, shared holds (readers) and places in
//! line. Each acquisition of a key deletes that key's expired rows (the permit and shared
//! acquire functions: [`sweep_expired`]; the line: `line_sql.rs`, step 3), and now and then a
//! few long-expired rows of any key ([`sweep_long_expired`]), so that a key never used again
//! (one per job id, whose holder or waiter was killed) leaves no row behind.
//!
//! The rows of other keys are taken `FOR UPDATE SKIP LOCKED`: the sweep never waits for them,
//! and the functions wait for nothing after taking them that a transaction wanting one of them
//! could hold (see `permit_sql.rs`, and `line_sql.rs` for the line), so they close no cycle of
//! waits — an acquirer of their own key that wants one waits for the sweeping call to end and
//! then finds it gone.

/// How long past its expiry (and the tolerance) a row of any key is left before an
/// acquisition of another key deletes it. One that expired a moment ago is left to its own
/// key's acquisitions and to its holder's last release or renewal, which answer it as expired
/// rather than unknown (a waiter that renews its place a moment late is judged by its own key's
/// acquisition, which read the clock after it). A renewal judges liveness by the clock its
/// statement read when it started: it would have to run for a minute to want a row a sweep
/// takes.
pub(super) const SWEEP_AFTER_MS: i64 = 60_000;

/// One call in this many, drawn at random, deletes expired rows of any key: the statement
/// costs about a tenth of a permit cycle's server time even when it finds nothing (measured in
/// docs/postgres.md), so most calls skip it.
pub(super) const SWEEP_EVERY: u32 = 8;

/// How many expired rows of any key one sweeping call deletes at most: on average
/// (`SWEEP_BATCH / SWEEP_EVERY`) eight times the one row a call may leave behind, so that
/// expired rows never pile up while calls go on, and few enough that one call stays cheap
/// after a crash left many.
pub(super) const SWEEP_BATCH: u32 = 64;

/// Deletes the expired rows (permits, shared holds) of the key `$1` in `table` (quoted), and,
/// one call in [`SWEEP_EVERY`], a few rows of any key that expired long ago
/// ([`sweep_long_expired`]): PL/pgSQL statements of an acquire function, after its clock
/// (`now_ms`) is read; `$7` the tolerance.
pub(super) fn sweep_expired(table: &str) -> String {
    format!(
        "DELETE FROM {table} p WHERE p.key = $1 AND p.expires_at_ms <= now_ms - $7;\n{}",
        sweep_long_expired(table)
    )
}

/// One call in [`SWEEP_EVERY`], drawn at random, deletes at most [`SWEEP_BATCH`] rows of any
/// key in `table` (quoted, with an index on `expires_at_ms`) that expired more than
/// [`SWEEP_AFTER_MS`] ago, the oldest first, skipping rows another transaction has locked:
/// PL/pgSQL statements, after the clock (`now_ms`) is read; `$7` the tolerance.
pub(super) fn sweep_long_expired(table: &str) -> String {
    format!(
        "IF random() < 1.0 / {SWEEP_EVERY} THEN\n\
         DELETE FROM {table} p WHERE p.ctid = ANY (ARRAY(\n\
         SELECT q.ctid FROM {table} q\n\
         WHERE q.expires_at_ms < now_ms - $7 - {SWEEP_AFTER_MS}\n\
         ORDER BY q.expires_at_ms LIMIT {SWEEP_BATCH}\n\
         FOR UPDATE SKIP LOCKED))\n\
         AND p.expires_at_ms < now_ms - $7 - {SWEEP_AFTER_MS};\n\
         END IF;\n"
    )
}
