//! The Cluster controller: adopts the infrastructure and control plane
//! objects a Cluster references, mirrors their state into its phase,
//! conditions and replica counts, joins it to the fleet once Provisioned
//! (as Karmada's cluster-api discovery does), and on deletion tears it
//! down in upstream's order: out of the fleet, workers, control plane,
//! infrastructure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_federation::api::Cluster as FleetCluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::ApiResource;
use serde_json::{Value, json};
use tracing::info;

use crate::Context;
use crate::api::{self, Ref, annotations};
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "capi-cluster",
        kind: api::clusters(),
        wakers: vec![
            (api::machine_deployments(), runner::cluster_of),
            (api::machines(), runner::cluster_of),
            (api::kubeadm_control_planes(), runner::cluster_of),
            (api::docker_clusters(), runner::cluster_of),
            (api::dev_clusters(), runner::cluster_of),
        ],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, cluster| async move {
        reconcile(&ctx, cluster).await
    })
    .await;
}

/// What a referenced object is to the Cluster.
enum Referenced {
    /// No installed provider serves the kind.
    NoProvider(String),
    Missing,
    Found(Value),
}

async fn referenced(ctx: &Context, objects: &Objects, r: &Ref) -> Result<Referenced, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    if crds.get_opt(&r.crd_name()).await?.is_none() {
        return Ok(Referenced::NoProvider(format!(
            "no installed provider serves {kind} ({group}): customresourcedefinitions.apiextensions.k8s.io \"{crd}\" not found; install the provider that serves {kind} (clusterctl init --infrastructure ...), or reference a kind this control plane serves (DockerCluster, KubeadmControlPlane)",
            kind = r.kind,
            group = r.group,
            crd = r.crd_name(),
        )));
    }
    Ok(match objects.get(&r.resource(), &r.name).await? {
        Some(o) => Referenced::Found(o),
        None => Referenced::Missing,
    })
}

/// Labels a referenced object with the cluster's name and makes the
/// Cluster its owner, as upstream's Cluster controller does.
async fn adopt(
    objects: &Objects,
    resource: &ApiResource,
    object: &Value,
    cluster: &Value,
) -> Result<(), Error> {
    let name = objects::name(cluster);
    if objects::label(object, api::CLUSTER_NAME_LABEL) == Some(name)
        && objects::owned_by(object, cluster)
    {
        return Ok(());
    }
    let patch = json!({"metadata": {
        "labels": {api::CLUSTER_NAME_LABEL: name},
        "ownerReferences": objects::with_owner(object, cluster, false),
    }});
    objects.merge(resource, objects::name(object), patch).await
}

fn endpoint_valid(endpoint: &Value) -> bool {
    endpoint["host"].as_str().is_some_and(|h| !h.is_empty())
        && endpoint["port"].as_i64().is_some_and(|p| p != 0)
}

/// The counters of `status.controlPlane` / `status.workers`.
#[derive(Default)]
struct Counts {
    desired: i64,
    replicas: i64,
    ready: i64,
    available: i64,
    up_to_date: i64,
}

impl Counts {
    fn add(&mut self, desired: &Value, status: &Value) {
        let n = |v: &Value| v.as_i64().unwrap_or(0);
        self.desired += n(desired);
        self.replicas += n(&status["replicas"]);
        self.ready += n(&status["readyReplicas"]);
        self.available += n(&status["availableReplicas"]);
        self.up_to_date += n(&status["upToDateReplicas"]);
    }

    fn value(&self) -> Value {
        json!({
            "desiredReplicas": self.desired,
            "replicas": self.replicas,
            "readyReplicas": self.ready,
            "availableReplicas": self.available,
            "upToDateReplicas": self.up_to_date,
        })
    }
}

/// Follows the Cluster's `spec.<field>` reference: the object and its
/// reference once it exists (adopted by the Cluster); until then,
/// `condition` says why (no provider serves its kind, or it is missing)
/// and `again` when to look next.
async fn follow(
    ctx: &Context,
    objects: &Objects,
    cluster: &Value,
    field: &str,
    condition: &str,
    status: &mut Value,
    again: &mut Next,
) -> Result<Option<(Ref, Value)>, Error> {
    let Some(r) = Ref::from_value(&cluster["spec"][field]) else {
        return Ok(None);
    };
    match referenced(ctx, objects, &r).await? {
        Referenced::NoProvider(message) => {
            set_condition(status, condition, "Unknown", "InternalError", &message);
            *again = Some(Duration::from_secs(10));
            Ok(None)
        }
        Referenced::Missing => {
            let message = format!("{} does not exist", r.kind);
            set_condition(status, condition, "False", "ObjectDoesNotExist", &message);
            *again = Some(Duration::from_secs(5));
            Ok(None)
        }
        Referenced::Found(object) => {
            adopt(objects, &r.resource(), &object, cluster).await?;
            Ok(Some((r, object)))
        }
    }
}

async fn reconcile(ctx: &Context, cluster: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&cluster).to_string();
    let name = objects::name(&cluster).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let clusters = api::clusters();
    if objects::deleting(&cluster) {
        return delete(ctx, &objects, cluster).await;
    }
    objects
        .add_finalizer(&clusters, &cluster, api::CLUSTER_FINALIZER)
        .await?;
    let mut status = cluster["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let mut endpoint = cluster["spec"]["controlPlaneEndpoint"].clone();
    let mut again: Next = None;
    // A managed topology makes (and keeps) the objects referenced below.
    if !cluster["spec"]["topology"].is_null() {
        super::topology::reconcile(&objects, &cluster, &mut status).await?;
    }

    // Infrastructure.
    let mut infra_provisioned =
        cluster["spec"]["infrastructureRef"].is_null() && cluster["spec"]["topology"].is_null();
    if let Some((r, infra)) = follow(
        ctx,
        &objects,
        &cluster,
        "infrastructureRef",
        "InfrastructureReady",
        &mut status,
        &mut again,
    )
    .await?
    {
        infra_provisioned = super::infrastructure_ready(&mut status, &r.kind, &infra);
        if infra_provisioned
            && !endpoint_valid(&endpoint)
            && endpoint_valid(&infra["spec"]["controlPlaneEndpoint"])
        {
            endpoint = infra["spec"]["controlPlaneEndpoint"].clone();
        }
    }
    status["initialization"]["infrastructureProvisioned"] = json!(infra_provisioned);
    status["infrastructureReady"] = json!(infra_provisioned);

    // Control plane.
    let mut cp_counts = Counts::default();
    let mut cp_initialized = false;
    let mut cp_available = false;
    if cluster["spec"]["controlPlaneRef"].is_null() {
        set_condition(
            &mut status,
            "ControlPlaneAvailable",
            "False",
            "ObjectDoesNotExist",
            "no controlPlaneRef",
        );
    }
    if let Some((r, cp)) = follow(
        ctx,
        &objects,
        &cluster,
        "controlPlaneRef",
        "ControlPlaneAvailable",
        &mut status,
        &mut again,
    )
    .await?
    {
        cp_counts.add(&cp["spec"]["replicas"], &cp["status"]);
        cp_initialized = cp["status"]["initialization"]["controlPlaneInitialized"] == true
            || cp["status"]["initialized"] == true;
        cp_available = objects::condition_true(&cp, "Available");
        if cp_available {
            set_condition(
                &mut status,
                "ControlPlaneAvailable",
                "True",
                "Available",
                "",
            );
        } else {
            set_condition(
                &mut status,
                "ControlPlaneAvailable",
                "False",
                "NotAvailable",
                &format!("{r} is not available"),
            );
        }
        if !endpoint_valid(&endpoint) && endpoint_valid(&cp["spec"]["controlPlaneEndpoint"]) {
            endpoint = cp["spec"]["controlPlaneEndpoint"].clone();
        }
    }
    status["initialization"]["controlPlaneInitialized"] = json!(cp_initialized);
    status["controlPlaneReady"] = json!(cp_available);
    if cp_initialized {
        set_condition(
            &mut status,
            "ControlPlaneInitialized",
            "True",
            "Initialized",
            "",
        );
    } else {
        set_condition(
            &mut status,
            "ControlPlaneInitialized",
            "False",
            "NotInitialized",
            "Control plane not yet initialized",
        );
    }
    status["controlPlane"] = cp_counts.value();

    // Workers: the MachineDeployments of the cluster.
    let mut workers = Counts::default();
    let mut unavailable = Vec::new();
    let deployments = objects.list(&api::machine_deployments(), "").await?;
    let ours: Vec<&Value> = deployments
        .iter()
        .filter(|md| md["spec"]["clusterName"] == name.as_str())
        .collect();
    for md in &ours {
        workers.add(&md["spec"]["replicas"], &md["status"]);
        if !objects::condition_true(md, "Available") {
            unavailable.push(format!("MachineDeployment {}", objects::name(md)));
        }
    }
    status["workers"] = workers.value();
    let workers_available = unavailable.is_empty();
    if ours.is_empty() {
        set_condition(&mut status, "WorkersAvailable", "True", "NoWorkers", "");
    } else if workers_available {
        set_condition(&mut status, "WorkersAvailable", "True", "Available", "");
    } else {
        set_condition(
            &mut status,
            "WorkersAvailable",
            "False",
            "NotAvailable",
            &format!("{} not available", unavailable.join(", ")),
        );
    }

    // Phase and availability.
    let has_refs = !cluster["spec"]["infrastructureRef"].is_null()
        || !cluster["spec"]["controlPlaneRef"].is_null();
    let phase = if infra_provisioned && endpoint_valid(&endpoint) {
        "Provisioned"
    } else if has_refs {
        "Provisioning"
    } else {
        "Pending"
    };
    status["phase"] = json!(phase);
    let infra_ready =
        objects::condition_true(&json!({"status": status.clone()}), "InfrastructureReady")
            || infra_provisioned;
    if infra_ready && cp_available && workers_available {
        set_condition(&mut status, "Available", "True", "Available", "");
    } else {
        let why = if !infra_ready {
            "InfrastructureReady: not ready"
        } else if !cp_available {
            "ControlPlaneAvailable: control plane not available"
        } else {
            "WorkersAvailable: workers not available"
        };
        set_condition(&mut status, "Available", "False", "NotAvailable", why);
    }
    set_condition(&mut status, "Deleting", "False", "NotDeleting", "");
    set_condition(&mut status, "Paused", "False", "NotPaused", "");
    status["observedGeneration"] = cluster["metadata"]["generation"].clone();

    if endpoint_valid(&endpoint) && endpoint != cluster["spec"]["controlPlaneEndpoint"] {
        objects
            .merge(
                &clusters,
                &name,
                json!({"spec": {"controlPlaneEndpoint": endpoint}}),
            )
            .await?;
    }
    if status != cluster["status"] {
        objects.status(&clusters, &name, status.clone()).await?;
    }

    // Joined to the fleet once Provisioned and its API answers.
    if phase == "Provisioned" && cp_initialized {
        join(ctx, &cluster).await?;
    }
    let steady = phase == "Provisioned" && cp_available && workers_available;
    Ok(again.or(Some(if steady {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(2)
    })))
}

/// The fleet's name for a Cluster API cluster: its own, as Karmada's
/// discovery names it (the namespace is dropped).
fn joined_from(cluster: &Value) -> String {
    format!("{}/{}", objects::namespace(cluster), objects::name(cluster))
}

async fn join(ctx: &Context, cluster: &Value) -> Result<(), Error> {
    if objects::annotation(cluster, annotations::JOIN) == Some("false") {
        return Ok(());
    }
    let name = objects::name(cluster);
    let fleet: Api<FleetCluster> = Api::all(ctx.client.clone());
    if fleet.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let Some((text, _)) =
        crate::workload::kubeconfig(&ctx.client, objects::namespace(cluster), name).await?
    else {
        return Ok(());
    };
    let config = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|e| Error::Provider(format!("{name}-kubeconfig: {e}")))?;
    let credentials = flotilla_federation::join::credentials_of(
        &config,
        &format!("Secret {name}-kubeconfig"),
        None,
    )
    .map_err(|e| Error::Provider(e.to_string()))?;
    let labels: BTreeMap<String, String> = cluster["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let request = flotilla_federation::join::JoinRequest {
        name: name.to_string(),
        credentials,
        provider: Some("cluster-api".into()),
        labels,
        ..Default::default()
    };
    match flotilla_federation::join::join(&ctx.client, &request).await {
        Ok(_) => {}
        Err(flotilla_federation::join::JoinError::Duplicate(_)) => return Ok(()),
        Err(e) => return Err(Error::Provider(format!("joining the fleet: {e}"))),
    }
    let patch =
        json!({"metadata": {"annotations": {annotations::JOINED_FROM: joined_from(cluster)}}});
    fleet
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    info!(cluster = %joined_from(cluster), "joined the fleet");
    Ok(())
}

/// Deletion in upstream's order, one step per reconcile: out of the
/// fleet, then the workers, the control plane, the infrastructure.
async fn delete(ctx: &Context, objects: &Objects, cluster: Value) -> Result<Next, Error> {
    let name = objects::name(&cluster).to_string();
    let clusters = api::clusters();
    let mut status = cluster["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["phase"] = json!("Deleting");
    let step = |status: &mut Value, reason: &str, message: &str| {
        set_condition(status, "Deleting", "True", reason, message);
    };
    let write = |status: Value| {
        let objects = objects.clone();
        let name = name.clone();
        let before = cluster["status"].clone();
        async move {
            if status != before {
                objects.status(&api::clusters(), &name, status).await?;
            }
            Ok::<(), Error>(())
        }
    };

    // Out of the fleet, if this Cluster joined it.
    let fleet: Api<FleetCluster> = Api::all(ctx.client.clone());
    if let Some(joined) = fleet.get_opt(&name).await?
        && joined
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::JOINED_FROM))
            == Some(&joined_from(&cluster))
    {
        if joined.metadata.deletion_timestamp.is_none() {
            fleet.delete(&name, &Default::default()).await?;
            info!(cluster = %joined_from(&cluster), "leaving the fleet");
        }
        step(
            &mut status,
            "WaitingForBeforeDeleteHook",
            "Leaving the fleet",
        );
        write(status).await?;
        return Ok(Some(Duration::from_millis(500)));
    }

    // Workers.
    let of_cluster = |list: Vec<Value>| -> Vec<Value> {
        list.into_iter()
            .filter(|o| o["spec"]["clusterName"] == name.as_str())
            .collect()
    };
    let deployments = of_cluster(objects.list(&api::machine_deployments(), "").await?);
    let sets = of_cluster(objects.list(&api::machine_sets(), "").await?);
    let machines = of_cluster(objects.list(&api::machines(), "").await?);
    let workers: Vec<&Value> = machines
        .iter()
        .filter(|m| objects::label(m, api::CONTROL_PLANE_LABEL).is_none())
        .collect();
    if !deployments.is_empty() || !sets.is_empty() || !workers.is_empty() {
        for md in &deployments {
            objects
                .delete(&api::machine_deployments(), objects::name(md))
                .await?;
        }
        for ms in &sets {
            objects
                .delete(&api::machine_sets(), objects::name(ms))
                .await?;
        }
        for m in &workers {
            objects.delete(&api::machines(), objects::name(m)).await?;
        }
        step(
            &mut status,
            "WaitingForWorkersDeletion",
            &format!("{} worker Machines still exist", workers.len()),
        );
        write(status).await?;
        return Ok(Some(Duration::from_millis(500)));
    }

    // Control plane.
    if let Some(r) = Ref::from_value(&cluster["spec"]["controlPlaneRef"])
        && let Some(cp) = objects.get(&r.resource(), &r.name).await.ok().flatten()
    {
        if !objects::deleting(&cp) {
            objects.delete(&r.resource(), &r.name).await?;
        }
        step(
            &mut status,
            "WaitingForControlPlaneDeletion",
            &format!("{r} is being deleted"),
        );
        write(status).await?;
        return Ok(Some(Duration::from_millis(500)));
    }
    let control_plane_machines = machines.len();
    if control_plane_machines > 0 {
        for m in &machines {
            objects.delete(&api::machines(), objects::name(m)).await?;
        }
        step(
            &mut status,
            "WaitingForControlPlaneDeletion",
            &format!("{control_plane_machines} control plane Machines still exist"),
        );
        write(status).await?;
        return Ok(Some(Duration::from_millis(500)));
    }

    // Infrastructure.
    if let Some(r) = Ref::from_value(&cluster["spec"]["infrastructureRef"])
        && let Some(infra) = objects.get(&r.resource(), &r.name).await.ok().flatten()
    {
        if !objects::deleting(&infra) {
            objects.delete(&r.resource(), &r.name).await?;
        }
        step(
            &mut status,
            "WaitingForInfrastructureDeletion",
            &format!("{r} is being deleted"),
        );
        write(status).await?;
        return Ok(Some(Duration::from_millis(500)));
    }

    ctx.workloads.forget(objects::namespace(&cluster), &name);
    objects
        .remove_finalizer(&clusters, &cluster, api::CLUSTER_FINALIZER)
        .await?;
    info!(cluster = %joined_from(&cluster), "deleted");
    Ok(None)
}
