//! Keys: normalisation and validation of user keys, the storage-key algorithm every backend
//! shares, and the hash used wherever an identifier must not appear in clear.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

use crate::error::{LockError, Result};

/// The longest user key accepted, in UTF-8 bytes after NFC normalisation.
pub const MAX_KEY_LENGTH_BYTES: usize = 512;

/// Normalises `key` to Unicode NFC and checks it is 1 to [`MAX_KEY_LENGTH_BYTES`] UTF-8 bytes.
///
/// Every backend calls this before any I/O, so `"e\u{301}"` and `"é"` name the same lock.
///
/// ```
/// assert_eq!(syncguard::normalize_and_validate_key("e\u{301}te\u{301}")?, "été");
/// assert!(syncguard::normalize_and_validate_key("").is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn normalize_and_validate_key(key: &str) -> Result<String> {
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
    Ok(normalized)
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
/// use syncguard::make_storage_key;
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

/// The sanitised identifier used in [`LockInfo`](crate::LockInfo), telemetry and logs:
/// the first 24 lowercase hex characters of SHA-256 over the NFC-normalised UTF-8 value.
///
/// ```
/// assert_eq!(syncguard::hash_key("resource:123"), "f52f328d6111ae89dbcfcb99");
/// ```
pub fn hash_key(value: &str) -> String {
    let digest = Sha256::digest(nfc(value).as_bytes());
    let mut hex = String::with_capacity(24);
    for byte in &digest[..12] {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0x0f), 16).unwrap_or('0'));
    }
    hex
}

fn nfc(value: &str) -> String {
    // Most keys are ASCII, which is already NFC: skip the normaliser's allocation-heavy path.
    if value.is_ascii() {
        value.to_owned()
    } else {
        value.nfc().collect()
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}:{key}")
    }
}

fn truncated_hash(prefixed: &str) -> String {
    let digest = Sha256::digest(prefixed.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn key_limits_are_bytes_after_nfc() {
        assert!(normalize_and_validate_key(&"x".repeat(512)).is_ok());
        let err = normalize_and_validate_key(&"x".repeat(513)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        // 256 decomposed "é" are 768 bytes, but 512 after NFC.
        assert!(normalize_and_validate_key(&"e\u{301}".repeat(256)).is_ok());
        assert!(normalize_and_validate_key(&"é".repeat(257)).is_err());
    }
}
