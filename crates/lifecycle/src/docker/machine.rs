//! The DockerMachine controller: runs a Machine's bootstrap data on this
//! host. A control plane machine starts the cluster's member (with the CA
//! its bootstrap data carries) on the DockerCluster's endpoint; every
//! machine then joins the member as a node named as CAPD names its
//! container, with `docker:////<name>` as providerID, the Machine's
//! version as kubelet version, and the control plane's label and taint.

use std::sync::Arc;
use std::time::Duration;

use flotilla_member::roster::NodeSpec;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::Context;
use crate::api::{self, Ref};
use crate::docker::process::MemberSpec;
use crate::error::Error;
use crate::kubeadm::bootstrap::{CA_CERT_PATH, CA_KEY_PATH, written_files};
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

/// `lifecycle.flotilla.io/runtime` on a Cluster (or its DockerCluster):
/// what runs the member's pods, `sim` (the default) or `netns`.
pub const RUNTIME_ANNOTATION: &str = "lifecycle.flotilla.io/runtime";

/// Runs for `kind`: DockerCluster (DockerMachine), or its `Dev*` twin.
pub async fn run(ctx: Arc<Context>, kind: kube::api::ApiResource, name: &'static str) {
    let controller = Controller {
        name,
        kind: kind.clone(),
        wakers: vec![(api::machines(), |m| {
            Ref::from_value(&m["spec"]["infrastructureRef"])
                .map(|r| vec![r.name])
                .unwrap_or_default()
        })],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, dm| async move {
        reconcile(&ctx, dm).await
    })
    .await;
}

/// CAPD's container name: the Machine's name when it starts with the
/// cluster's, else `<cluster>-<machine>`.
pub fn node_name(cluster: &str, machine: &str) -> String {
    if machine.starts_with(cluster) {
        machine.to_string()
    } else {
        format!("{cluster}-{machine}")
    }
}

fn first_cidr(cluster: &Value, which: &str) -> Option<String> {
    cluster["spec"]["clusterNetwork"][which]["cidrBlocks"][0]
        .as_str()
        .map(String::from)
}

async fn reconcile(ctx: &Context, dm: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&dm).to_string();
    let name = objects::name(&dm).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let kind = crate::api::resource_of(&dm);
    let Some(machine_name) = objects::owner_named(&dm, "Machine").map(String::from) else {
        if objects::deleting(&dm) {
            objects
                .remove_finalizer(&kind, &dm, api::DOCKERMACHINE_FINALIZER)
                .await?;
            return Ok(None);
        }
        // The Machine adopts it first.
        return Ok(Some(Duration::from_secs(1)));
    };
    let cluster_name = objects::label(&dm, api::CLUSTER_NAME_LABEL)
        .unwrap_or_default()
        .to_string();
    let node = node_name(&cluster_name, &machine_name);
    if objects::deleting(&dm) {
        if ctx.provider.running(&namespace, &cluster_name).is_some() {
            // Every control plane member forgets the node.
            for admin in ctx.provider.admins(&namespace, &cluster_name)? {
                let path = format!("/nodes/{node}");
                match admin.request(http::Method::DELETE, &path, None).await {
                    Ok(_) => info!(%node, "node removed"),
                    Err(flotilla_member::admin::client::AdminError::Refused {
                        status: 404,
                        ..
                    }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // A control plane machine of several takes its member along.
        if ctx.provider.replicated(&namespace, &cluster_name)
            && objects::label(&dm, api::CONTROL_PLANE_LABEL).is_some()
        {
            ctx.provider
                .remove_replica(&namespace, &cluster_name, &node)
                .await?;
        }
        objects
            .remove_finalizer(&kind, &dm, api::DOCKERMACHINE_FINALIZER)
            .await?;
        return Ok(None);
    }
    objects
        .add_finalizer(&kind, &dm, api::DOCKERMACHINE_FINALIZER)
        .await?;
    let Some(machine) = objects.get(&api::machines(), &machine_name).await? else {
        return Ok(Some(Duration::from_secs(1)));
    };
    let Some(cluster) = objects.get(&api::clusters(), &cluster_name).await? else {
        return Ok(Some(Duration::from_secs(1)));
    };
    let mut status = dm["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    // The bootstrap data, as CAPD waits for it.
    let Some(secret_name) = machine["spec"]["bootstrap"]["dataSecretName"].as_str() else {
        set_condition(
            &mut status,
            "Ready",
            "False",
            "WaitingForBootstrapData",
            "Waiting for the Machine's bootstrap data",
        );
        if status != dm["status"] {
            objects.status(&kind, &name, status).await?;
        }
        return Ok(Some(Duration::from_secs(1)));
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let data = secrets
        .get_opt(secret_name)
        .await?
        .and_then(|s| s.data)
        .and_then(|d| {
            d.get("value")
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        })
        .ok_or_else(|| {
            Error::Provider(format!("bootstrap data Secret {secret_name} has no value"))
        })?;
    let files = written_files(&data);
    let file = |path: &str| {
        files
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, c)| c.clone())
    };
    let control_plane = objects::label(&machine, api::CONTROL_PLANE_LABEL).is_some();

    let own_member =
        ctx.provider
            .member_of_machine(&namespace, &cluster_name, &node, control_plane);
    if let Some(dir) = &own_member
        && let Some(cause) = ctx.provider.exited(dir)
    {
        // As CAPD's container that would not start: said, and tried again.
        let message = format!("the cluster's member exited: {cause}");
        warn!(machine = %name, cluster = %cluster_name, %cause, "the cluster's member exited");
        set_condition(
            &mut status,
            "ContainerProvisioned",
            "False",
            "ContainerProvisioningFailed",
            &message,
        );
        set_condition(
            &mut status,
            "Ready",
            "False",
            "ContainerProvisioningFailed",
            &message,
        );
        if status != dm["status"] {
            objects.status(&kind, &name, status).await?;
        }
        if control_plane {
            // Started again at the next look.
            ctx.provider.forget(dir);
        }
        return Ok(Some(Duration::from_secs(5)));
    }
    // A control plane machine runs the cluster's API server.
    if control_plane {
        let (Some(ca_cert), Some(ca_key)) = (file(CA_CERT_PATH), file(CA_KEY_PATH)) else {
            return Err(Error::Provider(format!(
                "bootstrap data {secret_name} lacks the cluster CA"
            )));
        };
        let infra = Ref::from_value(&cluster["spec"]["infrastructureRef"]);
        let dc = match &infra {
            Some(r) => objects.get(&r.resource(), &r.name).await?,
            None => None,
        };
        let port = cluster["spec"]["controlPlaneEndpoint"]["port"]
            .as_i64()
            .unwrap_or(0);
        if port == 0 {
            return Ok(Some(Duration::from_secs(1)));
        }
        let runtime = objects::annotation(&cluster, RUNTIME_ANNOTATION)
            .or_else(|| {
                dc.as_ref()
                    .and_then(|d| objects::annotation(d, RUNTIME_ANNOTATION))
            })
            .unwrap_or("sim");
        if runtime != "sim" && runtime != "netns" {
            let message = format!(
                "{RUNTIME_ANNOTATION}: {runtime:?} is not a runtime; use \"sim\" (simulated nodes) or \"netns\" (pods run as processes in network namespaces; needs root)"
            );
            set_condition(&mut status, "Ready", "False", "NotSupported", &message);
            if status != dm["status"] {
                objects.status(&kind, &name, status).await?;
            }
            return Ok(None);
        }
        let spec = MemberSpec {
            port: port as u16,
            ca_cert_pem: ca_cert,
            ca_key_pem: ca_key,
            pod_cidr: first_cidr(&cluster, "pods"),
            service_cidr: first_cidr(&cluster, "services"),
            runtime: runtime.to_string(),
        };
        if replicated(ctx, &namespace, &cluster_name, &machine, runtime).await? {
            ctx.provider
                .ensure_replica(&namespace, &cluster_name, &node, &spec)?;
        } else {
            ctx.provider.ensure(&namespace, &cluster_name, &spec)?;
        }
    }
    // A control plane machine of several is ready once its own member is.
    let own_ready = !(control_plane && ctx.provider.replicated(&namespace, &cluster_name))
        || own_member
            .as_deref()
            .is_some_and(|d| ctx.provider.member_ready(d));
    if !own_ready || !ctx.provider.ready(&namespace, &cluster_name) {
        // The last attempt's failure stays said while another is made.
        let failed = status["conditions"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == "Ready"))
            .is_some_and(|c| c["reason"] == "ContainerProvisioningFailed");
        if !failed {
            set_condition(
                &mut status,
                "Ready",
                "False",
                "WaitingForControlPlane",
                "Waiting for the cluster's API server",
            );
        }
        if status != dm["status"] {
            objects.status(&kind, &name, status).await?;
        }
        return Ok(Some(Duration::from_millis(300)));
    }

    // The machine joins as a node.
    let provider_id = format!("docker:////{node}");
    let mut spec = NodeSpec {
        provider_id: Some(provider_id.clone()),
        kubelet_version: machine["spec"]["version"].as_str().map(String::from),
        ..NodeSpec::default()
    };
    if control_plane {
        spec.labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        );
        spec.taints
            .push(json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}));
    }
    // Every control plane member runs the node while it leads.
    let node_spec = serde_json::to_value(&spec)?;
    for admin in ctx.provider.admins(&namespace, &cluster_name)? {
        admin
            .request(
                http::Method::PUT,
                &format!("/nodes/{node}"),
                Some(node_spec.clone()),
            )
            .await?;
    }
    if dm["spec"]["providerID"].as_str() != Some(provider_id.as_str()) {
        objects
            .merge(&kind, &name, json!({"spec": {"providerID": provider_id}}))
            .await?;
    }
    status["initialization"]["provisioned"] = json!(true);
    status["ready"] = json!(true);
    set_condition(
        &mut status,
        "ContainerProvisioned",
        "True",
        "Provisioned",
        "",
    );
    set_condition(
        &mut status,
        "BootstrapExecSucceeded",
        "True",
        "Succeeded",
        "",
    );
    set_condition(&mut status, "Ready", "True", "Ready", "");
    status["observedGeneration"] = dm["metadata"]["generation"].clone();
    if status != dm["status"] {
        objects.status(&kind, &name, status).await?;
    }
    // The member may be restarted (by hand, or after a crash): look again.
    Ok(Some(Duration::from_secs(10)))
}

/// Whether the cluster's control plane is one member per machine on a
/// shared etcd, behind an endpoint: decided when its first control plane
/// machine starts, by whether its KubeadmControlPlane asks for more than
/// one replica (and etcd is on this host, and the nodes are simulated,
/// which any member may run once it leads); kept for the cluster's life.
async fn replicated(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    machine: &Value,
    runtime: &str,
) -> Result<bool, Error> {
    if ctx.provider.replicated(namespace, cluster) {
        return Ok(true);
    }
    if ctx.provider.started(namespace, cluster) || ctx.provider.etcd.is_none() || runtime != "sim" {
        return Ok(false);
    }
    let Some(kcp) = objects::owner_named(machine, "KubeadmControlPlane") else {
        return Ok(false);
    };
    let objects = Objects::new(ctx.client.clone(), namespace);
    let replicas = objects
        .get(&api::kubeadm_control_planes(), kcp)
        .await?
        .and_then(|k| k["spec"]["replicas"].as_i64())
        .unwrap_or(1);
    Ok(replicas > 1)
}
