//! The PostgreSQL backend: one SQL statement per operation over pooled connections, with
//! the server's clock as time authority, in the tables the TypeScript SyncGuard uses.
//!
//! ```no_run
//! use syncguard::{Locker, postgres::PostgresBackend};
//!
//! let backend = PostgresBackend::connect("postgres://app:secret@localhost/app")?;
//! backend.setup_schema()?; // once; idempotent (or apply schema.sql in a migration)
//! let locker = Locker::new(backend);
//! let guard = locker.lock("nightly-report")?;
//! println!("fence {}", guard.fence());
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Storage
//!
//! Two tables (see [`SCHEMA_SQL`]): `syncguard_locks(key, lock_id, expires_at_ms,
//! acquired_at_ms, fence, user_key)` with a unique index on `lock_id` and an index on
//! `expires_at_ms`, and `syncguard_fence_counters(fence_key, fence, key_debug)`, whose rows are
//! never deleted. `key` is [`make_storage_key`]`("", key, 1700, 0)`, `fence_key` the same of
//! `"fence:" + key`.
//!
//! # Atomicity and mixed fleets
//!
//! Each operation is a single statement (one round trip, one implicit transaction); acquire
//! takes `pg_advisory_xact_lock(hashtext(key))` exactly like the TypeScript SyncGuard, so Rust
//! and Node services on the same tables never both hold a key. The reasoning for each
//! statement is written next to it in the source (`statements.rs`).
//!
//! # Listing
//!
//! [`LockBackend::list`](crate::LockBackend::list) is one statement, through its server
//! function (inline on tables the TypeScript SyncGuard created): the live rows whose `user_key` starts with the
//! prefix, in byte order, one more than the limit. The user key has no index: the server reads
//! the whole lock table and keeps the first rows in a top-N sort, within the statement
//! deadline ([`PostgresBuilder::statement_timeout`]); a row that is not a SyncGuard record
//! among them is an `Internal` error, as everywhere.
//!
//! # Connection poolers (PgBouncer, Supavisor, RDS Proxy)
//!
//! Works behind a pooler in transaction mode with its default settings: every statement is
//! sent as an *unnamed* statement with its parameter types (Parse, Bind, Execute, Sync in one
//! round trip), so nothing prepared outlives the transaction that used it, and no startup
//! parameter beyond user, database and `application_name` is sent. Each operation is one
//! statement, hence one transaction, so the pooler may give every call a different server
//! connection. The advisory lock acquire takes is transaction-scoped, which poolers allow.
//!
//! # Deadlines and `statement_timeout`
//!
//! Every call of syncguard's own connections has a client-side deadline
//! ([`PostgresBuilder::statement_timeout`], default 5 s; the handshake gets the connect timeout
//! on top). At the deadline the call fails with `NetworkTimeout`, the server is sent a cancel
//! request — what its own `statement_timeout` would do — and the connection is dropped.
//! syncguard sets no server-side `statement_timeout` (that takes a startup parameter poolers
//! refuse, or a session setting that would leak to other clients of the pooler); the role's or
//! database's own setting applies (`ALTER ROLE app SET statement_timeout = '5s'`), and a
//! statement it cancels fails with `NetworkTimeout` too.
//!
//! Calls may come from any thread, including one inside an async runtime (`block_on`, a
//! `#[tokio::main]` task): they block that thread until the answer or the deadline, and never
//! panic. The calling thread drives the connection itself; a thread inside an async runtime,
//! where that would panic, has the call made on a short-lived thread of its own. In async code
//! prefer `spawn_blocking`, as for any blocking call.
//!
//! # Failover
//!
//! A fence is a counter row updated in the acquiring transaction. With asynchronous
//! replication a failover can lose the last committed transactions, and with them the last
//! fence increments: the promoted server can hand out a fence number again. For fences that
//! survive a failover, commit synchronously to at least one standby that the failover will
//! promote: `synchronous_standby_names` set (e.g. `'ANY 1 (standby_a, standby_b)'`) and
//! `synchronous_commit = on` (or `remote_apply`) for the role syncguard uses. Managed services
//! with synchronous replicas (RDS Multi-AZ DB instances, Cloud SQL HA, Azure zone-redundant
//! HA) do this. A single server needs `fsync = on` and `synchronous_commit = on` (the
//! defaults) for fences to survive its own crash.
//!
//! # Errors
//!
//! By SQLSTATE: class 08 (PgBouncer's transient failures among them), 53, 57P01–03, 40001,
//! 40P01, 55P03 (the role's `lock_timeout`), 25006 (a read-only server during a failover) →
//! `ServiceUnavailable`; 28000/28P01/42501 and a missing password → `AuthFailed`; 57014 (a
//! cancelled statement) and client deadlines → `NetworkTimeout`; no pooled connection free
//! within the pool timeout → `RateLimited` (when connecting is what fails: that error's code).
//! `InvalidArgument` is only ever what the caller passed, refused before any I/O. Errors of the
//! deployment, which retrying will not mend, are `Internal` with a message that says what to
//! change: tables missing or outdated (42P01, 42703, 42883: run `syncguard setup` or
//! [`setup_schema`]), tables changed by hand so that the server refuses syncguard's rows
//! (classes 22 and 23, 42804, 42P10: a NOT NULL column or a constraint added, a type changed;
//! the message names the table, column or constraint), a missing database (3D000), prepared
//! statements lost to a transaction-mode pooler (26000, 42P05: a client sharing the pooler
//! prepares statements), a startup parameter the pooler refuses (08P01 "unsupported startup
//! parameter": PgBouncer's `ignore_startup_parameters`). Anything else → `Internal`.
//!
//! A row that is not a SyncGuard lock record (a fence that is not 15 digits or is zero, a lock
//! id that is not 22 base64url characters, a NULL where the schema has NOT NULL), live or
//! expired, is an `Internal` error naming its key from every operation — acquire, release,
//! extend, the batch renewal, `is_locked` and the lookups — never "locked" nor "absent"; no
//! operation takes it over, renews, releases or sweeps it, and acquire draws no fence number
//! for it.
//!
//! An acquire whose statement was sent but got no answer (the statement deadline passed, the
//! connection broke mid-call) fails marked [in doubt](crate::LockError::in_doubt), with the
//! lock id it generated: the server may still carry it out.
//!
//! Messages name the server (`PostgreSQL at host:port/database: …`, never the password) and
//! keep the cause:
//!
//! | input | code | message |
//! |---|---|---|
//! | `?tabel=x` | `InvalidArgument` | unknown PostgreSQL URL parameter `tabel` (did you mean `table`?); known parameters: … |
//! | `?table=` | `InvalidArgument` | the PostgreSQL URL parameter `table` is empty: give it a value or leave it out |
//! | nothing listens on the port | `ServiceUnavailable` | PostgreSQL at 127.0.0.1:5999/app: connection refused (…) |
//! | `nonexistent.invalid` | `ServiceUnavailable` | PostgreSQL at nonexistent.invalid:5432/app: host name not resolved (…) |
//! | `sslmode=require`, plain server | `ServiceUnavailable` | PostgreSQL at …: TLS handshake failed: server does not support TLS |
//! | certificate from a CA not trusted | `ServiceUnavailable` | PostgreSQL at …: TLS handshake failed: the server's certificate is not trusted (unknown issuer): … |
//! | host not in the certificate | `ServiceUnavailable` | PostgreSQL at 10.0.0.5:5432/app: TLS handshake failed: the server's certificate is not valid for the name connected to (certificate not valid for name "10.0.0.5"; …): … |
//! | `sslrootcert=/missing.pem` | `InvalidArgument` | the CA file /missing.pem cannot be read: No such file or directory (os error 2) |
//! | wrong password | `AuthFailed` | PostgreSQL at …: password authentication failed for user "app" (SQLSTATE 28P01) |
//! | no password | `AuthFailed` | PostgreSQL at …: the server asks for a password and the URL gives none |
//! | missing database | `Internal` | PostgreSQL at …/nope: database "nope" does not exist (SQLSTATE 3D000): check the database name in the URL |
//! | missing tables | `Internal` | PostgreSQL at …: the syncguard tables are missing or outdated: run `syncguard setup` (…) |
//! | a NOT NULL column added to the lock table | `Internal` | PostgreSQL at …: the syncguard tables differ from what `syncguard setup` creates (…): drop what was added (…) (at table "syncguard_locks" column "owner"): null value in column "owner" … (SQLSTATE 23502) |
//!
//! PostgreSQL text cannot hold NUL characters, so keys containing one are refused with
//! `InvalidArgument`.
//!
//! # TLS
//!
//! `sslmode=require`, `verify-ca` or `verify-full` turn TLS on, and all three verify fully:
//! the certificate chain and the host name (libpq's `require` and `verify-ca` check less);
//! without `sslmode`, or with `disable`, `allow` or `prefer`, there is no TLS. Trusted: the
//! system's root certificates plus those of `sslrootcert=PATH` or
//! [`PostgresBuilder::tls_ca_file`] (a PEM file of one or more certificates, for a private CA;
//! unlike libpq's `sslrootcert`, it adds to the system's roots instead of replacing them, and
//! `sslrootcert=system` adds nothing). `sslrootcert` without TLS is refused. The Redis and
//! Firestore backends follow the same policy. The crypto provider (*ring*) is given to these
//! connections alone: rustls' process-wide default is never read or changed. An application's
//! pool ([`PostgresBuilder::pool`]) brings its own TLS connector.

mod builder;
mod client;
mod config;
mod connection;
mod errors;
mod io;
mod list;
mod schema;
mod statements;
mod tables;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::Row;
use postgres::error::SqlState;

pub use self::builder::PostgresBuilder;
pub use self::schema::{SCHEMA_SQL, schema_sql, setup_schema};
pub use self::tables::TableNames;

use self::client::Param;
use self::connection::{Connections, Listening, OnNotify};
use self::errors::ServerError;
use self::statements::{Op, Statements};
use crate::driver::{
    Acquisition, Driver, Extension, FENCE_MAX, Find, Holder, Key, KeyPrefix, LeaseRef, ListLimit,
    LockId, LockList, LockRecord, OnRelease, Outcome, ReleaseWatch, TIME_TOLERANCE_MS, Ttl,
    make_storage_key,
};
use crate::driver::{Capabilities, TimeAuthority};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;

/// PostgreSQL's storage-key limit in bytes (keys longer than this are hashed).
pub const STORAGE_KEY_LIMIT: usize = 1700;
/// How long past expiry a lock must be before the opt-in cleanup in `is_locked` deletes it.
pub const CLEANUP_GUARD_MS: i64 = 2000;

/// Distributed locks in PostgreSQL. See the [module docs](self).
pub struct PostgresBackend {
    connections: Box<dyn Connections>,
    tables: TableNames,
    statements: Statements,
    cleanup_in_is_locked: bool,
    /// The server functions are missing: statements go inline.
    inline: AtomicBool,
    display: String,
}

// The options every pooled builder shares. Expanded here and not in `builder.rs` because their
// docs link to this module's sections (`self#tls`) and to its `CLEANUP_GUARD_MS`.
impl PostgresBuilder {
    crate::net::pooled_builder_options!();
}

impl PostgresBackend {
    /// Connects to the server at `url` with the default options (see [`PostgresBuilder::url`]).
    pub fn connect(url: &str) -> Result<PostgresBackend> {
        Self::builder().url(url).build()
    }

    /// Options beyond the URL.
    pub fn builder() -> PostgresBuilder {
        PostgresBuilder::default()
    }

    /// The tables this backend uses.
    pub fn tables(&self) -> &TableNames {
        &self.tables
    }

    /// Creates this backend's tables and indexes if missing ([`setup_schema`] with its table
    /// names). Idempotent; safe to call from every process at start-up.
    pub fn setup_schema(&self) -> Result<()> {
        self.connections.batch(&schema::setup_sql(&self.tables))?;
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
    fn query(&self, op: &Op, params: Vec<Param>) -> Result<Vec<Row>> {
        if !self.inline.load(Ordering::Relaxed) {
            match self.connections.query(&op.call, &params) {
                // The call failed before anything ran: the same statement inline is safe.
                Err(error)
                    if ServerError::state_of(&error) == Some(&SqlState::UNDEFINED_FUNCTION)
                        && error.message().contains(&op.function) =>
                {
                    if !self.inline.swap(true, Ordering::Relaxed) {
                        log::warn!(
                            "syncguard: {}: the server functions are missing (tables set up by \
                             an older syncguard or by the TypeScript SyncGuard); statements are \
                             sent inline and planned on every call. Run `syncguard setup` or \
                             setup_schema once for faster calls",
                            self.display
                        );
                    }
                }
                result => return result,
            }
        }
        // The statement may take fewer parameters than its function (acquire's holder).
        let inline_params = params.len().min(op.inline.types.len());
        self.connections.query(&op.inline, &params[..inline_params])
    }
}

/// The `fence_key` of the counter row that belongs to a storage key.
fn fence_key_of(storage_key: &str) -> Result<String> {
    make_storage_key("", &format!("fence:{storage_key}"), STORAGE_KEY_LIMIT, 0)
}

/// The storage key of `key`, refusing what PostgreSQL text cannot store (before any I/O).
fn storage_key_of(key: &Key) -> Result<String> {
    if key.as_str().contains('\0') {
        return Err(LockError::invalid_argument(
            "PostgreSQL text cannot hold NUL characters; this key cannot be locked here",
        ));
    }
    make_storage_key("", key.as_str(), STORAGE_KEY_LIMIT, 0)
}

/// The error for a fence counter no fence can follow (acquire wrote nothing).
fn bad_counter_error(counter: i64) -> LockError {
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

/// The error for a row that is not a SyncGuard lock record (see `statements::sound`, the same
/// rule in SQL): `Internal`, naming the key, whichever operation came across it.
fn not_a_record(tables: &TableNames, key: &str) -> LockError {
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
fn lock_record(row: &Row, tables: &TableNames, key: Option<&str>) -> Result<LockRecord> {
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

fn column<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, name: &str) -> Result<T> {
    row.try_get(name)
        .map_err(|_| LockError::internal(format!("unexpected result column {name}")))
}

impl Driver for PostgresBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("postgres", true, TimeAuthority::Server)
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl, holder: Option<&Holder>) -> Result<Acquisition> {
        let storage_key = storage_key_of(key)?;
        let fence_key = fence_key_of(&storage_key)?;
        let lock_id = LockId::generate().into_string();
        let fence_max = FENCE_MAX as i64;
        let rows = self
            .query(
                &self.statements.acquire,
                vec![
                    storage_key.as_str().into(),
                    lock_id.as_str().into(),
                    ttl.as_millis().into(),
                    key.as_str().into(),
                    fence_key.as_str().into(),
                    fence_max.into(),
                    TIME_TOLERANCE_MS.into(),
                    // The function's only: the statement sent inline never stores a holder.
                    holder.map(Holder::as_str).into(),
                ],
            )
            .map_err(|error| {
                // Sent without an answer: the server may still take the lock under this id
                // (the Locker releases it).
                if ServerError::is_unanswered(&error) {
                    error.in_doubt(lock_id.as_str()).with_key(key.as_str())
                } else {
                    error
                }
            })?;
        let row = rows
            .first()
            .ok_or_else(|| LockError::internal("acquire returned no row"))?;
        let fence: Option<String> = column(row, "fence")?;
        let expires_at_ms: Option<i64> = column(row, "expires_at_ms")?;
        let bad_counter: Option<i64> = column(row, "bad_counter")?;
        if column::<Option<bool>>(row, "malformed")? == Some(true) {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        match (fence, expires_at_ms) {
            (Some(fence), Some(expires_at_ms)) => {
                let fence: Fence = fence.parse()?;
                // Re-issuing through from_counter applies the warning threshold.
                let fence =
                    Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
                Ok(Acquisition::granted(lock_id, fence, expires_at_ms, None))
            }
            // Refused by the statement before anything was written.
            _ if let Some(counter) = bad_counter => {
                Err(bad_counter_error(counter).with_key(key.as_str()))
            }
            _ => Ok(Acquisition::Locked),
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
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
        let rows = self.query(
            &self.statements.extend,
            vec![
                lease.lock_id.as_str().into(),
                ttl.as_millis().into(),
                TIME_TOLERANCE_MS.into(),
            ],
        )?;
        let row = rows
            .first()
            .ok_or_else(|| LockError::internal("extend returned no row"))?;
        if let Some(key) = column::<Option<String>>(row, "malformed_key")? {
            return Err(not_a_record(&self.tables, &key));
        }
        Ok(match column::<Option<i64>>(row, "expires_at_ms")? {
            Some(expires_at_ms) => Outcome::Applied(Extension {
                expires_at_ms,
                version: None,
            }),
            None if column::<bool>(row, "present")? => Outcome::Expired,
            None => Outcome::NotFound,
        })
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
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
        let row = rows
            .first()
            .ok_or_else(|| LockError::internal("is_locked returned no row"))?;
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
