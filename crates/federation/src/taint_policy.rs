//! ClusterTaintPolicy (`policy.karmada.io/v1alpha1`): taints clusters
//! from their conditions, as Karmada's cluster-taint-policy controller.
//! A policy adds its taints to each target cluster whose conditions all
//! match `addOnConditions`, and removes them (by key and effect) where
//! they all match `removeOnConditions`; policies apply oldest first. A
//! taint added here stays when its policy is deleted (as Karmada), and a
//! NoExecute one evicts the bindings whose policy opted into failover
//! (see `failover`).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api::{Cluster, ClusterTaintPolicy, MatchCondition};
use crate::conditions;
use crate::context::Ctx;
use crate::error::Error;
use crate::queue::{self, Next, WorkQueue};
use crate::selector::cluster_matches;
use flotilla_client::events;

/// Whether every condition matches the cluster's; none never matches. A
/// condition the cluster does not report matches neither In nor NotIn.
fn conditions_match(cluster: &Cluster, wanted: &[MatchCondition]) -> bool {
    if wanted.is_empty() {
        return false;
    }
    let reported = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    wanted.iter().all(|w| {
        reported
            .iter()
            .find(|c| c.type_ == w.condition_type)
            .is_some_and(|c| {
                let listed = w.status_values.contains(&c.status);
                match w.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                }
            })
    })
}

fn same(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// The cluster's taints once `policies` (in any order) have applied; a
/// taint added gets `now` as its timeAdded.
pub fn taints_after(
    cluster: &Cluster,
    policies: &[Arc<ClusterTaintPolicy>],
    now: &Time,
) -> Vec<Taint> {
    let mut ordered: Vec<&ClusterTaintPolicy> = policies.iter().map(|p| &**p).collect();
    // Oldest first, so that conflicting policies settle the same way on
    // every pass instead of adding and removing a taint in turn.
    ordered.sort_by(|a, b| {
        let created = |p: &ClusterTaintPolicy| p.metadata.creation_timestamp.clone().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let mut taints = cluster.spec.taints.clone();
    for policy in ordered {
        let spec = &policy.spec;
        if spec
            .target_clusters
            .as_ref()
            .is_some_and(|t| !cluster_matches(t, cluster))
        {
            continue;
        }
        if conditions_match(cluster, &spec.add_on_conditions) {
            for t in &spec.taints {
                if !taints.iter().any(|have| same(have, t)) {
                    taints.push(Taint {
                        time_added: Some(now.clone()),
                        ..t.clone()
                    });
                }
            }
        }
        if conditions_match(cluster, &spec.remove_on_conditions) {
            taints.retain(|have| !spec.taints.iter().any(|t| same(have, t)));
        }
    }
    taints
}

struct TaintCtx {
    shared: Ctx,
    policies: Store<ClusterTaintPolicy>,
}

/// How many objects are reconciled at once (a cluster's taints are one patch).
const WORKERS: usize = 4;

/// Looks at a cluster whenever it changes, and at every cluster whenever
/// a policy changes.
pub async fn run(
    ctx: Ctx,
    clusters: Store<Cluster>,
    cluster_changes: impl Stream<Item = Result<Cluster, watcher::Error>> + Send + 'static,
    policies: Store<ClusterTaintPolicy>,
    policy_changes: impl Stream<Item = ()> + Send + 'static,
) {
    let tctx = Arc::new(TaintCtx {
        shared: ctx,
        policies,
    });
    let queue = WorkQueue::named(tctx.shared.metrics.queue("cluster-taint-policy-controller"));
    let every_cluster = {
        let (queue, clusters) = (queue.clone(), clusters.clone());
        policy_changes.for_each(move |()| {
            queue.add_all(clusters.state().iter().map(|c| ObjectRef::from_obj(&**c)));
            std::future::ready(())
        })
    };
    tokio::join!(
        queue::feed(queue.clone(), queue::keys_of(cluster_changes)),
        every_cluster,
        queue::reconcile_stored(queue, clusters, WORKERS, move |c| reconcile(
            c,
            tctx.clone()
        )),
    );
}

async fn reconcile(cluster: Arc<Cluster>, tctx: Arc<TaintCtx>) -> Result<Next, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let taints = taints_after(&cluster, &tctx.policies.state(), &conditions::now());
    if taints == cluster.spec.taints {
        return Ok(None);
    }
    let name = cluster.name_any();
    // The cluster controller writes the readiness taints: the
    // resourceVersion makes the later writer read again, not overwrite.
    let patch = json!({
        "metadata": {"resourceVersion": cluster.resource_version()},
        "spec": {"taints": taints},
    });
    let hub = &tctx.shared.hub;
    Api::<Cluster>::all(hub.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let listed: Vec<String> = taints
        .iter()
        .map(|t| match &t.value {
            Some(v) => format!("{}={v}:{}", t.key, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        })
        .collect();
    info!(cluster = %name, taints = ?listed, "cluster taints updated by policy");
    let involved = ObjectReference {
        api_version: Some("cluster.karmada.io/v1alpha1".into()),
        kind: Some("Cluster".into()),
        name: Some(name.clone()),
        uid: cluster.uid(),
        ..Default::default()
    };
    let message = format!(
        "Update Cluster({name}) with taints({}) succeed",
        listed.join(",")
    );
    events::record(
        hub,
        involved,
        "cluster-taint-policy-controller",
        ("Normal", "TaintClusterSucceed", &message),
    )
    .await;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterAffinity, ClusterSpec, ClusterStatus, ClusterTaintPolicySpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn cluster(name: &str, ready: &str, taints: Vec<Taint>) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                sync_mode: "Push".into(),
                taints,
                ..Default::default()
            },
        );
        c.status = Some(ClusterStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: conditions::now(),
                observed_generation: None,
            }],
            ..Default::default()
        });
        c
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn ready(operator: &str, values: &[&str]) -> Vec<MatchCondition> {
        vec![MatchCondition {
            condition_type: "Ready".into(),
            operator: operator.into(),
            status_values: values.iter().map(|v| v.to_string()).collect(),
        }]
    }

    fn policy(name: &str, created: i64, spec: ClusterTaintPolicySpec) -> Arc<ClusterTaintPolicy> {
        let mut p = ClusterTaintPolicy::new(name, spec);
        p.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        Arc::new(p)
    }

    fn not_ready_policy(target: Option<ClusterAffinity>) -> Arc<ClusterTaintPolicy> {
        policy(
            "not-ready",
            1,
            ClusterTaintPolicySpec {
                target_clusters: target,
                add_on_conditions: ready("NotIn", &["True"]),
                remove_on_conditions: ready("In", &["True"]),
                taints: vec![taint("not-ready", "NoExecute")],
            },
        )
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect()
    }

    #[test]
    fn taints_follow_the_conditions_and_leave_others_alone() {
        let now = conditions::now();
        let policies = [not_ready_policy(None)];
        let readiness = taint("cluster.karmada.io/not-ready", "NoSchedule");
        let down = cluster("m1", "False", vec![readiness.clone()]);
        let tainted = taints_after(&down, &policies, &now);
        assert_eq!(
            keys(&tainted),
            [
                "cluster.karmada.io/not-ready:NoSchedule",
                "not-ready:NoExecute"
            ]
        );
        assert_eq!(tainted[1].time_added, Some(now.clone()));
        // Added once: a second pass changes nothing.
        let again = cluster("m1", "False", tainted.clone());
        assert_eq!(taints_after(&again, &policies, &now), tainted);
        // Unknown is NotIn True as well.
        assert_eq!(
            keys(&taints_after(
                &cluster("m1", "Unknown", vec![]),
                &policies,
                &now
            )),
            ["not-ready:NoExecute"]
        );
        // Ready again: only the policy's taint goes.
        let back = cluster("m1", "True", tainted);
        assert_eq!(
            keys(&taints_after(&back, &policies, &now)),
            ["cluster.karmada.io/not-ready:NoSchedule"]
        );
    }

    #[test]
    fn targets_missing_conditions_and_order_are_karmadas() {
        let now = conditions::now();
        let only_m2 = ClusterAffinity {
            cluster_names: vec!["m2".into()],
            ..Default::default()
        };
        let policies = [not_ready_policy(Some(only_m2))];
        assert!(taints_after(&cluster("m1", "False", vec![]), &policies, &now).is_empty());
        assert_eq!(
            keys(&taints_after(
                &cluster("m2", "False", vec![]),
                &policies,
                &now
            )),
            ["not-ready:NoExecute"]
        );
        // A cluster that does not report the condition matches nothing.
        let mut silent = cluster("m2", "False", vec![]);
        silent.status = None;
        assert!(taints_after(&silent, &policies, &now).is_empty());

        // Two policies disagreeing on the same taint: the newer one wins,
        // whatever order the cache lists them in.
        let add = policy(
            "z-add",
            1,
            ClusterTaintPolicySpec {
                add_on_conditions: ready("In", &["True"]),
                taints: vec![taint("k", "NoSchedule")],
                ..Default::default()
            },
        );
        let remove = policy(
            "a-remove",
            2,
            ClusterTaintPolicySpec {
                remove_on_conditions: ready("In", &["True"]),
                taints: vec![taint("k", "NoSchedule")],
                ..Default::default()
            },
        );
        let up = cluster("m1", "True", vec![]);
        for order in [[add.clone(), remove.clone()], [remove, add]] {
            assert!(taints_after(&up, &order, &now).is_empty());
        }
    }
}
