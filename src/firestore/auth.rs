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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::Value;

use crate::error::{ErrorCode, LockError, Result};

/// The OAuth scope of Cloud Datastore and Firestore.
const SCOPE: &str = "https://www.googleapis.com/auth/datastore";
/// The OAuth grant that exchanges a signed JWT for an access token (RFC 7523).
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long an assertion is valid; Google accepts at most one hour.
const ASSERTION_LIFETIME_SECS: u64 = 3600;
/// Where the metadata server is when `GCE_METADATA_HOST` does not say otherwise.
const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";
/// The token path of the metadata server, below `http://{host}`.
const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// A token is fetched again this long before it expires, or a quarter of its lifetime before
/// when that is shorter: long enough that a request made with it does not see it expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// After a failed refresh, a token that is still valid is used for this long before the next
/// attempt, so that an unavailable token endpoint does not make every call wait on it.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// A token is only used as a fallback while it stays valid at least this long: the request
/// that carries it must still reach Firestore before it expires.
const FALLBACK_MIN_VALIDITY: Duration = Duration::from_secs(10);
/// Lifetimes are capped here so that no answer can make the cache's time arithmetic overflow.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// The most of a token or error answer that is read.
const MAX_ANSWER_BYTES: u64 = 1 << 20;
/// The most of an error description that goes into a message.
const MAX_DETAIL_CHARS: usize = 300;

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
        let source: Box<dyn TokenSource> = match credentials {
            Credentials::Default => match application_credentials_file() {
                Some(path) => Box::new(ServiceAccountSource::from_file(&path, timeout)?),
                None => Box::new(MetadataSource::new(metadata_host_from_env()?, timeout)),
            },
            Credentials::ServiceAccountJson(json) => Box::new(ServiceAccountSource::new(
                ServiceAccountKey::parse(json)?,
                timeout,
            )),
            Credentials::ServiceAccountFile(path) => {
                Box::new(ServiceAccountSource::from_file(path, timeout)?)
            }
            Credentials::MetadataServer => {
                Box::new(MetadataSource::new(metadata_host_from_env()?, timeout))
            }
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

/// The metadata server's `host[:port]`, from `GCE_METADATA_HOST` or the default.
fn metadata_host_from_env() -> Result<String> {
    match std::env::var("GCE_METADATA_HOST") {
        Ok(host) if !host.trim().is_empty() => validate_metadata_host(host.trim()),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(DEFAULT_METADATA_HOST.to_owned()),
        Err(std::env::VarError::NotUnicode(_)) => Err(LockError::invalid_argument(
            "GCE_METADATA_HOST is not valid Unicode",
        )),
    }
}

/// Checks that `host` is a bare host[:port], which is all the URL is built from.
fn validate_metadata_host(host: &str) -> Result<String> {
    let invalid = || {
        LockError::invalid_argument(format!(
            "GCE_METADATA_HOST must be a host or host:port, got {host:?}"
        ))
    };
    let url = url::Url::parse(&format!("http://{host}/")).map_err(|_| invalid())?;
    let bare = url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none()
        && url.host().is_some();
    if !bare {
        return Err(invalid());
    }
    Ok(host.to_owned())
}

/// A fixed token, sent as is.
struct FixedToken {
    authorization: String,
}

impl FixedToken {
    fn new(token: &str) -> Result<FixedToken> {
        let token = token.trim();
        if token.is_empty() {
            return Err(LockError::invalid_argument("the bearer token is empty"));
        }
        if !is_header_safe(token) {
            return Err(LockError::invalid_argument(
                "the bearer token contains characters an HTTP header cannot carry",
            ));
        }
        Ok(FixedToken {
            authorization: format!("Bearer {token}"),
        })
    }
}

impl TokenSource for FixedToken {
    fn authorization(&self) -> Result<String> {
        Ok(self.authorization.clone())
    }
}

impl fmt::Debug for FixedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FixedToken(<redacted>)")
    }
}

/// Whether `token` can go into a header unchanged: visible ASCII only.
fn is_header_safe(token: &str) -> bool {
    token.bytes().all(|b| b.is_ascii_graphic())
}

/// The parts of a service-account key file this crate uses.
struct ServiceAccountKey {
    client_email: String,
    private_key_id: String,
    token_uri: String,
    key: EncodingKey,
}

impl ServiceAccountKey {
    /// Parses and checks a key file's JSON. Messages name the field at fault, never a value
    /// that could be part of the key.
    fn parse(json: &str) -> Result<ServiceAccountKey> {
        // Parsed as a plain value rather than into a struct: serde's type errors quote the
        // offending value, which could be the key.
        let value: Value = serde_json::from_str(json).map_err(|e| {
            LockError::invalid_argument(format!(
                "the service-account key is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        if !value.is_object() {
            return Err(LockError::invalid_argument(
                "the service-account key is not a JSON object",
            ));
        }
        match value.get("type").and_then(Value::as_str) {
            Some("service_account") => {}
            Some(
                kind @ ("authorized_user" | "external_account" | "impersonated_service_account"),
            ) => {
                return Err(LockError::invalid_argument(format!(
                    "credentials of type `{kind}` are not supported; use a service-account key \
                     or the metadata server"
                )));
            }
            _ => {
                return Err(LockError::invalid_argument(
                    "the credentials JSON is not a service-account key (its `type` is not \
                     `service_account`)",
                ));
            }
        }
        let field = |name: &str| -> Result<String> {
            match value.get(name).and_then(Value::as_str).map(str::trim) {
                Some(text) if !text.is_empty() => Ok(text.to_owned()),
                _ => Err(LockError::invalid_argument(format!(
                    "the service-account key has no `{name}` (a non-empty string)"
                ))),
            }
        };
        let client_email = field("client_email")?;
        let private_key_id = field("private_key_id")?;
        let token_uri = field("token_uri")?;
        validate_token_uri(&token_uri)?;
        let pem = field("private_key")?;
        // jsonwebtoken's messages describe the parse failure, but none is needed to say the
        // key is unusable, and they are kept out in case one ever quotes the input.
        let key = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|_| {
            LockError::invalid_argument(
                "the service-account `private_key` is not an RSA private key in PEM form",
            )
        })?;
        let key = ServiceAccountKey {
            client_email,
            private_key_id,
            token_uri,
            key,
        };
        // The PEM parser accepts some DER the signer later rejects: sign once now, so a bad
        // key fails here rather than on the first lock operation.
        key.assertion(0).map_err(|_| {
            LockError::invalid_argument(
                "the service-account `private_key` cannot sign: it is not a valid RSA key",
            )
        })?;
        Ok(key)
    }

    /// The signed JWT asking for a token, issued at `now` (Unix seconds).
    fn assertion(&self, now: u64) -> std::result::Result<String, jsonwebtoken::errors::Error> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            scope: &'a str,
            aud: &'a str,
            iat: u64,
            exp: u64,
        }
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.private_key_id.clone());
        let claims = Claims {
            iss: &self.client_email,
            scope: SCOPE,
            aud: &self.token_uri,
            iat: now,
            exp: now.saturating_add(ASSERTION_LIFETIME_SECS),
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
    }
}

/// Accepts `https` URLs, and `http` only to this machine: the assertion is as good as a token
/// for an hour and must not cross a network in clear text.
fn validate_token_uri(uri: &str) -> Result<()> {
    let url = url::Url::parse(uri).map_err(|_| {
        LockError::invalid_argument("the service-account `token_uri` is not a valid URL")
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(LockError::invalid_argument(
            "the service-account `token_uri` must not contain a user name or password",
        ));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if is_loopback(&url) => Ok(()),
        _ => Err(LockError::invalid_argument(format!(
            "the service-account `token_uri` must be an https URL (http only to localhost), \
             got {url}"
        ))),
    }
}

/// Whether `url` points at this machine.
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Unix time in whole seconds.
fn unix_now() -> Result<u64> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| LockError::internal("the system clock is set before 1970"))
}

/// An agent of our own: token requests must not share a connection budget or timeouts with
/// Firestore's, and error answers must be readable. `direct` bypasses any proxy configured in
/// the environment.
fn agent(timeout: Duration, direct: bool) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // Neither endpoint redirects; following one would send the assertion elsewhere.
        .max_redirects(0)
        .max_redirects_will_error(false)
        .user_agent(concat!("syncguard/", env!("CARGO_PKG_VERSION")));
    if direct {
        config = config.proxy(None);
    }
    ureq::Agent::new_with_config(config.build())
}

/// Tokens for a service account, exchanged for signed assertions at its `token_uri`.
struct ServiceAccountSource {
    key: ServiceAccountKey,
    agent: ureq::Agent,
    cache: TokenCache,
}

impl ServiceAccountSource {
    fn new(key: ServiceAccountKey, timeout: Duration) -> ServiceAccountSource {
        // A proxy cannot reach a token endpoint on this machine (a test double, a local
        // emulator of Google's endpoint).
        let local = url::Url::parse(&key.token_uri).is_ok_and(|url| is_loopback(&url));
        ServiceAccountSource {
            agent: agent(timeout, local),
            key,
            cache: TokenCache::default(),
        }
    }

    fn from_file(path: &Path, timeout: Duration) -> Result<ServiceAccountSource> {
        let json = std::fs::read_to_string(path).map_err(|e| {
            LockError::invalid_argument(format!(
                "could not read the service-account key file {}: {e}",
                path.display()
            ))
        })?;
        let key = ServiceAccountKey::parse(&json).map_err(|e| {
            LockError::invalid_argument(format!("{}: {}", path.display(), e.message()))
        })?;
        Ok(ServiceAccountSource::new(key, timeout))
    }

    fn fetch(&self) -> Result<FetchedToken> {
        let assertion = self.key.assertion(unix_now()?).map_err(|_| {
            LockError::invalid_argument("the service-account key could not sign an assertion")
        })?;
        let what = format!("the OAuth token endpoint {}", self.key.token_uri);
        let answer = self
            .agent
            .post(&self.key.token_uri)
            .header("Accept", "application/json")
            .send_form([
                ("grant_type", JWT_BEARER_GRANT),
                ("assertion", assertion.as_str()),
            ]);
        // An endpoint may quote the assertion, or only its claims or signature.
        let mut secrets = vec![assertion.as_str()];
        secrets.extend(assertion.split('.'));
        read_token_answer(&what, answer, &secrets, "")
    }
}

impl TokenSource for ServiceAccountSource {
    fn authorization(&self) -> Result<String> {
        self.cache.authorization(Instant::now, || self.fetch())
    }
}

impl fmt::Debug for ServiceAccountSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.key.client_email)
            .finish_non_exhaustive()
    }
}

/// Tokens for the attached service account, from the metadata server.
struct MetadataSource {
    host: String,
    url: String,
    agent: ureq::Agent,
    cache: TokenCache,
}

impl MetadataSource {
    /// `host` is `host[:port]`, already checked.
    fn new(host: String, timeout: Duration) -> MetadataSource {
        MetadataSource {
            url: format!("http://{host}{METADATA_TOKEN_PATH}"),
            host,
            // The metadata server is link-local: a proxy could not reach it, and must never
            // see its tokens.
            agent: agent(timeout, true),
            cache: TokenCache::default(),
        }
    }

    fn fetch(&self) -> Result<FetchedToken> {
        let what = format!("the metadata server at {}", self.host);
        let answer = self
            .agent
            .get(&self.url)
            .header("Metadata-Flavor", "Google")
            .header("Accept", "application/json")
            .call();
        // The usual reason the default host cannot be reached: not running on Google Cloud.
        let hint = if self.host == DEFAULT_METADATA_HOST {
            " (outside Google Cloud, set GOOGLE_APPLICATION_CREDENTIALS to a service-account \
             key file or pass credentials explicitly)"
        } else {
            ""
        };
        read_token_answer(&what, answer, &[], hint)
    }
}

impl TokenSource for MetadataSource {
    fn authorization(&self) -> Result<String> {
        self.cache.authorization(Instant::now, || self.fetch())
    }
}

impl fmt::Debug for MetadataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetadataServer")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// A token as the endpoint gave it.
struct FetchedToken {
    access_token: String,
    lifetime: Duration,
}

/// Reads a token endpoint's or metadata server's answer. `secrets` are scrubbed from any text
/// of the answer that goes into a message, in case the endpoint echoes them; `hint` ends the
/// message when there is no answer.
fn read_token_answer(
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

/// The cached token and what is known about refreshing it.
#[derive(Default)]
struct TokenCache {
    // Held during a refresh, on purpose: the callers that arrive meanwhile wait for the token
    // being fetched instead of fetching their own.
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    token: Option<CachedToken>,
    /// When the last refresh failed, if the one after it has not succeeded yet.
    failed_at: Option<Instant>,
}

struct CachedToken {
    authorization: String,
    refresh_at: Instant,
    expires_at: Instant,
}

impl CachedToken {
    /// `requested` is when the request for it was sent: its lifetime runs from no earlier.
    fn new(fetched: FetchedToken, requested: Instant) -> CachedToken {
        let lifetime = fetched.lifetime.min(MAX_TOKEN_LIFETIME);
        let margin = REFRESH_MARGIN.min(lifetime / 4);
        let expires_at = requested.checked_add(lifetime).unwrap_or(requested);
        CachedToken {
            authorization: format!("Bearer {}", fetched.access_token),
            refresh_at: expires_at.checked_sub(margin).unwrap_or(requested),
            expires_at,
        }
    }

    fn usable_as_fallback(&self, now: Instant) -> bool {
        now.checked_add(FALLBACK_MIN_VALIDITY)
            .is_some_and(|later| later < self.expires_at)
    }
}

impl TokenCache {
    /// The cached header value while it is fresh, else the one `fetch` gets. `now` is the
    /// clock, a parameter for the tests.
    fn authorization(
        &self,
        now: impl Fn() -> Instant,
        fetch: impl FnOnce() -> Result<FetchedToken>,
    ) -> Result<String> {
        // A panic elsewhere while holding the lock cannot leave the state half-written: every
        // update is a single assignment.
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut *guard;
        let started = now();
        if let Some(token) = &state.token {
            if started < token.refresh_at {
                return Ok(token.authorization.clone());
            }
            let failed_recently = state
                .failed_at
                .and_then(|failed| failed.checked_add(RETRY_AFTER_FAILURE))
                .is_some_and(|retry_at| started < retry_at);
            if failed_recently && token.usable_as_fallback(started) {
                return Ok(token.authorization.clone());
            }
        }
        match fetch() {
            Ok(fetched) => {
                log::debug!(
                    "syncguard: fetched a Firestore access token valid for {} s",
                    fetched.lifetime.as_secs()
                );
                let token = CachedToken::new(fetched, started);
                let authorization = token.authorization.clone();
                state.token = Some(token);
                state.failed_at = None;
                Ok(authorization)
            }
            Err(error) => {
                let now = now();
                match &state.token {
                    Some(token) if token.usable_as_fallback(now) => {
                        log::warn!(
                            "syncguard: could not refresh the Firestore access token, using \
                             the current one until it nearly expires: {error}"
                        );
                        state.failed_at = Some(now);
                        Ok(token.authorization.clone())
                    }
                    _ => Err(error),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_FILE: &str = include_str!("../../tests/data/test-service-account.json");
    const PUBLIC_KEY: &str = include_str!("../../tests/data/test-service-account.pub.pem");

    fn key_json() -> Value {
        serde_json::from_str(KEY_FILE).unwrap()
    }

    fn private_key() -> String {
        key_json()["private_key"].as_str().unwrap().to_owned()
    }

    /// A line from the middle of the PEM: whatever leaks the key leaks this.
    fn key_fragment() -> String {
        private_key().lines().nth(5).unwrap().to_owned()
    }

    fn parse_with(change: impl FnOnce(&mut Value)) -> Result<ServiceAccountKey> {
        let mut json = key_json();
        change(&mut json);
        ServiceAccountKey::parse(&json.to_string())
    }

    fn assert_invalid(result: Result<ServiceAccountKey>, expected: &str) {
        let err = result.err().expect("the key should be rejected");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains(expected), "{err}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(&key_fragment()), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }

    #[test]
    fn the_test_key_parses() {
        let mut json = key_json();
        json["token_uri"] = "https://oauth2.googleapis.com/token".into();
        let key = ServiceAccountKey::parse(&json.to_string()).unwrap();
        assert_eq!(
            key.client_email,
            "syncguard-test@syncguard-test.iam.gserviceaccount.com"
        );
        assert_eq!(key.private_key_id, json["private_key_id"].as_str().unwrap());
        assert_eq!(key.token_uri, "https://oauth2.googleapis.com/token");
    }

    #[test]
    fn bad_keys_are_invalid_arguments_that_do_not_quote_the_key() {
        assert_invalid(ServiceAccountKey::parse("{not json"), "not valid JSON");
        assert_invalid(ServiceAccountKey::parse("[1, 2]"), "not a JSON object");
        assert_invalid(
            parse_with(|j| j["type"] = "authorized_user".into()),
            "`authorized_user` are not supported",
        );
        assert_invalid(
            parse_with(|j| j["type"] = private_key().into()),
            "not a service-account key",
        );
        assert_invalid(
            parse_with(|j| {
                j.as_object_mut().unwrap().remove("type");
            }),
            "not a service-account key",
        );
        for field in ["client_email", "private_key_id", "token_uri", "private_key"] {
            assert_invalid(
                parse_with(|j| {
                    j.as_object_mut().unwrap().remove(field);
                }),
                &format!("no `{field}`"),
            );
            assert_invalid(
                parse_with(|j| j[field] = 42.into()),
                &format!("no `{field}`"),
            );
        }
        assert_invalid(
            parse_with(|j| j["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n".into()),
            "not an RSA private key",
        );
        // A valid PEM frame around something that is not a key.
        let broken = private_key().replace(&key_fragment(), &"A".repeat(64));
        assert_invalid(
            parse_with(|j| j["private_key"] = broken.into()),
            "private_key",
        );
        assert_invalid(
            parse_with(|j| j["token_uri"] = "not a url".into()),
            "not a valid URL",
        );
        assert_invalid(
            parse_with(|j| j["token_uri"] = "http://oauth2.example.com/token".into()),
            "must be an https URL",
        );
    }

    #[test]
    fn private_key_in_a_type_error_is_not_quoted() {
        // serde would quote a string where a map was expected; the key must not be that string.
        let err = ServiceAccountKey::parse(&serde_json::to_string(&private_key()).unwrap())
            .err()
            .unwrap();
        assert!(!err.to_string().contains(&key_fragment()), "{err}");
    }

    #[test]
    fn token_uris_must_be_https_unless_local() {
        for ok in [
            "https://oauth2.googleapis.com/token",
            "http://127.0.0.1:8080/token",
            "http://localhost/token",
            "http://[::1]:9/token",
        ] {
            assert!(validate_token_uri(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1/token",
            "https://user:hunter2@oauth2.googleapis.com/token",
            "ftp://example.com/",
            "file:///etc/passwd",
        ] {
            let err = validate_token_uri(bad).err().unwrap();
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn the_assertion_is_signed_with_the_key_and_claims_the_datastore_scope() {
        #[derive(serde::Deserialize)]
        struct Claims {
            iss: String,
            scope: String,
            aud: String,
            iat: u64,
            exp: u64,
        }
        let mut json = key_json();
        json["token_uri"] = "https://oauth2.googleapis.com/token".into();
        let key = ServiceAccountKey::parse(&json.to_string()).unwrap();
        let now = unix_now().unwrap();
        let assertion = key.assertion(now).unwrap();

        let public = jsonwebtoken::DecodingKey::from_rsa_pem(PUBLIC_KEY.as_bytes()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::RS256);
        validation.set_audience(&["https://oauth2.googleapis.com/token"]);
        validation.set_issuer(&[key.client_email.as_str()]);
        let decoded = jsonwebtoken::decode::<Claims>(&assertion, &public, &validation).unwrap();
        assert_eq!(decoded.header.alg, Algorithm::RS256);
        assert_eq!(decoded.header.typ.as_deref(), Some("JWT"));
        assert_eq!(
            decoded.header.kid.as_deref(),
            json["private_key_id"].as_str()
        );
        let claims = decoded.claims;
        assert_eq!(claims.iss, key.client_email);
        assert_eq!(claims.aud, "https://oauth2.googleapis.com/token");
        assert_eq!(claims.scope, SCOPE);
        assert_eq!(claims.iat, now);
        assert_eq!(claims.exp - claims.iat, 3600);
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

    #[test]
    fn metadata_hosts_are_bare_hosts() {
        for ok in [
            "metadata.google.internal",
            "127.0.0.1:8080",
            "[::1]:80",
            "169.254.169.254",
        ] {
            assert_eq!(validate_metadata_host(ok).unwrap(), ok);
        }
        for bad in ["http://x/", "x/y", "u:p@x", "x?y", "x#y", "x:notaport", ""] {
            let err = validate_metadata_host(bad).err().unwrap();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}");
        }
    }

    fn fetched(token: &str, seconds: u64) -> Result<FetchedToken> {
        Ok(FetchedToken {
            access_token: token.to_owned(),
            lifetime: Duration::from_secs(seconds),
        })
    }

    fn unavailable() -> Result<FetchedToken> {
        Err(LockError::new(ErrorCode::ServiceUnavailable, "down"))
    }

    #[test]
    fn tokens_are_refreshed_five_minutes_or_a_quarter_lifetime_before_expiry() {
        let t0 = Instant::now();
        let at = |seconds: u64| t0 + Duration::from_secs(seconds);
        for (lifetime, refresh_after) in [(3600, 3300), (1200, 900), (400, 300), (4, 3), (0, 0)] {
            let token = CachedToken::new(fetched("t", lifetime).unwrap(), t0);
            assert_eq!(token.refresh_at, at(refresh_after), "lifetime {lifetime}");
            assert_eq!(token.expires_at, at(lifetime), "lifetime {lifetime}");
        }
        let huge = CachedToken::new(fetched("t", u64::MAX).unwrap(), t0);
        assert_eq!(huge.expires_at, t0 + MAX_TOKEN_LIFETIME);
    }

    #[test]
    fn the_cache_serves_fresh_tokens_and_refreshes_stale_ones() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        let clock = |seconds: u64| move || t0 + Duration::from_secs(seconds);
        let never = || -> Result<FetchedToken> { panic!("should not fetch") };

        assert_eq!(
            cache
                .authorization(clock(0), || fetched("one", 3600))
                .unwrap(),
            "Bearer one"
        );
        assert_eq!(
            cache.authorization(clock(3299), never).unwrap(),
            "Bearer one"
        );
        assert_eq!(
            cache
                .authorization(clock(3300), || fetched("two", 3600))
                .unwrap(),
            "Bearer two"
        );
        assert_eq!(
            cache.authorization(clock(3301), never).unwrap(),
            "Bearer two"
        );
    }

    #[test]
    fn a_failed_refresh_falls_back_to_the_valid_token_for_a_while() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        let clock = |seconds: u64| move || t0 + Duration::from_secs(seconds);
        let never = || -> Result<FetchedToken> { panic!("should not fetch") };

        cache
            .authorization(clock(0), || fetched("one", 3600))
            .unwrap();
        // Due for refresh, the endpoint is down, the token has 290 s left: use it...
        assert_eq!(
            cache.authorization(clock(3310), unavailable).unwrap(),
            "Bearer one"
        );
        // ...without asking again for a few seconds...
        assert_eq!(
            cache.authorization(clock(3312), never).unwrap(),
            "Bearer one"
        );
        // ...then asking again.
        assert_eq!(
            cache
                .authorization(clock(3315), || fetched("two", 3600))
                .unwrap(),
            "Bearer two"
        );
    }

    #[test]
    fn a_failed_refresh_is_an_error_once_the_token_is_nearly_expired() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        let clock = |seconds: u64| move || t0 + Duration::from_secs(seconds);

        let err = cache.authorization(clock(0), unavailable).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        cache
            .authorization(clock(0), || fetched("one", 3600))
            .unwrap();
        let err = cache.authorization(clock(3591), unavailable).unwrap_err();
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        // No pause after a failure without a fallback: the next call tries again.
        assert_eq!(
            cache
                .authorization(clock(3592), || fetched("two", 3600))
                .unwrap(),
            "Bearer two"
        );
    }

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
