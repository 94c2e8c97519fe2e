//! Durations as people write them: humantime's forms (`500ms`, `30s`, `1m30s`, `2h`, `1d`), or a
//! plain number of milliseconds (what earlier versions took, and what scripts may compute).
//!
//! The one parser of the crate, the command line and the bench: the Redis URL reads
//! `?replica_timeout=` with it, and the `syncguard` binary and `examples/bench.rs`, which cannot
//! reach a crate-private function, compile this file into themselves (`#[path]`).

use std::time::Duration;

/// What the error message offers instead.
const FORMS: &str = "use e.g. 500ms, 30s, 1m30s, 2h, 1d, or plain milliseconds";

/// Parses a duration (`--ttl`, `--wait`, `--grace`, `--max-runtime`, `?replica_timeout=`);
/// the error names the text and the forms that are understood.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{text:?} is too long a duration"));
    }
    humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error} ({FORMS})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humantime_forms_and_plain_milliseconds() {
        for (text, ms) in [
            ("0", 0),
            ("1500", 1_500),
            ("500ms", 500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1m30s", 90_000),
            ("1.5s", 1_500),
            ("1h 30m", 5_400_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            (" 30s ", 30_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            "",
            "abc",
            "s",
            "-1s",
            "10 parsecs",
            "5x",
            "99999999999999999999",
            "99999999999999999999h",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains(bad.trim()), "{bad}: {error}");
        }
    }
}
