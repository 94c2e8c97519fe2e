//! The statements of one set of tables, one per operation ([`Statements`]), each sent inline
//! or as a call of its server function (`op.rs`), one round trip and one transaction each.
//! They are written by kind, each file saying why its statements are atomic enough:
//!
//! * a lock's (acquire, release, extend, is_locked, lookups, listing): `lock_sql.rs`;
//! * several keys' locks at once (`acquire_all`): `set_sql.rs`;
//! * a semaphore's permits (`permit_acquire`): `permit_sql.rs`;
//! * shared holds (`shared_acquire`): `shared_sql.rs`;
//! * what permits and shared holds share (release, renewal, holders, listing): `holds_sql.rs`;
//! * the line (THE RULE in the acquire functions, reading and leaving it): `line_sql.rs`;
//! * deleting expired rows of any key: `sweep_sql.rs`;
//! * an operator's break of a key's holders, of every kind (inline only): `break_sql.rs`;
//! * the tables' quoted names, the clock and the rules for a lock row: `record_sql.rs`.

use super::break_sql::{self, Counter};
pub(crate) use super::op::{Op, SERVER_FINGERPRINT, SERVER_SHAPE, Sql};
use super::record_sql::Quoted;
pub(crate) use super::record_sql::release_channel;
use super::tables::TableNames;
use super::{holds_sql, line_sql, lock_sql, permit_sql, set_sql, shared_sql};
use crate::driver::MAX_PERMITS;

/// How many shared holders of one key [`Statements::readers`] answers at most (in fence order):
/// a bound on one call's work and answer, not on how many may hold (docs/postgres.md).
pub(crate) const MAX_READERS_FOUND: u32 = 10_000;

/// The statements for one set of tables: the lock and fence counter tables, and the semaphore
/// and permit tables named after the lock table (names are validated identifiers).
pub(crate) struct Statements {
    /// `$1` key, `$2` lock id, `$3` ttl ms, `$4` user key, `$5` fence key, `$6` largest fence,
    /// `$7` tolerance ms, and for the function only `$8` the holder description (NULL: none),
    /// stored in the `holder` column after the lock id (see `holder_of`), `$9` the line mode,
    /// `$10` the place id and `$11` the ticket the waiter carries (see `line_params`; the
    /// statement sent inline knows no line and barges) → one row: `fence` (text, null unless
    /// acquired), `expires_at_ms`,
    /// `bad_counter` (the key's fence counter when no fence can follow it — below 0, or at the
    /// largest fence — checked before anything is written: then nothing was), `malformed`
    /// (true when the key's row is not a SyncGuard record: then nothing was written), and for
    /// the function only `places_ahead` (a refused waiter that stands in line: how many live
    /// places stand ahead of its own; NULL when it took none; see `KeyLine::count_ahead`).
    pub acquire: Op,
    /// Several keys (function only): `acquire`'s parameters as arrays, one element per key in
    /// the set's order — `$1` storage keys, `$2` lock ids, `$4` user keys, `$5` fence keys — and
    /// the others as `acquire`'s, `$11` the ticket → one row: `lock_fences` (text[], one per key,
    /// null unless every key was taken), `expires_at_ms` (of every lease), `ticket` (the
    /// waiter's, when it stands in line after a refusal), `bad_key` and `bad_counter` (a key
    /// whose fence counter no fence can follow, and that counter: nothing was taken),
    /// `malformed_key` (the user key of a row that is not a SyncGuard record: nothing was
    /// taken), `places_ahead` (a refused waiter's, the most over the lines it stands in). See
    /// `set_sql.rs`.
    pub acquire_all: Op,
    /// `$1` lock id, `$2` tolerance ms → no row (not found; the function: a row of NULLs) or
    /// one row: `live` (bool), or
    /// `malformed_key` (the key of a row that is not a SyncGuard record, left in place).
    /// Announces the release on the table's release channel (`NOTIFY`), with the user key.
    pub release: Op,
    /// `$1` lock id, `$2` ttl ms, `$3` tolerance ms → one row: `expires_at_ms` (null unless
    /// extended), `present` (bool), `malformed_key` (see `release`).
    pub extend: Op,
    /// `$1` lock ids, `$2` their ttls ms, `$3` tolerance ms → one row per lock id: `lock_id`,
    /// `expires_at_ms` (null unless extended), `present`, `live`, `malformed_key` (see
    /// `release`). Rows locked by another
    /// transaction are skipped (`FOR UPDATE SKIP LOCKED`), not waited for: such a lease comes
    /// back present, live and not extended, and is tried again later.
    pub extend_many: Op,
    /// `$1` key, `$2` tolerance ms → one row: `locked` (bool), `malformed` (see `acquire`).
    pub is_locked: Op,
    /// `$1` key, `$2` tolerance ms, `$3` cleanup guard ms → one row: `locked` (bool),
    /// `malformed`.
    pub is_locked_with_cleanup: Op,
    /// `$1` key, `$2` tolerance ms → the live row, if any, or one that is not a SyncGuard
    /// record (live or not), with its `holder` description (the statement: always NULL, as it
    /// never names the column, which tables the TypeScript SyncGuard created lack).
    pub lookup_by_key: Op,
    /// `$1` lock id, `$2` tolerance ms → as `lookup_by_key`.
    pub lookup_by_id: Op,
    /// `$1` prefix, `$2` tolerance ms, `$3` rows at most → the rows whose user key starts with
    /// the prefix that are live or not SyncGuard records, in user-key byte order, with their
    /// `holder` as `lookup_by_key` (see `list.rs`).
    pub list: Op,
    /// Semaphores (function only). `$1` storage key, `$2` lock id, `$3` ttl ms, `$4` user key,
    /// `$5` permits, `$6` largest fence, `$7` tolerance ms, `$8` holder description (NULL:
    /// none), `$9` the line mode, `$10` the place id, `$11` the ticket (see `line_params`) → one
    /// row: `fence` (text, null unless a permit was granted), `expires_at_ms`,
    /// `bad_counter` (the semaphore's fence counter when no fence can follow it: then no permit
    /// was granted), `places_ahead` (as `acquire`'s). A live permit already stored under `$2`
    /// is answered as granted (see `permit_sql.rs`).
    pub permit_acquire: Op,
    /// Semaphores (function only). `$1` storage key, `$2` lock id, `$3` tolerance ms → one
    /// row: `live` (NULL when no such permit was stored; else whether it was live). Announces
    /// a removal on the lock table's release channel, with the user key.
    pub permit_release: Op,
    /// Semaphores (function only). `$1` storage keys, `$2` lock ids, `$3` ttls ms, `$4`
    /// tolerance ms → one row per permit, in the order given: `ord` (1-based position),
    /// `expires_at_ms` (null unless extended), `present` (false when no such permit was
    /// stored). An expired permit is answered as such, never extended; it is left for the
    /// next acquisition or release to remove.
    pub permit_renew: Op,
    /// Semaphores (function only). `$1` storage key, `$2` tolerance ms → the live permits, as
    /// the lookups' rows (`holder` as given), in fence order.
    pub permits: Op,
    /// Semaphores (function only). `$1` prefix, `$2` tolerance ms, `$3` rows at most → the
    /// live permits of the semaphores whose user key starts with the prefix, as `permits`
    /// answers them, in user-key byte order then fence order (see `list.rs`).
    pub permit_list: Op,
    /// Shared holds (function only). The parameters and answer of `acquire`; takes a shared
    /// hold of the key's lock (a row of the shared table, its fence from the lock's counter)
    /// unless a live lock is held or, by THE RULE, an exclusive place is ahead in the line. A
    /// live hold already stored under `$2` is answered as granted, renewed (the repeated
    /// request, as for permits).
    pub shared_acquire: Op,
    /// Shared holds (function only): as `permit_release`, on the shared table.
    pub shared_release: Op,
    /// Shared holds (function only): as `permit_renew`, on the shared table.
    pub shared_renew: Op,
    /// Shared holds (function only): as `permits`, on the shared table (at most
    /// [`MAX_READERS_FOUND`]).
    pub readers: Op,
    /// Shared holds (function only): as `permit_list`, on the shared table.
    pub shared_list: Op,
    /// The line (function only). `$1` storage key, `$2` kind (`'lock'` or `'permit'`, see
    /// `line_kind`), `$3` tolerance ms → the live places of that line, in ticket order:
    /// `place_id`, `ticket`, `expires_at_ms`, `holder` (the waiter's description as given),
    /// `shared` (whether it waits for a shared hold).
    pub line: Op,
    /// The line (function only). `$1` storage key, `$2` kind, `$3` place id → one row:
    /// `gone` (whether the place was there). One `DELETE`.
    pub leave_line: Op,
    /// `$1` lock id, `$2` ttl ms, `$3` tolerance ms, `$4` holder description → as `extend`,
    /// storing the description too (inline only; needs the `holder` column).
    pub proclaim: Sql,
    /// Breaks the key's lock (inline only; `break_sql.rs` says what it takes and answers), on
    /// tables with the `holder` column: the markers keep the break's note.
    pub break_lock: Sql,
    /// As `break_lock`, on tables without the `holder` column (made by the TypeScript
    /// SyncGuard): the marker has no holder text.
    pub break_lock_without_holder: Sql,
    /// Breaks the key's shared holds (inline only; see `break_lock`).
    pub break_shared: Sql,
    /// Breaks the key's semaphore's permits (inline only; see `break_lock`).
    pub break_permits: Sql,
}

impl Statements {
    pub fn new(tables: &TableNames) -> Statements {
        let sql = Quoted::new(tables);
        let (permits, shared) = (sql.permits.as_str(), sql.shared.as_str());
        Statements {
            acquire: lock_sql::acquire(&sql),
            acquire_all: set_sql::acquire_all(&sql),
            release: lock_sql::release(&sql),
            extend: lock_sql::extend(&sql),
            extend_many: lock_sql::extend_many(&sql),
            is_locked: lock_sql::is_locked(&sql),
            is_locked_with_cleanup: lock_sql::is_locked_with_cleanup(&sql),
            lookup_by_key: lock_sql::lookup(&sql, "by_key", "key"),
            lookup_by_id: lock_sql::lookup(&sql, "by_id", "lock_id"),
            list: lock_sql::list(&sql),
            permit_acquire: permit_sql::acquire(&sql),
            permit_release: holds_sql::release(&sql, "prelease", permits),
            permit_renew: holds_sql::renew(&sql, "prenew", permits),
            permits: holds_sql::of_key(&sql, "permits", permits, MAX_PERMITS),
            permit_list: holds_sql::under_prefix(&sql, "plist", permits),
            shared_acquire: shared_sql::acquire(&sql),
            shared_release: holds_sql::release(&sql, "srelease", shared),
            shared_renew: holds_sql::renew(&sql, "srenew", shared),
            readers: holds_sql::of_key(&sql, "readers", shared, MAX_READERS_FOUND),
            shared_list: holds_sql::under_prefix(&sql, "slist", shared),
            line: line_sql::places(&sql),
            leave_line: line_sql::leave_place(&sql),
            proclaim: lock_sql::proclaim(&sql),
            break_lock: breaking(break_sql::break_lock(&sql, true)),
            break_lock_without_holder: breaking(break_sql::break_lock(&sql, false)),
            break_shared: breaking(break_sql::break_holds(&sql, shared, Counter::Lock)),
            break_permits: breaking(break_sql::break_holds(&sql, permits, Counter::Semaphore)),
        }
    }

    /// Every operation, for installing their functions.
    fn all(&self) -> [&Op; 22] {
        [
            &self.acquire,
            &self.acquire_all,
            &self.release,
            &self.extend,
            &self.extend_many,
            &self.is_locked,
            &self.is_locked_with_cleanup,
            &self.lookup_by_key,
            &self.lookup_by_id,
            &self.list,
            &self.permit_acquire,
            &self.permit_release,
            &self.permit_renew,
            &self.permits,
            &self.permit_list,
            &self.shared_acquire,
            &self.shared_release,
            &self.shared_renew,
            &self.readers,
            &self.shared_list,
            &self.line,
            &self.leave_line,
        ]
    }

    /// Every operation, for checking their functions.
    pub fn operations(&self) -> impl Iterator<Item = &Op> {
        self.all().into_iter()
    }

    /// The DDL of every operation's server function.
    pub fn functions_ddl(&self) -> String {
        self.all()
            .iter()
            .map(|op| op.function_ddl())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A break statement (`break_sql.rs`), sent inline with its parameter types.
fn breaking(text: String) -> Sql {
    Sql {
        text: text.into(),
        types: break_sql::BREAK_TYPES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Function names are the lock table's name and the operation's: for the longest lock
    /// table each still fits PostgreSQL's 63 bytes (beyond, the server would truncate it and
    /// `to_regprocedure` would not find it).
    #[test]
    fn function_names_fit() {
        let tables = TableNames::new(&"l".repeat(51), "f").unwrap();
        for op in Statements::new(&tables).all() {
            assert!(op.function.len() <= 63, "{}", op.function);
        }
    }

    /// A proclaim has a statement of its own, the extension's with the holder text set too:
    /// the hot extension's statement (and its function, whose body `schema.sql` pins) stores no
    /// holder text and is the one every plain extension sends.
    #[test]
    fn a_proclaim_is_the_extension_that_also_sets_the_holder() {
        let statements = Statements::new(&TableNames::default());
        let extend = &*statements.extend.inline.text;
        assert!(!extend.contains("holder"), "{extend}");
        let proclaim = &*statements.proclaim.text;
        assert_ne!(proclaim, extend);
        assert_eq!(
            proclaim.replace(", holder = l.lock_id || ' ' || $4", ""),
            extend
        );
    }
}
