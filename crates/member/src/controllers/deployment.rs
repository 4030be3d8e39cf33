//! The Deployment controller: one ReplicaSet per template revision (named
//! with the pod-template-hash), rolled by RollingUpdate within maxSurge and
//! maxUnavailable or by Recreate, old revisions pruned past
//! revisionHistoryLimit, and upstream's status and conditions (Available,
//! Progressing with NewReplicaSetAvailable / ReplicaSetUpdated /
//! ProgressDeadlineExceeded) so `kubectl rollout status` works.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, is_status, run_controller};
use crate::controllers::status;
use crate::informer::owner_ref;
use crate::podutil::{self, POD_TEMPLATE_HASH};

const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.deployments.own_triggers(|_| true);
    let from_rs = inf.replicasets.triggers(|c| {
        owner_ref::<ReplicaSet, Deployment>(c.object())
            .into_iter()
            .collect()
    });
    run_controller(
        "deployment",
        cluster.deployments.clone(),
        vec![boxed(own), boxed(from_rs)],
        cluster,
        4,
        reconcile,
    )
}

fn replicas_of(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// maxSurge and maxUnavailable resolved against the replica count; both
/// zero would stall a rollout, so maxUnavailable becomes 1 (upstream).
fn surge_and_unavailable(d: &Deployment, replicas: i32) -> (i32, i32) {
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return (0, replicas);
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let pct25 = k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("25%".into());
    let surge = podutil::int_or_percent(
        Some(ru.and_then(|r| r.max_surge.as_ref()).unwrap_or(&pct25)),
        replicas,
        true,
        0,
    );
    let unavailable = podutil::int_or_percent(
        Some(
            ru.and_then(|r| r.max_unavailable.as_ref())
                .unwrap_or(&pct25),
        ),
        replicas,
        false,
        0,
    );
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable.min(replicas))
    }
}

async fn scale(
    cluster: &Cluster,
    rs: &ReplicaSet,
    replicas: i32,
    d: &Deployment,
    max_surge: i32,
) -> Result<()> {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if replicas_of(rs) == replicas
        && rs.annotations().get(DESIRED) == Some(&desired.to_string())
        && rs.annotations().get(MAX_REPLICAS) == Some(&(desired + max_surge).to_string())
    {
        return Ok(());
    }
    let api: Api<ReplicaSet> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &rs.namespace().unwrap_or_default(),
    );
    let patch = json!({
        "metadata": {"annotations": {DESIRED: desired.to_string(), MAX_REPLICAS: (desired + max_surge).to_string()}},
        "spec": {"replicas": replicas},
    });
    if status::patch_object(&api, &rs.name_any(), &patch).await? {
        record_scaling(cluster, d, &rs.name_any(), replicas_of(rs), replicas);
    }
    Ok(())
}

/// The Event upstream's controller records when it scales a ReplicaSet.
fn record_scaling(cluster: &Cluster, d: &Deployment, rs: &str, from: i32, to: i32) {
    if from == to {
        return;
    }
    let direction = if to > from { "up" } else { "down" };
    cluster.recorder("deployment-controller").emit(
        &d.object_ref(&()),
        "ScalingReplicaSet",
        format!("Scaled {direction} replica set {rs} from {from} to {to}"),
    );
}

async fn reconcile(d: Arc<Deployment>, cluster: Arc<Cluster>) -> Result<Action> {
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = d.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1);
    let mut all: Vec<Arc<ReplicaSet>> = cluster
        .replicasets_by_owner
        .get(&d.uid().unwrap_or_default());
    all.sort_by_key(|rs| (revision(rs), rs.metadata.creation_timestamp.clone()));
    let new_rs = all
        .iter()
        .find(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| podutil::same_template(t, &spec.template))
        })
        .cloned();
    let old: Vec<Arc<ReplicaSet>> = all
        .iter()
        .filter(|rs| new_rs.as_ref().is_none_or(|n| n.uid() != rs.uid()))
        .cloned()
        .collect();
    let max_revision = all.iter().map(|rs| revision(rs)).max().unwrap_or(0);
    let (max_surge, max_unavailable) = surge_and_unavailable(&d, replicas);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let paused = spec.paused.unwrap_or(false);
    let mut created_new = None;

    let new_rs = match new_rs {
        Some(rs) => {
            // A rollback to an older template makes it the newest revision.
            if revision(&rs) < max_revision && !paused {
                bump_revision(&cluster, &rs, max_revision + 1).await?;
            }
            Some(rs)
        }
        None if paused => None,
        None => {
            let old_total: i32 = old.iter().map(|rs| replicas_of(rs)).sum();
            let initial = if recreate {
                0
            } else {
                // Room within maxSurge, never beyond the target.
                (replicas + max_surge - old_total).clamp(0, replicas)
            };
            let rs = create_replicaset(&cluster, &d, initial, max_revision + 1, max_surge).await?;
            created_new = Some(rs.name_any());
            Some(Arc::new(rs))
        }
    };

    if let Some(new_rs) = &new_rs
        && !paused
    {
        if recreate {
            let old_running: i32 = old.iter().map(|rs| status_of(rs).0 + replicas_of(rs)).sum();
            for rs in &old {
                scale(&cluster, rs, 0, &d, max_surge).await?;
            }
            if old_running == 0 {
                scale(&cluster, new_rs, replicas, &d, max_surge).await?;
            }
        } else {
            roll(
                &cluster,
                &d,
                new_rs,
                &old,
                replicas,
                max_surge,
                max_unavailable,
            )
            .await?;
        }
    } else if let Some(new_rs) = &new_rs {
        // Paused: scale only, keeping the revisions as they are.
        if old.iter().all(|rs| replicas_of(rs) == 0) {
            scale(&cluster, new_rs, replicas, &d, max_surge).await?;
        }
    }
    cleanup(&cluster, &d, &old).await;
    sync_status(
        &cluster,
        &d,
        new_rs.as_deref(),
        &all,
        created_new,
        replicas,
        max_unavailable,
    )
    .await
}

async fn bump_revision(cluster: &Cluster, rs: &ReplicaSet, revision: i64) -> Result<()> {
    let api: Api<ReplicaSet> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &rs.namespace().unwrap_or_default(),
    );
    let patch = json!({"metadata": {"annotations": {REVISION: revision.to_string()}}});
    api.patch(
        &rs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

async fn create_replicaset(
    cluster: &Cluster,
    d: &Deployment,
    replicas: i32,
    revision: i64,
    max_surge: i32,
) -> Result<ReplicaSet> {
    let spec = d.spec.clone().unwrap_or_default();
    let collisions = d
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let hash = podutil::template_hash(&spec.template, collisions);
    let mut template = spec.template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let desired = spec.replicas.unwrap_or(1);
    let rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", d.name_any())),
            namespace: d.namespace(),
            labels: Some(meta.labels.clone().unwrap_or_default()),
            annotations: Some(BTreeMap::from([
                (REVISION.to_string(), revision.to_string()),
                (DESIRED.to_string(), desired.to_string()),
                (MAX_REPLICAS.to_string(), (desired + max_surge).to_string()),
            ])),
            owner_references: Some(vec![podutil::controller_ref(d)]),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    };
    let api: Api<ReplicaSet> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &d.namespace().unwrap_or_default(),
    );
    match api.create(&PostParams::default(), &rs).await {
        Ok(created) => {
            record_scaling(cluster, d, &created.name_any(), 0, replicas);
            Ok(created)
        }
        // The cache lags our own create: use what is there.
        Err(e) if is_status(&e, 409) => Ok(api.get(&rs.name_any()).await?),
        Err(e) => Err(e.into()),
    }
}

/// One step of a rolling update: scale the new ReplicaSet up within
/// maxSurge, then old ones down while availability stays above
/// replicas - maxUnavailable.
async fn roll(
    cluster: &Cluster,
    d: &Deployment,
    new_rs: &ReplicaSet,
    old: &[Arc<ReplicaSet>],
    replicas: i32,
    max_surge: i32,
    max_unavailable: i32,
) -> Result<()> {
    let new_count = replicas_of(new_rs);
    let old_total: i32 = old.iter().map(|rs| replicas_of(rs)).sum();
    let mut new_target = new_count;
    if new_count > replicas {
        new_target = replicas;
    } else if new_count < replicas {
        let room = replicas + max_surge - (new_count + old_total);
        new_target = new_count + room.clamp(0, replicas - new_count);
    }
    scale(cluster, new_rs, new_target, d, max_surge).await?;
    if old_total == 0 {
        return Ok(());
    }
    let total = new_target + old_total;
    let min_available = replicas - max_unavailable;
    let new_unavailable = new_target - status_of(new_rs).2;
    let mut budget = total - min_available - new_unavailable;
    if budget <= 0 {
        return Ok(());
    }
    // Unhealthy old replicas go first: they cost no availability.
    let mut targets: Vec<(Arc<ReplicaSet>, i32)> =
        old.iter().map(|rs| (rs.clone(), replicas_of(rs))).collect();
    for (rs, target) in targets.iter_mut() {
        let unhealthy = (*target - status_of(rs).2).max(0);
        let cut = unhealthy.min(budget);
        *target -= cut;
        budget -= cut;
    }
    // Then available ones, oldest first, as long as enough stay available.
    let available: i32 = status_of(new_rs).2 + old.iter().map(|rs| status_of(rs).2).sum::<i32>();
    let mut removable = (available - min_available).min(budget).max(0);
    for (_, target) in targets.iter_mut() {
        let cut = (*target).min(removable);
        *target -= cut;
        removable -= cut;
    }
    for (rs, target) in targets {
        if target != replicas_of(&rs) {
            scale(cluster, &rs, target, d, max_surge).await?;
        }
    }
    Ok(())
}

/// Deletes old, empty ReplicaSets beyond revisionHistoryLimit.
async fn cleanup(cluster: &Cluster, d: &Deployment, old: &[Arc<ReplicaSet>]) {
    let limit = usize::try_from(
        d.spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10),
    )
    .unwrap_or(10);
    let empty: Vec<&Arc<ReplicaSet>> = old
        .iter()
        .filter(|rs| replicas_of(rs) == 0 && status_of(rs).0 == 0)
        .collect();
    if empty.len() <= limit {
        return;
    }
    let api: Api<ReplicaSet> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &d.namespace().unwrap_or_default(),
    );
    for rs in &empty[..empty.len() - limit] {
        let _ = api
            .delete(&rs.name_any(), &DeleteParams::background())
            .await;
    }
}

fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: String,
    old: &[DeploymentCondition],
    progress: bool,
) -> Value {
    let now = podutil::now();
    let previous = old.iter().find(|c| c.type_ == kind);
    let same = previous.is_some_and(|c| c.status == status);
    let transition = previous
        .filter(|_| same)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    // lastUpdateTime moves when the condition changes or progress is made.
    let unchanged = previous.is_some_and(|c| {
        same && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(&message)
    });
    let update = if unchanged && !progress {
        previous
            .and_then(|c| c.last_update_time.clone())
            .unwrap_or_else(|| now.clone())
    } else {
        now
    };
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": update, "lastTransitionTime": transition})
}

#[allow(clippy::too_many_arguments)]
async fn sync_status(
    cluster: &Cluster,
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    all: &[Arc<ReplicaSet>],
    created_new: Option<String>,
    replicas: i32,
    max_unavailable: i32,
) -> Result<Action> {
    let spec_total: i32 = all.iter().map(|rs| replicas_of(rs)).sum();
    let actual: i32 = all.iter().map(|rs| status_of(rs).0).sum();
    let ready: i32 = all.iter().map(|rs| status_of(rs).1).sum();
    let available: i32 = all.iter().map(|rs| status_of(rs).2).sum();
    let updated = new_rs.map(|rs| status_of(rs).0).unwrap_or(0);
    let new_available = new_rs.map(|rs| status_of(rs).2).unwrap_or(0);
    let old_status = d.status.clone().unwrap_or_default();
    let old_conditions = old_status.conditions.clone().unwrap_or_default();
    let new_name = new_rs
        .map(|rs| rs.name_any())
        .or(created_new.clone())
        .unwrap_or_default();

    let available_condition = if available >= replicas - max_unavailable {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            &old_conditions,
            false,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            &old_conditions,
            false,
        )
    };
    let complete = updated == replicas && new_available == replicas && actual == replicas;
    let progressed = old_status.replicas.unwrap_or(0) != actual
        || old_status.updated_replicas.unwrap_or(0) != updated
        || old_status.available_replicas.unwrap_or(0) != available
        || old_status.ready_replicas.unwrap_or(0) != ready;
    let deadline = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(600);
    let previous = old_conditions.iter().find(|c| c.type_ == "Progressing");
    // Once timed out, a Deployment stays so until it progresses again.
    let timed_out = previous.is_some_and(|c| {
        c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            || (c.reason.as_deref() != Some("NewReplicaSetAvailable")
                && c.last_update_time.as_ref().is_some_and(|t| {
                    podutil::since(t) > Duration::from_secs(u64::try_from(deadline).unwrap_or(600))
                }))
    });
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let mut requeue = None;
    let progressing = if paused {
        condition(
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            &old_conditions,
            false,
        )
    } else if complete {
        condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            &old_conditions,
            false,
        )
    } else if let Some(name) = &created_new {
        condition(
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            format!("Created new replica set \"{name}\""),
            &old_conditions,
            true,
        )
    } else if progressed || !timed_out {
        let c = condition(
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{new_name}\" is progressing."),
            &old_conditions,
            progressed,
        );
        // Come back when the deadline would pass without progress.
        requeue = Some(
            Duration::from_secs(u64::try_from(deadline).unwrap_or(600)) + Duration::from_secs(1),
        );
        c
    } else {
        condition(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{new_name}\" has timed out progressing."),
            &old_conditions,
            false,
        )
    };
    let mut status = json!({
        "observedGeneration": d.metadata.generation.unwrap_or(0),
        "replicas": actual,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": (spec_total - available).max(0),
        "conditions": [available_condition, progressing],
    });
    status::strip_zeros(&mut status, &[]);
    if let Some(c) = old_status.collision_count {
        status["collisionCount"] = json!(c);
    }
    let api: Api<Deployment> = Api::namespaced(
        cluster.clients.controller_manager.clone(),
        &d.namespace().unwrap_or_default(),
    );
    // The Deployment carries its newest revision, as upstream.
    if let Some(rs) = new_rs {
        let rev = revision(rs).to_string();
        if d.annotations().get(REVISION) != Some(&rev) && rev != "0" {
            let patch = json!({"metadata": {"annotations": {REVISION: rev}}});
            if !status::patch_object(&api, &d.name_any(), &patch).await? {
                return Ok(Action::await_change());
            }
        }
    }
    if let Some(patch) = status::patch(&d.status, &status)
        && !status::write(&api, &d.name_any(), &patch).await?
    {
        return Ok(Action::await_change());
    }
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}
