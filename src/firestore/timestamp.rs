//! Firestore's timestamps (`2026-11-22T14:17:00.514324Z`: RFC 3339, UTC, up to nanoseconds),
//! as Unix milliseconds. Parsed by `humantime`, which reads exactly this form.

use std::time::UNIX_EPOCH;

/// Unix ms of an RFC 3339 UTC timestamp (`…Z`), or `None` when it is not one (or before
/// 1970, which no Firestore answer carries).
pub(crate) fn parse_timestamp_ms(text: &str) -> Option<i64> {
    let time = humantime::parse_rfc3339(text).ok()?;
    let since_epoch = time.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_timestamp_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_timestamp_ms("2026-11-22T14:17:00.514324Z"),
            Some(1_795_357_020_514)
        );
        assert_eq!(
            parse_timestamp_ms("2000-02-29T12:00:00.000Z"),
            Some(951_825_600_000)
        );
        for bad in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-11-22T14:17:00+01:00",
            "x-y-zTa:b:cZ",
        ] {
            assert_eq!(parse_timestamp_ms(bad), None, "{bad}");
        }
    }
}
