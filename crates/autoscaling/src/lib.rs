//! The HorizontalPodAutoscaler's algorithm, without I/O: what one sync of
//! an autoscaler decides from its spec, the target's current replicas, the
//! pods the target's selector names and their usage.
//!
//! Two controllers run it: the members' HPA controller (kube-controller-
//! manager's, on one cluster's pods) and the control plane's FederatedHPA
//! (Karmada's, on the pods of every member the workload was placed on).
//! Both read the target's `/scale`, the pods and `metrics.k8s.io`, call
//! [`bounded`] and then [`decide`], write `/scale` when the decision
//! differs from the current count and the status the decision describes.
//!
//! - [`replicas`]: upstream's replica calculator, a proposal per metric;
//! - [`behavior`]: stabilization windows, rate policies and bounds;
//! - [`pods`]: what the calculator reads of a pod and of its metrics;
//! - [`memory`]: what a controller remembers of its autoscalers.

#![forbid(unsafe_code)]

pub mod behavior;
pub mod memory;
pub mod pods;
pub mod replicas;

use std::time::Instant;

use flotilla_core::selector::LabelSelector;
use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerSpec, MetricSpec, MetricStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

pub use behavior::History;
pub use memory::Memory;
pub use pods::{PodSample, PodUsage};
use replicas::Proposal;

/// `--horizontal-pod-autoscaler-sync-period`.
pub const SYNC_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

/// Why metrics could not be had: a condition and Event reason (upstream's
/// `FailedGetResourceMetric`, `InvalidSelector`, ...) and its message.
pub type Failure = (String, String);

/// What one sync decided.
#[derive(Debug, Default)]
pub struct Decision {
    /// The count to scale to; `None` when metrics failed (nothing is
    /// scaled and the status keeps its last desired count).
    pub desired: Option<i32>,
    /// Why, as the `SuccessfulRescale` Event says it.
    pub reason: String,
    /// The conditions this sync decided on (others keep theirs, see
    /// [`merge_conditions`]).
    pub conditions: Vec<HorizontalPodAutoscalerCondition>,
    /// Each metric's current value, in the spec's order; `None`: unchanged.
    pub current_metrics: Option<Vec<MetricStatus>>,
    /// A failure to record as a Warning Event.
    pub warning: Option<Failure>,
}

pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
) -> HorizontalPodAutoscalerCondition {
    HorizontalPodAutoscalerCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(Time(Timestamp::now())),
    }
}

/// The condition a sync that cannot read the target's scale reports.
pub fn failed_get_scale(error: &str) -> HorizontalPodAutoscalerCondition {
    condition(
        "AbleToScale",
        false,
        "FailedGetScale",
        format!("the HPA controller was unable to get the target's current scale: {error}"),
    )
}

/// The condition a sync that cannot write the target's scale reports.
pub fn failed_update_scale(error: &str) -> HorizontalPodAutoscalerCondition {
    condition(
        "AbleToScale",
        false,
        "FailedUpdateScale",
        format!("the HPA controller was unable to update the target scale: {error}"),
    )
}

/// The condition a sync that wrote the target's scale reports.
pub fn succeeded_rescale(desired: i32) -> HorizontalPodAutoscalerCondition {
    condition(
        "AbleToScale",
        true,
        "SucceededRescale",
        format!("the HPA controller was able to update the target scale to {desired}"),
    )
}

fn succeeded_get_scale() -> HorizontalPodAutoscalerCondition {
    condition(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    )
}

/// The metrics a spec names: upstream's default (80% of the pods' CPU
/// request) when it names none.
pub fn metrics_of(spec: &HorizontalPodAutoscalerSpec) -> Vec<MetricSpec> {
    match &spec.metrics {
        Some(m) if !m.is_empty() => m.clone(),
        _ => vec![
            serde_json::from_value(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}))
            .unwrap_or_default(),
        ],
    }
}

/// The target's selector (its scale's `status.selector`) parsed, or the
/// failure upstream reports.
pub fn parse_selector(selector: &str) -> Result<LabelSelector, Failure> {
    if selector.is_empty() {
        return Err(selector_required());
    }
    LabelSelector::parse(selector).map_err(|e| {
        (
            "InvalidSelector".to_string(),
            format!("couldn't convert selector into a corresponding internal selector object: {e}"),
        )
    })
}

/// The failure of a target whose scale names no selector.
pub fn selector_required() -> Failure {
    (
        "SelectorRequired".into(),
        "the HPA target's scale is missing a selector".into(),
    )
}

/// The failure of reading the resource metrics API.
pub fn metrics_api_failure(error: impl std::fmt::Display) -> Failure {
    (
        "FailedGetResourceMetric".to_string(),
        format!(
            "unable to get metrics for resource: unable to fetch metrics from resource metrics API: {error}"
        ),
    )
}

/// The decision that needs no metrics: a target scaled to zero (scaling
/// disabled) or outside min and max (brought within). `None`: metrics
/// decide.
pub fn bounded(spec: &HorizontalPodAutoscalerSpec, current: i32) -> Option<Decision> {
    let (min, max) = (spec.min_replicas.unwrap_or(1), spec.max_replicas);
    let (desired, reason, limit) = if current == 0 && min != 0 {
        (
            0,
            String::new(),
            condition(
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            ),
        )
    } else if current > max {
        (
            max,
            "Current number of replicas above Spec.MaxReplicas".into(),
            condition(
                "ScalingLimited",
                true,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            ),
        )
    } else if current < min {
        (
            min,
            "Current number of replicas below Spec.MinReplicas".into(),
            condition(
                "ScalingLimited",
                true,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            ),
        )
    } else {
        return None;
    };
    Some(Decision {
        desired: Some(desired),
        reason,
        conditions: vec![succeeded_get_scale(), limit],
        current_metrics: None,
        warning: None,
    })
}

/// One sync's decision from the pods and their usage (or why they could
/// not be read), after `history`'s behavior and the bounds. `calibration`
/// is how many pods run per replica of `current` (1 on one cluster; a
/// FederatedHPA's workload duplicated to 3 members runs 3), as Karmada's
/// FederatedHPA divides its proposals by it. The proposal
/// is remembered in `history`; a scale the caller then writes is recorded
/// with [`History::scaled`].
pub fn decide(
    spec: &HorizontalPodAutoscalerSpec,
    current: i32,
    observed: Result<(&[PodSample], &PodUsage), Failure>,
    calibration: f64,
    history: &mut History,
    now: Instant,
) -> Decision {
    let metrics = metrics_of(spec);
    let proposals =
        observed.and_then(|(pods, usage)| propose(&metrics, pods, usage, current, calibration));
    let proposals = match proposals {
        Ok(p) => p,
        Err((reason, message)) => {
            return Decision {
                desired: None,
                reason: String::new(),
                conditions: vec![
                    succeeded_get_scale(),
                    condition("ScalingActive", false, &reason, message.clone()),
                ],
                current_metrics: None,
                warning: Some((reason, message)),
            };
        }
    };
    let current_metrics = proposals
        .iter()
        .map(|p| p.as_ref().map(|p| p.status.clone()).unwrap_or_default())
        .collect();
    let proposals: Vec<Proposal> = proposals.into_iter().flatten().collect();
    // The metric that asks for the most (the first of equals), as upstream.
    let best = proposals
        .iter()
        .reduce(|a, b| if b.replicas > a.replicas { b } else { a });
    let active = condition(
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!(
            "the HPA was able to successfully calculate a replica count from {}",
            best.map_or("cpu resource utilization (percentage of request)", |p| p
                .name
                .as_str())
        ),
    );
    let proposed = best.map_or(current, |p| p.replicas);
    let reason = match best {
        Some(p) if proposed > current => format!("{} above target", p.name),
        _ => "All metrics below target".to_string(),
    };
    let bounds = (spec.min_replicas.unwrap_or(1), spec.max_replicas);
    let outcome = history.normalize(spec.behavior.as_ref(), current, proposed, bounds, now);
    let able = match outcome.stabilized {
        Some(reason) => condition(
            "AbleToScale",
            true,
            reason,
            if reason == "ScaleDownStabilized" {
                "recent recommendations were higher than current one, applying the highest recent recommendation"
            } else {
                "recent recommendations were lower than current one, applying the lowest recent recommendation"
            },
        ),
        None => condition(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        ),
    };
    let limited = match outcome.limited {
        Some((reason, message)) => condition("ScalingLimited", true, reason, message),
        None => condition(
            "ScalingLimited",
            false,
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        ),
    };
    Decision {
        desired: Some(outcome.replicas),
        reason,
        conditions: vec![able, active, limited],
        current_metrics: Some(current_metrics),
        warning: None,
    }
}

/// A replica count per metric (`None` for one that failed), or why none
/// can be had.
fn propose(
    metrics: &[MetricSpec],
    pods: &[PodSample],
    usage: &PodUsage,
    current: i32,
    calibration: f64,
) -> Result<Vec<Option<Proposal>>, Failure> {
    let mut out = Vec::new();
    let mut first_error = None;
    for m in metrics {
        match replicas::propose_one(m, pods, usage, current, calibration) {
            Ok(p) => out.push(Some(p)),
            Err(e) => {
                out.push(None);
                first_error.get_or_insert(e);
            }
        }
    }
    // As upstream: a metric that fails blocks scaling down (it might
    // have asked for more), and all failing blocks everything.
    let best = out.iter().flatten().map(|p| p.replicas).max();
    match first_error {
        Some(e) if best.is_none_or(|b| b < current) => Err(e),
        _ => Ok(out),
    }
}

/// Sets `c` in `conditions`, in place of one of its type.
pub fn set_condition(
    conditions: &mut Vec<HorizontalPodAutoscalerCondition>,
    c: HorizontalPodAutoscalerCondition,
) {
    match conditions.iter_mut().find(|o| o.type_ == c.type_) {
        Some(o) => *o = c,
        None => conditions.insert(0, c),
    }
}

/// The key an autoscaler is remembered by: its uid (a deleted and
/// recreated one starts afresh), else its namespace and name.
pub fn memory_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match &meta.uid {
        Some(uid) => uid.clone(),
        None => format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ),
    }
}

/// The status's conditions after a sync: the ones it decided (keeping
/// their transition time while their status holds), the others as the
/// last sync left them (upstream's `setCondition`), in upstream's order.
pub fn merge_conditions(
    before: &[HorizontalPodAutoscalerCondition],
    decided: Vec<HorizontalPodAutoscalerCondition>,
) -> Vec<HorizontalPodAutoscalerCondition> {
    let mut conditions: Vec<_> = decided
        .into_iter()
        .map(|mut c| {
            if let Some(old) = before
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
            {
                c.last_transition_time = old.last_transition_time.clone();
            }
            c
        })
        .collect();
    for old in before {
        if conditions.iter().all(|c| c.type_ != old.type_) {
            conditions.push(old.clone());
        }
    }
    let order = |t: &str| {
        ["AbleToScale", "ScalingActive", "ScalingLimited"]
            .iter()
            .position(|o| *o == t)
            .unwrap_or(3)
    };
    conditions.sort_by_key(|c| order(&c.type_));
    conditions
}

/// The Event reasons a metric failure is recorded under (`&'static` for
/// the recorders).
pub fn event_reason(reason: &str) -> &'static str {
    match reason {
        "InvalidSelector" => "InvalidSelector",
        "SelectorRequired" => "SelectorRequired",
        "FailedGetResourceMetric" => "FailedGetResourceMetric",
        "FailedGetContainerResourceMetric" => "FailedGetContainerResourceMetric",
        "FailedGetPodsMetric" => "FailedGetPodsMetric",
        "FailedGetObjectMetric" => "FailedGetObjectMetric",
        "FailedGetExternalMetric" => "FailedGetExternalMetric",
        _ => "FailedComputeMetricsReplicas",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pods::ContainerRequest;

    fn spec(value: serde_json::Value) -> HorizontalPodAutoscalerSpec {
        serde_json::from_value(value).unwrap()
    }

    fn pod(name: &str, cpu_request: i64) -> PodSample {
        PodSample {
            name: name.into(),
            pending: false,
            ready: true,
            containers: vec![ContainerRequest {
                name: "app".into(),
                cpu: Some(cpu_request),
                memory: Some(64 << 20),
            }],
        }
    }

    fn usage(of: &[(&str, f64)]) -> PodUsage {
        of.iter()
            .map(|(n, cpu)| {
                (
                    n.to_string(),
                    [("app".to_string(), (*cpu, 0.0))].into_iter().collect(),
                )
            })
            .collect()
    }

    #[test]
    fn outside_the_bounds_no_metrics_are_needed() {
        let s = spec(
            json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 5}),
        );
        assert_eq!(bounded(&s, 1).and_then(|d| d.desired), Some(2));
        assert_eq!(bounded(&s, 9).and_then(|d| d.desired), Some(5));
        let off = bounded(&s, 0).unwrap();
        assert_eq!(off.desired, Some(0));
        assert_eq!(off.conditions[1].reason.as_deref(), Some("ScalingDisabled"));
        assert!(bounded(&s, 3).is_none());
    }

    #[test]
    fn twice_the_target_doubles_the_pods_and_a_failure_scales_nothing() {
        let s = spec(
            json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 10, "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}]}),
        );
        let pods = vec![pod("a", 200), pod("b", 200)];
        let used = usage(&[("a", 200.0), ("b", 200.0)]);
        let now = Instant::now();
        let mut history = History::starting_at(2, now);
        let d = decide(&s, 2, Ok((&pods, &used)), 1.0, &mut history, now);
        assert_eq!(d.desired, Some(4));
        assert_eq!(
            d.reason,
            "cpu resource utilization (percentage of request) above target"
        );
        let metrics = d.current_metrics.unwrap();
        let current = &metrics[0].resource.as_ref().unwrap().current;
        assert_eq!(current.average_utilization, Some(100));
        let failed = decide(
            &s,
            2,
            Err(metrics_api_failure("unavailable")),
            1.0,
            &mut history,
            now,
        );
        assert_eq!(failed.desired, None);
        assert_eq!(
            failed.warning.map(|w| w.0).as_deref(),
            Some("FailedGetResourceMetric")
        );
    }

    #[test]
    fn merged_conditions_keep_their_transition_time_and_order() {
        let mut old = condition("ScalingLimited", false, "DesiredWithinRange", "");
        old.last_transition_time = None;
        let merged = merge_conditions(
            &[old],
            vec![condition("ScalingActive", true, "ValidMetricFound", "")],
        );
        assert_eq!(
            merged.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["ScalingActive", "ScalingLimited"]
        );
        let kept = merge_conditions(
            &merged,
            vec![condition("ScalingLimited", false, "DesiredWithinRange", "")],
        );
        assert_eq!(kept[1].last_transition_time, None);
    }
}
