//! Connections: URL handling, the r2d2 connection manager with timeouts, and checkout.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use r2d2::{ManageConnection, PooledConnection};
use redis::{Client, Connection, ConnectionLike, RedisError, RedisResult};

use super::errors::{Phase, Server, is_dropped_connection, map_error};
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
}

/// The port the `redis` crate uses when a URL names none.
const DEFAULT_PORT: u16 = 6379;

/// The schemes a Redis URL may have.
const SCHEMES: [&str; 4] = ["redis", "rediss", "redis+unix", "unix"];

/// What the `redis` crate reads from the query of a TCP URL (`redis://`, `rediss://`).
const TCP_PARAMS: &[&str] = &["protocol"];
/// What it reads from the query of a socket URL (`redis+unix://`, `unix://`).
const UNIX_PARAMS: &[&str] = &["protocol", "db", "user", "pass"];

/// Takes a Redis URL apart and checks, before any I/O, everything the `redis` crate would
/// otherwise ignore or only refuse when connecting: parameters it does not read for this kind
/// of URL, a fragment, a database that is not a number, an unknown protocol.
pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    let unix = match url::Url::parse(url.trim()) {
        Ok(parsed) if !SCHEMES.contains(&parsed.scheme()) => {
            return Err(LockError::invalid_argument(format!(
                "not a Redis URL (scheme {:?}); expected redis://, rediss://, redis+unix:// or \
                 unix://",
                parsed.scheme().chars().take(32).collect::<String>()
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
            ours: &["prefix", "tls_ca_file"],
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
    Ok(ParsedUrl {
        tls,
        client_url: split.url.to_string(),
        display: split.display,
        location,
        prefix: option("prefix"),
        secrets: split.secrets,
        ca_file,
    })
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

/// The client for a URL (the `client_url` of a [`ParsedUrl`]). For `rediss://` (`tls`): TLS by the shared policy of [`crate::tls`]
/// (the system's roots plus `ca_file`, given to redis-rs as one PEM bundle, since roots it is
/// given replace the system's), and rustls' process-default provider, which redis-rs insists
/// on (see [`ensure_process_provider_for_redis`]).
pub(crate) fn client(
    url: &str,
    tls: bool,
    ca_file: Option<&Path>,
    server: &Server,
) -> Result<Client> {
    let client = if tls {
        let roots = TlsRoots::load(ca_file, true)?;
        roots.require_any("tls_ca_file")?;
        ensure_process_provider_for_redis();
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(roots.pem_bundle()),
        };
        Client::build_with_tls(url, certificates)
    } else {
        Client::open(url)
    };
    client.map_err(|e| {
        LockError::invalid_argument(format!(
            "invalid Redis URL: {}",
            server.clean(&e.to_string())
        ))
    })
}

/// Timeouts applied to every connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
    pub write: Duration,
    pub checkout: Duration,
}

/// The r2d2 manager for connections syncguard opens itself: connect with a timeout, then set
/// read and write timeouts, and remember why the last connect failed (r2d2 reports only text).
pub(crate) struct Connector {
    client: Client,
    server: Arc<Server>,
    timeouts: Timeouts,
    last_failure: LastFailure,
}

/// Why the last connection attempt failed, as the code and message of its [`LockError`]
/// (`None` once one succeeds), shared between the connector, which r2d2 owns, and the checkout
/// that has to explain a pool timeout.
#[derive(Clone, Default)]
pub(crate) struct LastFailure(Arc<Mutex<Option<(ErrorCode, String)>>>);

impl LastFailure {
    fn set(&self, failure: Option<(ErrorCode, String)>) {
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
        client: Client,
        server: Arc<Server>,
        timeouts: Timeouts,
        last_failure: LastFailure,
    ) -> Self {
        Connector {
            client,
            server,
            timeouts,
            last_failure,
        }
    }

    /// Opens one connection and checks it with a `PING` (a server with a password accepts the
    /// connection and refuses the first command), for `build()`: a wrong address or password
    /// fails there, with its cause, instead of as a pool timeout on first use.
    pub fn probe(&self) -> Result<()> {
        let mut connection = self
            .open()
            .map_err(|e| map_error(e, &self.server, Phase::Connect))?;
        redis::cmd("PING")
            .query::<String>(&mut connection)
            .map(drop)
            .map_err(|e| map_error(e, &self.server, Phase::Connect))
    }
}

/// A connection of syncguard's own pool. After a timeout it is `poisoned`: the reply it
/// waits for may never come (the request was lost), and redis-rs would skip the next reply in
/// its place, so the connection must not be used again.
pub(crate) struct OwnConnection {
    connection: Connection,
    poisoned: bool,
}

impl ManageConnection for Connector {
    type Connection = OwnConnection;
    type Error = RedisError;

    fn connect(&self) -> RedisResult<OwnConnection> {
        self.open().map(|connection| OwnConnection {
            connection,
            poisoned: false,
        })
    }

    fn is_valid(&self, conn: &mut OwnConnection) -> RedisResult<()> {
        redis::cmd("PING")
            .query::<String>(&mut conn.connection)
            .map(drop)
    }

    fn has_broken(&self, conn: &mut OwnConnection) -> bool {
        conn.poisoned || !conn.connection.is_open()
    }
}

impl Connector {
    fn open(&self) -> RedisResult<Connection> {
        let connected = self
            .client
            .get_connection_with_timeout(self.timeouts.connect)
            .and_then(|conn| {
                conn.set_read_timeout(Some(self.timeouts.read))?;
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

/// Where connections come from.
pub(crate) enum Pool {
    /// Opened by syncguard, through [`Connector`].
    Own(r2d2::Pool<Connector>, LastFailure),
    /// The application's pool of `redis::Client` connections: timeouts are set on checkout.
    External(r2d2::Pool<Client>, Timeouts),
}

enum Checkout {
    Own(PooledConnection<Connector>),
    External(PooledConnection<Client>),
}

impl Checkout {
    fn connection(&mut self) -> &mut Connection {
        match self {
            Checkout::Own(conn) => &mut conn.connection,
            Checkout::External(conn) => conn,
        }
    }

    /// Keeps a connection that timed out from going back into the pool (own pool only: an
    /// application's `redis::Client` pool cannot be told; see `RedisBuilder::pool`).
    fn poison(&mut self) {
        if let Checkout::Own(conn) = self {
            conn.poisoned = true;
        }
    }
}

impl Pool {
    pub fn state(&self) -> r2d2::State {
        match self {
            Pool::Own(pool, _) => pool.state(),
            Pool::External(pool, _) => pool.state(),
        }
    }

    pub fn max_size(&self) -> u32 {
        match self {
            Pool::Own(pool, _) => pool.max_size(),
            Pool::External(pool, _) => pool.max_size(),
        }
    }

    /// Runs `call` on a pooled connection, with one reconnect if the connection was dead.
    pub fn run<T>(
        &self,
        server: &Server,
        mut call: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        with_one_reconnect(
            || self.checkout(server),
            |checkout| {
                let result = call(checkout.connection());
                if result.as_ref().is_err_and(RedisError::is_timeout) {
                    checkout.poison();
                }
                result
            },
            is_dropped_connection,
            |error| map_error(error, server, Phase::Call),
        )
    }

    fn checkout(&self, server: &Server) -> Result<Checkout> {
        match self {
            Pool::Own(pool, last_failure) => pool
                .get()
                .map(Checkout::Own)
                .map_err(|_| checkout_error(pool, last_failure.get(), server)),
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
