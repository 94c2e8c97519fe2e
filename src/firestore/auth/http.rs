//! What every token request shares: an agent of its own, reading the answer (a token, or a
//! refusal and why), and the messages for failures, which never quote a token or an assertion.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::cache::FetchedToken;
use crate::error::{ErrorCode, LockError, Result};
use crate::firestore::transport::{self, Agent, Response};

/// The most of a token or error answer that is read.
const MAX_ANSWER_BYTES: u64 = 1 << 20;
/// The most of an error description that goes into a message.
const MAX_DETAIL_CHARS: usize = 300;

/// Whether `token` can go into a header unchanged: visible ASCII only.
pub(super) fn is_header_safe(token: &str) -> bool {
    token.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `url` points at this machine.
pub(super) fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Whether a proxy could never reach `url`: this machine, or a link-local address such as
/// a cloud's instance metadata service.
pub(super) fn is_local(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_link_local(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback() || (ip.segments()[0] & 0xffc0) == 0xfe80,
        _ => is_loopback(url),
    }
}

/// Checks an endpoint that is sent a secret (a refresh token, an assertion, a subject token,
/// a bearer token): `https`, or `http` only to this machine, and no user name or password.
/// `what` names the field in messages, e.g. "the `authorized_user` `token_uri`".
pub(super) fn check_secret_endpoint(what: &str, uri: &str) -> Result<url::Url> {
    let url = url::Url::parse(uri)
        .map_err(|_| LockError::invalid_argument(format!("{what} is not a valid URL")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(LockError::invalid_argument(format!(
            "{what} must not contain a user name or password"
        )));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        _ => Err(LockError::invalid_argument(format!(
            "{what} must be an https URL (http only to localhost), got {url}"
        ))),
    }
}

/// How token requests are made: their deadline and whom they trust over TLS (the backend's
/// one policy, `crate::tls`: the system's roots plus its CA file, so that a TLS-inspecting
/// proxy's CA works for token endpoints exactly as for Firestore).
#[derive(Clone)]
pub(crate) struct Http {
    timeout: Duration,
    tls: Arc<rustls::ClientConfig>,
}

impl Http {
    pub(crate) fn new(timeout: Duration, tls: Arc<rustls::ClientConfig>) -> Http {
        Http { timeout, tls }
    }

    /// An agent of our own: token requests must not share a connection budget or timeouts
    /// with Firestore's. It follows no redirect (one would send the credentials elsewhere),
    /// reads at most [`MAX_ANSWER_BYTES`] of an answer, and logs nothing (requests and
    /// answers carry secrets). `direct` bypasses any proxy configured in the environment.
    pub(super) fn agent(&self, direct: bool) -> Agent {
        Agent::new(transport::Config {
            timeout: self.timeout,
            // Roots and an explicit provider from crate::tls, never the process default.
            tls: Arc::clone(&self.tls),
            direct,
            body_limit: MAX_ANSWER_BYTES,
            // Tokens are fetched about once an hour: a connection would not stay open that long.
            max_idle: 0,
        })
    }
}

#[cfg(test)]
impl Http {
    /// Token requests of the unit tests: one second, the system's roots.
    pub(super) fn for_tests() -> Http {
        let tls = crate::tls::system_client_config().unwrap_or_else(|_| {
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            )
        });
        Http::new(Duration::from_secs(1), tls)
    }
}

/// Reads an answer whole: the body of a 2xx answer, else the error for the refusal or the
/// failed request. `secrets` are scrubbed from any text of the answer that goes into a
/// message, in case the endpoint echoes them; `hint` ends the message when there is no answer.
pub(super) fn read_answer(
    what: &str,
    answer: std::result::Result<Response, transport::Error>,
    secrets: &[&str],
    hint: &str,
) -> Result<Vec<u8>> {
    let response = answer.map_err(|e| transport_error(what, e, hint))?;
    if !(200..300).contains(&response.status) {
        return Err(refusal(what, response.status, &response.body, secrets));
    }
    Ok(response.body)
}

/// The error for a 2xx answer that holds no usable token. Nothing of the answer goes into
/// it: a successful answer may hold a token.
pub(super) fn unusable_answer(what: &str, problem: &str) -> LockError {
    LockError::new(
        ErrorCode::AuthFailed,
        format!("{what} answered without a usable token: {problem}"),
    )
}

/// Reads an OAuth token endpoint's or the metadata server's answer (`access_token`,
/// `expires_in`, `token_type`); see [`read_answer`] for `secrets` and `hint`.
pub(super) fn read_token_answer(
    what: &str,
    answer: std::result::Result<Response, transport::Error>,
    secrets: &[&str],
    hint: &str,
) -> Result<FetchedToken> {
    let body = read_answer(what, answer, secrets, hint)?;
    let unparseable = |problem: &str| unusable_answer(what, problem);
    let value: Value =
        serde_json::from_slice(&body).map_err(|_| unparseable("the answer is not JSON"))?;
    let access_token = value
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| unparseable("no `access_token`"))?;
    if !is_header_safe(access_token) {
        return Err(unparseable(
            "the `access_token` has characters an HTTP header cannot carry",
        ));
    }
    match value.get("token_type").and_then(Value::as_str) {
        None => {}
        Some(kind) if kind.eq_ignore_ascii_case("bearer") => {}
        Some(_) => return Err(unparseable("the `token_type` is not `Bearer`")),
    }
    let seconds = value
        .get("expires_in")
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_f64().filter(|s| *s >= 0.0).map(|s| s as u64))
                // Some token services send the number as a string.
                .or_else(|| v.as_str().and_then(|s| s.trim().parse::<u64>().ok()))
        })
        .ok_or_else(|| unparseable("no `expires_in` (a number of seconds)"))?;
    Ok(FetchedToken {
        access_token: access_token.to_owned(),
        lifetime: Duration::from_secs(seconds),
    })
}

/// The error for a non-2xx answer: its status and, when the answer says, why (the OAuth
/// `error` and `error_description`, or the start of a text answer).
fn refusal(what: &str, status: u16, body: &[u8], secrets: &[&str]) -> LockError {
    let code = match status {
        // These say nothing about the credentials and pass when tried again.
        429 => ErrorCode::RateLimited,
        500..=599 => ErrorCode::ServiceUnavailable,
        _ => ErrorCode::AuthFailed,
    };
    let detail = match serde_json::from_slice::<Value>(body) {
        Ok(value) => oauth_error(&value),
        Err(_) => Some(String::from_utf8_lossy(body).trim().to_owned()).filter(|t| !t.is_empty()),
    };
    let mut message = format!("{what} refused to issue a token (HTTP {status})");
    if let Some(detail) = detail {
        message.push_str(": ");
        message.push_str(&clean_detail(&detail, secrets));
    }
    LockError::new(code, message)
}

/// `error: error_description` of an OAuth error answer, or Google's `{"error": {"message"}}`.
fn oauth_error(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    if let Some(message) = error.get("message").and_then(Value::as_str) {
        return Some(message.to_owned());
    }
    let error = error.as_str()?;
    Some(
        match value.get("error_description").and_then(Value::as_str) {
            Some(description) => format!("{error}: {description}"),
            None => error.to_owned(),
        },
    )
}

/// Text from an answer, made fit for a message: secrets replaced, one line, bounded length.
fn clean_detail(text: &str, secrets: &[&str]) -> String {
    let mut text = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret, "***");
        // As the request's form carried it, for an endpoint that quotes the request body.
        let encoded: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        text = text.replace(&encoded, "***");
    }
    let mut clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_DETAIL_CHARS)
        .collect();
    if text.chars().count() > MAX_DETAIL_CHARS {
        clean.push('…');
    }
    clean
}

/// The error for a request that got no (complete) answer; `hint` ends the message when the
/// endpoint was not reached or did not answer in time.
fn transport_error(what: &str, error: transport::Error, hint: &str) -> LockError {
    let code = match &error {
        transport::Error::Timeout => ErrorCode::NetworkTimeout,
        transport::Error::BadRequest(_) => ErrorCode::InvalidArgument,
        transport::Error::BodyExceedsLimit(_) => ErrorCode::AuthFailed,
        _ => ErrorCode::ServiceUnavailable,
    };
    let message = match code {
        ErrorCode::NetworkTimeout => format!("{what} did not answer in time{hint}"),
        ErrorCode::AuthFailed => format!("{what} answered with more than it should"),
        ErrorCode::InvalidArgument => format!("could not make a request to {what}: {error}"),
        _ => format!("could not reach {what}: {error}{hint}"),
    };
    // The transport's errors name the host at most: the assertion is in the body, which they
    // never quote.
    LockError::new(code, message).with_source(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_classified_and_scrubbed() {
        let body =
            br#"{"error":"invalid_grant","error_description":"Invalid JWT: eyJhbGc.secret"}"#;
        let err = refusal("the endpoint", 400, body, &["eyJhbGc.secret"]);
        assert_eq!(err.code(), ErrorCode::AuthFailed);
        assert_eq!(
            err.message(),
            "the endpoint refused to issue a token (HTTP 400): invalid_grant: Invalid JWT: ***"
        );
        let echoed = b"grant_type=refresh_token&refresh_token=1%2F%2Fsecret+token";
        assert_eq!(
            refusal("x", 400, echoed, &["1//secret token"]).message(),
            "x refused to issue a token (HTTP 400): grant_type=refresh_token&refresh_token=***"
        );
        let google =
            br#"{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}"#;
        assert_eq!(
            refusal("x", 403, google, &[]).message(),
            "x refused to issue a token (HTTP 403): Permission denied"
        );
        assert_eq!(
            refusal("x", 404, b"Not Found\r\n", &[]).message(),
            "x refused to issue a token (HTTP 404): Not Found"
        );
        assert_eq!(
            refusal("x", 401, b"", &[]).message(),
            "x refused to issue a token (HTTP 401)"
        );
        assert_eq!(
            refusal("x", 503, b"", &[]).code(),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(refusal("x", 429, b"", &[]).code(), ErrorCode::RateLimited);
        let long = "é".repeat(1000);
        let message = refusal("x", 400, long.as_bytes(), &[]).message().to_owned();
        assert!(message.chars().count() < 400, "{message}");
        assert!(message.ends_with('…'), "{message}");
    }

    #[test]
    fn transport_errors_are_classified() {
        let io = |kind| transport::Error::Io(std::io::Error::new(kind, "io"));
        let code = |error| transport_error("x", error, "").code();
        assert_eq!(
            code(io(std::io::ErrorKind::ConnectionRefused)),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(code(transport::Error::Timeout), ErrorCode::NetworkTimeout);
        assert_eq!(
            code(transport::Error::HostNotFound("x".to_owned())),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(transport::Error::ProxyRefused(407)),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(transport::Error::BodyExceedsLimit(1)),
            ErrorCode::AuthFailed
        );
        assert_eq!(
            code(transport::Error::BadRequest("x".to_owned())),
            ErrorCode::InvalidArgument
        );
    }
}
