//! Flap damping for the Ready condition: a change between True and False
//! takes effect only once the new state has lasted its threshold.

use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Damper {
    /// A state that differs from the recorded one, and since when.
    pending: Option<(bool, Instant)>,
    last_probe: Option<Instant>,
}

impl Damper {
    pub fn last_probe(&self) -> Option<Instant> {
        self.last_probe
    }

    /// The Ready status to record, given the recorded one (`None` before
    /// the first probe) and what this probe observed.
    pub fn decide(
        &mut self,
        recorded: Option<bool>,
        observed: bool,
        now: Instant,
        success_threshold: Duration,
        failure_threshold: Duration,
    ) -> bool {
        self.last_probe = Some(now);
        let Some(recorded) = recorded.filter(|r| *r != observed) else {
            self.pending = None;
            return observed;
        };
        let since = match self.pending {
            Some((state, since)) if state == observed => since,
            _ => {
                self.pending = Some((observed, now));
                now
            }
        };
        let threshold = if observed {
            success_threshold
        } else {
            failure_threshold
        };
        if now.duration_since(since) >= threshold {
            self.pending = None;
            observed
        } else {
            recorded
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_takes_effect_after_its_threshold() {
        let t0 = Instant::now();
        let s = Duration::from_secs(30);
        let f = Duration::from_secs(30);
        let mut d = Damper::default();
        assert!(
            d.decide(None, true, t0, s, f),
            "the first probe is taken as is"
        );
        assert!(d.decide(Some(true), false, t0 + Duration::from_secs(10), s, f));
        assert!(d.decide(Some(true), false, t0 + Duration::from_secs(30), s, f));
        assert!(!d.decide(Some(true), false, t0 + Duration::from_secs(40), s, f));
        // A single good probe in between restarts the clock.
        let mut d = Damper::default();
        d.decide(Some(true), false, t0, s, f);
        d.decide(Some(true), true, t0 + Duration::from_secs(20), s, f);
        assert!(d.decide(Some(true), false, t0 + Duration::from_secs(35), s, f));
        assert!(!d.decide(Some(true), false, t0 + Duration::from_secs(65), s, f));
    }
}
