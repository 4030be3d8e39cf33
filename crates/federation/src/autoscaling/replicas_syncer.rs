//! Karmada's `deploymentReplicasSyncer`: a Deployment template whose
//! replicas the members' HPAs own (labelled
//! `resourcetemplate.karmada.io/retain-replicas: "true"`, see
//! `scale_target_marker.rs`) and which is Divided among members gets, as
//! its `spec.replicas`, the sum the members run (its `status.replicas`),
//! so that the scheduler divides what the HPAs decided rather than a
//! stale count. Only once the status is fully collected: the binding
//! scheduled at its generation for the template's current count, every
//! target cluster reporting, and the reports adding up. A Duplicated
//! template keeps the count its user wrote.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use super::scale_target_marker::RETAIN_REPLICAS;
use crate::api::{Binding, Scope, binding_resource};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::names;
use crate::queue::{self, Next, WorkQueue};

/// How many objects are reconciled at once (one binding patch per Deployment).
const WORKERS: usize = 4;

pub async fn run(ctx: Ctx) {
    let api: Api<Deployment> = Api::all(ctx.hub.clone());
    let selected = watcher::Config::default().labels(&format!("{RETAIN_REPLICAS}=true"));
    let queue = WorkQueue::named(ctx.metrics.queue("replicas-syncer"));
    let (store, _watch) = queue::queue_touched(api, selected, queue.clone());
    queue::reconcile_stored(queue, store, WORKERS, move |d| reconcile(d, ctx.clone())).await;
}

async fn reconcile(deployment: Arc<Deployment>, ctx: Ctx) -> Result<Next, Error> {
    let ns = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let spec_replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    let status_replicas = deployment.status.as_ref().and_then(|s| s.replicas);
    let (Some(spec_replicas), Some(status_replicas)) = (spec_replicas, status_replicas) else {
        return Ok(None);
    };
    if spec_replicas == status_replicas || deployment.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let bindings: Api<Binding> =
        Api::namespaced_with(ctx.hub.clone(), &ns, &binding_resource(Scope::Namespaced));
    let binding = match bindings
        .get(&names::binding_name("Deployment", &name))
        .await
    {
        Ok(b) => b,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let divided = binding
        .spec
        .placement
        .as_ref()
        .and_then(|p| p.replica_scheduling.as_ref())
        .and_then(|r| r.replica_scheduling_type.as_deref())
        == Some("Divided");
    if !divided {
        return Ok(None);
    }
    if !collected(&binding, spec_replicas, status_replicas) {
        // The binding's reports are not all in: look again shortly.
        return Ok(Some(Duration::from_secs(1)));
    }
    let api: Api<Deployment> = Api::namespaced(ctx.hub.clone(), &ns);
    let patch = json!({
        "metadata": {"resourceVersion": deployment.resource_version()},
        "spec": {"replicas": status_replicas},
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            info!(namespace = %ns, %name, from = spec_replicas, to = status_replicas,
                  "template replicas synced from the members' autoscalers");
            Ok(None)
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether the template's status is the members' full report on the
/// current placement (Karmada's checks).
fn collected(binding: &Binding, spec_replicas: i32, status_replicas: i32) -> bool {
    let status = binding.status.clone().unwrap_or_default();
    if binding.spec.replicas != Some(spec_replicas)
        || status.scheduler_observed_generation != binding.metadata.generation
        || status.aggregated_status.len() != binding.spec.clusters.len()
    {
        return false;
    }
    let mut sum = 0i64;
    for item in &status.aggregated_status {
        let replicas = item
            .status
            .as_ref()
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if replicas <= 0 {
            return false;
        }
        sum += replicas;
    }
    sum == i64::from(status_replicas)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(value: Value) -> Binding {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_a_full_report_of_the_current_placement_counts() {
        let full = json!({
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "web-deployment", "generation": 3},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "replicas": 4,
                     "clusters": [{"name": "member1", "replicas": 2}, {"name": "member2", "replicas": 2}]},
            "status": {"schedulerObservedGeneration": 3, "aggregatedStatus": [
                {"clusterName": "member1", "status": {"replicas": 3}},
                {"clusterName": "member2", "status": {"replicas": 3}}]}
        });
        assert!(collected(&binding(full.clone()), 4, 6));
        // Another sum, a stale schedule, a cluster not reporting.
        assert!(!collected(&binding(full.clone()), 4, 5));
        let mut stale = full.clone();
        stale["status"]["schedulerObservedGeneration"] = json!(2);
        assert!(!collected(&binding(stale), 4, 6));
        let mut missing = full;
        missing["status"]["aggregatedStatus"][1]["status"] = json!({});
        assert!(!collected(&binding(missing), 4, 6));
    }
}
