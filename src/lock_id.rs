//! Lock ids: the unguessable handle a holder uses to release or extend its lock.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRng as _;

use crate::error::{LockError, Result};

/// Length of every lock id: 16 random bytes in base64url without padding.
pub const LOCK_ID_LENGTH: usize = 22;

/// A fresh lock id: 16 bytes from the operating system's CSPRNG, base64url without padding
/// (22 characters of `A-Z a-z 0-9 - _`).
///
/// Should the OS generator fail (it does not on supported platforms), the bytes come from the
/// thread-local ChaCha generator, which the OS seeded: a lock id never falls back to
/// timestamps or counters.
///
/// ```
/// let id = syncguard::generate_lock_id();
/// assert_eq!(id.len(), 22);
/// syncguard::validate_lock_id(&id)?;
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn generate_lock_id() -> String {
    let mut bytes = [0u8; 16];
    if rand::rngs::SysRng.try_fill_bytes(&mut bytes).is_err() {
        rand::fill(&mut bytes[..]);
    }
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Checks that `lock_id` has the shape of a lock id (`^[A-Za-z0-9_-]{22}$`).
///
/// Every backend operation that takes a lock id calls this before any I/O and answers
/// `InvalidArgument` on failure. The message never repeats the input.
pub fn validate_lock_id(lock_id: &str) -> Result<()> {
    let well_formed = lock_id.len() == LOCK_ID_LENGTH
        && lock_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if well_formed {
        Ok(())
    } else {
        Err(LockError::invalid_argument(format!(
            "malformed lock id: expected {LOCK_ID_LENGTH} base64url characters, got {} characters",
            lock_id.chars().count()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let ids: HashSet<String> = (0..10_000).map(|_| generate_lock_id()).collect();
        assert_eq!(ids.len(), 10_000);
        for id in &ids {
            validate_lock_id(id).unwrap();
        }
    }

    #[test]
    fn malformed_ids_are_rejected_without_echo() {
        for bad in [
            "",
            "short",
            "AAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAA+",
            "AAAAAAAAAAAAAAAAAAAAA/",
            "AAAAAAAAAAAAAAAAAAAAA=",
            "AAAAAAAAAAAAAAAAAAAAA\0",
            "AAAAAAAAAAAAAAAAAAAA\u{e9}",
            "secret-token-xxxxxxxxxxxx",
        ] {
            let err = validate_lock_id(bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{bad:?}");
            if !bad.is_empty() {
                assert!(!err.to_string().contains(bad), "{err}");
            }
        }
        validate_lock_id("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        validate_lock_id("azAZ09-_azAZ09-_azAZ09").unwrap();
    }
}
