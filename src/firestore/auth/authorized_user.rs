//! Tokens for a user (`"type": "authorized_user"`, what `gcloud auth application-default
//! login` writes): the refresh token is exchanged for an access token at `token_uri` (the
//! OAuth 2.0 refresh-token grant, RFC 6749 §6).
//!
//! No `scope` is sent: a refresh token keeps the scopes the user consented to (gcloud asks for
//! `cloud-platform`), and asking for one outside them would be refused. Go's and Node's Google
//! libraries do the same.

use std::fmt;

use serde_json::Value;

use super::cache::{FetchToken, FetchedToken};
use super::fields::Fields;
use super::http::{Http, is_loopback, read_token_answer};
use crate::error::Result;

/// Google's OAuth token endpoint, where a file without `token_uri` sends its refresh token.
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// A user's refresh token and the OAuth client it was issued to.
pub(super) struct AuthorizedUserSource {
    client_id: String,
    client_secret: String,
    refresh_token: String,
    token_uri: String,
    agent: crate::firestore::transport::Agent,
}

impl AuthorizedUserSource {
    /// The credentials in `value`, whose `type` is `authorized_user`.
    pub(super) fn from_value(value: &Value, http: &Http) -> Result<AuthorizedUserSource> {
        let fields = Fields::new(value, "authorized_user");
        let client_id = fields.string("client_id")?;
        let client_secret = fields.secret("client_secret")?;
        let refresh_token = fields.secret("refresh_token")?;
        let token_uri = fields
            .optional_string("token_uri")?
            .unwrap_or_else(|| DEFAULT_TOKEN_URI.to_owned());
        let url = fields.endpoint("token_uri", &token_uri)?;
        Ok(AuthorizedUserSource {
            client_id,
            client_secret,
            refresh_token,
            token_uri,
            // A proxy cannot reach an endpoint on this machine (a test double).
            agent: http.agent(is_loopback(&url)),
        })
    }
}

impl FetchToken for AuthorizedUserSource {
    fn fetch(&self) -> Result<FetchedToken> {
        let what = format!("the OAuth token endpoint {}", self.token_uri);
        let answer = self
            .agent
            .post(&self.token_uri)
            .header("Accept", "application/json")
            .send_form([
                ("grant_type", "refresh_token"),
                ("refresh_token", self.refresh_token.as_str()),
                ("client_id", self.client_id.as_str()),
                ("client_secret", self.client_secret.as_str()),
            ]);
        read_token_answer(
            &what,
            answer,
            &[&self.refresh_token, &self.client_secret],
            "",
        )
    }
}

impl fmt::Debug for AuthorizedUserSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizedUser")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use serde_json::json;

    fn user() -> Value {
        json!({
            "type": "authorized_user",
            "client_id": "123.apps.googleusercontent.com",
            "client_secret": "hunter2-client-secret",
            "refresh_token": "hunter2-refresh-token",
        })
    }

    /// A change to otherwise valid credentials.
    type Change = fn(&mut Value);

    fn parse_with(change: impl FnOnce(&mut Value)) -> Result<AuthorizedUserSource> {
        let mut value = user();
        change(&mut value);
        AuthorizedUserSource::from_value(&value, &Http::for_tests())
    }

    #[test]
    fn the_token_uri_defaults_to_googles() {
        let source = parse_with(|_| {}).unwrap();
        assert_eq!(source.token_uri, DEFAULT_TOKEN_URI);
        assert_eq!(
            format!("{source:?}"),
            "AuthorizedUser { client_id: \"123.apps.googleusercontent.com\", .. }"
        );
    }

    #[test]
    fn missing_or_bad_fields_are_named_without_their_values() {
        let cases: [(&str, Change); 6] = [
            ("`client_id` is missing", |v| v["client_id"] = Value::Null),
            ("`client_secret` is missing", |v| {
                v["client_secret"] = "".into()
            }),
            ("`refresh_token` is missing", |v| {
                v.as_object_mut().unwrap().remove("refresh_token");
            }),
            ("`refresh_token` is not a string", |v| {
                v["refresh_token"] = json!(["hunter2"])
            }),
            ("must be an https URL", |v| {
                v["token_uri"] = "http://example.com/hunter2".into()
            }),
            ("not a valid URL", |v| v["token_uri"] = "hunter2".into()),
        ];
        for (expected, change) in cases {
            let err = parse_with(change).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains(expected), "{expected}: {err}");
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("hunter2-"), "{shown}");
        }
    }
}
