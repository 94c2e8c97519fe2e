//! The PostgreSQL backend itself: [`PostgresBackend`], what it runs each operation through
//! (its server function, or the statement inline), and its [`Driver`] implementation.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::Row;
use postgres::error::SqlState;

use super::client::Param;
use super::connection::{Connections, Listening, OnNotify};
use super::errors::ServerError;
use super::line_sql::line_params;
use super::statements::{Op, Sql, Statements};
use super::tables::TableNames;
use super::{schema, statements};
use crate::driver::{
    Acquisition, Acquisitions, Driver, Extension, FENCE_MAX, Find, Holder, Key, KeyPrefix, KeySet,
    LeaseKind, LeaseRef, Line, ListLimit, LockId, LockList, LockRecord, OnRelease, Outcome,
    Permits, PlaceRecord, ReleaseWatch, TIME_TOLERANCE_MS, Ttl, make_storage_key,
};
use crate::driver::{Capabilities, TicketOrder, TimeAuthority, extend_by_kind};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;

/// PostgreSQL's storage-key limit in bytes (keys longer than this are hashed).
pub const STORAGE_KEY_LIMIT: usize = 1700;
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
        self.connections.query(&op.call, &params).map_err(|error| {
            match self.missing_for(feature, op, &error) {
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
        })
    }

    /// What a call's `error` says is missing — `op`'s function, or a table of `feature` — if
    /// that is why it failed.
    fn missing_for(&self, feature: Feature, op: &Op, error: &LockError) -> Option<String> {
        let quoted = |name: &str| format!("\"{name}\"");
        match ServerError::state_of(error)? {
            state
                if *state == SqlState::UNDEFINED_FUNCTION
                    && error.message().contains(&op.function) =>
            {
                Some(format!("the server function {}", op.function))
            }
            state if *state == SqlState::UNDEFINED_TABLE => feature
                .tables(&self.tables)
                .into_iter()
                .find(|table| error.message().contains(&quoted(table)))
                .map(|table| format!("the table {table}")),
            _ => None,
        }
    }

    /// Releases the permit or shared hold `lease` names (one call of `op`).
    fn release_keyed_lease(
        &self,
        feature: Feature,
        op: &Op,
        lease: LeaseRef<'_>,
    ) -> Result<Outcome<()>> {
        let key = lease.permit_key()?;
        let storage_key = storage_key_of(key)?;
        let rows = self.call_function(
            feature,
            op,
            vec![
                storage_key.as_str().into(),
                lease.lock_id.as_str().into(),
                TIME_TOLERANCE_MS.into(),
            ],
        )?;
        let row = answer_row(&rows, "release")?;
        Ok(match column::<Option<bool>>(row, "live")? {
            Some(true) => Outcome::Applied(()),
            Some(false) => Outcome::Expired,
            None => Outcome::NotFound,
        })
    }

    /// Extends the permits or shared holds among `leases` in one call of `op` (one
    /// statement): one answer per lease, in order. A lease whose key cannot be stored gets its
    /// own error, before any I/O.
    fn extend_keyed_leases(
        &self,
        feature: Feature,
        op: &Op,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> = Vec::with_capacity(leases.len());
        let (mut keys, mut lock_ids, mut ttls, mut sent) = (vec![], vec![], vec![], vec![]);
        for (index, (lease, ttl)) in leases.iter().enumerate() {
            match lease.permit_key().and_then(storage_key_of) {
                Ok(storage_key) => {
                    keys.push(storage_key);
                    lock_ids.push(lease.lock_id.as_str().to_owned());
                    ttls.push(ttl.as_millis());
                    sent.push(index);
                    answers.push(None);
                }
                Err(error) => answers.push(Some(Err(error))),
            }
        }
        if !sent.is_empty() {
            let rows = self.call_function(
                feature,
                op,
                vec![
                    keys.into(),
                    lock_ids.into(),
                    ttls.into(),
                    TIME_TOLERANCE_MS.into(),
                ],
            );
            match rows {
                Ok(rows) => {
                    for row in &rows {
                        let answer = extension_outcome(row);
                        let position = column::<i64>(row, "ord")
                            .ok()
                            .and_then(|ord| usize::try_from(ord).ok())
                            .and_then(|ord| sent.get(ord.wrapping_sub(1)));
                        if let Some(&index) = position {
                            answers[index] = Some(answer);
                        }
                    }
                }
                Err(error) => {
                    for &index in &sent {
                        answers[index] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    Err(LockError::internal("the batch renewal skipped a lease"))
                })
            })
            .collect()
    }

    /// Extends the locks among `leases` in one call (one statement): one answer per lease,
    /// in order.
    fn extend_lock_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        let lock_ids: Vec<String> = leases
            .iter()
            .map(|(lease, _)| lease.lock_id.as_str().to_owned())
            .collect();
        let ttls: Vec<i64> = leases.iter().map(|(_, ttl)| ttl.as_millis()).collect();
        let rows = match self.query(
            &self.statements.extend_many,
            vec![lock_ids.into(), ttls.into(), TIME_TOLERANCE_MS.into()],
        ) {
            Ok(rows) => rows,
            Err(error) => {
                return leases
                    .iter()
                    .map(|_| Err(LockError::new(error.code(), error.message())))
                    .collect();
            }
        };
        let mut answers: std::collections::HashMap<String, Result<Outcome<Extension>>> = rows
            .iter()
            .map(|row| {
                let lock_id: String = column(row, "lock_id")?;
                let outcome = renewal_outcome(row, &self.tables);
                Ok((lock_id, outcome))
            })
            .collect::<Result<_>>()
            .unwrap_or_default();
        leases
            .iter()
            .map(|(lease, _)| {
                answers.remove(lease.lock_id.as_str()).unwrap_or_else(|| {
                    Err(LockError::internal("the batch renewal skipped a lease"))
                })
            })
            .collect()
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

/// An acquisition's error: in doubt when it was sent without an answer, for the server may
/// still grant the lock (or the permit) under `lock_id` (the Locker releases it).
fn in_doubt_if_unanswered(error: LockError, lock_id: &str, key: &Key) -> LockError {
    if ServerError::is_unanswered(&error) {
        error.in_doubt(lock_id).with_key(key.as_str())
    } else {
        error
    }
}

/// The parameters of every acquisition — a lock's, a permit's, a shared hold's, and a set's with
/// an array in each of `$1`, `$2`, `$4` and `$5` (see `Statements::acquire`,
/// `Statements::permit_acquire`, `Statements::acquire_all`): the same but `$5`, `fifth` — the
/// lock's fence key, the semaphore's number of permits — and then the line's mode, place and
/// ticket (`line_params`).
pub(super) fn acquire_params(
    storage_key: impl Into<Param>,
    lock_id: impl Into<Param>,
    ttl: Ttl,
    key: impl Into<Param>,
    fifth: impl Into<Param>,
    holder: Option<&Holder>,
    line: Line<'_>,
) -> Vec<Param> {
    let (mode, place, ticket) = line_params(line);
    vec![
        storage_key.into(),
        lock_id.into(),
        ttl.as_millis().into(),
        key.into(),
        fifth.into(),
        (FENCE_MAX as i64).into(),
        TIME_TOLERANCE_MS.into(),
        // The functions only: the lock's statement sent inline never stores a holder, and
        // knows no line.
        holder.map(Holder::as_str).into(),
        mode.into(),
        place.into(),
        ticket.into(),
    ]
}

/// The one row an operation answers (`what` names it in the error when there is none).
pub(super) fn answer_row<'a>(rows: &'a [Row], what: &str) -> Result<&'a Row> {
    rows.first()
        .ok_or_else(|| LockError::internal(format!("{what} returned no row")))
}

/// What an acquisition, of a lock or of a permit, answered (`fence`, `expires_at_ms`,
/// `bad_counter`): granted under `lock_id`; refused before anything was written, for a fence
/// counter no fence can follow; or held by others.
fn acquisition(row: &Row, lock_id: String, key: &Key) -> Result<Acquisition> {
    let fence: Option<String> = column(row, "fence")?;
    let expires_at_ms: Option<i64> = column(row, "expires_at_ms")?;
    match (fence, expires_at_ms) {
        (Some(fence), Some(expires_at_ms)) => granted(lock_id, &fence, expires_at_ms, key),
        _ if let Some(counter) = column::<Option<i64>>(row, "bad_counter")? => {
            Err(bad_counter_error(counter).with_key(key.as_str()))
        }
        _ => Ok(Acquisition::Locked),
    }
}

/// A granted lock or permit, from the fence text and the expiry the server answered.
pub(super) fn granted(
    lock_id: String,
    fence: &str,
    expires_at_ms: i64,
    key: &Key,
) -> Result<Acquisition> {
    let fence: Fence = fence.parse()?;
    // Re-issuing through from_counter applies the warning threshold.
    let fence = Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
    Ok(Acquisition::granted(lock_id, fence, expires_at_ms, None))
}

/// The `fence_key` of the counter row that belongs to a storage key.
pub(super) fn fence_key_of(storage_key: &str) -> Result<String> {
    make_storage_key("", &format!("fence:{storage_key}"), STORAGE_KEY_LIMIT, 0)
}

/// The storage key of `key`, refusing what PostgreSQL text cannot store (before any I/O).
pub(super) fn storage_key_of(key: &Key) -> Result<String> {
    if key.as_str().contains('\0') {
        return Err(LockError::invalid_argument(
            "PostgreSQL text cannot hold NUL characters; this key cannot be locked here",
        ));
    }
    make_storage_key("", key.as_str(), STORAGE_KEY_LIMIT, 0)
}

/// The error for a fence counter no fence can follow (acquire wrote nothing).
pub(super) fn bad_counter_error(counter: i64) -> LockError {
    if counter >= FENCE_MAX as i64 {
        LockError::internal(format!(
            "the fence counter of this key is {counter}, at the largest fence {FENCE_MAX}: \
             rotate the key namespace"
        ))
    } else {
        LockError::internal(format!(
            "the fence counter of this key is {counter}, below 0: the counter row was edited; \
             set it to at least the largest fence ever issued for the key"
        ))
    }
}

/// A listening connection: every release of the table is announced on one channel with the
/// user key as payload, so there is nothing to subscribe per key.
struct PgWatch {
    /// Held for its connection, which listens until dropped.
    _listening: Listening,
}

impl ReleaseWatch for PgWatch {
    fn watch(&self, _: &Key) {}
    fn unwatch(&self, _: &Key) {}
}

/// One lease's row of the batch renewal.
fn renewal_outcome(row: &Row, tables: &TableNames) -> Result<Outcome<Extension>> {
    if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
        return Err(not_a_record(tables, &key));
    }
    if let Some(expires_at_ms) = column::<Option<i64>>(row, "expires_at_ms")? {
        return Ok(Outcome::Applied(Extension {
            expires_at_ms,
            version: None,
        }));
    }
    match (
        column::<bool>(row, "present")?,
        column::<bool>(row, "live")?,
    ) {
        (false, _) => Ok(Outcome::NotFound),
        (true, false) => Ok(Outcome::Expired),
        // Skipped: another transaction holds the row. Transient: the heartbeat tries again.
        (true, true) => Err(LockError::new(
            ErrorCode::ServiceUnavailable,
            "the lock row is locked by another transaction; renewal postponed",
        )),
    }
}

/// One lease's row of an extension, a lock's (once its `malformed_key` is checked) or a
/// permit's renewal: `expires_at_ms` when extended, else whether it was `present`.
fn extension_outcome(row: &Row) -> Result<Outcome<Extension>> {
    Ok(match column::<Option<i64>>(row, "expires_at_ms")? {
        Some(expires_at_ms) => Outcome::Applied(Extension {
            expires_at_ms,
            version: None,
        }),
        // Found, but expired: left in place, never extended.
        None if column::<bool>(row, "present")? => Outcome::Expired,
        None => Outcome::NotFound,
    })
}

/// The error for a row that is not a SyncGuard lock record (see `statements::sound`, the same
/// rule in SQL): `Internal`, naming the key, whichever operation came across it.
pub(super) fn not_a_record(tables: &TableNames, key: &str) -> LockError {
    LockError::internal(format!(
        "the row of key {key:?} in table {} is not a SyncGuard lock record (a fence that is not \
         15 digits, a malformed lock id, or a NULL): syncguard neither takes it over nor \
         changes it; repair or delete that row",
        tables.lock_table()
    ))
    .with_key(key)
}

/// A lock row as the lookups return it; one that is not a SyncGuard record is an error naming
/// `key` (or the row's own key, when the lookup was by lock id).
pub(super) fn lock_record(row: &Row, tables: &TableNames, key: Option<&str>) -> Result<LockRecord> {
    let decoded = || -> Option<LockRecord> {
        let lock_id: String = row.try_get("lock_id").ok()?;
        crate::driver::validate_lock_id(&lock_id).ok()?;
        let fence: String = row.try_get("fence").ok()?;
        Some(LockRecord {
            key: row.try_get("user_key").ok()?,
            lock_id,
            expires_at_ms: row.try_get("expires_at_ms").ok()?,
            acquired_at_ms: row.try_get("acquired_at_ms").ok()?,
            fence: fence.parse::<Fence>().ok()?,
            // Only the lookup and list functions answer it; the statements sent inline do not.
            holder: row.try_get::<_, Option<String>>("holder").ok().flatten(),
        })
    };
    decoded().ok_or_else(|| {
        let stored = || -> Option<String> {
            let user_key: Option<String> = row.try_get("user_key").ok()?;
            user_key.or_else(|| row.try_get("key").ok())
        };
        let key = key.map(str::to_owned).or_else(stored).unwrap_or_default();
        not_a_record(tables, &key)
    })
}

pub(super) fn column<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> Result<T> {
    row.try_get(name)
        .map_err(|_| LockError::internal(format!("unexpected result column {name}")))
}

impl Driver for PostgresBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("postgres", true, TimeAuthority::Server)
            .with_tickets(TicketOrder::StoreWide)
    }

    fn try_acquire(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let storage_key = storage_key_of(key)?;
        let fence_key = fence_key_of(&storage_key)?;
        let lock_id = LockId::generate().into_string();
        let fence_key = fence_key.as_str();
        let params = acquire_params(
            storage_key.as_str(),
            lock_id.as_str(),
            ttl,
            key.as_str(),
            fence_key,
            holder,
            line,
        );
        let rows = self
            .query(&self.statements.acquire, params)
            .map_err(|error| in_doubt_if_unanswered(error, &lock_id, key))?;
        let row = answer_row(&rows, "acquire")?;
        if column::<Option<bool>>(row, "malformed")? == Some(true) {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        acquisition(row, lock_id, key)
    }

    fn try_acquire_permit(
        &self,
        key: &Key,
        permits: Permits,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let storage_key = storage_key_of(key)?;
        let lock_id = LockId::generate().into_string();
        let permits = i64::from(permits.get());
        let params = acquire_params(
            storage_key.as_str(),
            lock_id.as_str(),
            ttl,
            key.as_str(),
            permits,
            holder,
            line,
        );
        let rows = self
            .call_function(Feature::Semaphores, &self.statements.permit_acquire, params)
            .map_err(|error| in_doubt_if_unanswered(error, &lock_id, key))?;
        acquisition(answer_row(&rows, "permit acquire")?, lock_id, key)
    }

    fn try_acquire_shared(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let storage_key = storage_key_of(key)?;
        let fence_key = fence_key_of(&storage_key)?;
        let lock_id = LockId::generate().into_string();
        let fence_key = fence_key.as_str();
        let params = acquire_params(
            storage_key.as_str(),
            lock_id.as_str(),
            ttl,
            key.as_str(),
            fence_key,
            holder,
            line,
        );
        let rows = self
            .call_function(
                Feature::SharedHolds,
                &self.statements.shared_acquire,
                params,
            )
            .map_err(|error| in_doubt_if_unanswered(error, &lock_id, key))?;
        let row = answer_row(&rows, "shared acquire")?;
        if column::<Option<bool>>(row, "malformed")? == Some(true) {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        acquisition(row, lock_id, key)
    }

    fn try_acquire_all(
        &self,
        keys: &KeySet,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisitions> {
        self.acquire_set(keys, ttl, holder, line)
    }

    fn find_shared(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let storage_key = storage_key_of(key)?;
        let rows = self.call_function(
            Feature::SharedHolds,
            &self.statements.readers,
            vec![storage_key.as_str().into(), TIME_TOLERANCE_MS.into()],
        )?;
        rows.iter()
            .map(|row| lock_record(row, &self.tables, Some(key.as_str())))
            .collect()
    }

    fn list_shared_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        self.shared_listing(prefix, limit)
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        self.leave(key, kind, place)
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        self.places(key, kind)
    }

    fn find_permits(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let storage_key = storage_key_of(key)?;
        let rows = self.call_function(
            Feature::Semaphores,
            &self.statements.permits,
            vec![storage_key.as_str().into(), TIME_TOLERANCE_MS.into()],
        )?;
        rows.iter()
            .map(|row| lock_record(row, &self.tables, Some(key.as_str())))
            .collect()
    }

    fn list_permit_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        self.permit_listing(prefix, limit)
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        match lease.kind {
            LeaseKind::Permit => {
                let op = &self.statements.permit_release;
                return self.release_keyed_lease(Feature::Semaphores, op, lease);
            }
            LeaseKind::Shared => {
                let op = &self.statements.shared_release;
                return self.release_keyed_lease(Feature::SharedHolds, op, lease);
            }
            LeaseKind::Lock => {}
        }
        let rows = self.query(
            &self.statements.release,
            vec![lease.lock_id.as_str().into(), TIME_TOLERANCE_MS.into()],
        )?;
        let Some(row) = rows.first() else {
            return Ok(Outcome::NotFound);
        };
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        // The statement answers no row when nothing was found, its function a row of NULLs.
        Ok(match column::<Option<bool>>(row, "live")? {
            Some(true) => Outcome::Applied(()),
            Some(false) => Outcome::Expired,
            None => Outcome::NotFound,
        })
    }

    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        if lease.kind != LeaseKind::Lock {
            return self
                .extend_leases(&[(lease, ttl)])
                .pop()
                .unwrap_or_else(|| Err(LockError::internal("the renewal gave no answer")));
        }
        let rows = self.query(
            &self.statements.extend,
            vec![
                lease.lock_id.as_str().into(),
                ttl.as_millis().into(),
                TIME_TOLERANCE_MS.into(),
            ],
        )?;
        let row = answer_row(&rows, "extend")?;
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        extension_outcome(row)
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        // Locks, permits and shared holds live in different tables: one statement for each
        // kind present.
        extend_by_kind(leases, |kind, batch| match kind {
            LeaseKind::Lock => self.extend_lock_leases(batch),
            LeaseKind::Permit => {
                let op = &self.statements.permit_renew;
                self.extend_keyed_leases(Feature::Semaphores, op, batch)
            }
            LeaseKind::Shared => {
                let op = &self.statements.shared_renew;
                self.extend_keyed_leases(Feature::SharedHolds, op, batch)
            }
        })
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let channel = statements::release_channel(&self.tables);
        let on_notify: OnNotify = Arc::new(move |key: &str| on_release(key));
        Ok(self
            .connections
            .listen(&channel, on_notify)?
            .map(|listening| {
                Box::new(PgWatch {
                    _listening: listening,
                }) as Box<dyn ReleaseWatch>
            }))
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

    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
        let key = match by {
            Find::Key(key) => Some(key.as_str()),
            Find::LockId(_) => None,
        };
        let rows = match by {
            Find::Key(key) => {
                let storage_key = storage_key_of(key)?;
                self.query(
                    &self.statements.lookup_by_key,
                    vec![storage_key.as_str().into(), TIME_TOLERANCE_MS.into()],
                )?
            }
            Find::LockId(lock_id) => self.query(
                &self.statements.lookup_by_id,
                vec![lock_id.as_str().into(), TIME_TOLERANCE_MS.into()],
            )?,
        };
        rows.first()
            .map(|row| lock_record(row, &self.tables, key))
            .transpose()
    }

    fn list_records(&self, prefix: &KeyPrefix, limit: ListLimit) -> Result<LockList<LockRecord>> {
        self.list(prefix, limit)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn nul_keys_are_refused_before_io() {
        let key = |k: &str| Key::new(k).unwrap();
        assert_eq!(
            storage_key_of(&key("a\0b")).unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        assert_eq!(storage_key_of(&key("ab")).unwrap(), "ab");
    }
}
