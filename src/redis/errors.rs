//! Redis client errors → [`LockError`], by the SyncGuard mapping table.

use std::cell::Cell;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::config::Timeouts;
use crate::error::{ErrorCode, LockError};
use crate::net::Redactor;

/// The code for a client or server error.
/// Whether an acquisition's script may have run although no answer came back (a timeout, a
/// connection lost after the request went out): then the lock (or permit) may be held under
/// its lock id, and the error says so (`in_doubt`), so that the Locker can release it.
#[derive(Default)]
pub(crate) struct Unanswered(Cell<bool>);

impl Unanswered {
    /// Notes `error`, which came instead of an answer; a server's error reply is an answer.
    pub(crate) fn note(&self, error: &RedisError) {
        if error.code().is_none() {
            self.0.set(true);
        }
    }

    /// `error`, for a set acquisition, in doubt under every (key, lock id) of `leases` if no
    /// answer came back: the script may have taken them all.
    pub(crate) fn judge_all(
        &self,
        error: LockError,
        leases: impl IntoIterator<Item = (String, String)>,
    ) -> LockError {
        if self.0.get() {
            error.in_doubt_all(leases)
        } else {
            error
        }
    }

    /// `error`, for `key`, in doubt under `lock_id` if no answer came back.
    pub(crate) fn judge(&self, error: LockError, key: &str, lock_id: &str) -> LockError {
        let error = error.with_key(key);
        if self.0.get() {
            error.in_doubt(lock_id)
        } else {
            error
        }
    }
}

pub(crate) fn classify(error: &RedisError) -> ErrorCode {
    if error.is_timeout() {
        return ErrorCode::NetworkTimeout;
    }
    if matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM")) {
        return ErrorCode::AuthFailed;
    }
    // A key syncguard uses holds another Redis type: data in the store, not the caller's
    // input, so no "bad usage" (the scripts refuse such keys by name before Redis does).
    if error.code() == Some("WRONGTYPE") {
        return ErrorCode::Internal;
    }
    if is_not_a_cluster(error) {
        return ErrorCode::InvalidArgument;
    }
    match error.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            ErrorCode::AuthFailed
        }
        ErrorKind::Io => ErrorCode::ServiceUnavailable,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => ErrorCode::ServiceUnavailable,
        ErrorKind::InvalidClientConfig => ErrorCode::InvalidArgument,
        // The cluster client found no node for a slot, or no slot map: a failover or a
        // resharding is under way, or every node is down.
        ErrorKind::ClusterConnectionNotFound => ErrorCode::ServiceUnavailable,
        ErrorKind::Client if error.to_string().to_ascii_lowercase().contains("slot") => {
            ErrorCode::ServiceUnavailable
        }
        _ if error.is_io_error() || error.is_connection_refusal() => ErrorCode::ServiceUnavailable,
        // Out of memory; fewer replicas than `min-replicas-to-write` (a failover, a lagging
        // replica): both pass.
        _ if matches!(error.code(), Some("OOM" | "NOREPLICAS")) => ErrorCode::ServiceUnavailable,
        _ if is_syntax_error(error) => ErrorCode::InvalidArgument,
        _ => ErrorCode::Internal,
    }
}

/// A `redis-cluster://` URL that names a server without cluster support.
fn is_not_a_cluster(error: &RedisError) -> bool {
    error.to_string().contains("cluster support disabled")
}

fn is_syntax_error(error: &RedisError) -> bool {
    error.code() == Some("ERR") && error.detail().is_some_and(|d| d.contains("syntax"))
}

/// The server a backend talks to, as its error messages name it, and what they must not show.
pub(crate) struct Server {
    /// `at 127.0.0.1:6379`, `at 127.0.0.1:6379 (db 2)`, `at unix socket /run/redis.sock`, or
    /// `through the application's pool`.
    location: String,
    redactor: Redactor,
    timeouts: Timeouts,
    /// `rediss://`: a connect that times out may be a TLS client talking to a plain server.
    tls: bool,
    /// Connections come from a URL syncguard was given (not from an application's pool).
    from_url: bool,
}

impl Server {
    /// A server syncguard connects to itself, from a parsed URL.
    pub fn from_url(location: String, secrets: Vec<String>, timeouts: Timeouts, tls: bool) -> Self {
        Server {
            location,
            redactor: Redactor::new(secrets),
            timeouts,
            tls,
            from_url: true,
        }
    }

    /// The servers behind an application's pool (their address is the pool's business).
    pub fn application_pool(timeouts: Timeouts) -> Self {
        Server {
            location: "through the application's pool".to_owned(),
            redactor: Redactor::default(),
            timeouts,
            tls: false,
            from_url: false,
        }
    }

    /// `at HOST:PORT[ (db N)]`, or how else the server is reached.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Client text with the URL's secrets removed, on one line.
    pub fn clean(&self, text: &str) -> String {
        one_line(&self.redactor.clean(text))
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

    pub(crate) fn get(&self) -> Option<(ErrorCode, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What syncguard was doing when the error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Opening a connection and checking it (`build()`, or the pool opening one).
    Connect,
    /// A call on an open connection.
    Call,
}

/// The `LockError` for a failed Redis call: the code by the mapping table; a message naming
/// the server and the cause (refused, name not resolved, TLS, authentication, timeout, …);
/// the client's error as the source; secrets removed from both.
pub(crate) fn map_error(error: RedisError, server: &Server, phase: Phase) -> LockError {
    let code = classify(&error);
    let cause = cause(&error, code, server, phase);
    let at = server.location();
    let message = match (phase, code) {
        (Phase::Connect, _) => format!("cannot connect to Redis {at}: {cause}"),
        (Phase::Call, ErrorCode::NetworkTimeout) => {
            format!("Redis {at} did not answer in time: {cause}")
        }
        (Phase::Call, ErrorCode::AuthFailed) => {
            format!("Redis {at} rejected the credentials: {cause}")
        }
        (Phase::Call, ErrorCode::ServiceUnavailable) => {
            format!("Redis {at} is unavailable: {cause}")
        }
        (Phase::Call, _) if error.code() == Some("WRONGTYPE") => {
            format!(
                "a key syncguard uses holds a Redis value of another type (Redis {at}): {cause}"
            )
        }
        (Phase::Call, ErrorCode::InvalidArgument) => {
            format!("Redis {at} rejected the request: {cause}")
        }
        (Phase::Call, _) => format!("Redis request {at} failed: {cause}"),
    };
    // The client's error may carry connection details: the source is its redacted text.
    let source = RedactedError(server.redactor.clean(&error.to_string()));
    LockError::new(code, message).with_source(source)
}

/// A client library's error, as redacted text.
#[derive(Debug)]
struct RedactedError(String);

impl std::fmt::Display for RedactedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedactedError {}

/// Why the call failed, in words an operator acts on, with the client's detail where it adds
/// something.
fn cause(error: &RedisError, code: ErrorCode, server: &Server, phase: Phase) -> String {
    let detail = server.clean(&error.to_string());
    if code == ErrorCode::NetworkTimeout {
        let t = &server.timeouts;
        return match phase {
            Phase::Connect if server.tls => format!(
                "no answer in time (connect_timeout {:?}, read_timeout {:?}); a TLS client \
                 (rediss://) waits like this for a server that does not speak TLS on this port",
                t.connect, t.read
            ),
            Phase::Connect => format!(
                "no answer in time (connect_timeout {:?}, read_timeout {:?})",
                t.connect, t.read
            ),
            Phase::Call => format!(
                "no answer in time (read_timeout {:?}, write_timeout {:?})",
                t.read, t.write
            ),
        };
    }
    if let Some(reason) = tls_failure(error) {
        return format!("TLS failure: {}", server.clean(&reason));
    }
    if let Some(io) = io_error(error) {
        use std::io::ErrorKind as Io;
        let text = server.clean(&io.to_string());
        return match io.kind() {
            Io::ConnectionRefused => "connection refused".to_owned(),
            Io::NotFound => format!("no such socket ({text})"),
            Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::BrokenPipe
            | Io::UnexpectedEof
            | Io::NotConnected => format!("connection lost ({text})"),
            _ => match text.split_once("failed to lookup address information: ") {
                Some((_, why)) => format!("host name not resolved ({why})"),
                None => text,
            },
        };
    }
    if is_not_a_cluster(error) {
        return format!(
            "the server is not a Redis Cluster node ({detail}); use redis:// for a single server"
        );
    }
    match (error.kind(), error.code()) {
        (ErrorKind::Server(ServerErrorKind::ReadOnly), _) => format!(
            "the server is a read-only replica now, so a failover has moved the primary \
             ({detail})"
        ),
        (_, Some("NOAUTH")) if server.from_url => format!(
            "authentication required ({detail}): the server has a password; give it in the URL \
             (redis://:PASSWORD@host:port/)"
        ),
        (_, Some("NOAUTH")) => format!("authentication required ({detail})"),
        (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS")) => format!(
            "authentication failed: the server refused the user name or password ({detail})"
        ),
        (_, Some("NOPERM")) => format!("permission denied ({detail})"),
        (ErrorKind::Parse, _) if phase == Phase::Connect => {
            format!("the answer is not the Redis protocol; is this a Redis server? ({detail})")
        }
        _ => detail,
    }
}

/// The error a client error wraps: the `redis` crate keeps it in an `Arc`, which `source()`
/// hands out as is.
fn wrapped(error: &RedisError) -> Option<&(dyn std::error::Error + 'static)> {
    let source = std::error::Error::source(error)?;
    Some(
        match source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
            Some(inner) => &**inner,
            None => source,
        },
    )
}

/// The I/O error behind a client error, if that is what it is.
fn io_error(error: &RedisError) -> Option<&std::io::Error> {
    wrapped(error)?.downcast_ref::<std::io::Error>()
}

/// Whether TLS is what failed (see `tls_failure`).
pub(crate) fn is_tls_failure(error: &RedisError) -> bool {
    tls_failure(error).is_some()
}

/// rustls' reason, when TLS is what failed: the handshake (inside an I/O error), the
/// configuration, or a server name TLS cannot check. A certificate that is not trusted or names
/// another host is explained (see [`crate::tls::describe`]).
fn tls_failure(error: &RedisError) -> Option<String> {
    let source = wrapped(error)?;
    if let Some(tls) = crate::tls::find_rustls_error(source) {
        let hint = match tls {
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                "; does the server speak TLS on this port?"
            }
            _ => "",
        };
        return Some(format!(
            "{}{hint}",
            crate::tls::describe(tls, "tls_ca_file")
        ));
    }
    let inner: &(dyn std::error::Error + 'static) = match source.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref()?,
        None => source,
    };
    inner
        .downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
        .map(|name| format!("{name}"))
}

/// Client text on one line: line breaks and other control characters become spaces.
fn one_line(text: &str) -> String {
    let spaced: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    spaced.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a failed call may be retried once on a fresh connection: the pooled connection was
/// dead (the server restarted or dropped it), not slow. Timeouts never qualify.
pub(crate) fn is_dropped_connection(error: &RedisError) -> bool {
    !error.is_timeout() && error.is_connection_dropped()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn server_errors_map_by_code() {
        let err = |code: &str, text: &str| {
            redis::parse_redis_value(format!("-{code} {text}\r\n").as_bytes())
                .map(|v| match v {
                    redis::Value::ServerError(e) => RedisError::from(e),
                    other => panic!("{other:?}"),
                })
                .unwrap()
        };
        use ErrorCode::*;
        let wrong_kind = "Operation against a key holding the wrong kind of value";
        for (code, text, expected) in [
            ("WRONGPASS", "invalid username-password pair", AuthFailed),
            ("NOAUTH", "Authentication required.", AuthFailed),
            ("NOPERM", "no permissions", AuthFailed),
            ("WRONGTYPE", wrong_kind, Internal),
            ("ERR", "syntax error", InvalidArgument),
            ("LOADING", "Redis is loading", ServiceUnavailable),
            ("READONLY", "replica", ServiceUnavailable),
            ("ERR", "something odd", Internal),
        ] {
            assert_eq!(classify(&err(code, text)), expected, "{code} {text}");
        }
    }

    /// Each client failure: its code and message (where, and the cause, without the password).
    #[test]
    fn messages_name_the_server_and_the_cause() {
        let timeouts = Timeouts {
            connect: Duration::from_millis(500),
            read: Duration::from_secs(2),
            write: Duration::from_secs(3),
            checkout: Duration::from_secs(4),
        };
        let plain = Server::from_url(
            "at cache:6379 (db 2)".to_owned(),
            vec!["hunter2".to_owned()],
            timeouts,
            false,
        );
        let tls = Server::from_url("at cache:6380".to_owned(), vec![], timeouts, true);
        let io = |kind, text: &str| RedisError::from(std::io::Error::new(kind, text.to_owned()));
        let server = |code: &str, text: &str| match redis::parse_redis_value(
            format!("-{code} {text}\r\n").as_bytes(),
        ) {
            Ok(redis::Value::ServerError(e)) => RedisError::from(e),
            other => panic!("{other:?}"),
        };
        let corrupt = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
        ));
        let rows = [
            (
                io(
                    std::io::ErrorKind::ConnectionRefused,
                    "Connection refused (os error 111)",
                ),
                &plain,
                Phase::Connect,
                ErrorCode::ServiceUnavailable,
                "cannot connect to Redis at cache:6379 (db 2): connection refused",
            ),
            (
                io(
                    std::io::ErrorKind::Other,
                    "failed to lookup address information: Name or service not known",
                ),
                &plain,
                Phase::Connect,
                ErrorCode::ServiceUnavailable,
                "cannot connect to Redis at cache:6379 (db 2): host name not resolved (Name or \
                 service not known)",
            ),
            (
                corrupt,
                &tls,
                Phase::Connect,
                ErrorCode::ServiceUnavailable,
                "cannot connect to Redis at cache:6380: TLS failure: received corrupt message of \
                 type InvalidContentType; does the server speak TLS on this port?",
            ),
            (
                io(
                    std::io::ErrorKind::WouldBlock,
                    "Resource temporarily unavailable",
                ),
                &tls,
                Phase::Connect,
                ErrorCode::NetworkTimeout,
                "cannot connect to Redis at cache:6380: no answer in time (connect_timeout \
                 500ms, read_timeout 2s); a TLS client (rediss://) waits like this for a server \
                 that does not speak TLS on this port",
            ),
            (
                io(std::io::ErrorKind::TimedOut, "connection timed out"),
                &plain,
                Phase::Connect,
                ErrorCode::NetworkTimeout,
                "cannot connect to Redis at cache:6379 (db 2): no answer in time \
                 (connect_timeout 500ms, read_timeout 2s)",
            ),
            (
                io(
                    std::io::ErrorKind::WouldBlock,
                    "Resource temporarily unavailable",
                ),
                &plain,
                Phase::Call,
                ErrorCode::NetworkTimeout,
                "Redis at cache:6379 (db 2) did not answer in time: no answer in time \
                 (read_timeout 2s, write_timeout 3s)",
            ),
            (
                RedisError::from((
                    ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                )),
                &plain,
                Phase::Connect,
                ErrorCode::AuthFailed,
                "cannot connect to Redis at cache:6379 (db 2): authentication failed: the server \
                 refused the user name or password (Password authentication failed - \
                 AuthenticationFailed)",
            ),
            (
                server("NOAUTH", "Authentication required."),
                &plain,
                Phase::Connect,
                ErrorCode::AuthFailed,
                "cannot connect to Redis at cache:6379 (db 2): authentication required \
                 (\"NOAUTH\": Authentication required.): the server has a password; give it in \
                 the URL (redis://:PASSWORD@host:port/)",
            ),
            (
                server(
                    "WRONGPASS",
                    "invalid username-password pair (redis://:hunter2@cache)",
                ),
                &plain,
                Phase::Call,
                ErrorCode::AuthFailed,
                "Redis at cache:6379 (db 2) rejected the credentials: authentication failed: the \
                 server refused the user name or password (\"WRONGPASS\": invalid \
                 username-password pair (redis://:***@cache))",
            ),
            (
                io(
                    std::io::ErrorKind::ConnectionReset,
                    "Connection reset by peer (os error 104)",
                ),
                &plain,
                Phase::Call,
                ErrorCode::ServiceUnavailable,
                "Redis at cache:6379 (db 2) is unavailable: connection lost (Connection reset by \
                 peer (os error 104))",
            ),
            (
                server(
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value",
                ),
                &plain,
                Phase::Call,
                ErrorCode::Internal,
                "a key syncguard uses holds a Redis value of another type (Redis at cache:6379 \
                 (db 2)): \"WRONGTYPE\": Operation against a key holding the wrong kind of value",
            ),
        ];
        for (error, server, phase, code, message) in rows {
            let err = map_error(error, server, phase);
            assert_eq!((err.code(), err.message()), (code, message));
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        }
    }

    #[test]
    fn io_errors_map_to_unavailable_or_timeout() {
        use std::io::ErrorKind::*;
        let io = |kind| RedisError::from(std::io::Error::new(kind, "io"));
        for (kind, expected) in [
            (ConnectionRefused, ErrorCode::ServiceUnavailable),
            (ConnectionReset, ErrorCode::ServiceUnavailable),
            (TimedOut, ErrorCode::NetworkTimeout),
            (WouldBlock, ErrorCode::NetworkTimeout),
        ] {
            assert_eq!(classify(&io(kind)), expected, "{kind:?}");
        }
        assert!(is_dropped_connection(&io(BrokenPipe)));
        assert!(!is_dropped_connection(&io(TimedOut)));
    }
}
