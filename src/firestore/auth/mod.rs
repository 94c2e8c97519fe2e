//! Credentials for Firestore: where the bearer token comes from, and the cache that keeps one
//! token until shortly before it expires.
//!
//! The kinds of credentials are those of Google's client libraries, told apart by the `type`
//! of their JSON:
//!
//! - `service_account` (a key file): the key signs a one-hour JWT assertion (RS256) that the
//!   key's `token_uri` exchanges for an access token;
//! - `authorized_user` (what `gcloud auth application-default login` writes): the refresh
//!   token is exchanged for an access token at `token_uri`;
//! - `external_account` (Workload Identity Federation): a token of another identity provider,
//!   read from a file or a URL, is exchanged at Google's STS, then optionally for a service
//!   account's through IAM (`service_account_impersonation_url`);
//! - `impersonated_service_account`: a user's or a service account's token is exchanged for
//!   another service account's through IAM, via `delegates` if any;
//! - the metadata server of GCE, Cloud Run and GKE hands out tokens for the attached service
//!   account directly;
//! - a fixed token is sent as it is.
//!
//! [`Credentials::Default`] looks for them in Google's order (`adc.rs`). Every token but a
//! fixed one is cached and fetched again 5 minutes (at most a quarter of its lifetime) before
//! it expires, by one caller at a time.
//!
//! Errors: a token endpoint, STS, IAM, the subject-token URL or the metadata server refusing
//! (any other non-2xx answer) or answering something that is not a token → `AuthFailed`, as
//! is an unreadable subject-token file; a 5xx answer → `ServiceUnavailable` and a 429 →
//! `RateLimited`, because those say nothing about the credentials and go away when retried;
//! unreachable → `ServiceUnavailable`; too slow → `NetworkTimeout`. Unusable credentials — an
//! unreadable or invalid file, a missing field, an unsupported `type` or subject-token source
//! — → `InvalidArgument`, when the [`TokenProvider`] is made, naming the file and the field.
//! Neither messages nor `Debug` output ever contain a private key, an assertion, a client
//! secret, a refresh token, a subject token or an access token.
//!
//! Each kind of credentials has a file of its own (`service_account.rs`,
//! `authorized_user.rs`, `external_account.rs` with `subject_token.rs`, `impersonated.rs`,
//! `metadata.rs`, `fixed.rs`); `json.rs` reads credentials JSON and picks the kind by its
//! `type`, `impersonation.rs` is the IAM step two kinds share. A kind whose tokens expire
//! implements `FetchToken` and leaves keeping and refreshing them to `cache.rs`; `http.rs`
//! holds what its requests share with the others (the agent, reading the answer, the
//! messages).

mod adc;
mod authorized_user;
mod cache;
mod external_account;
mod fields;
mod fixed;
mod http;
mod impersonated;
mod impersonation;
mod json;
mod metadata;
mod service_account;
mod source;
mod subject_token;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use self::cache::Cached;
use self::fixed::FixedToken;
use self::json::Loaded;
use self::metadata::MetadataSource;
use self::service_account::ServiceAccountSource;
use self::source::SCOPE;
pub(crate) use self::source::TokenSource;
use crate::error::{LockError, Result};

/// How the Firestore backend authenticates.
///
/// `Debug` shows the kind of credentials and identifiers that grant nothing (a service
/// account's e-mail address, an OAuth client id, a workload identity pool, a file's path),
/// never a key, a secret or a token.
#[derive(Clone)]
#[non_exhaustive]
pub enum Credentials {
    /// Application Default Credentials, in the order Google's client libraries look:
    ///
    /// 1. the credentials file `GOOGLE_APPLICATION_CREDENTIALS` names, of any type
    ///    [`Credentials::File`] accepts (when the variable is set and not empty, the file must
    ///    be readable and valid: there is no falling through to the next step);
    /// 2. gcloud's well-known file `application_default_credentials.json` (what
    ///    `gcloud auth application-default login` writes), in the directory
    ///    `CLOUDSDK_CONFIG` names, else in `$HOME/.config/gcloud` (`%APPDATA%\gcloud` on
    ///    Windows), when the file exists;
    /// 3. the metadata server of GCE, Cloud Run and GKE, as [`Credentials::MetadataServer`].
    Default,
    /// Credentials JSON of any supported `type`: `service_account`, `authorized_user`,
    /// `external_account` (file- and URL-sourced subject tokens, optionally with service
    /// account impersonation; AWS, executable and certificate sources are refused) or
    /// `impersonated_service_account` (from `authorized_user` or `service_account` source
    /// credentials).
    Json(String),
    /// A credentials file of any type [`Credentials::Json`] accepts.
    File(PathBuf),
    /// A service-account key, as the JSON text of the key file (`type` must be
    /// `service_account`; [`Credentials::Json`] takes any type).
    ServiceAccountJson(String),
    /// A service-account key file (`type` must be `service_account`; [`Credentials::File`]
    /// takes any type).
    ServiceAccountFile(PathBuf),
    /// The metadata server (GCE, Cloud Run, GKE workload identity). Base URL from
    /// `GCE_METADATA_HOST` (`host[:port]`, Google's convention) else `metadata.google.internal`.
    MetadataServer,
    /// A fixed bearer token (the emulator accepts `owner`).
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only what says whose credentials these are: everything else in the JSON may be a
        // key, a secret or a token.
        let described = |f: &mut fmt::Formatter<'_>, name: &str, json: &str, all: bool| {
            let parsed = serde_json::from_str::<Value>(json).ok();
            let mut d = f.debug_struct(name);
            for (field, value) in parsed.as_ref().map(json::identifiers).unwrap_or_default() {
                if all || field == "client_email" {
                    d.field(field, &value);
                }
            }
            d.finish_non_exhaustive()
        };
        match self {
            Credentials::Default => f.write_str("Default"),
            Credentials::Json(json) => described(f, "Json", json, true),
            Credentials::File(path) => f.debug_tuple("File").field(path).finish(),
            Credentials::ServiceAccountJson(json) => {
                described(f, "ServiceAccountJson", json, false)
            }
            Credentials::ServiceAccountFile(path) => {
                f.debug_tuple("ServiceAccountFile").field(path).finish()
            }
            Credentials::MetadataServer => f.write_str("MetadataServer"),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// The token cache the Firestore backend uses: turns [`Credentials`] into `Authorization`
/// header values, fetching a token when there is none or the cached one is about to expire.
/// Also usable to authorise your own calls to Google APIs under the Firestore scope.
///
/// Thread-safe. One thread fetches at a time; the others wait for it and use its token.
/// `Debug` shows the kind of credentials and identifiers that grant nothing (see
/// [`Credentials`]).
pub struct TokenProvider {
    source: Box<dyn TokenSource>,
    quota_project_id: Option<String>,
}

impl TokenProvider {
    /// Finds and reads the credentials (see [`Credentials::Default`]) and checks them without
    /// any network call; token requests will time out after `timeout`.
    ///
    /// Fails with `InvalidArgument` for a zero `timeout`, an unreadable or invalid credentials
    /// file (the message names the file and the field at fault, never a value), credentials of
    /// an unsupported `type` or subject-token source (named), or a key that is not a usable
    /// service-account key.
    pub fn new(credentials: &Credentials, timeout: Duration) -> Result<TokenProvider> {
        Self::with_tls(credentials, timeout, crate::tls::system_client_config()?)
    }

    /// As [`new`](TokenProvider::new), with token requests trusting what `tls` trusts (the
    /// Firestore backend passes its own policy: the system's roots plus its CA file).
    pub(crate) fn with_tls(
        credentials: &Credentials,
        timeout: Duration,
        tls: std::sync::Arc<rustls::ClientConfig>,
    ) -> Result<TokenProvider> {
        if timeout.is_zero() {
            return Err(LockError::invalid_argument(
                "the token request timeout must be above zero",
            ));
        }
        let http = &http::Http::new(timeout, tls);
        let process_env = |name: &str| std::env::var_os(name);
        let only = |source| Loaded {
            source,
            quota_project_id: None,
        };
        let loaded = match credentials {
            Credentials::Default => adc::load(&process_env, cfg!(windows), http)?,
            Credentials::Json(json) if json.trim().is_empty() => {
                return Err(LockError::invalid_argument(
                    "the Firestore credentials JSON is empty",
                ));
            }
            Credentials::Json(json) => json::load_json(json, http)?,
            Credentials::File(path) if path.as_os_str().is_empty() => {
                return Err(LockError::invalid_argument(
                    "the Firestore credentials file path is empty",
                ));
            }
            Credentials::File(path) => json::load_file(path, "the credentials file", http)?,
            Credentials::ServiceAccountJson(json) => only(Cached::boxed(
                ServiceAccountSource::from_json(json, SCOPE, http)?,
            )),
            Credentials::ServiceAccountFile(path) => only(Cached::boxed(
                ServiceAccountSource::from_file(path, SCOPE, http)?,
            )),
            Credentials::MetadataServer => {
                only(Cached::boxed(MetadataSource::from_env(&process_env, http)?))
            }
            Credentials::Token(token) => only(Box::new(FixedToken::new(token)?)),
        };
        Ok(TokenProvider {
            source: loaded.source,
            quota_project_id: loaded.quota_project_id,
        })
    }

    /// The `Authorization` header value (`Bearer …`), from the cache or freshly fetched.
    ///
    /// Fails with `AuthFailed` when a token endpoint or the metadata server refuses,
    /// `ServiceUnavailable` when it cannot be reached or answers 5xx, `RateLimited` on a 429,
    /// `NetworkTimeout` when it does not answer in time. When a refresh fails while the cached
    /// token is still valid, the cached token is used and the refresh is tried again a few
    /// seconds later.
    pub fn authorization(&self) -> Result<String> {
        self.source.authorization()
    }

    /// The project the credentials file names for quota and billing (`quota_project_id`, as
    /// `gcloud auth application-default login` writes it), if any. Google's client libraries
    /// send it as the `x-goog-user-project` header of each request.
    pub fn quota_project_id(&self) -> Option<&str> {
        self.quota_project_id.as_deref()
    }
}

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TokenProvider").field(&self.source).finish()
    }
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
        let metadata = MetadataSource::new("127.0.0.1:1".into(), &http::Http::for_tests());
        assert_eq!(
            format!("{metadata:?}"),
            "MetadataServer { host: \"127.0.0.1:1\", .. }"
        );
    }

    #[test]
    fn debug_of_any_credentials_json_shows_identifiers_only() {
        let user = serde_json::json!({
            "type": "authorized_user", "client_id": "id.apps.googleusercontent.com",
            "client_secret": "hunter2-secret", "refresh_token": "hunter2-refresh",
            "quota_project_id": "billing",
        });
        let external = serde_json::json!({
            "type": "external_account", "audience": "//iam.googleapis.com/pool",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "client_secret": "hunter2-secret",
            "service_account_impersonation_url":
                "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/\
                 sa@p.iam.gserviceaccount.com:generateAccessToken",
            "credential_source": { "url": "http://169.254.169.254/token",
                                   "headers": { "Authorization": "Bearer hunter2" } },
        });
        let impersonated = serde_json::json!({
            "type": "impersonated_service_account",
            "service_account_impersonation_url": "https://x/sa@p:generateAccessToken",
            "source_credentials": user,
        });
        let cases = [
            (
                Credentials::Json(user.to_string()),
                "Json { type: \"authorized_user\", client_id: \"id.apps.googleusercontent.com\", .. }",
            ),
            (
                Credentials::Json(external.to_string()),
                "Json { type: \"external_account\", audience: \"//iam.googleapis.com/pool\", \
                 service_account: \"sa@p.iam.gserviceaccount.com\", .. }",
            ),
            (
                Credentials::Json(impersonated.to_string()),
                "Json { type: \"impersonated_service_account\", service_account: \"sa@p\", .. }",
            ),
            (
                Credentials::Json(key_json().to_string()),
                "Json { type: \"service_account\", client_email: \
                 \"syncguard-test@syncguard-test.iam.gserviceaccount.com\", .. }",
            ),
            (
                Credentials::Json(r#"{"type": "hunter2 secret"}"#.to_owned()),
                "Json { .. }",
            ),
            (Credentials::Json("hunter2".to_owned()), "Json { .. }"),
            (
                Credentials::File("/keys/adc.json".into()),
                "File(\"/keys/adc.json\")",
            ),
        ];
        for (credentials, expected) in cases {
            assert_eq!(format!("{credentials:?}"), expected);
        }
        for json in [user, external, impersonated] {
            let provider =
                TokenProvider::new(&Credentials::Json(json.to_string()), Duration::from_secs(1))
                    .unwrap();
            let shown = format!("{provider:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    #[test]
    fn the_quota_project_comes_from_the_credentials() {
        let user = serde_json::json!({
            "type": "authorized_user", "client_id": "id", "client_secret": "s",
            "refresh_token": "r", "quota_project_id": "billing",
        });
        let provider =
            TokenProvider::new(&Credentials::Json(user.to_string()), Duration::from_secs(1))
                .unwrap();
        assert_eq!(provider.quota_project_id(), Some("billing"));
        let fixed = TokenProvider::new(&Credentials::Token("owner".into()), Duration::from_secs(1))
            .unwrap();
        assert_eq!(fixed.quota_project_id(), None);
    }

    #[test]
    fn empty_credentials_are_refused() {
        for credentials in [Credentials::Json(" ".into()), Credentials::File("".into())] {
            let err = TokenProvider::new(&credentials, Duration::from_secs(1))
                .err()
                .unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains("empty"), "{err}");
        }
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
