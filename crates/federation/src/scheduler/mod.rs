//! The scheduler: writes each binding's `spec.clusters` and its Scheduled
//! condition. Runs on binding changes and on changes to clusters that
//! matter to placement (labels, spec, API enablements, joins and leaves).

pub mod assign;
pub mod core;

use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use serde_json::json;
use tracing::{debug, info};

use crate::api::{Binding, BindingStatus, Scope, annotations, binding_resource};
use crate::conditions;
use crate::context::{Ctx, retry};
use crate::error::Error;

pub const SCHEDULER_NAME: &str = "default-scheduler";

pub async fn run(
    ctx: Ctx,
    scope: Scope,
    bindings: Store<Binding>,
    changes: impl Stream<Item = Result<Binding, kube::runtime::watcher::Error>> + Send + 'static,
    clusters_changed: impl Stream<Item = ()> + Send + 'static,
) {
    Controller::for_stream_with(changes, bindings, binding_resource(scope))
        .reconcile_all_on(clusters_changed)
        .run(reconcile, retry, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(binding: Arc<Binding>, ctx: Ctx) -> Result<Action, Error> {
    if binding.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = &binding.spec;
    if spec
        .scheduler_name
        .as_deref()
        .is_some_and(|n| n != SCHEDULER_NAME)
    {
        return Ok(Action::await_change());
    }
    if spec
        .suspension
        .as_ref()
        .and_then(|s| s.get("scheduling"))
        .and_then(|s| s.as_bool())
        == Some(true)
    {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let clusters: Vec<_> = ctx.clusters.state().iter().map(|c| (**c).clone()).collect();
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    let status = binding.status.clone().unwrap_or_default();
    let decision = core::schedule(
        spec,
        &uid,
        &clusters,
        status.scheduler_observing_affinity_name.as_deref(),
    );
    let ar = binding_resource(if binding.metadata.namespace.is_some() {
        Scope::Namespaced
    } else {
        Scope::Cluster
    });
    let api: Api<Binding> = match &binding.metadata.namespace {
        Some(ns) => Api::namespaced_with(ctx.hub.clone(), ns, &ar),
        None => Api::all_with(ctx.hub.clone(), &ar),
    };
    let name = binding.metadata.name.clone().unwrap_or_default();
    let placement = serde_json::to_string(&spec.placement.clone().unwrap_or_default())?;
    let mut current = (*binding).clone();
    let mut status = status;
    let mut changed = false;
    let result = match &decision {
        Ok(d) => {
            let recorded = current
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .get(annotations::APPLIED_PLACEMENT)
                .cloned();
            if d.clusters != spec.clusters || recorded.as_deref() != Some(placement.as_str()) {
                current.spec.clusters = d.clusters.clone();
                current
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(annotations::APPLIED_PLACEMENT.into(), placement);
                current = api.replace(&name, &PostParams::default(), &current).await?;
                changed = true;
                info!(binding = %name, clusters = ?d.clusters, "scheduled");
            }
            if status.scheduler_observing_affinity_name != d.affinity_name {
                status.scheduler_observing_affinity_name = d.affinity_name.clone();
                changed = true;
            }
            conditions::set(
                &mut status.conditions,
                "Scheduled",
                true,
                "Success",
                "Binding has been scheduled successfully.",
            )
        }
        Err(f) => {
            debug!(binding = %name, reason = f.reason, message = %f.message, "not scheduled");
            conditions::set(
                &mut status.conditions,
                "Scheduled",
                false,
                f.reason,
                &f.message,
            )
        }
    };
    let generation = current.metadata.generation;
    if result || changed || status.scheduler_observed_generation != generation {
        if changed {
            status.last_scheduled_time = Some(conditions::now().0.to_string());
        }
        status.scheduler_observed_generation = generation;
        write_status(&api, &current, &status).await?;
    }
    ctx.metrics
        .observe_scheduling(decision.is_ok(), started.elapsed());
    Ok(Action::await_change())
}

/// Writes a binding's scheduling status, guarded by its resourceVersion so
/// that a concurrent status writer is never overwritten.
async fn write_status(
    api: &Api<Binding>,
    binding: &Binding,
    status: &BindingStatus,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": binding.metadata.resource_version},
        "status": {
            "schedulerObservedGeneration": status.scheduler_observed_generation,
            "schedulerObservingAffinityName": status.scheduler_observing_affinity_name,
            "lastScheduledTime": status.last_scheduled_time,
            "conditions": status.conditions,
        }
    });
    let name = binding.metadata.name.as_deref().unwrap_or_default();
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
