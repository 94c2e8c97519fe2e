//! The one error type of the crate, [`LockError`], and its classification, [`ErrorCode`].
//!
//! Contention is not an error: `acquire` answers [`AcquireOutcome::Locked`](crate::AcquireOutcome)
//! and `release`/`extend` answer `false`/`None` when the lock is absent. A `LockError` means the
//! operation could not be carried out (bad input, an unreachable server, a timeout, …).

use std::error::Error as StdError;
use std::fmt;

/// `Result<T, LockError>`.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

/// What kind of failure a [`LockError`] is. Stable, `Copy`, cheap to match on.
///
/// The codes are those of the SyncGuard specification, so a Rust service and a
/// TypeScript service classify the same failure the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The backend could not be reached or refused to serve: connection refused or reset,
    /// DNS failure, server shutting down, transaction conflicts that outlived their retries.
    ServiceUnavailable,
    /// The backend rejected the credentials or the caller lacks permission.
    AuthFailed,
    /// The caller passed something invalid: an empty or over-long key, a malformed lock id,
    /// a TTL that is not a positive whole number of milliseconds, a bad URL or option.
    /// Always raised before any I/O.
    InvalidArgument,
    /// The backend throttled the request, or no pooled connection became free in time.
    RateLimited,
    /// A network call did not complete within its configured timeout.
    NetworkTimeout,
    /// [`Locker::lock`](crate::Locker::lock) gave up: the lock stayed held by someone else
    /// for the whole acquisition timeout or retry budget.
    AcquisitionTimeout,
    /// The wait for a lock was cancelled through a [`CancelToken`](crate::CancelToken).
    Aborted,
    /// Anything unexpected: a malformed value in storage, a fence counter past its limit,
    /// an unclassified backend error.
    Internal,
    /// [`LockGuard::check`](crate::LockGuard::check): the guard's lease is no longer held.
    LockLost,
}

impl ErrorCode {
    /// The code's name as the specification spells it (`"ServiceUnavailable"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ServiceUnavailable => "ServiceUnavailable",
            ErrorCode::AuthFailed => "AuthFailed",
            ErrorCode::InvalidArgument => "InvalidArgument",
            ErrorCode::RateLimited => "RateLimited",
            ErrorCode::NetworkTimeout => "NetworkTimeout",
            ErrorCode::AcquisitionTimeout => "AcquisitionTimeout",
            ErrorCode::Aborted => "Aborted",
            ErrorCode::Internal => "Internal",
            ErrorCode::LockLost => "LockLost",
        }
    }

    /// Whether the same call may succeed if simply tried again later
    /// (`ServiceUnavailable`, `RateLimited`, `NetworkTimeout`).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorCode::ServiceUnavailable | ErrorCode::RateLimited | ErrorCode::NetworkTimeout
        )
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed lock operation: a [`code`](LockError::code), a message, and where known the key,
/// the lock id and the underlying cause.
///
/// `Display` prints `Code: message`. Neither `Display` nor `Debug` ever prints the lock id
/// (it is a bearer credential: whoever has it can release the lock); `Debug` shows its hash.
/// Backends never put passwords, tokens or private keys into messages.
pub struct LockError {
    code: ErrorCode,
    message: String,
    key: Option<String>,
    lock_id: Option<String>,
    in_doubt: bool,
    /// The other leases of a set acquisition in doubt, as (key, lock id).
    more_in_doubt: Vec<(String, String)>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl StdError for LockError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

impl LockError {
    /// A new error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        LockError {
            code,
            message: message.into(),
            key: None,
            lock_id: None,
            in_doubt: false,
            more_in_doubt: Vec::new(),
            source: None,
        }
    }

    /// Shorthand for `LockError::new(ErrorCode::InvalidArgument, message)`.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// Shorthand for `LockError::new(ErrorCode::Internal, message)`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// Attaches the (user) key the operation was about.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Attaches the lock id the operation was about. It is kept for [`LockError::lock_id`]
    /// and never printed.
    #[must_use]
    pub fn with_lock_id(mut self, lock_id: impl Into<String>) -> Self {
        self.lock_id = Some(lock_id.into());
        self
    }

    /// Marks a failed acquisition whose request may still have been applied by the store
    /// under `lock_id` (it was sent, but no answer came back: a timeout, a connection lost
    /// mid-call). A driver's `try_acquire` says so; the [`Locker`](crate::Locker) then
    /// releases that lock id in the background, so that an acquisition the store applies late
    /// does not hold the key, owned by nobody, for its whole TTL. Implies
    /// [`with_lock_id`](LockError::with_lock_id).
    #[must_use]
    pub fn in_doubt(mut self, lock_id: impl Into<String>) -> Self {
        self.lock_id = Some(lock_id.into());
        self.in_doubt = true;
        self
    }

    /// Marks a failed acquisition of several keys at once whose request may still have been
    /// applied by the store: each `(key, lock id)` of `leases` may be held. The first becomes
    /// [`key`](LockError::key) and [`lock_id`](LockError::lock_id); [`in_doubt_leases`](LockError::in_doubt_leases)
    /// lists them all, and the [`Locker`](crate::Locker) releases each in the background.
    /// Nothing when `leases` is empty.
    #[must_use]
    pub fn in_doubt_all(mut self, leases: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut leases = leases.into_iter();
        if let Some((key, lock_id)) = leases.next() {
            self = self.with_key(key).in_doubt(lock_id);
            self.more_in_doubt = leases.collect();
        }
        self
    }

    /// The leases this failed acquisition may still have taken, as (key when known, lock id):
    /// none unless [`is_in_doubt`](LockError::is_in_doubt); one for a single key; one per key
    /// for several ([`in_doubt_all`](LockError::in_doubt_all)).
    pub fn in_doubt_leases(&self) -> Vec<(Option<&str>, &str)> {
        let Some(lock_id) = self.lock_id().filter(|_| self.is_in_doubt()) else {
            return Vec::new();
        };
        std::iter::once((self.key(), lock_id))
            .chain(
                self.more_in_doubt
                    .iter()
                    .map(|(key, lock_id)| (Some(key.as_str()), lock_id.as_str())),
            )
            .collect()
    }

    /// Whether this error is a failed acquisition that may still have taken the lock under
    /// [`lock_id`](LockError::lock_id) (see [`in_doubt`](LockError::in_doubt)).
    pub fn is_in_doubt(&self) -> bool {
        self.in_doubt && self.lock_id.is_some()
    }

    /// Attaches the underlying cause, reachable through [`std::error::Error::source`].
    #[must_use]
    pub fn with_source(mut self, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The classification of this error.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The human-readable message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The key the failed operation was about, when known.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The lock id the failed operation was about, when known.
    pub fn lock_id(&self) -> Option<&str> {
        self.lock_id.as_deref()
    }
}

impl fmt::Debug for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("LockError");
        d.field("code", &self.code).field("message", &self.message);
        if let Some(key) = &self.key {
            d.field("key", key);
        }
        if let Some(lock_id) = &self.lock_id {
            d.field("lock_id_hash", &crate::hash::hash_key(lock_id));
        }
        if self.in_doubt {
            d.field("in_doubt", &true);
        }
        if !self.more_in_doubt.is_empty() {
            d.field("more_in_doubt", &self.more_in_doubt.len());
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

/// Test helper: every input is refused as `InvalidArgument`, and neither the message nor the
/// `Debug` form repeats the secret it carried (`hunter2` by convention).
#[cfg(test)]
pub(crate) fn assert_refused_without_secret<T>(inputs: &[&str], parse: impl Fn(&str) -> Result<T>) {
    for input in inputs {
        let Err(err) = parse(input) else {
            panic!("{input:?} was accepted");
        };
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{input}: {err}");
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    }
}

/// Test helper: `outcome` is refused as `InvalidArgument` with exactly `message`, which (nor
/// the `Debug` form) does not repeat the secret (`hunter2` by convention).
#[cfg(all(
    test,
    any(feature = "redis", feature = "postgres", feature = "firestore")
))]
pub(crate) fn assert_refused_with<T>(outcome: Result<T>, message: &str) {
    let Err(err) = outcome else {
        panic!("accepted, expected: {message}");
    };
    assert_eq!(
        (err.code(), err.message()),
        (ErrorCode::InvalidArgument, message)
    );
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_code_and_message() {
        let e = LockError::new(ErrorCode::NetworkTimeout, "read timed out").with_key("k");
        assert_eq!(e.to_string(), "NetworkTimeout: read timed out");
        assert_eq!(e.code(), ErrorCode::NetworkTimeout);
        assert_eq!(e.key(), Some("k"));
    }

    #[test]
    fn debug_never_shows_the_lock_id() {
        let id = "AAAAAAAAAAAAAAAAAAAAAA";
        let e = LockError::internal("boom").with_lock_id(id);
        let shown = format!("{e:?}");
        assert!(!shown.contains(id), "{shown}");
        assert!(shown.contains("8a5bdb4cc15164126c6ef266"), "{shown}");
        assert_eq!(e.lock_id(), Some(id));
    }

    #[test]
    fn source_is_reachable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = LockError::new(ErrorCode::ServiceUnavailable, "connect").with_source(io);
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn transient_codes() {
        assert!(ErrorCode::ServiceUnavailable.is_transient());
        assert!(ErrorCode::NetworkTimeout.is_transient());
        assert!(ErrorCode::RateLimited.is_transient());
        assert!(!ErrorCode::AuthFailed.is_transient());
        assert!(!ErrorCode::InvalidArgument.is_transient());
    }
}
