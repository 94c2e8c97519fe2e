//! Where connections come from: syncguard's own r2d2 pool (its manager opens connections
//! within the connect timeout, to one server or to the primary the Sentinels name), a
//! Cluster's pool (`cluster.rs`), or the application's; checkout, the one reconnect, and
//! pipelines that stop at the first reply that did not come.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use r2d2::{ManageConnection, PooledConnection};
use redis::{
    Client, Connection, ConnectionLike, ErrorKind, Pipeline, RedisError, RedisResult, Script,
    ServerErrorKind, Value,
};

use super::cluster::{ClusterConnector, OwnCluster, spoils_the_connection};
use super::config::Timeouts;
use super::errors::{LastFailure, Phase, Server, is_dropped_connection, map_error};
use super::node::{self, Replies};
use super::sentinel::SentinelPrimary;
use crate::error::{ErrorCode, LockError, Result};
use crate::net::with_one_reconnect;

/// Where a [`Connector`] connects: one fixed server, or the primary the Sentinels name.
#[derive(Clone)]
pub(crate) enum Target {
    Fixed(Box<Client>),
    Sentinel(Arc<SentinelPrimary>),
}

/// The r2d2 manager for connections syncguard opens itself: connect within the connect
/// timeout, then set read and write timeouts, and remember why the last connect failed (r2d2
/// reports only text). Clones share the spare connections and the last failure: the pool owns
/// one, [`Pool::Own`] keeps another to open connections on the caller's thread.
#[derive(Clone)]
pub(crate) struct Connector {
    target: Target,
    server: Arc<Server>,
    timeouts: Timeouts,
    last_failure: LastFailure,
    spares: Spares,
}

/// Connections a caller opened itself (see [`Pool::checkout`]), which the pool's next connect
/// takes instead of opening one. At most a pool's worth.
#[derive(Clone, Default)]
struct Spares(Arc<Mutex<Vec<OwnConnection>>>);

impl Spares {
    fn put(&self, connection: OwnConnection, limit: u32) {
        let mut spares = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if spares.len() < limit as usize {
            spares.push(connection);
        }
    }

    fn take(&self) -> Option<OwnConnection> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }
}

impl Connector {
    pub fn new(
        target: Target,
        server: Arc<Server>,
        timeouts: Timeouts,
        last_failure: LastFailure,
    ) -> Self {
        Connector {
            target,
            server,
            timeouts,
            last_failure,
            spares: Spares::default(),
        }
    }

    /// Opens one connection (which answers a command, see [`open`](Self::open)), for
    /// `build()`: a wrong address or password fails there, with its cause, instead of as a
    /// pool timeout on first use.
    pub fn probe(&self) -> Result<()> {
        self.open_checked().map(drop)
    }

    /// Opens a connection on the caller's thread, for the pool to take (see
    /// [`Pool::checkout`]): the caller meets the failure of this one attempt.
    fn open_spare(&self, limit: u32) -> Result<()> {
        let connection = self.open_checked()?;
        self.spares.put(connection, limit);
        Ok(())
    }
}

/// Bounds the next reads and writes on `conn` by `deadline`; a timeout if it has passed.
fn until(conn: &Connection, deadline: Instant) -> RedisResult<()> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
        .ok_or_else(|| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timeout",
            ))
        })?;
    conn.set_read_timeout(Some(left))?;
    conn.set_write_timeout(Some(left))
}

/// A connection of syncguard's own pool. After a timeout it is `poisoned`: the reply it
/// waits for may never come (the request was lost), and redis-rs would skip the next reply in
/// its place, so the connection must not be used again.
pub(crate) struct OwnConnection {
    connection: Connection,
    poisoned: bool,
    /// The Sentinel resolution it was opened under (0 for a fixed server).
    generation: u64,
}

impl ManageConnection for Connector {
    type Connection = OwnConnection;
    type Error = RedisError;

    fn connect(&self) -> RedisResult<OwnConnection> {
        while let Some(spare) = self.spares.take() {
            if spare.connection.is_open() && !self.is_stale(&spare) {
                return Ok(spare);
            }
        }
        self.open_checked()
            .map_err(|error| RedisError::from(std::io::Error::other(error.message().to_owned())))
    }

    fn is_valid(&self, conn: &mut OwnConnection) -> RedisResult<()> {
        redis::cmd("PING")
            .query::<String>(&mut conn.connection)
            .map(drop)
    }

    fn has_broken(&self, conn: &mut OwnConnection) -> bool {
        conn.poisoned || !conn.connection.is_open() || self.is_stale(conn)
    }
}

impl Connector {
    /// Whether `conn` belongs to a Sentinel resolution that has since been dropped.
    fn is_stale(&self, conn: &OwnConnection) -> bool {
        match &self.target {
            Target::Fixed(_) => false,
            Target::Sentinel(primary) => conn.generation != primary.generation(),
        }
    }

    /// A new connection with its timeouts set; the failure, mapped, is also remembered for
    /// checkouts that time out.
    fn open_checked(&self) -> Result<OwnConnection> {
        let opened = match &self.target {
            Target::Fixed(client) => self.open(client).map(|connection| (connection, 0)),
            Target::Sentinel(primary) => {
                primary
                    .client(&self.server)
                    .and_then(|(client, generation)| match self.open(&client) {
                        Ok(connection) => Ok((connection, generation)),
                        Err(error) => {
                            // The primary the Sentinels named is gone: ask them again next time.
                            primary.invalidate(generation);
                            Err(error)
                        }
                    })
            }
        };
        self.last_failure.set(
            opened
                .as_ref()
                .err()
                .map(|error| (error.code(), error.message().to_owned())),
        );
        opened.map(|(connection, generation)| OwnConnection {
            connection,
            poisoned: false,
            generation,
        })
    }

    /// Connects to `client`'s server within the connect timeout, everything included: TCP (and
    /// TLS), authentication, the database, and one answered command — `SELECT`, or `PING` (a
    /// server with a password accepts the connection and refuses the first command; a black
    /// hole accepts it and never answers: both fail here, before any request of a caller is
    /// sent on it). redis-rs bounds its handshake by the connect timeout per reply, not in all
    /// (a pipeline of n replies from a silent server takes n timeouts), so it is left one
    /// reply at most (`AUTH` or `HELLO`): `CLIENT SETINFO` is not sent, and the rest is sent
    /// here, bounded by what is left.
    fn open(&self, client: &Client) -> Result<Connection> {
        let deadline = Instant::now() + self.timeouts.connect;
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let bare = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_db(0)
                .set_skip_set_lib_name(),
        );
        Client::open(bare)
            .and_then(|bare| bare.get_connection_with_timeout(self.timeouts.connect))
            .and_then(|mut conn| {
                until(&conn, deadline)?;
                if db != 0 {
                    redis::cmd("SELECT").arg(db).exec(&mut conn)?;
                } else {
                    redis::cmd("PING").exec(&mut conn)?;
                }
                conn.set_read_timeout(Some(self.timeouts.read))?;
                conn.set_write_timeout(Some(self.timeouts.write))?;
                Ok(conn)
            })
            .map_err(|error| map_error(error, &self.server, Phase::Connect))
    }
}

/// Where connections come from.
pub(crate) enum Pool {
    /// Opened by syncguard, through [`Connector`]: to one server, or to the primary the
    /// Sentinels name (`sentinel`, to drop a stale resolution).
    Own {
        pool: r2d2::Pool<Connector>,
        /// A clone of the pool's connector, to open connections on the caller's thread.
        connector: Connector,
        last_failure: LastFailure,
        sentinel: Option<Arc<SentinelPrimary>>,
    },
    /// The application's pool of `redis::Client` connections: timeouts are set on checkout.
    External(r2d2::Pool<Client>, Timeouts),
    /// Cluster connections opened by syncguard, through [`ClusterConnector`].
    Cluster(r2d2::Pool<ClusterConnector>, LastFailure),
}

/// A checked-out connection, as calls that need to know the kind see it. A cluster connection
/// comes with its `poisoned` flag: a call whose failure is an answer to it (a pipeline's
/// commands fail one by one, and the pipeline as a whole succeeds) marks it there.
pub(crate) enum Conn<'a> {
    /// One of syncguard's own, let go after a failed call.
    Single(&'a mut Connection),
    /// One of the application's pool, kept after a failed call (its state must stay whole).
    Lent(&'a mut Connection),
    Cluster(&'a mut OwnCluster),
}

impl Conn<'_> {
    /// For calls any connection can make (a script, a command routed by its key).
    pub fn as_dyn(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(conn) | Conn::Lent(conn) => *conn,
            Conn::Cluster(own) => &mut own.connection,
        }
    }

    /// Runs `pipe`, whose scripts are all `script`: one round trip on one server; on a
    /// Cluster, whose commands may lie in different slots, one per node, all at once
    /// ([`node::pipeline`]). Each command's own answer, in order; `Err` only when the
    /// pipeline could not be sent at all. A server that does not know the script (restarted,
    /// or new to the Cluster) ran none of its invocations: the script is loaded and the
    /// pipeline sent again, which is safe because every command syncguard pipelines can be
    /// repeated.
    pub fn pipeline(
        &mut self,
        pipe: &mut Pipeline,
        script: &Script,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        pipe.ignore_errors();
        let answers = self.send(pipe)?;
        let unknown = |answer: &RedisResult<Value>| {
            answer
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
        };
        if !answers.iter().any(unknown) {
            return Ok(answers);
        }
        script.prepare_invoke().load(self.as_dyn())?;
        self.send(pipe)
    }

    fn send(&mut self, pipe: &Pipeline) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            Conn::Single(conn) => pipe.query(&mut UntilFirstFailure(conn)),
            Conn::Lent(conn) => pipe.query(*conn),
            Conn::Cluster(own) => {
                let answers =
                    node::pipeline(&mut own.connection, &pipe.cmd_iter().collect::<Vec<_>>());
                // The failures stay inside the answers, out of `Pool::run_on`'s sight: a
                // command that met a dead node or a stale slot map leaves the cluster connection
                // to be replaced here. redis-rs' cluster client refreshes its slot map only on a
                // redirection, never when a node refuses or drops the connection, so a pooled
                // connection kept after a failover would send every later renewal to the dead
                // primary until the lease ran out.
                if answers
                    .iter()
                    .any(|answer| answer.as_ref().is_err_and(spoils_the_connection))
                {
                    own.poisoned = true;
                }
                Ok(answers)
            }
        }
    }
}

/// A connection whose pipelines stop reading at the first reply that did not come (a timeout,
/// a dropped connection): redis-rs' own reads every reply, each with the whole read timeout,
/// so a batch of 256 renewals to a stalled server would hold its heartbeat worker for 256
/// timeouts. The error is the pipeline's; the connection is let go after it (the replies it
/// did not read would answer later calls), so only syncguard's own connections read this way.
struct UntilFirstFailure<'a>(&'a mut Connection);

impl ConnectionLike for UntilFirstFailure<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> Replies {
        self.0.send_packed_command(cmd)?;
        let mut replies = Vec::with_capacity(count);
        let mut index = 0;
        while index < offset + count {
            match self.0.recv_response()? {
                // RESP3 push data between replies is not a reply.
                Value::Push { .. } => continue,
                reply if index >= offset => replies.push(reply),
                _ => {}
            }
            index += 1;
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

// A short-lived value on the caller's stack: boxing the large variant would cost an
// allocation per call.
#[allow(clippy::large_enum_variant)]
enum Checkout {
    Own(PooledConnection<Connector>),
    External(PooledConnection<Client>),
    Cluster(PooledConnection<ClusterConnector>),
}

impl Checkout {
    fn connection(&mut self) -> Conn<'_> {
        match self {
            Checkout::Own(conn) => Conn::Single(&mut conn.connection),
            Checkout::External(conn) => Conn::Lent(conn),
            Checkout::Cluster(conn) => Conn::Cluster(conn),
        }
    }

    /// Keeps a connection that timed out (or, on a Cluster, one whose slot map may be stale)
    /// from going back into the pool (own pools only: an application's `redis::Client` pool
    /// cannot be told; see `RedisBuilder::pool`).
    fn poison(&mut self) {
        match self {
            Checkout::Own(conn) => conn.poisoned = true,
            Checkout::Cluster(conn) => conn.poisoned = true,
            Checkout::External(_) => {}
        }
    }
}

impl Pool {
    /// Whether the connections go to a Cluster, where one script may only touch one hash slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Pool::Cluster(..))
    }

    pub fn state(&self) -> r2d2::State {
        match self {
            Pool::Own { pool, .. } => pool.state(),
            Pool::External(pool, _) => pool.state(),
            Pool::Cluster(pool, _) => pool.state(),
        }
    }

    pub fn max_size(&self) -> u32 {
        match self {
            Pool::Own { pool, .. } => pool.max_size(),
            Pool::External(pool, _) => pool.max_size(),
            Pool::Cluster(pool, _) => pool.max_size(),
        }
    }

    /// Runs `call` on a pooled connection, with one reconnect if the connection was dead.
    pub fn run<T>(
        &self,
        server: &Server,
        mut call: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_on(server, |mut conn| call(conn.as_dyn()))
    }

    /// [`run`](Self::run), for calls that need to know the kind of connection.
    pub fn run_on<T>(
        &self,
        server: &Server,
        mut call: impl FnMut(Conn<'_>) -> RedisResult<T>,
    ) -> Result<T> {
        with_one_reconnect(
            || self.checkout(server),
            |checkout| {
                let result = call(checkout.connection());
                if let Err(error) = &result {
                    self.after_failure(checkout, error);
                }
                result
            },
            is_dropped_connection,
            |error| map_error(error, server, Phase::Call),
        )
    }

    /// What a failed call says about its connection: a timeout or any other I/O failure
    /// leaves it out of step (a pipeline stops reading at the first; see
    /// [`UntilFirstFailure`]); on a
    /// Cluster, anything but the server's answer to the request may have left the slot map
    /// stale; behind Sentinels, a read-only answer, a lost connection or a timeout means the
    /// primary may have moved.
    fn after_failure(&self, checkout: &mut Checkout, error: &RedisError) {
        if error.is_timeout() || error.is_io_error() {
            checkout.poison();
        }
        match (self, &*checkout) {
            (Pool::Cluster(..), _) if spoils_the_connection(error) => checkout.poison(),
            (
                Pool::Own {
                    sentinel: Some(primary),
                    ..
                },
                Checkout::Own(conn),
            ) if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                || error.is_timeout()
                || error.is_connection_dropped()
                || error.is_connection_refusal() =>
            {
                primary.invalidate(conn.generation);
                checkout.poison();
            }
            _ => {}
        }
    }

    fn checkout(&self, server: &Server) -> Result<Checkout> {
        match self {
            Pool::Own {
                pool,
                connector,
                last_failure,
                sentinel,
            } => {
                // Connections to a primary the Sentinels no longer name are let go (each is
                // dropped as broken when it returns); at most one pool's worth.
                for _ in 0..=pool.max_size() {
                    let mut conn = match pool.try_get() {
                        Some(conn) => conn,
                        None => {
                            // Nothing idle and room for one more: this call opens it, so that
                            // it meets the failure of one attempt within the connect timeout,
                            // not r2d2's repeated attempts until the pool timeout. The pool's
                            // next connect takes it.
                            let state = pool.state();
                            if state.idle_connections == 0 && state.connections < pool.max_size() {
                                connector.open_spare(pool.max_size())?;
                            }
                            pool.get()
                                .map_err(|_| checkout_error(pool, last_failure.get(), server))?
                        }
                    };
                    match sentinel {
                        Some(primary) if conn.generation != primary.generation() => {
                            conn.poisoned = true;
                        }
                        _ => return Ok(Checkout::Own(conn)),
                    }
                }
                Err(checkout_error(pool, last_failure.get(), server))
            }
            Pool::External(pool, timeouts) => {
                let conn = pool.get().map_err(|e| {
                    let failure = external_failure(&e.to_string()).map(|code| {
                        let detail = server.clean(&e.to_string());
                        let at = server.location();
                        (code, format!("cannot connect to Redis {at}: {detail}"))
                    });
                    checkout_error(pool, failure, server)
                })?;
                conn.set_read_timeout(Some(timeouts.read))
                    .and_then(|()| conn.set_write_timeout(Some(timeouts.write)))
                    .map_err(|e| map_error(e, server, Phase::Call))?;
                Ok(Checkout::External(conn))
            }
            Pool::Cluster(pool, last_failure) => pool
                .get()
                .map(Checkout::Cluster)
                .map_err(|_| checkout_error(pool, last_failure.get(), server)),
        }
    }
}

/// The error for a checkout that timed out: the last connect failure when connecting failed
/// (`ServiceUnavailable`, `AuthFailed`, …, with its message); `RateLimited` when every
/// connection was busy for the whole checkout timeout.
fn checkout_error<M: ManageConnection>(
    pool: &r2d2::Pool<M>,
    connect_failure: Option<(ErrorCode, String)>,
    server: &Server,
) -> LockError {
    match connect_failure {
        Some((code, message)) => LockError::new(code, message),
        None => LockError::new(
            ErrorCode::RateLimited,
            format!(
                "no pooled Redis connection became free within {:?} (pool_size {}; Redis {})",
                pool.connection_timeout(),
                pool.max_size(),
                server.location()
            ),
        ),
    }
}

/// Classifies r2d2's text for a pool we did not build (r2d2 keeps only the message).
fn external_failure(message: &str) -> Option<ErrorCode> {
    let (_, cause) = message.split_once(": ")?;
    let upper = cause.to_ascii_uppercase();
    Some(
        if ["WRONGPASS", "NOAUTH", "NOPERM", "AUTHENTICATION"]
            .iter()
            .any(|word| upper.contains(word))
        {
            ErrorCode::AuthFailed
        } else {
            ErrorCode::ServiceUnavailable
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_pool_failures_are_classified_from_text() {
        assert_eq!(external_failure("timed out waiting for connection"), None);
        assert_eq!(
            external_failure("timed out waiting for connection: Connection refused (os error 111)"),
            Some(ErrorCode::ServiceUnavailable)
        );
        assert_eq!(
            external_failure(
                "timed out waiting for connection: WRONGPASS invalid username-password pair"
            ),
            Some(ErrorCode::AuthFailed)
        );
    }
}
