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
//! The replica calculator is `replicas.rs`, the behavior `behavior.rs`,
//! both without I/O; this module reads and writes through the API.
//!
//! Resource and ContainerResource metrics are served (what metrics.k8s.io
//! measures); Pods, Object and External metrics need a custom or external
//! metrics API, which members do not serve: such a metric is reported as
//! failing, as upstream reports it without an adapter.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_apiserver::selector::LabelSelector;
use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    MetricSpec,
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

mod behavior;
mod replicas;

use behavior::History;
use replicas::{PodUsage, Proposal, propose_one};

use crate::pod::Pod;
use crate::podutil;
use crate::sim::{Cluster, Informers, Result, TaskBox, boxed, run_controller};

/// `--horizontal-pod-autoscaler-sync-period`.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);
/// `--horizontal-pod-autoscaler-tolerance`.
const COMPONENT: &str = "horizontal-pod-autoscaler";

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let hpa = Arc::new(Autoscaler {
        synced: Mutex::default(),
        histories: Mutex::default(),
        kinds: Mutex::default(),
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
    histories: Mutex<HashMap<String, History>>,
    /// Targets' resources by kind, as discovery found them.
    kinds: Mutex<HashMap<GroupVersionKind, ApiResource>>,
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
        last_transition_time: Some(podutil::now()),
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
                self.histories.lock().retain(|k, _| live.contains(k));
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
        let scaled = match scale_api(
            &self.kinds,
            &client,
            &ns,
            target.api_version.as_deref(),
            &target.kind,
        )
        .await
        {
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
            conditions.push(condition(
                "ScalingLimited",
                true,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count".into(),
            ));
            (
                max,
                "Current number of replicas above Spec.MaxReplicas".to_string(),
            )
        } else if current < min {
            conditions.push(condition(
                "ScalingLimited",
                true,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count".into(),
            ));
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
            let outcome = self
                .histories
                .lock()
                .entry(key.clone())
                .or_insert_with(|| History::starting_at(current, Instant::now()))
                .normalize(
                    spec.behavior.as_ref(),
                    current,
                    proposed,
                    (min, max),
                    Instant::now(),
                );
            conditions.insert(
                0,
                match outcome.stabilized {
                    Some(reason) => condition(
                        "AbleToScale",
                        true,
                        reason,
                        if reason == "ScaleDownStabilized" {
                            "recent recommendations were higher than current one, applying the highest recent recommendation"
                        } else {
                            "recent recommendations were lower than current one, applying the lowest recent recommendation"
                        }
                        .into(),
                    ),
                    None => condition(
                        "AbleToScale",
                        true,
                        "ReadyForNewScale",
                        "recommended size matches current size".into(),
                    ),
                },
            );
            conditions.push(match outcome.limited {
                Some((reason, message)) => {
                    condition("ScalingLimited", true, reason, message.into())
                }
                None => condition(
                    "ScalingLimited",
                    false,
                    "DesiredWithinRange",
                    "the desired count is within the acceptable range".into(),
                ),
            });
            (outcome.replicas, reason)
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
            self.histories
                .lock()
                .entry(key.clone())
                .or_insert_with(|| History::starting_at(current, Instant::now()))
                .scaled(Instant::now(), desired - current);
            recorder.emit(
                &reference,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {reason}"),
            );
            status.last_scale_time = Some(podutil::now());
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
        if selector.is_empty() {
            return Err((
                "SelectorRequired".into(),
                "the HPA target's scale is missing a selector".into(),
            ));
        }
        let parsed = LabelSelector::parse(selector).map_err(|e| {
            (
                "InvalidSelector".to_string(),
                format!(
                    "couldn't convert selector into a corresponding internal selector object: {e}"
                ),
            )
        })?;
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
        // As upstream: a metric that fails blocks scaling down (it might
        // have asked for more), and all failing blocks everything.
        let best = out.iter().flatten().map(|p| p.replicas).max();
        match first_error {
            Some(e) if best.is_none_or(|b| b < current) => Err(e),
            _ => Ok(out),
        }
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
        let mut conditions: Vec<_> = conditions
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
        // A sync sets the conditions it decided on; the others stay as the
        // last sync left them (upstream's setCondition).
        for old in before {
            if conditions.iter().all(|c| c.type_ != old.type_) {
                conditions.push(old);
            }
        }
        let order = |t: &str| {
            ["AbleToScale", "ScalingActive", "ScalingLimited"]
                .iter()
                .position(|o| *o == t)
                .unwrap_or(3)
        };
        conditions.sort_by_key(|c| order(&c.type_));
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

/// The `/scale` of the target's kind, found through discovery (any kind
/// with a scale subresource, custom ones included) once per kind.
async fn scale_api(
    kinds: &Mutex<HashMap<GroupVersionKind, ApiResource>>,
    client: &kube::Client,
    ns: &str,
    api_version: Option<&str>,
    kind: &str,
) -> std::result::Result<Api<DynamicObject>, String> {
    let api_version = api_version.unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let known = kinds.lock().get(&gvk).cloned();
    let resource = match known {
        Some(r) => r,
        None => {
            let (r, _) = kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|e| {
                    format!(
                        "the server could not find the requested resource {kind}.{api_version}: {e}"
                    )
                })?;
            kinds.lock().insert(gvk, r.clone());
            r
        }
    };
    Ok(Api::namespaced_with(client.clone(), ns, &resource))
}

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
                    let q = |r: &str| c.pointer(&format!("/usage/{r}")).and_then(Value::as_str);
                    Some((
                        c.get("name")?.as_str()?.to_string(),
                        // CPU as Quantity.MilliValue() reads it: rounded up.
                        (
                            q("cpu").and_then(crate::quantity::millicores).unwrap_or(0) as f64,
                            q("memory").and_then(crate::quantity::parse).unwrap_or(0.0),
                        ),
                    ))
                })
                .collect();
            (m.name_any(), containers)
        })
        .collect())
}
