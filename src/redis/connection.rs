//! Connections: URL handling, the r2d2 connection manager with timeouts, and checkout.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use r2d2::{ManageConnection, PooledConnection};
use redis::{Client, Connection, ConnectionLike, RedisError, RedisResult};

use super::errors::{classify, is_dropped_connection, map_error};
use crate::error::{ErrorCode, LockError, Result};
use crate::net::{Redactor, UrlParams, split_url, with_one_reconnect};

/// A Redis URL taken apart: what the client gets, what may be shown, and our own options.
pub(crate) struct ParsedUrl {
    /// The URL without syncguard's query parameters, for the `redis` crate.
    pub client_url: String,
    /// The URL with any password replaced by `***`.
    pub display: String,
    /// `?prefix=`.
    pub prefix: Option<String>,
    /// Passwords found in the URL, to scrub from error messages.
    pub secrets: Vec<String>,
    pub tls: bool,
}

pub(crate) fn parse_url(url: &str) -> Result<ParsedUrl> {
    let split = split_url(
        url,
        "Redis",
        &UrlParams {
            ours: &["prefix"],
            // What the `redis` crate reads from a URL's query (`db`, `user` and `pass` only
            // for `redis+unix://`).
            client: &["protocol", "db", "user", "pass"],
        },
    )?;
    let scheme = split.url.scheme();
    if !matches!(scheme, "redis" | "rediss" | "redis+unix" | "unix") {
        return Err(LockError::invalid_argument(format!(
            "not a Redis URL (scheme {scheme:?}); expected redis://, rediss://, redis+unix:// or unix://"
        )));
    }
    Ok(ParsedUrl {
        tls: scheme == "rediss",
        client_url: split.url.to_string(),
        display: split.display,
        prefix: split
            .options
            .into_iter()
            .map(|(_, value)| value)
            .next_back(),
        secrets: split.secrets,
    })
}

/// Makes rustls usable for `rediss://` without requiring the application to pick a crypto
/// provider: installs *ring* as the process default unless one is installed already.
pub(crate) fn ensure_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
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

/// The r2d2 manager for connections syncguard opens itself: connect with a timeout, then set
/// read and write timeouts, and remember why the last connect failed (r2d2 reports only text).
pub(crate) struct Connector {
    client: Client,
    timeouts: Timeouts,
    last_failure: LastFailure,
}

/// Why the last connection attempt failed (`None` once one succeeds), shared between the
/// connector, which r2d2 owns, and the checkout that has to explain a pool timeout.
#[derive(Clone, Default)]
pub(crate) struct LastFailure(Arc<Mutex<Option<ErrorCode>>>);

impl LastFailure {
    fn set(&self, failure: Option<ErrorCode>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = failure;
    }

    fn get(&self) -> Option<ErrorCode> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Connector {
    pub fn new(client: Client, timeouts: Timeouts, last_failure: LastFailure) -> Self {
        Connector {
            client,
            timeouts,
            last_failure,
        }
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
        self.last_failure
            .set(connected.as_ref().err().map(classify));
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
        redactor: &Redactor,
        mut call: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        with_one_reconnect(
            || self.checkout(redactor),
            |checkout| {
                let result = call(checkout.connection());
                if result.as_ref().is_err_and(RedisError::is_timeout) {
                    checkout.poison();
                }
                result
            },
            is_dropped_connection,
            |error| map_error(error, redactor),
        )
    }

    fn checkout(&self, redactor: &Redactor) -> Result<Checkout> {
        match self {
            Pool::Own(pool, last_failure) => pool.get().map(Checkout::Own).map_err(|e| {
                checkout_error(pool.connection_timeout(), last_failure.get(), &e, redactor)
            }),
            Pool::External(pool, timeouts) => {
                let conn = pool.get().map_err(|e| {
                    let cause = external_failure(&e.to_string());
                    checkout_error(pool.connection_timeout(), cause, &e, redactor)
                })?;
                conn.set_read_timeout(Some(timeouts.read))
                    .and_then(|()| conn.set_write_timeout(Some(timeouts.write)))
                    .map_err(|e| map_error(e, redactor))?;
                Ok(Checkout::External(conn))
            }
        }
    }
}

/// The error for a checkout that timed out: the last connect failure's code when connecting
/// failed (`ServiceUnavailable`, `AuthFailed`, …); `RateLimited` when every connection was
/// busy for the whole checkout timeout.
fn checkout_error(
    timeout: Duration,
    connect_failure: Option<ErrorCode>,
    error: &r2d2::Error,
    redactor: &Redactor,
) -> LockError {
    let detail = redactor.clean(&error.to_string());
    match connect_failure {
        Some(code) => LockError::new(code, format!("could not connect to Redis: {detail}")),
        None => LockError::new(
            ErrorCode::RateLimited,
            format!("no pooled Redis connection became free within {timeout:?}"),
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
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_echo() {
        for url in [
            "",
            "redis//x:hunter2@h",
            "http://x:hunter2@h/",
            "redis://x:hunter2@h:notaport/",
        ] {
            let err = parse_url(url).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{url}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
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
