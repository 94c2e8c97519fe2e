//! Credentials for Firestore: where the bearer token comes from, and the cache that keeps one
//! token until shortly before it expires.
//!
//! A service-account key signs a one-hour JWT assertion (RS256) that Google's OAuth endpoint
//! exchanges for an access token; the metadata server of GCE, Cloud Run and GKE hands out
//! tokens for the attached service account directly. Either token is cached and fetched again
//! 5 minutes (at most a quarter of its lifetime) before it expires, by one caller at a time.
//!
//! Errors: the token endpoint or metadata server refusing (any other non-2xx answer) or
//! answering something that is not a token → `AuthFailed`; a 5xx answer → `ServiceUnavailable`
//! and a 429 → `RateLimited`, because those say nothing about the credentials and go away when
//! retried; unreachable → `ServiceUnavailable`; too slow → `NetworkTimeout`; unusable key
//! material → `InvalidArgument`, when the [`TokenProvider`] is made. Neither messages nor `Debug`
//! output ever contain a private key, an assertion or a token.
//!
//! Each kind of credentials has a file of its own (`service_account.rs`, `metadata.rs`,
//! `fixed.rs`) and is chosen in [`TokenProvider::new`]. A kind whose tokens expire implements
//! `FetchToken` and leaves keeping and refreshing them to `cache.rs`; `http.rs` holds what its
//! token requests share with the others (the agent, reading the answer, the messages).

mod cache;
mod fixed;
mod http;
mod metadata;
mod service_account;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use self::cache::Cached;
use self::fixed::FixedToken;
use self::metadata::MetadataSource;
use self::service_account::ServiceAccountSource;
use crate::error::{LockError, Result};

/// The OAuth scope of Cloud Datastore and Firestore.
const SCOPE: &str = "https://www.googleapis.com/auth/datastore";

/// How the Firestore backend authenticates.
///
/// `Debug` shows the kind of credentials and the service account's e-mail address at most,
/// never a key or a token.
#[derive(Clone)]
#[non_exhaustive]
pub enum Credentials {
    /// Google's usual order: `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key file), then
    /// the GCE/Cloud Run metadata server.
    Default,
    /// A service-account key, as the JSON text of the key file.
    ServiceAccountJson(String),
    /// A service-account key file.
    ServiceAccountFile(PathBuf),
    /// The metadata server (GCE, Cloud Run, GKE workload identity). Base URL from
    /// `GCE_METADATA_HOST` (`host[:port]`, Google's convention) else `metadata.google.internal`.
    MetadataServer,
    /// A fixed bearer token (the emulator accepts `owner`).
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Default => f.write_str("Default"),
            Credentials::ServiceAccountJson(json) => {
                // The e-mail address says which account without saying anything secret; the
                // rest of the JSON is the key.
                let parsed = serde_json::from_str::<Value>(json).ok();
                let email = parsed
                    .as_ref()
                    .and_then(|value| value.get("client_email"))
                    .and_then(Value::as_str);
                let mut d = f.debug_struct("ServiceAccountJson");
                if let Some(email) = email {
                    d.field("client_email", &email);
                }
                d.finish_non_exhaustive()
            }
            Credentials::ServiceAccountFile(path) => {
                f.debug_tuple("ServiceAccountFile").field(path).finish()
            }
            Credentials::MetadataServer => f.write_str("MetadataServer"),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// Produces the `Authorization` header value. Thread-safe; one refresh at a time.
pub(crate) trait TokenSource: Send + Sync + fmt::Debug {
    /// The header value, e.g. `Bearer ya29…`, fetching a token first when the cached one is
    /// missing or due for refresh.
    fn authorization(&self) -> Result<String>;
}

/// The token cache the Firestore backend uses: turns [`Credentials`] into `Authorization`
/// header values, fetching a token when there is none or the cached one is about to expire.
/// Also usable to authorise your own calls to Google APIs under the Firestore scope.
///
/// Thread-safe. One thread fetches at a time; the others wait for it and use its token.
/// `Debug` shows the kind of credentials and the service account's e-mail address at most.
pub struct TokenProvider {
    source: Box<dyn TokenSource>,
}

impl TokenProvider {
    /// Reads the key file, if any, and checks the key (or the metadata server's address)
    /// without any network call; token requests will time out after `timeout`.
    ///
    /// Fails with `InvalidArgument` for a zero `timeout`, an unreadable key file, or a key that
    /// is not a usable service-account key.
    pub fn new(credentials: &Credentials, timeout: Duration) -> Result<TokenProvider> {
        if timeout.is_zero() {
            return Err(LockError::invalid_argument(
                "the token request timeout must be above zero",
            ));
        }
        let source = match credentials {
            Credentials::Default => match application_credentials_file() {
                Some(path) => Cached::boxed(ServiceAccountSource::from_file(&path, timeout)?),
                None => Cached::boxed(MetadataSource::from_env(timeout)?),
            },
            Credentials::ServiceAccountJson(json) => {
                Cached::boxed(ServiceAccountSource::from_json(json, timeout)?)
            }
            Credentials::ServiceAccountFile(path) => {
                Cached::boxed(ServiceAccountSource::from_file(path, timeout)?)
            }
            Credentials::MetadataServer => Cached::boxed(MetadataSource::from_env(timeout)?),
            Credentials::Token(token) => Box::new(FixedToken::new(token)?),
        };
        Ok(TokenProvider { source })
    }

    /// The `Authorization` header value (`Bearer …`), from the cache or freshly fetched.
    ///
    /// Fails with `AuthFailed` when the token endpoint or metadata server refuses,
    /// `ServiceUnavailable` when it cannot be reached, `NetworkTimeout` when it does not answer
    /// in time. When a refresh fails while the cached token is still valid, the cached token
    /// is used and the refresh is tried again a few seconds later.
    pub fn authorization(&self) -> Result<String> {
        self.source.authorization()
    }
}

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TokenProvider").field(&self.source).finish()
    }
}

/// `GOOGLE_APPLICATION_CREDENTIALS`, when set to something.
fn application_credentials_file() -> Option<PathBuf> {
    // Google's libraries treat an empty value as unset.
    std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    const KEY_FILE: &str = include_str!("../../../tests/data/test-service-account.json");

    fn key_json() -> Value {
        serde_json::from_str(KEY_FILE).unwrap()
    }

    #[test]
    fn debug_shows_the_kind_and_the_account_only() {
        let json = key_json().to_string();
        let shown = format!(
            "{:?} {:?} {:?} {:?} {:?}",
            Credentials::Default,
            Credentials::ServiceAccountJson(json.clone()),
            Credentials::ServiceAccountFile("/keys/sa.json".into()),
            Credentials::MetadataServer,
            Credentials::Token("ya29.secret-token".into()),
        );
        assert_eq!(
            shown,
            "Default ServiceAccountJson { client_email: \
             \"syncguard-test@syncguard-test.iam.gserviceaccount.com\", .. } \
             ServiceAccountFile(\"/keys/sa.json\") MetadataServer Token(<redacted>)"
        );
        assert_eq!(
            format!("{:?}", Credentials::ServiceAccountJson("{oops".into())),
            "ServiceAccountJson { .. }"
        );

        let mut json = key_json();
        json["token_uri"] = "https://oauth2.googleapis.com/token".into();
        let credentials = Credentials::ServiceAccountJson(json.to_string());
        let provider = TokenProvider::new(&credentials, Duration::from_secs(1)).unwrap();
        let shown = format!("{provider:?}");
        assert_eq!(
            shown,
            "TokenProvider(ServiceAccount { client_email: \
             \"syncguard-test@syncguard-test.iam.gserviceaccount.com\", .. })"
        );
        let fixed = TokenProvider::new(
            &Credentials::Token("ya29.secret-token".into()),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(
            format!("{fixed:?}"),
            "TokenProvider(FixedToken(<redacted>))"
        );
        let metadata = MetadataSource::new("127.0.0.1:1".into(), Duration::from_secs(1));
        assert_eq!(
            format!("{metadata:?}"),
            "MetadataServer { host: \"127.0.0.1:1\", .. }"
        );
    }

    #[test]
    fn fixed_tokens_are_sent_as_bearer_tokens() {
        let provider =
            TokenProvider::new(&Credentials::Token("owner".into()), Duration::from_secs(1))
                .unwrap();
        assert_eq!(provider.authorization().unwrap(), "Bearer owner");
        for bad in ["", "  ", "a\r\nX-Injected: 1"] {
            let err = TokenProvider::new(&Credentials::Token(bad.into()), Duration::from_secs(1))
                .err()
                .unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument);
            assert!(!err.to_string().contains("Injected"), "{err}");
        }
        let err = TokenProvider::new(&Credentials::Token("owner".into()), Duration::ZERO)
            .err()
            .unwrap();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
    }
}
