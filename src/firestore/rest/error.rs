//! Why a call to Firestore's REST API failed, as a value the backend can branch on (a conflict
//! is retried, a failed precondition is re-read), and the one place where it becomes a
//! [`LockError`].

use std::fmt;
use std::io::ErrorKind as Io;
use std::time::Duration;

use serde_json::Value;

use crate::error::{ErrorCode, LockError};
use crate::firestore::transport;

/// The most of Firestore's error message that goes into a [`LockError`]'s message.
const MAX_MESSAGE_CHARS: usize = 500;

/// A failed call to Firestore. It names no endpoint: [`RestError::into_lock_error`] is told
/// where the call went.
#[derive(Debug)]
pub(crate) enum RestError {
    /// Firestore answered with a non-2xx status. `status` is the canonical code the body's
    /// `error.status` names (`None` when the body names none, e.g. a proxy's error page),
    /// `message` the body's `error.message`.
    Status {
        http: u16,
        status: Option<Status>,
        message: Option<String>,
    },
    /// No answer: the connection was refused, the name not resolved, TLS failed, or the
    /// connection was lost. `cause` says which, for the message.
    Unreachable {
        cause: String,
        source: transport::Error,
    },
    /// No answer within `after`.
    Timeout {
        after: Duration,
        source: transport::Error,
    },
    /// Any other failure of the HTTP client.
    Transport { source: transport::Error },
    /// Firestore answered success, but with something that is not the answer `verb` (e.g.
    /// `runQuery`) gives: a body that is not JSON, or JSON of another shape. `what` says how
    /// it differs; it never quotes the body.
    BadAnswer { verb: &'static str, what: String },
    /// No request was sent because no token could be had. The token provider's error already
    /// names the token endpoint and the cause, so it is kept as it is.
    Credentials(LockError),
}

/// Google's canonical error codes, as Firestore's REST answers spell them in `error.status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    /// A status this crate does not know, as the answer spelt it.
    Other(String),
}

impl Status {
    /// The status `name` stands for; `None` for an empty name (no status).
    fn parse(name: &str) -> Option<Status> {
        Some(match name {
            "" => return None,
            "CANCELLED" => Status::Cancelled,
            "UNKNOWN" => Status::Unknown,
            "INVALID_ARGUMENT" => Status::InvalidArgument,
            "DEADLINE_EXCEEDED" => Status::DeadlineExceeded,
            "NOT_FOUND" => Status::NotFound,
            "ALREADY_EXISTS" => Status::AlreadyExists,
            "PERMISSION_DENIED" => Status::PermissionDenied,
            "RESOURCE_EXHAUSTED" => Status::ResourceExhausted,
            "FAILED_PRECONDITION" => Status::FailedPrecondition,
            "ABORTED" => Status::Aborted,
            "OUT_OF_RANGE" => Status::OutOfRange,
            "UNIMPLEMENTED" => Status::Unimplemented,
            "INTERNAL" => Status::Internal,
            "UNAVAILABLE" => Status::Unavailable,
            "DATA_LOSS" => Status::DataLoss,
            "UNAUTHENTICATED" => Status::Unauthenticated,
            other => Status::Other(other.to_owned()),
        })
    }

    /// The status of a numeric `google.rpc.Code`, as `batchWrite` reports each write's.
    fn from_code(code: i64) -> Option<Status> {
        Some(match code {
            0 => return None,
            1 => Status::Cancelled,
            2 => Status::Unknown,
            3 => Status::InvalidArgument,
            4 => Status::DeadlineExceeded,
            5 => Status::NotFound,
            6 => Status::AlreadyExists,
            7 => Status::PermissionDenied,
            8 => Status::ResourceExhausted,
            9 => Status::FailedPrecondition,
            10 => Status::Aborted,
            11 => Status::OutOfRange,
            12 => Status::Unimplemented,
            13 => Status::Internal,
            14 => Status::Unavailable,
            15 => Status::DataLoss,
            16 => Status::Unauthenticated,
            other => Status::Other(other.to_string()),
        })
    }

    /// The name as Firestore spells it (`FAILED_PRECONDITION`).
    fn as_str(&self) -> &str {
        match self {
            Status::Cancelled => "CANCELLED",
            Status::Unknown => "UNKNOWN",
            Status::InvalidArgument => "INVALID_ARGUMENT",
            Status::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Status::NotFound => "NOT_FOUND",
            Status::AlreadyExists => "ALREADY_EXISTS",
            Status::PermissionDenied => "PERMISSION_DENIED",
            Status::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Status::FailedPrecondition => "FAILED_PRECONDITION",
            Status::Aborted => "ABORTED",
            Status::OutOfRange => "OUT_OF_RANGE",
            Status::Unimplemented => "UNIMPLEMENTED",
            Status::Internal => "INTERNAL",
            Status::Unavailable => "UNAVAILABLE",
            Status::DataLoss => "DATA_LOSS",
            Status::Unauthenticated => "UNAUTHENTICATED",
            Status::Other(name) => name,
        }
    }
}

/// Shown as `Firestore status ABORTED`: the status is the source of the [`LockError`] an
/// error answer becomes, for whoever walks the chain of causes.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Firestore status {}", self.as_str())
    }
}

impl std::error::Error for Status {}

impl RestError {
    /// A non-2xx answer with its parsed body (`Value::Null` when it was not JSON).
    pub fn from_answer(http: u16, body: &Value) -> RestError {
        let error = &body["error"];
        RestError::Status {
            http,
            status: error["status"].as_str().and_then(Status::parse),
            message: error["message"].as_str().map(str::to_owned),
        }
    }

    /// An `{"error": {…}}` element inside a successful (`200`) answer: a streamed call
    /// (`runQuery`, `batchGet`) that failed part-way. Its `status` names the canonical code;
    /// without one, a numeric `google.rpc.Code` (1–16) does.
    pub fn from_error_element(error: &Value) -> RestError {
        let status = match error["status"].as_str() {
            Some(name) => Status::parse(name),
            None => error["code"]
                .as_i64()
                .filter(|code| (1..=16).contains(code))
                .and_then(Status::from_code),
        };
        RestError::Status {
            http: 200,
            status,
            message: error["message"].as_str().map(str::to_owned),
        }
    }

    /// A successful answer to `verb` that is not what `verb` answers.
    pub fn bad_answer(verb: &'static str, what: impl Into<String>) -> RestError {
        RestError::BadAnswer {
            verb,
            what: what.into(),
        }
    }

    /// One write's failure in a `batchWrite` answer (`{"code": 9, "message": …}`), which came
    /// with HTTP `http`. `None` when the write succeeded.
    pub fn from_write_status(http: u16, answer: &Value) -> Option<RestError> {
        let status = Status::from_code(answer["code"].as_i64().unwrap_or(0))?;
        Some(RestError::Status {
            http,
            status: Some(status),
            message: answer["message"].as_str().map(str::to_owned),
        })
    }

    /// A request that got no (complete) answer; `timeout` is the one the request had.
    pub fn from_transport(error: transport::Error, timeout: Duration) -> RestError {
        // A refused certificate is explained as every backend explains it (crate::tls).
        let tls = match &error {
            transport::Error::Io(io) => crate::tls::find_rustls_error(io),
            _ => None,
        }
        .map(|tls| format!("TLS failure: {}", crate::tls::describe(tls, "tls_ca_file")));
        if let Some(cause) = tls {
            return RestError::Unreachable {
                cause,
                source: error,
            };
        }
        let cause = match &error {
            transport::Error::Timeout => None,
            transport::Error::Io(io) if matches!(io.kind(), Io::TimedOut | Io::WouldBlock) => None,
            transport::Error::Io(io) if io.kind() == Io::ConnectionRefused => {
                Some("connection refused".to_owned())
            }
            transport::Error::HostNotFound(why) => Some(format!("host name not resolved ({why})")),
            transport::Error::Io(io)
                if matches!(
                    io.kind(),
                    Io::ConnectionReset
                        | Io::ConnectionAborted
                        | Io::BrokenPipe
                        | Io::UnexpectedEof
                ) =>
            {
                Some(format!("connection lost ({io})"))
            }
            transport::Error::Io(io) => Some(io.to_string()),
            transport::Error::ProxyRefused(_) => Some(error.to_string()),
            _ => return RestError::Transport { source: error },
        };
        match cause {
            Some(cause) => RestError::Unreachable {
                cause,
                source: error,
            },
            None => RestError::Timeout {
                after: timeout,
                source: error,
            },
        }
    }

    /// The canonical status of an error answer.
    fn status(&self) -> Option<&Status> {
        match self {
            RestError::Status { status, .. } => status.as_ref(),
            _ => None,
        }
    }

    /// Whether trying again at once may well succeed: a transient status, an unusable
    /// answer, a refused or lost connection. Not a timeout: that request already spent its
    /// whole time budget, and another would likely do the same.
    pub fn is_worth_retrying_now(&self) -> bool {
        !matches!(self, RestError::Timeout { .. }) && self.code().is_transient()
    }

    /// Whether a write whose request failed this way may have been applied all the same: the
    /// request may have reached Firestore, and no answer says it was refused. True for a
    /// timeout, a connection lost mid-call, an answer that could not be used (a `200` that
    /// does not parse most likely means it was applied), an unknown client failure, and
    /// statuses that do not say the write did not happen (DEADLINE_EXCEEDED, UNAVAILABLE,
    /// INTERNAL, UNKNOWN, CANCELLED, or a 5xx page without a status, a gateway's). False when
    /// nothing was sent (no token, connection refused, host not resolved, TLS refused) or the
    /// answer is a refusal.
    pub fn may_have_been_applied(&self) -> bool {
        match self {
            RestError::Timeout { .. }
            | RestError::Transport { .. }
            | RestError::BadAnswer { .. } => true,
            RestError::Unreachable { source, .. } => matches!(
                source,
                transport::Error::Io(io) if matches!(
                    io.kind(),
                    Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe | Io::UnexpectedEof
                )
            ),
            RestError::Status { http, status, .. } => match status {
                Some(status) => matches!(
                    status,
                    Status::DeadlineExceeded
                        | Status::Unavailable
                        | Status::Internal
                        | Status::Unknown
                        | Status::Cancelled
                ),
                None => *http >= 500,
            },
            RestError::Credentials(_) => false,
        }
    }

    /// The code the caller will see ([`into_lock_error`](RestError::into_lock_error)'s).
    fn code(&self) -> ErrorCode {
        match self {
            RestError::Status { http, status, .. } => status_code(*http, status.as_ref()),
            RestError::Unreachable { .. } | RestError::BadAnswer { .. } => {
                ErrorCode::ServiceUnavailable
            }
            RestError::Timeout { .. } => ErrorCode::NetworkTimeout,
            RestError::Transport { .. } => ErrorCode::Internal,
            RestError::Credentials(error) => error.code(),
        }
    }

    /// Firestore's ABORTED: the call met a transaction, and is worth retrying.
    pub fn is_aborted(&self) -> bool {
        self.status() == Some(&Status::Aborted)
    }

    /// A commit failed only because a `currentDocument` precondition did not hold: the
    /// document changed (or appeared, or went away) since it was read.
    pub fn is_precondition_failure(&self) -> bool {
        matches!(
            self.status(),
            Some(Status::FailedPrecondition | Status::AlreadyExists | Status::NotFound)
        )
    }

    /// The error for the caller. `place` names the endpoint, the project and the database
    /// (`Firestore at HOST (project P, database D)`); the message adds the cause. The code
    /// goes by the answer's `status`, not its HTTP code, which is ambiguous (400 is both
    /// INVALID_ARGUMENT and FAILED_PRECONDITION); by the HTTP code only when there is no
    /// status.
    pub fn into_lock_error(self, place: &str) -> LockError {
        match self {
            RestError::Status {
                http,
                status,
                message,
            } => answer_error(place, http, status, message.as_deref()),
            RestError::Unreachable { cause, source } => LockError::new(
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {place}: {cause}"),
            )
            // The transport's errors name the host at most, which holds no secret (the token is a
            // header).
            .with_source(source),
            RestError::Timeout { after, source } => LockError::new(
                ErrorCode::NetworkTimeout,
                format!("{place} did not answer in time: no answer within the timeout ({after:?})"),
            )
            .with_source(source),
            RestError::Transport { source } => LockError::new(
                ErrorCode::Internal,
                format!("request to {place} failed: {source}"),
            )
            .with_source(source),
            // Transient: the likeliest causes are a proxy or load balancer in the way, or an
            // answer cut short, which pass; and if it does not pass, failing loudly and
            // retrying is the safe side — a wrong shape must never read as "no lock".
            RestError::BadAnswer { verb, what } => LockError::new(
                ErrorCode::ServiceUnavailable,
                format!("{place} answered {verb} with something that is not its answer: {what}"),
            ),
            RestError::Credentials(error) => error,
        }
    }
}

/// The code of an answer with HTTP status `http` that named `status` (if any).
fn status_code(http: u16, status: Option<&Status>) -> ErrorCode {
    match status {
        Some(Status::Unavailable | Status::Internal | Status::Aborted) => {
            ErrorCode::ServiceUnavailable
        }
        Some(Status::DeadlineExceeded) => ErrorCode::NetworkTimeout,
        Some(Status::PermissionDenied | Status::Unauthenticated) => ErrorCode::AuthFailed,
        Some(Status::InvalidArgument | Status::FailedPrecondition) => ErrorCode::InvalidArgument,
        Some(Status::ResourceExhausted) => ErrorCode::RateLimited,
        Some(_) => ErrorCode::Internal,
        None => match http {
            401 | 403 => ErrorCode::AuthFailed,
            429 => ErrorCode::RateLimited,
            502..=504 => ErrorCode::ServiceUnavailable,
            _ => ErrorCode::Internal,
        },
    }
}

/// The error for an answer that named `status` (if any) and `message` (if any).
fn answer_error(
    place: &str,
    http: u16,
    status: Option<Status>,
    message: Option<&str>,
) -> LockError {
    let code = status_code(http, status.as_ref());
    let message = message.unwrap_or("no error message");
    let hint = if status == Some(Status::FailedPrecondition) && message.contains("index") {
        " — the lock queries need the single-field index on `lockId` in the lock collection; \
         create it (or remove its exemption) in the Firestore console"
    } else {
        ""
    };
    let shown = status.as_ref().map_or("no status", Status::as_str);
    let message: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_MESSAGE_CHARS)
        .collect();
    let error = LockError::new(
        code,
        format!("{place} answered HTTP {http} {shown}: {message}{hint}"),
    );
    match status {
        Some(status) => error.with_source(status),
        None => error,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PLACE: &str = "Firestore at 127.0.0.1:8080 (project p, database (default))";

    fn answer(http: u16, status: &str) -> RestError {
        RestError::from_answer(
            http,
            &json!({"error": {"code": http, "message": "m", "status": status}}),
        )
    }

    #[test]
    fn statuses_map_by_the_table() {
        let cases = [
            (503, "UNAVAILABLE", ErrorCode::ServiceUnavailable),
            (500, "INTERNAL", ErrorCode::ServiceUnavailable),
            (409, "ABORTED", ErrorCode::ServiceUnavailable),
            (504, "DEADLINE_EXCEEDED", ErrorCode::NetworkTimeout),
            (403, "PERMISSION_DENIED", ErrorCode::AuthFailed),
            (401, "UNAUTHENTICATED", ErrorCode::AuthFailed),
            (400, "INVALID_ARGUMENT", ErrorCode::InvalidArgument),
            (400, "FAILED_PRECONDITION", ErrorCode::InvalidArgument),
            (429, "RESOURCE_EXHAUSTED", ErrorCode::RateLimited),
            (404, "NOT_FOUND", ErrorCode::Internal),
            (400, "SOMETHING_NEW", ErrorCode::Internal),
            (502, "", ErrorCode::ServiceUnavailable),
            (401, "", ErrorCode::AuthFailed),
            (429, "", ErrorCode::RateLimited),
            (400, "", ErrorCode::Internal),
        ];
        for (http, status, code) in cases {
            let err = answer(http, status).into_lock_error(PLACE);
            assert_eq!(err.code(), code, "{http} {status}");
        }
        assert!(answer(409, "ABORTED").is_aborted());
        assert!(answer(400, "FAILED_PRECONDITION").is_precondition_failure());
        assert!(answer(409, "ALREADY_EXISTS").is_precondition_failure());
        assert!(answer(404, "NOT_FOUND").is_precondition_failure());
        assert!(!answer(409, "ABORTED").is_precondition_failure());
        assert!(!answer(503, "UNAVAILABLE").is_aborted());
        let index = RestError::from_answer(
            400,
            &json!({"error": {"message": "The query requires an index.", "status": "FAILED_PRECONDITION"}}),
        )
        .into_lock_error(PLACE);
        assert!(index.message().contains("lockId"), "{index}");
    }

    #[test]
    fn status_names_round_trip() {
        for name in [
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
            "SOMETHING_NEW",
        ] {
            let status = Status::parse(name).unwrap();
            assert_eq!(status.as_str(), name);
            assert_eq!(
                matches!(status, Status::Other(_)),
                name == "SOMETHING_NEW",
                "{name}"
            );
        }
        assert_eq!(Status::parse(""), None);
    }

    /// Each transport failure: its code and message (place and cause).
    #[test]
    fn transport_failures_name_the_place_and_the_cause() {
        let io =
            |kind, text: &str| transport::Error::Io(std::io::Error::new(kind, text.to_owned()));
        let second = Duration::from_secs(1);
        let rows = [
            (
                io(Io::ConnectionRefused, "Connection refused (os error 111)"),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: connection refused"),
            ),
            (
                transport::Error::HostNotFound("Name or service not known".to_owned()),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: host name not resolved (Name or service not known)"),
            ),
            (
                transport::Error::Timeout,
                ErrorCode::NetworkTimeout,
                format!("{PLACE} did not answer in time: no answer within the timeout (1s)"),
            ),
            (
                io(Io::ConnectionReset, "Connection reset by peer"),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: connection lost (Connection reset by peer)"),
            ),
            (
                transport::Error::ProxyRefused(407),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: the proxy refused to open a tunnel (HTTP 407)"),
            ),
            (
                transport::Error::BodyExceedsLimit(1),
                ErrorCode::Internal,
                format!("request to {PLACE} failed: the answer exceeds 1 bytes"),
            ),
        ];
        for (error, code, message) in rows {
            let rest = RestError::from_transport(error, second);
            assert!(!rest.is_aborted() && !rest.is_precondition_failure());
            let err = rest.into_lock_error(PLACE);
            assert_eq!((err.code(), err.message()), (code, message.as_str()));
        }
    }

    #[test]
    fn error_answers_name_the_place_and_the_status() {
        let err = RestError::from_answer(
            503,
            &json!({"error": {"code": 503, "message": "down\nfor now", "status": "UNAVAILABLE"}}),
        )
        .into_lock_error(PLACE);
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        assert_eq!(
            err.message(),
            format!("{PLACE} answered HTTP 503 UNAVAILABLE: down for now")
        );
        let err = RestError::from_answer(502, &Value::Null).into_lock_error(PLACE);
        assert_eq!(
            err.message(),
            format!("{PLACE} answered HTTP 502 no status: no error message")
        );
        let long = "x".repeat(2 * MAX_MESSAGE_CHARS);
        let err = RestError::from_answer(500, &json!({"error": {"message": long}}))
            .into_lock_error(PLACE);
        assert!(err.message().ends_with(&"x".repeat(MAX_MESSAGE_CHARS)));
        assert!(!err.message().ends_with(&"x".repeat(MAX_MESSAGE_CHARS + 1)));
    }

    /// Which failed writes may have been applied (an acquisition's is then in doubt): those
    /// that may have reached Firestore and got no refusal.
    #[test]
    fn what_may_have_been_applied() {
        let io = |kind| transport::Error::Io(std::io::Error::new(kind, "x"));
        let second = Duration::from_secs(1);
        let failed = |error| RestError::from_transport(error, second);
        let rows = [
            (failed(transport::Error::Timeout), true),
            (failed(io(std::io::ErrorKind::UnexpectedEof)), true),
            (failed(io(std::io::ErrorKind::ConnectionReset)), true),
            (failed(io(std::io::ErrorKind::BrokenPipe)), true),
            (RestError::bad_answer("commit", "no valid commitTime"), true),
            (answer(503, "UNAVAILABLE"), true),
            (answer(504, "DEADLINE_EXCEEDED"), true),
            (answer(500, "INTERNAL"), true),
            (RestError::from_answer(502, &Value::Null), true),
            (failed(io(std::io::ErrorKind::ConnectionRefused)), false),
            (
                failed(transport::Error::HostNotFound("x".to_owned())),
                false,
            ),
            (answer(403, "PERMISSION_DENIED"), false),
            (answer(400, "INVALID_ARGUMENT"), false),
            (answer(429, "RESOURCE_EXHAUSTED"), false),
            (RestError::from_answer(404, &Value::Null), false),
            (
                RestError::Credentials(LockError::new(ErrorCode::AuthFailed, "no token")),
                false,
            ),
        ];
        for (error, applied) in rows {
            assert_eq!(error.may_have_been_applied(), applied, "{error:?}");
        }
    }

    /// What a release may try again at once: an answer that was a transient failure or not
    /// an answer at all, a connection refused or lost; not a timeout, nor a permanent error.
    #[test]
    fn what_is_worth_retrying_now() {
        let io = |kind| transport::Error::Io(std::io::Error::new(kind, "x"));
        let second = Duration::from_secs(1);
        let rows = [
            (answer(503, "UNAVAILABLE"), true),
            (answer(429, "RESOURCE_EXHAUSTED"), true),
            (answer(504, "DEADLINE_EXCEEDED"), true),
            (
                RestError::from_error_element(&json!({ "status": "UNAVAILABLE" })),
                true,
            ),
            (RestError::bad_answer("commit", "no valid commitTime"), true),
            (
                RestError::from_transport(io(Io::ConnectionReset), second),
                true,
            ),
            (RestError::from_transport(io(Io::TimedOut), second), false),
            (answer(403, "PERMISSION_DENIED"), false),
            (answer(400, "INVALID_ARGUMENT"), false),
            (
                RestError::from_error_element(&json!({ "message": "no status" })),
                false,
            ),
        ];
        for (error, worth) in rows {
            assert_eq!(error.is_worth_retrying_now(), worth, "{error:?}");
        }
        let err = RestError::bad_answer("runQuery", "expected an array").into_lock_error(PLACE);
        assert_eq!(
            (err.code(), err.message()),
            (
                ErrorCode::ServiceUnavailable,
                format!("{PLACE} answered runQuery with something that is not its answer: expected an array").as_str()
            )
        );
    }

    #[test]
    fn token_failures_pass_through_unchanged() {
        let token = LockError::new(ErrorCode::AuthFailed, "the token endpoint refused");
        let err = RestError::Credentials(token).into_lock_error(PLACE);
        assert_eq!(
            (err.code(), err.message()),
            (ErrorCode::AuthFailed, "the token endpoint refused")
        );
    }
}
