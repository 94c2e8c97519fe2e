//! Lock ids: the unguessable handle a holder uses to release or extend its lock.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRng as _;

use crate::error::{LockError, Result};
use crate::hash::hash_key;

/// A lock id, validated (`^[A-Za-z0-9_-]{22}$`): the bearer handle of one acquisition. Whoever
/// has it can release the lock, so `Debug` shows only its [`hash_key`].
///
/// ```
/// use syncguard::driver::LockId;
/// let id = LockId::generate();
/// assert_eq!(LockId::new(id.as_str())?, id);
/// assert!(LockId::new("not a lock id").is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockId(String);

impl LockId {
    /// Checks the shape of `lock_id` (`InvalidArgument` otherwise; the message never repeats
    /// the input).
    pub fn new(lock_id: &str) -> Result<LockId> {
        validate_lock_id(lock_id)?;
        Ok(LockId(lock_id.to_owned()))
    }

    /// A fresh lock id (see [`generate_lock_id`]).
    pub fn generate() -> LockId {
        LockId(generate_lock_id())
    }

    /// The 22 characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 22 characters, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockId(hash {})", hash_key(&self.0))
    }
}

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
/// let id = syncguard::driver::generate_lock_id();
/// assert_eq!(id.len(), 22);
/// syncguard::driver::validate_lock_id(&id)?;
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
/// [`LockId::new`] calls it where a lock id enters the crate, before any I/O, and answers
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
