//! The Redis backend: one Lua script per operation over a pooled blocking connection, with
//! Redis `TIME` as the clock, storing locks exactly as the TypeScript SyncGuard does.
//!
//! ```no_run
//! use syncguard::{Locker, redis::RedisBackend};
//!
//! let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1/")?);
//! let guard = locker.lock("nightly-report")?;
//! println!("fence {}", guard.fence());
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Storage
//!
//! For a key `K` under the prefix `P` (default `syncguard`), with `msk` =
//! [`make_storage_key`] at Redis' limit of 1000 bytes with 26 reserved:
//!
//! | Redis key | value | TTL |
//! |---|---|---|
//! | `L = msk(P, K)` | JSON `{"lockId","expiresAtMs","acquiredAtMs","key","fence"}` | the lease's `PX` |
//! | `msk(P, "id:" + lockId)` | `L` (the reverse index release and extend resolve through) | the same `PX` |
//! | `msk(P, "fence:" + L)` | the fence counter (`INCR`) | none: never expires, never deleted |
//!
//! As in the TypeScript SyncGuard, a user key such as `fence:syncguard:job` names the same
//! Redis key as the fence counter of `job`. Every script checks what it finds before writing:
//! such a collision fails with `Internal` instead of overwriting the counter or an index
//! entry, and a fence counter is never deleted.
//!
//! # Errors
//!
//! Connection refused, reset or dropped, DNS failure, a server loading or read-only →
//! `ServiceUnavailable`; `NOAUTH`/`WRONGPASS`/`NOPERM` → `AuthFailed`; `WRONGTYPE` and syntax
//! errors → `InvalidArgument`; read, write or connect timeouts → `NetworkTimeout`; no pooled
//! connection free within the pool timeout while the server is reachable → `RateLimited`
//! (when connecting is what fails, the connect error's code instead); a lock key holding
//! something that is not a SyncGuard lock record, or a fence counter past
//! [`FENCE_MAX`] → `Internal`. A pooled connection found dead (a restarted
//! server) is replaced and the call repeated once, which every script is safe against.
//!
//! Messages name the server (`host:port`, and the database when it is not 0) and the cause:
//! connection refused, host name not resolved, the TLS reason, authentication failed or
//! required, which timeout ran out. They never contain the password:
//! `ServiceUnavailable: cannot connect to Redis at 10.0.0.5:6379: connection refused`.
//!
//! # TLS
//!
//! `rediss://` connects with TLS, always fully verified (the certificate chain and the host
//! name), trusting the system's root certificates plus those of a CA file
//! ([`RedisBuilder::tls_ca_file`], or `?tls_ca_file=PATH` in the URL: a PEM file of one or more
//! certificates, for a private CA). The PostgreSQL and Firestore backends follow the same
//! policy. A certificate that is not trusted, or not valid for the host name in the URL, fails
//! with `ServiceUnavailable` and says so: `cannot connect to Redis at localhost:6380: TLS
//! failure: the server's certificate is not trusted (unknown issuer): …`. A CA file that cannot
//! be read or holds no valid certificate is `InvalidArgument`, naming its path.
//!
//! **rustls' process-wide crypto provider.** redis-rs (1.8) builds the TLS configuration of
//! each connection with rustls' *process-default* provider and offers no way to pass one
//! (redis-rs issue #463); with none installed, rustls picks one from its crate features, and
//! panics if the application's dependency tree enables both *ring* and aws-lc-rs. So the first
//! `rediss://` backend installs *ring* as the process default — only if no provider is
//! installed yet. An application that wants another provider installs it first, and syncguard
//! leaves it alone (the PostgreSQL and Firestore backends never read or change the default):
//!
//! ```no_run
//! // Before the first rediss:// backend: the provider of your choice (aws-lc-rs, say).
//! let _ = rustls::crypto::ring::default_provider().install_default();
//! let backend = syncguard::redis::RedisBackend::connect("rediss://redis.internal:6380/")?;
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! redis-rs also reads the system's certificate store itself for each new connection (although
//! it then trusts the roots syncguard gives it), and refuses to connect when that store
//! reports an error.

mod connection;
mod errors;
mod scripts;
mod watch;

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use std::sync::Arc;

use self::connection::{Connector, LastFailure, Pool, Timeouts, client, parse_url};
use self::errors::Server;
use self::scripts::{Reply, SCRIPTS, Status};
use self::watch::RedisWatch;
use crate::backend::{Capabilities, TimeAuthority};
use crate::driver::{
    Acquisition, Driver, Extension, FENCE_MAX, Find, Key, LOCK_ID_LENGTH, LeaseRef, LockId,
    LockRecord, OnRelease, Outcome, ReleaseWatch, TIME_TOLERANCE_MS, Ttl, make_storage_key,
};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::net::{Source, pool_source};

/// Redis' storage-key limit in bytes.
pub const STORAGE_KEY_LIMIT: usize = 1000;
/// Bytes [`make_storage_key`] keeps free for derived suffixes.
pub const STORAGE_KEY_RESERVE: usize = 26;
/// The default key prefix, shared with the TypeScript SyncGuard.
pub const DEFAULT_PREFIX: &str = "syncguard";
/// How long past expiry a lock must be before the opt-in cleanup in `is_locked` deletes it,
/// so that it can never race a renewal.
pub const CLEANUP_GUARD_MS: i64 = 2000;

/// The namespaces under the prefix that hold index entries and fence counters.
const RESERVED_SEGMENTS: [&str; 2] = ["id", "fence"];

/// Distributed locks in Redis. See the [module docs](self) for the storage layout.
///
/// Built with [`RedisBackend::connect`] or [`RedisBackend::builder`]; cheap to share behind a
/// [`Locker`](crate::Locker) across threads (connections come from an r2d2 pool).
pub struct RedisBackend {
    pool: Pool,
    /// For the release watch's own connection (`None` with the application's pool, whose
    /// waiters poll).
    watch_client: Option<(redis::Client, Duration)>,
    prefix: String,
    /// `msk(prefix, "id:")` without the lock id: the index key prefix (never hashed, see
    /// [`RedisBuilder::key_prefix`]).
    index_prefix: String,
    cleanup_in_is_locked: bool,
    /// Where the server is and what messages must not show.
    server: Arc<Server>,
    display_url: String,
}

/// Options for a [`RedisBackend`]. Defaults: prefix `syncguard`, 8 pooled connections,
/// connect/read/write timeouts of 2 s, pool checkout timeout of 3 s, no cleanup in
/// `is_locked`.
#[derive(Clone)]
#[must_use = "call build() to get a backend"]
pub struct RedisBuilder {
    url: Option<String>,
    pool: Option<r2d2::Pool<redis::Client>>,
    key_prefix: Option<String>,
    cleanup_in_is_locked: bool,
    pool_size: u32,
    timeouts: Timeouts,
    tls_ca_file: Option<std::path::PathBuf>,
}

impl Default for RedisBuilder {
    fn default() -> Self {
        RedisBuilder {
            url: None,
            pool: None,
            key_prefix: None,
            cleanup_in_is_locked: false,
            pool_size: 8,
            timeouts: Timeouts {
                connect: Duration::from_secs(2),
                read: Duration::from_secs(2),
                write: Duration::from_secs(2),
                checkout: Duration::from_secs(3),
            },
            tls_ca_file: None,
        }
    }
}

impl RedisBuilder {
    /// The server: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, verified
    /// against the system's root certificates and any [`tls_ca_file`](Self::tls_ca_file); see
    /// [TLS](self#tls)) or `redis+unix:///path/to/socket[?db=N]`. `?prefix=NAME` sets the key
    /// prefix; `?tls_ca_file=PATH` (`rediss://` only) adds a CA file; `?protocol=` is passed on; `?db=`, `?user=` and
    /// `?pass=` are read for sockets only. [`build`](RedisBuilder::build) refuses any other
    /// parameter, an empty or repeated `prefix`, a fragment (`#insecure`) and a path that is not
    /// a database number, naming what is wrong.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Use the application's r2d2 pool of `redis::Client` connections instead of a URL. Read
    /// and write timeouts are applied to each connection as it is checked out. Turn
    /// `test_on_check_out` off in that pool, or every operation pays an extra round trip.
    /// Unlike syncguard's own pool, such a pool keeps a connection whose read timed out; if
    /// that request was lost on the way, the connection stays out of step until the pool
    /// drops it, so prefer [`url`](RedisBuilder::url) where timeouts are expected.
    pub fn pool(mut self, pool: r2d2::Pool<redis::Client>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The namespace of every key (default `syncguard`; one trailing `:` is dropped). Must
    /// not be empty, and must leave room for keys: at most 948 bytes, so that index keys are
    /// never hashed. It may not end in an `id` or `fence` segment, which would overlap those
    /// namespaces of a shorter prefix.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    crate::net::pooled_builder_options!();

    /// Timeout for reading a reply (default 2 s).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.read = timeout;
        self
    }

    /// Timeout for sending a request (default 2 s).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.write = timeout;
        self
    }

    /// Validates the options (`InvalidArgument`, before any I/O) and, for a URL, opens one
    /// connection to check the server and the credentials (`ServiceUnavailable`, `AuthFailed`,
    /// `NetworkTimeout` otherwise, with a message naming the server's `host:port` and the
    /// cause).
    pub fn build(self) -> Result<RedisBackend> {
        let source = pool_source(
            "Redis",
            self.url,
            self.pool,
            &[
                ("connect_timeout", self.timeouts.connect),
                ("read_timeout", self.timeouts.read),
                ("write_timeout", self.timeouts.write),
                ("pool_timeout", self.timeouts.checkout),
            ],
            self.pool_size,
        )?;
        let key_prefix = match &self.key_prefix {
            Some(prefix) => Some(validate_prefix(prefix, "key_prefix")?),
            None => None,
        };
        let (pool, watch_client, url_prefix, server, display_url) = match source {
            Source::Pool(_) if self.tls_ca_file.is_some() => {
                return Err(LockError::invalid_argument(
                    "tls_ca_file applies to connections syncguard opens from a URL; the \
                     application's pool has TLS settings of its own",
                ));
            }
            Source::Pool(pool) => (
                Pool::External(pool, self.timeouts),
                None,
                None,
                Arc::new(Server::application_pool(self.timeouts)),
                "<application pool>".to_owned(),
            ),
            Source::Url(url) => {
                let parsed = parse_url(&url)?;
                let url_prefix = match &parsed.prefix {
                    Some(prefix) => Some(validate_prefix(prefix, "URL parameter `prefix`")?),
                    None => None,
                };
                let server = Arc::new(Server::from_url(
                    parsed.location,
                    parsed.secrets,
                    self.timeouts,
                    parsed.tls,
                ));
                // The builder's CA file wins over the URL's, as for every option.
                let ca_file = self.tls_ca_file.as_deref().or(parsed.ca_file.as_deref());
                let client = client(&parsed.client_url, parsed.tls, ca_file, &server)?;
                let last_failure = LastFailure::default();
                let watch_client = Some((client.clone(), self.timeouts.connect));
                let connector = Connector::new(
                    client,
                    Arc::clone(&server),
                    self.timeouts,
                    last_failure.clone(),
                );
                connector.probe()?;
                let pool = r2d2::Pool::builder()
                    .max_size(self.pool_size)
                    .min_idle(Some(0))
                    .test_on_check_out(false)
                    .connection_timeout(self.timeouts.checkout)
                    .error_handler(Box::new(r2d2::NopErrorHandler))
                    .build_unchecked(connector);
                (
                    Pool::Own(pool, last_failure),
                    watch_client,
                    url_prefix,
                    server,
                    parsed.display,
                )
            }
        };
        let prefix = key_prefix
            .or(url_prefix)
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        // validate_prefix guarantees `prefix:id:<lock id>` fits unhashed.
        let index_prefix = format!("{prefix}:id:");
        Ok(RedisBackend {
            pool,
            watch_client,
            prefix,
            index_prefix,
            cleanup_in_is_locked: self.cleanup_in_is_locked,
            server,
            display_url,
        })
    }
}

/// Checks a key prefix (given as `option`, for messages) and returns it without its trailing
/// `:`. Never empty: keys without a namespace would mix with everything else in the database.
fn validate_prefix(prefix: &str, option: &str) -> Result<String> {
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    if prefix.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} is empty: leave it out for the default `{DEFAULT_PREFIX}`, or \
             give a namespace such as `myapp`"
        )));
    }
    // Index keys (`prefix:id:` + 22 characters) must fit unhashed: scripts rebuild them.
    let longest_index = prefix.len() + 1 + "id:".len() + LOCK_ID_LENGTH;
    if longest_index + STORAGE_KEY_RESERVE > STORAGE_KEY_LIMIT {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} of {} bytes is too long: at most {} bytes",
            prefix.len(),
            STORAGE_KEY_LIMIT - STORAGE_KEY_RESERVE - 1 - "id:".len() - LOCK_ID_LENGTH
        )));
    }
    let last_segment = prefix.rsplit(':').next().unwrap_or(prefix);
    if RESERVED_SEGMENTS.contains(&last_segment) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not end in an `id` or `fence` segment (got {prefix:?}): \
             its locks would overlap another prefix's index or fence keys"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not contain control characters"
        )));
    }
    Ok(prefix.to_owned())
}

/// A lock record as stored (and as the TypeScript SyncGuard stores it).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredLock {
    lock_id: String,
    expires_at_ms: f64,
    acquired_at_ms: f64,
    key: String,
    fence: String,
}

impl RedisBackend {
    /// Connects to the server at `url` with the default options (see [`RedisBuilder::url`]).
    pub fn connect(url: &str) -> Result<RedisBackend> {
        Self::builder().url(url).build()
    }

    /// Options beyond the URL.
    pub fn builder() -> RedisBuilder {
        RedisBuilder::default()
    }

    /// The key prefix in use (without trailing `:`).
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key holding the lock on `key` (for inspection and tests).
    pub fn lock_key(&self, key: &str) -> Result<String> {
        self.storage_key(Key::new(key)?.as_str())
    }

    /// The Redis key of the reverse index entry of `lock_id`.
    pub fn index_key(&self, lock_id: &str) -> Result<String> {
        Ok(self.index_key_of(&LockId::new(lock_id)?))
    }

    fn index_key_of(&self, lock_id: &LockId) -> String {
        format!("{}{}", self.index_prefix, lock_id.as_str())
    }

    /// The Redis key of the fence counter of `key`.
    pub fn fence_key(&self, key: &str) -> Result<String> {
        self.fence_key_of(&self.lock_key(key)?)
    }

    /// The fence counter key that belongs to a lock key.
    fn fence_key_of(&self, lock_key: &str) -> Result<String> {
        self.storage_key(&format!("fence:{lock_key}"))
    }

    fn storage_key(&self, key: &str) -> Result<String> {
        make_storage_key(&self.prefix, key, STORAGE_KEY_LIMIT, STORAGE_KEY_RESERVE)
    }

    fn run(
        &self,
        call: impl FnMut(&mut redis::Connection) -> redis::RedisResult<redis::Value>,
    ) -> Result<Reply> {
        Reply::parse(self.pool.run(&self.server, call)?)
    }

    fn foreign(&self, key: Option<&str>) -> LockError {
        let error = LockError::internal(
            "a Redis key syncguard uses holds a value that is not a SyncGuard lock record",
        );
        match key {
            Some(key) => error.with_key(key),
            None => error,
        }
    }

    fn decode(&self, raw: &str) -> Result<LockRecord> {
        let stored: StoredLock = serde_json::from_str(raw).map_err(|_| self.foreign(None))?;
        let fence = stored
            .fence
            .parse::<Fence>()
            .map_err(|_| self.foreign(None))?;
        Ok(LockRecord {
            key: stored.key,
            lock_id: stored.lock_id,
            expires_at_ms: whole_ms(stored.expires_at_ms)?,
            acquired_at_ms: whole_ms(stored.acquired_at_ms)?,
            fence,
        })
    }

    /// What a release or extend reply says; `applied` reads what an applied one carries.
    fn outcome<T>(
        &self,
        reply: &mut Reply,
        lock_id: &LockId,
        applied: impl FnOnce(&mut Reply) -> Result<T>,
    ) -> Result<Outcome<T>> {
        match reply.status {
            Status::Ok => applied(reply).map(Outcome::Applied),
            Status::NotFound | Status::Absent => Ok(Outcome::NotFound),
            Status::Expired => Ok(Outcome::Expired),
            Status::Foreign | Status::FenceOverflow => {
                Err(self.foreign(None).with_lock_id(lock_id.as_str()))
            }
        }
    }
}

/// Timestamps come back from Lua's cjson as JSON numbers, possibly written as floats.
fn whole_ms(value: f64) -> Result<i64> {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15 {
        Ok(value as i64)
    } else {
        Err(LockError::internal(
            "a stored lock timestamp is not a whole number of milliseconds",
        ))
    }
}

impl Driver for RedisBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("redis", true, TimeAuthority::Server)
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<Acquisition> {
        let lock_key = self.storage_key(key.as_str())?;
        let fence_key = self.fence_key_of(&lock_key)?;
        let lock_id = LockId::generate();
        let index_key = self.index_key_of(&lock_id);
        let mut reply = self.run(|conn| {
            SCRIPTS
                .acquire
                .key(&lock_key)
                .key(&index_key)
                .key(&fence_key)
                .arg(lock_id.as_str())
                .arg(ttl.as_millis())
                .arg(TIME_TOLERANCE_MS)
                .arg(key.as_str())
                .arg(FENCE_MAX)
                .invoke(conn)
        })?;
        match reply.status {
            Status::Ok => {
                let fence: Fence = reply.string()?.parse()?;
                // Re-issuing through from_counter applies the warning threshold.
                let fence =
                    Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
                let expires_at_ms = reply.int()?;
                Ok(Acquisition::granted(
                    lock_id.into_string(),
                    fence,
                    expires_at_ms,
                    None,
                ))
            }
            Status::Absent => Ok(Acquisition::Locked),
            Status::FenceOverflow => Err(LockError::internal(format!(
                "the fence counter of this key passed {FENCE_MAX}; rotate the key namespace"
            ))
            .with_key(key.as_str())),
            Status::Foreign | Status::NotFound | Status::Expired => {
                Err(self.foreign(Some(key.as_str())))
            }
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let index_key = self.index_key_of(lease.lock_id);
        let mut reply = self.run(|conn| {
            SCRIPTS
                .release
                .key(&index_key)
                .arg(lease.lock_id.as_str())
                .arg(TIME_TOLERANCE_MS)
                .invoke(conn)
        })?;
        self.outcome(&mut reply, lease.lock_id, |_| Ok(()))
    }

    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let index_key = self.index_key_of(lease.lock_id);
        let mut reply = self.run(|conn| {
            SCRIPTS
                .extend
                .key(&index_key)
                .arg(lease.lock_id.as_str())
                .arg(TIME_TOLERANCE_MS)
                .arg(ttl.as_millis())
                .invoke(conn)
        })?;
        self.outcome(&mut reply, lease.lock_id, |reply| {
            Ok(Extension {
                expires_at_ms: reply.int()?,
                version: None,
            })
        })
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let lock_key = self.storage_key(key.as_str())?;
        let cleanup = if self.cleanup_in_is_locked { "1" } else { "0" };
        let reply = self.run(|conn| {
            SCRIPTS
                .is_locked
                .key(&lock_key)
                .arg(TIME_TOLERANCE_MS)
                .arg(cleanup)
                .arg(&self.index_prefix)
                .arg(CLEANUP_GUARD_MS)
                .invoke(conn)
        })?;
        match reply.status {
            Status::Ok => Ok(true),
            Status::Foreign => Err(self.foreign(Some(key.as_str()))),
            _ => Ok(false),
        }
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        // One pipeline: every renewal is still its own atomic script, but the batch costs
        // one round trip.
        let invocations: Vec<_> = leases
            .iter()
            .map(|(lease, ttl)| {
                let mut invocation = SCRIPTS.extend.prepare_invoke();
                invocation
                    .key(self.index_key_of(lease.lock_id))
                    .arg(lease.lock_id.as_str())
                    .arg(TIME_TOLERANCE_MS)
                    .arg(ttl.as_millis());
                invocation
            })
            .collect();
        let replies = self.pool.run(&self.server, |conn| {
            let mut pipe = redis::pipe();
            for invocation in &invocations {
                pipe.invoke_script(invocation);
            }
            match pipe.query::<Vec<redis::Value>>(conn) {
                // A pipeline does not load scripts by itself (after a server restart, say).
                Err(error)
                    if error.kind()
                        == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    SCRIPTS.extend.prepare_invoke().load(conn)?;
                    pipe.query::<Vec<redis::Value>>(conn)
                }
                answer => answer,
            }
        });
        match replies {
            Ok(replies) if replies.len() == leases.len() => replies
                .into_iter()
                .zip(leases)
                .map(|(value, (lease, _))| {
                    let mut reply = Reply::parse(value)?;
                    self.outcome(&mut reply, lease.lock_id, |reply| {
                        Ok(Extension {
                            expires_at_ms: reply.int()?,
                            version: None,
                        })
                    })
                })
                .collect(),
            Ok(_) => leases
                .iter()
                .map(|_| Err(LockError::internal("Redis answered a pipeline short")))
                .collect(),
            Err(error) => leases
                .iter()
                .map(|_| Err(LockError::new(error.code(), error.message())))
                .collect(),
        }
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let Some((client, connect_timeout)) = &self.watch_client else {
            return Ok(None);
        };
        let watch = RedisWatch::start(client.clone(), *connect_timeout, &self.prefix, on_release)
            .map_err(|e| {
            LockError::new(
                ErrorCode::ServiceUnavailable,
                format!("could not start the Redis release watch: {e}"),
            )
        })?;
        Ok(Some(Box::new(watch)))
    }

    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
        let mut reply = match by {
            Find::Key(key) => {
                let lock_key = self.storage_key(key.as_str())?;
                let reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_key
                        .key(&lock_key)
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self.foreign(Some(key.as_str())));
                }
                reply
            }
            Find::LockId(lock_id) => {
                let index_key = self.index_key_of(lock_id);
                let reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_id
                        .key(&index_key)
                        .arg(lock_id.as_str())
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self.foreign(None).with_lock_id(lock_id.as_str()));
                }
                reply
            }
        };
        if reply.status != Status::Ok {
            return Ok(None);
        }
        let raw = reply.string()?;
        self.decode(&raw).map(Some)
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("RedisBackend")
            .field("url", &self.display_url)
            .field("key_prefix", &self.prefix)
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.pool.max_size())
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}

impl fmt::Debug for RedisBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self
            .url
            .as_deref()
            .map(|url| parse_url(url).map_or_else(|_| "<malformed>".to_owned(), |p| p.display));
        f.debug_struct("RedisBuilder")
            .field("url", &url)
            .field("pool", &self.pool.as_ref().map(|_| "<application pool>"))
            .field("key_prefix", &self.key_prefix)
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.pool_size)
            .field("timeouts", &self.timeouts)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let check = |prefix: &str| validate_prefix(prefix, "key_prefix");
        assert_eq!(check("syncguard").unwrap(), "syncguard");
        assert_eq!(check("app:").unwrap(), "app");
        assert!(check(&"p".repeat(948)).is_ok());
        assert!(check(&"p".repeat(949)).is_err());
        for overlapping in ["id", "fence", "app:id", "app:fence", "app:fence:"] {
            assert!(check(overlapping).is_err(), "{overlapping}");
        }
        assert!(check("app:fences").is_ok());
        assert!(check("a\nb").is_err());
        for empty in ["", ":", " "] {
            assert!(check(empty).is_err(), "{empty:?}");
        }
    }

    #[test]
    fn index_keys_are_what_make_storage_key_gives() {
        for prefix in ["syncguard", "p", &"p".repeat(948)] {
            let id = crate::driver::generate_lock_id();
            let expected = make_storage_key(
                prefix,
                &format!("id:{id}"),
                STORAGE_KEY_LIMIT,
                STORAGE_KEY_RESERVE,
            )
            .unwrap();
            assert_eq!(format!("{prefix}:id:{id}"), expected);
        }
    }

    /// Each bad URL or option, the message it gets, all `InvalidArgument` and before any I/O
    /// (nothing listens on port 1: a row that connected would fail otherwise).
    #[test]
    fn bad_urls_and_options_are_refused_by_name_before_io() {
        let url = |url: &str| RedisBackend::builder().url(url);
        let at = |builder: RedisBuilder| builder.url("redis://:hunter2@127.0.0.1:1/");
        let rows: Vec<(RedisBuilder, &str)> = vec![
            (
                url("redis://:hunter2@127.0.0.1:1/?prefx=myapp"),
                "unknown Redis URL parameter `prefx` (did you mean `prefix`?); known parameters: \
                 prefix, tls_ca_file, protocol",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix="),
                "the Redis URL parameter `prefix` is empty: give it a value or leave it out",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=a&prefix=b"),
                "the Redis URL parameter `prefix` is given twice",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=:"),
                "the Redis URL parameter `prefix` is empty: leave it out for the default \
                 `syncguard`, or give a namespace such as `myapp`",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=app:fence"),
                "the Redis URL parameter `prefix` may not end in an `id` or `fence` segment (got \
                 \"app:fence\"): its locks would overlap another prefix's index or fence keys",
            ),
            (
                url("http://:hunter2@127.0.0.1:1/"),
                "not a Redis URL (scheme \"http\"); expected redis://, rediss://, redis+unix:// \
                 or unix://",
            ),
            (url("  "), "the Redis URL is empty"),
            (
                url("redis://:hunter2@127.0.0.1:1/?db=2"),
                "the Redis URL parameter `db` is read only for unix sockets (redis+unix://); for \
                 redis:// and rediss:// give the database as the path: redis://host:port/2",
            ),
            (
                url("redis://127.0.0.1:1/?pass=hunter2"),
                "the Redis URL parameter `pass` is read only for unix sockets (redis+unix://); \
                 for redis:// and rediss:// give them before the host: \
                 redis://user:password@host:port/",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/two"),
                "the path of a Redis URL must be a database number (0, 1, …): \
                 redis://host:port/2",
            ),
            (
                url("rediss://:hunter2@127.0.0.1:1/#insecure"),
                "a Redis URL takes no fragment (`#…`); `#insecure` (TLS without certificate \
                 checks) is not supported",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?protocol="),
                "the Redis URL parameter `protocol` must be resp2 or resp3 (or 2 or 3)",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&db=x"),
                "the Redis URL parameter `db` must be a database number (0, 1, …): ?db=2",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&db=1&db=2"),
                "the Redis URL parameter `db` is given twice",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&prefx=a"),
                "unknown Redis URL parameter `prefx` (did you mean `prefix`?); known parameters: \
                 prefix, tls_ca_file, protocol, db, user, pass",
            ),
            (url("redis:///"), "the Redis URL names no host"),
            (
                at(RedisBackend::builder().key_prefix("")),
                "the Redis key_prefix is empty: leave it out for the default `syncguard`, or give \
                 a namespace such as `myapp`",
            ),
            (
                at(RedisBackend::builder().key_prefix(":")),
                "the Redis key_prefix is empty: leave it out for the default `syncguard`, or give \
                 a namespace such as `myapp`",
            ),
            (
                RedisBackend::builder(),
                "the Redis backend needs a URL or a pool",
            ),
            (
                at(RedisBackend::builder().pool_size(0)),
                "pool_size must be at least 1",
            ),
            (
                at(RedisBackend::builder().connect_timeout(Duration::ZERO)),
                "connect_timeout must be above zero",
            ),
            (
                at(RedisBackend::builder().pool_timeout(Duration::ZERO)),
                "pool_timeout must be above zero",
            ),
        ];
        for (builder, message) in rows {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }

    #[test]
    fn builder_debug_hides_the_password() {
        let shown = format!("{:?}", RedisBackend::builder().url("redis://u:hunter2@h/"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn whole_ms_rejects_fractions() {
        assert_eq!(whole_ms(1.7e12).unwrap(), 1_700_000_000_000);
        assert!(whole_ms(1.5).is_err());
        assert!(whole_ms(f64::NAN).is_err());
    }

    /// `tls_ca_file`: only with TLS, only for connections syncguard opens, and a file that
    /// cannot be read is refused naming its path — all before any I/O.
    #[test]
    fn the_tls_ca_file_needs_tls_and_a_readable_file() {
        let missing = std::env::temp_dir().join("syncguard-no-such-ca.pem");
        let unreadable = format!(
            "the CA file {} cannot be read: No such file or directory (os error 2)",
            missing.display()
        );
        let pool = r2d2::Pool::builder()
            .build_unchecked(redis::Client::open("redis://127.0.0.1:1/").unwrap());
        let rows: Vec<(RedisBuilder, &str)> = vec![
            (
                RedisBackend::builder().url("redis://:hunter2@127.0.0.1:1/?tls_ca_file=/ca.pem"),
                "the Redis URL parameter `tls_ca_file` needs TLS: use a rediss:// URL",
            ),
            (
                RedisBackend::builder().url(format!(
                    "rediss://:hunter2@127.0.0.1:1/?tls_ca_file={}",
                    missing.display()
                )),
                &unreadable,
            ),
            (
                RedisBackend::builder()
                    .url("rediss://:hunter2@127.0.0.1:1/")
                    .tls_ca_file(&missing),
                &unreadable,
            ),
            (
                RedisBackend::builder().pool(pool).tls_ca_file(&missing),
                "tls_ca_file applies to connections syncguard opens from a URL; the \
                 application's pool has TLS settings of its own",
            ),
        ];
        for (builder, message) in rows {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }
}
