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
//!
//! # Server functions
//!
//! Each operation is also installed by `setup_schema` as a PL/pgSQL function, named after the
//! lock table and the operation (`syncguard_locks_acquire_v6`, …). Calling it is one statement,
//! one transaction, as the statement is — but planned in microseconds: PL/pgSQL keeps its
//! statements' plans for the life of the server connection, which survives behind a
//! transaction-mode pooler where a client's prepared statements cannot. Sent inline, the acquire
//! statement spends more time being parsed and planned than running. Without the functions
//! (tables created by an older syncguard or by the TypeScript SyncGuard) the statements are sent
//! inline. The version suffix changes whenever a statement or function does, so an old function
//! is never called for a new statement.
//!
//! Most functions run their statement as it is (`RETURN QUERY <statement>`). The two that every
//! lock cycle runs, acquire and release, take the statement's steps one by one instead and answer
//! one row of `OUT` parameters (`Op::steps`): the same writes under the same locks, but each step
//! a small cached plan and no result set to build. Measured against the statement form they cost
//! the server about a tenth less CPU per cycle (docs/benchmarks.md). The steps keep the
//! statement's guarantees: acquire takes the advisory lock first and each later statement of the
//! function reads a fresh snapshot (READ COMMITTED, volatile function), so it sees every lock
//! committed while it waited; the lock row's `ON CONFLICT … WHERE <expired>` still decides; a
//! row that is not a SyncGuard record stops it before the fence counter is touched; a fence
//! counter no fence can follow stops it before the lock row is written. Release deletes by lock
//! id with the record check, then announces the release; when nothing was deleted it answers a
//! row of NULLs (the statement: no row), or the key of a row that is not a SyncGuard record.
//!
//! # Semaphores
//!
//! A semaphore's permits live in tables of their own (`<lock table>_permits`, one row per
//! permit, and `<lock table>_semaphores`, one row per semaphore with its own fence counter),
//! never in the lock table or the fence counter table, so the lock on a key and the semaphore
//! on it never see each other. Its operations exist only as server functions: counting the
//! live permits is only right once every other acquirer of the semaphore is shut out, and a
//! single statement reads one snapshot taken before it waited for that. So acquire, step by
//! step: makes sure the semaphore row exists (`INSERT … ON CONFLICT DO NOTHING`, which waits
//! for a concurrent insert of it), locks it (`SELECT … FOR UPDATE`: acquirers of one semaphore
//! take turns here, through a pooler too — it is held until the call's transaction commits),
//! reads the clock, deletes the expired permits, counts the others (a fresh snapshot: it sees
//! every permit granted by an acquirer that held the row lock before), and grants a permit
//! only when fewer than the caller's N are held, with the counter plus one as its fence. A
//! permit already held under the caller's lock id is this very call made again (the pool
//! repeats a call once when its connection died before the answer came, and a lock id is
//! drawn afresh for every acquisition): it is answered as granted, with its fence, its expiry
//! renewed to the caller's TTL from now — as the lock's acquire renews its own lock id's row —
//! instead of being counted as another holder's (the semaphore would look full of its own
//! permit) or inserted a second time (a duplicate key). Between deleting its key's expired
//! permits and counting, one acquisition in `SWEEP_EVERY` (drawn at random) also
//! deletes a few permits of any key that expired more than a minute ago (`sweep_sql.rs`:
//! `SWEEP_AFTER_MS`; the oldest first, at most `SWEEP_BATCH`, found through the
//! permit table's index on `expires_at_ms`), so that a semaphore whose key is never used again
//! (one per job id) leaves no permit row behind; its semaphore row stays, as a lock's fence
//! counter row does, for it holds the fence counter. Those rows are taken `FOR UPDATE SKIP
//! LOCKED`: the acquisition never waits for them, and waits for nothing after taking them (the
//! count only reads, the semaphore row is its own already, and so is the key and lock id of a
//! permit it inserts), so they close no cycle of waits — an acquirer of their own key, or a
//! release, that wants one waits for this call to end and then finds it gone. Renewals never
//! want them: they touch only the permits live by their own statement's clock. Each
//! table is first locked in the strongest mode the call takes on it (`ROW EXCLUSIVE`, by the
//! first `INSERT` or `DELETE`), so no call waits to upgrade a lock it already holds. Release
//! deletes the permit by key and lock id and announces it like a lock's release; renewal
//! extends the live permits named, in one statement, and leaves the expired ones to the next
//! acquisition or release (deleting them too, it could take two rows an acquirer is deleting in
//! the other order, and deadlock with it); neither takes the semaphore row, so a release never
//! waits for acquirers. Listing the permits under a key prefix only reads, like the lock
//! listing: the live rows of the permit table whose user key starts with it, by user key
//! (`COLLATE "C"`) then fence, one more than the limit. Without the functions
//! (tables set up by an older syncguard or by the TypeScript SyncGuard) the call is refused
//! with `InvalidArgument`, saying to run `syncguard setup`.
//!
//! # Shared holds
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
//! the shared table (the same code: `release_by_key`, `renew_by_key`, `holders_of_key`,
//! `holders_under_prefix`). The statement sent inline for a lock (tables without the functions)
//! never reads the shared table, which such tables lack: there are no readers there.
//!
//! # The line
//!
//! Both acquire functions decide THE RULE of the key's line (`<lock table>_line`) in their own
//! transaction, once they have shut out the key's other acquirers (the advisory lock, the
//! semaphore's row lock), with the steps `line_sql::admit_by_line` writes and `line_sql.rs`
//! explains: an index probe when the line is empty, nothing more. A refused waiter sometimes
//! also sweeps long-expired places of any key (`sweep_sql.rs`, as permits and readers are). Their statements sent
//! inline (locks on tables without the functions) know no line: they barge. Reading the live
//! places (`Statements::line`, by ticket then place id) and leaving the line
//! (`Statements::leave_line`) are one statement each, through their functions only.
//!
//! # Several keys
//!
//! `Statements::acquire_all` takes the locks of a set of keys, all or none, in one call of its
//! function (function only; on tables without it the driver takes the keys one at a time with
//! `acquire`). Its steps are the acquire function's, written once for both (`lock_sql.rs`,
//! which says why it takes the keys' advisory locks in the order of their numbers).

use std::sync::Arc;

use postgres::types::Type;
use sha2::{Digest, Sha256};

use super::line_sql::{LINE_DECLARATIONS, admit_by_line, line_probe};
use super::lock_sql::{KeyArgs, LockSql};
use super::sweep_sql::sweep_expired;
use super::tables::TableNames;
use crate::driver::{LeaseKind, MAX_PERMITS};

/// One statement: its text and its parameter types, sent together as an unnamed statement
/// (one round trip; nothing is left prepared on the server, which poolers require).
#[derive(Clone)]
pub(crate) struct Sql {
    pub text: Arc<str>,
    pub types: &'static [Type],
}

/// One operation: its statement, and the server function that does the same.
pub(crate) struct Op {
    /// The statement itself.
    pub inline: Sql,
    /// `SELECT * FROM <function>($1, …)`.
    pub call: Sql,
    /// The function's name (a validated identifier).
    pub function: String,
    /// What the function answers: its `OUT` parameters or the columns of its table.
    outputs: Outputs,
    /// The function's PL/pgSQL source, as the server keeps it (`pg_proc.prosrc`).
    source: String,
}

/// What a server function answers.
enum Outputs {
    /// `RETURNS TABLE (<columns>)`.
    Table(String),
    /// `OUT name type, …` parameters after the inputs: one row.
    Params(String),
}

impl Op {
    /// An operation whose function runs the statement itself (`RETURN QUERY <statement>`).
    fn query(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        returns: &str,
        text: String,
    ) -> Op {
        Op::query_in_function(tables, name, types, returns, text.clone(), text)
    }

    /// An operation whose function runs `in_function`, a statement with the same parameters
    /// and result columns as the one sent inline, `text` (the lookups: only the function,
    /// which `setup` installs with the `holder` column, reads that column).
    fn query_in_function(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        returns: &str,
        text: String,
        in_function: String,
    ) -> Op {
        let source = plpgsql(&format!("BEGIN\n  RETURN QUERY {in_function};\nEND"));
        Op::new(
            tables,
            name,
            types,
            text,
            Outputs::Table(returns.to_owned()),
            source,
        )
    }

    /// An operation whose function takes the statement's steps one by one (`body`, PL/pgSQL
    /// after `#variable_conflict use_column`), answering one row of `OUT` parameters (`outs`,
    /// as `OUT name type, …`) with the statement's result columns.
    fn steps(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        outs: &str,
        text: String,
        body: String,
    ) -> Op {
        Op::new(
            tables,
            name,
            types,
            text,
            Outputs::Params(outs.to_owned()),
            plpgsql(&body),
        )
    }

    /// The same operation, existing only as its server function (written with no statement
    /// to send inline): nothing correct can be sent inline (see "Semaphores" in the module
    /// docs), so its `inline` form is the call itself, and without the function the call fails
    /// with the `InvalidArgument` refusal that says to run `syncguard setup`.
    fn function_only(mut self) -> Op {
        self.inline = self.call.clone();
        self
    }

    fn new(
        tables: &TableNames,
        name: &str,
        types: &'static [Type],
        text: String,
        outputs: Outputs,
        source: String,
    ) -> Op {
        // A lock table name has at most 51 bytes and an operation's name at most 8, so this
        // stays within PostgreSQL's 63 (tests::function_names_fit).
        let function = format!("{}_{name}_{FUNCTION_VERSION}", tables.lock_table());
        let args: Vec<String> = (1..=types.len()).map(|n| format!("${n}")).collect();
        Op {
            call: Sql {
                text: format!("SELECT * FROM {function}({})", args.join(", ")).into(),
                types,
            },
            inline: Sql {
                text: text.into(),
                types,
            },
            function,
            outputs,
            source,
        }
    }

    /// The same operation, whose statement sent inline takes only the first `count` of the
    /// function's parameters: the function takes more (acquire's holder, which the statement
    /// — sent on tables that may lack the `holder` column — never names).
    fn inline_takes_first(mut self, count: usize) -> Op {
        self.inline.types = &self.inline.types[..count.min(self.inline.types.len())];
        self
    }

    /// `CREATE OR REPLACE FUNCTION …` for this operation.
    fn function_ddl(&self) -> String {
        let result = match &self.outputs {
            Outputs::Table(columns) => format!(") RETURNS TABLE ({columns})"),
            Outputs::Params(outs) => format!(",\n  {outs})"),
        };
        format!(
            "CREATE OR REPLACE FUNCTION {}({}{result}\nLANGUAGE plpgsql AS $syncguard${}$syncguard$;\n",
            self.function,
            self.parameter_types(),
            self.source
        )
    }

    /// The function's parameters and result as the server prints them
    /// (`pg_get_function_arguments`, ` -> `, `pg_get_function_result`): what `CREATE OR
    /// REPLACE` cannot change, so a function of the same signature that differs here must be
    /// dropped before it is created again.
    pub fn shape(&self) -> String {
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let (arguments, result) = match &self.outputs {
            Outputs::Table(columns) => {
                (self.parameter_types(), format!("TABLE({})", words(columns)))
            }
            Outputs::Params(outs) => {
                // One OUT parameter makes the function return its type; several, a record.
                let single = (!outs.contains(','))
                    .then(|| outs.split_whitespace().last())
                    .flatten();
                (
                    format!("{}, {}", self.parameter_types(), words(outs)),
                    single.unwrap_or("record").to_owned(),
                )
            }
        };
        format!("{arguments} -> {result}")
    }

    /// What tells this function from any other of its signature: SHA-256 (hex) of its
    /// language, [`shape`](Op::shape) and source, as [`SERVER_FINGERPRINT`] computes it from the
    /// catalog.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(format!("plpgsql\n{}\n{}", self.shape(), self.source));
        digest.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The function's name and parameter types, as `to_regprocedure` reads them.
    pub fn signature(&self) -> String {
        format!("{}({})", self.function, self.parameter_types())
    }

    fn parameter_types(&self) -> String {
        let types: Vec<&str> = self
            .call
            .types
            .iter()
            .map(|t| match *t {
                Type::INT8 => "bigint",
                Type::INT8_ARRAY => "bigint[]",
                Type::TEXT_ARRAY => "text[]",
                _ => "text",
            })
            .collect();
        types.join(", ")
    }
}

/// A PL/pgSQL function's source around `body`. `use_column`: the result columns share names
/// with table columns, and the statements mean the table's.
fn plpgsql(body: &str) -> String {
    format!("\n#variable_conflict use_column\n{body}\n")
}

/// The server's side of [`Op::fingerprint`], for the function `pg_proc` row `p`: SHA-256 (hex)
/// of its language, parameters, result and source. Computed from the catalog, so a function
/// replaced behind syncguard's back (another body under the same name and signature) no
/// longer matches, whatever comment or name it kept.
pub(crate) const SERVER_FINGERPRINT: &str = "encode(sha256(convert_to(\
     (SELECT l.lanname FROM pg_language l WHERE l.oid = p.prolang) || E'\\n' \
     || pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) \
     || E'\\n' || p.prosrc, 'UTF8')), 'hex')";

/// The server's side of [`Op::shape`], for the function `pg_proc` row `p`.
pub(crate) const SERVER_SHAPE: &str =
    "pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid)";

/// The channel releases are announced on (`NOTIFY`, with the user key as payload): the lock
/// table's name and `_released`, at most 60 bytes.
pub(crate) fn release_channel(tables: &TableNames) -> String {
    format!("{}_released", tables.lock_table())
}

/// How many shared holders of one key [`Statements::readers`] answers at most (in fence order):
/// a bound on one call's work and answer, not on how many may hold (docs/postgres.md).
pub(crate) const MAX_READERS_FOUND: u32 = 10_000;

/// Part of every function's name; bump it whenever a statement or its parameters change.
const FUNCTION_VERSION: &str = "v6";

const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The lock acquire function's parameters (see `Statements::acquire`); the statement sent
/// inline takes the first seven.
const ACQUIRE_TYPES: &[Type] = &[
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
];

/// The set's acquire function's parameters (see `Statements::acquire_all`): the lock's, with
/// arrays of keys, lock ids, user keys and fence keys.
const ACQUIRE_ALL_TYPES: &[Type] = &[
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
];

/// The permit acquire function's parameters (see `Statements::permit_acquire`): the lock's,
/// but `$5` is the number of permits.
const PERMIT_ACQUIRE_TYPES: &[Type] = &[
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
];

/// The holder description of the row `l`, if it was written for the lock the row holds now: the
/// `holder` column holds that lock's id, a space, and the description. The TypeScript
/// SyncGuard's acquisition leaves the column as it was when it takes a key over from an expired
/// lock of ours (it writes only the columns it names): that description is another lock's, and
/// reads as none.
fn holder_of(l: &str) -> String {
    format!(
        "CASE WHEN left({l}.holder, {id_and_space}) = {l}.lock_id || ' ' \
         THEN substr({l}.holder, {description}) END",
        id_and_space = crate::driver::LOCK_ID_LENGTH + 1,
        description = crate::driver::LOCK_ID_LENGTH + 2,
    )
}

/// Whether the row `l` is a SyncGuard lock record: a fence of 15 digits (not all zero), a lock
/// id of 22 base64url characters, no NULLs. The same rule as the decoding in Rust
/// (`lock_record`). A row that is not is never taken over, renewed, released or swept: every
/// operation reports it (`malformed` / `malformed_key` columns), as an `Internal` error.
fn sound(l: &str) -> String {
    format!(
        "({l}.fence ~ '^[0-9]{{15}}$' AND {l}.fence <> '000000000000000' \
         AND {l}.lock_id ~ '^[A-Za-z0-9_-]{{22}}$' AND {l}.expires_at_ms IS NOT NULL \
         AND {l}.acquired_at_ms IS NOT NULL AND {l}.user_key IS NOT NULL) IS TRUE"
    )
}

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
    /// (true when the key's row is not a SyncGuard record: then nothing was written).
    pub acquire: Op,
    /// Several keys (function only): `acquire`'s parameters as arrays, one element per key in
    /// the set's order — `$1` storage keys, `$2` lock ids, `$4` user keys, `$5` fence keys — and
    /// the others as `acquire`'s, `$11` the ticket → one row: `lock_fences` (text[], one per key,
    /// null unless every key was taken), `expires_at_ms` (of every lease), `ticket` (the
    /// waiter's, when it stands in line after a refusal), `bad_key` and `bad_counter` (a key
    /// whose fence counter no fence can follow, and that counter: nothing was taken),
    /// `malformed_key` (the user key of a row that is not a SyncGuard record: nothing was
    /// taken). See `lock_sql.rs`.
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
    /// was granted). A live permit already stored under `$2` is answered as granted (see
    /// "Semaphores" in the module docs).
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
}

impl Statements {
    pub fn new(tables: &TableNames) -> Statements {
        let locks = format!("\"{}\"", tables.lock_table());
        let released = release_channel(tables);
        let fences = format!("\"{}\"", tables.fence_table());
        let semaphores = format!("\"{}\"", tables.semaphore_table());
        let permits = format!("\"{}\"", tables.permit_table());
        let row = "key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key";
        let op = |name, types, returns, text| Op::query(tables, name, types, returns, text);
        let row_columns = "key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,\n\
                           fence text, user_key text, holder text";
        let (sound_l, sound_x) = (sound("l"), sound("x"));
        let holder_l = holder_of("l");
        // A lookup: the statement sent inline reads no `holder` column, the function does.
        let lookup = |name, by: &str| {
            let text = |holder: &str| {
                format!(
                    "SELECT {row}, {holder} AS holder FROM {locks} l WHERE l.{by} = $1\n\
                     AND (l.expires_at_ms > {NOW_MS} - $2 OR NOT {sound_l})"
                )
            };
            Op::query_in_function(
                tables,
                name,
                &[Type::TEXT, Type::INT8],
                row_columns,
                text("NULL::text"),
                text(&holder_l),
            )
        };
        let line = format!("\"{}\"", tables.line_table());
        let shared = format!("\"{}\"", tables.shared_table());
        let (permit_sweep, shared_sweep) = (sweep_expired(&permits), sweep_expired(&shared));
        let lock_line = admit_by_line(&line, LeaseKind::Lock, "CASE WHEN held THEN 0 ELSE 1 END");
        let shared_line =
            admit_by_line(&line, LeaseKind::Shared, "CASE WHEN held THEN 0 ELSE 1 END");
        let permit_line = admit_by_line(&line, LeaseKind::Permit, "$5 - held");
        let (lock_probe, permit_probe) = (
            line_probe(&line, LeaseKind::Lock, "$1"),
            line_probe(&line, LeaseKind::Permit, "$1"),
        );
        let lock_sql = LockSql {
            locks: &locks,
            fences: &fences,
            shared: &shared,
            line: &line,
            sound_l: &sound_l,
        };
        let one_key = KeyArgs {
            key: "$1",
            lock_id: "$2",
            user_key: "$4",
            fence_key: "$5",
        };
        use Type as T;
        let release_by_key = |name, table: &str| {
            Op::steps(
                tables,
                name,
                &[T::TEXT, T::TEXT, T::INT8],
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
        };
        let renew_by_key = |name, table: &str| {
            Op::query(
                tables,
                name,
                &[T::TEXT_ARRAY, T::TEXT_ARRAY, T::INT8_ARRAY, T::INT8],
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
        };
        let holders_of_key = |name, table: &str, limit: u32| {
            Op::query(
                tables,
                name,
                &[T::TEXT, T::INT8],
                row_columns,
                format!(
                    "SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,\n\
                        p.user_key, p.holder\n\
                 FROM {table} p\n\
                 WHERE p.key = $1 AND p.expires_at_ms > {NOW_MS} - $2\n\
                 ORDER BY p.fence COLLATE \"C\"\n\
                 LIMIT {limit}"
                ),
            )
        };
        let holders_under_prefix = |name, table: &str| {
            Op::query(
                tables,
                name,
                &[T::TEXT, T::INT8, T::INT8],
                row_columns,
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
        };
        Statements {
            acquire: Op::steps(
                tables,
                "acquire",
                ACQUIRE_TYPES,
                "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean",
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
                     INSERT INTO {locks} AS l ({row})\n\
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
                 PERFORM pg_advisory_xact_lock(hashtext($1));\n\
                 now_ms := {NOW_MS};\n\
                 {lock_read}\
                 IF malformed THEN RETURN; END IF;\n\
                 IF own IS NOT TRUE THEN\n\
                 {lock_line}\
                 END IF;\n\
                 {draw_fence}\
                 IF counter IS NULL THEN\n\
                     SELECT f.fence INTO bad_counter FROM {fences} f WHERE f.fence_key = $5;\n\
                     RETURN;\n\
                 END IF;\n\
                 {write_lock}\
                 END",
                    lock_read = lock_sql.read(&one_key),
                    draw_fence = lock_sql.draw_fence(&one_key),
                    write_lock = lock_sql.write_lock(&one_key, "fence, expires_at_ms"),
                ),
            )
            .inline_takes_first(7),
            acquire_all: Op::steps(
                tables,
                "macquire",
                ACQUIRE_ALL_TYPES,
                "OUT lock_fences text[], OUT expires_at_ms bigint, OUT ticket bigint, \
                 OUT bad_key text, OUT bad_counter bigint, OUT malformed_key text",
                String::new(),
                lock_sql.set_body(NOW_MS, LINE_DECLARATIONS),
            )
            .function_only(),
            release: Op::steps(
                tables,
                "release",
                &[T::TEXT, T::INT8],
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
            ),
            extend: op(
                "extend",
                &[T::TEXT, T::INT8, T::INT8],
                "expires_at_ms bigint, present boolean, malformed_key text",
                format!(
                    "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
                 renewed AS (\n\
                     UPDATE {locks} AS l SET expires_at_ms = c.now_ms + $2 FROM clock c\n\
                     WHERE l.lock_id = $1 AND l.expires_at_ms > c.now_ms - $3 AND {sound_l}\n\
                     RETURNING l.expires_at_ms)\n\
                 SELECT (SELECT expires_at_ms FROM renewed) AS expires_at_ms,\n\
                        EXISTS (SELECT 1 FROM {locks} WHERE lock_id = $1) AS present,\n\
                        CASE WHEN NOT EXISTS (SELECT 1 FROM renewed) THEN\n\
                            (SELECT COALESCE(l.user_key, l.key) FROM {locks} l\n\
                             WHERE l.lock_id = $1 AND NOT {sound_l}) END AS malformed_key"
                ),
            ),
            extend_many: op(
                "renew",
                &[T::TEXT_ARRAY, T::INT8_ARRAY, T::INT8],
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
            ),
            is_locked: op(
                "locked",
                &[T::TEXT, T::INT8],
                "locked boolean, malformed boolean",
                format!(
                    "SELECT EXISTS (SELECT 1 FROM {locks}\n\
                 WHERE key = $1 AND expires_at_ms > {NOW_MS} - $2) AS locked,\n\
                 (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1) AS malformed"
                ),
            ),
            is_locked_with_cleanup: op(
                "sweep",
                &[T::TEXT, T::INT8, T::INT8],
                "locked boolean, malformed boolean",
                format!(
                    "WITH clock AS (SELECT {NOW_MS} AS now_ms),\n\
                 swept AS (DELETE FROM {locks} l USING clock c\n\
                     WHERE l.key = $1 AND l.expires_at_ms < c.now_ms - $3 AND {sound_l})\n\
                 SELECT EXISTS (SELECT 1 FROM {locks} l, clock c\n\
                     WHERE l.key = $1 AND l.expires_at_ms > c.now_ms - $2) AS locked,\n\
                 (SELECT NOT {sound_l} FROM {locks} l WHERE l.key = $1) AS malformed"
                ),
            ),
            lookup_by_key: lookup("by_key", "key"),
            lookup_by_id: lookup("by_id", "lock_id"),
            list: {
                let text = |holder: &str| {
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
                };
                Op::query_in_function(
                    tables,
                    "list",
                    &[T::TEXT, T::INT8, T::INT8],
                    row_columns,
                    text("NULL::text"),
                    text(&holder_l),
                )
            },
            permit_acquire: Op::steps(
                tables,
                "pacquire",
                PERMIT_ACQUIRE_TYPES,
                "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint",
                String::new(),
                format!(
                    "DECLARE\n  now_ms bigint;\n  counter bigint;\n  held bigint;\n\
                 {LINE_DECLARATIONS}\
                 BEGIN\n\
                 INSERT INTO {semaphores} AS s (key, fence, user_key) VALUES ($1, 0, $4)\n\
                     ON CONFLICT (key) DO NOTHING;\n\
                 SELECT s.fence INTO counter FROM {semaphores} s WHERE s.key = $1 FOR UPDATE;\n\
                 now_ms := {NOW_MS};\n\
                 {permit_sweep}\
                 SELECT count(*), min(p.fence) FILTER (WHERE p.lock_id = $2), {permit_probe}\n\
                     INTO held, fence, queued FROM {permits} p WHERE p.key = $1;\n\
                 IF fence IS NOT NULL THEN\n\
                     UPDATE {permits} p SET expires_at_ms = now_ms + $3\n\
                         WHERE p.key = $1 AND p.lock_id = $2\n\
                         RETURNING p.expires_at_ms INTO expires_at_ms;\n\
                     RETURN;\n\
                 END IF;\n\
                 {permit_line}\
                 IF counter < 0 OR counter >= $6 THEN bad_counter := counter; RETURN; END IF;\n\
                 counter := counter + 1;\n\
                 UPDATE {semaphores} s SET fence = counter WHERE s.key = $1;\n\
                 fence := lpad(counter::text, 15, '0');\n\
                 expires_at_ms := now_ms + $3;\n\
                 INSERT INTO {permits}\n\
                     (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)\n\
                     VALUES ($1, $2, now_ms + $3, now_ms, lpad(counter::text, 15, '0'), $4, $8);\n\
                 END"
                ),
            )
            .function_only(),
            permit_release: release_by_key("prelease", &permits),
            permit_renew: renew_by_key("prenew", &permits),
            permits: holders_of_key("permits", &permits, MAX_PERMITS),
            permit_list: holders_under_prefix("plist", &permits),
            shared_acquire: Op::steps(
                tables,
                "sacquire",
                ACQUIRE_TYPES,
                "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean",
                String::new(),
                format!(
                    "DECLARE\n  now_ms bigint;\n  held boolean;\n  counter bigint;\n\
                 {LINE_DECLARATIONS}\
                 BEGIN\n\
                 PERFORM pg_advisory_xact_lock(hashtext($1));\n\
                 now_ms := {NOW_MS};\n\
                 SELECT l.expires_at_ms > now_ms - $7, l.key IS NOT NULL AND NOT {sound_l},\n\
                     {lock_probe}\n\
                     INTO held, malformed, queued\n\
                     FROM (SELECT 1) AS one LEFT JOIN {locks} l ON l.key = $1;\n\
                 IF malformed THEN RETURN; END IF;\n\
                 {shared_sweep}\
                 SELECT s.fence INTO fence FROM {shared} s WHERE s.key = $1 AND s.lock_id = $2;\n\
                 IF fence IS NOT NULL THEN\n\
                     UPDATE {shared} s SET expires_at_ms = now_ms + $3\n\
                         WHERE s.key = $1 AND s.lock_id = $2\n\
                         RETURNING s.expires_at_ms INTO expires_at_ms;\n\
                     RETURN;\n\
                 END IF;\n\
                 {shared_line}\
                 INSERT INTO {fences} AS f (fence_key, fence, key_debug) VALUES ($5, 1, $4)\n\
                     ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1\n\
                     WHERE f.fence >= 0 AND f.fence < $6\n\
                     RETURNING f.fence INTO counter;\n\
                 IF counter IS NULL THEN\n\
                     SELECT f.fence INTO bad_counter FROM {fences} f WHERE f.fence_key = $5;\n\
                     RETURN;\n\
                 END IF;\n\
                 fence := lpad(counter::text, 15, '0');\n\
                 expires_at_ms := now_ms + $3;\n\
                 INSERT INTO {shared}\n\
                     (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)\n\
                     VALUES ($1, $2, now_ms + $3, now_ms, fence, $4, $8);\n\
                 END"
                ),
            )
            .function_only(),
            shared_release: release_by_key("srelease", &shared),
            shared_renew: renew_by_key("srenew", &shared),
            readers: holders_of_key("readers", &shared, MAX_READERS_FOUND),
            shared_list: holders_under_prefix("slist", &shared),
            line: Op::query(
                tables,
                "line",
                &[T::TEXT, T::TEXT, T::INT8],
                "place_id text, ticket bigint, expires_at_ms bigint, holder text, shared boolean",
                format!(
                    "SELECT q.place_id, q.ticket, q.expires_at_ms, q.holder, q.shared\n\
                 FROM {line} q\n\
                 WHERE q.key = $1 AND q.kind = $2 AND q.expires_at_ms > {NOW_MS} - $3\n\
                 ORDER BY q.ticket, q.place_id COLLATE \"C\""
                ),
            )
            .function_only(),
            leave_line: Op::query(
                tables,
                "leave",
                &[T::TEXT, T::TEXT, T::TEXT],
                "gone boolean",
                format!(
                    "WITH deleted AS (DELETE FROM {line} q\n\
                     WHERE q.key = $1 AND q.kind = $2 AND q.place_id = $3 RETURNING 1)\n\
                 SELECT EXISTS (SELECT 1 FROM deleted) AS gone"
                ),
            )
            .function_only(),
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
}
