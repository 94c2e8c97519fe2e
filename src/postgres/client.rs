//! One of syncguard's own connections: a tokio-postgres client whose connection the calling
//! thread drives, with a deadline on every call.
//!
//! Each connection has a small runtime of its own (one thread's worth: no threads of its own),
//! and a call blocks the calling thread on it, driving the connection and the statement together,
//! as the blocking `postgres` client does. Handing every statement to an I/O thread and the
//! answer back instead costs two thread wake-ups per call, a fifth of a lock cycle on a loopback
//! server and more on a loaded machine (docs/benchmarks.md). Unlike the blocking client, every
//! call here has a deadline; at the deadline the server is sent a cancel request and the
//! connection is never used again.
//!
//! A thread inside an async runtime cannot block on another runtime (`block_on` panics there),
//! so from such a thread a call moves to a short-lived thread of its own, which blocks instead
//! ([`off_any_runtime`]). Closing a connection never blocks, so it may happen on any thread.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::types::{ToSql, Type};
use postgres::{Row, Socket};
use tokio::runtime::{Builder, Runtime};
use tokio_postgres::{AsyncMessage, Config, Connection};

use super::errors::{Site, is_dead_connection, map_error, unanswered};
use super::io::Io;
use super::statements::Sql;
use crate::error::{ErrorCode, LockError};

/// A statement parameter, owned: a call may move to another thread (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Text(String),
    /// A text that may be NULL.
    OptionalText(Option<String>),
    Int8(i64),
    /// A number that may be NULL.
    OptionalInt8(Option<i64>),
    TextArray(Vec<String>),
    Int8Array(Vec<i64>),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Text(text) => text,
            Param::OptionalText(text) => text,
            Param::Int8(number) => number,
            Param::OptionalInt8(number) => number,
            Param::TextArray(texts) => texts,
            Param::Int8Array(numbers) => numbers,
        }
    }
}

impl From<&str> for Param {
    fn from(text: &str) -> Param {
        Param::Text(text.to_owned())
    }
}

impl From<Option<&str>> for Param {
    fn from(text: Option<&str>) -> Param {
        Param::OptionalText(text.map(str::to_owned))
    }
}

impl From<i64> for Param {
    fn from(number: i64) -> Param {
        Param::Int8(number)
    }
}

impl From<Option<i64>> for Param {
    fn from(number: Option<i64>) -> Param {
        Param::OptionalInt8(number)
    }
}

impl From<Vec<String>> for Param {
    fn from(texts: Vec<String>) -> Param {
        Param::TextArray(texts)
    }
}

impl From<Vec<i64>> for Param {
    fn from(numbers: Vec<i64>) -> Param {
        Param::Int8Array(numbers)
    }
}

/// The statement's parameters with the types it declares.
pub(crate) fn typed<'a>(sql: &Sql, params: &'a [Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(Param::as_sql)
        .zip(sql.types.iter().cloned())
        .collect()
}

/// A TLS connector (or `NoTls`) whose connections syncguard can drive or, for the application's
/// pool, the blocking client can: what [`PostgresBuilder::pool`] asks of its connector, in one
/// name.
///
/// [`PostgresBuilder::pool`]: super::PostgresBuilder::pool
pub(crate) trait Tls:
    MakeTlsConnect<Socket, Stream: Send, TlsConnect: Send + TlsConnect<Socket, Future: Send>>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> Tls for T where
    T: MakeTlsConnect<Socket, Stream: Send, TlsConnect: Send + TlsConnect<Socket, Future: Send>>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Settings syncguard applies to connections it opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Opening a TCP connection.
    pub connect: Duration,
    /// Each statement, measured by the client.
    pub statement: Duration,
    /// Waiting for a pooled connection.
    pub checkout: Duration,
}

impl Timeouts {
    /// The whole handshake: TCP, TLS and authentication.
    pub(crate) fn handshake(&self) -> Duration {
        self.connect.saturating_add(self.statement)
    }
}

/// Why a call on one of syncguard's own connections failed.
#[derive(Debug)]
pub(crate) enum CallError {
    Postgres(tokio_postgres::Error),
    /// The handshake (TCP, TLS, authentication) did not finish within its deadline.
    HandshakeTimedOut(Duration),
    /// A statement had no answer within the deadline. The connection is in an unknown state (a
    /// reply may still arrive) and is never used again.
    TimedOut(Duration),
    /// The connection's runtime could not be made (the process is out of file descriptors).
    Runtime(std::io::Error),
    /// The client panicked mid-call; whether the statement ran is unknown.
    Panicked,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Postgres(error) => error.fmt(f),
            CallError::HandshakeTimedOut(after) => {
                write!(f, "could not connect: no answer within {after:?}")
            }
            CallError::TimedOut(after) => write!(
                f,
                "no answer within {after:?} (statement_timeout): the server was asked to cancel \
                 the statement and the connection was dropped"
            ),
            CallError::Runtime(error) => write!(f, "could not set up a connection: {error}"),
            CallError::Panicked => f.write_str("the PostgreSQL client panicked during the call"),
        }
    }
}

impl std::error::Error for CallError {
    /// A PostgreSQL error stands for itself (its message is this one's), so its own cause
    /// comes next.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Postgres(error) => error.source(),
            CallError::Runtime(error) => Some(error),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for CallError {
    fn from(error: tokio_postgres::Error) -> CallError {
        CallError::Postgres(error)
    }
}

impl CallError {
    /// Whether the call may be made once more on a fresh connection (see
    /// [`is_dead_connection`]). Timeouts never qualify.
    pub(crate) fn is_dead_connection(&self) -> bool {
        matches!(self, CallError::Postgres(error) if is_dead_connection(error))
    }

    pub(crate) fn to_lock_error(&self, site: &Site) -> LockError {
        let code = match self {
            CallError::Postgres(error) => return map_error(error, site),
            CallError::HandshakeTimedOut(_) => ErrorCode::NetworkTimeout,
            CallError::Runtime(_) => ErrorCode::ServiceUnavailable,
            // Sent, and no answer within the deadline (or none that could be read).
            CallError::TimedOut(_) => {
                return unanswered(LockError::new(
                    ErrorCode::NetworkTimeout,
                    site.message(self),
                ));
            }
            CallError::Panicked => {
                return unanswered(LockError::new(ErrorCode::Internal, site.message(self)));
            }
        };
        LockError::new(code, site.message(self))
    }
}

/// One of syncguard's own connections.
pub(crate) struct OwnClient<T: Tls> {
    client: tokio_postgres::Client,
    /// `None` once it has ended (closed by the server, or failed): the client then answers
    /// every call "closed", which the pool takes for a dead connection.
    connection: Option<Connection<Socket, T::Stream>>,
    /// `None` only while being dropped.
    runtime: Option<Runtime>,
    /// The backend's I/O thread, which sends cancel requests.
    io: Io,
    tls: T,
    timeouts: Timeouts,
    /// A call timed out or panicked: what the server will still send is unknown, so the pool
    /// drops the connection.
    broken: bool,
}

impl<T: Tls> OwnClient<T> {
    pub(crate) fn connect(
        io: &Io,
        config: &Config,
        tls: &T,
        timeouts: Timeouts,
    ) -> Result<Self, CallError> {
        let handshake = timeouts.handshake();
        off_any_runtime(|| {
            let runtime = Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(CallError::Runtime)?;
            let connected = runtime.block_on(async {
                tokio::time::timeout(handshake, config.connect(tls.clone())).await
            });
            let (client, connection) = match connected {
                Ok(connected) => connected?,
                Err(_) => return Err(CallError::HandshakeTimedOut(handshake)),
            };
            Ok(OwnClient {
                client,
                connection: Some(connection),
                runtime: Some(runtime),
                io: io.clone(),
                tls: tls.clone(),
                timeouts,
                broken: false,
            })
        })
        .unwrap_or(Err(CallError::Panicked))
    }

    /// Whether the pool must drop this connection.
    pub(crate) fn has_broken(&self) -> bool {
        self.broken || self.client.is_closed()
    }

    pub(crate) fn query(&mut self, sql: &Sql, params: &[Param]) -> Result<Vec<Row>, CallError> {
        self.call(|client, drive| drive.run(client.query_typed(&sql.text, &typed(sql, params))))
    }

    pub(crate) fn batch(&mut self, sql: &str) -> Result<(), CallError> {
        self.call(|client, drive| drive.run(client.batch_execute(sql)))
    }

    /// Makes one call: `work` is given the client and the means to drive a future of it to its
    /// end or the statement deadline (see [`Drive`]), on this thread or, inside an async
    /// runtime, on a short-lived one.
    fn call<R, W>(&mut self, work: W) -> Result<R, CallError>
    where
        R: Send,
        W: FnOnce(&tokio_postgres::Client, Drive<'_, T::Stream>) -> Result<R, CallError> + Send,
    {
        let deadline = self.timeouts.statement;
        let result = off_any_runtime(|| {
            let OwnClient {
                client,
                connection,
                runtime,
                ..
            } = &mut *self;
            work(
                client,
                Drive {
                    runtime: runtime.as_ref(),
                    connection,
                    deadline,
                },
            )
        });
        self.settle(result)
    }

    /// After a call: a connection whose call timed out or panicked is never used again, and the
    /// server is asked to cancel what it may still be running.
    fn settle<R>(&mut self, result: Option<Result<R, CallError>>) -> Result<R, CallError> {
        let result = result.unwrap_or(Err(CallError::Panicked));
        if let Err(CallError::TimedOut(_) | CallError::Panicked) = &result {
            self.broken = true;
            let token = self.client.cancel_token();
            let (tls, limit) = (self.tls.clone(), self.timeouts.connect);
            self.io.spawn_detached(async move {
                let _ = tokio::time::timeout(limit, token.cancel_query(tls)).await;
            });
        }
        result
    }
}

impl<T: Tls> Drop for OwnClient<T> {
    fn drop(&mut self) {
        // Never blocks, so it cannot panic on a thread inside an async runtime. The client and
        // the connection are dropped after it; their socket closes then.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What runs one future of a client to its end or the deadline: the connection's runtime, and
/// the connection, which it drives meanwhile.
struct Drive<'a, S> {
    runtime: Option<&'a Runtime>,
    connection: &'a mut Option<Connection<Socket, S>>,
    deadline: Duration,
}

impl<S> Drive<'_, S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    fn run<R>(
        self,
        work: impl Future<Output = Result<R, tokio_postgres::Error>>,
    ) -> Result<R, CallError> {
        let Drive {
            runtime,
            connection,
            deadline,
        } = self;
        let Some(runtime) = runtime else {
            return Err(CallError::Panicked);
        };
        runtime.block_on(async {
            // First hear what the server said while the connection sat idle: it may have closed it
            // (a restart, `idle_session_timeout`). Yielding lets the runtime look at the socket;
            // a connection found ended is dropped, so the call fails "closed" before anything is
            // sent and the pool retries it on a fresh connection.
            tokio::task::yield_now().await;
            std::future::poll_fn(|cx| {
                while let Some(open) = connection.as_mut() {
                    match open.poll_message(cx) {
                        Poll::Ready(Some(Ok(message))) => log_message(&message),
                        Poll::Ready(Some(Err(error))) => {
                            log::debug!("syncguard: an idle PostgreSQL connection ended: {error}");
                            *connection = None;
                        }
                        Poll::Ready(None) => *connection = None,
                        Poll::Pending => break,
                    }
                }
                Poll::Ready(())
            })
            .await;

            let mut work = std::pin::pin!(work);
            let answered = std::future::poll_fn(|cx| {
                loop {
                    if let Poll::Ready(result) = work.as_mut().poll(cx) {
                        return Poll::Ready(result.map_err(CallError::from));
                    }
                    // The connection writes the request and reads the answer into `work`.
                    let Some(open) = connection.as_mut() else {
                        // Ended, which closed `work`'s channels and so woke it.
                        return Poll::Pending;
                    };
                    match open.poll_message(cx) {
                        Poll::Ready(Some(Ok(message))) => log_message(&message),
                        Poll::Ready(Some(Err(error))) => {
                            *connection = None;
                            return Poll::Ready(Err(CallError::Postgres(error)));
                        }
                        Poll::Ready(None) => *connection = None,
                        Poll::Pending => return Poll::Pending,
                    }
                }
            });
            tokio::time::timeout(deadline, answered)
                .await
                .unwrap_or(Err(CallError::TimedOut(deadline)))
        })
    }
}

/// What a connection says outside any call: notices, and notifications (which syncguard's
/// pooled connections never listen for).
fn log_message(message: &AsyncMessage) {
    if let AsyncMessage::Notice(notice) = message {
        log::info!(
            "syncguard: PostgreSQL {}: {}",
            notice.severity(),
            notice.message()
        );
    }
}

/// Runs `work` here, or — on a thread inside an async runtime, where blocking on another
/// runtime panics — on a short-lived thread of its own, waiting for it. `None` if `work`
/// panicked.
pub(crate) fn off_any_runtime<R: Send>(work: impl FnOnce() -> R + Send) -> Option<R> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Some(work());
    }
    std::thread::scope(|scope| scope.spawn(work).join()).ok()
}
