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

/// The public setters of [`PoolOptions`], written once for both builders: expanded inside a
/// builder's `impl`, whose `options` field holds them and whose `pool` setter takes the
/// application's pool. `$url_ca_parameter` is the URL parameter that names a CA file too
/// (`sslrootcert` for PostgreSQL, `tls_ca_file` for Redis).
macro_rules! pool_option_setters {
    ($url_ca_parameter:literal) => {
        /// Lets `is_locked` delete the key's lock when it is more than
        /// [`CLEANUP_GUARD_MS`](super::CLEANUP_GUARD_MS) past expiry; it never touches fence
        /// counters. Defaults to off: `is_locked` only reads.
        pub fn cleanup_in_is_locked(mut self, enabled: bool) -> Self {
            self.options.cleanup_in_is_locked = enabled;
            self
        }

        /// The most connections kept open. Defaults to 8. Ignored with [`pool`](Self::pool).
        pub fn pool_size(mut self, size: u32) -> Self {
            self.options.pool_size = size;
            self
        }

        /// The deadline for opening a connection. Defaults to 2 s.
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.options.connect_timeout = timeout;
            self
        }

        /// How long an operation waits for a pooled connection. Defaults to 3 s. Ignored with
        /// [`pool`](Self::pool), whose own setting applies.
        pub fn pool_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.options.pool_timeout = timeout;
            self
        }

        #[doc = concat!(
            "A PEM file of CA certificates to trust besides the system's roots, for TLS \
             connections (a private CA, or a TLS-inspecting proxy's; see [TLS](super#tls)); the \
             URL's `?", $url_ca_parameter, "=` does the same, and this option wins. Used only \
             when the URL asks for TLS. A file that cannot be read or holds no certificate \
             fails [`build`](Self::build) with `InvalidArgument` naming the path. Defaults to \
             none; refused with [`pool`](Self::pool), whose connections have TLS settings of \
             their own."
        )]
        pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
            self.options.tls_ca_file = Some(path.into());
            self
        }
    };
}
pub(crate) use pool_option_setters;

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
