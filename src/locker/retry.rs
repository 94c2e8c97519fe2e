//! The wait between acquisition attempts: the SyncGuard formulas, exactly.

use std::time::Duration;

/// How the base delay grows between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backoff {
    /// `retry_delay * 2^(attempt - 1)`: backs off quickly from a busy lock. The default.
    #[default]
    Exponential,
    /// `retry_delay` every time.
    Fixed,
}

/// How much of the delay is randomised, so that waiters do not retry in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Half fixed, half random: `d/2 + random * d/2`. The default.
    #[default]
    Equal,
    /// Wholly random: `random * d`.
    Full,
    /// No randomness: `d`.
    None,
}

/// The delay after failed attempt number `attempt` (1-based), in milliseconds, before
/// clamping to the timeout; `random` is uniform in `[0, 1)`. The seed's formulas, with the
/// grown delay capped at `max_delay` before the jitter, so that long waits keep their spread.
pub(crate) fn retry_delay_ms(
    attempt: u32,
    retry_delay: Duration,
    max_delay: Duration,
    backoff: Backoff,
    jitter: Jitter,
    random: f64,
) -> f64 {
    let base_ms = retry_delay.as_secs_f64() * 1000.0;
    let delay = match backoff {
        Backoff::Exponential => base_ms * 2f64.powi(attempt.saturating_sub(1).min(1023) as i32),
        Backoff::Fixed => base_ms,
    };
    let delay = delay.min(max_delay.as_secs_f64() * 1000.0);
    match jitter {
        Jitter::Equal => delay / 2.0 + random * (delay / 2.0),
        Jitter::Full => random * delay,
        Jitter::None => delay,
    }
}

/// Clamps a delay so that `elapsed + delay <= timeout`. `None` when nothing is left: the
/// caller gives up with `AcquisitionTimeout`.
pub(crate) fn clamp_to_timeout(
    delay_ms: f64,
    elapsed: Duration,
    timeout: Duration,
) -> Option<Duration> {
    let remaining = timeout.saturating_sub(elapsed);
    let delay = Duration::try_from_secs_f64(delay_ms.max(0.0) / 1000.0).unwrap_or(Duration::MAX);
    let delay = delay.min(remaining);
    (!delay.is_zero()).then_some(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt as _, SeedableRng as _};

    const MS100: Duration = Duration::from_millis(100);

    #[test]
    fn exponential_sequence_without_jitter() {
        let delays: Vec<f64> = (1..=6)
            .map(|n| {
                retry_delay_ms(
                    n,
                    MS100,
                    Duration::MAX,
                    Backoff::Exponential,
                    Jitter::None,
                    0.7,
                )
            })
            .collect();
        assert_eq!(delays, [100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0]);
    }

    #[test]
    fn jitter_formulas_at_fixed_samples() {
        // attempt 3 → base 400 ms
        let d = |jitter, random| {
            retry_delay_ms(
                3,
                MS100,
                Duration::MAX,
                Backoff::Exponential,
                jitter,
                random,
            )
        };
        assert_eq!(d(Jitter::Equal, 0.0), 200.0);
        assert_eq!(d(Jitter::Equal, 0.5), 300.0);
        assert_eq!(d(Jitter::Equal, 0.75), 350.0);
        assert_eq!(d(Jitter::Full, 0.0), 0.0);
        assert_eq!(d(Jitter::Full, 0.25), 100.0);
        assert_eq!(d(Jitter::None, 0.9), 400.0);
        let f = |jitter, random| {
            retry_delay_ms(7, MS100, Duration::MAX, Backoff::Fixed, jitter, random)
        };
        assert_eq!(f(Jitter::Equal, 0.5), 75.0);
        assert_eq!(f(Jitter::Full, 0.5), 50.0);
        assert_eq!(f(Jitter::None, 0.5), 100.0);
    }

    #[test]
    fn seeded_sequence_follows_the_equal_jitter_formula() {
        let mut rng = StdRng::seed_from_u64(42);
        let mut replay = StdRng::seed_from_u64(42);
        for attempt in 1..=10u32 {
            let random: f64 = rng.random();
            let delay = retry_delay_ms(
                attempt,
                MS100,
                Duration::MAX,
                Backoff::Exponential,
                Jitter::Equal,
                random,
            );
            let base = 100.0 * f64::from(1u32 << (attempt - 1));
            let expected = base / 2.0 + replay.random::<f64>() * (base / 2.0);
            assert_eq!(delay, expected);
            assert!(
                delay >= base / 2.0 && delay < base,
                "attempt {attempt}: {delay}"
            );
        }
    }

    #[test]
    fn the_grown_delay_is_capped_before_the_jitter() {
        let capped = |attempt, random| {
            retry_delay_ms(
                attempt,
                MS100,
                Duration::from_secs(1),
                Backoff::Exponential,
                Jitter::Equal,
                random,
            )
        };
        assert_eq!(capped(4, 0.0), 400.0);
        assert_eq!(capped(5, 0.0), 500.0); // 1600 ms capped to 1 s, then halved
        assert_eq!(capped(40, 0.999_999), 999.999_5);
        assert!((500.0..1000.0).contains(&capped(u32::MAX, 0.5)));
    }

    #[test]
    fn clamped_to_the_remaining_time() {
        let timeout = Duration::from_secs(5);
        assert_eq!(
            clamp_to_timeout(300.0, Duration::from_millis(4800), timeout),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            clamp_to_timeout(150.0, Duration::from_secs(1), timeout),
            Some(Duration::from_millis(150))
        );
        assert_eq!(clamp_to_timeout(300.0, timeout, timeout), None);
        assert_eq!(
            clamp_to_timeout(300.0, Duration::from_secs(9), timeout),
            None
        );
        assert_eq!(clamp_to_timeout(0.0, Duration::ZERO, timeout), None);
    }

    #[test]
    fn huge_attempts_and_timeouts_do_not_overflow() {
        let d = retry_delay_ms(
            u32::MAX,
            MS100,
            Duration::MAX,
            Backoff::Exponential,
            Jitter::Equal,
            0.5,
        );
        assert!(
            d.is_finite() && d > 1e21,
            "saturates instead of wrapping: {d}"
        );
        let clamped = clamp_to_timeout(d, Duration::ZERO, Duration::MAX).unwrap();
        assert!(clamped > Duration::from_secs(1));
        assert_eq!(
            clamp_to_timeout(f64::INFINITY, Duration::ZERO, Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
    }
}
