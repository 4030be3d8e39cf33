//! An autoscaler's `behavior`: what becomes of a proposed replica count before it
//! is written (upstream's `normalizeDesiredReplicasWithBehaviors`). The
//! stabilization windows hold the count at the lowest recommendation of the
//! scale-up window and the highest of the scale-down window; the rate
//! policies limit the change over each policy's period, counting the
//! changes already made in it; then min and max. No I/O: the controller
//! keeps one [`History`] per HPA.

use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use serde_json::json;

/// Upstream's scale-up rules when an HPA names none: 4 pods or 100% per
/// 15 s, whichever is more, at once.
pub fn default_scale_up() -> HPAScalingRules {
    serde_json::from_value(
        json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                     {"type": "Percent", "value": 100, "periodSeconds": 15}]}),
    )
    .unwrap_or_default()
}

/// Upstream's scale-down rules: 100% per 15 s, after 300 s of lower
/// recommendations.
pub fn default_scale_down() -> HPAScalingRules {
    serde_json::from_value(
        json!({"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}),
    )
    .unwrap_or_default()
}

/// What changes are remembered for: beyond the longest period a policy
/// may have (1800 s, as upstream validates).
const REMEMBERED: Duration = Duration::from_secs(1800);

/// One HPA's recent recommendations and scale changes.
#[derive(Debug, Default)]
pub struct History {
    recommendations: Vec<(Instant, i32)>,
    changes: Vec<(Instant, i32)>,
}

/// A normalized count and why it differs from the proposal.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub replicas: i32,
    /// A stabilization window held the count (AbleToScale's reason).
    pub stabilized: Option<&'static str>,
    /// A rate policy or a bound limited it (ScalingLimited's reason and
    /// message).
    pub limited: Option<(&'static str, &'static str)>,
}

fn window(rules: &HPAScalingRules, default: i32) -> Duration {
    Duration::from_secs(rules.stabilization_window_seconds.unwrap_or(default).max(0) as u64)
}

impl History {
    /// Records a change of the target's replicas made at `at`.
    pub fn scaled(&mut self, at: Instant, change: i32) {
        self.changes.push((at, change));
    }

    /// Pods added and removed within `seconds` before `now`.
    fn changed_within(&self, now: Instant, seconds: i32) -> (i32, i32) {
        let period = Duration::from_secs(seconds.max(0) as u64);
        self.changes
            .iter()
            .filter(|(at, _)| now.duration_since(*at) <= period)
            .fold((0, 0), |(added, removed), (_, d)| {
                if *d > 0 {
                    (added.saturating_add(*d), removed)
                } else {
                    (added, removed.saturating_sub(*d))
                }
            })
    }

    /// A new HPA's history: upstream records its current count as the
    /// first recommendation, so that a restart does not skip the
    /// scale-down window.
    pub fn starting_at(current: i32, now: Instant) -> History {
        History {
            recommendations: vec![(now, current)],
            changes: Vec::new(),
        }
    }

    /// `proposed` (the metrics' count, `current` replicas now) after the
    /// behavior and the bounds; the proposal is remembered. An HPA without
    /// `behavior` gets upstream's older rules (`normalizeDesiredReplicas`):
    /// the highest recommendation of the last 300 s when going down, at
    /// most twice the pods (and at least 4) when going up.
    pub fn normalize(
        &mut self,
        behavior: Option<&HorizontalPodAutoscalerBehavior>,
        current: i32,
        proposed: i32,
        (min, max): (i32, i32),
        now: Instant,
    ) -> Outcome {
        let Some(behavior) = behavior else {
            return self.normalize_without_behavior(current, proposed, (min, max), now);
        };
        let behavior = Some(behavior);
        let up = behavior
            .and_then(|b| b.scale_up.clone())
            .unwrap_or_else(default_scale_up);
        let down = behavior
            .and_then(|b| b.scale_down.clone())
            .unwrap_or_else(default_scale_down);
        let (up_window, down_window) = (window(&up, 0), window(&down, 300));
        self.recommendations
            .retain(|(at, _)| now.duration_since(*at) <= up_window.max(down_window));
        self.changes
            .retain(|(at, _)| now.duration_since(*at) <= REMEMBERED);
        let (mut up_rec, mut down_rec) = (proposed, proposed);
        // Within a window: after its start (a 0 s window holds nothing).
        for (at, r) in &self.recommendations {
            let age = now.duration_since(*at);
            if age < up_window {
                up_rec = up_rec.min(*r);
            }
            if age < down_window {
                down_rec = down_rec.max(*r);
            }
        }
        self.recommendations.push((now, proposed));
        let stabilized_count = current.max(up_rec).min(down_rec);
        let stabilized = match stabilized_count.cmp(&proposed) {
            std::cmp::Ordering::Greater => Some("ScaleDownStabilized"),
            std::cmp::Ordering::Less => Some("ScaleUpStabilized"),
            std::cmp::Ordering::Equal => None,
        };
        // As upstream's `convertDesiredReplicasWithBehaviorRate`: the
        // tighter of the rate limit and the bound holds, and names why.
        let mut desired = stabilized_count;
        let mut limited = None;
        if desired > current {
            let limit = self.limit(&up, current, now, true);
            let (allowed, reason) = if max > limit {
                (limit, SCALE_UP_LIMIT)
            } else {
                (max, TOO_MANY)
            };
            if desired > allowed {
                desired = allowed;
                limited = Some(reason);
            }
        } else if desired < current {
            let limit = self.limit(&down, current, now, false);
            let (allowed, reason) = if min < limit {
                (limit, SCALE_DOWN_LIMIT)
            } else {
                (min, TOO_FEW)
            };
            if desired < allowed {
                desired = allowed;
                limited = Some(reason);
            }
        }
        let (replicas, bounded) = bound(desired, (min, max));
        Outcome {
            replicas,
            stabilized,
            limited: bounded.or(limited),
        }
    }

    fn normalize_without_behavior(
        &mut self,
        current: i32,
        proposed: i32,
        bounds: (i32, i32),
        now: Instant,
    ) -> Outcome {
        let window = Duration::from_secs(300);
        self.recommendations
            .retain(|(at, _)| now.duration_since(*at) <= window);
        let highest = self
            .recommendations
            .iter()
            .map(|(_, r)| *r)
            .fold(proposed, i32::max);
        self.recommendations.push((now, proposed));
        let stabilized = (highest != proposed).then_some("ScaleDownStabilized");
        // Upstream's `convertDesiredReplicasWithRules`: the rate limit
        // holds (and names why) only where it is tighter than the maximum.
        let up_limit = current.saturating_mul(2).max(4);
        let (mut desired, mut limited) = (highest, None);
        if desired > up_limit && bounds.1 > up_limit {
            desired = up_limit;
            limited = Some(SCALE_UP_LIMIT);
        }
        let (replicas, bounded) = bound(desired, bounds);
        Outcome {
            replicas,
            stabilized,
            limited: bounded.or(limited),
        }
    }

    /// The furthest the rules let the count go from `current` now: each
    /// policy's limit from the count its period started at, the policies
    /// chosen by `selectPolicy` (Max: the largest change).
    fn limit(&self, rules: &HPAScalingRules, current: i32, now: Instant, up: bool) -> i32 {
        let limits: Vec<i32> = rules
            .policies
            .iter()
            .flatten()
            .map(|p| {
                let (added, removed) = self.changed_within(now, p.period_seconds);
                let start = if up {
                    current.saturating_sub(added).saturating_add(removed)
                } else {
                    current.saturating_add(removed).saturating_sub(added)
                };
                let percent = p.value as f64 / 100.0;
                match (p.type_.as_str(), up) {
                    ("Pods", true) => start.saturating_add(p.value),
                    ("Pods", false) => start.saturating_sub(p.value),
                    (_, true) => (start as f64 * (1.0 + percent)).ceil() as i32,
                    (_, false) => (start as f64 * (1.0 - percent)).floor() as i32,
                }
            })
            .collect();
        // Max picks the policy allowing the largest change: the highest
        // limit up, the lowest down.
        let pick_highest = match rules.select_policy.as_deref() {
            Some("Disabled") => return current,
            Some("Min") => !up,
            _ => up,
        };
        let picked = if pick_highest {
            limits.iter().copied().max()
        } else {
            limits.iter().copied().min()
        };
        // Never a limit that moves the other way (changes someone else
        // made in the period can put its start beyond `current`).
        match (picked, up) {
            (Some(l), true) => l.max(current),
            (Some(l), false) => l.min(current),
            (None, _) => current,
        }
    }
}

const SCALE_UP_LIMIT: (&str, &str) = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const SCALE_DOWN_LIMIT: (&str, &str) = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);
const TOO_MANY: (&str, &str) = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const TOO_FEW: (&str, &str) = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);

/// `desired` within min and max, and the ScalingLimited reason if not.
fn bound(desired: i32, (min, max): (i32, i32)) -> (i32, Option<(&'static str, &'static str)>) {
    if desired > max {
        (max, Some(TOO_MANY))
    } else if desired < min {
        (min, Some(TOO_FEW))
    } else {
        (desired, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behavior(value: serde_json::Value) -> HorizontalPodAutoscalerBehavior {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn without_behavior_up_to_twice_the_pods_and_down_after_five_minutes() {
        let t0 = Instant::now();
        let mut h = History::starting_at(1, t0);
        // 1 → 20 asked: at most max(2 × 1, 4).
        let o = h.normalize(None, 1, 20, (1, 30), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (4, Some("ScaleUpLimit"))
        );
        assert_eq!(
            h.normalize(None, 4, 20, (1, 30), t0 + Duration::from_secs(15))
                .replicas,
            8
        );
        // Down: the highest recommendation of the last 300 s holds (the
        // first one: the count the HPA found).
        let mut down = History::starting_at(4, t0);
        let o = down.normalize(None, 4, 2, (1, 30), t0 + Duration::from_secs(15));
        assert_eq!((o.replicas, o.stabilized), (4, Some("ScaleDownStabilized")));
        let o = down.normalize(None, 4, 2, (1, 30), t0 + Duration::from_secs(400));
        assert_eq!((o.replicas, o.stabilized), (2, None));
    }

    #[test]
    fn with_behavior_the_default_rules_and_the_changes_of_each_period() {
        let t0 = Instant::now();
        let mut h = History::starting_at(1, t0);
        let defaults = behavior(json!({}));
        // 4 pods or 100% per 15 s, the larger: 5.
        let o = h.normalize(Some(&defaults), 1, 20, (1, 30), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (5, Some("ScaleUpLimit"))
        );
        h.scaled(t0, 4);
        // Within the same period the start is still 1.
        let soon = t0 + Duration::from_secs(5);
        assert_eq!(
            h.normalize(Some(&defaults), 5, 20, (1, 30), soon).replicas,
            5
        );
        let later = t0 + Duration::from_secs(20);
        assert_eq!(
            h.normalize(Some(&defaults), 5, 20, (1, 30), later).replicas,
            10
        );
        // A first recommendation holds a new HPA for the scale-down window.
        let mut fresh = History::starting_at(6, t0);
        let o = fresh.normalize(Some(&defaults), 6, 2, (1, 30), t0 + Duration::from_secs(1));
        assert_eq!((o.replicas, o.stabilized), (6, Some("ScaleDownStabilized")));
    }

    #[test]
    fn the_tighter_of_the_rate_limit_and_the_bound_names_the_limit() {
        let t0 = Instant::now();
        // Without behavior: 2 pods may go to 4; a maximum of 4 is the
        // bound that holds (upstream: TooManyReplicas), one of 5 the rate.
        let o = History::default().normalize(None, 2, 10, (1, 4), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (4, Some("TooManyReplicas"))
        );
        let o = History::default().normalize(None, 2, 10, (1, 5), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (4, Some("ScaleUpLimit"))
        );
        // With the default behavior: 5 pods may go to 10 (100%); a
        // maximum of 10 holds as the bound.
        let defaults = behavior(json!({}));
        let o = History::default().normalize(Some(&defaults), 5, 50, (1, 10), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (10, Some("TooManyReplicas"))
        );
        let o = History::default().normalize(Some(&defaults), 5, 50, (1, 11), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (10, Some("ScaleUpLimit"))
        );
    }

    #[test]
    fn policies_windows_and_bounds_as_written() {
        let t0 = Instant::now();
        let mut h = History::default();
        let slow_down = behavior(json!({"scaleDown": {"stabilizationWindowSeconds": 0,
            "selectPolicy": "Min", "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60},
                                                {"type": "Percent", "value": 50, "periodSeconds": 60}]}}));
        // Min: the smaller change, one pod.
        let o = h.normalize(Some(&slow_down), 10, 2, (1, 30), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (9, Some("ScaleDownLimit"))
        );
        let disabled = behavior(json!({"scaleUp": {"selectPolicy": "Disabled"}}));
        assert_eq!(h.normalize(Some(&disabled), 3, 8, (1, 30), t0).replicas, 3);
        // The bounds come last.
        let o = History::default().normalize(None, 3, 3, (5, 30), t0);
        assert_eq!(
            (o.replicas, o.limited.map(|l| l.0)),
            (5, Some("TooFewReplicas"))
        );
    }
}
