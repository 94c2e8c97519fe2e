//! Holder descriptions: the short text stored with a lock to say who holds it.

use std::fmt;

use crate::error::{LockError, Result};

/// The longest holder description accepted, in UTF-8 bytes.
pub const MAX_HOLDER_LENGTH_BYTES: usize = 256;

/// A holder description, validated: 1 to [`MAX_HOLDER_LENGTH_BYTES`] UTF-8 bytes, no control
/// characters (NUL, newlines, tabs, escape sequences: nothing that could garble a log line or a
/// terminal showing it). Built once where it enters the crate
/// ([`LockOptions::holder`](crate::LockOptions::holder), checked when the lock is taken), so no
/// store sees an unchecked one.
///
/// It is stored with the lock (beside the record the TypeScript SyncGuard reads, which ignores
/// it) and returned by lookups ([`LockInfo::holder`](crate::LockInfo::holder)); it is no
/// identifier, so it is shown as it is — never put a secret in it. Telemetry events never carry
/// it.
///
/// ```
/// use syncguard::driver::Holder;
/// assert_eq!(Holder::new("build-7:4242 ./nightly.sh")?.as_str(), "build-7:4242 ./nightly.sh");
/// assert!(Holder::new("").is_err());
/// assert!(Holder::new("two\nlines").is_err());
/// assert!(Holder::new("x".repeat(257)).is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder(String);

impl Holder {
    /// Checks `holder` (`InvalidArgument` otherwise; the message never repeats the input).
    pub fn new(holder: impl Into<String>) -> Result<Holder> {
        let holder = holder.into();
        if holder.is_empty() {
            return Err(LockError::invalid_argument(
                "holder must not be empty (leave it unset for none)",
            ));
        }
        if holder.len() > MAX_HOLDER_LENGTH_BYTES {
            return Err(LockError::invalid_argument(format!(
                "holder is {} bytes; the limit is {MAX_HOLDER_LENGTH_BYTES}",
                holder.len()
            )));
        }
        if let Some(at) = holder.chars().position(char::is_control) {
            return Err(LockError::invalid_argument(format!(
                "holder contains a control character (NUL, newline, tab, escape, …) at \
                 character {at}"
            )));
        }
        Ok(Holder(holder))
    }

    /// `text` cut to at most [`MAX_HOLDER_LENGTH_BYTES`] on a character boundary, each control
    /// character replaced by a space: a description made from something that is not checked
    /// (a command line, say). `None` when nothing but whitespace is left.
    ///
    /// ```
    /// use syncguard::driver::Holder;
    /// let holder = Holder::truncated("host:1 sh -c 'a\nb'").unwrap();
    /// assert_eq!(holder.as_str(), "host:1 sh -c 'a b'");
    /// assert_eq!(Holder::truncated(&"é".repeat(200)).unwrap().as_str().len(), 256);
    /// assert!(Holder::truncated(" \n").is_none());
    /// ```
    pub fn truncated(text: &str) -> Option<Holder> {
        let mut holder = String::with_capacity(text.len().min(MAX_HOLDER_LENGTH_BYTES));
        for c in text.chars() {
            let c = if c.is_control() { ' ' } else { c };
            if holder.len() + c.len_utf8() > MAX_HOLDER_LENGTH_BYTES {
                break;
            }
            holder.push(c);
        }
        if holder.trim().is_empty() {
            return None;
        }
        Holder::new(holder).ok()
    }

    /// The description.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The description, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Holder({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn bounds_and_characters() {
        assert!(Holder::new("a").is_ok());
        assert!(Holder::new("é".repeat(128)).is_ok()); // 256 bytes
        assert!(Holder::new(format!("{}a", "é".repeat(128))).is_err());
        for bad in [
            "",
            "a\0b",
            "a\nb",
            "a\tb",
            "\u{1b}[31m",
            "a\u{7f}",
            "a\u{85}",
        ] {
            let error = Holder::new(bad).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument, "{bad:?}");
        }
        // Quotes, backslashes, slashes and non-ASCII are text like any other.
        let odd = r#"h"o\l/d é 🔒 {"x":1}"#;
        assert_eq!(Holder::new(odd).unwrap().as_str(), odd);
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        let holder = Holder::truncated(&format!("a{}", "é".repeat(200))).unwrap();
        assert_eq!(holder.as_str().len(), 255);
        assert!(Holder::truncated("").is_none());
        assert_eq!(Holder::truncated("a\0b").unwrap().as_str(), "a b");
    }
}
