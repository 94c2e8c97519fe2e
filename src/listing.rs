//! Listing held locks: the validated prefix and limit a listing takes, and the list it answers
//! with.

use std::fmt;

use crate::error::{LockError, Result};
use crate::hash::nfc;
use crate::key::MAX_KEY_LENGTH_BYTES;

/// How many locks a listing returns when the caller does not say (`syncguard list`).
pub const DEFAULT_LIST_LIMIT: usize = 100;

/// The most locks one listing may return. A listing is for operators: to see more, narrow the
/// prefix.
pub const MAX_LIST_LIMIT: usize = 1000;

/// A key prefix to list the locks under, validated: Unicode NFC (as keys are), at most
/// [`MAX_KEY_LENGTH_BYTES`] UTF-8 bytes, possibly empty (every lock). A key is under it when
/// the key's NFC form starts with the prefix's NFC form, byte for byte.
///
/// ```
/// use syncguard::driver::KeyPrefix;
/// let prefix = KeyPrefix::new("report:")?;
/// assert!(prefix.matches("report:2024"));
/// assert!(!prefix.matches("reports"));
/// assert!(KeyPrefix::new("")?.matches("anything"));
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Normalises `prefix` to NFC and checks its length (`InvalidArgument` beyond
    /// [`MAX_KEY_LENGTH_BYTES`]).
    pub fn new(prefix: &str) -> Result<KeyPrefix> {
        let normalized = nfc(prefix);
        if normalized.len() > MAX_KEY_LENGTH_BYTES {
            return Err(LockError::invalid_argument(format!(
                "the key prefix is {} bytes after NFC normalisation; the limit is \
                 {MAX_KEY_LENGTH_BYTES}",
                normalized.len()
            )));
        }
        Ok(KeyPrefix(normalized))
    }

    /// The normalised prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the (normalised) key `key` is under this prefix.
    pub fn matches(&self, key: &str) -> bool {
        key.starts_with(&self.0)
    }

    /// The least string above every string that starts with the prefix, in byte (code point)
    /// order: the prefix with its last character raised by one, after dropping any trailing
    /// `char::MAX`. `None` when nothing is above them all (an empty prefix, or one made only of
    /// `char::MAX`). For stores that find keys by range.
    pub fn upper_bound(&self) -> Option<String> {
        let mut chars: Vec<char> = self.0.chars().collect();
        while let Some(last) = chars.pop() {
            let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
            if let Some(next) = next {
                chars.push(next);
                return Some(chars.into_iter().collect());
            }
        }
        None
    }
}

impl fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyPrefix({:?})", self.0)
    }
}

/// How many locks a listing returns at most, validated: 1 to [`MAX_LIST_LIMIT`]; the default
/// is [`DEFAULT_LIST_LIMIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListLimit(usize);

impl ListLimit {
    /// `InvalidArgument` unless `1 <= limit <= MAX_LIST_LIMIT`.
    pub fn new(limit: usize) -> Result<ListLimit> {
        if (1..=MAX_LIST_LIMIT).contains(&limit) {
            Ok(ListLimit(limit))
        } else {
            Err(LockError::invalid_argument(format!(
                "the list limit must be from 1 to {MAX_LIST_LIMIT} (got {limit})"
            )))
        }
    }

    /// The limit.
    pub fn get(self) -> usize {
        self.0
    }
}

impl Default for ListLimit {
    fn default() -> Self {
        ListLimit(DEFAULT_LIST_LIMIT)
    }
}

/// Live locks under a key prefix, sorted by key: what a listing answers
/// ([`LockBackend::list`](crate::LockBackend::list), [`Driver::list_records`](crate::driver::Driver::list_records)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockList<T> {
    /// The locks, sorted by key (byte order), at most the limit asked for.
    pub locks: Vec<T>,
    /// Whether these are all the live locks under the prefix, and if not, why not.
    pub coverage: Coverage,
}

/// Whether a [`LockList`] holds every live lock under its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Coverage {
    /// Every live lock under the prefix is in the list (as the store saw them: a listing is
    /// not a snapshot, and locks come and go while it reads).
    Complete,
    /// The limit was reached: more live locks exist under the prefix, with keys after the last
    /// one listed.
    LimitReached,
    /// The store's bound on the work of one listing was reached first (each backend documents
    /// its bound): the list holds what was found within it, and locks may be missing from
    /// it. What lifts the bound depends on the backend (on Redis a narrower prefix does not:
    /// its bound counts every key examined).
    WorkBoundReached,
}

impl Coverage {
    /// `"complete"`, `"limit-reached"` or `"work-bound-reached"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coverage::Complete => "complete",
            Coverage::LimitReached => "limit-reached",
            Coverage::WorkBoundReached => "work-bound-reached",
        }
    }
}

impl<T> LockList<T> {
    /// Whether every live lock under the prefix is listed.
    pub fn is_complete(&self) -> bool {
        self.coverage == Coverage::Complete
    }

    /// The same list with each lock converted.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> LockList<U> {
        LockList {
            locks: self.locks.into_iter().map(f).collect(),
            coverage: self.coverage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn prefixes_are_nfc_and_bounded() {
        assert_eq!(KeyPrefix::new("e\u{301}").unwrap().as_str(), "é");
        assert!(KeyPrefix::new(&"x".repeat(512)).is_ok());
        let error = KeyPrefix::new(&"x".repeat(513)).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert_eq!(KeyPrefix::new("").unwrap().as_str(), "");
    }

    #[test]
    fn limits_are_bounded() {
        assert_eq!(ListLimit::default().get(), DEFAULT_LIST_LIMIT);
        assert!(ListLimit::new(0).is_err());
        assert!(ListLimit::new(MAX_LIST_LIMIT).is_ok());
        assert!(ListLimit::new(MAX_LIST_LIMIT + 1).is_err());
    }

    #[test]
    fn upper_bounds_cover_exactly_the_prefixed_strings() {
        let bound = |p: &str| KeyPrefix::new(p).unwrap().upper_bound();
        assert_eq!(bound("ab").as_deref(), Some("ac"));
        assert_eq!(bound(""), None);
        assert_eq!(bound("a\u{d7ff}").as_deref(), Some("a\u{e000}"));
        assert_eq!(bound("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(bound("\u{10ffff}"), None);
        let upper = bound("job").unwrap();
        for key in ["job", "job\u{10ffff}\u{10ffff}", "jobs", "job\u{1f600}"] {
            assert!(key < upper.as_str(), "{key:?}");
        }
        assert!("jpa" >= upper.as_str());
    }
}
