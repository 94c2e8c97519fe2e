//! Redis client errors → [`LockError`], by the SyncGuard mapping table.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::{ErrorCode, LockError};
use crate::net::Redactor;

/// The code for a client or server error.
pub(crate) fn classify(error: &RedisError) -> ErrorCode {
    if error.is_timeout() {
        return ErrorCode::NetworkTimeout;
    }
    if matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM")) {
        return ErrorCode::AuthFailed;
    }
    if error.code() == Some("WRONGTYPE") {
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
        _ if error.is_io_error() || error.is_connection_refusal() => ErrorCode::ServiceUnavailable,
        _ if error.code() == Some("OOM") => ErrorCode::ServiceUnavailable,
        _ if is_syntax_error(error) => ErrorCode::InvalidArgument,
        _ => ErrorCode::Internal,
    }
}

fn is_syntax_error(error: &RedisError) -> bool {
    error.code() == Some("ERR") && error.detail().is_some_and(|d| d.contains("syntax"))
}

/// The `LockError` for a failed Redis call, with the cause attached and secrets removed.
pub(crate) fn map_error(error: RedisError, redactor: &Redactor) -> LockError {
    let code = classify(&error);
    let what = match code {
        ErrorCode::NetworkTimeout => "Redis did not answer in time",
        ErrorCode::AuthFailed => "Redis rejected the credentials",
        ErrorCode::ServiceUnavailable => "Redis is unavailable",
        ErrorCode::InvalidArgument if error.code() == Some("WRONGTYPE") => {
            "a key syncguard uses holds a Redis value of another type"
        }
        ErrorCode::InvalidArgument => "Redis rejected the request",
        _ => "Redis request failed",
    };
    let source = redactor.source(&error);
    LockError::new(code, format!("{what}: {source}")).with_source(source)
}

/// Whether a failed call may be retried once on a fresh connection: the pooled connection was
/// dead (the server restarted or dropped it), not slow. Timeouts never qualify.
pub(crate) fn is_dropped_connection(error: &RedisError) -> bool {
    !error.is_timeout() && error.is_connection_dropped()
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            classify(&err("WRONGPASS", "invalid username-password pair")),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            classify(&err("NOAUTH", "Authentication required.")),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            classify(&err("NOPERM", "no permissions")),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            classify(&err(
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value"
            )),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            classify(&err("ERR", "syntax error")),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            classify(&err("LOADING", "Redis is loading")),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            classify(&err("READONLY", "replica")),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(classify(&err("ERR", "something odd")), ErrorCode::Internal);
    }

    #[test]
    fn io_errors_map_to_unavailable_or_timeout() {
        let io = |kind| RedisError::from(std::io::Error::new(kind, "io"));
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionRefused)),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionReset)),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::TimedOut)),
            ErrorCode::NetworkTimeout
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::WouldBlock)),
            ErrorCode::NetworkTimeout
        );
        assert!(is_dropped_connection(&io(std::io::ErrorKind::BrokenPipe)));
        assert!(!is_dropped_connection(&io(std::io::ErrorKind::TimedOut)));
    }
}
