//! [`FirestoreBuilder`]: the options of a [`FirestoreBackend`], checked before anything is
//! sent (the project, database and collection ids, the emulator's address, the credentials),
//! and the `firestore://` URL, which names the same options.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use super::auth::{Credentials, TokenProvider};
use super::document::STORAGE_KEY_LIMIT;
use super::document::is_rejected_id;
use super::driver::FirestoreBackend;
use super::rest::RestClient;
use super::semaphore_doc::semaphore_collection_of;
use crate::error::{LockError, Result};
use crate::net::{UrlParams, split_url};
use crate::time::{Clock, SystemClock};
use crate::tls::TlsRoots;

/// Options for a [`FirestoreBackend`]. Defaults: database `(default)`, collections `locks` and
/// `fence_counters`, credentials found the usual way (or `owner` for the emulator), a 5 s
/// timeout per request, no clock-skew bound, no cleanup in `is_locked`.
#[must_use = "call build() to get a backend"]
pub struct FirestoreBuilder {
    project: Option<String>,
    database: String,
    collection: String,
    fence_collection: String,
    cleanup_in_is_locked: bool,
    credentials: Option<Credentials>,
    emulator_host: Option<String>,
    timeout: Duration,
    max_clock_skew: Option<Duration>,
    clock: Arc<dyn Clock>,
    tls_ca_file: Option<PathBuf>,
}

impl Default for FirestoreBuilder {
    fn default() -> Self {
        FirestoreBuilder {
            project: None,
            database: "(default)".to_owned(),
            collection: "locks".to_owned(),
            fence_collection: "fence_counters".to_owned(),
            cleanup_in_is_locked: false,
            credentials: None,
            emulator_host: std::env::var("FIRESTORE_EMULATOR_HOST")
                .ok()
                .filter(|host| !host.trim().is_empty()),
            timeout: Duration::from_secs(5),
            max_clock_skew: None,
            clock: Arc::new(SystemClock),
            tls_ca_file: None,
        }
    }
}

impl FirestoreBuilder {
    /// The Google Cloud project (required).
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// The database (default `(default)`).
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = database.into();
        self
    }

    /// The lock collection (default `locks`).
    pub fn collection(mut self, collection: impl Into<String>) -> Self {
        self.collection = collection.into();
        self
    }

    /// The fence counter collection (default `fence_counters`; must differ from the lock
    /// collection).
    pub fn fence_collection(mut self, collection: impl Into<String>) -> Self {
        self.fence_collection = collection.into();
        self
    }

    /// Let `is_locked` delete a lock document found more than [`ASSUMED_SKEW_MS`] +
    /// [`CLEANUP_GUARD_MS`] past expiry, only if it is unchanged since it was read (default
    /// off: `is_locked` is then read-only). Never touches fence counters.
    ///
    /// [`ASSUMED_SKEW_MS`]: super::ASSUMED_SKEW_MS
    /// [`CLEANUP_GUARD_MS`]: super::CLEANUP_GUARD_MS
    pub fn cleanup_in_is_locked(mut self, enabled: bool) -> Self {
        self.cleanup_in_is_locked = enabled;
        self
    }

    /// How to authenticate. Default: [`Credentials::Default`] — Google's Application Default
    /// Credentials order: the file `GOOGLE_APPLICATION_CREDENTIALS` names, gcloud's
    /// `application_default_credentials.json`, then the metadata server — or the token `owner`
    /// for the emulator. Credentials files of type `service_account`, `authorized_user`,
    /// `external_account` and `impersonated_service_account` are accepted
    /// ([`Credentials::File`], [`Credentials::Json`]).
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Talk to the emulator at `host:port` over plain HTTP (default: `FIRESTORE_EMULATOR_HOST`
    /// when set).
    pub fn emulator_host(mut self, host: impl Into<String>) -> Self {
        self.emulator_host = Some(host.into());
        self
    }

    /// Talk to Google's production endpoint even if `FIRESTORE_EMULATOR_HOST` is set.
    pub fn production(mut self) -> Self {
        self.emulator_host = None;
        self
    }

    /// Timeout of each HTTP request, connecting included (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Fail operations (`ServiceUnavailable`) while the measured clock skew is certainly
    /// above `bound` (the specification suggests 500 ms). Default: no bound, only warnings.
    pub fn max_clock_skew(mut self, bound: Duration) -> Self {
        self.max_clock_skew = Some(bound);
        self
    }

    /// A PEM file of one or more CA certificates to trust besides the system's root
    /// certificates: the CA of a TLS-inspecting proxy, say (see [TLS](super#tls)).
    /// The URL can give the same (`?tls_ca_file=PATH`). A file that cannot be read or holds no
    /// valid certificate fails [`build`](Self::build) with `InvalidArgument` naming the path.
    /// Token requests (to Google's OAuth, STS and IAM endpoints) trust the same. With the
    /// emulator, which is plain HTTP, only token requests use it.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// The client clock that decides expiry (default: the system clock). For tests.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Validates the options (`InvalidArgument`, naming the option) and prepares the client.
    /// Connects lazily: the first operation reports an unreachable endpoint or rejected
    /// credentials, with a message naming the endpoint, the project and the database.
    pub fn build(self) -> Result<FirestoreBackend> {
        let project = self
            .project
            .ok_or_else(|| LockError::invalid_argument("the Firestore backend needs a project"))?;
        validate_resource_id("project", &project)?;
        validate_resource_id("database", &self.database)?;
        validate_collection_id("collection", &self.collection)?;
        validate_collection_id("fence_collection", &self.fence_collection)?;
        if self.collection == self.fence_collection {
            return Err(LockError::invalid_argument(
                "the lock collection and the fence collection must differ: cleaning up locks \
                 must never touch fence counters",
            ));
        }
        // Semaphores live in a collection named after the lock collection: checked here like
        // the two configured ones, so a bad name fails at build, not at the first semaphore.
        let semaphore_collection = semaphore_collection_of(&self.collection);
        validate_collection_id(
            "collection (with `_semaphores` appended)",
            &semaphore_collection,
        )?;
        if semaphore_collection == self.fence_collection {
            return Err(LockError::invalid_argument(
                "the fence collection must not be the semaphore collection (the lock \
                 collection's name with `_semaphores` appended)",
            ));
        }
        if self.timeout.is_zero() {
            return Err(LockError::invalid_argument("timeout must be above zero"));
        }
        if let Some(host) = &self.emulator_host {
            validate_emulator_host(host)?;
        }
        match &self.credentials {
            Some(Credentials::ServiceAccountFile(path)) if path.as_os_str().is_empty() => {
                return Err(LockError::invalid_argument(
                    "the Firestore credentials file path is empty",
                ));
            }
            Some(Credentials::ServiceAccountJson(json)) if json.trim().is_empty() => {
                return Err(LockError::invalid_argument(
                    "the Firestore credentials (service-account key JSON) are empty",
                ));
            }
            _ => {}
        }
        let credentials = match (self.credentials, &self.emulator_host) {
            (Some(credentials), _) => credentials,
            (None, Some(_)) => Credentials::Token("owner".to_owned()),
            (None, None) => Credentials::Default,
        };
        // Roots for HTTPS, to Firestore and to token endpoints alike. The emulator is plain
        // HTTP and takes a fixed token: then nothing needs them (and a redirect to HTTPS would
        // fail).
        let emulated = self.emulator_host.is_some();
        let roots = if emulated && matches!(credentials, Credentials::Token(_)) {
            TlsRoots::load(None, false)?
        } else {
            let roots = TlsRoots::load(self.tls_ca_file.as_deref(), true)?;
            if !emulated {
                roots.require_any("tls_ca_file")?;
            }
            roots
        };
        let tls = Arc::new(roots.client_config()?);
        let tokens = TokenProvider::with_tls(&credentials, self.timeout, Arc::clone(&tls))?;
        let rest = RestClient::new(
            &project,
            &self.database,
            self.emulator_host.as_deref(),
            tokens,
            self.timeout,
            tls,
        );
        Ok(FirestoreBackend {
            rest,
            project,
            database: self.database,
            collection: self.collection,
            fence_collection: self.fence_collection,
            semaphore_collection,
            cleanup_in_is_locked: self.cleanup_in_is_locked,
            max_clock_skew: self.max_clock_skew,
            clock: self.clock,
            aborted_retries: AtomicU64::new(0),
            holders: Default::default(),
        })
    }
}

/// A project or database id: non-empty, no `/` (it goes into resource names), no control
/// characters. Messages name the option, not the value.
fn validate_resource_id(option: &str, id: &str) -> Result<()> {
    if id.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the Firestore {option} is empty"
        )));
    }
    if id.contains('/') || id.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(format!(
            "the Firestore {option} id may not contain `/` or control characters"
        )));
    }
    Ok(())
}

/// A collection id (`option` names it for messages).
fn validate_collection_id(option: &str, id: &str) -> Result<()> {
    if id.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the Firestore {option} is empty"
        )));
    }
    if is_rejected_id(id) || id.len() > STORAGE_KEY_LIMIT || id.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(format!(
            "the Firestore {option} is not a valid collection id: at most 1500 bytes, no `/`, \
             not `.` or `..`, not of the form `__…__`"
        )));
    }
    Ok(())
}

/// The emulator's `host:port`: what `http://` is put in front of.
fn validate_emulator_host(host: &str) -> Result<()> {
    if host.trim().is_empty() {
        return Err(LockError::invalid_argument(
            "the Firestore emulator_host is empty: give host:port (e.g. 127.0.0.1:8080)",
        ));
    }
    if host.contains('/') || host.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(LockError::invalid_argument(
            "the Firestore emulator_host must be host:port, without a scheme or path \
             (e.g. 127.0.0.1:8080)",
        ));
    }
    Ok(())
}

impl FirestoreBackend {
    /// Connects to the database a `firestore://PROJECT[/DATABASE]` URL names, with the
    /// options `?collection=`, `?fence_collection=`, `?credentials=PATH` (a credentials
    /// file of any type [`Credentials::File`] accepts) and `?tls_ca_file=PATH` (see
    /// [`FirestoreBuilder::tls_ca_file`]). The emulator is used when `FIRESTORE_EMULATOR_HOST`
    /// is set.
    pub fn connect(url: &str) -> Result<FirestoreBackend> {
        let split = split_url(
            url,
            "Firestore",
            &UrlParams {
                ours: &[
                    "collection",
                    "fence_collection",
                    "credentials",
                    "tls_ca_file",
                ],
                client: &[],
            },
        )?;
        if split.url.scheme() != "firestore" {
            return Err(LockError::invalid_argument(
                "not a Firestore URL; expected firestore://PROJECT[/DATABASE]",
            ));
        }
        let project = match split.url.host_str() {
            Some(project) if !project.is_empty() => project.to_owned(),
            _ => {
                return Err(LockError::invalid_argument(
                    "the Firestore URL names no project; expected firestore://PROJECT[/DATABASE]",
                ));
            }
        };
        let mut builder = Self::builder().project(project);
        let path = split.url.path().trim_matches('/');
        if !path.is_empty() {
            builder = builder.database(path);
        }
        for (name, value) in split.options {
            builder = match name.as_str() {
                "collection" => builder.collection(value),
                "fence_collection" => builder.fence_collection(value),
                "tls_ca_file" => builder.tls_ca_file(value),
                _ => builder.credentials(Credentials::File(value.into())),
            };
        }
        builder.build()
    }

    /// Options beyond the URL.
    pub fn builder() -> FirestoreBuilder {
        FirestoreBuilder::default()
    }
}

impl fmt::Debug for FirestoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirestoreBuilder")
            .field("project", &self.project)
            .field("database", &self.database)
            .field("collection", &self.collection)
            .field("fence_collection", &self.fence_collection)
            .field("credentials", &self.credentials)
            .field("emulator_host", &self.emulator_host)
            .field("timeout", &self.timeout)
            .field("max_clock_skew", &self.max_clock_skew)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    /// Each bad URL or option, the message it gets, all `InvalidArgument` and before any I/O.
    #[test]
    fn bad_urls_and_options_are_refused_by_name() {
        let base = || {
            FirestoreBackend::builder()
                .project("p")
                .emulator_host("127.0.0.1:1")
        };
        let urls = [
            (
                "firestore://p?prefx=myapp",
                "unknown Firestore URL parameter `prefx`; known parameters: collection, \
                 fence_collection, credentials, tls_ca_file",
            ),
            (
                "firestore://p?colection=jobs",
                "unknown Firestore URL parameter `colection` (did you mean `collection`?); known \
                 parameters: collection, fence_collection, credentials, tls_ca_file",
            ),
            (
                "firestore://p?collection=",
                "the Firestore URL parameter `collection` is empty: give it a value or leave it out",
            ),
            (
                "firestore://p?credentials=",
                "the Firestore URL parameter `credentials` is empty: give it a value or leave it \
                 out",
            ),
            (
                "firestore://p?collection=a&collection=b",
                "the Firestore URL parameter `collection` is given twice",
            ),
            (
                "firestore:///db",
                "the Firestore URL names no project; expected firestore://PROJECT[/DATABASE]",
            ),
            (
                "http://p",
                "not a Firestore URL; expected firestore://PROJECT[/DATABASE]",
            ),
            ("", "the Firestore URL is empty"),
            (
                "firestore://p?collection=a%2Fb",
                "the Firestore collection is not a valid collection id: at most 1500 bytes, no \
                 `/`, not `.` or `..`, not of the form `__…__`",
            ),
        ];
        for (url, message) in urls {
            let err = FirestoreBackend::connect(url).expect_err(url);
            assert_eq!(
                (err.code(), err.message()),
                (ErrorCode::InvalidArgument, message),
                "{url}"
            );
        }
        let builders = [
            (base().project(""), "the Firestore project is empty"),
            (base().project(" "), "the Firestore project is empty"),
            (base().database(""), "the Firestore database is empty"),
            (
                base().database("a/b"),
                "the Firestore database id may not contain `/` or control characters",
            ),
            (base().collection(""), "the Firestore collection is empty"),
            (
                base().fence_collection(""),
                "the Firestore fence_collection is empty",
            ),
            (
                base().fence_collection("__x__"),
                "the Firestore fence_collection is not a valid collection id: at most 1500 bytes, \
                 no `/`, not `.` or `..`, not of the form `__…__`",
            ),
            (
                base().emulator_host(""),
                "the Firestore emulator_host is empty: give host:port (e.g. 127.0.0.1:8080)",
            ),
            (
                base().emulator_host("http://127.0.0.1:8080"),
                "the Firestore emulator_host must be host:port, without a scheme or path (e.g. \
                 127.0.0.1:8080)",
            ),
            (
                base().credentials(Credentials::ServiceAccountFile("".into())),
                "the Firestore credentials file path is empty",
            ),
            (
                base().credentials(Credentials::ServiceAccountJson(" ".into())),
                "the Firestore credentials (service-account key JSON) are empty",
            ),
            (
                base().credentials(Credentials::Token(String::new())),
                "the bearer token is empty",
            ),
            (base().timeout(Duration::ZERO), "timeout must be above zero"),
            (
                FirestoreBackend::builder(),
                "the Firestore backend needs a project",
            ),
        ];
        for (builder, message) in builders {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }

    #[test]
    fn collections_are_validated() {
        let build = |collection: &str, fence: &str| {
            FirestoreBackend::builder()
                .project("p")
                .emulator_host("127.0.0.1:1")
                .collection(collection)
                .fence_collection(fence)
                .build()
        };
        assert!(build("locks", "fence_counters").is_ok());
        for (collection, fence) in [
            ("same", "same"),
            ("a/b", "f"),
            ("__x__", "f"),
            ("", "f"),
            ("l", ".."),
        ] {
            let err = build(collection, fence).unwrap_err();
            assert_eq!(
                err.code(),
                ErrorCode::InvalidArgument,
                "{collection} {fence}"
            );
        }
        assert!(
            FirestoreBackend::builder().build().is_err(),
            "a project is required"
        );
    }

    /// The CA file is read when the backend is built, and a bad one is refused naming its path;
    /// the emulator (plain HTTP) does not use it.
    #[test]
    fn the_tls_ca_file_is_read_at_build() {
        let missing = std::env::temp_dir().join("syncguard-no-such-ca.pem");
        let err = FirestoreBackend::builder()
            .project("p")
            .production()
            .credentials(Credentials::Token("t".to_owned()))
            .tls_ca_file(&missing)
            .build()
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(
            err.message()
                .starts_with(&format!("the CA file {} cannot be read", missing.display())),
            "{err}"
        );
        assert!(
            FirestoreBackend::builder()
                .project("p")
                .emulator_host("127.0.0.1:1")
                .tls_ca_file(&missing)
                .build()
                .is_ok()
        );
    }
}
