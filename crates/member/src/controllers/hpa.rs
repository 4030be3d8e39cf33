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
//! The algorithm (replica calculator, behavior, conditions) is the
//! `flotilla-autoscaling` crate's, without I/O, shared with the control
//! plane's FederatedHPA; this module reads and writes through the API.
//!
//! Resource and ContainerResource metrics are served (what metrics.k8s.io
//! measures); Pods, Object and External metrics need a custom or external
//! metrics API, which members do not serve: such a metric is reported as
//! failing, as upstream reports it without an adapter.

use std::collections::HashMap;
use std::sync::Arc;

use flotilla_autoscaling::pods::{ContainerRequest, container_usage};
use flotilla_autoscaling::{Decision, Failure, Memory, PodSample, PodUsage, SYNC_PERIOD};
use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::pod::Pod;
use crate::podutil;

const COMPONENT: &str = "horizontal-pod-autoscaler";

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let hpa = Arc::new(Autoscaler {
        memory: Memory::default(),
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

struct Autoscaler {
    /// Each HPA's last sync and history.
    memory: Memory,
    /// Targets' resources by kind, as discovery found them.
    kinds: Mutex<HashMap<GroupVersionKind, ApiResource>>,
}

impl Autoscaler {
    async fn reconcile(&self, hpa: &HorizontalPodAutoscaler, cluster: &Cluster) -> Result<Action> {
        let requeue = Action::requeue(SYNC_PERIOD);
        if hpa.metadata.deletion_timestamp.is_some() {
            return Ok(requeue);
        }
        let ns = hpa.namespace().unwrap_or_default();
        let key = flotilla_autoscaling::memory_key(&hpa.metadata);
        if let Some(wait) = self.memory.wait(&key, hpa.metadata.generation) {
            return Ok(Action::requeue(wait));
        }
        // What deleted HPAs left goes.
        if self.memory.len() > cluster.hpas.state().len() {
            let live = cluster
                .hpas
                .state()
                .iter()
                .map(|h| flotilla_autoscaling::memory_key(&h.metadata))
                .collect();
            self.memory.retain(&live);
        }
        let recorder = cluster.recorder(COMPONENT);
        let reference = hpa.object_ref(&());
        let client = cluster.clients.controller_manager.clone();
        let spec = hpa.spec.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
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
                let failed = flotilla_autoscaling::failed_get_scale(&error);
                recorder.emit(&reference, "FailedGetScale", error);
                self.write_status(cluster, hpa, status, vec![failed])
                    .await?;
                return Ok(requeue);
            }
        };
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        status.current_replicas = Some(current);
        let selector = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        let mut decision = match flotilla_autoscaling::bounded(&spec, current) {
            Some(d) => d,
            None => {
                let observed = self.observe(cluster, &client, &ns, &selector).await;
                self.memory.decide(&key, &spec, current, &observed, 1.0)
            }
        };
        if let Some((reason, message)) = &decision.warning {
            recorder.emit(
                &reference,
                flotilla_autoscaling::event_reason(reason),
                message.clone(),
            );
        }
        if decision.current_metrics.is_some() {
            status.current_metrics = decision.current_metrics.take();
        }
        if let Some(desired) = decision.desired {
            status.desired_replicas = desired;
            if desired != current
                && let Err(e) = self
                    .rescale(&api, &target.name, &key, current, &decision)
                    .await
            {
                recorder.emit(
                    &reference,
                    "FailedRescale",
                    format!(
                        "New size: {desired}; reason: {}; error: {e}",
                        decision.reason
                    ),
                );
                flotilla_autoscaling::set_condition(
                    &mut decision.conditions,
                    flotilla_autoscaling::failed_update_scale(&e.to_string()),
                );
            } else if desired != current {
                recorder.emit(
                    &reference,
                    "SuccessfulRescale",
                    format!("New size: {desired}; reason: {}", decision.reason),
                );
                flotilla_autoscaling::set_condition(
                    &mut decision.conditions,
                    flotilla_autoscaling::succeeded_rescale(desired),
                );
                status.last_scale_time = Some(podutil::now());
            }
        }
        self.write_status(cluster, hpa, status, decision.conditions)
            .await?;
        Ok(requeue)
    }

    /// Writes the decided count to the target's `/scale` and remembers
    /// the change for the rate policies.
    async fn rescale(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        key: &str,
        current: i32,
        decision: &Decision,
    ) -> std::result::Result<(), kube::Error> {
        let desired = decision.desired.unwrap_or(current);
        let patch = json!({"spec": {"replicas": desired}});
        api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.memory.scaled(key, current, desired);
        Ok(())
    }

    /// The pods the selector names in the HPA's namespace and their usage.
    async fn observe(
        &self,
        cluster: &Cluster,
        client: &kube::Client,
        ns: &str,
        selector: &str,
    ) -> std::result::Result<(Vec<PodSample>, PodUsage), Failure> {
        let parsed = flotilla_autoscaling::parse_selector(selector)?;
        let pods: Vec<PodSample> = cluster
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
            .map(|p| sample(&p))
            .collect();
        let usage = pod_usage(client, ns, selector)
            .await
            .map_err(flotilla_autoscaling::metrics_api_failure)?;
        Ok((pods, usage))
    }

    async fn write_status(
        &self,
        cluster: &Cluster,
        hpa: &HorizontalPodAutoscaler,
        mut status: HorizontalPodAutoscalerStatus,
        conditions: Vec<HorizontalPodAutoscalerCondition>,
    ) -> Result<()> {
        let before = hpa
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let conditions = flotilla_autoscaling::merge_conditions(&before, conditions);
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
            let containers = container_usage(m.data.get("containers"));
            (m.name_any(), containers)
        })
        .collect())
}

/// What the calculator reads of a member pod.
fn sample(pod: &Pod) -> PodSample {
    PodSample {
        name: pod.name_any(),
        pending: podutil::phase(pod) == "Pending",
        ready: podutil::is_ready(pod),
        containers: pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| ContainerRequest {
                name: c.name.clone(),
                cpu: c.resources.cpu_request,
                memory: c.resources.memory_request,
            })
            .collect(),
    }
}
