//! The cluster controller: each joined member's execution namespace,
//! health (probed on an interval, damped by success and failure
//! thresholds as Karmada's `--cluster-success-threshold` and
//! `--cluster-failure-threshold`), status (version, APIs, nodes,
//! resources), the not-ready taint, and what leaving removes.

pub mod health;
pub mod probe;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{info, warn};

use crate::api::{CLUSTER_NAMESPACE, Cluster, ClusterStatus, Work, finalizers, sync_mode};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::queue::{self, Next, WorkQueue};
use crate::{finalizer, time};
use health::Damper;

pub const NOT_READY_TAINT: &str = "cluster.karmada.io/not-ready";
pub const UNREACHABLE_TAINT: &str = "cluster.karmada.io/unreachable";

struct ClusterCtx {
    shared: Ctx,
    dampers: Mutex<HashMap<String, Damper>>,
    namespaces: Mutex<HashSet<String>>,
}

/// How many objects are reconciled at once (a probe of an unreachable member waits out its timeout, holding one; as many as a fleet probes at once).
const WORKERS: usize = 128;

pub async fn run(
    ctx: Ctx,
    clusters: Store<Cluster>,
    changes: impl futures::Stream<Item = Result<Cluster, kube::runtime::watcher::Error>>
    + Send
    + 'static,
) {
    let cctx = Arc::new(ClusterCtx {
        shared: ctx,
        dampers: Mutex::default(),
        namespaces: Mutex::default(),
    });
    let queue = WorkQueue::named(cctx.shared.metrics.queue("cluster-controller"));
    tokio::join!(
        queue::feed(queue.clone(), queue::keys_of(changes)),
        queue::reconcile_stored(queue, clusters, WORKERS, move |c| reconcile(
            c,
            cctx.clone()
        )),
    );
}

async fn reconcile(cluster: Arc<Cluster>, cctx: Arc<ClusterCtx>) -> Result<Next, Error> {
    let ctx = &cctx.shared;
    let name = cluster.name_any();
    let api: Api<Cluster> = Api::all(ctx.hub.clone());
    if cluster.metadata.deletion_timestamp.is_some() {
        return finalize(&cctx, &cluster).await;
    }
    if finalizer::add(&api, &*cluster, finalizers::CLUSTER).await? {
        return Ok(None);
    }
    ensure_execution_namespace(&cctx, &name).await?;
    if cluster.spec.sync_mode == sync_mode::PULL {
        return monitor_lease(ctx, &api, &cluster).await;
    }
    if cluster.spec.sync_mode != sync_mode::PUSH {
        return Ok(None);
    }
    let interval = ctx.options.cluster_status_interval;
    // Our own status writes come back as events: do not probe again
    // before the interval is (nearly) up.
    let since = cctx
        .dampers
        .lock()
        .get(&name)
        .and_then(Damper::last_probe)
        .map(|t| t.elapsed());
    if let Some(since) = since
        && since < interval / 2
    {
        return Ok(Some(interval - since));
    }
    let (health, observation) = match ctx.members.get(&cluster).await {
        Ok(member) => match probe::health(&member.client).await {
            Ok(()) => (Ok(()), probe::observe(&member.client).await),
            Err(u) => (Err(u), Default::default()),
        },
        Err(e) => (
            Err(probe::Unhealthy {
                reason: "ClusterNotReachable",
                message: e.to_string(),
            }),
            Default::default(),
        ),
    };
    let old = cluster.status.clone().unwrap_or_default();
    let recorded = cluster.condition("Ready").map(|c| c.status == "True");
    let ready = cctx.dampers.lock().entry(name.clone()).or_default().decide(
        recorded,
        health.is_ok(),
        Instant::now(),
        ctx.options.cluster_success_threshold,
        ctx.options.cluster_failure_threshold,
    );
    let status = next_status(&old, &health, observation, ready);
    if status != old {
        if recorded != Some(ready) {
            info!(cluster = %name, ready, "cluster readiness changed");
        }
        let patch = json!({"status": status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    set_taints(&api, &cluster, (!ready).then_some(NOT_READY_TAINT)).await?;
    Ok(Some(interval))
}

/// A cluster's status after a probe: what the probe saw (what it could
/// not see kept from before) and the Ready condition as the damper
/// decided. The hub's probes of Push clusters and a Pull cluster's agent
/// write the same.
pub fn next_status(
    old: &ClusterStatus,
    health: &Result<(), probe::Unhealthy>,
    observation: probe::Observation,
    ready: bool,
) -> ClusterStatus {
    let mut status = ClusterStatus {
        kubernetes_version: observation
            .kubernetes_version
            .or(old.kubernetes_version.clone()),
        api_enablements: observation
            .api_enablements
            .unwrap_or(old.api_enablements.clone()),
        conditions: old.conditions.clone(),
        node_summary: observation.node_summary.or(old.node_summary.clone()),
        resource_summary: observation
            .resource_summary
            .or(old.resource_summary.clone()),
    };
    match (health, ready) {
        (_, true) => {
            conditions::set(
                &mut status.conditions,
                "Ready",
                true,
                "ClusterReady",
                "cluster is healthy and ready to accept workloads",
            );
        }
        (Err(u), false) => {
            conditions::set(&mut status.conditions, "Ready", false, u.reason, &u.message);
        }
        // Healthy again, but not yet for the success threshold.
        (Ok(()), false) => {}
    }
    status
}

/// A Pull cluster reports its own status through its agent; the hub only
/// watches the agent's Lease in `karmada-cluster`. Unrenewed for the
/// grace period (counted from the cluster's creation before the first
/// renewal), the cluster turns Ready=Unknown with the unreachable taint,
/// as Karmada's cluster controller does.
async fn monitor_lease(ctx: &Ctx, api: &Api<Cluster>, cluster: &Cluster) -> Result<Next, Error> {
    let name = cluster.name_any();
    let grace = ctx.options.cluster_monitor_grace_period;
    let leases: Api<Lease> = Api::namespaced(ctx.hub.clone(), CLUSTER_NAMESPACE);
    let renewed = leases
        .get_opt(&name)
        .await?
        .and_then(|l| l.spec?.renew_time)
        .map(|t| t.0)
        .or(cluster.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or_else(Timestamp::now);
    let deadline = time::after(renewed, grace);
    let now = Timestamp::now();
    let ready = cluster.condition("Ready").map(|c| c.status.as_str());
    if deadline <= now && ready != Some("Unknown") {
        let mut status = cluster.status.clone().unwrap_or_default();
        conditions::set_status(
            &mut status.conditions,
            "Ready",
            "Unknown",
            "ClusterStatusUnknown",
            &format!(
                "the cluster's agent has not renewed its lease for over {}s",
                grace.as_secs()
            ),
        );
        info!(cluster = %name, "pull cluster's lease lapsed; readiness unknown");
        let patch = json!({"status": {"conditions": status.conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        return Ok(Some(Duration::from_millis(200)));
    }
    let taint = match ready {
        Some("True") => None,
        Some("Unknown") => Some(UNREACHABLE_TAINT),
        _ => Some(NOT_READY_TAINT),
    };
    set_taints(api, cluster, taint).await?;
    // Looked at again when the lease would lapse, or sooner.
    let wait = time::until(now, deadline);
    Ok(Some(wait.clamp(
        Duration::from_millis(200),
        grace.max(Duration::from_secs(1)),
    )))
}

/// The NoSchedule readiness taint a cluster should carry: `not-ready`
/// (Ready False), `unreachable` (Unknown) or none (True); the other one
/// goes.
async fn set_taints(
    api: &Api<Cluster>,
    cluster: &Cluster,
    want: Option<&str>,
) -> Result<(), Error> {
    let mut taints = cluster.spec.taints.clone();
    let had = taints.clone();
    taints.retain(|t| {
        !((t.key == NOT_READY_TAINT || t.key == UNREACHABLE_TAINT) && Some(t.key.as_str()) != want)
    });
    if let Some(key) = want
        && !taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule")
    {
        taints.push(Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            time_added: Some(conditions::now()),
            value: None,
        });
    }
    if taints == had {
        return Ok(());
    }
    let patch = json!({"metadata": {"resourceVersion": cluster.resource_version()}, "spec": {"taints": taints}});
    api.patch(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn ensure_execution_namespace(cctx: &ClusterCtx, cluster: &str) -> Result<(), Error> {
    let ns = Cluster::execution_namespace(cluster);
    if cctx.namespaces.lock().contains(&ns) {
        return Ok(());
    }
    let api: Api<Namespace> = Api::all(cctx.shared.hub.clone());
    if api.get_opt(&ns).await?.is_none() {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        match api.create(&PostParams::default(), &namespace).await {
            Ok(_) => info!(namespace = %ns, "execution namespace created"),
            Err(e) if crate::error::is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    cctx.namespaces.lock().insert(ns);
    Ok(())
}

/// Leaving: the cluster's Works go first (their finalizers remove the
/// members' copies), then its execution namespace and the credentials
/// `flotilla join` stored.
async fn finalize(cctx: &ClusterCtx, cluster: &Cluster) -> Result<Next, Error> {
    let ctx = &cctx.shared;
    let name = cluster.name_any();
    if !cluster
        .finalizers()
        .iter()
        .any(|f| f == finalizers::CLUSTER)
    {
        return Ok(None);
    }
    let ns = Cluster::execution_namespace(&name);
    let works: Vec<Arc<Work>> = ctx.works.in_namespace(&ns);
    if !works.is_empty() {
        let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &ns);
        for w in works
            .iter()
            .filter(|w| w.metadata.deletion_timestamp.is_none())
        {
            match api.delete(&w.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Some(Duration::from_millis(500)));
    }
    match Api::<Namespace>::all(ctx.hub.clone())
        .delete(&ns, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    cctx.namespaces.lock().remove(&ns);
    if let Some(secret) = &cluster.spec.secret_ref
        && secret.namespace == CLUSTER_NAMESPACE
    {
        match Api::<Secret>::namespaced(ctx.hub.clone(), &secret.namespace)
            .delete(&secret.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => warn!(error = %e, cluster = %name, "cannot delete the cluster's credentials"),
        }
    }
    finalizer::remove(
        &Api::<Cluster>::all(ctx.hub.clone()),
        cluster,
        finalizers::CLUSTER,
    )
    .await?;
    ctx.members.forget(&name);
    cctx.dampers.lock().remove(&name);
    info!(cluster = %name, "cluster removed");
    Ok(None)
}
