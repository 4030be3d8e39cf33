//! Wall-clock arithmetic for deadlines written in API objects (eviction
//! tasks, leases, TTLs): saturating, never panicking on odd input.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `t` plus `d`, saturating at the end of time.
pub fn after(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// How long from `now` until `at`; zero if it has passed.
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(now.duration_until(at)).unwrap_or_default()
}

/// A seconds field of an API object (negative counts as zero).
pub fn seconds(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_saturate_and_past_ones_are_now() {
        let t: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        assert_eq!(
            after(t, Duration::from_secs(90)),
            "2026-11-23T10:01:30Z".parse().unwrap()
        );
        assert_eq!(after(t, Duration::MAX), Timestamp::MAX);
        assert_eq!(
            until(t, after(t, Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(until(after(t, Duration::from_secs(5)), t), Duration::ZERO);
        assert_eq!(seconds(-3), Duration::ZERO);
        assert_eq!(seconds(40), Duration::from_secs(40));
    }
}
