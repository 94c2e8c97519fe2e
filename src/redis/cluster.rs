//! Redis Cluster connections: redis-rs' cluster client does the routing (hash slots, `MOVED`,
//! `ASK`, reconnecting to nodes, refreshing the slot map after a failover) over syncguard's node
//! connections (`node.rs`: deadlines, pipelines across slots); this file pools the cluster
//! connections with r2d2. The client retries a few times itself ([`RETRIES`], short waits) for
//! redirections and failovers; what still fails is reported, and the `Locker` retries.

use std::sync::Arc;

use r2d2::ManageConnection;
use redis::cluster::ClusterClient;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ConnectionLike, FromRedisValue, RedisError, RedisResult};

use super::client::ClientFactory;
use super::config::Timeouts;
use super::errors::{LastFailure, Phase, Server, classify, is_tls_failure, map_error};
use super::node::{self, ClusterConnection, NodeConnection};
use crate::error::{ErrorCode, LockError, Result};

/// How often the cluster client repeats a request itself (after `MOVED`, `ASK`, `TRYAGAIN`,
/// `CLUSTERDOWN`, a dropped node connection, a stale slot map).
const RETRIES: u32 = 3;
/// The bounds of its waits between repetitions, in milliseconds.
const RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// The r2d2 manager of cluster connections: each is redis-rs' cluster connection (one
/// connection per node, the slot map).
pub(crate) struct ClusterConnector {
    client: ClusterClient,
    /// A plain client for each seed node, to tell a server without cluster support.
    seeds: Vec<(String, redis::Client)>,
    server: Arc<Server>,
    timeouts: Timeouts,
    last_failure: LastFailure,
}

/// A pooled cluster connection; `poisoned` after a failure that may have left the slot map
/// or a node connection stale, so that the pool replaces it.
pub(crate) struct OwnCluster {
    pub connection: ClusterConnection,
    pub poisoned: bool,
}

impl ClusterConnector {
    /// A manager for the cluster behind the seed `nodes` (one `redis[s]://` URL each).
    pub fn new(
        nodes: &[String],
        seeds: Vec<(String, redis::Client)>,
        clients: &ClientFactory,
        server: Arc<Server>,
        timeouts: Timeouts,
        last_failure: LastFailure,
    ) -> Result<Self> {
        let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.read)
            .retries(RETRIES)
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1);
        if let Some(certificates) = clients.certificates() {
            builder = builder.certs(certificates);
        }
        let client = builder.build().map_err(|e| {
            LockError::invalid_argument(format!(
                "invalid Redis Cluster URL: {}",
                server.clean(&e.to_string())
            ))
        })?;
        Ok(ClusterConnector {
            client,
            seeds,
            server,
            timeouts,
            last_failure,
        })
    }

    /// Opens one cluster connection (which reads the slot map) and sends a `PING`, for
    /// `build()`: a wrong address, a password or a server that is no Cluster fails there.
    pub fn probe(&self) -> Result<()> {
        let probed = self
            .open()
            .and_then(|mut connection| ping_one(&mut connection));
        probed.map_err(|error| {
            // A timeout or refused credentials say it all: asking the seeds again would only
            // wait as long once more.
            let told = matches!(
                classify(&error),
                ErrorCode::NetworkTimeout | ErrorCode::AuthFailed
            );
            let diagnosed = if told { None } else { self.diagnose_seeds() };
            diagnosed.unwrap_or_else(|| map_error(error, &self.server, Phase::Connect))
        })
    }

    /// What the seed nodes tell about a failed probe that the cluster client's error hides: a
    /// server without cluster support (the client only finds no slots there), or a TLS failure
    /// (the client keeps only rustls' text, not the reason to explain).
    fn diagnose_seeds(&self) -> Option<LockError> {
        self.seeds.iter().find_map(|(address, client)| {
            let mut connection = match client.get_connection_with_timeout(self.timeouts.connect) {
                Ok(connection) => connection,
                Err(error) if is_tls_failure(&error) => {
                    return Some(map_error(error, &self.server, Phase::Connect));
                }
                Err(_) => return None,
            };
            connection.set_read_timeout(Some(self.timeouts.read)).ok()?;
            let info: String = redis::cmd("INFO")
                .arg("cluster")
                .query(&mut connection)
                .ok()?;
            info.contains("cluster_enabled:0").then(|| {
                LockError::invalid_argument(format!(
                    "the Redis server at {address} is not a Cluster node (cluster support \
                     disabled): use a redis:// URL for a single server"
                ))
            })
        })
    }

    /// Opens a cluster connection. When that fails, the error is the one that says why, from
    /// the node connections' own failures (see [`telling_failure`]).
    fn open(&self) -> RedisResult<ClusterConnection> {
        let (connected, failures) =
            node::recording_failures(|| self.client.get_generic_connection::<NodeConnection>());
        let connected = connected
            .map_err(|error| telling_failure(error, failures))
            .and_then(|conn| {
                conn.set_write_timeout(Some(self.timeouts.write))?;
                Ok(conn)
            });
        self.last_failure.set(connected.as_ref().err().map(|error| {
            let error = map_error(error.clone(), &self.server, Phase::Connect);
            (error.code(), error.message().to_owned())
        }));
        connected
    }
}

impl ManageConnection for ClusterConnector {
    type Connection = OwnCluster;
    type Error = RedisError;

    fn connect(&self) -> RedisResult<OwnCluster> {
        self.open().map(|connection| OwnCluster {
            connection,
            poisoned: false,
        })
    }

    fn is_valid(&self, conn: &mut OwnCluster) -> RedisResult<()> {
        ping_one(&mut conn.connection)
    }

    fn has_broken(&self, conn: &mut OwnCluster) -> bool {
        conn.poisoned || !conn.connection.is_open()
    }
}

/// Sends a `PING` to one node the connection reaches. redis-rs sends a plain `PING` to every
/// node and fails if one does not answer: one primary down would then refuse every new
/// connection, also for the slots whose primaries answer.
fn ping_one(connection: &mut ClusterConnection) -> RedisResult<()> {
    let ping = redis::cmd("PING");
    let answer = connection.route_command(
        &ping,
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
    )?;
    String::from_redis_value(answer)?;
    Ok(())
}

/// What failed when a cluster connection could not be opened: redis-rs' error keeps only the
/// text of each seed node's failure (and is always an "unavailable" I/O error), so the node
/// connections' own `failures` are read instead. Refused credentials first (a configuration
/// error, whatever else failed), then a TLS failure (its reason); a timeout if that is all
/// that happened (every node tried was silent); otherwise the client's error, which names
/// each node and its failure.
fn telling_failure(error: RedisError, failures: Vec<RedisError>) -> RedisError {
    let auth = failures
        .iter()
        .position(|f| classify(f) == ErrorCode::AuthFailed);
    let tls = failures.iter().position(is_tls_failure);
    let only_timeouts = !failures.is_empty() && failures.iter().all(RedisError::is_timeout);
    match (auth, tls) {
        (Some(at), _) | (None, Some(at)) => failures.into_iter().nth(at).unwrap_or(error),
        (None, None) if only_timeouts => failures.into_iter().next().unwrap_or(error),
        (None, None) => error,
    }
}

/// Whether a failed cluster call leaves its cluster connection worth replacing: anything but
/// an answer the server gave to the request itself.
pub(crate) fn spoils_the_connection(error: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match error.kind() {
        ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => true,
        ErrorKind::Server(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind as Io;

    use super::*;

    fn io(kind: Io) -> RedisError {
        RedisError::from(std::io::Error::new(kind, "io"))
    }

    /// The failure that says why a cluster connection could not be opened: refused credentials
    /// over anything else, a timeout only when nothing else happened, else the client's own.
    #[test]
    fn the_telling_failure_is_chosen() {
        let composite = || RedisError::from((redis::ErrorKind::Io, "startup nodes", "all".into()));
        let auth = || RedisError::from((redis::ErrorKind::AuthenticationFailed, "refused"));
        let code = |failures: Vec<RedisError>| classify(&telling_failure(composite(), failures));
        assert_eq!(
            code(vec![io(Io::TimedOut), auth(), io(Io::ConnectionRefused)]),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            code(vec![io(Io::TimedOut), io(Io::WouldBlock)]),
            ErrorCode::NetworkTimeout
        );
        assert_eq!(
            code(vec![io(Io::TimedOut), io(Io::ConnectionRefused)]),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(code(Vec::new()), ErrorCode::ServiceUnavailable);
    }
}
