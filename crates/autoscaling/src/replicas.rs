//! Upstream's replica calculator (`replica_calculator.go`) for Resource
//! and ContainerResource metrics: a proposal per metric from the pods'
//! usage against the target (Utilization of their requests, or an
//! AverageValue), within a 10% tolerance, with pods that have no metrics
//! or are not ready counted against the direction of the move. No I/O: the
//! controller brings the pods and their usage.

use std::collections::{BTreeMap, HashMap};

use flotilla_core::quantity;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, MetricSpec, MetricStatus, MetricValueStatus,
    ResourceMetricStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::pods::{PodSample, PodUsage};

/// `--horizontal-pod-autoscaler-tolerance`.
const TOLERANCE: f64 = 0.1;

/// One metric's proposal.
pub struct Proposal {
    pub replicas: i32,
    pub status: MetricStatus,
    /// How the Event names it ("cpu resource utilization (percentage of
    /// request)").
    pub name: String,
}

/// One Resource or ContainerResource metric's proposal, upstream's
/// replica calculator: pods without metrics and unready pods count
/// against the direction of the move.
pub fn propose_one(
    metric: &MetricSpec,
    pods: &[PodSample],
    usage: &PodUsage,
    current: i32,
    calibration: f64,
) -> std::result::Result<Proposal, (String, String)> {
    // The Event and condition reason of this metric's failures, as
    // upstream's: FailedGetResourceMetric, FailedGetPodsMetric, ...
    let failed = format!("FailedGet{}Metric", metric.type_);
    let missing = || {
        (
            failed.clone(),
            format!("a {} metric without its source", metric.type_),
        )
    };
    let (resource, container, target) = match metric.type_.as_str() {
        "Resource" => {
            let r = metric.resource.as_ref().ok_or_else(missing)?;
            (r.name.clone(), None, r.target.clone())
        }
        "ContainerResource" => {
            let r = metric.container_resource.as_ref().ok_or_else(missing)?;
            (r.name.clone(), Some(r.container.clone()), r.target.clone())
        }
        other => {
            return Err((
                failed,
                format!(
                    "unable to get {other} metric: no custom or external metrics API is served by this cluster"
                ),
            ));
        }
    };
    if resource != "cpu" && resource != "memory" {
        return Err((
            failed,
            format!(
                "unable to get metrics for resource {resource}: only cpu and memory are measured"
            ),
        ));
    }
    let err = |m: String| (failed.clone(), m);
    // Per pod: usage of the resource (millicores or bytes).
    let mut with_metrics: BTreeMap<String, f64> = BTreeMap::new();
    let (mut missing, mut unready) = (Vec::new(), Vec::new());
    for pod in pods {
        let name = pod.name.clone();
        if pod.pending {
            unready.push(pod);
            continue;
        }
        let Some(containers) = usage.get(&name) else {
            missing.push(pod);
            continue;
        };
        if resource == "cpu" && !pod.ready {
            unready.push(pod);
            continue;
        }
        let used: f64 = containers
            .iter()
            .filter(|(c, _)| container.as_deref().is_none_or(|n| n == c.as_str()))
            .map(|(_, (cpu, mem))| if resource == "cpu" { *cpu } else { *mem })
            .sum();
        with_metrics.insert(name, used);
    }
    if with_metrics.is_empty() {
        return Err(err(format!(
            "unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        )));
    }
    let by_name: HashMap<&str, &PodSample> = pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let ready_count = with_metrics.len() as f64;
    let label = match &container {
        Some(_) => format!("{resource} container resource"),
        None => format!("{resource} resource"),
    };
    match target.type_.as_str() {
        "Utilization" => {
            let percent = target.average_utilization.unwrap_or(80) as f64;
            let requests = |names: &mut dyn Iterator<Item = &String>| -> std::result::Result<f64, (String, String)> {
                let mut total = 0.0;
                for n in names {
                    if let Some(p) = by_name.get(n.as_str()) {
                        total += p.request(&resource, container.as_deref()).map_err(err)?;
                    }
                }
                Ok(total)
            };
            let total_request = requests(&mut with_metrics.keys())?;
            if total_request <= 0.0 {
                return Err(err(format!("missing request for {resource}")));
            }
            let used: f64 = with_metrics.values().sum();
            let utilization = (used * 100.0 / total_request) as i32;
            let ratio = utilization as f64 / percent;
            let replicas = adjust(
                ratio,
                ready_count,
                (current, calibration),
                &missing,
                &unready,
                |pods_assumed: &[(f64, f64)]| {
                    let extra_used: f64 = pods_assumed.iter().map(|(u, _)| u).sum();
                    let extra_req: f64 = pods_assumed.iter().map(|(_, r)| r).sum();
                    ((used + extra_used) * 100.0 / (total_request + extra_req)) / percent
                },
                |p, full| {
                    let req = p.request(&resource, container.as_deref()).unwrap_or(0.0);
                    (if full { req } else { 0.0 }, req)
                },
            );
            let average = used / ready_count;
            let status = metric_status(
                &metric.type_,
                &resource,
                container.as_deref(),
                Some(utilization),
                average,
            );
            Ok(Proposal {
                replicas,
                status,
                name: format!("{label} utilization (percentage of request)"),
            })
        }
        "AverageValue" => {
            let target_value = target
                .average_value
                .as_ref()
                .and_then(|q| quantity::parse(&q.0))
                .map(|v| if resource == "cpu" { v * 1000.0 } else { v })
                .filter(|v| *v > 0.0)
                .ok_or_else(|| err("an AverageValue target without its value".into()))?;
            let used: f64 = with_metrics.values().sum();
            let ratio = used / (target_value * ready_count);
            let replicas = adjust(
                ratio,
                ready_count,
                (current, calibration),
                &missing,
                &unready,
                |assumed: &[(f64, f64)]| {
                    let extra: f64 = assumed.iter().map(|(u, _)| u).sum();
                    (used + extra) / (target_value * (ready_count + assumed.len() as f64))
                },
                |_, full| (if full { target_value } else { 0.0 }, 0.0),
            );
            let status = metric_status(
                &metric.type_,
                &resource,
                container.as_deref(),
                None,
                used / ready_count,
            );
            Ok(Proposal {
                replicas,
                status,
                name: label,
            })
        }
        other => Err(err(format!(
            "invalid target type {other:?} for a {resource} metric"
        ))),
    }
}

/// Upstream's rule for pods without metrics (assumed at the target when
/// scaling down, at zero when scaling up) and unready pods (at zero when
/// scaling up): the count moves only if the ratio with them still points
/// the same way beyond the tolerance.
fn adjust(
    ratio: f64,
    ready_count: f64,
    (current, calibration): (i32, f64),
    missing: &[&PodSample],
    unready: &[&PodSample],
    ratio_with: impl Fn(&[(f64, f64)]) -> f64,
    assume: impl Fn(&PodSample, bool) -> (f64, f64),
) -> i32 {
    let scale_up = ratio > 1.0;
    if missing.is_empty() && (unready.is_empty() || !scale_up) {
        if (ratio - 1.0).abs() <= TOLERANCE {
            return current;
        }
        return (ratio * ready_count / calibration).ceil() as i32;
    }
    let mut assumed: Vec<(f64, f64)> = missing.iter().map(|p| assume(p, !scale_up)).collect();
    if scale_up {
        assumed.extend(unready.iter().map(|p| assume(p, false)));
    }
    let new_ratio = ratio_with(&assumed);
    if (new_ratio - 1.0).abs() <= TOLERANCE
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let replicas = (new_ratio * (ready_count + assumed.len() as f64) / calibration).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return current;
    }
    replicas
}

fn metric_status(
    type_: &str,
    resource: &str,
    container: Option<&str>,
    utilization: Option<i32>,
    average: f64,
) -> MetricStatus {
    let value = if resource == "cpu" {
        quantity::format_millicores(average.round() as i64)
    } else {
        quantity::format_bytes(average.round() as i64)
    };
    let current = MetricValueStatus {
        average_utilization: utilization,
        average_value: Some(Quantity(value)),
        value: None,
    };
    let mut status = MetricStatus {
        type_: type_.to_string(),
        ..Default::default()
    };
    match container {
        Some(c) => {
            status.container_resource = Some(ContainerResourceMetricStatus {
                name: resource.into(),
                container: c.into(),
                current,
            })
        }
        None => {
            status.resource = Some(ResourceMetricStatus {
                name: resource.into(),
                current,
            })
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_holds_and_missing_pods_count_against_the_move() {
        // Within 10%: no change.
        assert_eq!(
            adjust(1.05, 4.0, (4, 1.0), &[], &[], |_| 0.0, |_, _| (0.0, 0.0)),
            4
        );
        // Twice the target on 2 pods: 4.
        assert_eq!(
            adjust(2.0, 2.0, (2, 1.0), &[], &[], |_| 0.0, |_, _| (0.0, 0.0)),
            4
        );
        // Half the target on 4 pods: 2.
        assert_eq!(
            adjust(0.5, 4.0, (4, 1.0), &[], &[], |_| 0.0, |_, _| (0.0, 0.0)),
            2
        );
        // Scaling down with a pod without metrics: assumed at its target,
        // the ratio goes to 0.9, within the tolerance: no change.
        let pod = PodSample::default();
        let missing = vec![&pod];
        assert_eq!(
            adjust(
                0.8,
                1.0,
                (2, 1.0),
                &missing,
                &[],
                |_| 0.9,
                |_, _| (1.0, 1.0)
            ),
            2
        );
    }
}
