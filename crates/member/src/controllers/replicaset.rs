//! The ReplicaSet controller: keeps `spec.replicas` active pods of the
//! template, deleting the least useful first (unscheduled, then pending,
//! then not ready, then the youngest), and reports replicas,
//! fullyLabeledReplicas, readyReplicas and availableReplicas.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::pod::Pod;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::pods::PodControl;
use crate::controllers::status;
use crate::informer::owner_ref;
use crate::podutil;

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.replicasets.own_triggers(|_| true);
    let from_pods = inf.pods.triggers(|c| {
        owner_ref::<Pod, ReplicaSet>(c.object())
            .into_iter()
            .collect()
    });
    let control = Arc::new(PodControl::new(cluster.clone(), "replicaset-controller"));
    run_controller(
        "replicaset",
        cluster.replicasets.clone(),
        vec![boxed(own), boxed(from_pods)],
        cluster,
        4,
        move |rs, cluster| reconcile(rs, cluster, control.clone()),
    )
}

/// Lower sorts first for deletion, as upstream's ActivePods ranking.
fn deletion_rank(p: &Pod) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let unscheduled = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    let phase = match podutil::phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    (
        u8::from(!unscheduled),
        phase,
        u8::from(podutil::is_ready(p)),
        std::cmp::Reverse(created),
    )
}

async fn reconcile(
    rs: Arc<ReplicaSet>,
    cluster: Arc<Cluster>,
    control: Arc<PodControl>,
) -> Result<Action> {
    let ns = rs.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", rs.name_any());
    if rs.metadata.deletion_timestamp.is_some() {
        control.forget(&key);
        return Ok(Action::await_change());
    }
    let uid = rs.uid().unwrap_or_default();
    let spec = rs.spec.clone().unwrap_or_default();
    let min_ready =
        Duration::from_secs(u64::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0));
    let mut failure = None;
    if control.caught_up(&key, &ns) {
        let mut active: Vec<Arc<Pod>> = cluster
            .owned_pods(&uid)
            .into_iter()
            .filter(|p| podutil::is_active(p))
            .collect();
        let want = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
        if active.len() < want {
            let template = spec.template.clone().unwrap_or_default();
            let pods = (active.len()..want)
                .map(|_| podutil::pod_from_template(&template, rs.as_ref(), None, &BTreeMap::new()))
                .collect();
            if let Err(e) = control.create(&key, &rs.object_ref(&()), &ns, pods).await {
                failure = Some(e.to_string());
            }
        } else if active.len() > want {
            active.sort_by_key(|p| deletion_rank(p));
            let doomed = active[..active.len() - want]
                .iter()
                .map(|p| p.name_any())
                .collect();
            control
                .delete(&key, &rs.object_ref(&()), &ns, doomed)
                .await?;
        }
    }
    // Status from what the cache shows now.
    let active: Vec<Arc<Pod>> = cluster
        .owned_pods(&uid)
        .into_iter()
        .filter(|p| podutil::is_active(p))
        .collect();
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let fully_labeled = active
        .iter()
        .filter(|p| {
            template_labels
                .iter()
                .all(|(k, v)| p.labels().get(k) == Some(v))
        })
        .count();
    let ready = active.iter().filter(|p| podutil::is_ready(p)).count();
    let available = active
        .iter()
        .filter(|p| podutil::is_available(p, min_ready))
        .count();
    let next_available = active
        .iter()
        .filter_map(|p| podutil::available_in(p, min_ready))
        .min();
    let mut status = json!({
        "replicas": active.len(),
        "fullyLabeledReplicas": fully_labeled,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": rs.metadata.generation.unwrap_or(0),
    });
    let old = serde_json::to_value(&rs.status).unwrap_or(Value::Null);
    let old_failure = old.get("conditions").cloned();
    if let Some(message) = &failure {
        let since = old_failure
            .as_ref()
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("lastTransitionTime"))
            .cloned()
            .unwrap_or_else(|| json!(podutil::now()));
        status["conditions"] = json!([{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                       "message": message, "lastTransitionTime": since}]);
    }
    write_status(&cluster, &rs, status).await?;
    if failure.is_some() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    Ok(match next_available {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

async fn write_status(cluster: &Cluster, rs: &ReplicaSet, mut status: Value) -> Result<()> {
    status::strip_zeros(&mut status, &["replicas"]);
    let Some(patch) = status::patch(&rs.status, &status) else {
        return Ok(());
    };
    let api: Api<ReplicaSet> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &rs.namespace().unwrap_or_default(),
    );
    status::write(&api, &rs.name_any(), &patch).await?;
    Ok(())
}
