//! The FederatedHPA controller (Karmada's `federatedHorizontalPodAutoscaler`):
//! an HPA whose target is a resource template and whose pods run in the
//! members. Every sync period (15 s) it reads the template's `/scale` on
//! the control plane (the current replicas), the template's binding (the
//! clusters it was placed on, Ready ones only) and, in each of those
//! members, the workload's `/scale`, the pods its selector names and their
//! usage from that member's `metrics.k8s.io`. The algorithm is the
//! members' HPA's (`flotilla-autoscaling`), with Karmada's calibration: a
//! workload duplicated to 3 members runs 3 pods a replica, so proposals
//! are divided by the members' replicas over the template's. The decided
//! count is written to the template's `/scale`, and the scheduler divides
//! it among the members as the policy says.

use std::sync::Arc;

use flotilla_autoscaling::pods::container_usage;
use flotilla_autoscaling::{Decision, Failure, Memory, PodSample, PodUsage, SYNC_PERIOD};
use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

use super::api::FederatedHPA;
use crate::api::{Binding, Scope, binding_resource, sync_mode};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::names;
use crate::queue::{self, Next, WorkQueue};
use flotilla_client::events;

const COMPONENT: &str = "federatedhpa-controller";
/// How long one member's part of a sync may take.
const MEMBER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

struct State {
    ctx: Ctx,
    memory: Memory,
    store: Store<FederatedHPA>,
}

/// How many objects are reconciled at once (each sync reads every member's pods).
const WORKERS: usize = 8;

pub async fn run(ctx: Ctx) {
    let api: Api<FederatedHPA> = Api::all(ctx.hub.clone());
    let queue = WorkQueue::named(ctx.metrics.queue("federatedhpa-controller"));
    let (store, _watch) = queue::queue_touched(api, watcher::Config::default(), queue.clone());
    let state = Arc::new(State {
        ctx,
        memory: Memory::default(),
        store: store.clone(),
    });
    queue::reconcile_stored(queue, store, WORKERS, move |fhpa| {
        let state = state.clone();
        async move { state.reconcile(&fhpa).await }
    })
    .await;
}

/// One member's part of the workload.
struct MemberPart {
    cluster: String,
    replicas: i32,
    pods: Vec<PodSample>,
    /// None: that member's metrics could not be read (its pods count as
    /// pods without metrics).
    usage: Option<PodUsage>,
    /// The member's scale of the workload names no selector.
    no_selector: bool,
}

impl State {
    async fn reconcile(&self, fhpa: &FederatedHPA) -> Result<Next, Error> {
        let requeue = Some(SYNC_PERIOD);
        if fhpa.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let key = key_of(fhpa);
        if let Some(wait) = self.memory.wait(&key, fhpa.metadata.generation) {
            return Ok(Some(wait));
        }
        // What deleted FederatedHPAs left goes.
        if self.memory.len() > self.store.state().len() {
            let live = self.store.state().iter().map(|f| key_of(f)).collect();
            self.memory.retain(&live);
        }
        let ns = fhpa.namespace().unwrap_or_default();
        let spec = fhpa.spec.as_hpa();
        let target = &spec.scale_target_ref;
        let previous = fhpa.status.clone().unwrap_or_default();
        let mut status = HorizontalPodAutoscalerStatus {
            observed_generation: fhpa.metadata.generation,
            conditions: None,
            ..previous.clone()
        };
        let api_version = target.api_version.clone().unwrap_or_else(|| "v1".into());

        // The template's scale on the control plane: the current count.
        let template = match self
            .template_scale(&ns, &api_version, &target.kind, &target.name)
            .await
        {
            Ok(t) => t,
            Err((reason, message)) => {
                self.warn(fhpa, reason, &message).await;
                let condition = if reason == "FailedGetScale" {
                    flotilla_autoscaling::failed_get_scale(&message)
                } else {
                    flotilla_autoscaling::condition("AbleToScale", false, reason, message)
                };
                self.write_status(fhpa, status, vec![condition]).await?;
                return Ok(requeue);
            }
        };
        let (hub_api, current) = template;
        status.current_replicas = Some(current);

        // The members it runs in: the binding's Ready clusters.
        let clusters = match self.target_clusters(&ns, &target.kind, &target.name).await {
            Ok(c) => c,
            Err((reason, condition_reason, message)) => {
                self.warn(fhpa, reason, &message).await;
                let condition = flotilla_autoscaling::condition(
                    "AbleToScale",
                    false,
                    condition_reason,
                    message,
                );
                self.write_status(fhpa, status, vec![condition]).await?;
                return Ok(requeue);
            }
        };
        let parts = futures::future::join_all(clusters.iter().map(|c| {
            // A member that does not answer is left out, not waited for.
            tokio::time::timeout(
                MEMBER_TIMEOUT,
                self.member_part(c, &ns, &api_version, &target.kind, &target.name),
            )
        }))
        .await;
        let parts: Vec<MemberPart> = parts.into_iter().flatten().flatten().collect();
        let in_members: i64 = parts.iter().map(|p| i64::from(p.replicas)).sum();
        let in_members = i32::try_from(in_members).unwrap_or(i32::MAX);
        if in_members == 0 && current > 0 {
            let message = "failed to get replicas in any of clusters, possibly because all of clusters are not ready";
            self.warn(fhpa, "FailedGetScale", message).await;
            let condition = flotilla_autoscaling::failed_get_scale(message);
            self.write_status(fhpa, status, vec![condition]).await?;
            return Ok(requeue);
        }

        let mut decision = match flotilla_autoscaling::bounded(&spec, current) {
            Some(d) => d,
            None => {
                let calibration = f64::from(in_members) / f64::from(current.max(1));
                self.memory
                    .decide(&key, &spec, current, &observed(&parts), calibration)
            }
        };
        if let Some((reason, message)) = decision.warning.clone() {
            self.warn(fhpa, flotilla_autoscaling::event_reason(&reason), &message)
                .await;
        }
        if decision.current_metrics.is_some() {
            status.current_metrics = decision.current_metrics.take();
        }
        if let Some(desired) = decision.desired {
            status.desired_replicas = desired;
            if desired != current {
                self.rescale(fhpa, &hub_api, &key, current, &mut decision, &mut status)
                    .await;
            }
        }
        self.write_status(fhpa, status, decision.conditions).await?;
        Ok(requeue)
    }

    /// The template's `/scale` API and its replicas, or an Event reason and
    /// message.
    async fn template_scale(
        &self,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Result<(Api<DynamicObject>, i32), (&'static str, String)> {
        let (resource, _) = self
            .ctx
            .hub_kinds
            .resolve(api_version, kind)
            .await
            .map_err(|e| {
                (
                    "FailedGetScale",
                    format!(
                        "the server could not find the requested resource {kind}.{api_version}: {e}"
                    ),
                )
            })?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.ctx.hub.clone(), ns, &resource);
        match api.get_scale(name).await {
            Ok(scale) => {
                let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
                Ok((api, replicas))
            }
            Err(e) if is_not_found(&e) => Err((
                "FailedGetScaleTargetRef",
                format!("{kind} {ns}/{name} does not exist on the control plane: {e}"),
            )),
            Err(e) => Err(("FailedGetScale", e.to_string())),
        }
    }

    /// The Ready clusters the template's binding placed it on, or the
    /// Event reason, condition reason and message.
    async fn target_clusters(
        &self,
        ns: &str,
        kind: &str,
        name: &str,
    ) -> Result<Vec<String>, (&'static str, &'static str, String)> {
        let bindings: Api<Binding> = Api::namespaced_with(
            self.ctx.hub.clone(),
            ns,
            &binding_resource(Scope::Namespaced),
        );
        let binding_name = names::binding_name(kind, name);
        let binding = bindings.get(&binding_name).await.map_err(|e| {
            (
                "FailedGetBindings",
                "FailedGetBinding",
                format!(
                    "no binding of {kind} {ns}/{name} (is it propagated by a PropagationPolicy?): {e}"
                ),
            )
        })?;
        let clusters: Vec<String> = binding
            .spec
            .clusters
            .iter()
            .filter(|c| self.ctx.cluster(&c.name).is_some_and(|c| c.is_ready()))
            .map(|c| c.name.clone())
            .collect();
        if clusters.is_empty() {
            return Err((
                "FailedGetTargetClusters",
                "FailedGetTargetClusters",
                format!("binding {ns}/{binding_name} has no schedulable clusters"),
            ));
        }
        Ok(clusters)
    }

    /// The workload's replicas, pods and usage in one member; `None` when
    /// the member cannot be read (logged, as Karmada skips it).
    async fn member_part(
        &self,
        cluster: &str,
        ns: &str,
        api_version: &str,
        kind: &str,
        name: &str,
    ) -> Option<MemberPart> {
        let found = self.ctx.cluster(cluster)?;
        if found.spec.sync_mode == sync_mode::PULL {
            // The control plane holds no credentials for a Pull member
            // (its agent reaches out); Karmada cannot read it either.
            debug!(
                cluster,
                "a Pull member's pods are not read for a FederatedHPA"
            );
            return None;
        }
        let member = match self.ctx.members.get(&found).await {
            Ok(m) => m,
            Err(error) => {
                warn!(%error, cluster, "cannot reach the member for a FederatedHPA");
                return None;
            }
        };
        let read = async {
            let (resource, _) = member.kinds.resolve(api_version, kind).await?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(member.client.clone(), ns, &resource);
            let scale = api.get_scale(name).await?;
            Ok::<_, kube::Error>(scale)
        };
        let scale = match read.await {
            Ok(s) => s,
            Err(error) => {
                debug!(%error, cluster, "no scale of the FederatedHPA's target in the member");
                return None;
            }
        };
        let replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let selector = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        if selector.is_empty() {
            return Some(MemberPart {
                cluster: cluster.to_string(),
                replicas,
                pods: Vec::new(),
                usage: None,
                no_selector: true,
            });
        }
        let params = ListParams::default().labels(&selector);
        let pods: Api<Pod> = Api::namespaced(member.client.clone(), ns);
        let pods = match pods.list(&params).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|p| PodSample::from_pod(p, format!("{cluster}/{}", p.name_any())))
                .collect(),
            Err(error) => {
                warn!(%error, cluster, "cannot list the FederatedHPA's pods in the member");
                return None;
            }
        };
        let metrics = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
            "pods",
        );
        let metrics: Api<DynamicObject> = Api::namespaced_with(member.client.clone(), ns, &metrics);
        let usage = match metrics.list(&params).await {
            Ok(list) => Some(
                list.items
                    .into_iter()
                    .map(|m| {
                        let usage = container_usage(m.data.get("containers"));
                        (format!("{cluster}/{}", m.name_any()), usage)
                    })
                    .collect(),
            ),
            Err(error) => {
                debug!(%error, cluster, "no resource metrics in the member");
                None
            }
        };
        Some(MemberPart {
            cluster: cluster.to_string(),
            replicas,
            pods,
            usage,
            no_selector: false,
        })
    }

    /// Writes the decided count to the template's `/scale`; the outcome
    /// goes to the Events, the decision's conditions and the status.
    async fn rescale(
        &self,
        fhpa: &FederatedHPA,
        api: &Api<DynamicObject>,
        key: &str,
        current: i32,
        decision: &mut Decision,
        status: &mut HorizontalPodAutoscalerStatus,
    ) {
        let desired = decision.desired.unwrap_or(current);
        let name = &fhpa.spec.scale_target_ref.name;
        let patch = json!({"spec": {"replicas": desired}});
        match api
            .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.memory.scaled(key, current, desired);
                let message = format!("New size: {desired}; reason: {}", decision.reason);
                self.event(fhpa, ("Normal", "SuccessfulRescale", &message))
                    .await;
                flotilla_autoscaling::set_condition(
                    &mut decision.conditions,
                    flotilla_autoscaling::succeeded_rescale(desired),
                );
                status.last_scale_time = Some(Time(Timestamp::now()));
            }
            Err(e) => {
                let message = format!(
                    "New size: {desired}; reason: {}; error: {e}",
                    decision.reason
                );
                self.warn(fhpa, "FailedRescale", &message).await;
                flotilla_autoscaling::set_condition(
                    &mut decision.conditions,
                    flotilla_autoscaling::failed_update_scale(&e.to_string()),
                );
            }
        }
    }

    async fn warn(&self, fhpa: &FederatedHPA, reason: &str, message: &str) {
        self.event(fhpa, ("Warning", reason, message)).await;
    }

    async fn event(&self, fhpa: &FederatedHPA, what: (&str, &str, &str)) {
        events::record(&self.ctx.hub, fhpa.object_ref(&()), COMPONENT, what).await;
    }

    async fn write_status(
        &self,
        fhpa: &FederatedHPA,
        mut status: HorizontalPodAutoscalerStatus,
        conditions: Vec<HorizontalPodAutoscalerCondition>,
    ) -> Result<(), Error> {
        let previous = fhpa.status.clone().unwrap_or_default();
        let before = previous.conditions.clone().unwrap_or_default();
        status.conditions = Some(flotilla_autoscaling::merge_conditions(&before, conditions));
        if fhpa.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<FederatedHPA> =
            Api::namespaced(self.ctx.hub.clone(), &fhpa.namespace().unwrap_or_default());
        match api
            .patch_status(
                &fhpa.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn key_of(f: &FederatedHPA) -> String {
    flotilla_autoscaling::memory_key(&f.metadata)
}

/// The members' pods and their usage as one fleet, or why there is no
/// usage at all.
fn observed(parts: &[MemberPart]) -> Result<(Vec<PodSample>, PodUsage), Failure> {
    if !parts.is_empty() && parts.iter().all(|p| p.no_selector) {
        return Err(flotilla_autoscaling::selector_required());
    }
    if parts.iter().all(|p| p.usage.is_none()) {
        let clusters: Vec<&str> = parts.iter().map(|p| p.cluster.as_str()).collect();
        return Err(flotilla_autoscaling::metrics_api_failure(format!(
            "no member serves metrics.k8s.io for these pods (clusters: {})",
            clusters.join(", ")
        )));
    }
    let pods = parts.iter().flat_map(|p| p.pods.iter().cloned()).collect();
    let usage = parts
        .iter()
        .flat_map(|p| p.usage.iter().flatten())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok((pods, usage))
}
