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

mod connection;
mod errors;
mod scripts;

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use self::connection::{Connector, LastFailure, Pool, Timeouts, ensure_tls_provider, parse_url};
use self::errors::map_error;
use self::scripts::{Reply, SCRIPTS, Status};
use crate::backend::{
    AcquireOutcome, Capabilities, FailureReason, Lease, LockBackend, LockInfo, LockInfoDebug,
    Lookup, MutationOutcome, TimeAuthority,
};
use crate::error::{LockError, Result};
use crate::fence::{FENCE_MAX, Fence};
use crate::key::{make_storage_key, normalize_and_validate_key};
use crate::lock_id::{LOCK_ID_LENGTH, generate_lock_id, validate_lock_id};
use crate::net::{Redactor, Source, pool_source};
use crate::time::{TIME_TOLERANCE_MS, ttl_to_ms};

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
    prefix: String,
    /// `msk(prefix, "id:")` without the lock id: the index key prefix (never hashed, see
    /// [`RedisBuilder::key_prefix`]).
    index_prefix: String,
    cleanup_in_is_locked: bool,
    redactor: Redactor,
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
        }
    }
}

impl RedisBuilder {
    /// The server: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, verified
    /// against the system's root certificates) or `redis+unix:///path/to/socket[?db=N]`.
    /// `?prefix=NAME` sets the key prefix.
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
    /// leave room for keys: at most 948 bytes, so that index keys are never hashed. It may
    /// not end in an `id` or `fence` segment, which would overlap those namespaces of a
    /// shorter prefix.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Let `is_locked` delete locks found expired for more than [`CLEANUP_GUARD_MS`]
    /// (default off: `is_locked` is then read-only). Fence counters are never touched.
    pub fn cleanup_in_is_locked(mut self, enabled: bool) -> Self {
        self.cleanup_in_is_locked = enabled;
        self
    }

    /// Most connections kept open (default 8). Ignored with [`pool`](RedisBuilder::pool).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Timeout for opening a connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

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

    /// How long an operation waits for a pooled connection (default 3 s). Ignored with
    /// [`pool`](RedisBuilder::pool), whose own setting applies.
    pub fn pool_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.checkout = timeout;
        self
    }

    /// Validates the options and, for a URL, opens one connection to check the server and the
    /// credentials (`ServiceUnavailable`, `AuthFailed`, `NetworkTimeout` otherwise).
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
        let (pool, url_prefix, redactor, display_url) = match source {
            Source::Pool(pool) => (
                Pool::External(pool, self.timeouts),
                None,
                Redactor::default(),
                "<application pool>".to_owned(),
            ),
            Source::Url(url) => {
                let parsed = parse_url(&url)?;
                let redactor = Redactor::new(parsed.secrets);
                if parsed.tls {
                    ensure_tls_provider();
                }
                let client = redis::Client::open(parsed.client_url.as_str())
                    .map_err(|e| map_error(e, &redactor))?;
                let last_failure = LastFailure::default();
                let connector = Connector::new(client, self.timeouts, last_failure.clone());
                // One connection up front: a wrong address or password fails here, with the
                // client's own error, instead of as a pool timeout on first use.
                let mut probe = r2d2::ManageConnection::connect(&connector)
                    .map_err(|e| map_error(e, &redactor))?;
                // A server with a password accepts the connection and refuses the first command.
                r2d2::ManageConnection::is_valid(&connector, &mut probe)
                    .map_err(|e| map_error(e, &redactor))?;
                drop(probe);
                let pool = r2d2::Pool::builder()
                    .max_size(self.pool_size)
                    .min_idle(Some(0))
                    .test_on_check_out(false)
                    .connection_timeout(self.timeouts.checkout)
                    .error_handler(Box::new(r2d2::NopErrorHandler))
                    .build_unchecked(connector);
                (
                    Pool::Own(pool, last_failure),
                    parsed.prefix,
                    redactor,
                    parsed.display,
                )
            }
        };
        let prefix = self
            .key_prefix
            .or(url_prefix)
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        let prefix = validate_prefix(&prefix)?;
        // validate_prefix guarantees `prefix:id:<lock id>` fits unhashed.
        let index_prefix = if prefix.is_empty() {
            "id:".to_owned()
        } else {
            format!("{prefix}:id:")
        };
        Ok(RedisBackend {
            pool,
            prefix,
            index_prefix,
            cleanup_in_is_locked: self.cleanup_in_is_locked,
            redactor,
            display_url,
        })
    }
}

/// Checks a key prefix and returns it without its trailing `:`.
fn validate_prefix(prefix: &str) -> Result<String> {
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    let separator = usize::from(!prefix.is_empty());
    // Index keys (`prefix:id:` + 22 characters) must fit unhashed: scripts rebuild them.
    let longest_index = prefix.len() + separator + "id:".len() + LOCK_ID_LENGTH;
    if longest_index + STORAGE_KEY_RESERVE > STORAGE_KEY_LIMIT {
        return Err(LockError::invalid_argument(format!(
            "Redis key prefix of {} bytes is too long: at most {} bytes",
            prefix.len(),
            STORAGE_KEY_LIMIT - STORAGE_KEY_RESERVE - separator - "id:".len() - LOCK_ID_LENGTH
        )));
    }
    let last_segment = prefix.rsplit(':').next().unwrap_or(prefix);
    if RESERVED_SEGMENTS.contains(&last_segment) {
        return Err(LockError::invalid_argument(format!(
            "Redis key prefix may not end in an `id` or `fence` segment (got {prefix:?}): \
             its locks would overlap another prefix's index or fence keys"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(
            "Redis key prefix may not contain control characters",
        ));
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
        let key = normalize_and_validate_key(key)?;
        self.storage_key(&key)
    }

    /// The Redis key of the reverse index entry of `lock_id`.
    pub fn index_key(&self, lock_id: &str) -> Result<String> {
        validate_lock_id(lock_id)?;
        Ok(format!("{}{lock_id}", self.index_prefix))
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
        Reply::parse(self.pool.run(&self.redactor, call)?)
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

    fn decode(&self, raw: &str) -> Result<LockInfoDebug> {
        let stored: StoredLock = serde_json::from_str(raw).map_err(|_| self.foreign(None))?;
        let fence = stored
            .fence
            .parse::<Fence>()
            .map_err(|_| self.foreign(None))?;
        Ok(LockInfoDebug::new(
            stored.key,
            stored.lock_id,
            whole_ms(stored.expires_at_ms)?,
            whole_ms(stored.acquired_at_ms)?,
            fence,
        ))
    }

    /// Why a release or extend did not apply (`None`: it did).
    fn failure_reason(&self, reply: &Reply, lock_id: &str) -> Result<Option<FailureReason>> {
        match reply.status {
            Status::Ok => Ok(None),
            Status::NotFound | Status::Absent => Ok(Some(FailureReason::NotFound)),
            Status::Expired => Ok(Some(FailureReason::Expired)),
            Status::Foreign | Status::FenceOverflow => {
                Err(self.foreign(None).with_lock_id(lock_id))
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

impl LockBackend for RedisBackend {
    fn acquire(&self, key: &str, ttl: Duration) -> Result<AcquireOutcome> {
        let ttl_ms = ttl_to_ms(ttl)?;
        let key = normalize_and_validate_key(key)?;
        let lock_key = self.storage_key(&key)?;
        let fence_key = self.fence_key_of(&lock_key)?;
        let lock_id = generate_lock_id();
        let index_key = format!("{}{lock_id}", self.index_prefix);
        let mut reply = self.run(|conn| {
            SCRIPTS
                .acquire
                .key(&lock_key)
                .key(&index_key)
                .key(&fence_key)
                .arg(&lock_id)
                .arg(ttl_ms)
                .arg(TIME_TOLERANCE_MS)
                .arg(&key)
                .arg(FENCE_MAX)
                .invoke(conn)
        })?;
        match reply.status {
            Status::Ok => {
                let fence: Fence = reply.string()?.parse()?;
                // Re-issuing through from_counter applies the warning threshold.
                let fence =
                    Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.clone()))?;
                let expires_at_ms = reply.int()?;
                Ok(AcquireOutcome::Acquired(Lease {
                    lock_id,
                    fence,
                    expires_at_ms,
                }))
            }
            Status::Absent => Ok(AcquireOutcome::Locked),
            Status::FenceOverflow => Err(LockError::internal(format!(
                "the fence counter of this key passed {FENCE_MAX}; rotate the key namespace"
            ))
            .with_key(key)),
            Status::Foreign | Status::NotFound | Status::Expired => Err(self.foreign(Some(&key))),
        }
    }

    fn release(&self, lock_id: &str) -> Result<bool> {
        Ok(self.release_outcome(lock_id)?.applied().is_some())
    }

    fn extend(&self, lock_id: &str, ttl: Duration) -> Result<Option<i64>> {
        Ok(self.extend_outcome(lock_id, ttl)?.applied())
    }

    fn is_locked(&self, key: &str) -> Result<bool> {
        let key = normalize_and_validate_key(key)?;
        let lock_key = self.storage_key(&key)?;
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
            Status::Foreign => Err(self.foreign(Some(&key))),
            _ => Ok(false),
        }
    }

    fn lookup(&self, by: Lookup<'_>) -> Result<Option<LockInfo>> {
        Ok(self.lookup_raw(by)?.map(|raw| raw.info))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("redis", true, TimeAuthority::Server)
    }

    fn release_outcome(&self, lock_id: &str) -> Result<MutationOutcome<()>> {
        let index_key = self.index_key(lock_id)?;
        let reply = self.run(|conn| {
            SCRIPTS
                .release
                .key(&index_key)
                .arg(lock_id)
                .arg(TIME_TOLERANCE_MS)
                .invoke(conn)
        })?;
        Ok(match self.failure_reason(&reply, lock_id)? {
            None => MutationOutcome::Applied(()),
            Some(reason) => MutationOutcome::NotApplied(Some(reason)),
        })
    }

    fn extend_outcome(&self, lock_id: &str, ttl: Duration) -> Result<MutationOutcome<i64>> {
        let index_key = self.index_key(lock_id)?;
        let ttl_ms = ttl_to_ms(ttl)?;
        let mut reply = self.run(|conn| {
            SCRIPTS
                .extend
                .key(&index_key)
                .arg(lock_id)
                .arg(TIME_TOLERANCE_MS)
                .arg(ttl_ms)
                .invoke(conn)
        })?;
        Ok(match self.failure_reason(&reply, lock_id)? {
            None => MutationOutcome::Applied(reply.int()?),
            Some(reason) => MutationOutcome::NotApplied(Some(reason)),
        })
    }

    fn lookup_raw(&self, by: Lookup<'_>) -> Result<Option<LockInfoDebug>> {
        let mut reply = match by {
            Lookup::Key(key) => {
                let key = normalize_and_validate_key(key)?;
                let lock_key = self.storage_key(&key)?;
                let reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_key
                        .key(&lock_key)
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self.foreign(Some(&key)));
                }
                reply
            }
            Lookup::LockId(lock_id) => {
                let index_key = self.index_key(lock_id)?;
                let reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_id
                        .key(&index_key)
                        .arg(lock_id)
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self.foreign(None).with_lock_id(lock_id));
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
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn prefixes() {
        assert_eq!(validate_prefix("syncguard").unwrap(), "syncguard");
        assert_eq!(validate_prefix("app:").unwrap(), "app");
        assert_eq!(validate_prefix("").unwrap(), "");
        assert!(validate_prefix(&"p".repeat(948)).is_ok());
        assert!(validate_prefix(&"p".repeat(949)).is_err());
        for overlapping in ["id", "fence", "app:id", "app:fence", "app:fence:"] {
            assert!(validate_prefix(overlapping).is_err(), "{overlapping}");
        }
        assert!(validate_prefix("app:fences").is_ok());
        assert!(validate_prefix("a\nb").is_err());
    }

    #[test]
    fn index_keys_are_what_make_storage_key_gives() {
        for prefix in ["syncguard", "", &"p".repeat(948)] {
            let id = generate_lock_id();
            let expected = make_storage_key(
                prefix,
                &format!("id:{id}"),
                STORAGE_KEY_LIMIT,
                STORAGE_KEY_RESERVE,
            )
            .unwrap();
            let index_prefix = if prefix.is_empty() {
                "id:".to_owned()
            } else {
                format!("{prefix}:id:")
            };
            assert_eq!(format!("{index_prefix}{id}"), expected);
        }
    }

    #[test]
    fn building_needs_exactly_one_source() {
        assert_eq!(
            RedisBackend::builder().build().unwrap_err().code(),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            RedisBackend::builder()
                .url("redis://127.0.0.1/")
                .pool_size(0)
                .build()
                .unwrap_err()
                .code(),
            ErrorCode::InvalidArgument
        );
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
}
