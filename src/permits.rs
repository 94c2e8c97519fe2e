//! How many holders a semaphore admits: validated once, where the number enters the crate.

use std::fmt;

use crate::error::{LockError, Result};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1000;

/// A semaphore's number of permits, validated: 1 to [`MAX_PERMITS`].
///
/// Each acquisition is judged by its own number: it succeeds when fewer than that many live
/// permits of the key are held, whatever number their holders used. Callers that disagree
/// on N for one key therefore each see their own limit (a caller with N = 2 is refused while
/// two are held, one with N = 5 is not); keep one N per key.
///
/// ```
/// use syncguard::driver::Permits;
/// assert_eq!(Permits::new(4)?.get(), 4);
/// assert!(Permits::new(0).is_err());
/// assert!(Permits::new(1001).is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permits(u32);

impl Permits {
    /// Checks `permits` (`InvalidArgument` unless 1 to [`MAX_PERMITS`]).
    pub fn new(permits: u32) -> Result<Permits> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(LockError::invalid_argument(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"
            )));
        }
        Ok(Permits(permits))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(Permits::new(1).is_ok());
        assert!(Permits::new(MAX_PERMITS).is_ok());
        for bad in [0, MAX_PERMITS + 1, u32::MAX] {
            let error = Permits::new(bad).unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::InvalidArgument);
        }
    }
}
