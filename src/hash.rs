//! The two digests of the SyncGuard formats, and NFC normalisation. Depends on nothing else in
//! the crate, so that errors, keys and records can all use it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// The sanitised form of an identifier: the first 24 lowercase hex characters of SHA-256 of its
/// NFC form. Used wherever a key or lock id must be named without appearing in clear (lookups,
/// telemetry, `Debug`); it never reaches storage.
///
/// ```
/// use syncguard::driver::hash_key;
/// assert_eq!(hash_key("resource:123"), "f52f328d6111ae89dbcfcb99");
/// assert_eq!(hash_key("e\u{301}"), hash_key("é"));
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

/// `value` in Unicode NFC (ASCII is already).
pub(crate) fn nfc(value: &str) -> String {
    if value.is_ascii() {
        value.to_owned()
    } else {
        value.nfc().collect()
    }
}

/// The hashed form of a storage key: the first 16 bytes of SHA-256, base64url without padding
/// (22 characters).
pub(crate) fn truncated_hash(prefixed: &str) -> String {
    let digest = Sha256::digest(prefixed.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}
