//! Holder descriptions: the short text stored with a lock to say who holds it.

use std::fmt;

use crate::error::{LockError, Result};

/// The longest holder description accepted, in UTF-8 bytes.
pub const MAX_HOLDER_LENGTH_BYTES: usize = 256;

/// A holder description, validated: 1 to [`MAX_HOLDER_LENGTH_BYTES`] UTF-8 bytes, no control
/// characters (NUL, newlines, tabs, escape sequences: nothing that could garble a log line or a
/// terminal showing it), no Unicode format characters (general category Cf: bidi overrides and
/// isolates such as U+202E, which make a terminal show text in another order than it is
/// stored, zero-width characters, the soft hyphen, U+FEFF, …) and no line or paragraph
/// separators (U+2028, U+2029). Built once where it enters the crate
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
/// let reversed = Holder::new("job\u{202E}txt.exe").unwrap_err();
/// assert!(reversed.message().contains("U+202E"));
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
        if let Some((at, c)) = holder.chars().enumerate().find(|(_, c)| !shown_as_is(*c)) {
            let what = if c.is_control() {
                "a control character (NUL, newline, tab, escape, …)"
            } else if is_separator(c) {
                "a line or paragraph separator"
            } else {
                "a Unicode format character (bidi control, zero-width character, …)"
            };
            return Err(LockError::invalid_argument(format!(
                "holder contains {what}, U+{:04X}, at character {at}",
                u32::from(c)
            )));
        }
        Ok(Holder(holder))
    }

    /// `text` cut to at most [`MAX_HOLDER_LENGTH_BYTES`] on a character boundary, each control
    /// character and line or paragraph separator replaced by a space (they separate words),
    /// each format character dropped (it has no glyph of its own, and a bidi override would
    /// reorder what follows): a description made from something that is not checked (a file
    /// name, say). `None` when nothing but whitespace is left.
    ///
    /// ```
    /// use syncguard::driver::Holder;
    /// let holder = Holder::truncated("host:1 sh -c 'a\nb'").unwrap();
    /// assert_eq!(holder.as_str(), "host:1 sh -c 'a b'");
    /// let holder = Holder::truncated("host:1 \u{202E}hs.exe\u{2028}x").unwrap();
    /// assert_eq!(holder.as_str(), "host:1 hs.exe x");
    /// assert_eq!(Holder::truncated(&"é".repeat(200)).unwrap().as_str().len(), 256);
    /// assert!(Holder::truncated(" \n").is_none());
    /// ```
    pub fn truncated(text: &str) -> Option<Holder> {
        let mut holder = String::with_capacity(text.len().min(MAX_HOLDER_LENGTH_BYTES));
        for c in text.chars() {
            let c = match c {
                c if is_format(c) => continue,
                c if c.is_control() || is_separator(c) => ' ',
                c => c,
            };
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

/// Whether `c` may stand in a holder: not a control, format or line/paragraph separator
/// character.
fn shown_as_is(c: char) -> bool {
    !(c.is_control() || is_format(c) || is_separator(c))
}

/// U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR: line breaks to some terminals and
/// log viewers, as a newline is.
fn is_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// The code points of Unicode's general category Cf (format characters), as of Unicode 15.
/// The standard library has no test for it, and no crate is taken on for one table.
const FORMAT_CHARACTERS: [(u32, u32); 21] = [
    (0xAD, 0xAD),
    (0x600, 0x605),
    (0x61C, 0x61C),
    (0x6DD, 0x6DD),
    (0x70F, 0x70F),
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is a format character (general category Cf).
fn is_format(c: char) -> bool {
    let c = u32::from(c);
    FORMAT_CHARACTERS
        .binary_search_by(|&(first, last)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
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

    #[test]
    fn format_characters_and_separators_are_refused_by_code_point() {
        for (bad, named) in [
            ("a\u{202E}b", "U+202E"),
            ("\u{061C}", "U+061C"),
            ("a\u{200E}", "U+200E"),
            ("a\u{200F}", "U+200F"),
            ("a\u{202A}", "U+202A"),
            ("a\u{2066}", "U+2066"),
            ("a\u{2069}", "U+2069"),
            ("a\u{200B}b", "U+200B"),
            ("a\u{200D}b", "U+200D"),
            ("a\u{2060}b", "U+2060"),
            ("a\u{2064}b", "U+2064"),
            ("\u{FEFF}a", "U+FEFF"),
            ("soft\u{00AD}hyphen", "U+00AD"),
            ("tag\u{E0041}", "U+E0041"),
            ("a\u{2028}b", "U+2028"),
            ("a\u{2029}b", "U+2029"),
            ("a\u{1b}b", "U+001B"),
        ] {
            let error = Holder::new(bad).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidArgument, "{bad:?}");
            assert!(error.message().contains(named), "{bad:?}: {error}");
        }
        // Neighbours of the ranges are text.
        for fine in [
            "\u{00AC}", "\u{200A}", "\u{2027}", "\u{202F}", "\u{2065}", "\u{FEFE}",
        ] {
            assert!(Holder::new(format!("a{fine}")).is_ok(), "{fine:?}");
        }
    }

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for pair in FORMAT_CHARACTERS.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
    }

    #[test]
    fn truncation_drops_format_characters_and_breaks_separators() {
        let holder = Holder::truncated("h:1 \u{202E}gpj.exe\u{200B}\u{2029}next").unwrap();
        assert_eq!(holder.as_str(), "h:1 gpj.exe next");
        assert!(Holder::truncated("\u{202E}\u{FEFF}").is_none());
    }
}
