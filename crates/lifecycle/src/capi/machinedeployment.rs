//! The MachineDeployment controller: one MachineSet per template (named
//! by the template's hash), and a rolling update between them bounded by
//! `maxSurge` and `maxUnavailable`, as a Deployment rolls ReplicaSets.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;

use crate::Context;
use crate::api;
use crate::capi::templates;
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "capi-machinedeployment",
        kind: api::machine_deployments(),
        wakers: vec![(api::machine_sets(), |o| {
            runner::owners_of_kind(o, "MachineDeployment")
        })],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, md| async move {
        reconcile(&ctx, md).await
    })
    .await;
}

/// The hash that names a template's MachineSet: of `spec.template`, so a
/// change of version or of a referenced template rolls the machines.
pub fn template_hash(md: &Value) -> String {
    let digest = sha2::Sha256::digest(md["spec"]["template"].to_string().as_bytes());
    digest
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// A surge or unavailability bound: an integer, or a percentage of
/// `desired` (rounded up for surge, down for unavailability).
fn bound(v: &Value, desired: i64, round_up: bool, default: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(default),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => {
                let scaled = desired * p;
                if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                }
            }
            None => s.parse().unwrap_or(default),
        },
        _ => default,
    }
}

fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

fn status_count(object: &Value, field: &str) -> i64 {
    object["status"][field].as_i64().unwrap_or(0)
}

async fn reconcile(ctx: &Context, md: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&md).to_string();
    let name = objects::name(&md).to_string();
    let cluster = md["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let deployments = api::machine_deployments();
    let sets: Vec<Value> = objects
        .list(
            &api::machine_sets(),
            &format!("{}={name}", api::DEPLOYMENT_NAME_LABEL),
        )
        .await?
        .into_iter()
        .filter(|s| objects::owned_by(s, &md))
        .collect();
    if objects::deleting(&md) {
        return objects
            .finalize_after_children(
                &deployments,
                &md,
                api::MACHINEDEPLOYMENT_FINALIZER,
                &api::machine_sets(),
                &sets,
            )
            .await;
    }
    objects
        .add_finalizer(&deployments, &md, api::MACHINEDEPLOYMENT_FINALIZER)
        .await?;
    if objects::label(&md, api::CLUSTER_NAME_LABEL) != Some(cluster.as_str()) && !cluster.is_empty()
    {
        objects
            .merge(
                &deployments,
                &name,
                json!({"metadata": {"labels": {api::CLUSTER_NAME_LABEL: cluster}}}),
            )
            .await?;
    }
    let desired = replicas(&md);
    let hash = template_hash(&md);
    let rolling = if md["spec"]["rollout"]["strategy"]["rollingUpdate"].is_object() {
        &md["spec"]["rollout"]["strategy"]["rollingUpdate"]
    } else {
        &md["spec"]["strategy"]["rollingUpdate"]
    };
    let surge = bound(&rolling["maxSurge"], desired, true, 1).max(0);
    let unavailable = bound(&rolling["maxUnavailable"], desired, false, 0).max(0);
    // Both zero would never move.
    let surge = if surge == 0 && unavailable == 0 {
        1
    } else {
        surge
    };

    let new = sets
        .iter()
        .find(|s| objects::label(s, api::TEMPLATE_HASH_LABEL) == Some(hash.as_str()))
        .cloned();
    let olds: Vec<&Value> = sets
        .iter()
        .filter(|s| {
            objects::label(s, api::TEMPLATE_HASH_LABEL) != Some(hash.as_str())
                && !objects::deleting(s)
        })
        .collect();
    let total: i64 = sets
        .iter()
        .filter(|s| !objects::deleting(s))
        .map(replicas)
        .sum();
    let new = match new {
        Some(s) => s,
        None => {
            // The first set takes every replica; a rollout's starts empty.
            let start = if olds.is_empty() { desired } else { 0 };
            let set_name = format!("{name}-{hash}");
            let mut match_labels = md["spec"]["selector"]["matchLabels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            match_labels.insert(api::DEPLOYMENT_NAME_LABEL.into(), json!(name));
            match_labels.insert(api::TEMPLATE_HASH_LABEL.into(), json!(hash));
            let mut template = md["spec"]["template"].clone();
            let mut labels = template["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            labels.extend(match_labels.clone());
            template["metadata"]["labels"] = json!(labels);
            template["spec"]["clusterName"] = json!(cluster);
            let set = json!({
                "apiVersion": format!("{}/{}", api::CLUSTER_GROUP, api::VERSION),
                "kind": "MachineSet",
                "metadata": {
                    "name": set_name,
                    "namespace": namespace,
                    "labels": {
                        api::CLUSTER_NAME_LABEL: cluster,
                        api::DEPLOYMENT_NAME_LABEL: name,
                        api::TEMPLATE_HASH_LABEL: hash,
                    },
                    "ownerReferences": [objects::owner_ref(&md, true)],
                },
                "spec": {
                    "clusterName": cluster,
                    "replicas": start,
                    "selector": {"matchLabels": match_labels},
                    "template": template,
                },
            });
            objects.create(&api::machine_sets(), set).await?;
            return Ok(Some(Duration::from_millis(200)));
        }
    };
    let new_name = objects::name(&new).to_string();
    let new_replicas = replicas(&new);
    let scale = |set: &str, n: i64| {
        let objects = objects.clone();
        let set = set.to_string();
        async move {
            objects
                .merge(&api::machine_sets(), &set, json!({"spec": {"replicas": n}}))
                .await
        }
    };
    if olds.is_empty() {
        if new_replicas != desired {
            scale(&new_name, desired).await?;
        }
    } else {
        // Up: the new set grows while the total stays within the surge.
        let max_total = desired + surge;
        if new_replicas < desired && total < max_total {
            let up = (max_total - total).min(desired - new_replicas);
            scale(&new_name, new_replicas + up).await?;
        }
        // Down: old sets shrink while enough machines stay available.
        let min_available = desired - unavailable;
        let new_unavailable = (new_replicas - status_count(&new, "availableReplicas")).max(0);
        let mut removable = (total - min_available - new_unavailable).max(0);
        let mut olds = olds.clone();
        olds.sort_by(|a, b| {
            a["metadata"]["creationTimestamp"]
                .as_str()
                .cmp(&b["metadata"]["creationTimestamp"].as_str())
        });
        for old in olds {
            let n = replicas(old);
            if n == 0 {
                if status_count(old, "replicas") == 0 {
                    objects
                        .delete(&api::machine_sets(), objects::name(old))
                        .await?;
                }
                continue;
            }
            if removable <= 0 {
                break;
            }
            let down = n.min(removable);
            scale(objects::name(old), n - down).await?;
            removable -= down;
        }
    }

    let mut status = md["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let sum = |field: &str| sets.iter().map(|s| status_count(s, field)).sum::<i64>();
    let current = sum("replicas");
    let available = sum("availableReplicas");
    status["replicas"] = json!(current);
    status["readyReplicas"] = json!(sum("readyReplicas"));
    status["availableReplicas"] = json!(available);
    status["upToDateReplicas"] = json!(status_count(&new, "upToDateReplicas"));
    let mut selector = md["spec"]["selector"]["matchLabels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    selector.insert(api::DEPLOYMENT_NAME_LABEL.into(), json!(name));
    status["selector"] = json!(templates::selector_string(&Value::Object(selector)));
    status["observedGeneration"] = md["metadata"]["generation"].clone();
    status["phase"] = json!(if current < desired {
        "ScalingUp"
    } else if current > desired {
        "ScalingDown"
    } else {
        "Running"
    });
    // v1beta1's counters, for its clients.
    status["updatedReplicas"] = json!(status_count(&new, "replicas"));
    status["unavailableReplicas"] = json!((desired - available).max(0));
    if available >= desired - unavailable {
        set_condition(&mut status, "Available", "True", "Available", "");
    } else {
        set_condition(
            &mut status,
            "Available",
            "False",
            "NotAvailable",
            &format!(
                "{available} available replicas, at least {} required (spec.rollout.strategy.rollingUpdate.maxUnavailable is {unavailable}, spec.replicas is {desired})",
                desired - unavailable
            ),
        );
    }
    let rolling_out = !olds.is_empty();
    if rolling_out {
        set_condition(
            &mut status,
            "RollingOut",
            "True",
            "RollingOut",
            &format!("Rolling out to MachineSet {new_name}"),
        );
    } else {
        set_condition(&mut status, "RollingOut", "False", "NotRollingOut", "");
    }
    if status != md["status"] {
        objects.status(&deployments, &name, status).await?;
    }
    let settled = !rolling_out && current == desired && available == desired;
    Ok(if settled {
        None
    } else {
        Some(Duration::from_secs(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_counts_or_percentages() {
        assert_eq!(bound(&json!(2), 10, true, 1), 2);
        assert_eq!(bound(&json!("25%"), 10, true, 1), 3);
        assert_eq!(bound(&json!("25%"), 10, false, 0), 2);
        assert_eq!(bound(&Value::Null, 10, true, 1), 1);
    }

    #[test]
    fn a_template_change_changes_the_hash() {
        let a = json!({"spec": {"template": {"spec": {"version": "v1.33.0"}}}});
        let b = json!({"spec": {"template": {"spec": {"version": "v1.34.0"}}}});
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
    }
}
