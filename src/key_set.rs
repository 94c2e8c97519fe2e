//! Several keys taken together (DESIGN §12, "Several keys"): the validated [`KeySet`] that
//! [`Locker::lock_all`](crate::Locker::lock_all) asks for (a store takes it in
//! [`Driver::try_acquire`](crate::driver::Driver::try_acquire) with [`Request::all`](crate::driver::Request::all)).
//!
//! A set holds 1 to [`MAX_KEYS`] keys, each a valid [`Key`], duplicates collapsed after NFC
//! normalisation, in one fixed order (the keys' UTF-8 bytes) whatever the order the caller
//! named them in: every caller takes overlapping keys in the same order, so taking them one at a
//! time can make two callers refuse each other, never wait for each other.

use std::fmt;

use crate::error::{LockError, Result};
use crate::key::Key;

/// The most keys one [`KeySet`] holds (after duplicates are collapsed).
pub const MAX_KEYS: usize = 64;

/// 1 to [`MAX_KEYS`] distinct, validated keys in byte order: what several keys taken together
/// are asked for with. Built where the keys enter the crate, so a bad key among good ones is
/// refused before anything is sent.
///
/// ```
/// use syncguard::driver::KeySet;
///
/// let keys = KeySet::new(&["acct:2", "acct:1", "acct:2"])?;
/// let names: Vec<&str> = keys.iter().map(|key| key.as_str()).collect();
/// assert_eq!(names, ["acct:1", "acct:2"]);
/// assert!(KeySet::new::<&str>(&[]).is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet(Vec<Key>);

impl KeySet {
    /// Validates each of `keys` ([`Key::new`]), collapses duplicates and sorts them;
    /// `InvalidArgument` for no key, more than [`MAX_KEYS`] distinct ones, or an invalid one
    /// (the error names its position in `keys`, not the key, which may be anything).
    pub fn new<S: AsRef<str>>(keys: &[S]) -> Result<KeySet> {
        let mut valid = Vec::with_capacity(keys.len().min(MAX_KEYS + 1));
        for (position, key) in keys.iter().enumerate() {
            let key = Key::new(key.as_ref()).map_err(|error| {
                LockError::invalid_argument(format!(
                    "key {} of {}: {}",
                    position + 1,
                    keys.len(),
                    error.message()
                ))
            })?;
            valid.push(key);
        }
        valid.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        valid.dedup();
        match valid.len() {
            0 => Err(LockError::invalid_argument(
                "no key given: several keys take 1 to 64",
            )),
            n if n > MAX_KEYS => Err(LockError::invalid_argument(format!(
                "{n} distinct keys given; at most {MAX_KEYS} are taken together"
            ))),
            _ => Ok(KeySet(valid)),
        }
    }

    /// The set of one key.
    pub(crate) fn one(key: Key) -> KeySet {
        KeySet(vec![key])
    }

    /// The keys, in byte order.
    pub fn iter(&self) -> std::slice::Iter<'_, Key> {
        self.0.iter()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: a set holds at least one key (here for the convention that goes with `len`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys, in byte order.
    pub fn as_slice(&self) -> &[Key] {
        &self.0
    }
}

/// The keys, comma-separated, for messages.
impl fmt::Display for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, key) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "key {key}")?;
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a KeySet {
    type Item = &'a Key;
    type IntoIter = std::slice::Iter<'a, Key>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_deduplicated_and_normalised() {
        let keys = KeySet::new(&["b", "e\u{301}", "a", "é", "b"]).unwrap();
        let names: Vec<&str> = keys.iter().map(Key::as_str).collect();
        assert_eq!(names, ["a", "b", "é"]);
    }

    #[test]
    fn bounds() {
        assert!(KeySet::new::<&str>(&[]).is_err());
        let many: Vec<String> = (0..=MAX_KEYS).map(|n| format!("k{n}")).collect();
        assert!(KeySet::new(&many).is_err());
        assert_eq!(KeySet::new(&many[..MAX_KEYS]).unwrap().len(), MAX_KEYS);
        // Duplicates count once.
        let repeated: Vec<&str> = vec!["same"; MAX_KEYS * 2];
        assert_eq!(KeySet::new(&repeated).unwrap().len(), 1);
    }

    #[test]
    fn a_bad_key_is_named_by_position_only() {
        let long = "x".repeat(600);
        let error = KeySet::new(&["fine", long.as_str()]).unwrap_err();
        assert_eq!(error.code(), crate::ErrorCode::InvalidArgument);
        assert!(
            error.message().starts_with("key 2 of 2:"),
            "{}",
            error.message()
        );
        assert!(!error.message().contains("xxxx"));
    }
}
