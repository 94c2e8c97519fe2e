//! Keys: the validated [`Key`] every operation takes, and the storage-key algorithm every
//! backend shares.

use std::fmt;

use crate::error::{LockError, Result};
use crate::hash::{nfc, truncated_hash};

/// The longest user key accepted, in UTF-8 bytes after NFC normalisation.
pub const MAX_KEY_LENGTH_BYTES: usize = 512;

/// A lock key, validated: Unicode NFC, 1 to [`MAX_KEY_LENGTH_BYTES`] UTF-8 bytes. Built once where
/// a key enters the crate (a [`LockBackend`](crate::LockBackend) call, [`Locker::lock`](crate::Locker::lock)),
/// so `"e\u{301}"` and `"é"` name the same lock and no backend sees an unchecked key.
///
/// ```
/// use syncguard::driver::Key;
/// assert_eq!(Key::new("e\u{301}te\u{301}")?.as_str(), "été");
/// assert!(Key::new("").is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    /// Normalises `key` to NFC and checks its length (`InvalidArgument` otherwise).
    pub fn new(key: &str) -> Result<Key> {
        let normalized = nfc(key);
        if normalized.is_empty() {
            return Err(LockError::invalid_argument("key must not be empty"));
        }
        if normalized.len() > MAX_KEY_LENGTH_BYTES {
            return Err(LockError::invalid_argument(format!(
                "key is {} bytes after NFC normalisation; the limit is {MAX_KEY_LENGTH_BYTES}",
                normalized.len()
            )));
        }
        Ok(Key(normalized))
    }

    /// The normalised key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The normalised key, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0)
    }
}

/// [`Key::new`] as a string: the NFC form of `key`, or `InvalidArgument`.
///
/// ```
/// assert_eq!(syncguard::driver::normalize_and_validate_key("e\u{301}te\u{301}")?, "été");
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn normalize_and_validate_key(key: &str) -> Result<String> {
    Key::new(key).map(Key::into_string)
}

/// The storage key for `key` under `prefix` in a store whose keys may be at most `limit` bytes,
/// leaving `reserve` bytes free for suffixes the backend derives from it.
///
/// The algorithm is the SyncGuard one, so Rust and TypeScript services agree on every key:
/// 1. NFC-normalise `key` (empty → `InvalidArgument`); drop one trailing `:` from `prefix`.
/// 2. `InvalidArgument` if the prefix alone (plus its separator) and `reserve` exceed `limit`.
/// 3. `prefix:key` (or `key` when the prefix is empty) if it fits in `limit - reserve` bytes.
/// 4. Otherwise `prefix:H` where `H` is the first 16 bytes of SHA-256 of the whole prefixed key,
///    base64url without padding (22 characters); `InvalidArgument` if even that does not fit.
///
/// `key` is not limited to [`MAX_KEY_LENGTH_BYTES`] here: derived keys such as
/// `fence:<storage key>` go through the same function.
///
/// ```
/// use syncguard::driver::make_storage_key;
/// assert_eq!(make_storage_key("syncguard", "resource:123", 1000, 26)?, "syncguard:resource:123");
/// assert_eq!(make_storage_key("", "a".repeat(1701).as_str(), 1700, 0)?.len(), 22);
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn make_storage_key(prefix: &str, key: &str, limit: usize, reserve: usize) -> Result<String> {
    let key = nfc(key);
    if key.is_empty() {
        return Err(LockError::invalid_argument("key must not be empty"));
    }
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    let separator = usize::from(!prefix.is_empty());
    // Checked: `reserve` and `limit` are caller input, and an overflow must not pass as "fits".
    let fits = |len: usize| len.checked_add(reserve).is_some_and(|total| total <= limit);
    if !fits(prefix.len() + separator) {
        return Err(LockError::invalid_argument(format!(
            "prefix of {} bytes leaves no room for keys within the backend's {limit}-byte limit",
            prefix.len()
        )));
    }
    let prefixed = join(prefix, &key);
    if fits(prefixed.len()) {
        return Ok(prefixed);
    }
    let hashed = join(prefix, &truncated_hash(&prefixed));
    if !fits(hashed.len()) {
        return Err(LockError::invalid_argument(format!(
            "key exceeds the backend's {limit}-byte limit even after hash truncation"
        )));
    }
    Ok(hashed)
}

/// The hashed form a storage key takes when the prefixed key is too long (step 4 of
/// [`make_storage_key`]); Firestore also uses it for document ids it would reject.
#[cfg(feature = "firestore")]
pub(crate) fn hashed_storage_key(prefix: &str, key: &str) -> String {
    let key = nfc(key);
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    join(prefix, &truncated_hash(&join(prefix, &key)))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}:{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn key_limits_are_bytes_after_nfc() {
        assert!(Key::new(&"x".repeat(512)).is_ok());
        let err = Key::new(&"x".repeat(513)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        // 256 decomposed "é" are 768 bytes, but 512 after NFC.
        assert!(Key::new(&"e\u{301}".repeat(256)).is_ok());
        assert!(Key::new(&"é".repeat(257)).is_err());
    }
}
