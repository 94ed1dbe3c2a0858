//! RFC 3339 UTC timestamps, in the two precisions the service prints: seconds in responses
//! (the spec's ISO-8601 timestamps) and milliseconds for upstream retrieval times and the
//! ledger.

use chrono::{DateTime, SecondsFormat, Utc};

/// The current time to the second, e.g. `2026-01-02T03:04:05Z`.
pub fn now() -> String {
    seconds(Utc::now())
}

/// The current time to the millisecond, e.g. `2026-01-02T03:04:05.678Z`.
pub(crate) fn now_millis() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A time to the second.
pub(crate) fn seconds(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A time to the millisecond.
pub(crate) fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_precisions_are_utc_rfc3339() {
        let at = DateTime::from_timestamp_millis(1_767_323_045_678).expect("a valid time");
        assert_eq!(seconds(at), "2026-01-02T03:04:05Z");
        assert_eq!(
            at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "2026-01-02T03:04:05.678Z"
        );
        assert!(now().ends_with('Z') && now().len() == 20);
        assert!(now_millis().ends_with('Z') && now_millis().len() == 24);
    }
}
