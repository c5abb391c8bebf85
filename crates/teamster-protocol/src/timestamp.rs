//! RFC 3339 UTC timestamps with millisecond precision, the only time format on the wire.
//!
//! They are plain strings on the wire and in storage; the fixed width makes them sort
//! lexicographically in time order.

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset, macros::format_description};

/// The current time as `2025-01-01T00:00:00.000Z`.
pub fn now() -> String {
    format(OffsetDateTime::now_utc())
}

/// Formats a time as `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC.
pub fn format(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    at.format(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ))
    .unwrap_or_default()
}

/// Parses any RFC 3339 timestamp and normalises it to the canonical form, or `None`.
pub fn normalize(text: &str) -> Option<String> {
    OffsetDateTime::parse(text, &Rfc3339).ok().map(format)
}

/// Parses any RFC 3339 timestamp.
pub fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// Moves a timestamp by a number of seconds (negative for earlier); `None` if unparseable.
pub fn shift(text: &str, seconds: i64) -> Option<String> {
    parse(text).map(|at| format(at + time::Duration::seconds(seconds)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn normalizes_offsets_to_utc_millis() {
        assert_eq!(
            super::normalize("2025-01-01T02:00:00+02:00").as_deref(),
            Some("2025-01-01T00:00:00.000Z")
        );
        assert_eq!(super::normalize("yesterday"), None);
        assert_eq!(super::now().len(), 24);
        assert_eq!(super::shift("2025-01-01T00:10:00.000Z", -1800).as_deref(), Some("2024-12-31T23:40:00.000Z"));
    }
}
