//! Simulated kubelets' node side and the node lifecycle controller:
//! registers the nodes, renews their Leases in kube-node-lease, reports
//! their status, and for a node made NotReady adds upstream's not-ready
//! taints and evicts the pods that do not tolerate them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use crate::pod::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::cluster::{Cluster, Informers, is_status};
use crate::podutil;
use crate::quantity;
use crate::roster::Entry;

/// How long a node's Lease is valid (upstream's kubelet default).
const LEASE_DURATION_SECONDS: i32 = 40;
/// How often an unchanged node status is reported anyway.
const STATUS_REPORT: Duration = Duration::from_secs(300);
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

pub fn start(cluster: Arc<Cluster>, _inf: &mut Informers) -> crate::cluster::TaskBox {
    Box::pin(run(cluster))
}

async fn run(cluster: Arc<Cluster>) {
    let mut faults = cluster.faults.subscribe();
    let mut roster = cluster.roster.subscribe();
    // Nodes that joined between the start's registration and the
    // subscription above (a leader's term starts while machines join).
    if let Err(error) = register(&cluster).await {
        warn!(%error, "registering the roster's nodes failed");
    }
    // Leases on their own task: renewing a thousand of them takes a while
    // and must not delay reactions to faults.
    let heartbeat = cluster.clone();
    let _leases = AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(heartbeat.config.heartbeat);
        loop {
            tick.tick().await;
            renew_leases(&heartbeat).await;
        }
    }));
    let mut last_report = tokio::time::Instant::now();
    let mut evictions = tokio::time::interval(Duration::from_secs(1));
    let mut reported: BTreeMap<String, bool> = BTreeMap::new();
    loop {
        if last_report.elapsed() >= STATUS_REPORT {
            reported.clear();
            last_report = tokio::time::Instant::now();
        }
        tokio::select! {
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            changed = roster.changed() => {
                if changed.is_err() {
                    return;
                }
                // Nodes added or removed through the admin endpoint.
                if let Err(error) = register(&cluster).await {
                    warn!(%error, "registering the roster's nodes failed");
                }
                reported.clear();
            }
            _ = evictions.tick() => evict(&cluster).await,
        }
        for entry in cluster.roster.entries() {
            let name = entry.name;
            let ready = !cluster.faults.node_not_ready(&name);
            if reported.get(&name) == Some(&ready) {
                continue;
            }
            match report(&cluster, &name, ready).await {
                Ok(()) => {
                    reported.insert(name, ready);
                }
                Err(error) => warn!(%error, node = %name, "node status update failed"),
            }
        }
    }
}

/// Stops a spawned task when the loop that owns it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The Node a kubelet registers for `entry`: labels, pod CIDR and
/// providerID (taints only at registration, as `--register-with-taints`).
fn node_object(cluster: &Cluster, entry: &Entry) -> Value {
    let c = &cluster.config;
    let (name, i) = (entry.name.clone(), entry.index);
    let mut labels: BTreeMap<String, String> = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
        (
            "node.kubernetes.io/instance-type".to_string(),
            c.instance_type.clone(),
        ),
        ("type".to_string(), "flotilla-simulated".to_string()),
    ]);
    if !c.region.is_empty() {
        labels.insert("topology.kubernetes.io/region".into(), c.region.clone());
    }
    let zone = c.zone_of(i);
    if !zone.is_empty() {
        labels.insert("topology.kubernetes.io/zone".into(), zone.to_string());
    }
    labels.extend(c.node_labels.clone());
    labels.extend(entry.spec.labels.clone());
    let cidr = c
        .node_pod_cidr(i)
        .map(|n| n.to_string())
        .unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "flotilla.io/simulated": "true"},
        },
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "providerID": entry.spec.provider_id.clone()
                .unwrap_or_else(|| format!("{}://{}/{}", c.provider, c.cluster_name, name)),
        },
    })
}

fn capacity(cluster: &Cluster) -> Value {
    let c = &cluster.config;
    let cpu = quantity::millicores(&c.node_cpu).unwrap_or(0);
    let memory = quantity::units(&c.node_memory).unwrap_or(0);
    json!({
        "cpu": quantity::format_millicores(cpu),
        "memory": quantity::format_bytes(memory),
        "pods": c.node_pods.to_string(),
        "ephemeral-storage": "100Gi",
    })
}

/// Registers the nodes, retrying until the API takes them.
pub async fn register_all(cluster: &Cluster) {
    loop {
        match register(cluster).await {
            Ok(()) => break,
            Err(error) => {
                warn!(%error, "registering nodes failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    info!(nodes = cluster.roster.len(), "nodes registered");
}

/// Creates the nodes that are missing and brings existing ones to the
/// roster's shape; removes this cluster's nodes the roster no longer has,
/// and the pods bound to them (as the pod garbage collector does for
/// pods of a node that is gone).
async fn register(cluster: &Cluster) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(cluster.clients.kubelet.clone());
    let mut wanted = HashSet::new();
    for entry in cluster.roster.entries() {
        let mut desired = node_object(cluster, &entry);
        let name = entry.name.clone();
        wanted.insert(name.clone());
        match nodes.get_opt(&name).await? {
            None => {
                if !entry.spec.taints.is_empty() {
                    desired["spec"]["taints"] = json!(entry.spec.taints);
                }
                let node: Node =
                    serde_json::from_value(desired).map_err(kube::Error::SerdeError)?;
                match nodes.create(&PostParams::default(), &node).await {
                    Ok(_) => debug!(node = %name, "registered"),
                    Err(e) if is_status(&e, 409) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(_) => {
                let patch = json!({"metadata": desired["metadata"], "spec": desired["spec"]});
                nodes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
        }
        report(cluster, &name, !cluster.faults.node_not_ready(&name)).await?;
    }
    // Nodes of an earlier, larger shape of this cluster, or removed.
    for n in nodes.list(&Default::default()).await?.items {
        let name = n.name_any();
        let ours = n
            .annotations()
            .get("flotilla.io/simulated")
            .is_some_and(|v| v == "true");
        if ours && !wanted.contains(&name) {
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
            let leases: Api<Lease> =
                Api::namespaced(cluster.clients.kubelet.clone(), "kube-node-lease");
            let _ = leases.delete(&name, &DeleteParams::default()).await;
            delete_pods_of(cluster, &name).await;
        }
    }
    Ok(())
}

/// Deletes, at once, the pods bound to a node that is gone.
async fn delete_pods_of(cluster: &Cluster, node: &str) {
    for pod in cluster.pods_by_node.get(node) {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(
            cluster.clients.controller_manager.clone(),
            &pod.namespace().unwrap_or_default(),
        );
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        if let Err(error) = api.delete(&pod.name_any(), &params).await
            && !is_status(&error, 404)
        {
            warn!(%error, %node, pod = %pod.name_any(), "deleting a pod of a removed node failed");
        }
    }
}

/// Reports one node's status and sets or clears the not-ready taints, as
/// the kubelet and the node lifecycle controller do together.
async fn report(cluster: &Cluster, name: &str, ready: bool) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(cluster.clients.kubelet.clone());
    let entry = cluster.roster.get(name);
    let i = entry.as_ref().map_or(0, |e| e.index);
    let kubelet_version = entry
        .and_then(|e| e.spec.kubelet_version)
        .unwrap_or_else(|| flotilla_apiserver::version::GIT_VERSION.to_string());
    let now = podutil::now();
    let existing = nodes.get_opt(name).await?;
    let transition = |kind: &str, status: &str| {
        existing
            .as_ref()
            .and_then(|n| n.status.as_ref()?.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == kind && c.status == status))
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone())
    };
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": transition(kind, status)})
    };
    let ready_condition = if ready {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        )
    } else {
        condition(
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime network not ready: simulated fault (flotilla member fault node-ready to clear)",
        )
    };
    let ip = cluster
        .config
        .node_ip(i)
        .map(|ip| ip.to_string())
        .unwrap_or_default();
    let status = json!({"status": {
        "capacity": capacity(cluster),
        "allocatable": capacity(cluster),
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ready_condition,
        ],
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("{:032x}", i + 1),
            "systemUUID": format!("{:032x}", i + 1),
            "bootID": format!("{:032x}", i + 1),
            "kernelVersion": "6.1.0-flotilla",
            "osImage": "Flotilla simulated node",
            "containerRuntimeVersion": "flotilla://1.0.0",
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": kubelet_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "phase": "Running",
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    // Taints: the node lifecycle controller's view of readiness.
    let current = existing
        .as_ref()
        .and_then(|n| n.spec.as_ref()?.taints.clone())
        .unwrap_or_default();
    let others: Vec<Value> = current
        .iter()
        .filter(|t| t.key != NOT_READY_TAINT)
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    let mut taints = others.clone();
    if !ready {
        let kept = |effect: &str| {
            current
                .iter()
                .find(|t| t.key == NOT_READY_TAINT && t.effect == effect)
                .and_then(|t| t.time_added.clone())
                .unwrap_or_else(|| now.clone())
        };
        taints.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": kept("NoSchedule")}));
        taints.push(
            json!({"key": NOT_READY_TAINT, "effect": "NoExecute", "timeAdded": kept("NoExecute")}),
        );
    }
    let had = current.iter().filter(|t| t.key == NOT_READY_TAINT).count();
    if had != taints.len() - others.len() {
        let patch = json!({"spec": {"taints": taints}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Renews every ready node's Lease, spread over the heartbeat interval.
async fn renew_leases(cluster: &Cluster) {
    let leases: Api<Lease> = Api::namespaced(cluster.clients.kubelet.clone(), "kube-node-lease");
    let entries = cluster.roster.entries();
    let n = entries.len().max(1);
    let pause = cluster.config.heartbeat / (2 * n as u32).max(1);
    for entry in entries {
        let name = entry.name;
        if cluster.faults.node_not_ready(&name) {
            continue;
        }
        if let Err(error) = renew(cluster, &leases, &name).await {
            warn!(%error, node = %name, "lease renewal failed");
        }
        if n > 1 {
            tokio::time::sleep(pause).await;
        }
    }
}

async fn renew(cluster: &Cluster, leases: &Api<Lease>, name: &str) -> Result<(), kube::Error> {
    let now = MicroTime(podutil::now().0);
    let patch = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": now}});
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => {
            let uid = cluster
                .nodes
                .state()
                .iter()
                .find(|n| n.name_any() == name)
                .and_then(|n| n.uid());
            let mut lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": patch["spec"],
            });
            if let Some(uid) = uid {
                lease["metadata"]["ownerReferences"] =
                    json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]);
            }
            let lease: Lease = serde_json::from_value(lease).map_err(kube::Error::SerdeError)?;
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(e) if is_status(&e, 409) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// The taint manager: pods on a node with the NoExecute not-ready taint
/// are deleted once they stop tolerating it.
async fn evict(cluster: &Cluster) {
    for node in cluster.nodes.state() {
        let Some(taint) = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .and_then(|ts| {
                ts.iter()
                    .find(|t| t.key == NOT_READY_TAINT && t.effect == "NoExecute")
            })
        else {
            continue;
        };
        let tainted_for = taint
            .time_added
            .as_ref()
            .map(podutil::since)
            .unwrap_or_default();
        for pod in cluster.pods_by_node.get(&node.name_any()) {
            if pod.metadata.deletion_timestamp.is_some() || !podutil::is_active(&pod) {
                continue;
            }
            if tolerates_for(&pod, NOT_READY_TAINT).is_some_and(|limit| tainted_for < limit) {
                continue;
            }
            let ns = pod.namespace().unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
            info!(pod = %pod.name_any(), namespace = %ns, node = %node.name_any(), "evicting pod from a not-ready node");
            if let Err(error) = pods.delete(&pod.name_any(), &DeleteParams::default()).await
                && !is_status(&error, 404)
            {
                warn!(%error, pod = %pod.name_any(), "eviction failed");
            }
        }
    }
}

/// How long `pod` tolerates a NoExecute taint with `key`: `None` when it
/// does not tolerate it at all, `Duration::MAX` when forever.
fn tolerates_for(pod: &Pod, key: &str) -> Option<Duration> {
    let tolerations = pod.spec.as_ref()?.tolerations.as_ref()?;
    tolerations
        .iter()
        .filter(|t| {
            let key_ok = match t.operator.as_deref() {
                Some("Exists") => t.key.as_deref().is_none_or(|k| k.is_empty() || k == key),
                _ => t.key.as_deref() == Some(key),
            };
            key_ok
                && t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "NoExecute")
        })
        .map(|t| match t.toleration_seconds {
            Some(s) => Duration::from_secs(u64::try_from(s).unwrap_or(0)),
            None => Duration::MAX,
        })
        .max()
}
