//! The authorization's window: a paid call works only for an authorization that can still
//! settle when the work is done, and only within a lifetime we can follow to its end.
//!
//! A call's deadline is `validBefore` − 6 s; `/verify`, the work, `/settle`, its retry and the
//! wait on the chain are all clipped to it. Before `/verify`, a window that cannot hold the
//! verify timeout + the machine's overall timeout + [`SETTLE_MARGIN`] is refused (a buyer
//! must not get work done with an authorization that expires before it can be settled), and
//! so is one that reaches further than `maxTimeoutSeconds` + [`FUTURE_SLACK_SECONDS`] ahead
//! (an outcome left unknown for a year is no payment we can finish).

use std::time::Duration;

use tokio::time::Instant;

/// Seconds before `validBefore` by which a settlement must have been broadcast.
pub(crate) const DEADLINE_MARGIN_SECONDS: u64 = 6;
/// The least time left for `/settle` once the work is done.
pub(crate) const SETTLE_MARGIN: Duration = Duration::from_secs(10);
/// How far past `maxTimeoutSeconds` a `validBefore` may reach (clock skew).
pub(crate) const FUTURE_SLACK_SECONDS: u64 = 30;

/// Why a window was refused (the 402 names the x402 reason for both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WindowRefusal {
    /// Too short to verify, work and settle.
    #[error("the authorization expires before the call could be settled")]
    TooShort,
    /// Reaches too far ahead.
    #[error("the authorization stays valid longer than maxTimeoutSeconds allows")]
    TooLong,
}

/// What a window check needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The facilitator's `/verify` timeout.
    pub verify: Duration,
    /// The machine's overall timeout.
    pub work: Duration,
    /// The requirement's `maxTimeoutSeconds`.
    pub max_timeout_seconds: u64,
}

/// The call's deadline, or why the window is refused. `now` is unix seconds.
pub(crate) fn deadline(
    valid_before: u64,
    now: u64,
    bounds: &Bounds,
) -> Result<Instant, WindowRefusal> {
    let limit = now
        .saturating_add(bounds.max_timeout_seconds)
        .saturating_add(FUTURE_SLACK_SECONDS);
    if valid_before > limit {
        return Err(WindowRefusal::TooLong);
    }
    let left = Duration::from_secs(
        valid_before
            .saturating_sub(DEADLINE_MARGIN_SECONDS)
            .saturating_sub(now),
    );
    if left < bounds.verify + bounds.work + SETTLE_MARGIN {
        return Err(WindowRefusal::TooShort);
    }
    Ok(Instant::now() + left)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;
    const BOUNDS: Bounds = Bounds {
        verify: Duration::from_secs(10),
        work: Duration::from_secs(20),
        max_timeout_seconds: 60,
    };

    #[test]
    fn the_official_clients_window_fits_the_defaults() {
        // validBefore = now + 60: 54 s to the deadline, 10 + 20 + 10 = 40 s needed.
        assert!(deadline(NOW + 60, NOW, &BOUNDS).is_ok());
    }

    #[test]
    fn a_short_or_a_far_window_is_refused() {
        assert_eq!(
            deadline(NOW + 7, NOW, &BOUNDS),
            Err(WindowRefusal::TooShort)
        );
        assert_eq!(
            deadline(NOW + 45, NOW, &BOUNDS),
            Err(WindowRefusal::TooShort)
        );
        assert_eq!(
            deadline(NOW + 86_400, NOW, &BOUNDS),
            Err(WindowRefusal::TooLong)
        );
        assert!(deadline(NOW + 90, NOW, &BOUNDS).is_ok());
        assert_eq!(
            deadline(NOW + 91, NOW, &BOUNDS),
            Err(WindowRefusal::TooLong)
        );
    }
}
