//! Firestore's v1 REST API over one kept-alive `ureq` agent: requests, error mapping by the
//! body's `status`, the typed-value codec, and server times for the clock-skew estimate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::auth::TokenProvider;
use super::skew::SkewEstimator;
use crate::error::{ErrorCode, LockError, Result};

/// The production endpoint's host.
const PRODUCTION_HOST: &str = "firestore.googleapis.com";

/// One database's documents endpoint, and the means to call it.
pub(crate) struct RestClient {
    agent: ureq::Agent,
    /// `…/v1/projects/{project}/databases/{database}/documents`
    documents_url: String,
    /// `projects/{project}/databases/{database}/documents`: the prefix of document names.
    documents_name: String,
    /// `Firestore at HOST (project P, database D)`, for messages.
    place: String,
    timeout: Duration,
    tokens: TokenProvider,
    pub skew: SkewEstimator,
    requests: AtomicU64,
}

impl RestClient {
    pub fn new(
        project: &str,
        database: &str,
        emulator_host: Option<&str>,
        tokens: TokenProvider,
        timeout: Duration,
    ) -> RestClient {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_idle_connections_per_host(16)
            .build();
        let base = match emulator_host {
            Some(host) => format!("http://{host}"),
            None => format!("https://{PRODUCTION_HOST}"),
        };
        let host = emulator_host.unwrap_or(PRODUCTION_HOST);
        let documents_name = format!("projects/{project}/databases/{database}/documents");
        RestClient {
            agent: ureq::Agent::new_with_config(config),
            documents_url: format!("{base}/v1/{documents_name}"),
            documents_name,
            place: format!("Firestore at {host} (project {project}, database {database})"),
            timeout,
            tokens,
            skew: SkewEstimator::default(),
            requests: AtomicU64::new(0),
        }
    }

    /// The full resource name of a document.
    pub fn document_name(&self, collection: &str, id: &str) -> String {
        format!("{}/{collection}/{id}", self.documents_name)
    }

    /// HTTP requests sent so far (token requests not included).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// POSTs `body` to `documents{verb}` (e.g. `:commit`) and returns the JSON answer.
    pub fn post(&self, verb: &str, body: &Value) -> Result<Value> {
        let authorization = self.tokens.authorization()?;
        let url = format!("{}{verb}", self.documents_url);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let response = self
            .agent
            .post(&url)
            .header("Authorization", &authorization)
            .send_json(body)
            .map_err(|e| transport_error(&self.place, self.timeout, e))?;
        let received = Instant::now();
        let status = response.status().as_u16();
        let text = response
            .into_body()
            .read_to_string()
            .map_err(|e| transport_error(&self.place, self.timeout, e))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            return Err(api_error(&self.place, status, &value));
        }
        if let Some(server_ms) = server_time_ms(&value) {
            self.skew.observe(server_ms, sent, received);
        }
        Ok(value)
    }

    /// Commits `writes` atomically. `Ok(false)` when a write's precondition failed: a
    /// document changed since it was read, so the compare-and-set did not happen.
    pub fn commit(&self, writes: Vec<Value>) -> Result<bool> {
        match self.post(":commit", &json!({ "writes": writes })) {
            Ok(_) => Ok(true),
            Err(error) if is_precondition_failure(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// The transport failed: no answer to map. The message names `place` (endpoint, project,
/// database) and the cause: refused, name not resolved, TLS, timeout.
fn transport_error(place: &str, timeout: Duration, error: ureq::Error) -> LockError {
    use std::io::ErrorKind as Io;
    let (code, cause) = match &error {
        ureq::Error::Timeout(_) => (
            ErrorCode::NetworkTimeout,
            format!("no answer within the timeout ({timeout:?})"),
        ),
        ureq::Error::Io(io) if matches!(io.kind(), Io::TimedOut | Io::WouldBlock) => (
            ErrorCode::NetworkTimeout,
            format!("no answer within the timeout ({timeout:?})"),
        ),
        ureq::Error::Io(io) if io.kind() == Io::ConnectionRefused => (
            ErrorCode::ServiceUnavailable,
            "connection refused".to_owned(),
        ),
        ureq::Error::HostNotFound => (
            ErrorCode::ServiceUnavailable,
            "host name not resolved".to_owned(),
        ),
        ureq::Error::Io(io) => {
            let text = io.to_string();
            let cause = match text.split_once("failed to lookup address information: ") {
                Some((_, why)) => format!("host name not resolved ({why})"),
                None if matches!(
                    io.kind(),
                    Io::ConnectionReset
                        | Io::ConnectionAborted
                        | Io::BrokenPipe
                        | Io::UnexpectedEof
                ) =>
                {
                    format!("connection lost ({text})")
                }
                None => text,
            };
            (ErrorCode::ServiceUnavailable, cause)
        }
        ureq::Error::ConnectionFailed => (
            ErrorCode::ServiceUnavailable,
            "connection failed".to_owned(),
        ),
        ureq::Error::Rustls(tls) => (ErrorCode::ServiceUnavailable, format!("TLS failure: {tls}")),
        ureq::Error::Tls(reason) => (
            ErrorCode::ServiceUnavailable,
            format!("TLS failure: {reason}"),
        ),
        other => (ErrorCode::Internal, other.to_string()),
    };
    let message = match code {
        ErrorCode::NetworkTimeout => format!("{place} did not answer in time: {cause}"),
        ErrorCode::ServiceUnavailable => format!("cannot reach {place}: {cause}"),
        _ => format!("request to {place} failed: {cause}"),
    };
    // ureq's errors name the URL at most, which holds no secret (the token is a header).
    LockError::new(code, message).with_source(error)
}

/// The `status` of an error answer (`ABORTED`, `FAILED_PRECONDITION`, …), kept as the
/// error's source so that conflicts are told apart without reading the message.
#[derive(Debug)]
struct ApiStatus(String);

impl std::fmt::Display for ApiStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Firestore status {}", self.0)
    }
}

impl std::error::Error for ApiStatus {}

/// The `status` of the answer a [`LockError`] was made from, if it was.
fn api_status(error: &LockError) -> Option<&str> {
    std::error::Error::source(error)?
        .downcast_ref::<ApiStatus>()
        .map(|status| status.0.as_str())
}

/// An error answer from `place`, classified by the body's `status` (HTTP codes are ambiguous:
/// 400 is both INVALID_ARGUMENT and FAILED_PRECONDITION).
pub(crate) fn api_error(place: &str, http_status: u16, body: &Value) -> LockError {
    let error = &body["error"];
    let status = error["status"].as_str().unwrap_or("");
    let message = error["message"].as_str().unwrap_or("no error message");
    let code = match status {
        "UNAVAILABLE" | "INTERNAL" | "ABORTED" => ErrorCode::ServiceUnavailable,
        "DEADLINE_EXCEEDED" => ErrorCode::NetworkTimeout,
        "PERMISSION_DENIED" | "UNAUTHENTICATED" => ErrorCode::AuthFailed,
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => ErrorCode::InvalidArgument,
        "RESOURCE_EXHAUSTED" => ErrorCode::RateLimited,
        "" => match http_status {
            401 | 403 => ErrorCode::AuthFailed,
            429 => ErrorCode::RateLimited,
            502..=504 => ErrorCode::ServiceUnavailable,
            _ => ErrorCode::Internal,
        },
        _ => ErrorCode::Internal,
    };
    let hint = if status == "FAILED_PRECONDITION" && message.contains("index") {
        " — the lock queries need the single-field index on `lockId` in the lock collection; \
         create it (or remove its exemption) in the Firestore console"
    } else {
        ""
    };
    let shown = if status.is_empty() {
        "no status"
    } else {
        status
    };
    let message: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(500)
        .collect();
    LockError::new(
        code,
        format!("{place} answered HTTP {http_status} {shown}: {message}{hint}"),
    )
    .with_source(ApiStatus(status.to_owned()))
}

/// Whether an error is Firestore's ABORTED (a conflict with a transaction, worth retrying).
pub(crate) fn is_aborted(error: &LockError) -> bool {
    api_status(error) == Some("ABORTED")
}

/// Whether a commit failed only because a `currentDocument` precondition did not hold.
fn is_precondition_failure(error: &LockError) -> bool {
    matches!(
        api_status(error),
        Some("FAILED_PRECONDITION" | "ALREADY_EXISTS" | "NOT_FOUND")
    )
}

/// The server time an answer carries (`commitTime`, or a `readTime`), in Unix ms.
fn server_time_ms(value: &Value) -> Option<i64> {
    let time = match value {
        Value::Object(map) => map.get("commitTime"),
        Value::Array(items) => items.iter().find_map(|item| item.get("readTime")),
        _ => None,
    }?;
    parse_timestamp_ms(time.as_str()?)
}

/// Parses an RFC 3339 UTC timestamp as Firestore writes it (`2026-11-22T14:17:00.514324Z`).
pub(crate) fn parse_timestamp_ms(text: &str) -> Option<i64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.splitn(3, ':').map(str::parse::<i64>);
    let (hour, minute, second) = (
        clock.next()?.ok()?,
        clock.next()?.ok()?,
        clock.next()?.ok()?,
    );
    let millis = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(3)
        .collect::<String>()
        .parse::<i64>()
        .ok()?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), the classic era-based formula.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

// --- typed values -----------------------------------------------------------------------------

pub(crate) fn string_value(value: &str) -> Value {
    json!({ "stringValue": value })
}

pub(crate) fn integer_value(value: i64) -> Value {
    // int64 travels as a decimal string in Firestore's JSON.
    json!({ "integerValue": value.to_string() })
}

/// The fields of a document resource.
pub(crate) fn fields(document: &Value) -> Option<&Map<String, Value>> {
    document.get("fields")?.as_object()
}

pub(crate) fn get_string<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    fields.get(name)?.get("stringValue")?.as_str()
}

pub(crate) fn get_integer(fields: &Map<String, Value>, name: &str) -> Option<i64> {
    let value = fields.get(name)?;
    match value.get("integerValue")? {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_i64(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACE: &str = "Firestore at 127.0.0.1:8080 (project p, database (default))";

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_timestamp_ms("2026-11-22T14:17:00.514324Z"),
            Some(1_795_357_020_514)
        );
        assert_eq!(
            parse_timestamp_ms("2000-02-29T12:00:00.000Z"),
            Some(951_825_600_000)
        );
        for bad in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-11-22T14:17:00+01:00",
            "x-y-zTa:b:cZ",
        ] {
            assert_eq!(parse_timestamp_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn statuses_map_by_the_table() {
        let error = |http: u16, status: &str| {
            api_error(
                PLACE,
                http,
                &json!({"error": {"code": http, "message": "m", "status": status}}),
            )
        };
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
            (502, "", ErrorCode::ServiceUnavailable),
        ];
        for (http, status, code) in cases {
            assert_eq!(error(http, status).code(), code, "{status}");
        }
        assert!(is_aborted(&error(409, "ABORTED")));
        assert!(is_precondition_failure(&error(400, "FAILED_PRECONDITION")));
        assert!(is_precondition_failure(&error(409, "ALREADY_EXISTS")));
        assert!(!is_precondition_failure(&error(409, "ABORTED")));
        assert!(!is_aborted(&error(503, "UNAVAILABLE")));
        let index = api_error(
            PLACE,
            400,
            &json!({"error": {"message": "The query requires an index.", "status": "FAILED_PRECONDITION"}}),
        );
        assert!(index.message().contains("lockId"), "{index}");
    }

    /// Each transport failure: its code and message (place and cause).
    #[test]
    fn transport_failures_name_the_place_and_the_cause() {
        let io = |kind, text: &str| ureq::Error::Io(std::io::Error::new(kind, text.to_owned()));
        let second = Duration::from_secs(1);
        let rows = [
            (
                io(
                    std::io::ErrorKind::ConnectionRefused,
                    "Connection refused (os error 111)",
                ),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: connection refused"),
            ),
            (
                io(
                    std::io::ErrorKind::Other,
                    "failed to lookup address information: Name or service not known",
                ),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: host name not resolved (Name or service not known)"),
            ),
            (
                ureq::Error::HostNotFound,
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: host name not resolved"),
            ),
            (
                ureq::Error::Tls("no root certificates"),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: TLS failure: no root certificates"),
            ),
            (
                ureq::Error::Timeout(ureq::Timeout::Global),
                ErrorCode::NetworkTimeout,
                format!("{PLACE} did not answer in time: no answer within the timeout (1s)"),
            ),
            (
                io(std::io::ErrorKind::TimedOut, "timed out"),
                ErrorCode::NetworkTimeout,
                format!("{PLACE} did not answer in time: no answer within the timeout (1s)"),
            ),
            (
                io(
                    std::io::ErrorKind::ConnectionReset,
                    "Connection reset by peer",
                ),
                ErrorCode::ServiceUnavailable,
                format!("cannot reach {PLACE}: connection lost (Connection reset by peer)"),
            ),
        ];
        for (error, code, message) in rows {
            let err = transport_error(PLACE, second, error);
            assert_eq!((err.code(), err.message()), (code, message.as_str()));
        }
    }

    #[test]
    fn error_answers_name_the_place_and_the_status() {
        let err = api_error(
            PLACE,
            503,
            &json!({"error": {"code": 503, "message": "down\nfor now", "status": "UNAVAILABLE"}}),
        );
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        assert_eq!(
            err.message(),
            format!("{PLACE} answered HTTP 503 UNAVAILABLE: down for now")
        );
        let err = api_error(PLACE, 502, &Value::Null);
        assert_eq!(
            err.message(),
            format!("{PLACE} answered HTTP 502 no status: no error message")
        );
        // The status is read from the answer, not from the message: a project named after a
        // status changes nothing.
        let odd = "Firestore at h (project x ABORTED: y, database d)";
        assert!(!is_aborted(&api_error(
            odd,
            503,
            &json!({"error": {"status": "UNAVAILABLE"}})
        )));
    }

    #[test]
    fn values_round_trip() {
        let doc = json!({"fields": {
            "s": string_value("x"),
            "i": integer_value(1_795_357_020_514),
            "n": {"integerValue": 7},
            "wrong": {"doubleValue": 1.5}
        }});
        let f = fields(&doc).unwrap();
        assert_eq!(get_string(f, "s"), Some("x"));
        assert_eq!(get_integer(f, "i"), Some(1_795_357_020_514));
        assert_eq!(get_integer(f, "n"), Some(7));
        assert_eq!(get_integer(f, "wrong"), None);
        assert_eq!(get_string(f, "i"), None);
    }
}
