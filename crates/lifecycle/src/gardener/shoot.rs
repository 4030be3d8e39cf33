//! The Shoot controller: schedules a Shoot to a Seed of its provider
//! (as gardener-scheduler, with the Seed's default networks), makes its
//! Cluster API objects (`plan.rs`) and keeps them as the Shoot says
//! (version, worker pools, hibernation), reports Gardener's status from
//! them, and on deletion removes its Cluster before letting it go.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tracing::info;

use super::api::{self as gapi, POOL_LABEL, SHOOT_NAME_LABEL, STATUS_LABEL};
use super::plan::{self, Observed};
use crate::Context;
use crate::api;
use crate::error::Error;
use crate::objects::{self, Objects};
use crate::runner::{self, Controller, Next};

pub async fn run(ctx: Arc<Context>) {
    let owner = |o: &Value| runner::owners_of_kind(o, "Shoot");
    let controller = Controller {
        name: "gardener-shoot",
        kind: gapi::shoots(),
        wakers: vec![
            (api::clusters(), owner),
            (api::machine_deployments(), owner),
            (api::kubeadm_control_planes(), owner),
        ],
        // A shoot's cluster has its name.
        nodes: Some(|change| vec![change.cluster.clone()]),
    };
    runner::run_in(ctx, controller, |ctx, shoot| async move {
        reconcile(&ctx, shoot).await
    })
    .await;
}

/// How often a settled Shoot's health is looked at again (its nodes are
/// not watched).
const HEALTH_EVERY: Duration = Duration::from_secs(10);
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

async fn reconcile(ctx: &Context, shoot: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&shoot).to_string();
    let name = objects::name(&shoot).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let shoots = gapi::shoots();
    if objects::deleting(&shoot) {
        return delete(&objects, &shoot).await;
    }
    objects
        .add_finalizer(&shoots, &shoot, gapi::FINALIZER)
        .await?;
    if shoot["spec"]["seedName"].as_str().is_none() {
        return schedule(ctx, &objects, &shoot).await;
    }
    let next_trigger = match hibernate_on_schedule(&objects, &shoot).await? {
        Scheduled::Changed => return Ok(None),
        Scheduled::Next(next) => next,
    };
    let mut observed = Observed::default();
    match plan::manifests(&shoot) {
        Ok(manifests) => {
            if let Err(error) = converge(&objects, &name, manifests).await {
                observed.error = Some(error.to_string());
            }
        }
        Err(error) => observed.error = Some(error),
    }
    observe(ctx, &objects, &name, &mut observed).await?;
    // Made during each operation, as Gardener's reconcile makes it; not
    // asked again while the Shoot stays settled.
    if observed.api_available && !plan::settled(&shoot) {
        ensure_viewers(ctx, &namespace, &name).await;
    }
    let status = plan::status(&shoot, &observed, &technical_id(ctx, &shoot).await);
    let label = plan::health_label(&status);
    let settled = status["lastOperation"]["state"] == "Succeeded";
    if status != shoot["status"] {
        // A merge patch: what is no longer reported is removed.
        let mut patch = status.clone();
        for gone in ["lastErrors", "advertisedAddresses"] {
            if shoot["status"].get(gone).is_some() && status.get(gone).is_none() {
                patch[gone] = Value::Null;
            }
        }
        objects.status(&shoots, &name, patch).await?;
    }
    if objects::label(&shoot, STATUS_LABEL) != Some(label) {
        objects
            .merge(
                &shoots,
                &name,
                json!({"metadata": {"labels": {STATUS_LABEL: label}}}),
            )
            .await?;
    }
    let again = if settled {
        HEALTH_EVERY
    } else {
        PROGRESS_EVERY
    };
    Ok(Some(next_trigger.map_or(again, |t| t.min(again))))
}

/// What the hibernation schedules did.
enum Scheduled {
    /// A trigger changed `spec.hibernation.enabled`: the change comes back.
    Changed,
    /// Nothing to do now; the next trigger is this far off, if any.
    Next(Option<Duration>),
}

/// Acts on a hibernation schedule that fired since the last trigger.
async fn hibernate_on_schedule(objects: &Objects, shoot: &Value) -> Result<Scheduled, Error> {
    if shoot["spec"]["hibernation"]["schedules"].is_null() {
        return Ok(Scheduled::Next(None));
    }
    let parse = |pointer: &str| {
        shoot
            .pointer(pointer)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    let now = jiff::Timestamp::now();
    let since = parse("/status/lastHibernationTriggerTime")
        .or_else(|| parse("/metadata/creationTimestamp"))
        .unwrap_or(now);
    let decision = super::hibernation::decide(shoot, since, now);
    let until_next = decision.next.map(|t| {
        let seconds = (t.as_second() - now.as_second()).max(1);
        Duration::from_secs(seconds.unsigned_abs())
    });
    let Some(enabled) = decision.enabled else {
        return Ok(Scheduled::Next(until_next));
    };
    let name = objects::name(shoot);
    info!(shoot = %name, hibernate = enabled, "hibernation schedule fired");
    objects
        .status(
            &gapi::shoots(),
            name,
            json!({"lastHibernationTriggerTime": objects::now()}),
        )
        .await?;
    if plan::hibernated_in_spec(shoot) != enabled {
        objects
            .merge(
                &gapi::shoots(),
                name,
                json!({"spec": {"hibernation": {"enabled": enabled}}}),
            )
            .await?;
        return Ok(Scheduled::Changed);
    }
    Ok(Scheduled::Next(until_next))
}

/// Picks a Seed of the Shoot's provider (and region, where one serves
/// it), and takes the Seed's default networks where the Shoot names none.
async fn schedule(ctx: &Context, objects: &Objects, shoot: &Value) -> Result<Next, Error> {
    let seeds: Api<kube::api::DynamicObject> = Api::all_with(ctx.client.clone(), &gapi::seeds());
    let seeds: Vec<Value> = seeds
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| serde_json::to_value(s).ok())
        .filter(|s| !objects::deleting(s))
        .collect();
    let provider = &shoot["spec"]["provider"]["type"];
    let of_provider: Vec<&Value> = seeds
        .iter()
        .filter(|s| &s["spec"]["provider"]["type"] == provider)
        .collect();
    let seed = of_provider
        .iter()
        .find(|s| s["spec"]["provider"]["region"] == shoot["spec"]["region"])
        .or_else(|| of_provider.first());
    let Some(seed) = seed else {
        let mut status = shoot["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        let description =
            format!("no matching seed candidate found: no Seed has provider type {provider}");
        if status["lastOperation"]["description"] != description.as_str() {
            status["lastOperation"] = json!({"type": "Create", "state": "Pending", "progress": 0,
                "description": description, "lastUpdateTime": objects::now()});
            objects
                .status(&gapi::shoots(), objects::name(shoot), status)
                .await?;
        }
        return Ok(Some(Duration::from_secs(5)));
    };
    let mut spec = json!({"seedName": objects::name(seed)});
    let defaults = &seed["spec"]["networks"]["shootDefaults"];
    for which in ["pods", "services"] {
        if shoot["spec"]["networking"][which].is_null() {
            let default = defaults[which].as_str().unwrap_or(match which {
                "pods" => plan::DEFAULT_PODS,
                _ => plan::DEFAULT_SERVICES,
            });
            spec["networking"][which] = json!(default);
        }
    }
    info!(shoot = %objects::name(shoot), seed = %objects::name(seed), "shoot scheduled");
    objects
        .merge(&gapi::shoots(), objects::name(shoot), json!({"spec": spec}))
        .await?;
    Ok(None)
}

/// Makes the objects that are missing and brings those that drifted back
/// to what the Shoot says; removes the pools it no longer has.
async fn converge(objects: &Objects, shoot: &str, manifests: Vec<Value>) -> Result<(), Error> {
    let mut pools = Vec::new();
    for wanted in manifests {
        let r = api::resource_of(&wanted);
        let name = objects::name(&wanted).to_string();
        if let Some(pool) = objects::label(&wanted, POOL_LABEL) {
            pools.push(pool.to_string());
        }
        let Some(current) = objects.get(&r, &name).await? else {
            objects.create(&r, wanted).await?;
            continue;
        };
        // What a Shoot's change changes: versions, replicas, rollout,
        // the Cluster's labels.
        let patch = match wanted["kind"].as_str().unwrap_or_default() {
            "MachineDeployment" => drift(
                &current,
                &wanted,
                &[
                    "/spec/replicas",
                    "/spec/template/spec/version",
                    "/spec/rollout",
                ],
            ),
            "KubeadmControlPlane" => drift(&current, &wanted, &["/spec/version"]),
            "Cluster" => drift(&current, &wanted, &["/metadata/labels"]),
            _ => None,
        };
        if let Some(patch) = patch {
            objects.merge(&r, &name, patch).await?;
        }
    }
    let selector = format!("{SHOOT_NAME_LABEL}={shoot}");
    for md in objects.list(&api::machine_deployments(), &selector).await? {
        let pool = objects::label(&md, POOL_LABEL).unwrap_or_default();
        if !pools.iter().any(|p| p == pool) && !objects::deleting(&md) {
            info!(shoot, pool, "worker pool removed");
            objects
                .delete(&api::machine_deployments(), objects::name(&md))
                .await?;
        }
    }
    Ok(())
}

/// A merge patch setting the fields at `pointers` of `wanted` that
/// `current` differs in, or None.
fn drift(current: &Value, wanted: &Value, pointers: &[&str]) -> Option<Value> {
    let mut patch = json!({});
    let mut any = false;
    for pointer in pointers {
        let want = wanted.pointer(pointer).cloned().unwrap_or(Value::Null);
        let have = current.pointer(pointer).cloned().unwrap_or(Value::Null);
        let differs = match (&want, &have) {
            // Labels: only ours need be there.
            (Value::Object(w), Value::Object(h)) if *pointer == "/metadata/labels" => {
                w.iter().any(|(k, v)| h.get(k) != Some(v))
            }
            _ => want != have,
        };
        if differs {
            any = true;
            let mut at = &mut patch;
            let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
            for (i, part) in parts.iter().enumerate() {
                if i + 1 == parts.len() {
                    at[*part] = want.clone();
                } else {
                    at = &mut at[*part];
                }
            }
        }
    }
    any.then_some(patch)
}

/// What the Shoot's objects and its API server report.
async fn observe(
    ctx: &Context,
    objects: &Objects,
    shoot: &str,
    observed: &mut Observed,
) -> Result<(), Error> {
    observed.cluster = objects.get(&api::clusters(), shoot).await?;
    observed.control_plane = objects
        .get(
            &api::kubeadm_control_planes(),
            &format!("{shoot}-control-plane"),
        )
        .await?;
    let selector = format!("{SHOOT_NAME_LABEL}={shoot}");
    observed.deployments = objects.list(&api::machine_deployments(), &selector).await?;
    if observed.cluster.is_none() {
        return Ok(());
    }
    let Some(nodes) = ctx.workloads.nodes(&objects.namespace, shoot).await? else {
        return Ok(());
    };
    observed.api_available = true;
    let ready = nodes
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    observed.nodes = Some((ready, nodes.len()));
    Ok(())
}

/// Gardener's viewers in the shoot: a ClusterRole reading everything but
/// Secrets, bound to the group a viewer kubeconfig's user is in.
async fn ensure_viewers(ctx: &Context, namespace: &str, shoot: &str) {
    use super::kubeconfig::VIEWERS_GROUP;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let Ok(Some(client)) = ctx.workloads.client(namespace, shoot).await else {
        return;
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    if let Ok(Some(_)) = bindings.get_opt(VIEWERS_GROUP).await {
        return;
    }
    let read = ["get", "list", "watch"];
    let role = json!({
        "metadata": {"name": VIEWERS_GROUP},
        "rules": [
            {"apiGroups": [""], "verbs": read, "resources": [
                "pods", "pods/log", "services", "endpoints", "configmaps", "namespaces", "nodes",
                "persistentvolumes", "persistentvolumeclaims", "events", "serviceaccounts",
                "replicationcontrollers", "limitranges", "resourcequotas"]},
            {"apiGroups": ["apps", "batch", "autoscaling", "policy", "networking.k8s.io",
                "storage.k8s.io", "discovery.k8s.io", "rbac.authorization.k8s.io",
                "apiextensions.k8s.io", "coordination.k8s.io", "scheduling.k8s.io",
                "events.k8s.io", "node.k8s.io"], "verbs": read, "resources": ["*"]},
        ],
    });
    let binding = json!({
        "metadata": {"name": VIEWERS_GROUP},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": VIEWERS_GROUP},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": VIEWERS_GROUP}],
    });
    let (Ok(role), Ok(binding)) = (
        serde_json::from_value::<ClusterRole>(role),
        serde_json::from_value::<ClusterRoleBinding>(binding),
    ) else {
        return;
    };
    let post = kube::api::PostParams::default();
    let roles: Api<ClusterRole> = Api::all(client);
    let made = match roles.create(&post, &role).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    };
    let made = match made {
        Ok(()) => match bindings.create(&post, &binding).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match made {
        Ok(()) => info!(shoot, "Gardener's viewers may read the shoot"),
        Err(error) => {
            tracing::warn!(%error, shoot, "cannot give Gardener's viewers their role in the shoot")
        }
    }
}

/// The Shoot's technical ID: the one recorded (it never changes), else
/// by its Project (the one whose namespace it is in; else the namespace
/// without `garden-`).
async fn technical_id(ctx: &Context, shoot: &Value) -> String {
    if let Some(id) = shoot["status"]["technicalID"].as_str() {
        return id.to_string();
    }
    let namespace = objects::namespace(shoot);
    let projects: Api<kube::api::DynamicObject> =
        Api::all_with(ctx.client.clone(), &gapi::projects());
    let project = projects
        .list(&ListParams::default())
        .await
        .ok()
        .and_then(|l| {
            l.items
                .into_iter()
                .find(|p| p.data["spec"]["namespace"].as_str() == Some(namespace))
        })
        .and_then(|p| p.metadata.name);
    let project = project.unwrap_or_else(|| {
        namespace
            .strip_prefix("garden-")
            .unwrap_or(namespace)
            .to_string()
    });
    plan::technical_id(&project, objects::name(shoot))
}

/// Deletes the Shoot's Cluster (which takes its workers, control plane
/// and infrastructure down in Cluster API's order, and unjoins it), then
/// lets the Shoot go; its templates go with it.
async fn delete(objects: &Objects, shoot: &Value) -> Result<Next, Error> {
    let name = objects::name(shoot);
    let shoots = gapi::shoots();
    let cluster: Vec<Value> = objects
        .get(&api::clusters(), name)
        .await?
        .filter(|c| objects::owned_by(c, shoot))
        .into_iter()
        .collect();
    if !cluster.is_empty() {
        let status = plan::deleting_status(
            shoot,
            50,
            "Deleting the shoot's workers, control plane and infrastructure.",
        );
        if status != shoot["status"] {
            objects.status(&shoots, name, status).await?;
        }
    }
    objects
        .finalize_after_children(&shoots, shoot, gapi::FINALIZER, &api::clusters(), &cluster)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_patches_only_what_differs() {
        let current = json!({"spec": {"replicas": 1, "template": {"spec": {"version": "v1.31.0"}}},
                             "metadata": {"labels": {"a": "1", "extra": "x"}}});
        let wanted = json!({"spec": {"replicas": 1, "template": {"spec": {"version": "v1.32.0"}}},
                            "metadata": {"labels": {"a": "1"}}});
        assert_eq!(
            drift(
                &current,
                &wanted,
                &[
                    "/spec/replicas",
                    "/spec/template/spec/version",
                    "/metadata/labels"
                ]
            ),
            Some(json!({"spec": {"template": {"spec": {"version": "v1.32.0"}}}}))
        );
        assert_eq!(drift(&current, &current, &["/spec/replicas"]), None);
    }
}
