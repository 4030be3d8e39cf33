//! The kubelets, the pod side: each bound pod's sandbox is asked of the
//! container runtime (`runtime/`), whose state this maps onto the
//! PodStatus a kubelet writes: Pending while its containers are created,
//! Running (with a pod IP from its node's block, [`addressing`])
//! until they exit, then Succeeded or Failed by their exit code.
//! Readiness follows the node's health and the injected faults.

pub mod addressing;
pub mod config;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crate::pod::{Pod, PodStatus};
use futures::StreamExt;
use ipnet::Ipv4Net;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio_stream::wrappers::{UnboundedReceiverStream, WatchStream};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::status;
use crate::informer::Change;
use crate::podutil;
use crate::runtime::{
    ContainerRun, ContainerState, PodPhase, PodRun, Runtime, RuntimeHandle, Sandbox, key,
};
use addressing::PodAddresses;

pub use crate::runtime::sim::{EXIT_CODE, RUN_DURATION};

struct Kubelet {
    cluster: Arc<Cluster>,
    runtime: Arc<dyn Runtime>,
    addresses: PodAddresses,
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers, runtime: RuntimeHandle) -> TaskBox {
    let kubelet = Arc::new(Kubelet {
        runtime: runtime.runtime,
        cluster: cluster.clone(),
        addresses: PodAddresses::default(),
    });
    let k = kubelet.clone();
    inf.pods.on_change(move |change| {
        let pod = change.object();
        let Some(node) = node_of(pod) else {
            return;
        };
        match change {
            Change::Applied(p) => {
                let ip = p
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .and_then(|ip| ip.parse().ok());
                if let Some(ip) = ip {
                    k.addresses.observe(node, &key(p), ip);
                }
            }
            Change::Deleted(p) => {
                // The address is free once nothing of the pod runs.
                let (k, node, pod_key) = (k.clone(), node.to_string(), key(p));
                tokio::spawn(async move {
                    k.runtime.remove(&pod_key, None).await;
                    k.addresses.release(&node, &pod_key);
                });
            }
        }
    });
    let bound = inf.pods.own_triggers(|p| {
        node_of(p).is_some() && (podutil::is_active(p) || p.metadata.deletion_timestamp.is_some())
    });
    // Faults change readiness: revisit every pod when they do.
    let store = cluster.pods.clone();
    let on_fault = WatchStream::from_changes(cluster.faults.subscribe()).flat_map(move |_| {
        let refs: Vec<ObjectRef<Pod>> = store
            .state()
            .iter()
            .filter(|p| node_of(p).is_some() && podutil::is_active(p))
            .map(|p| ObjectRef::from_obj(p.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    // The runtime's events: a process exited, a probe changed.
    let on_event = UnboundedReceiverStream::new(runtime.events).filter_map(|pod_key| async move {
        let (ns, name) = pod_key.split_once('/')?;
        Some(ObjectRef::<Pod>::new(name).within(ns))
    });
    run_controller(
        "kubelet",
        cluster.pods.clone(),
        vec![boxed(bound), boxed(on_fault), boxed(on_event)],
        cluster,
        8,
        move |pod, _| {
            let k = kubelet.clone();
            async move { k.sync(pod).await }
        },
    )
}

impl Kubelet {
    /// The pod's address on `node`, with the node's block.
    fn address(&self, pod: &Pod, node: &str) -> Option<(Ipv4Addr, Ipv4Net)> {
        let i = self.cluster.roster.index(node)?;
        let block = self.cluster.config.node_pod_cidr(i)?;
        Some((self.addresses.allocate(node, &key(pod), block)?, block))
    }

    async fn sync(&self, pod: Arc<Pod>) -> Result<Action> {
        let Some(node) = node_of(&pod).map(str::to_string) else {
            return Ok(Action::await_change());
        };
        // Another kubelet's node (a peering's virtual node): its pods are
        // run, and finally deleted, by that kubelet.
        if self.cluster.roster.index(&node).is_none() {
            return Ok(Action::await_change());
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(&pod).await;
        }
        if !podutil::is_active(&pod) {
            return Ok(Action::await_change());
        }
        // A node that is not ready starts no containers.
        let node_ready = !self.cluster.faults.node_not_ready(&node);
        let starting = matches!(podutil::phase(&pod), "Pending" | "");
        if starting && !node_ready {
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        let sandbox = Sandbox {
            ip: self.address(&pod, &node),
            node,
        };
        let run = self.runtime.sync(&pod, &sandbox).await;
        let next = self.status(&pod, &sandbox, &run);
        // Compare as the view sees them: every status the kubelet writes
        // differs from the last one in a field the view keeps.
        let desired: PodStatus = serde_json::from_value(next.clone()).unwrap_or_default();
        if pod.status.as_ref() != Some(&desired) {
            let api: Api<Pod> = Api::namespaced(
                self.cluster.clients.kubelet.clone(),
                &pod.namespace().unwrap_or_default(),
            );
            if !status::write(&api, &pod.name_any(), &json!({"status": next})).await? {
                return Ok(Action::await_change());
            }
        }
        Ok(match run.recheck {
            Some(d) => Action::requeue(d.max(Duration::from_millis(10))),
            None => Action::await_change(),
        })
    }

    /// A pod being deleted: its containers are stopped within its grace
    /// period, then the kubelet deletes it for good, as upstream's does.
    async fn terminate(&self, pod: &Pod) -> Result<Action> {
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64));
        self.runtime.remove(&key(pod), grace).await;
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(
            self.cluster.clients.kubelet.clone(),
            &pod.namespace().unwrap_or_default(),
        );
        let params = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: pod.uid().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => {}
            // Gone already, or a new pod of the same name: nothing to do.
            Err(e) if crate::cluster::is_status(&e, 404) || crate::cluster::is_status(&e, 409) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Action::await_change())
    }

    fn host_ip(&self, node: &str) -> Option<String> {
        self.cluster
            .roster
            .index(node)
            .and_then(|i| self.cluster.config.node_ip(i))
            .map(|ip| ip.to_string())
    }

    /// The PodStatus a kubelet writes for what the runtime reports.
    fn status(&self, pod: &Pod, sandbox: &Sandbox, run: &PodRun) -> Value {
        let recorded = pod.status.as_ref();
        let finished = matches!(run.phase, PodPhase::Succeeded | PodPhase::Failed);
        // Faults make running containers unready.
        let healthy = !self.cluster.faults.node_not_ready(&sandbox.node)
            && !self
                .cluster
                .faults
                .pod_unready(&pod.namespace().unwrap_or_default(), &labels_json(pod));
        let ready = |c: &ContainerRun| {
            healthy && c.ready && matches!(c.state, ContainerState::Running { .. })
        };
        let all_ready = !run.containers.is_empty() && run.containers.iter().all(ready);
        let images: Vec<(String, String)> =
            containers(pod).chain(ephemeral_containers(pod)).collect();
        let image_of = |name: &str| {
            images
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, i)| i.clone())
                .unwrap_or_default()
        };
        let container_json = |c: &ContainerRun| {
            let image = image_of(&c.name);
            let mut v = json!({
                "name": c.name, "image": image,
                "imageID": if c.id.is_some() { format!("flotilla://{image}") } else { String::new() },
                "ready": ready(c), "started": c.started && matches!(c.state, ContainerState::Running { .. }),
                "restartCount": c.restarts, "state": state_json(&c.state),
            });
            if let Some(id) = &c.id {
                v["containerID"] = json!(id);
            }
            if let Some(last) = &c.last {
                v["lastState"] = state_json(last);
            }
            v
        };
        let pod_ip = match (&sandbox.ip, run.sandbox_ready) {
            (Some((ip, _)), true) => Some(ip.to_string()),
            _ => recorded.and_then(|s| s.pod_ip.clone()),
        };
        let host_ip = self.host_ip(&sandbox.node);
        let (ready_status, ready_reason) = match (finished, all_ready) {
            (true, _) => ("False", "PodCompleted"),
            (false, true) => ("True", ""),
            (false, false) => ("False", "ContainersNotReady"),
        };
        let tf = |b: bool| if b { "True" } else { "False" };
        let mut status = json!({
            "phase": match run.phase {
                PodPhase::Pending => "Pending",
                PodPhase::Running => "Running",
                PodPhase::Succeeded => "Succeeded",
                PodPhase::Failed => "Failed",
            },
            "hostIP": host_ip,
            "podIP": pod_ip,
            "startTime": recorded.and_then(|s| s.start_time.clone()).unwrap_or_else(podutil::now),
            "qosClass": qos_class(pod),
            "conditions": conditions(pod, &[
                ("PodReadyToStartContainers", tf(run.sandbox_ready), ""),
                ("Initialized", tf(run.initialized), if run.initialized { "" } else { "ContainersNotInitialized" }),
                ("Ready", ready_status, ready_reason),
                ("ContainersReady", ready_status, ready_reason),
                ("PodScheduled", "True", ""),
            ]),
            "containerStatuses": run.containers.iter().map(container_json).collect::<Vec<_>>(),
        });
        if let Some(ip) = &host_ip {
            status["hostIPs"] = json!([{ "ip": ip }]);
        }
        if let Some(ip) = &pod_ip {
            status["podIPs"] = json!([{ "ip": ip }]);
        }
        for (field, list) in [
            ("initContainerStatuses", &run.init_containers),
            ("ephemeralContainerStatuses", &run.ephemeral_containers),
        ] {
            if !list.is_empty() {
                status[field] = json!(list.iter().map(container_json).collect::<Vec<_>>());
            }
        }
        status
    }
}

fn state_json(state: &ContainerState) -> Value {
    match state {
        ContainerState::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        ContainerState::Running { since } => json!({"running": {"startedAt": since}}),
        ContainerState::Terminated {
            code,
            reason,
            message,
            started,
            finished,
        } => json!({"terminated": {"exitCode": code, "reason": reason, "message": message,
                                   "startedAt": started, "finishedAt": finished}}),
    }
}

/// The pod's containers: name and image.
fn containers(pod: &Pod) -> impl Iterator<Item = (String, String)> + '_ {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
}

/// The ephemeral containers `kubectl debug` added: name and image.
fn ephemeral_containers(pod: &Pod) -> impl Iterator<Item = (String, String)> + '_ {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
}

fn labels_json(pod: &Pod) -> serde_json::Map<String, Value> {
    pod.labels()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect()
}

/// Conditions in upstream's order, keeping each one's transition time
/// while its status holds.
fn conditions(pod: &Pod, wanted: &[(&str, &str, &str)]) -> Value {
    let now = podutil::now();
    let list: Vec<Value> = wanted
        .iter()
        .map(|(kind, status, reason)| {
            let since = podutil::condition(pod, kind)
                .filter(|c| c.status == *status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            let mut c = json!({"type": kind, "status": status, "lastTransitionTime": since});
            if !reason.is_empty() {
                c["reason"] = json!(reason);
                if *reason == "ContainersNotReady" {
                    let names: Vec<String> = containers(pod).map(|(n, _)| n).collect();
                    c["message"] = json!(format!(
                        "containers with unready status: [{}]",
                        names.join(" ")
                    ));
                }
            }
            c
        })
        .collect();
    json!(list)
}

fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else {
        return "BestEffort";
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in &spec.containers {
        let r = &c.resources;
        any |= r.any;
        // A request left out defaults to the limit.
        let cpu = r.cpu_limit.is_some() && r.cpu_request.is_none_or(|q| Some(q) == r.cpu_limit);
        let memory =
            r.memory_limit.is_some() && r.memory_request.is_none_or(|q| Some(q) == r.memory_limit);
        guaranteed &= cpu && memory;
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": resources}]},
        }))
        .unwrap()
    }

    #[test]
    fn qos_class_follows_requests_and_limits() {
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(qos_class(&pod(json!({"limits": both}))), "Guaranteed");
        // Equal quantities spelled differently are equal.
        assert_eq!(
            qos_class(&pod(json!({"limits": both, "requests": {"cpu": "1000m"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1"}}))),
            "Burstable"
        );
    }
}
