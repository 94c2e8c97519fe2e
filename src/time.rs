//! Time: the liveness rule every backend applies, TTL validation, and the clocks of the
//! client-time backends.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{LockError, Result};

/// Grace every backend grants a lock past its stored expiry before treating it as gone,
/// absorbing small clock differences between time authorities. Not configurable: Rust and
/// TypeScript services sharing a lock must agree on it.
pub const TIME_TOLERANCE_MS: i64 = 1000;

/// Largest accepted TTL: 10^13 ms (about 317 years), the same on every backend.
///
/// Why this bound: Redis' Lua scripts write the lock record with `cjson`, which prints numbers
/// with 14 significant digits, so an expiry of 10^14 ms or more (the year 5138) would be
/// stored rounded — a lease answering one expiry and keeping another. With Unix time near
/// 1.8 × 10^12 ms, `now + MAX_TTL_MS` stays below 10^14 until about the year 4800, so every
/// store keeps the expiry it answered exactly (PostgreSQL `bigint` and Firestore integers are
/// exact anyway, as is a double below 2^53 for Lua and JavaScript readers).
pub const MAX_TTL_MS: i64 = 10_000_000_000_000;

/// The one liveness predicate: a lock stored with `expires_at_ms` is live at `now_ms` when
/// `expires_at_ms > now_ms - tolerance_ms`. Backends call it with [`TIME_TOLERANCE_MS`] and
/// their own time authority (Redis `TIME`, the PostgreSQL server clock, or the client clock).
///
/// ```
/// use syncguard::driver::{is_live, TIME_TOLERANCE_MS};
/// assert!(is_live(10_000, 10_500, TIME_TOLERANCE_MS)); // expired 500 ms ago: still inside the grace
/// assert!(!is_live(10_000, 11_000, TIME_TOLERANCE_MS));
/// ```
pub fn is_live(expires_at_ms: i64, now_ms: i64, tolerance_ms: i64) -> bool {
    expires_at_ms > now_ms.saturating_sub(tolerance_ms)
}

/// A lease length, validated: a whole number of milliseconds from 1 ms to [`MAX_TTL_MS`]
/// (10^13 ms, about 317 years: the longest every backend stores exactly; see there).
/// Anything else is refused with `InvalidArgument` before any I/O, the message naming the
/// bound.
///
/// ```
/// use std::time::Duration;
/// use syncguard::driver::{MAX_TTL_MS, Ttl};
/// assert_eq!(Ttl::new(Duration::from_secs(30))?.as_millis(), 30_000);
/// assert!(Ttl::new(Duration::from_micros(1500)).is_err());
/// assert!(Ttl::new(Duration::from_millis(MAX_TTL_MS as u64 + 1)).is_err());
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(i64);

impl Ttl {
    /// Checks `ttl` (`InvalidArgument` otherwise).
    pub fn new(ttl: Duration) -> Result<Ttl> {
        ttl_to_ms(ttl).map(Ttl)
    }

    /// A TTL from the milliseconds of one checked before (kept in an atomic, say).
    pub(crate) const fn from_checked_millis(ms: i64) -> Ttl {
        Ttl(if ms < 1 {
            1
        } else if ms > MAX_TTL_MS {
            MAX_TTL_MS
        } else {
            ms
        })
    }

    /// Whole milliseconds, as the stores keep them.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// The same length as a `Duration`.
    pub fn as_duration(self) -> Duration {
        // At least 1 and at most MAX_TTL_MS: always a valid u64.
        Duration::from_millis(self.0.unsigned_abs())
    }
}

/// Converts a TTL to whole milliseconds, rejecting (`InvalidArgument`) anything under 1 ms,
/// with a sub-millisecond part, or above [`MAX_TTL_MS`]. [`Ttl::new`] uses it.
pub fn ttl_to_ms(ttl: Duration) -> Result<i64> {
    if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(LockError::invalid_argument(format!(
            "ttl must be a whole number of milliseconds, got {ttl:?}"
        )));
    }
    match i64::try_from(ttl.as_millis()) {
        Ok(ms) if (1..=MAX_TTL_MS).contains(&ms) => Ok(ms),
        Ok(0) => Err(LockError::invalid_argument("ttl must be at least 1 ms")),
        _ => Err(LockError::invalid_argument(format!(
            "ttl must be at most {MAX_TTL_MS} ms (about 317 years), got {ttl:?}"
        ))),
    }
}

/// A source of "now" in Unix milliseconds, for backends whose time authority is the client.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            // A clock set before 1970 is broken; counting back from the epoch keeps order.
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that moves only when told to: deterministic expiry in tests.
/// Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use syncguard::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now_ms(), 1_250);
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock {
            now_ms: Arc::new(AtomicI64::new(now_ms)),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (whole milliseconds).
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_boundary() {
        assert!(is_live(1001, 2000, 1000));
        assert!(!is_live(1000, 2000, 1000));
        assert!(is_live(5000, 0, 1000));
        assert!(!is_live(i64::MIN, i64::MIN, 1000));
    }

    /// The bound is inclusive, and refusing above it names it.
    #[test]
    fn ttl_maximum_boundary() {
        let max = Duration::from_millis(MAX_TTL_MS as u64);
        assert_eq!(Ttl::new(max).unwrap().as_millis(), MAX_TTL_MS);
        assert_eq!(Ttl::new(max).unwrap().as_duration(), max);
        let err = Ttl::new(max + Duration::from_millis(1)).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        assert!(
            err.message()
                .starts_with("ttl must be at most 10000000000000 ms (about 317 years)"),
            "{err}"
        );
        // Below 10^14 − now for centuries: what Redis' cjson (14 significant digits) keeps
        // exactly.
        let year_2500_ms = 16_725_225_600_000;
        assert!(year_2500_ms + MAX_TTL_MS < 100_000_000_000_000);
    }

    #[test]
    fn ttl_validation() {
        assert_eq!(ttl_to_ms(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ttl_to_ms(Duration::from_secs(30)).unwrap(), 30_000);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            Duration::from_micros(1500),
            Duration::from_nanos(1_000_001),
            Duration::from_millis(MAX_TTL_MS as u64 + 1),
            Duration::MAX,
        ] {
            let err = ttl_to_ms(bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{bad:?}");
        }
    }
}
