//! The StatefulSet controller: pods named `<set>-<ordinal>` with stable
//! hostnames, started in order (each waits for its predecessors to be
//! Running and Ready under OrderedReady, all at once under Parallel),
//! removed from the highest ordinal down, and rolled from the highest
//! ordinal to the partition one pod at a time.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1 as corev1;

use crate::pod::Pod;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::pods::PodControl;
use crate::controllers::status;
use crate::informer::owner_ref;
use crate::podutil::{self, CONTROLLER_REVISION_HASH};

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.statefulsets.own_triggers(|_| true);
    let from_pods = inf.pods.triggers(|c| {
        owner_ref::<Pod, StatefulSet>(c.object())
            .into_iter()
            .collect()
    });
    let control = Arc::new(PodControl::new(cluster.clone(), "statefulset-controller"));
    run_controller(
        "statefulset",
        cluster.statefulsets.clone(),
        vec![boxed(own), boxed(from_pods)],
        cluster,
        4,
        move |sts, cluster| reconcile(sts, cluster, control.clone()),
    )
}

fn ordinal(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

fn revision_of(p: &Pod) -> &str {
    p.labels()
        .get(CONTROLLER_REVISION_HASH)
        .map(String::as_str)
        .unwrap_or("")
}

fn healthy(p: &Pod) -> bool {
    podutil::phase(p) == "Running" && podutil::is_ready(p)
}

async fn reconcile(
    sts: Arc<StatefulSet>,
    cluster: Arc<Cluster>,
    control: Arc<PodControl>,
) -> Result<Action> {
    if sts.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = sts.namespace().unwrap_or_default();
    let name = sts.name_any();
    let key = format!("{ns}/{name}");
    let spec = sts.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let update_revision = format!("{name}-{}", podutil::template_hash(&spec.template, 0));
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let on_delete = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete");
    let old_status = sts.status.clone().unwrap_or_default();
    let current_revision = old_status
        .current_revision
        .clone()
        .unwrap_or_else(|| update_revision.clone());

    let mut by_ordinal: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
    for p in cluster.owned_pods(&sts.uid().unwrap_or_default()) {
        if let Some(i) = ordinal(&name, &p.name_any()) {
            by_ordinal.insert(i, p);
        }
    }
    if control.caught_up(&key, &ns) {
        let mut create = Vec::new();
        let mut delete = Vec::new();
        // Failed pods are replaced.
        for p in by_ordinal.values() {
            if matches!(podutil::phase(p), "Failed" | "Succeeded") {
                delete.push(p.name_any());
            }
        }
        for i in 0..replicas {
            match by_ordinal.get(&i) {
                None => {
                    // Pods below the partition keep the current revision.
                    let rev = if i < partition {
                        &current_revision
                    } else {
                        &update_revision
                    };
                    create.push(new_pod(&sts, i, rev));
                    if !parallel {
                        break;
                    }
                }
                Some(p) if !parallel && !healthy(p) => break,
                Some(_) => {}
            }
        }
        let all_healthy = (0..replicas).all(|i| by_ordinal.get(&i).is_some_and(|p| healthy(p)));
        let condemned: Vec<&Arc<Pod>> = by_ordinal.range(replicas..).map(|(_, p)| p).collect();
        if create.is_empty() && delete.is_empty() {
            if parallel {
                delete.extend(condemned.iter().map(|p| p.name_any()));
            } else if let Some(p) = condemned.last()
                && all_healthy
            {
                delete.push(p.name_any());
            }
        }
        // Rolling update: the highest ordinal not yet on the update revision.
        if create.is_empty()
            && delete.is_empty()
            && condemned.is_empty()
            && all_healthy
            && !on_delete
            && let Some(p) = (partition..replicas)
                .rev()
                .filter_map(|i| by_ordinal.get(&i))
                .find(|p| revision_of(p) != update_revision)
        {
            delete.push(p.name_any());
        }
        if !delete.is_empty() {
            control
                .delete(&key, &sts.object_ref(&()), &ns, delete)
                .await?;
        } else if !create.is_empty() {
            for pod in &create {
                if let Some(i) = pod.metadata.name.as_deref().and_then(|n| ordinal(&name, n)) {
                    create_claims(&cluster, &sts, i).await?;
                }
            }
            control
                .create(&key, &sts.object_ref(&()), &ns, create)
                .await?;
        }
    }

    let pods: Vec<&Arc<Pod>> = by_ordinal
        .values()
        .filter(|p| podutil::is_active(p))
        .collect();
    let updated = pods
        .iter()
        .filter(|p| revision_of(p) == update_revision)
        .count() as i32;
    let ready = pods.iter().filter(|p| podutil::is_ready(p)).count() as i32;
    let current_count = pods
        .iter()
        .filter(|p| revision_of(p) == current_revision)
        .count() as i32;
    let done = updated == replicas && ready == replicas && pods.len() as i32 == replicas;
    let (current_revision, current_count) = if done {
        (update_revision.clone(), updated)
    } else {
        (current_revision, current_count)
    };
    let mut status = json!({
        "observedGeneration": sts.metadata.generation.unwrap_or(0),
        "replicas": pods.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current_count,
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    });
    status::strip_zeros(&mut status, &["replicas", "availableReplicas"]);
    if let Some(patch) = status::patch(&sts.status, &status) {
        let api: Api<StatefulSet> =
            Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
        status::write(&api, &name, &patch).await?;
    }
    Ok(Action::await_change())
}

fn new_pod(sts: &StatefulSet, i: i32, revision: &str) -> corev1::Pod {
    let spec = sts.spec.clone().unwrap_or_default();
    let name = format!("{}-{i}", sts.name_any());
    let labels = BTreeMap::from([
        (CONTROLLER_REVISION_HASH.to_string(), revision.to_string()),
        (
            "statefulset.kubernetes.io/pod-name".to_string(),
            name.clone(),
        ),
        ("apps.kubernetes.io/pod-index".to_string(), i.to_string()),
    ]);
    let mut pod = podutil::pod_from_template(&spec.template, sts, Some(name.clone()), &labels);
    if let Some(ps) = pod.spec.as_mut() {
        // Each claim template becomes the volume of its name, unless the
        // template has a volume of that name already.
        let volumes = ps.volumes.get_or_insert_with(Vec::new);
        for template in spec.volume_claim_templates.iter().flatten() {
            let volume = template.metadata.name.clone().unwrap_or_default();
            if !volumes.iter().any(|v| v.name == volume) {
                volumes.push(corev1::Volume {
                    name: volume.clone(),
                    persistent_volume_claim: Some(corev1::PersistentVolumeClaimVolumeSource {
                        claim_name: claim_name(&volume, sts, i),
                        read_only: None,
                    }),
                    ..Default::default()
                });
            }
        }
        if volumes.is_empty() {
            ps.volumes = None;
        }
        ps.hostname = Some(name);
        if let Some(service) = spec.service_name.filter(|s| !s.is_empty()) {
            ps.subdomain = Some(service);
        }
    }
    pod
}

/// The claim of template `volume` for ordinal `i`: `<volume>-<set>-<i>`.
fn claim_name(volume: &str, sts: &StatefulSet, i: i32) -> String {
    format!("{volume}-{}-{i}", sts.name_any())
}

/// Creates the claims of ordinal `i` that do not exist yet, as upstream's
/// controller does before its pod: the template's labels and the set's
/// selector labels, owned by the set only when its retention policy
/// deletes them with it.
async fn create_claims(cluster: &Cluster, sts: &StatefulSet, i: i32) -> Result<()> {
    let spec = sts.spec.clone().unwrap_or_default();
    let ns = sts.namespace().unwrap_or_default();
    let api: Api<corev1::PersistentVolumeClaim> =
        Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
    let delete_with_set = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    for template in spec.volume_claim_templates.iter().flatten() {
        let volume = template.metadata.name.clone().unwrap_or_default();
        let name = claim_name(&volume, sts, i);
        if cluster
            .claims
            .get(&kube::runtime::reflector::ObjectRef::new(&name).within(&ns))
            .is_some()
        {
            continue;
        }
        let mut labels = template.metadata.labels.clone().unwrap_or_default();
        labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
        let claim = corev1::PersistentVolumeClaim {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name),
                namespace: Some(ns.clone()),
                labels: Some(labels),
                annotations: template.metadata.annotations.clone(),
                owner_references: delete_with_set.then(|| vec![podutil::controller_ref(sts)]),
                ..Default::default()
            },
            spec: template.spec.clone(),
            status: None,
        };
        match api.create(&kube::api::PostParams::default(), &claim).await {
            Ok(_) => cluster.recorder("statefulset-controller").emit(
                &sts.object_ref(&()),
                "SuccessfulCreate",
                format!(
                    "create Claim {} Pod {}-{i} in StatefulSet {} success",
                    claim.metadata.name.as_deref().unwrap_or_default(),
                    sts.name_any(),
                    sts.name_any()
                ),
            ),
            Err(e) if crate::cluster::is_status(&e, 409) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
