//! The PostgreSQL backend itself: [`PostgresBackend`], what it runs each operation through
//! (its server function, or the statement inline), and its [`Driver`] implementation: one key's
//! acquisition in `acquire.rs`, a set's in `set.rs`, release and extension in `leases.rs`, reads
//! in `records.rs`, `list.rs` and `line.rs`, an operator's break in `breaking.rs`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::Row;
use postgres::error::SqlState;

use super::client::Param;
use super::connection::{Connections, Listening, OnNotify};
use super::errors::ServerError;
use super::rows::{answer_row, column, fence_key_of, not_a_record, storage_key_of};
use super::statements::{Op, Sql, Statements};
use super::tables::TableNames;
use super::{schema, statements};
use crate::driver::{
    Acquisitions, BreakOrder, Broken, Capabilities, Driver, Extension, Find, Key, KeyPrefix,
    LeaseKind, LeaseRef, ListLimit, LockId, LockList, LockRecord, Mode, OnRelease, Outcome,
    PlaceRecord, ReleaseWatch, Request, TIME_TOLERANCE_MS, TicketOrder, TimeAuthority, Ttl,
    acquire_one_by_one, extend_by_kind,
};
use crate::error::{LockError, Result};

/// How long past expiry a lock must be before the opt-in cleanup in `is_locked` deletes it.
pub const CLEANUP_GUARD_MS: i64 = 2000;

/// Distributed locks in PostgreSQL. See the [module docs](super).
pub struct PostgresBackend {
    pub(super) connections: Box<dyn Connections>,
    pub(super) tables: TableNames,
    pub(super) statements: Statements,
    pub(super) cleanup_in_is_locked: bool,
    /// The server functions are missing: statements go inline.
    pub(super) inline: AtomicBool,
    pub(super) display: String,
}

impl PostgresBackend {
    /// The tables this backend uses.
    pub fn tables(&self) -> &TableNames {
        &self.tables
    }

    /// Creates this backend's tables, indexes and server functions if missing, and puts back
    /// server functions that differ from this version's
    /// ([`setup_schema`](super::setup_schema) with its table names). Idempotent; safe to call
    /// from every process at start-up: when nothing is missing or different it changes nothing
    /// and takes no lock on the tables.
    pub fn setup_schema(&self) -> Result<()> {
        let installed = Sql {
            text: schema::installed_sql(&self.tables).into(),
            types: &[],
        };
        let rows = self.connections.query(&installed, &[])?;
        let installed = rows.first().and_then(|row| row.try_get::<_, bool>(0).ok());
        if installed != Some(true) {
            self.connections.batch(&schema::setup_sql(&self.tables))?;
        }
        // The functions exist now: call them again (they store and read holder descriptions).
        self.inline.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// The storage key (`key` column) of a user key.
    pub fn storage_key(&self, key: &str) -> Result<String> {
        storage_key_of(&Key::new(key)?)
    }

    /// The `fence_key` of a user key's counter row.
    pub fn fence_key(&self, key: &str) -> Result<String> {
        fence_key_of(&self.storage_key(key)?)
    }

    /// Runs `op`: through its server function, or inline once the functions are found missing.
    pub(super) fn query(&self, op: &Op, params: Vec<Param>) -> Result<Vec<Row>> {
        if !self.functions_known_missing() {
            match self.connections.query(&op.call, &params) {
                // The call failed before anything ran: the same statement inline is safe.
                Err(error) if function_is_missing(op, &error) => self.functions_missing(),
                result => return result,
            }
        }
        // The statement may take fewer parameters than its function (acquire's holder).
        let inline_params = params.len().min(op.inline.types.len());
        self.connections.query(&op.inline, &params[..inline_params])
    }

    /// Whether this version's server functions were found missing (since the last
    /// [`setup_schema`](Self::setup_schema)).
    pub(super) fn functions_known_missing(&self) -> bool {
        self.inline.load(Ordering::Relaxed)
    }

    /// Notes that this version's server functions are missing: the lock operations go inline
    /// from now on, and there is no line. Says so in the log once per backend (until setup).
    pub(super) fn functions_missing(&self) {
        if !self.inline.swap(true, Ordering::Relaxed) {
            log::warn!(
                "syncguard: {}: the server functions of this syncguard version are missing \
                 (tables set up by an older syncguard or by the TypeScript SyncGuard): \
                 statements are sent inline and planned on every call, and waiters do not \
                 wait in line (they barge, as the TypeScript SyncGuard's do). Run `syncguard \
                 setup` or setup_schema once: it adds the line and makes calls faster",
                self.display
            );
        }
    }

    /// Runs `op` through its server function only (the operations of semaphores and of shared
    /// holds, `feature`, which have no inline form). Without that function or the tables it
    /// calls for, the call is refused with `InvalidArgument` saying to run setup, as a backend
    /// without the feature refuses it: locks keep working there, and reads that show semaphores
    /// or readers beside locks (`syncguard status`) take it for "none here". Never switches the
    /// lock operations to their inline statements.
    pub(super) fn call_function(
        &self,
        feature: Feature,
        op: &Op,
        params: Vec<Param>,
    ) -> Result<Vec<Row>> {
        (self.connections.query(&op.call, &params))
            .map_err(|error| self.refused(feature, Some(&op.function), error))
    }

    /// A call's `error`, or, when it failed for `function` or a table of `feature` missing, the
    /// refusal that says to run setup (`InvalidArgument`).
    pub(super) fn refused(
        &self,
        feature: Feature,
        function: Option<&str>,
        error: LockError,
    ) -> LockError {
        match self.missing_for(feature, function, &error) {
            // The cause's message names the server and says how to run setup.
            Some(missing) => LockError::invalid_argument(format!(
                "{} need the server functions and tables of this syncguard version, which \
                 these tables (made by the TypeScript SyncGuard or by an earlier syncguard) \
                 lack: {missing} is missing; {} work without them. {}",
                feature.name(),
                feature.what_works(),
                error.message()
            ))
            .with_source(error),
            None => error,
        }
    }

    /// What a call's `error` says is missing — `function`, or a table of `feature` — if that
    /// is why it failed.
    fn missing_for(
        &self,
        feature: Feature,
        function: Option<&str>,
        error: &LockError,
    ) -> Option<String> {
        let quoted = |name: &str| format!("\"{name}\"");
        match ServerError::state_of(error)? {
            state
                if *state == SqlState::UNDEFINED_FUNCTION
                    && function.is_some_and(|function| error.message().contains(function)) =>
            {
                function.map(|function| format!("the server function {function}"))
            }
            state if *state == SqlState::UNDEFINED_TABLE => feature
                .tables(&self.tables)
                .into_iter()
                .find(|table| error.message().contains(&quoted(table)))
                .map(|table| format!("the table {table}")),
            _ => None,
        }
    }
}

/// What an operation without an inline form belongs to: what its refusal names, on tables
/// without this version's functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Feature {
    /// A semaphore's permits.
    Semaphores,
    /// Shared holds (readers) of a key's lock.
    SharedHolds,
}

impl Feature {
    fn name(self) -> &'static str {
        match self {
            Feature::Semaphores => "semaphores",
            Feature::SharedHolds => "shared holds (readers)",
        }
    }

    /// What keeps working without it.
    fn what_works(self) -> &'static str {
        match self {
            Feature::Semaphores => "locks",
            Feature::SharedHolds => "exclusive locks",
        }
    }

    /// The tables its functions read and write, besides the lock table.
    fn tables(self, tables: &TableNames) -> Vec<String> {
        match self {
            Feature::Semaphores => vec![tables.semaphore_table(), tables.permit_table()],
            Feature::SharedHolds => vec![tables.shared_table(), tables.line_table()],
        }
    }
}

/// Whether `error` says that `op`'s server function is missing (then the call ran nothing).
pub(super) fn function_is_missing(op: &Op, error: &LockError) -> bool {
    ServerError::state_of(error) == Some(&SqlState::UNDEFINED_FUNCTION)
        && error.message().contains(&op.function)
}

/// A listening connection: every release of the table is announced on one channel with the
/// user key as payload, so there is nothing to subscribe per key.
struct PgWatch {
    /// Held for its connection, which listens until dropped.
    listening: Listening,
}

impl ReleaseWatch for PgWatch {
    fn watch(&self, _: &Key) {}
    fn unwatch(&self, _: &Key) {}

    fn hearing(&self) -> bool {
        self.listening.hearing()
    }
}

/// What a listing answers.
type Listing = LockList<LockRecord>;

/// The server functions of one kind of lease held by key and lock id — a semaphore's permits or
/// a lock's shared holds — and the feature whose refusal names them
/// ([`PostgresBackend::call_function`]): they have no inline form.
#[derive(Clone, Copy)]
pub(super) struct Keyed<'a> {
    /// What a refusal names.
    pub feature: Feature,
    /// Releases one lease.
    pub release: &'a Op,
    /// Renews a batch of leases.
    pub renew: &'a Op,
    /// A key's live leases.
    pub find: &'a Op,
    /// The live leases under a prefix.
    pub list: &'a Op,
}

impl PostgresBackend {
    /// The functions of `kind`, when it is kept by key and lock id (`None`: the lock).
    pub(super) fn keyed(&self, kind: LeaseKind) -> Option<Keyed<'_>> {
        let s = &self.statements;
        match kind {
            LeaseKind::Lock => None,
            LeaseKind::Permit => Some(Keyed {
                feature: Feature::Semaphores,
                release: &s.permit_release,
                renew: &s.permit_renew,
                find: &s.permits,
                list: &s.permit_list,
            }),
            LeaseKind::Shared => Some(Keyed {
                feature: Feature::SharedHolds,
                release: &s.shared_release,
                renew: &s.shared_renew,
                find: &s.readers,
                list: &s.shared_list,
            }),
        }
    }
}

impl Driver for PostgresBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("postgres", true, TimeAuthority::Server)
            .with_every_mode()
            .with_tickets(TicketOrder::StoreWide)
    }

    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        match request.key() {
            Some(key) => self.acquire_key(key, request),
            None if request.mode == Mode::Exclusive => self.acquire_set(request),
            // Never asked by the crate (sets are exclusive), but right if called.
            None => acquire_one_by_one(self, request),
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        match self.keyed(lease.kind) {
            Some(keyed) => self.release_keyed_lease(keyed, lease),
            None => self.release_lock(lease),
        }
    }

    /// One statement (`break_sql.rs`), sent again while it did nothing (`breaking.rs`).
    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        self.break_holders(order)
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        // Locks, permits and shared holds live in different tables: one statement for each
        // kind present.
        extend_by_kind(leases, |kind, batch| match self.keyed(kind) {
            Some(keyed) => self.extend_keyed_leases(keyed, batch),
            None => self.extend_lock_leases(batch),
        })
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let storage_key = storage_key_of(key)?;
        let rows = if self.cleanup_in_is_locked {
            self.query(
                &self.statements.is_locked_with_cleanup,
                vec![
                    storage_key.as_str().into(),
                    TIME_TOLERANCE_MS.into(),
                    CLEANUP_GUARD_MS.into(),
                ],
            )?
        } else {
            self.query(
                &self.statements.is_locked,
                vec![storage_key.as_str().into(), TIME_TOLERANCE_MS.into()],
            )?
        };
        let row = answer_row(&rows, "is_locked")?;
        if column::<Option<bool>>(row, "malformed")? == Some(true) {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        column(row, "locked")
    }

    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        self.find_records(by)
    }

    fn list_records(&self, prefix: &KeyPrefix, kind: LeaseKind, max: ListLimit) -> Result<Listing> {
        self.list(prefix, kind, max)
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        self.places(key, kind)
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        self.leave(key, kind, place)
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let channel = statements::release_channel(&self.tables);
        let on_notify: OnNotify = Arc::new(move |key: &str| on_release(key));
        Ok(self
            .connections
            .listen(&channel, on_notify)?
            .map(|listening| {
                Box::new(PgWatch { listening }) as Box<dyn ReleaseWatch> as Box<dyn ReleaseWatch>
            }))
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.connections.state();
        f.debug_struct("PostgresBackend")
            .field("url", &self.display)
            .field("tables", &self.tables)
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.connections.max_size())
            .field("connections", &state.as_ref().map(|s| s.connections))
            .field(
                "idle_connections",
                &state.as_ref().map(|s| s.idle_connections),
            )
            .finish()
    }
}
