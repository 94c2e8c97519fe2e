//! Fencing tokens.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{LockError, Result};

/// Number of digits in every fence.
pub const FENCE_DIGITS: usize = 15;

/// Above this counter value a backend logs a warning: the key's fence space is running out.
pub const FENCE_WARN_THRESHOLD: u64 = 90_000_000_000_000;

/// Above this counter value acquiring fails with `Internal`. Fifteen digits keep every fence
/// exactly representable as an IEEE double, which Redis Lua and JavaScript use for numbers.
pub const FENCE_MAX: u64 = 900_000_000_000_000;

/// A fencing token: a per-key counter that grows with every successful acquisition of the key
/// and is never reset, as a 15-digit zero-padded decimal string (`"000000000000042"`).
///
/// Pass it to whatever the lock protects and have that store reject writes carrying a fence
/// lower than one it has already seen: a holder that stalled past its lease cannot then
/// overwrite the work of the next holder.
///
/// Fences of the same key compare (`Ord`) in acquisition order; string order and numeric
/// order agree because the width is fixed. A number inside, so `Copy`; displays and
/// serialises as the string, as the TypeScript SyncGuard does.
///
/// ```
/// use syncguard::Fence;
/// let a: Fence = "000000000000009".parse()?;
/// let b = Fence::from_counter(10)?;
/// assert!(a < b);
/// assert_eq!(b.to_string(), "000000000000010");
/// assert_eq!(b.value(), 10);
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// The fence for a counter value, enforcing the overflow rules: above
    /// [`FENCE_WARN_THRESHOLD`] it logs a warning, above [`FENCE_MAX`] (or at 0) it fails with
    /// `Internal`.
    pub fn from_counter(counter: u64) -> Result<Fence> {
        if counter == 0 {
            return Err(LockError::internal("fence counter is 0; fences start at 1"));
        }
        if counter > FENCE_MAX {
            return Err(LockError::internal(format!(
                "fence counter {counter} exceeds the maximum {FENCE_MAX}; rotate the key namespace"
            )));
        }
        if counter > FENCE_WARN_THRESHOLD {
            log::warn!(
                "syncguard: fence counter {counter} is above {FENCE_WARN_THRESHOLD}; \
                 plan a key namespace rotation before it reaches {FENCE_MAX}"
            );
        }
        Ok(Fence(counter))
    }

    /// The counter value.
    pub fn value(self) -> u64 {
        self.0
    }
}

impl FromStr for Fence {
    type Err = LockError;

    /// Parses a stored or transmitted fence: exactly 15 ASCII digits, not all zero.
    fn from_str(s: &str) -> Result<Fence> {
        if s.len() != FENCE_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(LockError::internal(format!(
                "malformed fence: expected {FENCE_DIGITS} decimal digits"
            )));
        }
        // Fifteen ASCII digits always fit in a u64.
        let value = s.bytes().fold(0, |n, d| n * 10 + u64::from(d - b'0'));
        if value == 0 {
            return Err(LockError::internal("malformed fence: 0 is never issued"));
        }
        Ok(Fence(value))
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:0width$}", self.0, width = FENCE_DIGITS)
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fence({self})")
    }
}

impl Serialize for Fence {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fence {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_order() {
        let one = Fence::from_counter(1).unwrap();
        assert_eq!(one.to_string(), "000000000000001");
        let mut fences: Vec<Fence> = [10, 9, 100, 1, 99]
            .iter()
            .map(|&n| Fence::from_counter(n).unwrap())
            .collect();
        fences.sort();
        let values: Vec<u64> = fences.iter().map(|f| f.value()).collect();
        assert_eq!(values, [1, 9, 10, 99, 100]);
    }

    #[test]
    fn limits() {
        assert!(Fence::from_counter(0).is_err());
        assert_eq!(
            Fence::from_counter(FENCE_MAX).unwrap().to_string(),
            "900000000000000"
        );
        let err = Fence::from_counter(FENCE_MAX + 1).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::Internal);
        assert!(Fence::from_counter(FENCE_WARN_THRESHOLD + 1).is_ok());
    }

    #[test]
    fn parse_rejects_malformed() {
        for bad in [
            "",
            "1",
            "00000000000000a",
            "0000000000000001",
            "000000000000000",
            " 00000000000001",
        ] {
            assert!(bad.parse::<Fence>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "999999999999999".parse::<Fence>().unwrap().value(),
            999_999_999_999_999
        );
    }

    #[test]
    fn json_round_trip_is_the_string() {
        let fence = Fence::from_counter(123_456_789_012_345).unwrap();
        let json = serde_json::to_string(&fence).unwrap();
        assert_eq!(json, "\"123456789012345\"");
        let back: Fence = serde_json::from_str(&json).unwrap();
        assert_eq!(back, fence);
        assert!(serde_json::from_str::<Fence>("123").is_err());
    }
}
