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
//! never deleted. `key` is [`make_storage_key`](crate::driver::make_storage_key)`("", key, 1700, 0)`, `fence_key` the same of
//! `"fence:" + key`.
//!
//! Semaphores ([`LockBackend::acquire_as`](crate::LockBackend::acquire_as) with [`Mode::Permit`](crate::Mode::Permit)) have two
//! tables of their own, named after the lock table and created by the same setup:
//! `syncguard_locks_semaphores(key, fence, user_key)`, one row per semaphore ever used with
//! the last permit fence it issued (never deleted: the semaphore's own fence sequence, apart
//! from the key's lock fence counter), and `syncguard_locks_permits(key, lock_id,
//! expires_at_ms, acquired_at_ms, fence, user_key, holder)`, one row per permit held, keyed
//! by `(key, lock_id)`. The lock table and the fence counter table are never touched for a
//! semaphore: a semaphore of one permit on `"k"` is not the lock on `"k"`, and the two never
//! block each other. The TypeScript SyncGuard has no semaphores. Each semaphore operation is
//! one call of a server function (one round trip, one transaction): acquirers of one semaphore
//! take turns on a row lock of its `_semaphores` row, so concurrent acquires, through a
//! transaction-mode pooler too, never grant more than N live permits; an acquire first
//! deletes the semaphore's expired permits (a renewal never does: it answers them expired),
//! and now and then a few of any key expired over a minute ago, so that keys never used again
//! leave no permits behind (docs/postgres.md says how many, and why the `_semaphores` rows
//! stay). Releasing a permit is announced like a lock's release.
//! [`LockBackend::list`](crate::LockBackend::list) of permits reads the live rows of
//! `syncguard_locks_permits` whose `user_key` starts with the prefix, by user key (byte order)
//! then fence, as the lock listing reads the lock table. Without the functions (tables set up
//! by an older syncguard or by the TypeScript SyncGuard) semaphore calls (acquire, holders,
//! listing permits) are refused with `InvalidArgument`, saying to run `syncguard setup` or
//! [`setup_schema`], as a backend without semaphores refuses them; locks, lookups and listing
//! locks keep working, and `syncguard status --key` shows the lock with no permits.
//!
//! The line of waiters (DESIGN §12) is one more table named after the lock table,
//! `syncguard_locks_line(key, kind, place_id, ticket, expires_at_ms, holder)`: one row per
//! place, keyed by `(key, kind, place_id)` (`kind` is `lock` or `permit`: a key's lock and its
//! semaphore have a line each), `ticket` an identity column (arrival order at the server; a
//! waiter of several keys carries one ticket to each of their lines, and places stand by
//! ticket, then place id), `expires_at_ms` by the server's clock. The acquire functions decide the line in the
//! transaction that writes the lock or the permit; an acquisition that finds the key free and
//! the line empty writes nothing more (one index probe in the read it already makes). A refused
//! waiter is answered how many live places stand ahead of its own
//! ([`Acquisitions::Locked`](crate::driver::Acquisitions::Locked)'s `position`, counted by the
//! same function after it stood). The TypeScript SyncGuard knows no line: its acquisition passes it. On tables without this
//! version's functions there is no line (waiters barge; one warning says `syncguard setup` adds
//! it). The steps are in `line_sql.rs`.
//!
//! Several keys ([`Request::all`](crate::driver::Request::all),
//! `Locker::lock_all`) are one call of one more server function: one statement, all or none,
//! through a pooler too; on tables without this version's functions, one key at a time
//! (docs/postgres.md, "Several keys").
//!
//! # Breaking a key
//!
//! [`Driver::break_leases`](crate::driver::Driver::break_leases) (`syncguard break`) is one
//! statement per kind, sent inline (no server function: a break is rare, and it works on tables
//! the TypeScript SyncGuard made): it takes the key's turn as an acquisition does (the advisory
//! lock for a lock and its readers, the semaphore's row for permits), deletes the live holders
//! (never an earlier break's marker; expired ones met are deleted and not answered), draws the
//! next fences from the key's counter and inserts in their places the markers — ordinary rows,
//! TypeScript-shaped in the lock table — and announces the release. A marker in a lock table
//! without the `holder` column (the TypeScript SyncGuard's) has no holder text: it is told from
//! a lease by its lock id alone, without the operator's note. Readers or permits granted while
//! the statement waited for the key are unseen by its snapshot: it finds out (the counter
//! moved), does nothing, and is sent again; a break the pool sent again after its answer was
//! lost finds its own markers and says so. The reasoning is in `break_sql.rs`.
//!
//! # Atomicity and mixed fleets
//!
//! Each operation is a single statement (one round trip, one implicit transaction); acquire
//! takes `pg_advisory_xact_lock(hashtext(key))` exactly like the TypeScript SyncGuard, so Rust
//! and Node services on the same tables never both hold a key. The reasoning for each
//! statement is written next to it in the source (`lock_sql.rs`, and beside it by kind).
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
//! `InvalidArgument` is only ever what the caller passed, refused before any I/O — or a
//! semaphore call on tables without this version's semaphore functions (see "Storage"). Errors of the
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

mod acquire;
mod break_sql;
mod breaking;
mod builder;
mod client;
mod config;
mod connection;
mod driver;
mod errors;
mod holds_sql;
mod io;
mod leases;
mod line;
mod line_sql;
mod list;
mod lock_sql;
mod op;
mod permit_sql;
mod record_sql;
mod records;
mod rows;
mod schema;
mod set;
mod set_sql;
mod shared_sql;
mod statements;
mod sweep_sql;
mod tables;

pub use self::builder::PostgresBuilder;
pub use self::driver::{CLEANUP_GUARD_MS, PostgresBackend};
pub use self::rows::STORAGE_KEY_LIMIT;
pub use self::schema::{SCHEMA_SQL, schema_sql, setup_schema};
pub use self::tables::TableNames;
