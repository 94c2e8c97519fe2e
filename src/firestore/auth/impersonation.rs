//! Service-account impersonation, the last step of `impersonated_service_account` credentials
//! and of `external_account` credentials with a `service_account_impersonation_url`: IAM's
//! `generateAccessToken` turns a token of the caller into one of the service account.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::cache::FetchedToken;
use super::fields::Fields;
use super::http::{Http, is_header_safe, is_loopback, read_answer, unusable_answer};
use crate::error::Result;
use crate::firestore::timestamp::parse_timestamp_ms;

/// How long an impersonated token lives unless the credentials say otherwise.
pub(super) const DEFAULT_LIFETIME_SECS: u64 = 3600;

/// The service account an impersonation URL names: what lies between its last `/` and
/// `:generateAccessToken`, as Google's libraries read it.
pub(super) fn target_principal(url: &str) -> Option<&str> {
    let end = url.find(":generateAccessToken")?;
    let start = url[..end].rfind('/')? + 1;
    Some(&url[start..end]).filter(|principal| !principal.is_empty())
}

/// A `generateAccessToken` call for one service account.
pub(super) struct Impersonation {
    url: String,
    service_account: String,
    delegates: Vec<String>,
    lifetime_secs: u64,
    agent: crate::firestore::transport::Agent,
}

impl Impersonation {
    /// The impersonation the field `service_account_impersonation_url` of `fields` describes,
    /// through `delegates` (e-mail addresses or `projects/-/serviceAccounts/…` names), for
    /// tokens living `lifetime_secs`.
    pub(super) fn new(
        fields: &Fields<'_>,
        url: String,
        delegates: Vec<String>,
        lifetime_secs: u64,
        http: &Http,
    ) -> Result<Impersonation> {
        const FIELD: &str = "service_account_impersonation_url";
        let parsed = fields.endpoint(FIELD, &url)?;
        let service_account = target_principal(&url)
            .ok_or_else(|| {
                fields.invalid(
                    FIELD,
                    "does not name a service account (…/serviceAccounts/EMAIL:generateAccessToken)",
                )
            })?
            .to_owned();
        // The IAM API wants resource names; the credentials files gcloud writes hold e-mail
        // addresses.
        let delegates = delegates
            .into_iter()
            .map(|delegate| {
                if delegate.starts_with("projects/") {
                    delegate
                } else {
                    format!("projects/-/serviceAccounts/{delegate}")
                }
            })
            .collect();
        Ok(Impersonation {
            agent: http.agent(is_loopback(&parsed)),
            url,
            service_account,
            delegates,
            lifetime_secs,
        })
    }

    /// The service account impersonated.
    pub(super) fn service_account(&self) -> &str {
        &self.service_account
    }

    /// A token of the service account for `scope`, asked for with the caller's
    /// `source_token`.
    pub(super) fn generate(&self, source_token: &str, scope: &str) -> Result<FetchedToken> {
        let what = format!("the IAM credentials endpoint {}", self.url);
        let mut body = json!({
            "scope": [scope],
            "lifetime": format!("{}s", self.lifetime_secs),
        });
        if !self.delegates.is_empty() {
            body["delegates"] = json!(self.delegates);
        }
        let answer = self
            .agent
            .post(&self.url)
            .header("Authorization", &format!("Bearer {source_token}"))
            .header("Accept", "application/json")
            .send_json(&body);
        let body = read_answer(&what, answer, &[source_token], "")?;
        parse_generated(&what, &body, unix_now_ms())
    }
}

/// Reads `generateAccessToken`'s answer (`accessToken`, `expireTime`) at `now_ms`.
fn parse_generated(what: &str, body: &[u8], now_ms: i64) -> Result<FetchedToken> {
    let unusable = |problem: &str| unusable_answer(what, problem);
    let value: Value =
        serde_json::from_slice(body).map_err(|_| unusable("the answer is not JSON"))?;
    let access_token = value
        .get("accessToken")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| unusable("no `accessToken`"))?;
    if !is_header_safe(access_token) {
        return Err(unusable(
            "the `accessToken` has characters an HTTP header cannot carry",
        ));
    }
    let expires_ms = value
        .get("expireTime")
        .and_then(Value::as_str)
        .and_then(parse_timestamp_ms)
        .ok_or_else(|| unusable("no `expireTime` (an RFC 3339 UTC time)"))?;
    // Already expired counts as a zero lifetime: the cache then asks again next time.
    let lifetime_ms = u64::try_from(expires_ms.saturating_sub(now_ms)).unwrap_or(0);
    Ok(FetchedToken {
        access_token: access_token.to_owned(),
        lifetime: Duration::from_millis(lifetime_ms),
    })
}

fn unix_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The lifetime `service_account_impersonation.token_lifetime_seconds` asks for: Google
/// accepts 600 s to 12 h (above 1 h only where an organization policy allows it).
pub(super) fn lifetime_from(fields: &Fields<'_>) -> Result<u64> {
    const FIELD: &str = "token_lifetime_seconds";
    let Some(options) = fields.object("service_account_impersonation")? else {
        return Ok(DEFAULT_LIFETIME_SECS);
    };
    match options.value(FIELD) {
        None => Ok(DEFAULT_LIFETIME_SECS),
        Some(value) => value
            .as_u64()
            .filter(|seconds| (600..=43_200).contains(seconds))
            .ok_or_else(|| options.invalid(FIELD, "is not a number of seconds from 600 to 43200")),
    }
}

impl std::fmt::Debug for Impersonation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.service_account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn the_target_principal_is_read_from_the_url() {
        for (url, expected) in [
            (
                "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/\
                 sa@p.iam.gserviceaccount.com:generateAccessToken",
                Some("sa@p.iam.gserviceaccount.com"),
            ),
            (
                "http://127.0.0.1:1/x/sa@p:generateAccessToken",
                Some("sa@p"),
            ),
            (
                "https://iamcredentials.googleapis.com/v1/:generateAccessToken",
                None,
            ),
            (
                "https://iamcredentials.googleapis.com/v1/sa@p:signBlob",
                None,
            ),
        ] {
            assert_eq!(target_principal(url), expected, "{url}");
        }
    }

    #[test]
    fn answers_give_the_token_and_its_remaining_lifetime() {
        let now = parse_timestamp_ms("2030-01-01T00:00:00Z").unwrap();
        let body = br#"{"accessToken":"ya29.impersonated","expireTime":"2030-01-01T01:00:00Z"}"#;
        let token = parse_generated("x", body, now).unwrap();
        assert_eq!(token.access_token, "ya29.impersonated");
        assert_eq!(token.lifetime, Duration::from_secs(3600));
        let fractional = br#"{"accessToken":"t","expireTime":"2030-01-01T00:10:00.500Z"}"#;
        let token = parse_generated("x", fractional, now).unwrap();
        assert_eq!(token.lifetime, Duration::from_millis(600_500));
        let past = br#"{"accessToken":"t","expireTime":"2029-12-31T23:00:00Z"}"#;
        assert_eq!(
            parse_generated("x", past, now).unwrap().lifetime,
            Duration::ZERO
        );
    }

    #[test]
    fn unusable_answers_are_auth_failed_and_not_quoted() {
        for body in [
            &br#"{"accessToken":"ya29.leaked"}"#[..],
            br#"{"accessToken":"ya29.leaked","expireTime":"in an hour"}"#,
            br#"{"access_token":"ya29.leaked","expireTime":"2030-01-01T01:00:00Z"}"#,
            br#"{"accessToken":"ya29 leaked","expireTime":"2030-01-01T01:00:00Z"}"#,
            b"ya29.leaked",
        ] {
            let err = parse_generated("the endpoint", body, 0).err().unwrap();
            assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
            assert!(!format!("{err} {err:?}").contains("leaked"), "{err:?}");
        }
    }
}
