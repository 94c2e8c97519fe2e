//! What every kind of credentials shares: the [`TokenSource`] each one implements, the OAuth
//! scopes they ask for, and the environment reader they look for files and variables through.

use std::fmt;

use crate::error::Result;

/// Reads an environment variable (`std::env::var_os` outside the tests): where credentials
/// are looked for is decided over this, so tests need not touch the process environment.
pub(super) type Env<'a> = &'a dyn Fn(&str) -> Option<std::ffi::OsString>;

/// The OAuth scope of Cloud Datastore and Firestore: what the tokens used on Firestore are for.
pub(super) const SCOPE: &str = "https://www.googleapis.com/auth/datastore";
/// The scope of a token that is only exchanged for another through IAM, as Google's libraries
/// ask for it.
pub(super) const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Produces the `Authorization` header value. Thread-safe; one refresh at a time.
pub(crate) trait TokenSource: Send + Sync + fmt::Debug {
    /// The header value, e.g. `Bearer ya29…`, fetching a token first when the cached one is
    /// missing or due for refresh.
    fn authorization(&self) -> Result<String>;
}
