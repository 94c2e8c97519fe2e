//! How far this machine's clock is from Firestore's. The Firestore backend decides expiry by
//! the client clock (as the TypeScript SyncGuard does), so a skewed client can cut other
//! holders' leases short or keep its own too long. Every answer carries a server time
//! (`commitTime`, `readTime`); compared with the local clock at the request's midpoint it
//! bounds the offset to within half the round trip.
//!
//! The same answers give Firestore's own time between answers ([`SkewEstimator::server_now_ms`]):
//! the line of waiters is judged by it, not by the client clock, so that clients whose clocks
//! are off by the skew the docs allow still serve their waiters in arrival order (a client
//! whose clock runs ahead would otherwise see the places of one that runs behind expire early,
//! and prune them).

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Offsets at or above this are logged (once per minute at most).
pub(crate) const WARN_SKEW: Duration = Duration::from_millis(200);

/// The latest estimate of the clock offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSkew {
    /// Firestore's clock minus this machine's, in ms (positive: the local clock is behind).
    pub offset_ms: i64,
    /// Half the round trip the estimate came from: the true offset is within
    /// `offset_ms ± uncertainty_ms`.
    pub uncertainty_ms: i64,
}

impl ClockSkew {
    /// The smallest offset consistent with the measurement, as a magnitude.
    pub fn at_least(&self) -> Duration {
        Duration::from_millis(
            self.offset_ms
                .unsigned_abs()
                .saturating_sub(self.uncertainty_ms.unsigned_abs()),
        )
    }
}

#[derive(Default)]
pub(crate) struct SkewEstimator {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    latest: Option<ClockSkew>,
    /// The latest server time read, and the local instant it stands for (the request's
    /// midpoint).
    server_reading: Option<(i64, Instant)>,
    last_warning: Option<Instant>,
}

impl SkewEstimator {
    /// Records one answer: `server_ms` was read by the server between `sent` and `received`.
    pub fn observe(&self, server_ms: i64, sent: Instant, received: Instant) {
        let round_trip = received.saturating_duration_since(sent);
        let local_mid_ms = unix_ms_now() - i64::try_from((round_trip / 2).as_millis()).unwrap_or(0);
        let estimate = ClockSkew {
            offset_ms: server_ms - local_mid_ms,
            uncertainty_ms: i64::try_from((round_trip / 2).as_millis()).unwrap_or(i64::MAX),
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // The newest measurement wins, so drift shows up.
        state.latest = Some(estimate);
        state.server_reading = Some((server_ms, sent + round_trip / 2));
        if estimate.at_least() >= WARN_SKEW
            && state
                .last_warning
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            state.last_warning = Some(Instant::now());
            log::warn!(
                "syncguard: this machine's clock is off Firestore's by {} ms (±{} ms); the \
                 Firestore backend decides expiry by this clock: synchronise it (NTP)",
                estimate.offset_ms,
                estimate.uncertainty_ms
            );
        }
    }

    /// Firestore's time now, in Unix ms: the latest server time read, plus the time this
    /// machine's monotonic clock says has passed since (so the client's wall clock, however
    /// far off, plays no part). Within half the round trip of that answer of the truth; `None`
    /// before any answer carried a time.
    pub fn server_now_ms(&self) -> Option<i64> {
        let (server_ms, at) = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .server_reading?;
        let since = i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX);
        Some(server_ms.saturating_add(since))
    }

    pub fn latest(&self) -> Option<ClockSkew> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .latest
    }
}

fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_bounded_by_the_round_trip() {
        let estimator = SkewEstimator::default();
        assert_eq!(estimator.latest(), None);
        let sent = Instant::now();
        let received = sent + Duration::from_millis(40);
        estimator.observe(unix_ms_now() + 5_000, sent, received);
        let skew = estimator.latest().unwrap();
        assert!((4_900..=5_100).contains(&skew.offset_ms), "{skew:?}");
        assert_eq!(skew.uncertainty_ms, 20);
        assert!(skew.at_least() >= Duration::from_millis(4_800));
    }

    #[test]
    fn the_server_time_runs_on_from_the_latest_answer() {
        let estimator = SkewEstimator::default();
        assert_eq!(estimator.server_now_ms(), None);
        let received = Instant::now();
        let sent = received - Duration::from_millis(40);
        estimator.observe(1_000_000, sent, received);
        let now = estimator.server_now_ms().unwrap();
        // Read at the request's midpoint, 20 ms before it was received.
        assert!(now >= 1_000_020, "{now}");
        let passed = i64::try_from(sent.elapsed().as_millis()).unwrap();
        assert!(now <= 1_000_000 + passed, "{now}");
    }
}
