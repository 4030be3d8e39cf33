//! Simulated kubelets, the pod side: a bound pod goes Pending with its
//! containers being created, then Running and Ready after the startup
//! delay with a pod IP from its node's block; pods that run to completion
//! (restartPolicy Never or OnFailure) succeed or fail after their run
//! duration. Readiness follows the node's health and the injected faults.
//!
//! Annotations on a pod (or its template) tune the simulation:
//! `simulation.flotilla.io/run-duration` (e.g. `30s`) and
//! `simulation.flotilla.io/exit-code` (non-zero makes the pod fail).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use crate::pod::{Pod, PodStatus};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_stream::wrappers::WatchStream;

use crate::controllers::status;
use crate::informer::Change;
use crate::podutil;
use crate::sim::{Cluster, Informers, Result, TaskBox, boxed, run_controller};

pub const RUN_DURATION: &str = "simulation.flotilla.io/run-duration";
pub const EXIT_CODE: &str = "simulation.flotilla.io/exit-code";

/// Pod IPs handed out per node (node → pod key → IP).
#[derive(Default)]
struct IpPool {
    by_node: HashMap<String, HashMap<String, Ipv4Addr>>,
}

struct Kubelet {
    cluster: Arc<Cluster>,
    ips: Mutex<IpPool>,
    /// When this process started each pod's containers: startTime has
    /// whole-second precision, too coarse for sub-second startup delays.
    started: Mutex<HashMap<String, std::time::Instant>>,
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let kubelet = Arc::new(Kubelet {
        cluster: cluster.clone(),
        ips: Mutex::default(),
        started: Mutex::default(),
    });
    let k = kubelet.clone();
    inf.pods.on_change(move |change| {
        let pod = change.object();
        let mut pool = k.ips.lock();
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
                    pool.by_node
                        .entry(node.to_string())
                        .or_default()
                        .insert(key(p), ip);
                }
            }
            Change::Deleted(p) => {
                if let Some(m) = pool.by_node.get_mut(node) {
                    m.remove(&key(p));
                }
                k.started.lock().remove(&key(p));
            }
        }
    });
    let bound = inf
        .pods
        .own_triggers(|p| node_of(p).is_some() && podutil::is_active(p));
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
    run_controller(
        "kubelet",
        cluster.pods.clone(),
        vec![boxed(bound), boxed(on_fault)],
        cluster,
        8,
        move |pod, _| {
            let k = kubelet.clone();
            async move { k.sync(pod).await }
        },
    )
}

fn annotation<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(name)
        .map(String::as_str)
}

impl Kubelet {
    /// How long the pod's containers run before exiting, if they do.
    fn run_duration(&self, pod: &Pod) -> Option<Duration> {
        let policy = pod
            .spec
            .as_ref()?
            .restart_policy
            .as_deref()
            .unwrap_or("Always");
        if policy == "Always" {
            return None;
        }
        Some(
            annotation(pod, RUN_DURATION)
                .and_then(|d| humantime::parse_duration(d).ok())
                .unwrap_or(self.cluster.config.job_duration),
        )
    }

    fn allocate_ip(&self, pod: &Pod, node: &str) -> Option<Ipv4Addr> {
        let i = self.cluster.config.node_index(node)?;
        let block = self.cluster.config.node_pod_cidr(i)?;
        let mut pool = self.ips.lock();
        let used = pool.by_node.entry(node.to_string()).or_default();
        if let Some(ip) = used.get(&key(pod)) {
            return Some(*ip);
        }
        let taken: HashSet<Ipv4Addr> = used.values().copied().collect();
        // .1 is the node's gateway.
        let ip = block.hosts().skip(1).find(|ip| !taken.contains(ip))?;
        used.insert(key(pod), ip);
        Some(ip)
    }

    async fn sync(&self, pod: Arc<Pod>) -> Result<Action> {
        let Some(node) = node_of(&pod).map(str::to_string) else {
            return Ok(Action::await_change());
        };
        if !podutil::is_active(&pod) {
            return Ok(Action::await_change());
        }
        if self.cluster.config.node_index(&node).is_none() {
            return Ok(Action::await_change());
        }
        let node_ready = !self.cluster.faults.node_not_ready(&node);
        let startup = self.cluster.config.pod_startup;
        let status = pod.status.clone().unwrap_or_default();
        let started = status.start_time.clone();
        let phase = podutil::phase(&pod).to_string();
        let (next, wait) = match (&started, phase.as_str()) {
            (None, _) if !node_ready => return Ok(Action::requeue(Duration::from_secs(2))),
            (None, _) => {
                self.started
                    .lock()
                    .insert(key(&pod), std::time::Instant::now());
                (self.pending(&pod, &node), Some(startup))
            }
            (Some(t), "Pending") => {
                let elapsed = match self.started.lock().get(&key(&pod)) {
                    Some(at) => at.elapsed(),
                    None => podutil::since(t),
                };
                if elapsed < startup {
                    return Ok(Action::requeue(startup - elapsed));
                }
                if !node_ready {
                    return Ok(Action::requeue(Duration::from_secs(2)));
                }
                self.started.lock().remove(&key(&pod));
                (
                    self.running(&pod, &node, &podutil::now()),
                    self.run_duration(&pod),
                )
            }
            (Some(_), _) => {
                let running_since = container_started(&pod).unwrap_or_else(podutil::now);
                if let Some(d) = self.run_duration(&pod) {
                    let ran = podutil::since(&running_since);
                    if ran >= d {
                        (self.finished(&pod, &running_since), None)
                    } else {
                        (self.running(&pod, &node, &running_since), Some(d - ran))
                    }
                } else {
                    (self.running(&pod, &node, &running_since), None)
                }
            }
        };
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
        Ok(match wait {
            Some(d) => Action::requeue(d.max(Duration::from_millis(10))),
            None => Action::await_change(),
        })
    }

    fn host_ip(&self, node: &str) -> String {
        self.cluster
            .config
            .node_index(node)
            .and_then(|i| self.cluster.config.node_ip(i))
            .map(|ip| ip.to_string())
            .unwrap_or_default()
    }

    fn pending(&self, pod: &Pod, node: &str) -> Value {
        let now = podutil::now();
        let containers: Vec<Value> = containers(pod)
            .map(|(name, image)| {
                json!({"name": name, "image": image, "imageID": "", "ready": false, "started": false,
                       "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}})
            })
            .collect();
        let host_ip = self.host_ip(node);
        json!({
            "phase": "Pending",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": now,
            "qosClass": qos_class(pod),
            "conditions": conditions(pod, &[
                ("PodReadyToStartContainers", "False", ""),
                ("Initialized", "True", ""),
                ("Ready", "False", "ContainersNotReady"),
                ("ContainersReady", "False", "ContainersNotReady"),
                ("PodScheduled", "True", ""),
            ]),
            "containerStatuses": containers,
        })
    }

    fn running(&self, pod: &Pod, node: &str, since: &Time) -> Value {
        let ready = !self.cluster.faults.node_not_ready(node)
            && !self
                .cluster
                .faults
                .pod_unready(&pod.namespace().unwrap_or_default(), &labels_json(pod));
        let ip = self
            .allocate_ip(pod, node)
            .map(|ip| ip.to_string())
            .unwrap_or_default();
        let host_ip = self.host_ip(node);
        let containers: Vec<Value> = containers(pod)
            .map(|(name, image)| {
                json!({"name": name, "image": image, "imageID": format!("flotilla://{image}"),
                       "containerID": format!("flotilla://{}", container_id(pod, &name)),
                       "ready": ready, "started": true, "restartCount": 0,
                       "state": {"running": {"startedAt": since}}})
            })
            .collect();
        let (r, reason) = if ready {
            ("True", "")
        } else {
            ("False", "ContainersNotReady")
        };
        json!({
            "phase": "Running",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": pod.status.as_ref().and_then(|s| s.start_time.clone()),
            "qosClass": qos_class(pod),
            "conditions": conditions(pod, &[
                ("PodReadyToStartContainers", "True", ""),
                ("Initialized", "True", ""),
                ("Ready", r, reason),
                ("ContainersReady", r, reason),
                ("PodScheduled", "True", ""),
            ]),
            "containerStatuses": containers,
        })
    }

    fn finished(&self, pod: &Pod, since: &Time) -> Value {
        let code: i32 = annotation(pod, EXIT_CODE)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let (phase, reason) = if code == 0 {
            ("Succeeded", "Completed")
        } else {
            ("Failed", "Error")
        };
        let now = podutil::now();
        let containers: Vec<Value> = containers(pod)
            .map(|(name, image)| {
                json!({"name": name, "image": image, "imageID": format!("flotilla://{image}"),
                       "containerID": format!("flotilla://{}", container_id(pod, &name)),
                       "ready": false, "started": false, "restartCount": 0,
                       "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": since, "finishedAt": now}}})
            })
            .collect();
        // A merge patch: the IPs and startTime stay as they are.
        let status = pod.status.as_ref();
        json!({
            "phase": phase,
            "hostIP": status.and_then(|s| s.host_ip.clone()),
            "podIP": status.and_then(|s| s.pod_ip.clone()),
            "startTime": status.and_then(|s| s.start_time.clone()),
            "qosClass": qos_class(pod),
            "conditions": conditions(pod, &[
                ("PodReadyToStartContainers", "False", ""),
                ("Initialized", "True", ""),
                ("Ready", "False", "PodCompleted"),
                ("ContainersReady", "False", "PodCompleted"),
                ("PodScheduled", "True", ""),
            ]),
            "containerStatuses": containers,
        })
    }
}

fn containers(pod: &Pod) -> impl Iterator<Item = (String, String)> + '_ {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
}

fn container_id(pod: &Pod, container: &str) -> String {
    format!("{}-{container}", pod.uid().unwrap_or_default())
}

fn container_started(pod: &Pod) -> Option<Time> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
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
