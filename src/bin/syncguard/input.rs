//! The checks of a command's input that the library would make only once connected: made here
//! first, so that a typo exits 2 at once, whatever the backend and whether or not its server
//! answers, instead of costing a connect timeout and ending as a backend error (exit 3).
//!
//! Each check is the library's own (the same bounds, the same message), with the option it
//! concerns named in front.

use std::time::Duration;

use syncguard::LockError;
use syncguard::driver::{KeyPrefix, Ttl, normalize_and_validate_key, validate_lock_id};

/// `--key`: not empty, at most 512 bytes after NFC normalisation.
pub fn key(key: &str) -> syncguard::Result<()> {
    normalize_and_validate_key(key)
        .map(drop)
        .map_err(|error| named("--key", &error))
}

/// `--lock-id`: the shape of a lock id (the message never repeats it).
pub fn lock_id(lock_id: &str) -> syncguard::Result<()> {
    validate_lock_id(lock_id).map_err(|error| named("--lock-id", &error))
}

/// `list --prefix`: at most 512 bytes after NFC normalisation.
pub fn prefix(prefix: &str) -> syncguard::Result<()> {
    KeyPrefix::new(prefix)
        .map(drop)
        .map_err(|error| named("--prefix", &error))
}

/// `--ttl`: whole milliseconds, from 1 ms to `MAX_TTL_MS` (about 317 years).
pub fn ttl(ttl: Duration) -> syncguard::Result<()> {
    Ttl::new(ttl)
        .map(drop)
        .map_err(|error| named("--ttl", &error))
}

/// `error`, an `InvalidArgument`, with the option it concerns in front.
pub fn named(option: &str, error: &LockError) -> LockError {
    LockError::invalid_argument(format!("{option}: {}", error.message()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncguard::ErrorCode;

    #[test]
    fn each_check_names_its_option() {
        let refused = [
            key(&"k".repeat(513)),
            key(""),
            lock_id("bad"),
            prefix(&"p".repeat(513)),
            ttl(Duration::from_millis(0)),
            ttl(Duration::from_secs(318 * 366 * 24 * 3600)),
        ];
        for (error, option) in
            refused
                .into_iter()
                .zip(["--key", "--key", "--lock-id", "--prefix", "--ttl", "--ttl"])
        {
            let error = error.unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument);
            assert!(error.message().starts_with(option), "{error}");
        }
        assert!(key("k").is_ok() && prefix("").is_ok() && ttl(Duration::from_secs(30)).is_ok());
    }
}
