//! The Firestore backend: Firestore's v1 REST API over a blocking HTTP/1.1 client of its own
//! that logs nothing, since every request carries a secret (no gRPC, no async runtime), atomic
//! compare-and-set commits of at most two HTTP requests per operation, client time with the
//! 1000 ms tolerance and clock-skew monitoring, and the documents the TypeScript SyncGuard
//! uses.
//!
//! ```no_run
//! use syncguard::{Locker, firestore::FirestoreBackend};
//!
//! // With FIRESTORE_EMULATOR_HOST set this talks to the emulator; otherwise to Google, with
//! // Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's well-known file,
// then the metadata server).
//! let locker = Locker::new(FirestoreBackend::connect("firestore://my-project")?);
//! let guard = locker.lock("nightly-report")?;
//! println!("fence {}", guard.fence());
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Documents
//!
//! In collection `locks`, document `msk("", key)` (see [`make_storage_key`], limit 1500 bytes):
//! `lockId` (string), `expiresAtMs` and `acquiredAtMs` (integer), `key` (string), `fence`
//! (string, 15 digits), and `holder` (string) when the holder described itself
//! ([`LockOptions::holder`](crate::LockOptions::holder); the TypeScript SyncGuard writes no
//! such field and ignores it). In `fence_counters`, document `msk("", "fence:" + lock doc id)`:
//! `fence` (string, 15 digits) and `keyDebug` (string); never deleted. A document id Firestore
//! would reject (containing `/`, `.` or `..`, or of the form `__…__`) is replaced by its hashed
//! form, step 4 of [`make_storage_key`].
//!
//! # Requests and atomicity
//!
//! Every mutation is a compare-and-set: a read, then one `commit` whose writes carry
//! `currentDocument` preconditions (the `updateTime` that was read, or "does not exist"). A
//! commit's writes are atomic, and the preconditions make it apply only to exactly the state
//! that was checked — the same guarantee as a read-write transaction, without holding document
//! locks: Firestore's server-side transactions lock what they read, and under contention the
//! waiting readers starve the holder's release (observed on the emulator: releases aborted
//! five times in a row with seven contenders).
//!
//! acquire: `batchGet` of the lock and counter documents, then `commit` of both (one request
//! when the lock is visibly held; a lost race is reported as held). release and extend:
//! `runQuery` for `lockId == id` (without a limit: two matches would be an inconsistency,
//! reported and left alone), then `commit` (a lost race is retried). is_locked and lookup: one
//! read. A commit that meets a TypeScript client's transaction (`ABORTED`) is retried a few
//! times with jitter, then `ServiceUnavailable`.
//!
//! list ([`LockBackend::list`](crate::LockBackend::list)): `runQuery` on a range of the `key`
//! field, ordered by it (the automatic single-field index serves it), liveness by the client
//! clock, in pages of `limit + 1` documents, at most [`MAX_LIST_PAGES`] pages; a listing that
//! runs out answers what it found, with
//! [`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached).
//!
//! # Time
//!
//! The client clock decides expiry, as in the TypeScript SyncGuard; keep clocks synchronised.
//! Every answer's server time feeds [`FirestoreBackend::clock_skew`]; skew of 200 ms or more is
//! logged, and [`FirestoreBuilder::max_clock_skew`] makes operations fail above a bound.
//!
//! # Errors
//!
//! By the answer's `status`: UNAVAILABLE, INTERNAL, ABORTED → `ServiceUnavailable`;
//! DEADLINE_EXCEEDED and client timeouts → `NetworkTimeout`; PERMISSION_DENIED,
//! UNAUTHENTICATED and token-exchange failures → `AuthFailed`; INVALID_ARGUMENT,
//! FAILED_PRECONDITION → `InvalidArgument` (a missing `lockId` index is named);
//! RESOURCE_EXHAUSTED → `RateLimited`; anything else → `Internal`. Refused connections,
//! unresolved host names and TLS failures → `ServiceUnavailable`.
//!
//! A `200` answer is checked for shape before it is believed. An `{"error": …}` element in it
//! (a `runQuery` or `batchGet` stream that failed part-way) is that error, coded by its status
//! as above. A body that is not JSON, or JSON that is not the call's answer (an object for an
//! array, a document without `name` or `updateTime`, a `batchGet` that does not account for
//! every document asked for, a commit without `writeResults` or `commitTime`) →
//! `ServiceUnavailable`, transient: such an answer is most likely a proxy's or a cut-short one,
//! and it never reads as "no lock" — only a `batchGet`'s `missing`, or a `runQuery` stream of
//! bare read times, says a lock is absent.
//!
//! A lock document that is not a SyncGuard lock record (a field missing or of another type, a
//! fence that is not 15 digits, an expiry that is not an integer from 0 to 2^53 − 1) is
//! stored data, the same on every read: every operation answers it with `Internal` naming the
//! key, never "locked" and never "absent", and writes nothing over it. Extra fields are
//! tolerated. A fence counter that is not 15 digits, or at the limit, stops acquire with
//! `Internal` naming the key before the commit.
//!
//! An acquisition whose commit may have been applied although no answer says so (a timeout, a
//! connection lost after the request, an unusable `200`, a status such as UNAVAILABLE or
//! DEADLINE_EXCEEDED) fails with the error marked [in doubt](LockError::in_doubt), carrying
//! the lock id the commit wrote: releasing that lock id frees the key if it was taken (the
//! [`Locker`](crate::Locker) does so). A refusal, or a request never sent (connection refused,
//! no token), is not in doubt.
//!
//! A guard's release whose write meets such a failure (or a refused or lost connection) is
//! tried once more by lock id, which re-reads and decides; if the first write did go through,
//! the lock is gone by then and the release answers `false`.
//!
//! Messages name the endpoint (`firestore.googleapis.com`, or the emulator's `host:port`), the
//! project and the database, and keep the cause: `Firestore at 127.0.0.1:8080 (project p,
//! database (default)) answered HTTP 503 UNAVAILABLE: …`. They never contain a token.
//!
//! # TLS
//!
//! Requests to Google trust the system's root certificates (not a bundled list), so a
//! TLS-inspecting proxy whose CA is installed system-wide works as it does for every other
//! program (the proxy is taken from `HTTPS_PROXY` or `ALL_PROXY`, `http://` proxies only, with
//! `NO_PROXY` honoured). A CA that is not installed — a PEM file of one or more certificates —
//! is added with [`FirestoreBuilder::tls_ca_file`]
//! or `?tls_ca_file=PATH` in the URL, for Firestore's requests and the token requests of
//! every kind of credentials alike. Verification is always full (chain and host name). The
//! crypto provider (*ring*) is given to each HTTP agent: rustls' process-wide default is never
//! read or changed. The Redis and PostgreSQL backends follow the same policy. A certificate
//! that is not trusted fails with `ServiceUnavailable`: `cannot reach Firestore at
//! firestore.googleapis.com (project p, database (default)): TLS failure: the server's
//! certificate is not trusted (unknown issuer): …`. The emulator is plain HTTP.

mod auth;
mod list;
mod rest;
mod skew;
mod timestamp;
mod transport;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

pub use self::auth::{Credentials, TokenProvider};
pub use self::list::MAX_LIST_PAGES;
pub use self::skew::ClockSkew;

use self::rest::{Document, RestClient, RestError, integer_value, string_value};
use crate::driver::{
    Acquisition, Driver, Extension, Find, Holder, Key, KeyPrefix, LeaseRef, ListLimit, LockId,
    LockList, LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl, Version, hash_key, is_live,
    make_storage_key,
};
use crate::driver::{Capabilities, TimeAuthority};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::key::hashed_storage_key;
use crate::net::{UrlParams, split_url};
use crate::time::{Clock, SystemClock};
use crate::tls::TlsRoots;

/// Firestore's document-id limit in bytes.
pub const STORAGE_KEY_LIMIT: usize = 1500;
/// Skew the client clock is assumed to stay within (the specification's ±2 s).
pub const ASSUMED_SKEW_MS: i64 = 2000;
/// How long past expiry (beyond [`ASSUMED_SKEW_MS`]) the opt-in cleanup in `is_locked` waits.
pub const CLEANUP_GUARD_MS: i64 = 1000;
/// Attempts of an operation whose commit keeps conflicting before giving up.
const CAS_ATTEMPTS: u32 = 6;

/// Counters of what the backend sent, for monitoring and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FirestoreStats {
    /// HTTP requests to Firestore (token requests not included).
    pub requests: u64,
    /// Commits retried after Firestore answered ABORTED (they met a transaction).
    pub aborted_retries: u64,
}

/// Distributed locks in Firestore. See the [module docs](self).
pub struct FirestoreBackend {
    rest: RestClient,
    project: String,
    database: String,
    collection: String,
    fence_collection: String,
    cleanup_in_is_locked: bool,
    max_clock_skew: Option<Duration>,
    clock: Arc<dyn Clock>,
    aborted_retries: AtomicU64,
}

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
    /// certificates: the CA of a TLS-inspecting proxy, say (see [TLS](self#tls)).
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
            cleanup_in_is_locked: self.cleanup_in_is_locked,
            max_clock_skew: self.max_clock_skew,
            clock: self.clock,
            aborted_retries: AtomicU64::new(0),
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

/// Whether Firestore refuses `id` as a document (or collection) id.
fn is_rejected_id(id: &str) -> bool {
    id.contains('/')
        || id == "."
        || id == ".."
        || (id.len() >= 4 && id.starts_with("__") && id.ends_with("__"))
}

/// The document id for `key` (already a storage-key input): [`make_storage_key`], or its
/// hashed form where Firestore would reject the id.
fn document_id(key: &str) -> Result<String> {
    let id = make_storage_key("", key, STORAGE_KEY_LIMIT, 0)?;
    Ok(if is_rejected_id(&id) {
        hashed_storage_key("", key)
    } else {
        id
    })
}

/// Why an operation failed, until it reaches the caller: a REST call, kept typed so that a
/// conflict (ABORTED) is told apart from a failure, or anything else, already a [`LockError`].
enum OpError {
    Rest(RestError),
    Lock(LockError),
}

impl From<RestError> for OpError {
    fn from(error: RestError) -> Self {
        OpError::Rest(error)
    }
}

impl From<LockError> for OpError {
    fn from(error: LockError) -> Self {
        OpError::Lock(error)
    }
}

type OpResult<T> = std::result::Result<T, OpError>;

/// The most writes one `batchWrite` request may carry.
const BATCH_WRITE_LIMIT: usize = 500;

/// A lock document's version as a lease carries it: the expiry it was written with and its
/// `updateTime`, so that a renewal can check liveness and precondition on it without a read.
fn version_of(update_time: &str, expires_at_ms: i64) -> Version {
    Version::new(format!("{expires_at_ms}|{update_time}"))
}

/// The expiry and `updateTime` of a [`version_of`].
fn parse_version(version: &Version) -> Option<(i64, &str)> {
    let (expires_at_ms, update_time) = version.as_str().split_once('|')?;
    Some((expires_at_ms.parse().ok()?, update_time))
}

/// The write that moves a lock document's expiry, if it is unchanged since `update_time`.
fn renewal_write(name: &str, expires_at_ms: i64, update_time: &str) -> Value {
    json!({
        "update": { "name": name, "fields": { "expiresAtMs": integer_value(expires_at_ms) } },
        "updateMask": { "fieldPaths": ["expiresAtMs"] },
        "currentDocument": { "updateTime": update_time },
    })
}

/// The outcome of one read-and-commit attempt.
enum Attempt<T> {
    Done(T),
    /// The commit's precondition failed: the document changed after the read.
    Conflict,
}

/// The precondition that a document is still as read: same `updateTime`, or still absent.
fn unchanged_since(document: Option<&Document>) -> Value {
    match document {
        Some(document) => json!({ "updateTime": document.update_time() }),
        None => json!({ "exists": false }),
    }
}

/// The fence counter document id that belongs to a lock document id.
fn fence_document_id_of(lock_doc_id: &str) -> Result<String> {
    document_id(&format!("fence:{lock_doc_id}"))
}

/// A lock document, as read.
struct LockDoc {
    lock_id: String,
    expires_at_ms: i64,
    acquired_at_ms: i64,
    key: String,
    fence: Fence,
    holder: Option<String>,
    name: String,
    update_time: String,
}

/// The largest integer a JavaScript number holds exactly: the TypeScript SyncGuard's times are
/// numbers, and no clock this side of the year 287 000 reaches it. An expiry beyond it would
/// hold a key forever.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl LockDoc {
    /// A SyncGuard lock record, or why the document is not one: `lockId` a non-empty string,
    /// `expiresAtMs` and `acquiredAtMs` integers from 0 to 2^53 − 1, `key` a string, `fence`
    /// 15 digits (not all zero). Other fields are tolerated (a later version may add some);
    /// `holder`, ours, is read when it is a string (it is absent from the TypeScript
    /// SyncGuard's documents, and anything else under that name is not ours: none).
    ///
    /// Anything else is stored data that is not a lock — reading again finds the same — so
    /// every operation answers it alike: `Internal`, naming the key (`key`, the key the
    /// caller asked for when known), never "locked" and never "absent", and nothing is
    /// written over it.
    fn parse(document: &Document, key: Option<&str>) -> Result<LockDoc> {
        let stored_key = document.string("key");
        let not_a_lock = |problem: &str| {
            let error = LockError::internal(format!(
                "a Firestore lock document is not a SyncGuard lock record: {problem}"
            ));
            // The caller's key, or the one the document names, or its document id: whatever
            // lets an operator find it.
            match key.or(stored_key) {
                Some(key) => error.with_key(key),
                None => error.with_key(document.name().rsplit('/').next().unwrap_or_default()),
            }
        };
        let lock_id = document
            .string("lockId")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| not_a_lock("`lockId` is not a non-empty string"))?;
        let time = |field: &str| {
            document
                .integer(field)
                .filter(|ms| (0..=MAX_SAFE_INTEGER).contains(ms))
                .ok_or_else(|| {
                    not_a_lock(&format!(
                        "`{field}` is not an integer from 0 to 2^53 - 1 (milliseconds)"
                    ))
                })
        };
        let expires_at_ms = time("expiresAtMs")?;
        let acquired_at_ms = time("acquiredAtMs")?;
        let stored_key = stored_key.ok_or_else(|| not_a_lock("`key` is not a string"))?;
        let fence = document
            .string("fence")
            .and_then(|fence| fence.parse::<Fence>().ok())
            .ok_or_else(|| not_a_lock("`fence` is not 15 digits (not all zero)"))?;
        Ok(LockDoc {
            lock_id: lock_id.to_owned(),
            expires_at_ms,
            acquired_at_ms,
            key: stored_key.to_owned(),
            fence,
            holder: document.string("holder").map(str::to_owned),
            name: document.name().to_owned(),
            update_time: document.update_time().to_owned(),
        })
    }

    fn record(self) -> LockRecord {
        LockRecord {
            key: self.key,
            lock_id: self.lock_id,
            expires_at_ms: self.expires_at_ms,
            acquired_at_ms: self.acquired_at_ms,
            fence: self.fence,
            holder: self.holder,
        }
    }
}

/// The fence counter a counter document holds: 15 digits (not all zero). Anything else stops
/// the acquisition that read it, before it writes anything: `Internal`, naming the key.
fn parse_counter(document: &Document, key: &str) -> Result<u64> {
    document
        .string("fence")
        .and_then(|text| text.parse::<Fence>().ok())
        .map(Fence::value)
        .ok_or_else(|| {
            LockError::internal(
                "a Firestore fence counter document is not a SyncGuard fence counter: `fence` \
                 is not 15 digits (not all zero)",
            )
            .with_key(key)
        })
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

    /// The latest estimate of this machine's clock offset from Firestore's (`None` before the
    /// first answer).
    pub fn clock_skew(&self) -> Option<ClockSkew> {
        self.rest.skew.latest()
    }

    /// What the backend has sent so far.
    pub fn stats(&self) -> FirestoreStats {
        FirestoreStats {
            requests: self.rest.requests(),
            aborted_retries: self.aborted_retries.load(Ordering::Relaxed),
        }
    }

    /// The lock document id of a user key.
    pub fn lock_document_id(&self, key: &str) -> Result<String> {
        document_id(Key::new(key)?.as_str())
    }

    /// The fence counter document id of a user key.
    pub fn fence_document_id(&self, key: &str) -> Result<String> {
        fence_document_id_of(&self.lock_document_id(key)?)
    }

    /// Now, by the client clock, unless the clock is known to be too far off.
    fn now_ms(&self) -> Result<i64> {
        self.check_skew()?;
        Ok(self.clock.now_ms())
    }

    /// Fails while the measured clock skew is certainly beyond `max_clock_skew`. Every
    /// operation checks before it starts (and again when it reads the clock).
    fn check_skew(&self) -> Result<()> {
        if let (Some(bound), Some(skew)) = (self.max_clock_skew, self.rest.skew.latest())
            && skew.at_least() > bound
        {
            return Err(LockError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "this machine's clock is off Firestore's by {} ms (±{} ms), beyond \
                     max_clock_skew {bound:?}: synchronise it (NTP)",
                    skew.offset_ms, skew.uncertainty_ms
                ),
            ));
        }
        Ok(())
    }

    /// The error the caller sees: a REST failure names the endpoint, the project and the
    /// database.
    fn lock_error(&self, error: OpError) -> LockError {
        match error {
            OpError::Rest(error) => self.rest.lock_error(error),
            OpError::Lock(error) => error,
        }
    }

    /// Runs an operation made of a read and a compare-and-set commit, again (after a short
    /// jittered pause) when the commit met a transaction (ABORTED) or lost a race
    /// ([`Attempt::Conflict`]).
    fn with_retries<T>(&self, mut attempt: impl FnMut() -> OpResult<Attempt<T>>) -> Result<T> {
        let mut tries = 1;
        loop {
            match attempt() {
                Ok(Attempt::Done(value)) => return Ok(value),
                Ok(Attempt::Conflict) => {}
                Err(OpError::Rest(error)) if error.is_aborted() => {
                    self.aborted_retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => return Err(self.lock_error(error)),
            }
            if tries >= CAS_ATTEMPTS {
                return Err(LockError::new(
                    ErrorCode::ServiceUnavailable,
                    format!(
                        "Firestore kept changing under this operation ({CAS_ATTEMPTS} attempts)"
                    ),
                ));
            }
            let base = 10u64 << tries;
            std::thread::sleep(Duration::from_millis(
                base / 2 + rand::random_range(0..=base / 2),
            ));
            tries += 1;
        }
    }

    fn acquire_once(
        &self,
        user_key: &str,
        ttl_ms: i64,
        holder: Option<&Holder>,
    ) -> OpResult<Attempt<Acquisition>> {
        let lock_doc_id = document_id(user_key)?;
        let lock_name = self.rest.document_name(&self.collection, &lock_doc_id);
        let fence_name = self
            .rest
            .document_name(&self.fence_collection, &fence_document_id_of(&lock_doc_id)?);
        let [lock_doc, counter_doc] = self.rest.batch_get([&lock_name, &fence_name])?;
        let (lock_doc, counter_doc) = (lock_doc.as_ref(), counter_doc.as_ref());
        let now = self.now_ms()?;
        if let Some(doc) = lock_doc {
            let held = LockDoc::parse(doc, Some(user_key))?;
            if is_live(held.expires_at_ms, now, TIME_TOLERANCE_MS) {
                return Ok(Attempt::Done(Acquisition::Locked));
            }
        }
        let counter = match counter_doc {
            None => 0,
            Some(doc) => parse_counter(doc, user_key)?,
        };
        // Checked before the commit: a counter past the limit writes nothing.
        let fence = Fence::from_counter(counter + 1).map_err(|e| e.with_key(user_key))?;
        let lock_id = LockId::generate().into_string();
        let expires_at_ms = now.saturating_add(ttl_ms);
        let mut lock_fields = json!({
            "lockId": string_value(&lock_id),
            "expiresAtMs": integer_value(expires_at_ms),
            "acquiredAtMs": integer_value(now),
            "key": string_value(user_key),
            "fence": string_value(&fence.to_string()),
        });
        if let Some(holder) = holder {
            // An extra field: the TypeScript SyncGuard's renewals keep it (they update
            // `expiresAtMs` only), its reads ignore it, and its acquisitions replace the whole
            // document, so a description never outlives its lock.
            lock_fields["holder"] = string_value(holder.as_str());
        }
        let writes = vec![
            json!({
                "update": { "name": lock_name, "fields": lock_fields },
                "currentDocument": unchanged_since(lock_doc),
            }),
            json!({
                "update": { "name": fence_name, "fields": {
                    "fence": string_value(&fence.to_string()),
                    "keyDebug": string_value(user_key),
                }},
                "currentDocument": unchanged_since(counter_doc),
            }),
        ];
        let committed = match self.rest.commit_versions(writes) {
            // The commit may have been applied although no answer says so: the caller gets
            // the lock id it would hold, to release it (the Locker does, in the background).
            Err(error) if !error.is_aborted() && error.may_have_been_applied() => {
                let error = self.rest.lock_error(error).with_key(user_key);
                return Err(OpError::Lock(error.in_doubt(lock_id)));
            }
            committed => committed?,
        };
        let Some(times) = committed else {
            // Someone changed the lock or the counter since the read: another acquirer won.
            return Ok(Attempt::Done(Acquisition::Locked));
        };
        Ok(Attempt::Done(Acquisition::granted(
            lock_id,
            fence,
            expires_at_ms,
            times
                .first()
                .and_then(Option::as_deref)
                .map(|time| version_of(time, expires_at_ms)),
        )))
    }

    /// The query for a lock id (no limit: a second match must be seen, not hidden).
    fn lock_id_query(&self, lock_id: &str) -> Value {
        json!({
            "from": [{ "collectionId": self.collection }],
            "where": { "fieldFilter": {
                "field": { "fieldPath": "lockId" },
                "op": "EQUAL",
                "value": string_value(lock_id),
            }},
        })
    }

    /// The documents a query for `lock_id` finds.
    fn documents_with_lock_id(&self, lock_id: &str) -> Result<Vec<Document>, RestError> {
        self.rest.run_query(self.lock_id_query(lock_id))
    }

    /// The one document holding `lock_id`, checked; `Ok(None)` when none; two or more are an
    /// inconsistency, reported and treated as absent (nothing is touched).
    fn single_match(&self, documents: &[Document], lock_id: &str) -> Result<Option<LockDoc>> {
        match documents {
            [] => Ok(None),
            [document] => {
                let lock = LockDoc::parse(document, None)?;
                // Defence in depth: the query said so, the document must too; an answer that
                // contradicts its query is not "no lock".
                if lock.lock_id != lock_id {
                    return Err(self.rest.lock_error(RestError::bad_answer(
                        "runQuery",
                        "the document found does not hold the lock id asked for",
                    )));
                }
                Ok(Some(lock))
            }
            _ => {
                log::warn!(
                    "syncguard: {} Firestore lock documents carry the same lock id (hash {}); \
                     leaving them alone",
                    documents.len(),
                    hash_key(lock_id)
                );
                Ok(None)
            }
        }
    }

    /// Release (`ttl_ms == None`) or extend: the lock found by its id, changed only if it is
    /// still exactly as read.
    fn mutate_once(
        &self,
        lock_id: &str,
        ttl_ms: Option<i64>,
    ) -> OpResult<Attempt<(Outcome<i64>, Option<Version>)>> {
        let documents = self.documents_with_lock_id(lock_id)?;
        let Some(lock) = self
            .single_match(&documents, lock_id)
            .map_err(|e| e.with_lock_id(lock_id))?
        else {
            return Ok(Attempt::Done((Outcome::NotFound, None)));
        };
        let now = self.now_ms()?;
        let unchanged = json!({ "updateTime": lock.update_time });
        let delete = json!({ "delete": lock.name, "currentDocument": unchanged });
        let (write, outcome) = if !is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS) {
            // Expired: remove it (it is this lock id's), never revive it.
            (delete, Outcome::Expired)
        } else if let Some(ttl_ms) = ttl_ms {
            let expires_at_ms = now.saturating_add(ttl_ms);
            let update = renewal_write(&lock.name, expires_at_ms, &lock.update_time);
            (update, Outcome::Applied(expires_at_ms))
        } else {
            (delete, Outcome::Applied(lock.expires_at_ms))
        };
        Ok(match self.rest.commit_versions(vec![write])? {
            Some(times) => {
                let version = match (outcome, ttl_ms) {
                    (Outcome::Applied(expires_at_ms), Some(_)) => times
                        .first()
                        .and_then(Option::as_deref)
                        .map(|time| version_of(time, expires_at_ms)),
                    _ => None,
                };
                Attempt::Done((outcome, version))
            }
            None => Attempt::Conflict,
        })
    }

    /// The lease's lock document and its update time, when the holder knows its version and
    /// the lock is live by this machine's clock: then a renewal or release is one write with
    /// that version as precondition. `None` sends the caller the long way (find it by lock id).
    fn known(&self, lease: LeaseRef<'_>) -> Result<Option<(String, String)>> {
        let (Some(key), Some(version)) = (lease.key, lease.version) else {
            return Ok(None);
        };
        let Some((expires_at_ms, update_time)) = parse_version(version) else {
            return Ok(None);
        };
        if !is_live(expires_at_ms, self.now_ms()?, TIME_TOLERANCE_MS) {
            return Ok(None);
        }
        let name = self
            .rest
            .document_name(&self.collection, &document_id(key.as_str())?);
        Ok(Some((name, update_time.to_owned())))
    }

    /// A renewal the long way: the lock found by its id, changed if unchanged since read.
    fn extend_by_lock_id(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let lock_id = lease.lock_id.as_str();
        let (outcome, version) =
            self.with_retries(|| self.mutate_once(lock_id, Some(ttl.as_millis())))?;
        Ok(match outcome {
            Outcome::Applied(expires_at_ms) => Outcome::Applied(Extension {
                expires_at_ms,
                version,
            }),
            Outcome::NotFound => Outcome::NotFound,
            Outcome::Expired => Outcome::Expired,
            Outcome::NotOwner => Outcome::NotOwner,
        })
    }

    /// The lock document for `key`, read without a transaction.
    fn read_lock(&self, key: &Key) -> OpResult<Option<LockDoc>> {
        let name = self
            .rest
            .document_name(&self.collection, &document_id(key.as_str())?);
        let [document] = self.rest.batch_get([&name])?;
        match document {
            None => Ok(None),
            Some(doc) => Ok(Some(LockDoc::parse(&doc, Some(key.as_str()))?)),
        }
    }
}

impl Driver for FirestoreBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("firestore", true, TimeAuthority::Client)
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl, holder: Option<&Holder>) -> Result<Acquisition> {
        self.check_skew()?;
        self.with_retries(|| self.acquire_once(key.as_str(), ttl.as_millis(), holder))
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        if let Some((name, update_time)) = self.known(lease)? {
            let delete = json!({
                "delete": name,
                "currentDocument": { "updateTime": update_time },
            });
            match self.rest.commit_versions(vec![delete]) {
                // Unchanged since this holder's last write, and live by `known`.
                Ok(Some(_)) => return Ok(Outcome::Applied(())),
                // Changed (or a transaction in the way): the long way decides.
                Ok(None) => {}
                Err(error) if error.is_aborted() => {}
                // No usable answer: the delete may or may not have happened. The long way
                // reads again and decides, so that a hiccup does not leave the lock to block
                // everyone until it expires (if this delete did happen, it answers "gone").
                Err(error) if error.is_worth_retrying_now() => {
                    let error = self.rest.lock_error(error);
                    log::debug!("syncguard: Firestore release retried by lock id: {error}");
                }
                Err(error) => return Err(self.rest.lock_error(error)),
            }
        }
        let lock_id = lease.lock_id.as_str();
        let (outcome, _) = self.with_retries(|| self.mutate_once(lock_id, None))?;
        Ok(match outcome {
            Outcome::Applied(_) => Outcome::Applied(()),
            Outcome::NotFound => Outcome::NotFound,
            Outcome::Expired => Outcome::Expired,
            Outcome::NotOwner => Outcome::NotOwner,
        })
    }

    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        self.check_skew()?;
        if let Some((name, update_time)) = self.known(lease)? {
            let expires_at_ms = self.now_ms()?.saturating_add(ttl.as_millis());
            let write = renewal_write(&name, expires_at_ms, &update_time);
            match self.rest.commit_versions(vec![write]) {
                Ok(Some(times)) => {
                    return Ok(Outcome::Applied(Extension {
                        expires_at_ms,
                        version: times
                            .first()
                            .and_then(Option::as_deref)
                            .map(|time| version_of(time, expires_at_ms)),
                    }));
                }
                Ok(None) => {}
                Err(error) if error.is_aborted() => {}
                Err(error) => return Err(self.rest.lock_error(error)),
            }
        }
        self.extend_by_lock_id(lease, ttl)
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        if let Err(error) = self.check_skew() {
            return leases
                .iter()
                .map(|_| Err(LockError::new(error.code(), error.message())))
                .collect();
        }
        // Leases whose version is known go out as one batch write (each applied on its own,
        // with its own precondition); the rest, and those whose document changed, the long way.
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> =
            leases.iter().map(|_| None).collect();
        let mut batch = Vec::new();
        for (i, (lease, ttl)) in leases.iter().enumerate() {
            match self.known(*lease) {
                Ok(Some((name, update_time))) => batch.push((i, name, update_time, *ttl)),
                Ok(None) => {}
                Err(error) => answers[i] = Some(Err(error)),
            }
        }
        for chunk in batch.chunks(BATCH_WRITE_LIMIT) {
            let now = match self.now_ms() {
                Ok(now) => now,
                Err(error) => {
                    for (i, ..) in chunk {
                        answers[*i] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                    continue;
                }
            };
            let expiries: Vec<i64> = chunk
                .iter()
                .map(|(.., ttl)| now.saturating_add(ttl.as_millis()))
                .collect();
            let writes = chunk
                .iter()
                .zip(&expiries)
                .map(|((_, name, update_time, _), expires_at_ms)| {
                    renewal_write(name, *expires_at_ms, update_time)
                })
                .collect();
            match self.rest.batch_write(writes) {
                Ok(results) => {
                    for (((i, ..), expires_at_ms), result) in
                        chunk.iter().zip(&expiries).zip(results)
                    {
                        answers[*i] = match result {
                            Ok(time) => Some(Ok(Outcome::Applied(Extension {
                                expires_at_ms: *expires_at_ms,
                                version: Some(version_of(&time, *expires_at_ms)),
                            }))),
                            Err(error) if error.is_precondition_failure() || error.is_aborted() => {
                                None
                            }
                            Err(error) => Some(Err(self.rest.lock_error(error))),
                        };
                    }
                }
                Err(error) => {
                    let error = self.rest.lock_error(error);
                    for (i, ..) in chunk {
                        answers[*i] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                }
            }
        }
        answers
            .into_iter()
            .zip(leases)
            .map(|(answer, (lease, ttl))| {
                answer.unwrap_or_else(|| self.extend_by_lock_id(*lease, *ttl))
            })
            .collect()
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        self.check_skew()?;
        let Some(lock) = self.read_lock(key).map_err(|e| self.lock_error(e))? else {
            return Ok(false);
        };
        let now = self.now_ms()?;
        let live = is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS);
        if !live
            && self.cleanup_in_is_locked
            && now - lock.expires_at_ms > ASSUMED_SKEW_MS + CLEANUP_GUARD_MS
        {
            // Only if nobody changed it since it was read; best effort, outcome ignored.
            let delete = json!({
                "delete": lock.name,
                "currentDocument": { "updateTime": lock.update_time },
            });
            if let Err(error) = self.rest.commit(vec![delete]) {
                let error = self.rest.lock_error(error);
                log::debug!("syncguard: Firestore cleanup skipped: {error}");
            }
        }
        Ok(live)
    }

    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
        self.check_skew()?;
        let lock = match by {
            Find::Key(key) => self.read_lock(key).map_err(|e| self.lock_error(e))?,
            Find::LockId(lock_id) => {
                let documents = self
                    .documents_with_lock_id(lock_id.as_str())
                    .map_err(|e| self.rest.lock_error(e))?;
                self.single_match(&documents, lock_id.as_str())?
            }
        };
        let Some(lock) = lock else {
            return Ok(None);
        };
        if !is_live(lock.expires_at_ms, self.now_ms()?, TIME_TOLERANCE_MS) {
            return Ok(None);
        }
        Ok(Some(lock.record()))
    }

    fn list_records(&self, prefix: &KeyPrefix, limit: ListLimit) -> Result<LockList<LockRecord>> {
        self.list(prefix, limit)
    }
}

impl fmt::Debug for FirestoreBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirestoreBackend")
            .field("project", &self.project)
            .field("database", &self.database)
            .field("collection", &self.collection)
            .field("fence_collection", &self.fence_collection)
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("max_clock_skew", &self.max_clock_skew)
            .field("clock_skew", &self.clock_skew())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
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

    #[test]
    fn rejected_document_ids_are_hashed() {
        for key in ["a/b/c", ".", "..", "__reserved__"] {
            let id = document_id(key).unwrap();
            assert_eq!(id.len(), 22, "{key} → {id}");
            assert!(!is_rejected_id(&id));
            assert_eq!(id, hashed_storage_key("", key));
        }
        for key in ["plain", "__x", "x__", "_._", "a.b", "..."] {
            assert_eq!(document_id(key).unwrap(), key);
        }
    }

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
