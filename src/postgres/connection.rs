//! Connections: URL handling, TLS, and running a statement on a pooled client.
//!
//! syncguard's own connections are tokio-postgres clients, each driven by a private
//! single-threaded runtime, exactly as the blocking `postgres` client drives them, plus one
//! thing that client cannot do: a deadline on every call. A server that accepts bytes and
//! never answers (a hung host, a stalled proxy) ends the call with `NetworkTimeout`, where the
//! blocking client would wait forever.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::types::{ToSql, Type};
use postgres::{NoTls, Row, Socket, Statement};
use r2d2::ManageConnection;
use r2d2_postgres::PostgresConnectionManager;
use tokio::runtime::Runtime;
use tokio_postgres::Config;

use super::errors::{is_dead_connection, map_error};
use super::statements::Sql;
use crate::error::{ErrorCode, LockError, Result};
use crate::net::{Redactor, UrlParams, split_url, with_one_reconnect};

/// Where clients come from: a pool of any TLS flavour, behind one small interface.
pub(crate) trait Connections: Send + Sync {
    /// Runs one statement, with one reconnect if the pooled connection was dead.
    fn query(
        &self,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
        redactor: &Redactor,
    ) -> Result<Vec<Row>>;
    /// Runs DDL (several statements, one implicit transaction).
    fn batch(&self, sql: &str, redactor: &Redactor) -> Result<()>;
    fn state(&self) -> r2d2::State;
    fn max_size(&self) -> u32;
}

/// Why a call on a connection failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    /// No answer within the deadline. The connection is in an unknown state (a reply may still
    /// arrive) and is never used again.
    #[error("timed out after {0:?} waiting for PostgreSQL to answer")]
    TimedOut(Duration),
    #[error("could not start a connection's I/O runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl CallError {
    /// Whether the call may be made once more on a fresh connection (see
    /// [`is_dead_connection`]). Timeouts never qualify.
    fn is_dead_connection(&self) -> bool {
        matches!(self, CallError::Postgres(error) if is_dead_connection(error))
    }

    pub(crate) fn into_lock_error(self, redactor: &Redactor) -> LockError {
        match self {
            CallError::Postgres(error) => map_error(error, redactor),
            CallError::TimedOut(_) => LockError::new(
                ErrorCode::NetworkTimeout,
                format!("PostgreSQL did not answer in time: {self}"),
            ),
            CallError::Runtime(_) => {
                LockError::new(ErrorCode::ServiceUnavailable, self.to_string()).with_source(self)
            }
        }
    }
}

/// Runs `call` on a connection of `pool`, with one reconnect if it was dead.
fn on_pool<M: ManageConnection, T>(
    pool: &r2d2::Pool<M>,
    redactor: &Redactor,
    call: impl FnMut(&mut r2d2::PooledConnection<M>) -> std::result::Result<T, CallError>,
) -> Result<T> {
    with_one_reconnect(
        || {
            pool.get()
                .map_err(|e| checkout_error(pool.connection_timeout(), &e, redactor))
        },
        call,
        CallError::is_dead_connection,
        |error| error.into_lock_error(redactor),
    )
}

/// One of syncguard's own connections: a client, the runtime that drives it, and the
/// statements prepared on it (by [`Sql::slot`]): after the first use on a connection, a
/// statement is one Bind/Execute round trip with a cached plan.
pub(crate) struct OwnClient {
    // Declared before the runtime so it is dropped first: dropping the runtime then drops the
    // connection task, which closes the socket.
    client: tokio_postgres::Client,
    runtime: Runtime,
    prepared: Vec<Option<Statement>>,
    /// How long any one call may wait for its answer.
    answer_within: Duration,
    /// A call timed out: what the server will still send is unknown, so the pool drops it.
    broken: bool,
}

impl OwnClient {
    fn connect<T>(
        config: &Config,
        tls: T,
        answer_within: Duration,
    ) -> std::result::Result<Self, CallError>
    where
        T: MakeTlsConnect<Socket> + Send + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(CallError::Runtime)?;
        // The whole handshake (TCP, TLS, authentication) has one deadline; the TCP connect
        // alone also has `connect_timeout`.
        let (client, connection) = match runtime
            .block_on(async { tokio::time::timeout(answer_within, config.connect(tls)).await })
        {
            Ok(connected) => connected?,
            Err(_) => return Err(CallError::TimedOut(answer_within)),
        };
        // A current-thread runtime runs this task only while a call is inside `block_on`,
        // which is exactly when its replies are awaited.
        runtime.spawn(async move {
            if let Err(error) = connection.await {
                log::debug!("syncguard: PostgreSQL connection ended: {error}");
            }
        });
        Ok(OwnClient {
            client,
            runtime,
            prepared: Vec::new(),
            answer_within,
            broken: false,
        })
    }

    /// Runs `work` to completion or until the deadline, whichever comes first.
    fn within<T>(
        runtime: &Runtime,
        answer_within: Duration,
        broken: &mut bool,
        work: impl Future<Output = std::result::Result<T, postgres::Error>>,
    ) -> std::result::Result<T, CallError> {
        // The timer must be made inside the runtime it belongs to.
        match runtime.block_on(async { tokio::time::timeout(answer_within, work).await }) {
            Ok(result) => Ok(result?),
            Err(_) => {
                *broken = true;
                Err(CallError::TimedOut(answer_within))
            }
        }
    }

    fn query(
        &mut self,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<Row>, CallError> {
        let cached = self.prepared.get(sql.slot).cloned().flatten();
        let client = &self.client;
        let (statement, rows) =
            Self::within(&self.runtime, self.answer_within, &mut self.broken, async {
                let statement = match cached {
                    Some(statement) => statement,
                    None => client.prepare_typed(&sql.text, sql.types).await?,
                };
                let rows = client.query(&statement, params).await?;
                Ok((statement, rows))
            })?;
        if self.prepared.len() <= sql.slot {
            self.prepared.resize(sql.slot + 1, None);
        }
        self.prepared[sql.slot] = Some(statement);
        Ok(rows)
    }

    fn batch(&mut self, sql: &str) -> std::result::Result<(), CallError> {
        let client = &self.client;
        Self::within(
            &self.runtime,
            self.answer_within,
            &mut self.broken,
            client.batch_execute(sql),
        )
    }
}

/// Opens [`OwnClient`]s for syncguard's own pool.
pub(crate) struct OwnManager<T> {
    config: Config,
    tls: T,
    answer_within: Duration,
}

impl<T> ManageConnection for OwnManager<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send,
    T::Stream: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    type Connection = OwnClient;
    type Error = CallError;

    fn connect(&self) -> std::result::Result<OwnClient, CallError> {
        OwnClient::connect(&self.config, self.tls.clone(), self.answer_within)
    }

    fn is_valid(&self, conn: &mut OwnClient) -> std::result::Result<(), CallError> {
        conn.batch("")
    }

    fn has_broken(&self, conn: &mut OwnClient) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

impl<T> Connections for r2d2::Pool<OwnManager<T>>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send,
    T::Stream: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn query(
        &self,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
        redactor: &Redactor,
    ) -> Result<Vec<Row>> {
        on_pool(self, redactor, |conn| conn.query(sql, params))
    }

    fn batch(&self, sql: &str, redactor: &Redactor) -> Result<()> {
        on_pool(self, redactor, |conn| conn.batch(sql))
    }

    fn state(&self) -> r2d2::State {
        r2d2::Pool::state(self)
    }

    fn max_size(&self) -> u32 {
        r2d2::Pool::max_size(self)
    }
}

/// The application's pool: its connections have nowhere to keep prepared statements, so each
/// statement travels with its parameter types (`query_typed`: one round trip, planned anew).
/// Its clients are the blocking `postgres` ones, whose calls have no deadline of their own.
impl<T> Connections for r2d2::Pool<PostgresConnectionManager<T>>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send,
    T::Stream: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn query(
        &self,
        sql: &Sql,
        params: &[&(dyn ToSql + Sync)],
        redactor: &Redactor,
    ) -> Result<Vec<Row>> {
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
            .iter()
            .copied()
            .zip(sql.types.iter().cloned())
            .collect();
        on_pool(self, redactor, |client| {
            Ok(client.query_typed(&sql.text, &typed)?)
        })
    }

    fn batch(&self, sql: &str, redactor: &Redactor) -> Result<()> {
        on_pool(self, redactor, |client| Ok(client.batch_execute(sql)?))
    }

    fn state(&self) -> r2d2::State {
        r2d2::Pool::state(self)
    }

    fn max_size(&self) -> u32 {
        r2d2::Pool::max_size(self)
    }
}

/// The error for a checkout that timed out. r2d2 keeps only the text of the last connect
/// failure: with one, its kind decides (`AuthFailed`, `ServiceUnavailable`); without one every
/// connection was busy for the whole timeout, which is `RateLimited`.
fn checkout_error(timeout: Duration, error: &r2d2::Error, redactor: &Redactor) -> LockError {
    let text = redactor.clean(&error.to_string());
    let Some((_, cause)) = text.split_once(": ") else {
        return LockError::new(
            ErrorCode::RateLimited,
            format!("no pooled PostgreSQL connection became free within {timeout:?}"),
        );
    };
    let code = if [
        "28P01",
        "28000",
        "password authentication failed",
        "authentication",
    ]
    .iter()
    .any(|needle| cause.contains(needle))
    {
        ErrorCode::AuthFailed
    } else if cause.contains("timeout") || cause.contains("timed out") {
        ErrorCode::NetworkTimeout
    } else {
        ErrorCode::ServiceUnavailable
    };
    LockError::new(code, format!("could not connect to PostgreSQL: {cause}"))
}

/// A PostgreSQL URL taken apart.
pub(crate) struct ParsedUrl {
    pub config: Config,
    pub tls: bool,
    pub display: String,
    pub secrets: Vec<String>,
    pub lock_table: Option<String>,
    pub fence_table: Option<String>,
}

/// Parses `postgres://` / `postgresql://` URLs. syncguard's own options (`table`,
/// `fence_table`) and `sslmode` are taken out: `sslmode=require`, `verify-ca` or `verify-full`
/// mean TLS with full certificate verification; anything else, or none, means no TLS.
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    let split = split_url(
        url,
        "PostgreSQL",
        &UrlParams {
            ours: &["table", "fence_table", "sslmode"],
            // What tokio-postgres reads from a URL's query.
            client: &[
                "user",
                "password",
                "dbname",
                "options",
                "application_name",
                "host",
                "hostaddr",
                "port",
                "connect_timeout",
                "tcp_user_timeout",
                "keepalives",
                "keepalives_idle",
                "keepalives_interval",
                "keepalives_retries",
                "target_session_attrs",
                "channel_binding",
                "load_balance_hosts",
            ],
        },
    )?;
    let scheme = split.url.scheme();
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(LockError::invalid_argument(format!(
            "not a PostgreSQL URL (scheme {scheme:?}); expected postgres:// or postgresql://"
        )));
    }
    let redactor = Redactor::new(split.secrets.clone());
    let config: Config = split.url.as_str().parse().map_err(|e: postgres::Error| {
        LockError::invalid_argument(format!(
            "malformed PostgreSQL URL: {}",
            redactor.clean(&e.to_string())
        ))
    })?;
    let option = |name: &str| {
        split
            .options
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let tls = match option("sslmode").as_deref() {
        None | Some("disable" | "allow" | "prefer") => false,
        Some("require" | "verify-ca" | "verify-full") => true,
        Some(_) => {
            return Err(LockError::invalid_argument(
                "unknown sslmode: expected disable, allow, prefer, require, verify-ca or verify-full",
            ));
        }
    };
    Ok(ParsedUrl {
        config,
        tls,
        display: split.display,
        secrets: split.secrets,
        lock_table: option("table"),
        fence_table: option("fence_table"),
    })
}

/// rustls with the system's root certificates and the *ring* provider (chosen explicitly, so
/// the application's process-wide rustls setup is not touched).
pub(crate) fn rustls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A certificate the store cannot parse is skipped, as every TLS client does.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(LockError::new(
            ErrorCode::ServiceUnavailable,
            "no system root certificates found for PostgreSQL TLS",
        ));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| LockError::internal(format!("TLS setup failed: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// Settings syncguard applies to connections it opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub statement: Duration,
    pub checkout: Duration,
}

impl Timeouts {
    /// How long a call waits for its answer: the server's `statement_timeout`, then the connect
    /// timeout again as an allowance for the round trip, so that a statement the server
    /// cancels comes back as its own error and keeps the connection usable.
    pub(crate) fn answer_within(&self) -> Duration {
        self.statement.saturating_add(self.connect)
    }
}

/// Builds syncguard's own pool after checking, with one direct connection, that the server
/// answers and accepts the credentials (so those errors surface precisely, and at once).
pub(crate) fn own_pool(
    mut config: Config,
    tls: bool,
    timeouts: Timeouts,
    pool_size: u32,
    redactor: &Redactor,
) -> Result<Box<dyn Connections>> {
    config.connect_timeout(timeouts.connect);
    // Unacknowledged data for longer than a call may wait means the peer is gone.
    config.tcp_user_timeout(timeouts.answer_within());
    let statement_ms = timeouts.statement.as_millis().max(1);
    let options = match config.get_options() {
        Some(existing) => format!("{existing} -c statement_timeout={statement_ms}"),
        None => format!("-c statement_timeout={statement_ms}"),
    };
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("syncguard");
    }
    if tls {
        config.ssl_mode(tokio_postgres::config::SslMode::Require);
        Ok(Box::new(pool(
            config,
            rustls_connector()?,
            timeouts,
            pool_size,
            redactor,
        )?))
    } else {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        Ok(Box::new(pool(
            config, NoTls, timeouts, pool_size, redactor,
        )?))
    }
}

fn pool<T>(
    config: Config,
    tls: T,
    timeouts: Timeouts,
    pool_size: u32,
    redactor: &Redactor,
) -> Result<r2d2::Pool<OwnManager<T>>>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send,
    T::Stream: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let manager = OwnManager {
        config,
        tls,
        answer_within: timeouts.answer_within(),
    };
    // The probe: its connection is dropped, the pool opens its own when first needed.
    manager
        .connect()
        .map_err(|error| error.into_lock_error(redactor))?;
    Ok(r2d2::Pool::builder()
        .max_size(pool_size)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .connection_timeout(timeouts.checkout)
        .error_handler(Box::new(r2d2::NopErrorHandler))
        .build_unchecked(manager))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_our_options_apart() {
        let parsed = parse_url(
            "postgres://app:pw@db.internal:5433/locks?table=a_locks&fence_table=a_fences&sslmode=require&application_name=job",
        )
        .unwrap();
        assert!(parsed.tls);
        assert_eq!(parsed.lock_table.as_deref(), Some("a_locks"));
        assert_eq!(parsed.fence_table.as_deref(), Some("a_fences"));
        assert_eq!(parsed.config.get_dbname(), Some("locks"));
        assert_eq!(parsed.config.get_application_name(), Some("job"));
        assert!(!parsed.display.contains("pw"), "{}", parsed.display);
        assert!(!parse_url("postgresql://localhost/db").unwrap().tls);
        assert!(parse_url("postgres://localhost/db?sslmode=bogus").is_err());
        assert!(parse_url("mysql://localhost/db").is_err());
    }

    #[test]
    fn checkout_errors_are_classified_from_text() {
        let redactor = Redactor::default();
        let classify = |text: &str| {
            let e = checkout_error(Duration::from_secs(1), &fake_r2d2_error(text), &redactor);
            e.code()
        };
        assert_eq!(classify(""), ErrorCode::RateLimited);
        assert_eq!(
            classify("error connecting to server: Connection refused (os error 111)"),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            classify("db error: FATAL: password authentication failed for user \"x\""),
            ErrorCode::AuthFailed
        );
    }

    /// r2d2 errors can only be made by a pool: one whose connections always fail with `text`.
    fn fake_r2d2_error(text: &str) -> r2d2::Error {
        struct Failing(String);
        #[derive(Debug)]
        struct Failure(String);
        impl std::fmt::Display for Failure {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for Failure {}
        impl r2d2::ManageConnection for Failing {
            type Connection = ();
            type Error = Failure;
            fn connect(&self) -> std::result::Result<(), Failure> {
                if self.0.is_empty() {
                    Ok(())
                } else {
                    Err(Failure(self.0.clone()))
                }
            }
            fn is_valid(&self, _: &mut ()) -> std::result::Result<(), Failure> {
                Ok(())
            }
            fn has_broken(&self, _: &mut ()) -> bool {
                false
            }
        }
        let pool = r2d2::Pool::builder()
            .max_size(1)
            .min_idle(Some(0))
            .connection_timeout(Duration::from_millis(50))
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Failing(text.to_owned()));
        let _held = if text.is_empty() {
            pool.get().ok()
        } else {
            None
        };
        pool.get()
            .expect_err("the pool cannot hand out a connection")
    }
}
