//! The backend URL (`--url`, `SYNCGUARD_URL`): which URLs a command can use, and connecting to
//! the backend one names.

use syncguard::{LockBackend, LockError};

use crate::verbose;

/// The URL given (`--url`, `SYNCGUARD_URL`), if it names a backend a command can use.
pub fn backend_url(url: Option<&str>) -> syncguard::Result<&str> {
    let url = url.ok_or_else(|| {
        LockError::invalid_argument("no backend URL: pass --url or set SYNCGUARD_URL")
    })?;
    if scheme(url) == "memory" {
        return Err(LockError::invalid_argument(
            "memory: keeps its locks inside one process, so a lock taken by one syncguard \
             command means nothing to the next; use redis://, postgres:// or firestore://",
        ));
    }
    Ok(url)
}

/// The backend the URL names (see [`backend_url`]), observed with `-v`.
pub fn connect(url: Option<&str>) -> syncguard::Result<Box<dyn LockBackend>> {
    syncguard::connect(backend_url(url)?).map(verbose::observed)
}

/// The URL's scheme, lowercased (`""` when it has none).
pub fn scheme(url: &str) -> String {
    url.trim()
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default()
}
