//! The virtual kubelet's node: each VirtualNode becomes a Node
//! `liqo-<provider>` with the granted capacity, Liqo's labels and taint,
//! Ready while the provider answers and NotReady when it does not. Pods
//! on it are not evicted when it turns NotReady: they keep running in the
//! provider, which is the point.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::{Peers, Provider};
use crate::api::{
    ForeignCluster, LiqoCondition, NOT_ALLOWED_TAINT, REMOTE_CLUSTER_ID, ResourceSlice, TYPE_LABEL,
    TYPE_VIRTUAL_NODE, VirtualNode, set_condition, virtual_node_name,
};

const MANAGER: &str = "liqo-virtual-kubelet";
const PERIOD: Duration = Duration::from_secs(1);
/// A Ready node's status is written at least this often (its heartbeat).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Which VirtualNode a Node stands for.
const VIRTUAL_NODE_ANNOTATION: &str = "offloading.liqo.io/virtual-node";
const KUBELET_VERSION: &str = "v1.32.0-flotilla";

pub async fn run(peers: Arc<Peers>) {
    let mut last_write: HashMap<String, (bool, Instant)> = HashMap::new();
    // A VirtualNode made or changed (a slice granted) is acted on at once;
    // the period keeps the heartbeat.
    let wake = Arc::new(tokio::sync::Notify::new());
    crate::wake::on_changes(Api::<VirtualNode>::all(peers.local.clone()), wake.clone());
    peers.wake_on_changes(&wake);
    loop {
        if let Err(error) = pass(&peers, &mut last_write).await {
            warn!(%error, "virtual nodes not synced");
        }
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn pass(
    peers: &Peers,
    last_write: &mut HashMap<String, (bool, Instant)>,
) -> Result<(), kube::Error> {
    let vns = match Api::<VirtualNode>::all(peers.local.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(_) => return Ok(()),
    };
    let providers = peers.providers().await;
    let nodes: Api<Node> = Api::all(peers.local.clone());
    let mut wanted = Vec::new();
    for vn in &vns {
        if vn.spec.create_node == Some(false) || vn.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = virtual_node_name(&vn.spec.cluster_id);
        wanted.push(name.clone());
        let provider = providers.iter().find(|p| p.id == vn.spec.cluster_id);
        let answers = match provider {
            Some(p) => probe(p).await,
            None => Err("no credentials for the provider".into()),
        };
        ensure_node(&nodes, vn, &name).await?;
        let ready = answers.is_ok();
        let due = last_write
            .get(&name)
            .is_none_or(|(was, at)| *was != ready || at.elapsed() > HEARTBEAT);
        report(peers, vn, &answers).await;
        if due {
            write_status(&nodes, vn, &name, &answers).await?;
            last_write.insert(name.clone(), (ready, Instant::now()));
            if !ready {
                warn!(node = %name, error = %answers.clone().err().unwrap_or_default(), "provider unreachable; virtual node NotReady");
            }
        }
    }
    // Nodes of VirtualNodes that are gone.
    let ours = ListParams::default().labels(&format!("{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"));
    for node in nodes.list(&ours).await?.items {
        let name = node.name_any();
        if node.annotations().contains_key(VIRTUAL_NODE_ANNOTATION) && !wanted.contains(&name) {
            info!(node = %name, "virtual node removed");
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
            last_write.remove(&name);
        }
    }
    Ok(())
}

/// Whether the provider answers this cluster's identity.
async fn probe(provider: &Provider) -> Result<(), String> {
    let api: Api<ResourceSlice> = Api::namespaced(provider.client.clone(), &provider.remote_tenant);
    let limited = ListParams::default().limit(1);
    match tokio::time::timeout(Duration::from_secs(4), api.list(&limited)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 4s".into()),
    }
}

fn labels(vn: &VirtualNode, name: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/role", "agent"),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        (TYPE_LABEL, TYPE_VIRTUAL_NODE),
        ("type", "virtual-kubelet"),
        (REMOTE_CLUSTER_ID, vn.spec.cluster_id.as_str()),
        (
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "true",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    labels.extend(vn.spec.labels.clone());
    labels
}

async fn ensure_node(nodes: &Api<Node>, vn: &VirtualNode, name: &str) -> Result<(), kube::Error> {
    let mut taints =
        vec![json!({"key": NOT_ALLOWED_TAINT, "value": "true", "effect": "NoExecute"})];
    taints.extend(vn.spec.taints.iter().map(|t| json!(t)));
    let existing = nodes.get_opt(name).await?;
    let labels = labels(vn, name);
    let source = format!("{}/{}", vn.namespace().unwrap_or_default(), vn.name_any());
    let current_taints = existing
        .as_ref()
        .and_then(|n| n.spec.as_ref()?.taints.clone())
        .map(|t| serde_json::to_value(t).unwrap_or_default());
    let up_to_date = existing.as_ref().is_some_and(|n| {
        labels.iter().all(|(k, v)| n.labels().get(k) == Some(v))
            && current_taints.as_ref() == Some(&Value::Array(taints.clone()))
    });
    if up_to_date {
        return Ok(());
    }
    let body = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {VIRTUAL_NODE_ANNOTATION: source}},
        "spec": {"taints": taints},
    });
    nodes
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    if existing.is_none() {
        info!(node = %name, provider = %vn.spec.cluster_id, "virtual node registered");
    }
    Ok(())
}

async fn write_status(
    nodes: &Api<Node>,
    vn: &VirtualNode,
    name: &str,
    answers: &Result<(), String>,
) -> Result<(), kube::Error> {
    let now = jiff::Timestamp::now().to_string();
    let hard = &vn.spec.resource_quota.hard;
    let mut capacity = serde_json::Map::new();
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        if let Some(q) = hard.get(key) {
            capacity.insert(key.into(), json!(q.0));
        }
    }
    let (status, reason, message) = match answers {
        Ok(()) => ("True", "KubeletReady", "the provider answers".to_string()),
        Err(e) => (
            "False",
            "ProviderUnreachable",
            format!("provider {} does not answer: {e}", vn.spec.cluster_id),
        ),
    };
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    // Keep transition times of conditions that did not change.
    let old = nodes.get_status(name).await?;
    let mut conditions = vec![
        condition("Ready", status, reason, &message),
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", ""),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", ""),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", ""),
        condition("NetworkUnavailable", "False", "RouteCreated", ""),
    ];
    for c in &mut conditions {
        let prior = old
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|o| Some(o.type_.as_str()) == c["type"].as_str())
            });
        if let Some(p) = prior
            && Some(p.status.as_str()) == c["status"].as_str()
            && let Some(t) = &p.last_transition_time
        {
            c["lastTransitionTime"] = json!(t.0.to_string());
        }
    }
    let status = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": conditions,
        "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "liqo://remote",
                     "kernelVersion": "", "osImage": format!("Liqo peer {}", vn.spec.cluster_id),
                     "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The VirtualNode's and the ForeignCluster's view of the node.
async fn report(peers: &Peers, vn: &VirtualNode, answers: &Result<(), String>) {
    let (node_status, reason, message) = match answers {
        Ok(()) => ("Running", "NodeReady", "the node is ready".to_string()),
        Err(e) => ("Running", "ProviderUnreachable", e.clone()),
    };
    let mut conditions = vn.status.clone().unwrap_or_default().conditions;
    let a = set_condition(
        &mut conditions,
        LiqoCondition::new("VirtualKubelet", "Running", "VirtualKubeletRunning", ""),
    );
    let b = set_condition(
        &mut conditions,
        LiqoCondition::new("Node", node_status, reason, &message),
    );
    if a || b {
        let api: Api<VirtualNode> =
            Api::namespaced(peers.local.clone(), &vn.namespace().unwrap_or_default());
        let _ = api
            .patch_status(
                &vn.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await;
    }
    let fcs: Api<ForeignCluster> = Api::all(peers.local.clone());
    let Ok(Some(fc)) = fcs.get_opt(&vn.spec.cluster_id).await else {
        return;
    };
    let mut status = fc.status.unwrap_or_default();
    let ready = if answers.is_ok() { "Ready" } else { "NotReady" };
    status.modules.offloading.enabled = true;
    let mut changed = set_condition(
        &mut status.modules.offloading.conditions,
        LiqoCondition::new("OffloadingVirtualNodeStatus", "Ready", "", ""),
    );
    changed |= set_condition(
        &mut status.modules.offloading.conditions,
        LiqoCondition::new("OffloadingNodeStatus", ready, "", &message),
    );
    if let Some(c) = crate::network::condition(&peers.local, &vn.spec.cluster_id).await {
        changed |= !status.modules.networking.enabled;
        status.modules.networking.enabled = true;
        changed |= set_condition(&mut status.modules.networking.conditions, c);
    }
    let api_server = if answers.is_ok() {
        "Established"
    } else {
        "Error"
    };
    changed |= set_condition(
        &mut status.conditions,
        LiqoCondition::new("APIServerStatus", api_server, "", &message),
    );
    if changed {
        let _ = fcs
            .patch_status(
                &vn.spec.cluster_id,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await;
    }
}
