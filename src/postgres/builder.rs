//! [`PostgresBuilder`]: the options of a [`PostgresBackend`], checked before anything
//! connects, and `build`, which picks the pool (syncguard's own from a URL, or the
//! application's) and the table names.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use postgres::tls::{MakeTlsConnect, TlsConnect};
use r2d2_postgres::PostgresConnectionManager;

use super::client::Timeouts;
use super::config::parse_url;
use super::connection::{AppPool, Connections, own_pool};
use super::driver::PostgresBackend;
use super::statements::Statements;
use super::tables::TableNames;
use crate::error::Result;
use crate::net::Redactor;
use crate::pool_options::{PoolOptions, Source};

/// Options for a [`PostgresBackend`]. Defaults: tables `syncguard_locks` and
/// `syncguard_fence_counters`, 8 pooled connections, connect timeout 2 s, statement timeout
/// 5 s, pool checkout timeout 3 s, no cleanup in `is_locked`.
#[must_use = "call build() to get a backend"]
pub struct PostgresBuilder {
    url: Option<String>,
    pool: Option<Box<dyn Connections>>,
    lock_table: Option<String>,
    fence_table: Option<String>,
    options: PoolOptions,
    statement_timeout: Duration,
}

impl Default for PostgresBuilder {
    fn default() -> Self {
        PostgresBuilder {
            url: None,
            pool: None,
            lock_table: None,
            fence_table: None,
            options: PoolOptions::default(),
            statement_timeout: Duration::from_secs(5),
        }
    }
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
}

impl PostgresBuilder {
    /// The server: `postgres://[user[:password]@]host[:port]/database[?…]` (or `postgresql://`).
    /// syncguard reads `table=` and `fence_table=`; `sslmode=require` (or `verify-ca`,
    /// `verify-full`) turns on TLS, always with full verification (chain and host name) against
    /// the system's root certificates plus those of `sslrootcert=PATH` (see [TLS](super#tls));
    /// the client's libpq-style parameters pass through (`application_name`, `connect_timeout`,
    /// `keepalives`, `target_session_attrs`, …; `options` only without a pooler, which refuses
    /// it). Any other parameter is refused with `InvalidArgument`, by name, before connecting.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Use the application's r2d2 pool instead of a URL (any TLS connector). Its own timeouts
    /// apply; turn its `test_on_check_out` off, or every operation pays an extra round trip.
    /// Statements are unnamed, so the pool may point at a transaction-mode pooler.
    ///
    /// The blocking `postgres` client behind such a pool has **no deadline** on its calls: a
    /// server that accepts a connection and never answers blocks them (and a heartbeat renewal
    /// with them) until TCP gives up. Set `tcp_user_timeout` and keepalives on its `Config`, or
    /// give a [`url`](PostgresBuilder::url): syncguard's own connections time out every call.
    /// Called from a thread inside an async runtime, where that client would panic, each call
    /// runs on a short-lived thread of its own (as does closing the pool's clients, when the
    /// backend holds the pool's last handle).
    pub fn pool<T>(mut self, pool: r2d2::Pool<PostgresConnectionManager<T>>) -> Self
    where
        T: MakeTlsConnect<postgres::Socket> + Clone + Send + Sync + 'static,
        T::TlsConnect: Send,
        T::Stream: Send,
        <T::TlsConnect as TlsConnect<postgres::Socket>>::Future: Send,
    {
        self.pool = Some(Box::new(AppPool::new(pool)));
        self
    }

    /// The lock table (default `syncguard_locks`; a lowercase SQL identifier).
    pub fn table_name(mut self, name: impl Into<String>) -> Self {
        self.lock_table = Some(name.into());
        self
    }

    /// The fence counter table (default `syncguard_fence_counters`; must differ from the lock
    /// table).
    pub fn fence_table_name(mut self, name: impl Into<String>) -> Self {
        self.fence_table = Some(name.into());
        self
    }

    crate::pool_options::pool_option_setters!("sslrootcert");

    /// How long each statement may take, measured by syncguard: a server that has not answered
    /// by then fails the call with `NetworkTimeout`, is sent a cancel request, and the
    /// connection is dropped. No server-side `statement_timeout` is set (see the [module
    /// docs](super#deadlines-and-statement_timeout)). Opening a connection may take the connect
    /// timeout plus this. Defaults to 5 s.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Validates the options and, for a URL, opens one connection to check the server and the
    /// credentials. Does not create tables: see [`PostgresBackend::setup_schema`].
    pub fn build(self) -> Result<PostgresBackend> {
        let source = self.options.source(
            "PostgreSQL",
            self.url,
            self.pool,
            &[("statement_timeout", self.statement_timeout)],
        )?;
        let timeouts = Timeouts {
            connect: self.options.connect_timeout,
            statement: self.statement_timeout,
            checkout: self.options.pool_timeout,
        };
        // Builder options win over URL options, which win over the defaults. Checked before
        // anything connects.
        let tables = |url_lock: Option<String>, url_fence: Option<String>| {
            let defaults = TableNames::default();
            TableNames::new(
                &self
                    .lock_table
                    .or(url_lock)
                    .unwrap_or_else(|| defaults.lock_table().to_owned()),
                &self
                    .fence_table
                    .or(url_fence)
                    .unwrap_or_else(|| defaults.fence_table().to_owned()),
            )
        };
        let (tables, connections, display) = match source {
            Source::Url(url) => {
                let parsed = parse_url(&url)?;
                let ca_file = self.options.ca_file(parsed.ca_file.as_deref());
                let tables = tables(parsed.lock_table, parsed.fence_table)?;
                let mut secrets = parsed.secrets;
                if let Some(password) = parsed.config.get_password() {
                    secrets.push(String::from_utf8_lossy(password).into_owned());
                }
                let redactor = Redactor::new(secrets);
                let connections = own_pool(
                    parsed.config,
                    parsed.tls,
                    ca_file,
                    timeouts,
                    self.options.pool_size,
                    redactor,
                )?;
                (tables, connections, parsed.display)
            }
            Source::Pool(pool) => (tables(None, None)?, pool, "<application pool>".to_owned()),
        };
        Ok(PostgresBackend {
            connections,
            statements: Statements::new(&tables),
            tables,
            cleanup_in_is_locked: self.options.cleanup_in_is_locked,
            inline: AtomicBool::new(false),
            display,
        })
    }
}

impl fmt::Debug for PostgresBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self
            .url
            .as_deref()
            .map(|url| parse_url(url).map_or_else(|_| "<malformed>".to_owned(), |p| p.display));
        f.debug_struct("PostgresBuilder")
            .field("url", &url)
            .field("pool", &self.pool.as_ref().map(|_| "<application pool>"))
            .field("lock_table", &self.lock_table)
            .field("fence_table", &self.fence_table)
            .field("options", &self.options)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn construction_is_validated_before_connecting() {
        let unreachable = "postgres://u:hunter2@127.0.0.1:1/db";
        for builder in [
            PostgresBackend::builder(),
            PostgresBackend::builder().url(unreachable).pool_size(0),
            PostgresBackend::builder()
                .url(unreachable)
                .table_name("x; DROP TABLE y"),
            PostgresBackend::builder()
                .url(unreachable)
                .table_name("same")
                .fence_table_name("same"),
            PostgresBackend::builder()
                .url(format!("{unreachable}?table=Robert%27)%3B"))
                .statement_timeout(Duration::from_secs(1)),
        ] {
            let err = builder.build().unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(!err.to_string().contains("hunter2"));
        }
    }

    #[test]
    fn builder_debug_hides_the_password() {
        let shown = format!(
            "{:?}",
            PostgresBackend::builder().url("postgres://u:hunter2@h/db")
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    /// `sslrootcert` / `tls_ca_file`: only with TLS, only for connections syncguard opens, and
    /// a file that cannot be read is refused naming its path — all before any I/O.
    #[test]
    fn the_ca_file_needs_tls_and_a_readable_file() {
        let missing = std::env::temp_dir().join("syncguard-no-such-ca.pem");
        let unreadable = format!(
            "the CA file {} cannot be read: No such file or directory (os error 2)",
            missing.display()
        );
        let url = "postgres://u:hunter2@127.0.0.1:1/db";
        let pool = r2d2::Pool::builder().build_unchecked(PostgresConnectionManager::new(
            url.parse().unwrap(),
            postgres::NoTls,
        ));
        let rows: Vec<(PostgresBuilder, &str)> = vec![
            (
                PostgresBackend::builder().url(format!("{url}?sslrootcert=/ca.pem")),
                "the PostgreSQL URL gives sslrootcert but no TLS: add sslmode=verify-full",
            ),
            (
                PostgresBackend::builder().url(format!(
                    "{url}?sslmode=verify-full&sslrootcert={}",
                    missing.display()
                )),
                &unreadable,
            ),
            (
                PostgresBackend::builder()
                    .url(format!("{url}?sslmode=require"))
                    .tls_ca_file(&missing),
                &unreadable,
            ),
            (
                PostgresBackend::builder().pool(pool).tls_ca_file(&missing),
                "tls_ca_file applies to connections syncguard opens from a URL; the \
                 application's pool has TLS settings of its own",
            ),
        ];
        for (builder, message) in rows {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }
}
