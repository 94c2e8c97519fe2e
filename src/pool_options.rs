//! The options every pooled backend's builder shares (Redis and PostgreSQL), with their one set
//! of defaults, and the checks each `build()` makes of them before any I/O.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{LockError, Result};

/// What the Redis and PostgreSQL builders both take. Each builder's public setters write these
/// fields; backend-specific timeouts stay in the builder.
#[derive(Clone, Debug)]
pub(crate) struct PoolOptions {
    /// Whether `is_locked` may delete a lock well past its expiry.
    pub cleanup_in_is_locked: bool,
    /// The most connections syncguard's own pool keeps open.
    pub pool_size: u32,
    /// The deadline for opening a connection.
    pub connect_timeout: Duration,
    /// How long an operation waits for a pooled connection.
    pub pool_timeout: Duration,
    /// CA certificates to trust besides the system's roots (wins over the URL's).
    pub tls_ca_file: Option<PathBuf>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            cleanup_in_is_locked: false,
            pool_size: 8,
            connect_timeout: Duration::from_secs(2),
            pool_timeout: Duration::from_secs(3),
            tls_ca_file: None,
        }
    }
}

/// Where a pooled backend gets its connections: a URL to open its own pool from, or the
/// application's pool.
pub(crate) enum Source<P> {
    Url(String),
    Pool(P),
}

impl PoolOptions {
    /// Checks what every pooled backend's builder takes: timeouts above zero (the shared ones
    /// and the backend's own `timeouts`, by name), at least one connection, exactly one of URL
    /// and pool, and no CA file with the application's pool.
    pub fn source<P>(
        &self,
        backend: &str,
        url: Option<String>,
        pool: Option<P>,
        timeouts: &[(&str, Duration)],
    ) -> Result<Source<P>> {
        let connect = [("connect_timeout", self.connect_timeout)];
        let checkout = [("pool_timeout", self.pool_timeout)];
        let mut all = connect.iter().chain(timeouts).chain(&checkout);
        if let Some((name, _)) = all.find(|(_, value)| value.is_zero()) {
            return Err(LockError::invalid_argument(format!(
                "{name} must be above zero"
            )));
        }
        if self.pool_size == 0 {
            return Err(LockError::invalid_argument("pool_size must be at least 1"));
        }
        match (url, pool) {
            (Some(url), None) => Ok(Source::Url(url)),
            (None, Some(_)) if self.tls_ca_file.is_some() => Err(LockError::invalid_argument(
                "tls_ca_file applies to connections syncguard opens from a URL; the \
                 application's pool has TLS settings of its own",
            )),
            (None, Some(pool)) => Ok(Source::Pool(pool)),
            (Some(_), Some(_)) => Err(LockError::invalid_argument(format!(
                "give the {backend} backend a URL or a pool, not both"
            ))),
            (None, None) => Err(LockError::invalid_argument(format!(
                "the {backend} backend needs a URL or a pool"
            ))),
        }
    }

    /// The CA file to use: the builder's wins over the URL's, as for every option.
    pub fn ca_file<'a>(&'a self, from_url: Option<&'a Path>) -> Option<&'a Path> {
        self.tls_ca_file.as_deref().or(from_url)
    }
}
