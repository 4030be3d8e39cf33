//! The scheduler: binds each pending pod of `default-scheduler` to the
//! feasible node with the most room left (least-allocated scoring), through
//! the `pods/binding` subresource; a pod that fits nowhere gets
//! PodScheduled=False, reason Unschedulable, with upstream's summary.
//! Both are recorded as upstream's Events (Scheduled, FailedScheduling).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::pod::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tracing::debug;

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, is_status, run_controller};
use crate::controllers::{status, volumes};
use crate::events::EventRecorder;
use crate::informer::Change;
use crate::placement::{self, Reject};
use crate::podutil::{self, Requests};
use crate::quantity;

/// How often a pod that fits nowhere is tried again.
const RETRY_UNSCHEDULABLE: Duration = Duration::from_secs(5);
/// How often a pod whose volumes are being provisioned looks again.
const PROVISIONING_POLL: Duration = Duration::from_millis(200);

/// What a pod's claims ask of its placement.
enum Claims {
    /// Not now: said why, or waiting for a volume.
    Hold(Action),
    Place(ClaimNeeds),
}

#[derive(Default)]
struct ClaimNeeds {
    /// The bound volumes' node affinity: every one must match.
    node_affinity: Vec<k8s_openapi::api::core::v1::NodeSelector>,
    /// Claims waiting for their first consumer's node.
    to_select: Vec<String>,
}

/// What is placed on each node: kept from pod events, plus bindings this
/// scheduler made that the cache has not seen yet.
#[derive(Default)]
struct Accounting {
    by_pod: HashMap<String, (String, Requests)>,
    by_node: HashMap<String, (Requests, i64)>,
}

impl Accounting {
    fn set(&mut self, pod: String, placed: Option<(String, Requests)>) {
        if let Some((node, r)) = self.by_pod.remove(&pod)
            && let Some(u) = self.by_node.get_mut(&node)
        {
            u.0.cpu_millis -= r.cpu_millis;
            u.0.memory -= r.memory;
            u.1 -= 1;
        }
        if let Some((node, r)) = placed {
            let u = self.by_node.entry(node.clone()).or_default();
            u.0.cpu_millis += r.cpu_millis;
            u.0.memory += r.memory;
            u.1 += 1;
            self.by_pod.insert(pod, (node, r));
        }
    }
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

struct Scheduler {
    cluster: Arc<Cluster>,
    accounting: Mutex<Accounting>,
    events: EventRecorder,
}

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let scheduler = Arc::new(Scheduler {
        cluster: cluster.clone(),
        accounting: Mutex::default(),
        events: cluster.recorder("default-scheduler"),
    });
    let s = scheduler.clone();
    inf.pods.on_change(move |change| {
        let pod = change.object();
        let placed = match change {
            Change::Applied(p) if podutil::is_active(p) => {
                p.spec.as_ref().and_then(|s| s.node_name.clone()).map(|n| {
                    (
                        n,
                        podutil::requests(p.spec.as_ref().map_or(&Default::default(), |s| s)),
                    )
                })
            }
            _ => None,
        };
        s.accounting.lock().set(key(pod), placed);
    });
    let triggers = inf.pods.own_triggers(needs_scheduling);
    run_controller(
        "scheduler",
        cluster.pods.clone(),
        vec![boxed(triggers)],
        cluster,
        1,
        move |pod, _| {
            let s = scheduler.clone();
            async move { s.schedule(pod).await }
        },
    )
}

fn needs_scheduling(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    spec.node_name.as_deref().is_none_or(str::is_empty)
        && spec
            .scheduler_name
            .as_deref()
            .is_none_or(|s| s == "default-scheduler")
        && podutil::is_active(pod)
}

fn allocatable(node: &Node) -> (i64, i64, i64) {
    let a = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let get = |k: &str| a.and_then(|m| m.get(k)).map(|q| q.0.as_str());
    (
        get("cpu").and_then(quantity::millicores).unwrap_or(0),
        get("memory").and_then(quantity::units).unwrap_or(0),
        get("pods").and_then(quantity::units).unwrap_or(0),
    )
}

impl Scheduler {
    /// Says why `pod` fits nowhere: PodScheduled=False and an Event, once
    /// per message; tries again after a while.
    async fn unschedulable(&self, pod: &Pod, message: String) -> Result<Action> {
        let current = podutil::condition(pod, "PodScheduled");
        if current.is_none_or(|c| c.status != "False" || c.message.as_deref() != Some(&message)) {
            let pods: Api<Pod> = Api::namespaced(
                self.cluster.clients.scheduler.clone(),
                &pod.namespace().unwrap_or_default(),
            );
            let patch = json!({"status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastProbeTime": null,
                "lastTransitionTime": podutil::now(),
            }]}});
            if !status::write(&pods, &pod.name_any(), &patch).await? {
                return Ok(Action::await_change());
            }
            self.events
                .emit(&pod.object_ref(&()), "FailedScheduling", message);
        }
        Ok(Action::requeue(RETRY_UNSCHEDULABLE))
    }

    /// What the claims `pod` names ask of its placement. A missing one,
    /// or an unbound one this member will not provision, says so and
    /// holds it; one being provisioned is waited for.
    async fn claims_of(&self, pod: &Pod) -> Result<Claims> {
        let ns = pod.namespace().unwrap_or_default();
        let nodes = self.cluster.nodes.state().len();
        let mut claims = ClaimNeeds::default();
        for name in pod.spec.iter().flat_map(|s| s.claims()) {
            let claim = self
                .cluster
                .claims
                .get(&kube::runtime::reflector::ObjectRef::new(name).within(&ns));
            let Some(claim) = claim else {
                let message = format!("persistentvolumeclaim \"{name}\" not found");
                return self.unschedulable(pod, message).await.map(Claims::Hold);
            };
            let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            if bound {
                let volume = claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .and_then(|v| {
                        self.cluster
                            .volumes
                            .get(&kube::runtime::reflector::ObjectRef::new(v))
                    });
                if let Some(affinity) = volume
                    .as_ref()
                    .and_then(|v| v.spec.as_ref()?.node_affinity.as_ref()?.required.clone())
                {
                    claims.node_affinity.push(affinity);
                }
                continue;
            }
            let class = claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default();
            let classes: Api<StorageClass> = Api::all(self.cluster.clients.scheduler.clone());
            let here = if class.is_empty() {
                None
            } else {
                classes
                    .get_opt(&class)
                    .await?
                    .filter(|c| c.provisioner == volumes::PROVISIONER)
            };
            match here {
                // Waits for its first consumer: this pod's node, once chosen.
                Some(c)
                    if c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                        && !claim.annotations().contains_key(volumes::SELECTED_NODE) =>
                {
                    claims.to_select.push(claim.name_any());
                }
                // Being provisioned: the pod is bound once its volume is.
                Some(_) => return Ok(Claims::Hold(Action::requeue(PROVISIONING_POLL))),
                None => {
                    let message = format!(
                        "0/{nodes} nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
                    );
                    return self.unschedulable(pod, message).await.map(Claims::Hold);
                }
            }
        }
        Ok(Claims::Place(claims))
    }

    /// Tells the provisioner which node the claims are for (upstream's
    /// `volume.kubernetes.io/selected-node`); the pod is bound there once
    /// its volumes are.
    async fn select_node(&self, pod: &Pod, claims: &[String], node: &str) -> Result<Action> {
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(self.cluster.clients.scheduler.clone(), &ns);
        let patch = json!({"metadata": {"annotations": {volumes::SELECTED_NODE: node}}});
        for claim in claims {
            match api
                .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        debug!(pod = %pod.name_any(), %node, "volumes to be provisioned on the chosen node");
        Ok(Action::requeue(PROVISIONING_POLL))
    }

    async fn schedule(&self, pod: Arc<Pod>) -> Result<Action> {
        if !needs_scheduling(&pod) {
            return Ok(Action::await_change());
        }
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(Action::await_change());
        };
        let claims = match self.claims_of(&pod).await? {
            Claims::Hold(action) => return Ok(action),
            Claims::Place(needs) => needs,
        };
        let want = podutil::requests(spec);
        let mut nodes = self.cluster.nodes.state();
        nodes.sort_by_key(|n| n.name_any());
        let mut rejects = Vec::new();
        let mut best: Option<(f64, String)> = None;
        {
            let acc = self.accounting.lock();
            for node in &nodes {
                if let Err(r) = placement::admits(node, spec) {
                    rejects.push(r);
                    continue;
                }
                if !claims
                    .node_affinity
                    .iter()
                    .all(|a| placement::selector_matches(node, a))
                {
                    rejects.push(Reject::VolumeNodeAffinity);
                    continue;
                }
                let (cpu, mem, max_pods) = allocatable(node);
                let (used, count) = acc
                    .by_node
                    .get(&node.name_any())
                    .copied()
                    .unwrap_or_default();
                if count + 1 > max_pods {
                    rejects.push(Reject::TooManyPods);
                    continue;
                }
                if used.cpu_millis + want.cpu_millis > cpu {
                    rejects.push(Reject::InsufficientCpu);
                    continue;
                }
                if used.memory + want.memory > mem {
                    rejects.push(Reject::InsufficientMemory);
                    continue;
                }
                // Least allocated, with the pod count as a tiebreaker so
                // pods without requests spread too.
                let free = |used: i64, cap: i64| {
                    if cap > 0 {
                        (cap - used) as f64 / cap as f64
                    } else {
                        0.0
                    }
                };
                let score = free(used.cpu_millis + want.cpu_millis, cpu)
                    + free(used.memory + want.memory, mem)
                    + free(count + 1, max_pods);
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    best = Some((score, node.name_any()));
                }
            }
        }
        let ns = pod.namespace().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.cluster.clients.scheduler.clone(), &ns);
        let Some((_, node)) = best else {
            let message = if nodes.is_empty() {
                "no nodes available to schedule pods".to_string()
            } else {
                placement::unschedulable_message(nodes.len(), &rejects)
            };
            return self.unschedulable(&pod, message).await;
        };
        if !claims.to_select.is_empty() {
            return self.select_node(&pod, &claims.to_select, &node).await;
        }
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name_any(), "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        match pods
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &pod.name_any(),
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {
                debug!(pod = %pod.name_any(), %node, "bound");
                self.events.emit(
                    &pod.object_ref(&()),
                    "Scheduled",
                    format!("Successfully assigned {ns}/{} to {node}", pod.name_any()),
                );
                self.accounting.lock().set(key(&pod), Some((node, want)));
                Ok(Action::await_change())
            }
            // Already bound or gone: nothing left to do.
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(Action::await_change()),
            Err(e) => Err(e.into()),
        }
    }
}
