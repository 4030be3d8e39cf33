//! The HorizontalPodAutoscaler controller (kube-controller-manager's
//! `horizontal-pod-autoscaler`), for `autoscaling/v2` (v1 objects are
//! stored as v2). Every sync period (15 s, upstream's default) and on each
//! change of an HPA it reads the target's `/scale`, the pods its selector
//! names and their usage from `metrics.k8s.io`, proposes a replica count
//! per metric (upstream's algorithm: the usage ratio against the target,
//! a 10% tolerance, pods without metrics or not ready counted against the
//! move), takes the largest, applies the behavior (stabilization windows,
//! rate policies, defaults as upstream's) and the min/max bounds, writes
//! `/scale` when it changes and reports in the HPA's status and Events.
//!
//! Resource and ContainerResource metrics are served (what metrics.k8s.io
//! measures); Pods, Object and External metrics need a custom or external
//! metrics API, which members do not serve: such a metric is reported as
//! failing, as upstream reports it without an adapter.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_apiserver::selector::LabelSelector;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus,
    MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::pod::Pod;
use crate::podutil;
use crate::sim::{Cluster, Informers, Result, TaskBox, boxed, run_controller};

/// `--horizontal-pod-autoscaler-sync-period`.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);
/// `--horizontal-pod-autoscaler-tolerance`.
const TOLERANCE: f64 = 0.1;
const COMPONENT: &str = "horizontal-pod-autoscaler";

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let hpa = Arc::new(Autoscaler {
        synced: Mutex::default(),
        recommendations: Mutex::default(),
        scale_events: Mutex::default(),
    });
    let triggers = vec![boxed(inf.hpas.own_triggers(|_| true))];
    run_controller(
        COMPONENT,
        cluster.hpas.clone(),
        triggers,
        cluster,
        4,
        move |obj, cluster| {
            let hpa = hpa.clone();
            async move { hpa.reconcile(&obj, &cluster).await }
        },
    )
}

/// What an HPA remembers between syncs, as upstream's controller does in
/// memory: its recent recommendations (stabilization) and scale changes
/// (rate policies), by `namespace/name`.
struct Autoscaler {
    /// When each HPA was last synced, at which generation: its own status
    /// writes wake it, and upstream syncs an HPA at most once a period
    /// unless its spec changed.
    synced: Mutex<HashMap<String, (Instant, Option<i64>)>>,
    recommendations: Mutex<HashMap<String, Vec<(Instant, i32)>>>,
    scale_events: Mutex<HashMap<String, Vec<(Instant, i32)>>>,
}

/// One metric's proposal.
struct Proposal {
    replicas: i32,
    status: MetricStatus,
    /// How the Event names it ("cpu resource utilization (percentage of
    /// request)").
    name: String,
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
) -> HorizontalPodAutoscalerCondition {
    HorizontalPodAutoscalerCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(Time(
            jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                .unwrap_or_else(|_| jiff::Timestamp::now()),
        )),
    }
}

impl Autoscaler {
    async fn reconcile(&self, hpa: &HorizontalPodAutoscaler, cluster: &Cluster) -> Result<Action> {
        let requeue = Action::requeue(SYNC_PERIOD);
        if hpa.metadata.deletion_timestamp.is_some() {
            return Ok(requeue);
        }
        let ns = hpa.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", hpa.name_any());
        {
            let mut synced = self.synced.lock();
            let now = Instant::now();
            if let Some((at, generation)) = synced.get(&key)
                && *generation == hpa.metadata.generation
                && now.duration_since(*at) < SYNC_PERIOD
            {
                return Ok(Action::requeue(SYNC_PERIOD - now.duration_since(*at)));
            }
            synced.insert(key.clone(), (now, hpa.metadata.generation));
            // What deleted HPAs left goes.
            if synced.len() > cluster.hpas.state().len() {
                let live: std::collections::HashSet<String> = cluster
                    .hpas
                    .state()
                    .iter()
                    .map(|h| format!("{}/{}", h.namespace().unwrap_or_default(), h.name_any()))
                    .collect();
                synced.retain(|k, _| live.contains(k));
                self.recommendations.lock().retain(|k, _| live.contains(k));
                self.scale_events.lock().retain(|k, _| live.contains(k));
            }
        }
        let recorder = cluster.recorder(COMPONENT);
        let reference = hpa.object_ref(&());
        let client = cluster.clients.controller_manager.clone();
        let spec = hpa.spec.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let mut conditions = Vec::new();
        let mut status = HorizontalPodAutoscalerStatus {
            observed_generation: hpa.metadata.generation,
            last_scale_time: hpa.status.as_ref().and_then(|s| s.last_scale_time.clone()),
            current_replicas: hpa.status.as_ref().and_then(|s| s.current_replicas),
            desired_replicas: hpa.status.as_ref().map_or(0, |s| s.desired_replicas),
            current_metrics: hpa.status.as_ref().and_then(|s| s.current_metrics.clone()),
            conditions: None,
        };

        // The target's scale.
        let scaled =
            match scale_api(&client, &ns, target.api_version.as_deref(), &target.kind).await {
                Ok(api) => match api.get_scale(&target.name).await {
                    Ok(scale) => Ok((api, scale)),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e),
            };
        let (api, scale) = match scaled {
            Ok(s) => s,
            Err(error) => {
                let message = format!(
                    "the HPA controller was unable to get the target's current scale: {error}"
                );
                recorder.emit(&reference, "FailedGetScale", error);
                conditions.push(condition("AbleToScale", false, "FailedGetScale", message));
                self.write_status(cluster, hpa, status, conditions).await?;
                return Ok(requeue);
            }
        };
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        status.current_replicas = Some(current);
        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        let selector = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();

        let (desired, reason) = if current == 0 && min != 0 {
            conditions.push(condition(
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            ));
            (0, String::new())
        } else if current > max {
            (
                max,
                "Current number of replicas above Spec.MaxReplicas".to_string(),
            )
        } else if current < min {
            (
                min,
                "Current number of replicas below Spec.MinReplicas".to_string(),
            )
        } else {
            let metrics = if spec.metrics.as_ref().is_none_or(Vec::is_empty) {
                // Upstream's default: 80% of the pods' CPU request.
                vec![
                    serde_json::from_value(json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}))
                    .unwrap_or_default(),
                ]
            } else {
                spec.metrics.clone().unwrap_or_default()
            };
            let proposals = match self
                .propose(cluster, &client, &ns, &selector, current, &metrics)
                .await
            {
                Ok(p) => p,
                Err((reason, message)) => {
                    recorder.emit(&reference, reason_static(&reason), message.clone());
                    conditions.push(condition(
                        "AbleToScale",
                        true,
                        "SucceededGetScale",
                        "the HPA controller was able to get the target's current scale".into(),
                    ));
                    conditions.push(condition("ScalingActive", false, &reason, message));
                    self.write_status(cluster, hpa, status, conditions).await?;
                    return Ok(requeue);
                }
            };
            status.current_metrics = Some(
                proposals
                    .iter()
                    .map(|p| p.as_ref().map(|p| p.status.clone()).unwrap_or_default())
                    .collect(),
            );
            let proposals: Vec<Proposal> = proposals.into_iter().flatten().collect();
            conditions.push(condition(
                "ScalingActive",
                true,
                "ValidMetricFound",
                format!(
                    "the HPA was able to successfully calculate a replica count from {}",
                    proposals.first().map_or(
                        "cpu resource utilization (percentage of request)".into(),
                        |p| p.name.clone()
                    )
                ),
            ));
            let best = proposals.iter().max_by_key(|p| p.replicas);
            let proposed = best.map_or(current, |p| p.replicas);
            let reason = match best {
                Some(p) if proposed > current => format!("{} above target", p.name),
                _ => "All metrics below target".to_string(),
            };
            let (normalized, able, limited) =
                self.normalize(&key, spec.behavior.as_ref(), current, proposed, min, max);
            conditions.insert(0, able);
            conditions.push(limited);
            (normalized, reason)
        };
        if conditions.iter().all(|c| c.type_ != "AbleToScale") {
            conditions.insert(
                0,
                condition(
                    "AbleToScale",
                    true,
                    "SucceededGetScale",
                    "the HPA controller was able to get the target's current scale".into(),
                ),
            );
        }
        status.desired_replicas = desired;
        if desired != current {
            let patch = json!({"spec": {"replicas": desired}});
            if let Err(e) = api
                .patch_scale(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                recorder.emit(
                    &reference,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {reason}; error: {e}"),
                );
                conditions[0] = condition(
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {e}"),
                );
                self.write_status(cluster, hpa, status, conditions).await?;
                return Ok(requeue);
            }
            self.scale_events
                .lock()
                .entry(key.clone())
                .or_default()
                .push((Instant::now(), desired - current));
            recorder.emit(
                &reference,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {reason}"),
            );
            status.last_scale_time = Some(Time(
                jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                    .unwrap_or_else(|_| jiff::Timestamp::now()),
            ));
        }
        self.write_status(cluster, hpa, status, conditions).await?;
        Ok(requeue)
    }

    /// A replica count per metric, or why none can be had.
    async fn propose(
        &self,
        cluster: &Cluster,
        client: &kube::Client,
        ns: &str,
        selector: &str,
        current: i32,
        metrics: &[MetricSpec],
    ) -> std::result::Result<Vec<Option<Proposal>>, (String, String)> {
        let parsed = LabelSelector::parse(selector).map_err(|e| {
            (
                "InvalidSelector".to_string(),
                format!(
                    "couldn't convert selector into a corresponding internal selector object: {e}"
                ),
            )
        })?;
        if selector.is_empty() {
            return Err((
                "InvalidSelector".into(),
                "the HPA target's scale is missing a selector".into(),
            ));
        }
        let pods: Vec<Arc<Pod>> = cluster
            .pods_by_namespace
            .get(ns)
            .into_iter()
            .filter(|p| {
                let labels: serde_json::Map<String, Value> = p
                    .labels()
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                parsed.matches(Some(&labels))
                    && p.metadata.deletion_timestamp.is_none()
                    && !matches!(podutil::phase(p), "Failed" | "Succeeded")
            })
            .collect();
        let usage = pod_usage(client, ns, selector).await.map_err(|e| {
            ("FailedGetResourceMetric".to_string(), format!("unable to get metrics for resource: unable to fetch metrics from resource metrics API: {e}"))
        })?;
        // One entry per metric, in order (the status lists them so).
        let mut out = Vec::new();
        let mut first_error = None;
        for m in metrics {
            match propose_one(m, &pods, &usage, current) {
                Ok(p) => out.push(Some(p)),
                Err(e) => {
                    out.push(None);
                    first_error.get_or_insert(e);
                }
            }
        }
        match (out.iter().all(Option::is_none), first_error) {
            (true, Some(e)) => Err(e),
            _ => Ok(out),
        }
    }

    /// The behavior and bounds applied to a proposal: the count, and the
    /// AbleToScale and ScalingLimited conditions that say why.
    fn normalize(
        &self,
        key: &str,
        behavior: Option<&k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior>,
        current: i32,
        proposed: i32,
        min: i32,
        max: i32,
    ) -> (
        i32,
        HorizontalPodAutoscalerCondition,
        HorizontalPodAutoscalerCondition,
    ) {
        let up = behavior
            .and_then(|b| b.scale_up.clone())
            .unwrap_or_else(default_scale_up);
        let down = behavior
            .and_then(|b| b.scale_down.clone())
            .unwrap_or_else(default_scale_down);
        let now = Instant::now();
        // Stabilization: the lowest recommendation of the scale-up window,
        // the highest of the scale-down window.
        let up_window =
            Duration::from_secs(up.stabilization_window_seconds.unwrap_or(0).max(0) as u64);
        let down_window =
            Duration::from_secs(down.stabilization_window_seconds.unwrap_or(300).max(0) as u64);
        let stabilized = {
            let mut recs = self.recommendations.lock();
            let list = recs.entry(key.to_string()).or_default();
            list.retain(|(at, _)| now.duration_since(*at) <= up_window.max(down_window));
            let (mut up_rec, mut down_rec) = (proposed, proposed);
            for (at, r) in list.iter() {
                let age = now.duration_since(*at);
                if age <= up_window {
                    up_rec = up_rec.min(*r);
                }
                if age <= down_window {
                    down_rec = down_rec.max(*r);
                }
            }
            list.push((now, proposed));
            current.max(up_rec).min(down_rec)
        };
        let able = if stabilized != proposed {
            condition("AbleToScale", true, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation".into())
        } else {
            condition(
                "AbleToScale",
                true,
                "ReadyForNewScale",
                "recommended size matches current size".into(),
            )
        };
        // Rate policies over the changes of each policy's period.
        let changes = {
            let mut events = self.scale_events.lock();
            let list = events.entry(key.to_string()).or_default();
            list.retain(|(at, _)| now.duration_since(*at) <= Duration::from_secs(1800));
            list.clone()
        };
        let changed_within = |seconds: i32| -> (i32, i32) {
            let period = Duration::from_secs(seconds.max(0) as u64);
            changes
                .iter()
                .filter(|(at, _)| now.duration_since(*at) <= period)
                .fold((0, 0), |(added, removed), (_, d)| {
                    if *d > 0 {
                        (added + d, removed)
                    } else {
                        (added, removed - d)
                    }
                })
        };
        let mut desired = stabilized;
        let mut limited = None;
        if desired > current {
            let limits: Vec<i32> = up.policies.as_ref().map_or(Vec::new(), |ps| {
                ps.iter()
                    .map(|p| {
                        let (added, removed) = changed_within(p.period_seconds);
                        let start = current - added + removed;
                        if p.type_ == "Pods" {
                            start + p.value
                        } else {
                            (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i32
                        }
                    })
                    .collect()
            });
            let limit = match up.select_policy.as_deref() {
                Some("Disabled") => current,
                Some("Min") => limits.iter().copied().min().unwrap_or(i32::MAX),
                _ => limits.iter().copied().max().unwrap_or(i32::MAX),
            };
            if desired > limit {
                desired = limit;
                limited = Some((
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                ));
            }
        } else if desired < current {
            let limits: Vec<i32> = down.policies.as_ref().map_or(Vec::new(), |ps| {
                ps.iter()
                    .map(|p| {
                        let (added, removed) = changed_within(p.period_seconds);
                        let start = current + removed - added;
                        if p.type_ == "Pods" {
                            start - p.value
                        } else {
                            (start as f64 * (1.0 - p.value as f64 / 100.0)).floor() as i32
                        }
                    })
                    .collect()
            });
            let limit = match down.select_policy.as_deref() {
                Some("Disabled") => current,
                Some("Min") => limits.iter().copied().max().unwrap_or(i32::MIN),
                _ => limits.iter().copied().min().unwrap_or(i32::MIN),
            };
            if desired < limit {
                desired = limit;
                limited = Some((
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                ));
            }
        }
        if desired > max {
            desired = max;
            limited = Some((
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            ));
        } else if desired < min {
            desired = min;
            limited = Some((
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            ));
        }
        let limited = match limited {
            Some((reason, message)) => condition("ScalingLimited", true, reason, message.into()),
            None => condition(
                "ScalingLimited",
                false,
                "DesiredWithinRange",
                "the desired count is within the acceptable range".into(),
            ),
        };
        (desired, able, limited)
    }

    async fn write_status(
        &self,
        cluster: &Cluster,
        hpa: &HorizontalPodAutoscaler,
        mut status: HorizontalPodAutoscalerStatus,
        conditions: Vec<HorizontalPodAutoscalerCondition>,
    ) -> Result<()> {
        // A condition keeps its transition time while its status holds.
        let before = hpa
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let conditions: Vec<_> = conditions
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
        status.conditions = Some(conditions);
        let desired = serde_json::to_value(&status).map_err(kube::Error::SerdeError)?;
        if let Some(patch) = super::status::patch(&hpa.status, &desired) {
            let api: Api<HorizontalPodAutoscaler> = Api::namespaced(
                cluster.clients.controller_manager.clone(),
                &hpa.namespace().unwrap_or_default(),
            );
            super::status::write(&api, &hpa.name_any(), &patch).await?;
        }
        Ok(())
    }
}

/// The Event reasons a metric failure is recorded under.
fn reason_static(reason: &str) -> &'static str {
    match reason {
        "InvalidSelector" => "SelectorRequired",
        "FailedGetResourceMetric" => "FailedGetResourceMetric",
        "FailedGetContainerResourceMetric" => "FailedGetContainerResourceMetric",
        "FailedGetPodsMetric" => "FailedGetPodsMetric",
        "FailedGetObjectMetric" => "FailedGetObjectMetric",
        "FailedGetExternalMetric" => "FailedGetExternalMetric",
        _ => "FailedComputeMetricsReplicas",
    }
}

fn default_scale_up() -> HPAScalingRules {
    serde_json::from_value(
        json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                     {"type": "Percent", "value": 100, "periodSeconds": 15}]}),
    )
    .unwrap_or_default()
}

fn default_scale_down() -> HPAScalingRules {
    serde_json::from_value(
        json!({"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}),
    )
    .unwrap_or_default()
}

/// The `/scale` of the target's kind, found through discovery (any kind
/// with a scale subresource, custom ones included).
async fn scale_api(
    client: &kube::Client,
    ns: &str,
    api_version: Option<&str>,
    kind: &str,
) -> std::result::Result<Api<DynamicObject>, String> {
    let api_version = api_version.unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, _): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| {
            format!("the server could not find the requested resource {kind}.{api_version}: {e}")
        })?;
    Ok(Api::namespaced_with(client.clone(), ns, &resource))
}

/// Usage by pod name and container name, in millicores and bytes.
type PodUsage = HashMap<String, BTreeMap<String, (f64, f64)>>;

/// The pods' usage from the member's `metrics.k8s.io`, as upstream's
/// REST metrics client reads it.
async fn pod_usage(
    client: &kube::Client,
    ns: &str,
    selector: &str,
) -> std::result::Result<PodUsage, kube::Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
        "pods",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let list = api.list(&ListParams::default().labels(selector)).await?;
    Ok(list
        .items
        .into_iter()
        .map(|m| {
            let containers = m
                .data
                .get("containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let q = |r: &str| {
                        c.pointer(&format!("/usage/{r}"))
                            .and_then(Value::as_str)
                            .and_then(crate::quantity::parse)
                    };
                    Some((
                        c.get("name")?.as_str()?.to_string(),
                        // As Quantity.MilliValue(): rounded up.
                        (
                            (q("cpu").unwrap_or(0.0) * 1000.0).ceil(),
                            q("memory").unwrap_or(0.0),
                        ),
                    ))
                })
                .collect();
            (m.name_any(), containers)
        })
        .collect())
}

/// A pod's request of `resource` (millicores or bytes), summed over its
/// containers (or `container`'s alone); an error names the container
/// without one.
fn request(pod: &Pod, resource: &str, container: Option<&str>) -> std::result::Result<f64, String> {
    let mut total = 0.0;
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        if container.is_some_and(|n| n != c.name) {
            continue;
        }
        let r = if resource == "cpu" {
            c.resources.cpu_request
        } else {
            c.resources.memory_request
        };
        match r {
            Some(v) => total += v as f64,
            None => {
                return Err(format!(
                    "missing request for {resource} in container {} of Pod {}",
                    c.name,
                    pod.name_any()
                ));
            }
        }
    }
    Ok(total)
}

fn ready(pod: &Pod) -> bool {
    podutil::is_ready(pod)
}

/// One Resource or ContainerResource metric's proposal, upstream's
/// replica calculator: pods without metrics and unready pods count
/// against the direction of the move.
fn propose_one(
    metric: &MetricSpec,
    pods: &[Arc<Pod>],
    usage: &PodUsage,
    current: i32,
) -> std::result::Result<Proposal, (String, String)> {
    let (resource, container, target, failed) = match metric.type_.as_str() {
        "Resource" => {
            let r = metric.resource.as_ref().ok_or_else(|| {
                (
                    "FailedGetResourceMetric".to_string(),
                    "a Resource metric without its resource".to_string(),
                )
            })?;
            (
                r.name.clone(),
                None,
                r.target.clone(),
                "FailedGetResourceMetric",
            )
        }
        "ContainerResource" => {
            let r = metric.container_resource.as_ref().ok_or_else(|| {
                (
                    "FailedGetContainerResourceMetric".to_string(),
                    "a ContainerResource metric without its resource".to_string(),
                )
            })?;
            (
                r.name.clone(),
                Some(r.container.clone()),
                r.target.clone(),
                "FailedGetContainerResourceMetric",
            )
        }
        other => {
            let reason = format!("FailedGet{other}Metric");
            return Err((
                reason,
                format!(
                    "unable to get {other} metric: no custom or external metrics API is served by this cluster"
                ),
            ));
        }
    };
    if resource != "cpu" && resource != "memory" {
        return Err((
            failed.into(),
            format!(
                "unable to get metrics for resource {resource}: only cpu and memory are measured"
            ),
        ));
    }
    let err = |m: String| (failed.to_string(), m);
    // Per pod: usage of the resource (millicores or bytes).
    let mut with_metrics: BTreeMap<String, f64> = BTreeMap::new();
    let (mut missing, mut unready) = (Vec::new(), Vec::new());
    for pod in pods {
        let name = pod.name_any();
        if podutil::phase(pod) == "Pending" {
            unready.push(pod.clone());
            continue;
        }
        let Some(containers) = usage.get(&name) else {
            missing.push(pod.clone());
            continue;
        };
        if resource == "cpu" && !ready(pod) {
            unready.push(pod.clone());
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
    let by_name: HashMap<String, &Arc<Pod>> = pods.iter().map(|p| (p.name_any(), p)).collect();
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
                    if let Some(p) = by_name.get(n) {
                        total += request(p, &resource, container.as_deref()).map_err(err)?;
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
                current,
                &missing,
                &unready,
                |pods_assumed: &[(f64, f64)]| {
                    let extra_used: f64 = pods_assumed.iter().map(|(u, _)| u).sum();
                    let extra_req: f64 = pods_assumed.iter().map(|(_, r)| r).sum();
                    ((used + extra_used) * 100.0 / (total_request + extra_req)) / percent
                },
                |p, full| {
                    let req = request(p, &resource, container.as_deref()).unwrap_or(0.0);
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
                .and_then(|q| crate::quantity::parse(&q.0))
                .map(|v| if resource == "cpu" { v * 1000.0 } else { v })
                .filter(|v| *v > 0.0)
                .ok_or_else(|| err("an AverageValue target without its value".into()))?;
            let used: f64 = with_metrics.values().sum();
            let ratio = used / (target_value * ready_count);
            let replicas = adjust(
                ratio,
                ready_count,
                current,
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
    current: i32,
    missing: &[Arc<Pod>],
    unready: &[Arc<Pod>],
    ratio_with: impl Fn(&[(f64, f64)]) -> f64,
    assume: impl Fn(&Pod, bool) -> (f64, f64),
) -> i32 {
    let scale_up = ratio > 1.0;
    if missing.is_empty() && (unready.is_empty() || !scale_up) {
        if (ratio - 1.0).abs() <= TOLERANCE {
            return current;
        }
        return (ratio * ready_count).ceil() as i32;
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
    let replicas = (new_ratio * (ready_count + assumed.len() as f64)).ceil() as i32;
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
        crate::quantity::format_millicores(average.round() as i64)
    } else {
        crate::quantity::format_bytes(average.round() as i64)
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
            adjust(1.05, 4.0, 4, &[], &[], |_| 0.0, |_, _| (0.0, 0.0)),
            4
        );
        // Twice the target on 2 pods: 4.
        assert_eq!(adjust(2.0, 2.0, 2, &[], &[], |_| 0.0, |_, _| (0.0, 0.0)), 4);
        // Half the target on 4 pods: 2.
        assert_eq!(adjust(0.5, 4.0, 4, &[], &[], |_| 0.0, |_, _| (0.0, 0.0)), 2);
        // Scaling down with a pod without metrics: assumed at its target,
        // the ratio goes to 0.9, within the tolerance: no change.
        let missing = vec![Arc::new(Pod::default())];
        assert_eq!(
            adjust(0.8, 1.0, 2, &missing, &[], |_| 0.9, |_, _| (1.0, 1.0)),
            2
        );
    }
}
