//! Connections: URL handling, the r2d2 connection managers with timeouts, and checkout.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use r2d2::{ManageConnection, PooledConnection};
use redis::{
    Client, Connection, ConnectionLike, ErrorKind, IntoConnectionInfo, Pipeline, RedisError,
    RedisResult, Script, ServerErrorKind, Value,
};

use super::cluster::{ClusterConnector, OwnCluster, spoils_the_connection};
use super::errors::{Phase, Server, is_dropped_connection, map_error};
use super::hosts::{HostsKind, MULTI_HOST_SCHEMES, MultiHostUrl, split_hosts};
use super::layout::KeyLayout;
use super::node;
use super::sentinel::{PrimaryUrl, SentinelPrimary, SentinelSpec};
use crate::error::{ErrorCode, LockError, Result};
use crate::net::{UrlParams, split_url, with_one_reconnect};
use crate::tls::{TlsRoots, ensure_process_provider_for_redis};

/// A Redis URL taken apart: what the client gets, what may be shown, and our own options.
pub(crate) struct ParsedUrl {
    /// The URL without syncguard's query parameters, for the `redis` crate.
    pub client_url: String,
    /// The URL with any password replaced by `***`.
    pub display: String,
    /// Where the server is, for messages: `at HOST:PORT`, with ` (db N)` when N is not 0.
    pub location: String,
    /// `?prefix=`.
    pub prefix: Option<String>,
    /// Passwords found in the URL, to scrub from error messages.
    pub secrets: Vec<String>,
    pub tls: bool,
    /// `?tls_ca_file=`: CA certificates to trust besides the system's (`rediss://` only).
    pub ca_file: Option<PathBuf>,
    /// `?layout=`.
    pub layout: Option<KeyLayout>,
    /// `?min_replicas=`.
    pub min_replicas: Option<u32>,
    /// `?replica_timeout=`.
    pub replica_timeout: Option<Duration>,
    /// One server, a Cluster, or a primary behind Sentinels.
    pub topology: Topology,
}

/// What a URL connects to.
pub(crate) enum Topology {
    /// One server (`redis://`, `rediss://`, sockets): `client_url`.
    Single,
    /// A Cluster, through these seed nodes (`redis[s]://` URLs, and `host:port` each).
    Cluster {
        nodes: Vec<String>,
        addresses: Vec<String>,
    },
    /// The primary the Sentinels name.
    Sentinel(SentinelSpec),
}

/// The port the `redis` crate uses when a URL names none.
const DEFAULT_PORT: u16 = 6379;

/// The schemes a single-server Redis URL may have.
const SCHEMES: [&str; 4] = ["redis", "rediss", "redis+unix", "unix"];

/// The query parameters syncguard reads from every Redis URL.
const OURS: &[&str] = &[
    "prefix",
    "tls_ca_file",
    "layout",
    "min_replicas",
    "replica_timeout",
];
/// … and from a Sentinel URL: the Sentinels' own credentials.
const SENTINEL_OURS: &[&str] = &[
    "prefix",
    "tls_ca_file",
    "layout",
    "min_replicas",
    "replica_timeout",
    "sentinel_user",
    "sentinel_password",
];

/// What the `redis` crate reads from the query of a TCP URL (`redis://`, `rediss://`).
const TCP_PARAMS: &[&str] = &["protocol"];
/// What it reads from the query of a socket URL (`redis+unix://`, `unix://`).
const UNIX_PARAMS: &[&str] = &["protocol", "db", "user", "pass"];

/// Takes a Redis URL apart and checks, before any I/O, everything the `redis` crate would
/// otherwise ignore or only refuse when connecting: parameters it does not read for this kind
/// of URL, a fragment, a database that is not a number, an unknown protocol.
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    match split_hosts(url)? {
        Some(multi) => parse_multi_host(&multi),
        None => parse_single(url, OURS).map(|(parsed, _)| parsed),
    }
}

/// A `redis-cluster://` or `redis-sentinel://` URL: its options are checked as those of a
/// `redis://` URL to its first host would be.
fn parse_multi_host(multi: &MultiHostUrl) -> Result<ParsedUrl> {
    let (first_host, first_port) = &multi.hosts[0];
    let ours = match multi.kind {
        HostsKind::Cluster => OURS,
        HostsKind::Sentinel => SENTINEL_OURS,
    };
    let stand_in = multi.single_url(first_host, *first_port, "", multi.query.as_deref());
    let (mut parsed, options) = parse_single(&stand_in, ours)?;
    // The client's own parameters (`protocol`), as they stand in the stand-in's URL.
    let client_query = parsed.client_url.split_once('?').map(|(_, q)| q.to_owned());
    let shown_query = parsed.display.split_once('?').map(|(_, q)| q.to_owned());
    parsed.display = multi.display(shown_query.as_deref());
    match multi.kind {
        HostsKind::Cluster => {
            if !multi.path.is_empty() {
                return Err(LockError::invalid_argument(
                    "a redis-cluster:// URL takes no path: a Cluster has database 0 only \
                     (redis-cluster://h1:p1,h2:p2/?prefix=…)",
                ));
            }
            parsed.location = format!("at cluster nodes {}", multi.host_list());
            parsed.topology = Topology::Cluster {
                nodes: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| multi.single_url(host, *port, "", client_query.as_deref()))
                    .collect(),
                addresses: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| format!("{host}:{port}"))
                    .collect(),
            };
        }
        HostsKind::Sentinel => {
            let mut segments = multi.path.split('/');
            let master = percent_encoding::percent_decode_str(segments.next().unwrap_or(""))
                .decode_utf8_lossy()
                .into_owned();
            if master.trim().is_empty() {
                return Err(LockError::invalid_argument(
                    "a redis-sentinel:// URL names the primary as its path: \
                     redis-sentinel://s1:26379,s2:26379/mymaster",
                ));
            }
            let db = match segments.next() {
                None | Some("") => 0,
                Some(db) => database_number(
                    db,
                    "the database of a Sentinel URL",
                    "redis-sentinel://s1:26379/mymaster/2",
                )?,
            };
            if segments.next().is_some_and(|rest| !rest.is_empty()) {
                return Err(LockError::invalid_argument(
                    "the path of a redis-sentinel:// URL is /NAME or /NAME/DB",
                ));
            }
            let option = |name: &str| {
                options
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
            };
            let sentinel_user = option("sentinel_user");
            let sentinel_password = option("sentinel_password");
            if let Some(password) = &sentinel_password {
                parsed.secrets.push(password.clone());
                parsed.secrets.push(encode_userinfo(password));
            }
            let sentinel_userinfo = match (&sentinel_user, &sentinel_password) {
                (_, None) if sentinel_user.is_some() => {
                    return Err(LockError::invalid_argument(
                        "the Redis URL parameter `sentinel_user` needs `sentinel_password`",
                    ));
                }
                (user, Some(password)) => Some(format!(
                    "{}:{}",
                    encode_userinfo(user.as_deref().unwrap_or("")),
                    encode_userinfo(password)
                )),
                (_, None) => None,
            };
            let sentinel_urls = MultiHostUrl {
                userinfo: sentinel_userinfo,
                hosts: Vec::new(),
                path: String::new(),
                query: None,
                scheme: String::new(),
                ..*multi
            };
            parsed.location = with_db(
                format!("at primary `{master}` of sentinels {}", multi.host_list()),
                db,
            );
            parsed.topology = Topology::Sentinel(SentinelSpec {
                sentinels: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| sentinel_urls.single_url(host, *port, "", None))
                    .collect(),
                sentinel_addresses: multi
                    .hosts
                    .iter()
                    .map(|(host, port)| format!("{host}:{port}"))
                    .collect(),
                master,
                primary_url: PrimaryUrl {
                    tls: multi.tls,
                    userinfo: multi.userinfo.clone(),
                    db,
                    query: client_query,
                },
            });
        }
    }
    Ok(parsed)
}

/// Percent-encodes a user name or password for a URL's userinfo.
fn encode_userinfo(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A single-server URL (or a multi-host URL's stand-in), with `ours` as syncguard's own
/// parameters; also returns those parameters as given.
fn parse_single(url: &str, ours: &[&str]) -> Result<(ParsedUrl, Vec<(String, String)>)> {
    let unix = match url::Url::parse(url.trim()) {
        Ok(parsed) if !SCHEMES.contains(&parsed.scheme()) => {
            return Err(LockError::invalid_argument(format!(
                "not a Redis URL (scheme {:?}); expected redis://, rediss://, redis+unix://, \
                 unix://, {}",
                parsed.scheme().chars().take(32).collect::<String>(),
                MULTI_HOST_SCHEMES.map(|s| format!("{s}://")).join(", ")
            )));
        }
        Ok(parsed) => {
            let unix = matches!(parsed.scheme(), "redis+unix" | "unix");
            if !unix {
                refuse_socket_params(&parsed)?;
            }
            unix
        }
        // split_url says what is wrong.
        Err(_) => false,
    };
    let split = split_url(
        url,
        "Redis",
        &UrlParams {
            ours,
            client: if unix { UNIX_PARAMS } else { TCP_PARAMS },
        },
    )?;
    let parsed = &split.url;
    if parsed.fragment().is_some() {
        return Err(LockError::invalid_argument(
            "a Redis URL takes no fragment (`#…`); `#insecure` (TLS without certificate checks) \
             is not supported",
        ));
    }
    // The `redis` crate reads the last of a repeated parameter; one value leaves no doubt.
    let names: Vec<String> = parsed
        .query_pairs()
        .map(|(name, _)| name.into_owned())
        .collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(LockError::invalid_argument(format!(
                "the Redis URL parameter `{name}` is given twice"
            )));
        }
    }
    let query = |name: &str| {
        parsed
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    if let Some(protocol) = query("protocol")
        && !matches!(protocol.as_str(), "2" | "3" | "resp2" | "resp3")
    {
        return Err(LockError::invalid_argument(
            "the Redis URL parameter `protocol` must be resp2 or resp3 (or 2 or 3)",
        ));
    }
    let location = if unix {
        let db = match query("db") {
            Some(db) => database_number(&db, "the Redis URL parameter `db`", "?db=2")?,
            None => 0,
        };
        let path = parsed.to_file_path().map_err(|()| {
            LockError::invalid_argument("the Redis socket URL names no socket path")
        })?;
        with_db(format!("at unix socket {}", path.display()), db)
    } else {
        let host = match parsed.host() {
            Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
            Some(url::Host::Domain(_)) | None => {
                return Err(LockError::invalid_argument("the Redis URL names no host"));
            }
            Some(host) => host.to_string(),
        };
        let db = match parsed.path().trim_matches('/') {
            "" => 0,
            path => database_number(path, "the path of a Redis URL", "redis://host:port/2")?,
        };
        let port = parsed.port().unwrap_or(DEFAULT_PORT);
        with_db(format!("at {host}:{port}"), db)
    };
    let tls = split.url.scheme() == "rediss";
    let option = |name: &str| {
        split
            .options
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let ca_file = option("tls_ca_file").map(PathBuf::from);
    if ca_file.is_some() && !tls {
        return Err(LockError::invalid_argument(
            "the Redis URL parameter `tls_ca_file` needs TLS: use a rediss:// URL",
        ));
    }
    let layout = option("layout")
        .map(|value| KeyLayout::from_url_value(&value))
        .transpose()?;
    let min_replicas = option("min_replicas")
        .map(|value| match value.parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(LockError::invalid_argument(
                "the Redis URL parameter `min_replicas` must be a number of replicas, at least 1",
            )),
        })
        .transpose()?;
    let replica_timeout = option("replica_timeout")
        .map(|value| {
            parse_millis(&value).ok_or_else(|| {
                LockError::invalid_argument(
                    "the Redis URL parameter `replica_timeout` must be a duration such as 500ms, \
                     2s or 1500 (milliseconds)",
                )
            })
        })
        .transpose()?;
    let options = split.options.clone();
    Ok((
        ParsedUrl {
            tls,
            client_url: split.url.to_string(),
            display: split.display,
            location,
            prefix: option("prefix"),
            secrets: split.secrets,
            ca_file,
            layout,
            min_replicas,
            replica_timeout,
            topology: Topology::Single,
        },
        options,
    ))
}

/// `500ms`, `2s` or a plain number of milliseconds.
fn parse_millis(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1000)
    } else {
        (text, 1)
    };
    let value: u64 = number.trim().parse().ok()?;
    value.checked_mul(scale).map(Duration::from_millis)
}

/// `db`, `user` and `pass` in the query of a TCP URL: the `redis` crate reads them only for
/// sockets and would silently use database 0 and no password.
fn refuse_socket_params(url: &url::Url) -> Result<()> {
    for (name, _) in url.query_pairs() {
        let how = match name.as_ref() {
            "db" => "give the database as the path: redis://host:port/2",
            "user" | "pass" => "give them before the host: redis://user:password@host:port/",
            _ => continue,
        };
        return Err(LockError::invalid_argument(format!(
            "the Redis URL parameter `{name}` is read only for unix sockets (redis+unix://); \
             for redis:// and rediss:// {how}"
        )));
    }
    Ok(())
}

/// A database number (what `SELECT` takes), or an error naming `what` without its value.
fn database_number(text: &str, what: &str, example: &str) -> Result<u32> {
    text.parse::<u32>().map_err(|_| {
        LockError::invalid_argument(format!(
            "{what} must be a database number (0, 1, …): {example}"
        ))
    })
}

/// `location`, followed by ` (db N)` when N is not the default 0.
fn with_db(location: String, db: u32) -> String {
    if db == 0 {
        location
    } else {
        format!("{location} (db {db})")
    }
}

/// Makes `redis::Client`s for one backend's URLs. For TLS (`rediss://` and friends): the
/// shared policy of [`crate::tls`] (the system's roots plus `ca_file`, given to redis-rs as one
/// PEM bundle, since roots it is given replace the system's, loaded once), and rustls'
/// process-default provider, which redis-rs insists on (see
/// [`ensure_process_provider_for_redis`]).
#[derive(Clone)]
pub(crate) struct ClientFactory {
    roots: Option<Arc<Vec<u8>>>,
}

impl ClientFactory {
    pub fn new(tls: bool, ca_file: Option<&Path>) -> Result<ClientFactory> {
        if !tls {
            return Ok(ClientFactory { roots: None });
        }
        let roots = TlsRoots::load(ca_file, true)?;
        roots.require_any("tls_ca_file")?;
        ensure_process_provider_for_redis();
        Ok(ClientFactory {
            roots: Some(Arc::new(roots.pem_bundle())),
        })
    }

    /// The certificates to give redis-rs, for TLS.
    pub fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.roots.as_ref().map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.as_ref().clone()),
        })
    }

    /// The client for `url`. Its connections skip `CLIENT SETINFO` (the library's name and
    /// version) when they open: redis-rs sends it in one pipeline with `AUTH` and `SELECT` and
    /// awaits every reply of that pipeline with the whole timeout, even after the first one
    /// timed out: a server that accepts connections and never answers would hold each connect
    /// for two timeouts more than those of `AUTH` and `SELECT` (the ones it needs).
    pub fn client(&self, url: &str, server: &Server) -> Result<Client> {
        let client = url.into_connection_info().and_then(|info| {
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            let info = info.set_redis_settings(settings);
            match self.certificates() {
                Some(certificates) => Client::build_with_tls(info, certificates),
                None => Client::open(info),
            }
        });
        client.map_err(|e| {
            LockError::invalid_argument(format!(
                "invalid Redis URL: {}",
                server.clean(&e.to_string())
            ))
        })
    }
}

/// Timeouts applied to every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
    pub write: Duration,
    pub checkout: Duration,
}

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

/// Why the last connection attempt failed, as the code and message of its [`LockError`]
/// (`None` once one succeeds), shared between the connector, which r2d2 owns, and the checkout
/// that has to explain a pool timeout.
#[derive(Clone, Default)]
pub(crate) struct LastFailure(Arc<Mutex<Option<(ErrorCode, String)>>>);

impl LastFailure {
    pub(crate) fn set(&self, failure: Option<(ErrorCode, String)>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    fn get(&self) -> Option<(ErrorCode, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
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
    fn urls_lose_our_options_and_hide_passwords() {
        let p =
            parse_url("redis://app:s%40cret@127.0.0.1:6380/2?prefix=jobs&protocol=resp3").unwrap();
        assert_eq!(
            p.client_url,
            "redis://app:s%40cret@127.0.0.1:6380/2?protocol=resp3"
        );
        assert_eq!(p.display, "redis://app:***@127.0.0.1:6380/2?protocol=resp3");
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert!(p.secrets.contains(&"s@cret".to_owned()));
        assert!(!p.tls);

        let p = parse_url("redis+unix:///run/redis.sock?db=1&pass=topsecret").unwrap();
        assert!(!p.display.contains("topsecret"), "{}", p.display);
        assert_eq!(p.secrets, ["topsecret"]);
        assert!(parse_url("rediss://h/").unwrap().tls);
        let p = parse_url("rediss://h/?tls_ca_file=/etc/ca.pem&prefix=jobs").unwrap();
        assert_eq!(p.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert_eq!(p.client_url, "rediss://h/");
    }

    #[test]
    fn cluster_and_sentinel_urls_are_taken_apart_without_showing_secrets() {
        let p = parse_url(
            "redis-cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2/?prefix=jobs&protocol=resp3\
             &min_replicas=1&replica_timeout=250ms",
        )
        .unwrap();
        assert_eq!(
            p.display,
            "redis-cluster://app:***@10.0.0.1:7000,10.0.0.2:6379/?protocol=resp3"
        );
        assert_eq!(p.location, "at cluster nodes 10.0.0.1:7000, 10.0.0.2:6379");
        assert_eq!(p.prefix.as_deref(), Some("jobs"));
        assert_eq!(p.min_replicas, Some(1));
        assert_eq!(p.replica_timeout, Some(Duration::from_millis(250)));
        assert!(p.secrets.contains(&"s@cret".to_owned()));
        let Topology::Cluster { nodes, addresses } = &p.topology else {
            panic!("a cluster URL");
        };
        assert_eq!(
            nodes,
            &[
                "redis://app:s%40cret@10.0.0.1:7000/?protocol=resp3",
                "redis://app:s%40cret@10.0.0.2:6379/?protocol=resp3"
            ]
        );
        assert_eq!(addresses, &["10.0.0.1:7000", "10.0.0.2:6379"]);

        let p = parse_url(
            "rediss-sentinel://:data-pw@s1,s2:26380/my%20primary/3?sentinel_password=sent-pw\
             &layout=cluster",
        )
        .unwrap();
        assert_eq!(
            p.display,
            "rediss-sentinel://:***@s1:26379,s2:26380/my%20primary/3"
        );
        assert!(!p.display.contains("sent-pw"));
        assert_eq!(
            p.location,
            "at primary `my primary` of sentinels s1:26379, s2:26380 (db 3)"
        );
        assert_eq!(p.layout, Some(KeyLayout::Cluster));
        for secret in ["data-pw", "sent-pw"] {
            assert!(p.secrets.contains(&secret.to_owned()), "{secret}");
        }
        let Topology::Sentinel(spec) = &p.topology else {
            panic!("a Sentinel URL");
        };
        assert_eq!(
            spec.sentinels,
            [
                "rediss://:sent%2Dpw@s1:26379/",
                "rediss://:sent%2Dpw@s2:26380/"
            ]
        );
        assert_eq!(spec.master, "my primary");
        assert!(p.tls);
    }

    #[test]
    fn locations_name_host_port_and_database() {
        let location = |url: &str| parse_url(url).unwrap().location;
        assert_eq!(
            location("redis://:pw@cache.internal/"),
            "at cache.internal:6379"
        );
        assert_eq!(location("rediss://h:6380/0"), "at h:6380");
        assert_eq!(location("redis://h:6380/2?prefix=x"), "at h:6380 (db 2)");
        assert_eq!(location("redis://[::1]:7000/"), "at [::1]:7000");
        assert_eq!(
            location("redis+unix:///run/redis.sock?db=3&pass=pw"),
            "at unix socket /run/redis.sock (db 3)"
        );
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_echo() {
        crate::error::assert_refused_without_secret(
            &[
                "",
                "redis//x:hunter2@h",
                "http://x:hunter2@h/",
                "redis://x:hunter2@h:notaport/",
            ],
            parse_url,
        );
    }

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
