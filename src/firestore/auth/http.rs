//! What every token request shares: an agent of its own, reading the answer (a token, or a
//! refusal and why), and the messages for failures, which never quote a token or an assertion.

use std::time::Duration;

use serde_json::Value;

use super::cache::FetchedToken;
use crate::error::{ErrorCode, LockError, Result};

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

/// An agent of our own: token requests must not share a connection budget or timeouts with
/// Firestore's, and error answers must be readable. `direct` bypasses any proxy configured in
/// the environment.
pub(super) fn agent(timeout: Duration, direct: bool) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // Token endpoints do not redirect; following one would send the credentials elsewhere.
        .max_redirects(0)
        .max_redirects_will_error(false)
        .user_agent(concat!("syncguard/", env!("CARGO_PKG_VERSION")))
        // The system's roots and an explicit provider (crate::tls), never the process default.
        .tls_config(crate::tls::system_ureq_config());
    if direct {
        config = config.proxy(None);
    }
    ureq::Agent::new_with_config(config.build())
}

/// Reads a token endpoint's or metadata server's answer. `secrets` are scrubbed from any text
/// of the answer that goes into a message, in case the endpoint echoes them; `hint` ends the
/// message when there is no answer.
pub(super) fn read_token_answer(
    what: &str,
    answer: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    secrets: &[&str],
    hint: &str,
) -> Result<FetchedToken> {
    let mut response = answer.map_err(|e| transport_error(what, e, hint))?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_vec()
        .map_err(|e| transport_error(what, e, ""))?;
    if !(200..300).contains(&status) {
        return Err(refusal(what, status, &body, secrets));
    }
    // A successful answer holds the token: nothing of it may go into a message.
    let unparseable = |problem: &str| {
        LockError::new(
            ErrorCode::AuthFailed,
            format!("{what} answered HTTP {status} without a usable token: {problem}"),
        )
    };
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
fn transport_error(what: &str, error: ureq::Error, hint: &str) -> LockError {
    let code = match &error {
        ureq::Error::Timeout(_) => ErrorCode::NetworkTimeout,
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            ErrorCode::NetworkTimeout
        }
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
            ErrorCode::InvalidArgument
        }
        ureq::Error::BodyExceedsLimit(_) => ErrorCode::AuthFailed,
        _ => ErrorCode::ServiceUnavailable,
    };
    let message = match code {
        ErrorCode::NetworkTimeout => format!("{what} did not answer in time{hint}"),
        ErrorCode::AuthFailed => format!("{what} answered with more than a token"),
        ErrorCode::InvalidArgument => format!("could not make a request to {what}: {error}"),
        _ => format!("could not reach {what}: {error}{hint}"),
    };
    // ureq's errors name the host or URL at most: the assertion is in the body, which they
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
        let io = |kind| ureq::Error::Io(std::io::Error::new(kind, "io"));
        let code = |error| transport_error("x", error, "").code();
        assert_eq!(
            code(io(std::io::ErrorKind::ConnectionRefused)),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(io(std::io::ErrorKind::TimedOut)),
            ErrorCode::NetworkTimeout
        );
        assert_eq!(
            code(ureq::Error::HostNotFound),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(ureq::Error::ConnectionFailed),
            ErrorCode::ServiceUnavailable
        );
        assert_eq!(
            code(ureq::Error::BodyExceedsLimit(1)),
            ErrorCode::AuthFailed
        );
    }
}
