//! The Machine controller: adopts the bootstrap config and the
//! infrastructure machine, takes the bootstrap data's Secret and the
//! providerID from them, finds the Node with that providerID in the
//! workload cluster (`status.nodeRef`), and reports phase and conditions.
//! Deleting a Machine drains its node, deletes the infrastructure and
//! bootstrap objects, then the Node, as upstream does.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::info;

use crate::Context;
use crate::api::{self, Ref};
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};
use crate::workload::NodeChange;

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "capi-machine",
        kind: api::machines(),
        wakers: vec![
            (api::kubeadm_configs(), |o| {
                runner::owners_of_kind(o, "Machine")
            }),
            (api::docker_machines(), |o| {
                runner::owners_of_kind(o, "Machine")
            }),
        ],
        nodes: Some(machines_of_node),
    };
    runner::run_in(ctx, controller, |ctx, machine| async move {
        reconcile(&ctx, machine).await
    })
    .await;
}

/// The Machines a changed Node may be: CAPD names a node after its
/// Machine, or `<cluster>-<machine>` (`docker::machine::node_name`).
fn machines_of_node(change: &NodeChange) -> Vec<String> {
    let Some(node) = &change.node else {
        return Vec::new();
    };
    let mut names = vec![node.clone()];
    if let Some(machine) = node.strip_prefix(&format!("{}-", change.cluster)) {
        names.push(machine.to_string());
    }
    names
}

/// The Machine's node in the workload cluster, by providerID; None while
/// the cluster does not answer.
async fn node_of(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    provider_id: &str,
) -> Result<Option<Node>, Error> {
    let Some(nodes) = ctx.workloads.nodes(namespace, cluster).await? else {
        return Ok(None);
    };
    Ok(nodes
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id)))
}

fn node_condition<'a>(node: &'a Node, type_: &str) -> Option<&'a str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Whether the Machine matches its owner's current spec: the KCP's
/// version, or its MachineDeployment's template hash.
async fn up_to_date(objects: &Objects, machine: &Value) -> Result<bool, Error> {
    if let Some(kcp) = objects::owner_named(machine, "KubeadmControlPlane") {
        let Some(kcp) = objects.get(&api::kubeadm_control_planes(), kcp).await? else {
            return Ok(true);
        };
        return Ok(kcp["spec"]["version"] == machine["spec"]["version"]);
    }
    if let Some(md) = objects::label(machine, api::DEPLOYMENT_NAME_LABEL) {
        let Some(md) = objects.get(&api::machine_deployments(), md).await? else {
            return Ok(true);
        };
        return Ok(objects::label(machine, api::TEMPLATE_HASH_LABEL)
            == Some(super::machinedeployment::template_hash(&md).as_str()));
    }
    Ok(true)
}

async fn reconcile(ctx: &Context, machine: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&machine).to_string();
    let name = objects::name(&machine).to_string();
    let cluster = machine["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let machines = api::machines();
    if objects::deleting(&machine) {
        return delete(ctx, &objects, &machine, &cluster).await;
    }
    objects
        .add_finalizer(&machines, &machine, api::MACHINE_FINALIZER)
        .await?;
    if objects::label(&machine, api::CLUSTER_NAME_LABEL) != Some(cluster.as_str())
        && !cluster.is_empty()
    {
        objects
            .merge(
                &machines,
                &name,
                json!({"metadata": {"labels": {api::CLUSTER_NAME_LABEL: cluster}}}),
            )
            .await?;
    }
    let mut status = machine["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let mut spec_patch = json!({});

    // Bootstrap.
    let mut bootstrap_ready = false;
    if let Some(r) = Ref::from_value(&machine["spec"]["bootstrap"]["configRef"]) {
        match objects.get(&r.resource(), &r.name).await? {
            None => set_condition(
                &mut status,
                "BootstrapConfigReady",
                "False",
                "ObjectDoesNotExist",
                &format!("{} does not exist", r.kind),
            ),
            Some(config) => {
                adopt(&objects, &r, &config, &machine, &cluster).await?;
                let created = config["status"]["initialization"]["dataSecretCreated"] == true
                    || config["status"]["ready"] == true;
                let secret = config["status"]["dataSecretName"].as_str();
                if let (true, Some(secret)) = (created, secret) {
                    bootstrap_ready = true;
                    set_condition(&mut status, "BootstrapConfigReady", "True", "Ready", "");
                    if machine["spec"]["bootstrap"]["dataSecretName"].as_str() != Some(secret) {
                        spec_patch["bootstrap"] = json!({"dataSecretName": secret});
                    }
                } else {
                    set_condition(
                        &mut status,
                        "BootstrapConfigReady",
                        "False",
                        "NotReady",
                        &format!(
                            "{} status.initialization.dataSecretCreated is false",
                            r.kind
                        ),
                    );
                }
            }
        }
    } else if machine["spec"]["bootstrap"]["dataSecretName"].is_string() {
        bootstrap_ready = true;
        set_condition(
            &mut status,
            "BootstrapConfigReady",
            "True",
            "DataSecretProvided",
            "",
        );
    }
    status["initialization"]["bootstrapDataSecretCreated"] = json!(bootstrap_ready);
    status["bootstrapReady"] = json!(bootstrap_ready);

    // Infrastructure.
    let mut infra_provisioned = false;
    let mut provider_id = machine["spec"]["providerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(r) = Ref::from_value(&machine["spec"]["infrastructureRef"]) {
        match objects.get(&r.resource(), &r.name).await? {
            None => set_condition(
                &mut status,
                "InfrastructureReady",
                "False",
                "ObjectDoesNotExist",
                &format!("{} does not exist", r.kind),
            ),
            Some(infra) => {
                adopt(&objects, &r, &infra, &machine, &cluster).await?;
                infra_provisioned = super::infrastructure_ready(&mut status, &r.kind, &infra);
                if let Some(id) = infra["spec"]["providerID"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    && id != provider_id
                {
                    provider_id = id.to_string();
                    spec_patch["providerID"] = json!(id);
                }
                if infra["status"]["addresses"].is_array() {
                    status["addresses"] = infra["status"]["addresses"].clone();
                }
            }
        }
    }
    status["initialization"]["infrastructureProvisioned"] = json!(infra_provisioned);
    status["infrastructureReady"] = json!(infra_provisioned);
    if spec_patch.as_object().is_some_and(|o| !o.is_empty()) {
        objects
            .merge(&machines, &name, json!({"spec": spec_patch}))
            .await?;
    }

    // The node.
    let mut node_healthy = false;
    let mut has_node = false;
    if !provider_id.is_empty() {
        match node_of(ctx, &namespace, &cluster, &provider_id).await? {
            Some(node) => {
                has_node = true;
                let node_name = node.metadata.name.clone().unwrap_or_default();
                status["nodeRef"] = json!({"name": node_name});
                if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
                    status["nodeInfo"] = serde_json::to_value(info)?;
                }
                if let Some(addresses) = node.status.as_ref().and_then(|s| s.addresses.as_ref()) {
                    status["addresses"] = serde_json::to_value(addresses)?;
                }
                match node_condition(&node, "Ready") {
                    Some("True") => {
                        node_healthy = true;
                        set_condition(&mut status, "NodeReady", "True", "NodeReady", "");
                        set_condition(&mut status, "NodeHealthy", "True", "NodeHealthy", "");
                    }
                    Some(s) => {
                        let s = if s == "False" { "False" } else { "Unknown" };
                        set_condition(
                            &mut status,
                            "NodeReady",
                            s,
                            "NodeNotReady",
                            &format!("Node {node_name} is not ready"),
                        );
                        set_condition(
                            &mut status,
                            "NodeHealthy",
                            "False",
                            "NodeNotHealthy",
                            &format!("Node {node_name} is not ready"),
                        );
                    }
                    None => {
                        set_condition(
                            &mut status,
                            "NodeReady",
                            "Unknown",
                            "NodeReadyUnknown",
                            "Node has no Ready condition yet",
                        );
                        set_condition(
                            &mut status,
                            "NodeHealthy",
                            "Unknown",
                            "NodeHealthyUnknown",
                            "",
                        );
                    }
                }
                annotate_node(ctx, &namespace, &cluster, &machine, &node).await?;
            }
            None => {
                let reason = if status["nodeRef"].is_object() {
                    "NodeDeleted"
                } else {
                    "NodeDoesNotExist"
                };
                set_condition(
                    &mut status,
                    "NodeReady",
                    "Unknown",
                    reason,
                    "Waiting for a Node with spec.providerID to exist",
                );
                set_condition(
                    &mut status,
                    "NodeHealthy",
                    "Unknown",
                    reason,
                    "Waiting for a Node with spec.providerID to exist",
                );
            }
        }
    } else {
        set_condition(
            &mut status,
            "NodeHealthy",
            "Unknown",
            "NodeDoesNotExist",
            "Waiting for the infrastructure to report spec.providerID",
        );
    }

    let ready = bootstrap_ready && infra_provisioned && node_healthy;
    if ready {
        set_condition(&mut status, "Ready", "True", "Ready", "");
        set_condition(&mut status, "Available", "True", "Available", "");
    } else {
        let why = if !bootstrap_ready {
            "BootstrapConfigReady: waiting for the bootstrap data"
        } else if !infra_provisioned {
            "InfrastructureReady: waiting for the infrastructure"
        } else {
            "NodeHealthy: the node is not ready"
        };
        set_condition(&mut status, "Ready", "False", "NotReady", why);
        set_condition(&mut status, "Available", "False", "NotReady", why);
    }
    if up_to_date(&objects, &machine).await? {
        set_condition(&mut status, "UpToDate", "True", "UpToDate", "");
    } else {
        set_condition(
            &mut status,
            "UpToDate",
            "False",
            "NotUpToDate",
            "The Machine's spec differs from its owner's",
        );
    }
    set_condition(&mut status, "Deleting", "False", "NotDeleting", "");
    set_condition(&mut status, "Paused", "False", "NotPaused", "");
    let phase = if has_node && infra_provisioned {
        "Running"
    } else if !provider_id.is_empty() {
        "Provisioned"
    } else if bootstrap_ready {
        "Provisioning"
    } else {
        "Pending"
    };
    if status["phase"] != phase {
        status["phase"] = json!(phase);
        status["lastUpdated"] = json!(objects::now());
    }
    status["observedGeneration"] = machine["metadata"]["generation"].clone();
    if status != machine["status"] {
        objects.status(&machines, &name, status).await?;
    }
    // A change of its node wakes it (the workload cluster's Node watch);
    // look again soon while it comes up, and now and then after.
    Ok(Some(if ready {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(1)
    }))
}

/// The bootstrap and infrastructure objects belong to the Machine and to
/// its cluster.
async fn adopt(
    objects: &Objects,
    r: &Ref,
    object: &Value,
    machine: &Value,
    cluster: &str,
) -> Result<(), Error> {
    if objects::owned_by(object, machine)
        && objects::label(object, api::CLUSTER_NAME_LABEL) == Some(cluster)
    {
        return Ok(());
    }
    let has_controller = object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true));
    let patch = json!({"metadata": {
        "labels": {api::CLUSTER_NAME_LABEL: cluster},
        "ownerReferences": objects::with_owner(object, machine, !has_controller),
    }});
    objects.merge(&r.resource(), &r.name, patch).await
}

/// Upstream's node annotations: which Machine and cluster the node is.
async fn annotate_node(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    machine: &Value,
    node: &Node,
) -> Result<(), Error> {
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    if annotations
        .get("cluster.x-k8s.io/machine")
        .map(String::as_str)
        == Some(objects::name(machine))
    {
        return Ok(());
    }
    let Some(client) = ctx.workloads.client(namespace, cluster).await? else {
        return Ok(());
    };
    let (owner_kind, owner_name) = machine["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    let patch = json!({"metadata": {"annotations": {
        "cluster.x-k8s.io/cluster-name": cluster,
        "cluster.x-k8s.io/cluster-namespace": namespace,
        "cluster.x-k8s.io/machine": objects::name(machine),
        "cluster.x-k8s.io/owner-kind": owner_kind,
        "cluster.x-k8s.io/owner-name": owner_name,
    }}});
    let nodes: Api<Node> = Api::all(client);
    let name = node.metadata.name.clone().unwrap_or_default();
    let _ = nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    Ok(())
}

/// Cordons the node and evicts its pods (DaemonSets' and mirror pods
/// stay, as `kubectl drain` leaves them).
async fn drain(ctx: &Context, namespace: &str, cluster: &str, node: &str) -> Result<usize, Error> {
    let Some(client) = ctx.workloads.client(namespace, cluster).await? else {
        return Ok(0);
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let cordon = json!({"spec": {"unschedulable": true}});
    if nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&cordon))
        .await
        .is_err()
    {
        return Ok(0);
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut left = 0;
    for pod in on_node {
        let daemon = pod
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|refs| refs.iter().any(|r| r.kind == "DaemonSet"));
        if daemon || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        left += 1;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let _ = api.evict(&name, &Default::default()).await;
    }
    Ok(left)
}

async fn delete(
    ctx: &Context,
    objects: &Objects,
    machine: &Value,
    cluster: &str,
) -> Result<Next, Error> {
    let namespace = objects.namespace.clone();
    let name = objects::name(machine).to_string();
    let mut status = machine["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["phase"] = json!("Deleting");
    let node = machine["status"]["nodeRef"]["name"]
        .as_str()
        .map(String::from);
    let cluster_deleting = objects
        .get(&api::clusters(), cluster)
        .await?
        .is_none_or(|c| objects::deleting(&c));

    // Drain, unless the whole cluster goes.
    let mut reason = ("DrainingNode", String::new());
    let mut wait = false;
    if let Some(node) = &node
        && !cluster_deleting
    {
        let left = drain(ctx, &namespace, cluster, node).await?;
        if left > 0 {
            reason = (
                "DrainingNode",
                format!("Drain not completed yet: {left} Pods to evict from Node {node}"),
            );
            wait = true;
        }
    }
    // Then the infrastructure machine and the bootstrap config.
    if !wait {
        for (kind_ref, why) in [
            (
                &machine["spec"]["infrastructureRef"],
                "WaitingForInfrastructureDeletion",
            ),
            (
                &machine["spec"]["bootstrap"]["configRef"],
                "WaitingForBootstrapDeletion",
            ),
        ] {
            if let Some(r) = Ref::from_value(kind_ref)
                && let Some(o) = objects.get(&r.resource(), &r.name).await?
            {
                if !objects::deleting(&o) {
                    objects.delete(&r.resource(), &r.name).await?;
                }
                reason = (why, format!("Waiting for {r} to be deleted"));
                wait = true;
                break;
            }
        }
    }
    if wait {
        set_condition(&mut status, "Deleting", "True", reason.0, &reason.1);
        if status != machine["status"] {
            objects.status(&api::machines(), &name, status).await?;
        }
        return Ok(Some(Duration::from_millis(500)));
    }
    // Last, the Node.
    if let Some(node) = &node
        && !cluster_deleting
        && let Some(client) = ctx.workloads.client(&namespace, cluster).await?
    {
        let nodes: Api<Node> = Api::all(client);
        let _ = nodes.delete(node, &DeleteParams::default()).await;
    }
    objects
        .remove_finalizer(&api::machines(), machine, api::MACHINE_FINALIZER)
        .await?;
    info!(machine = %format!("{namespace}/{name}"), "deleted");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_change_wakes_the_machines_it_may_be() {
        let change = |node: Option<&str>| NodeChange {
            namespace: "default".into(),
            cluster: "dev".into(),
            node: node.map(String::from),
        };
        // Named after its Machine, or `<cluster>-<machine>`.
        assert_eq!(
            machines_of_node(&change(Some("dev-md-0-abc"))),
            ["dev-md-0-abc", "md-0-abc"]
        );
        assert_eq!(machines_of_node(&change(Some("worker-1"))), ["worker-1"]);
        assert!(machines_of_node(&change(None)).is_empty());
    }
}
