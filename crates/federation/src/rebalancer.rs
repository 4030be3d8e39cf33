//! WorkloadRebalancer (`apps.karmada.io/v1alpha1`): asks the scheduler for
//! a fresh division of each named workload by stamping its binding's
//! `rescheduleTriggeredAt`, records each workload's result, and deletes
//! itself `ttlSecondsAfterFinished` after it finished.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api::{
    Binding, ObservedWorkload, Scope, WorkloadRebalancer, WorkloadRebalancerStatus,
    binding_resource,
};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::kinds::scoped_api;
use crate::queue::{self, Next, WorkQueue};
use crate::{names, time};

/// How many objects are reconciled at once (a rebalancer stamps a few bindings).
const WORKERS: usize = 4;

pub async fn run(ctx: Ctx) {
    let queue = WorkQueue::named(ctx.metrics.queue("workloadrebalancer-controller"));
    let api: Api<WorkloadRebalancer> = Api::all(ctx.hub.clone());
    let (store, _watch) = queue::queue_touched(api, watcher::Config::default(), queue.clone());
    queue::reconcile_stored(queue, store, WORKERS, move |wr| reconcile(wr, ctx.clone())).await;
}

async fn reconcile(wr: Arc<WorkloadRebalancer>, ctx: Ctx) -> Result<Next, Error> {
    let api: Api<WorkloadRebalancer> = Api::all(ctx.hub.clone());
    let status = wr.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    if status.observed_generation == wr.metadata.generation
        && let Some(finished) = status
            .finish_time
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
    {
        let Some(ttl) = wr.spec.ttl_seconds_after_finished else {
            return Ok(None);
        };
        let expires = time::after(finished, time::seconds(ttl));
        if expires > now {
            let wait = time::until(now, expires);
            return Ok(Some(wait + Duration::from_millis(100)));
        }
        match api.delete(&wr.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(None);
    }
    let stamp = now.to_string();
    let mut observed = Vec::new();
    for w in &wr.spec.workloads {
        let scope = if w.namespace.is_empty() {
            Scope::Cluster
        } else {
            Scope::Namespaced
        };
        let bindings: Api<Binding> = scoped_api(
            ctx.hub.clone(),
            (!w.namespace.is_empty()).then_some(w.namespace.as_str()),
            &binding_resource(scope),
        );
        let name = names::binding_name(&w.kind, &w.name);
        let patch = json!({"spec": {"rescheduleTriggeredAt": stamp}});
        let (result, reason) = match bindings
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => ("Successful", None),
            Err(e) if is_not_found(&e) => ("Failed", Some("ReferencedBindingNotFound")),
            Err(e) => return Err(e.into()),
        };
        info!(rebalancer = %wr.name_any(), workload = %w.name, result, "rebalance asked");
        observed.push(ObservedWorkload {
            workload: w.clone(),
            result: Some(result.into()),
            reason: reason.map(Into::into),
        });
    }
    let status = WorkloadRebalancerStatus {
        observed_workloads: observed,
        observed_generation: wr.metadata.generation,
        finish_time: Some(stamp),
    };
    api.patch_status(
        &wr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await?;
    Ok(None)
}
