//! Connections: the two kinds of pool, running one statement on a pooled connection, and the
//! listening connection. (What a URL says, and the TLS connector: [`config`](super::config).)
//!
//! Two kinds of pool stand behind one small interface, [`Connections`]:
//!
//! * syncguard's own ([`own_pool`]): tokio-postgres clients that the calling thread drives
//!   ([`client`](super::client)), with a deadline on every call. At the deadline the server is
//!   sent a cancel request (what its own `statement_timeout` would do) and the connection is
//!   dropped. The listening connection, which must be driven between calls, runs on the
//!   backend's [I/O thread](super::io).
//! * the application's r2d2 pool of blocking `postgres` clients ([`PostgresBuilder::pool`]).
//!   Those have no deadline of their own; called from a thread inside an async runtime, the work
//!   moves to a short-lived thread, because the blocking client would panic there.
//!
//! Either way, every statement travels with its parameter types as an *unnamed* statement:
//! Parse, Bind, Execute and Sync in one round trip, nothing left behind on the server. Named
//! prepared statements cached per client connection are unsafe behind a pooler in transaction
//! mode (PgBouncer, Supavisor, RDS Proxy): the next transaction may run on another server
//! connection, where the name is missing or names another client's statement. For the same
//! reason no startup parameter beyond user, database and `application_name` is sent.
//!
//! [`PostgresBuilder::pool`]: super::PostgresBuilder::pool

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use postgres::types::Type;
use postgres::{NoTls, Row};
use r2d2::ManageConnection;
use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres::Config;

use super::client::{CallError, OwnClient, Param, Timeouts, Tls, off_any_runtime, typed};
use super::config::rustls_connector;
use super::errors::{Site, is_dead_connection, map_error, unanswered};
use super::io::{Io, IoThread};
use super::statements::Sql;
use crate::error::{ErrorCode, LockError, Result};
use crate::net::{Redactor, with_one_reconnect};

/// Where clients come from: a pool of either kind, behind one small interface.
pub(crate) trait Connections: Send + Sync {
    /// Runs one statement, with one reconnect if the pooled connection was dead.
    fn query(&self, sql: &Sql, params: &[Param]) -> Result<Vec<Row>>;
    /// Runs DDL (several statements, one implicit transaction).
    fn batch(&self, sql: &str) -> Result<()>;
    /// `None` while being dropped.
    fn state(&self) -> Option<r2d2::State>;
    fn max_size(&self) -> u32;
    /// Listens on `channel` on a connection of its own, calling `on_notify` with each payload,
    /// until the returned guard is dropped. `Ok(None)` when notifications do not arrive: a
    /// transaction-mode pooler in between (found by a probe), or a pool of the application's.
    fn listen(&self, channel: &str, on_notify: OnNotify) -> Result<Option<Listening>> {
        let _ = (channel, on_notify);
        Ok(None)
    }
}

/// Called with the payload of each notification heard.
pub(crate) type OnNotify = Arc<dyn Fn(&str) + Send + Sync>;

/// A listening connection (once it is known to hear notifications); dropping it closes the
/// connection.
pub(crate) struct Listening {
    client: Arc<Mutex<Option<tokio_postgres::Client>>>,
}

impl Listening {
    /// Whether notifications reach this connection now: its probe came back, and it is open.
    pub(crate) fn hearing(&self) -> bool {
        (self.client.lock().unwrap_or_else(PoisonError::into_inner))
            .as_ref()
            .is_some_and(|client| !client.is_closed())
    }
}

/// How long a new listener waits for its own probe notification before concluding that
/// notifications do not reach it.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// Opens [`OwnClient`]s for syncguard's own pool, and remembers why the last attempt failed:
/// r2d2 reports a checkout that timed out with that error's text only.
pub(crate) struct OwnManager<T> {
    config: Config,
    tls: T,
    io: Io,
    timeouts: Timeouts,
    site: Site,
    last_failure: Arc<Mutex<Option<(ErrorCode, String)>>>,
}

impl<T: Tls> ManageConnection for OwnManager<T> {
    type Connection = OwnClient<T>;
    type Error = CallError;

    fn connect(&self) -> Result<OwnClient<T>, CallError> {
        let connected = OwnClient::connect(&self.io, &self.config, &self.tls, self.timeouts);
        let failure = connected.as_ref().err().map(|error| {
            let error = error.to_lock_error(&self.site);
            (error.code(), error.message().to_owned())
        });
        *self
            .last_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
        connected
    }

    fn is_valid(&self, conn: &mut OwnClient<T>) -> Result<(), CallError> {
        conn.batch("")
    }

    fn has_broken(&self, conn: &mut OwnClient<T>) -> bool {
        conn.has_broken()
    }
}

/// syncguard's own pool, and the I/O thread that drives its listening connection and sends cancel
/// requests (dropped after the pool).
struct OwnPool<T: ManageConnection> {
    pool: r2d2::Pool<T>,
    /// Opens the listening connection (the pool's manager cannot be reached through r2d2).
    listener: T,
    site: Site,
    last_failure: Arc<Mutex<Option<(ErrorCode, String)>>>,
    _io: IoThread,
}

impl<T: Tls> Connections for OwnPool<OwnManager<T>> {
    fn query(&self, sql: &Sql, params: &[Param]) -> Result<Vec<Row>> {
        self.on_pool(|conn| conn.query(sql, params))
    }

    fn listen(&self, channel: &str, on_notify: OnNotify) -> Result<Option<Listening>> {
        let manager = &self.listener;
        let (config, tls) = (manager.config.clone(), manager.tls.clone());
        let listen = format!("LISTEN \"{channel}\"");
        let channel = channel.to_owned();
        let handshake = manager.timeouts.handshake();
        let site = self.site.clone();
        let slot: Arc<Mutex<Option<tokio_postgres::Client>>> = Arc::default();
        let task_slot = Arc::clone(&slot);
        // In the background: the first waiter must not wait for the probe.
        manager.io.spawn_detached(async move {
            let connected = tokio::time::timeout(handshake, config.connect(tls.clone())).await;
            let (client, mut connection) = match connected {
                Ok(Ok(connected)) => connected,
                Ok(Err(error)) => {
                    log::info!(
                        "syncguard: cannot listen for releases, waiters poll: {}",
                        map_error(&error, &site)
                    );
                    return;
                }
                Err(_) => {
                    log::info!(
                        "syncguard: cannot listen for releases (connecting timed out), waiters poll"
                    );
                    return;
                }
            };
            let probe = format!("syncguard:probe:{}", crate::lock_id::generate_lock_id());
            let (heard, probe_heard) = tokio::sync::oneshot::channel::<()>();
            let mut heard = Some(heard);
            let expected = probe.clone();
            tokio::spawn(async move {
                loop {
                    match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                        Some(Ok(tokio_postgres::AsyncMessage::Notification(notification))) => {
                            if notification.payload() == expected {
                                if let Some(heard) = heard.take() {
                                    let _ = heard.send(());
                                }
                            } else {
                                on_notify(notification.payload());
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(error)) => {
                            log::debug!("syncguard: PostgreSQL listener ended: {error}");
                            return;
                        }
                        None => return,
                    }
                }
            });
            // Behind a transaction pooler the LISTEN ran on some server connection that other
            // clients now use: see whether another client's notification comes back here at
            // all. Sent from a connection of its own: the listener's own NOTIFY would come back
            // to it whenever the pooler gave it the server connection of its LISTEN again,
            // though no other client's ever would.
            let probed = async {
                client.batch_execute(&listen).await?;
                let (notifier, notifier_connection) = config.connect(tls).await?;
                let driven = tokio::spawn(notifier_connection);
                // Unnamed, as every statement here: behind a pooler a named one is unsafe.
                notifier
                    .query_typed(
                        "SELECT pg_notify($1, $2)",
                        &[(&channel, Type::TEXT), (&probe, Type::TEXT)],
                    )
                    .await?;
                drop(notifier);
                let _ = driven.await;
                Ok::<_, tokio_postgres::Error>(())
            };
            let answered = tokio::time::timeout(handshake, probed).await;
            let came_back = tokio::time::timeout(PROBE_WAIT, probe_heard).await;
            match (answered, came_back) {
                (Ok(Ok(())), Ok(Ok(()))) => {
                    *task_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(client);
                }
                _ => log::info!(
                    "syncguard: {}",
                    site.message(
                        "notifications do not come back (a transaction-mode pooler?): waiters poll"
                    )
                ),
            }
        });
        Ok(Some(Listening { client: slot }))
    }

    fn batch(&self, sql: &str) -> Result<()> {
        self.on_pool(|conn| conn.batch(sql))
    }

    fn state(&self) -> Option<r2d2::State> {
        Some(self.pool.state())
    }

    fn max_size(&self) -> u32 {
        self.pool.max_size()
    }
}

impl<T: Tls> OwnPool<OwnManager<T>> {
    /// Runs `call` on a pooled connection, with one reconnect if it was dead.
    fn on_pool<R>(
        &self,
        mut call: impl FnMut(&mut r2d2::PooledConnection<OwnManager<T>>) -> Result<R, CallError>,
    ) -> Result<R> {
        // Whether a call died with its connection: it may have been carried out, so a failure
        // to get a connection for the repeat leaves it unanswered.
        let died = std::cell::Cell::new(false);
        with_one_reconnect(
            || {
                self.pool.get().map_err(|_| {
                    let failure = self
                        .last_failure
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let error = match failure {
                        // Connecting is what failed: say why.
                        Some((code, message)) => LockError::new(code, message),
                        None => all_busy(&self.site, self.pool.connection_timeout()),
                    };
                    if died.get() { unanswered(error) } else { error }
                })
            },
            |conn| {
                let result = call(conn);
                died.set(matches!(&result, Err(error) if error.is_dead_connection()));
                result
            },
            CallError::is_dead_connection,
            |error| error.to_lock_error(&self.site),
        )
    }
}

/// The error for a checkout that found every connection busy for the whole pool timeout.
fn all_busy(site: &Site, timeout: Duration) -> LockError {
    LockError::new(
        ErrorCode::RateLimited,
        site.message(format!(
            "no pooled connection became free within {timeout:?}"
        )),
    )
}

/// The application's pool of blocking clients.
///
/// The blocking client runs a runtime of its own inside each call and inside its `Drop`, which
/// panics on a thread that is inside another runtime; there, both move to a short-lived thread.
pub(crate) struct AppPool<M: ManageConnection> {
    // `None` only while being dropped.
    pool: Option<r2d2::Pool<M>>,
}

impl<T: Tls> AppPool<PostgresConnectionManager<T>> {
    pub(crate) fn new(pool: r2d2::Pool<PostgresConnectionManager<T>>) -> Self {
        AppPool { pool: Some(pool) }
    }

    /// Runs `call` on a pooled client, with one reconnect if it was dead.
    fn on_pool<R: Send>(
        &self,
        call: impl FnMut(
            &mut r2d2::PooledConnection<PostgresConnectionManager<T>>,
        ) -> Result<R, postgres::Error>
        + Send,
    ) -> Result<R> {
        let Some(pool) = &self.pool else {
            return Err(LockError::internal("the application's pool is gone"));
        };
        let site = Site::unknown();
        let mut call = call;
        off_any_runtime(|| {
            // As for syncguard's own pool: a call that died with its connection may have been
            // carried out.
            let died = std::cell::Cell::new(false);
            with_one_reconnect(
                || {
                    pool.get().map_err(|e| {
                        let error = checkout_error(pool.connection_timeout(), &e);
                        if died.get() { unanswered(error) } else { error }
                    })
                },
                |client| {
                    let result = call(client);
                    died.set(matches!(&result, Err(error) if is_dead_connection(error)));
                    result
                },
                is_dead_connection,
                |error| map_error(&error, &site),
            )
        })
        .unwrap_or_else(|| {
            Err(LockError::internal(
                "the PostgreSQL client panicked while running a statement",
            ))
        })
    }
}

impl<T: Tls> Connections for AppPool<PostgresConnectionManager<T>> {
    fn query(&self, sql: &Sql, params: &[Param]) -> Result<Vec<Row>> {
        let params = typed(sql, params);
        self.on_pool(|client| client.query_typed(&sql.text, &params))
    }

    fn batch(&self, sql: &str) -> Result<()> {
        self.on_pool(|client| client.batch_execute(sql))
    }

    fn state(&self) -> Option<r2d2::State> {
        self.pool.as_ref().map(r2d2::Pool::state)
    }

    fn max_size(&self) -> u32 {
        self.pool.as_ref().map_or(0, r2d2::Pool::max_size)
    }
}

impl<M: ManageConnection> Drop for AppPool<M> {
    fn drop(&mut self) {
        // If ours is the pool's last handle, its clients close now.
        let pool = self.pool.take();
        let _ = off_any_runtime(move || drop(pool));
    }
}

/// The error for a checkout from the application's pool that timed out. r2d2 keeps only the
/// text of the last connect failure: with one, its kind decides (`AuthFailed`,
/// `ServiceUnavailable`); without one every connection was busy for the whole timeout, which is
/// `RateLimited`.
fn checkout_error(timeout: Duration, error: &r2d2::Error) -> LockError {
    let text = error.to_string();
    let Some((_, cause)) = text.split_once(": ") else {
        return all_busy(&Site::unknown(), timeout);
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
    LockError::new(
        code,
        Site::unknown().message(format!("could not connect: {cause}")),
    )
}

/// Builds syncguard's own pool after checking, with one direct connection, that the server
/// answers and accepts the credentials (so those errors surface precisely, and at once).
///
/// No `options` startup parameter (poolers refuse it) and so no server-side `statement_timeout`:
/// the deadline of each statement is kept by the client.
pub(crate) fn own_pool(
    mut config: Config,
    tls: bool,
    ca_file: Option<&Path>,
    timeouts: Timeouts,
    pool_size: u32,
    redactor: Redactor,
) -> Result<Box<dyn Connections>> {
    config.connect_timeout(timeouts.connect);
    // Unacknowledged data for longer than a call may wait means the peer is gone.
    config.tcp_user_timeout(timeouts.statement);
    if config.get_application_name().is_none() {
        config.application_name("syncguard");
    }
    let site = Site::of(&config, redactor);
    if tls {
        config.ssl_mode(tokio_postgres::config::SslMode::Require);
        Ok(Box::new(pool(
            config,
            rustls_connector(ca_file)?,
            timeouts,
            pool_size,
            site,
        )?))
    } else {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        Ok(Box::new(pool(config, NoTls, timeouts, pool_size, site)?))
    }
}

fn pool<T>(
    config: Config,
    tls: T,
    timeouts: Timeouts,
    pool_size: u32,
    site: Site,
) -> Result<OwnPool<OwnManager<T>>>
where
    T: Tls,
{
    let io = IoThread::start().map_err(|e| {
        LockError::new(
            ErrorCode::ServiceUnavailable,
            format!("could not start the PostgreSQL I/O thread: {e}"),
        )
    })?;
    let last_failure = Arc::new(Mutex::new(None));
    let manager = OwnManager {
        config,
        tls,
        io: io.io().clone(),
        timeouts,
        site: site.clone(),
        last_failure: Arc::clone(&last_failure),
    };
    let listener = OwnManager {
        config: manager.config.clone(),
        tls: manager.tls.clone(),
        io: manager.io.clone(),
        timeouts,
        site: site.clone(),
        last_failure: Arc::new(Mutex::new(None)),
    };
    // The probe: its connection is dropped, the pool opens its own when first needed.
    manager
        .connect()
        .map_err(|error| error.to_lock_error(&site))?;
    let pool = r2d2::Pool::builder()
        .max_size(pool_size)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .connection_timeout(timeouts.checkout)
        .error_handler(Box::new(r2d2::NopErrorHandler))
        .build_unchecked(manager);
    Ok(OwnPool {
        pool,
        listener,
        site,
        last_failure,
        _io: io,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkout_errors_are_classified_from_text() {
        let classify = |text: &str| {
            let e = checkout_error(Duration::from_secs(1), &fake_r2d2_error(text));
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
