//! Why an HTTP request got no (complete) answer. Messages name the host at most: never a
//! header, a body or anything else of the request or the answer.

use std::fmt;
use std::io;

/// A request that failed before a whole answer came back.
#[derive(Debug)]
pub(crate) enum Error {
    /// The request's time budget ran out (connecting, sending or waiting for the answer).
    Timeout,
    /// The host name could not be resolved (the resolver's reason).
    HostNotFound(String),
    /// The socket failed: connection refused, reset, closed early… A TLS failure arrives as
    /// an I/O error carrying the `rustls::Error` (`crate::tls::find_rustls_error` finds it).
    Io(io::Error),
    /// The URL (or a proxy URL, or a header) cannot make a request: the reason.
    BadRequest(String),
    /// The answer's body is longer than the limit (bytes).
    BodyExceedsLimit(u64),
    /// What came back is not HTTP/1.x as the client understands it.
    Protocol(&'static str),
    /// The proxy did not open a tunnel (its status line's code).
    ProxyRefused(u16),
}

impl Error {
    /// An I/O error, or a timeout when the I/O error says the socket's deadline passed.
    pub(crate) fn from_io(error: io::Error) -> Error {
        match error.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout,
            _ => Error::Io(error),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout => write!(f, "no answer in time"),
            Error::HostNotFound(why) => write!(f, "host name not resolved ({why})"),
            Error::Io(error) => write!(f, "{error}"),
            Error::BadRequest(why) => write!(f, "{why}"),
            Error::BodyExceedsLimit(limit) => write!(f, "the answer exceeds {limit} bytes"),
            Error::Protocol(what) => write!(f, "not an HTTP/1.1 answer: {what}"),
            Error::ProxyRefused(status) => {
                write!(f, "the proxy refused to open a tunnel (HTTP {status})")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(error) => Some(error),
            _ => None,
        }
    }
}
