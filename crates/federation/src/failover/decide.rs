//! When a binding leaves a cluster, and when the cluster's old Work may
//! go: Karmada's taint manager and graceful eviction rules, without I/O.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::jiff::Timestamp;

use std::collections::BTreeMap;

use crate::api::{
    AggregatedStatusItem, Binding, BindingSpec, Cluster, GracefulEvictionTask, StatePreservation,
};
use crate::scheduler::core::toleration_for;
use crate::time;

pub use crate::cluster::{NOT_READY_TAINT as NOT_READY, UNREACHABLE_TAINT as UNREACHABLE};
/// How long a binding tolerates a cluster that is not Ready when its
/// placement says nothing (Karmada's webhook default,
/// `--default-not-ready-toleration-seconds`).
pub const DEFAULT_TOLERATION: Duration = Duration::from_secs(300);

/// What a binding opted into cluster failover must do about one cluster.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Stay,
    /// Evict at this time (now or later).
    EvictAt(Timestamp, String),
}

fn parse(t: &str) -> Option<Timestamp> {
    t.parse().ok()
}

/// The NoExecute taints a cluster has for failover: those on it, and its
/// not being Ready (NotReady, or Unknown: unreachable) since the
/// condition last changed.
fn no_execute(cluster: &Cluster) -> Vec<(Taint, Option<Timestamp>, bool)> {
    let mut taints: Vec<(Taint, Option<Timestamp>, bool)> = cluster
        .spec
        .taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .map(|t| (t.clone(), t.time_added.as_ref().map(|t| t.0), false))
        .collect();
    if let Some(ready) = cluster.condition("Ready")
        && ready.status != "True"
    {
        let key = if ready.status == "Unknown" {
            UNREACHABLE
        } else {
            NOT_READY
        };
        if !taints.iter().any(|(t, ..)| t.key == key) {
            let taint = Taint {
                key: key.into(),
                effect: "NoExecute".into(),
                ..Default::default()
            };
            taints.push((taint, Some(ready.last_transition_time.0), true));
        }
    }
    taints
}

/// Whether and when a binding with these tolerations must leave
/// `cluster`: at the earliest untolerated NoExecute taint's time plus its
/// toleration's seconds. A matching toleration without seconds tolerates
/// for ever; no matching toleration evicts at once, except for not being
/// Ready, which is tolerated for [`DEFAULT_TOLERATION`].
pub fn cluster_verdict(cluster: &Cluster, tolerations: &[Toleration], now: Timestamp) -> Verdict {
    let mut due: Option<(Timestamp, String)> = None;
    for (taint, since, readiness) in no_execute(cluster) {
        let since = since.unwrap_or(now);
        let wait = match toleration_for(tolerations, &taint) {
            Some(t) => match t.toleration_seconds {
                Some(s) => Duration::from_secs(u64::try_from(s).unwrap_or(0)),
                None => continue,
            },
            None if readiness => DEFAULT_TOLERATION,
            None => Duration::ZERO,
        };
        let at = time::after(since, wait);
        if due.as_ref().is_none_or(|(d, _)| at < *d) {
            due = Some((at, format!("untolerated taint {}:NoExecute", taint.key)));
        }
    }
    match due {
        Some((at, why)) => Verdict::EvictAt(at, why),
        None => Verdict::Stay,
    }
}

/// When an eviction task may go (its cluster's Work with it): `None`
/// never by itself; a time in the past: now.
///
/// - `suppressDeletion: true` keeps it, and purgeMode Never, until the
///   user removes it or sets `suppressDeletion: false`, which lets it go;
/// - so does a binding placed nowhere else: its last copy stays;
/// - otherwise it goes once the binding is scheduled without the cluster
///   and every cluster it is now on reports Healthy,
/// - or when its grace period (the task's own, else `default_grace`) ends.
pub fn task_ends(
    task: &GracefulEvictionTask,
    binding: &Binding,
    default_grace: Duration,
    now: Timestamp,
) -> Option<Timestamp> {
    match task.suppress_deletion {
        Some(true) => return None,
        Some(false) => return Some(now),
        None => {}
    }
    let spec = &binding.spec;
    if task.purge_mode.as_deref() == Some("Never") || spec.clusters.is_empty() {
        // Never, or nowhere else to run: the old copy is the last one.
        return None;
    }
    let status = binding.status.clone().unwrap_or_default();
    let scheduled = status.scheduler_observed_generation == binding.metadata.generation
        && !spec.clusters.is_empty()
        && !spec.clusters.iter().any(|c| c.name == task.from_cluster);
    let healthy = spec.clusters.iter().all(|c| {
        status
            .aggregated_status
            .iter()
            .any(|i| i.cluster_name == c.name && runs_its_share(i, c.replicas))
    });
    if scheduled && healthy {
        return Some(now);
    }
    let grace = task
        .grace_period_seconds
        .map_or(default_grace, time::seconds);
    let created = task
        .creation_timestamp
        .as_deref()
        .and_then(parse)
        .unwrap_or(now);
    Some(time::after(created, grace))
}

/// Whether a cluster reports its workload Healthy with its whole share
/// ready. Health alone is not enough: right after the division changes,
/// a cluster still reports the health of its old, smaller share.
fn runs_its_share(item: &AggregatedStatusItem, share: Option<i32>) -> bool {
    if item.health.as_deref() != Some("Healthy") {
        return false;
    }
    let Some(want) = share.filter(|n| *n > 0) else {
        return true;
    };
    let status = item.status.as_ref();
    // Kinds with replicas report them (readyReplicas is left out at 0);
    // for the others, health is all there is.
    if status.and_then(|s| s.get("replicas")).is_none() {
        return true;
    }
    let ready = status
        .and_then(|s| s.get("readyReplicas"))
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    ready >= i64::from(want)
}

/// The labels `preservation` makes of the workload's status as `cluster`
/// last reported it (Karmada's `BuildPreservedLabelState`): each rule's
/// JSONPath (`{ .jobStatus.id }`, braces optional) must find a value.
pub fn preserved_state(
    preservation: &StatePreservation,
    status: &[AggregatedStatusItem],
    cluster: &str,
) -> Result<BTreeMap<String, String>, String> {
    let Some(status) = status
        .iter()
        .find(|i| i.cluster_name == cluster)
        .and_then(|i| i.status.as_ref())
    else {
        return Err(format!(
            "the application status has not yet been collected from Cluster({cluster})"
        ));
    };
    let mut labels = BTreeMap::new();
    for rule in &preservation.rules {
        let path = rule.json_path.trim();
        let path = path
            .strip_prefix('{')
            .and_then(|p| p.strip_suffix('}'))
            .unwrap_or(path)
            .trim();
        let value = flotilla_apiserver::jsonpath::first(status, path).ok_or_else(|| {
            format!(
                "{} is not found in the status of the workload in cluster {cluster}",
                rule.json_path
            )
        })?;
        let value = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        labels.insert(rule.alias_label_name.clone(), value);
    }
    Ok(labels)
}

/// The labels injected into the workload delivered to `cluster`
/// (Karmada's `injectReservedLabelState`): only where the binding moved
/// from one cluster to another, by its last eviction task, purged
/// directly, to a cluster it was not on before.
pub fn injected_labels<'a>(
    spec: &'a BindingSpec,
    cluster: &str,
    targets: usize,
) -> Option<&'a BTreeMap<String, String>> {
    if targets > 1 {
        return None;
    }
    let task = spec.graceful_eviction_tasks.last()?;
    if !task.purges_directly() {
        return None;
    }
    if task
        .clusters_before_failover
        .iter()
        .flatten()
        .any(|c| c == cluster)
    {
        return None;
    }
    task.preserved_label_state
        .as_ref()
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        AggregatedStatusItem, BindingSpec, BindingStatus, ClusterSpec, ClusterStatus, TargetCluster,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cluster(ready: &str, since: &str) -> Cluster {
        let mut c = Cluster::new("member2", ClusterSpec::default());
        c.status = Some(ClusterStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: "ClusterNotReachable".into(),
                message: String::new(),
                last_transition_time: Time(at(since)),
                observed_generation: None,
            }],
            ..Default::default()
        });
        c
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Default::default()
        }
    }

    #[test]
    fn a_cluster_not_ready_is_left_after_the_toleration_and_a_ready_one_never() {
        let now = at("2026-11-23T10:00:00Z");
        let down = cluster("False", "2026-11-23T09:59:50Z");
        assert_eq!(
            cluster_verdict(&down, &[toleration(NOT_READY, Some(30))], now),
            Verdict::EvictAt(
                at("2026-11-23T10:00:20Z"),
                "untolerated taint cluster.karmada.io/not-ready:NoExecute".into()
            )
        );
        // No toleration for readiness: Karmada's default 300 s.
        let Verdict::EvictAt(when, _) = cluster_verdict(&down, &[], now) else {
            panic!("evicts");
        };
        assert_eq!(when, at("2026-11-23T10:04:50Z"));
        // Tolerated without seconds: for ever.
        assert_eq!(
            cluster_verdict(&down, &[toleration(NOT_READY, None)], now),
            Verdict::Stay
        );
        // Unknown (a lapsed lease) is the unreachable taint.
        let unknown = cluster("Unknown", "2026-11-23T09:59:50Z");
        let Verdict::EvictAt(_, why) =
            cluster_verdict(&unknown, &[toleration(NOT_READY, None)], now)
        else {
            panic!("the not-ready toleration does not cover unreachable");
        };
        assert!(why.contains(UNREACHABLE));
        assert_eq!(
            cluster_verdict(&cluster("True", "2026-11-23T09:00:00Z"), &[], now),
            Verdict::Stay
        );
        // A NoExecute taint someone put on the cluster, untolerated: now.
        let mut tainted = cluster("True", "2026-11-23T09:00:00Z");
        tainted.spec.taints.push(Taint {
            key: "maintenance".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        });
        assert_eq!(
            cluster_verdict(&tainted, &[], now),
            Verdict::EvictAt(now, "untolerated taint maintenance:NoExecute".into())
        );
    }

    fn binding(clusters: &[&str], healthy: &[&str], observed: i64) -> Binding {
        let mut b = Binding::new(
            "web-deployment",
            &crate::api::binding_resource(crate::api::Scope::Namespaced),
            BindingSpec {
                clusters: clusters
                    .iter()
                    .map(|c| TargetCluster {
                        name: c.to_string(),
                        replicas: Some(2),
                    })
                    .collect(),
                ..Default::default()
            },
        );
        b.metadata.generation = Some(2);
        b.status = Some(BindingStatus {
            scheduler_observed_generation: Some(observed),
            aggregated_status: healthy
                .iter()
                .map(|c| AggregatedStatusItem {
                    cluster_name: c.to_string(),
                    health: Some("Healthy".into()),
                    status: Some(serde_json::json!({"replicas": 2, "readyReplicas": 2})),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        b
    }

    fn task(purge: Option<&str>) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: "member2".into(),
            purge_mode: purge.map(Into::into),
            reason: "TaintUntolerated".into(),
            producer: "TaintManager".into(),
            creation_timestamp: Some("2026-11-23T10:00:00Z".into()),
            ..Default::default()
        }
    }

    #[test]
    fn an_old_work_goes_when_the_new_placement_is_healthy_or_the_grace_period_ends() {
        let now = at("2026-11-23T10:01:00Z");
        let grace = Duration::from_secs(600);
        let t = task(Some("Gracefully"));
        // Moved and healthy: now.
        let moved = binding(&["member1"], &["member1"], 2);
        assert_eq!(task_ends(&t, &moved, grace, now), Some(now));
        // Not yet healthy, or not yet scheduled without member2: at the
        // end of the grace period.
        let end = Some(at("2026-11-23T10:10:00Z"));
        assert_eq!(
            task_ends(&t, &binding(&["member1"], &[], 2), grace, now),
            end
        );
        assert_eq!(
            task_ends(&t, &binding(&["member1"], &["member1"], 1), grace, now),
            end
        );
        assert_eq!(
            task_ends(
                &t,
                &binding(&["member1", "member2"], &["member1", "member2"], 2),
                grace,
                now
            ),
            end
        );
        let own = GracefulEvictionTask {
            grace_period_seconds: Some(30),
            ..t.clone()
        };
        assert_eq!(
            task_ends(&own, &binding(&["member1"], &[], 2), grace, now),
            Some(at("2026-11-23T10:00:30Z"))
        );
        // Never, or suppressed: only the user ends it.
        assert_eq!(task_ends(&task(Some("Never")), &moved, grace, now), None);
        let suppressed = GracefulEvictionTask {
            suppress_deletion: Some(true),
            ..t.clone()
        };
        assert_eq!(task_ends(&suppressed, &moved, grace, now), None);
        // Nowhere else to run: the last copy stays, grace period or not.
        let late = at("2026-11-23T11:00:00Z");
        assert_eq!(task_ends(&t, &binding(&[], &[], 2), grace, late), None);
        // Healthy with its old, smaller share: not yet.
        let mut growing = binding(&["member1"], &["member1"], 2);
        growing.spec.clusters[0].replicas = Some(4);
        assert_eq!(task_ends(&t, &growing, grace, now), end);
        let confirmed = GracefulEvictionTask {
            suppress_deletion: Some(false),
            ..task(Some("Never"))
        };
        assert_eq!(
            task_ends(&confirmed, &binding(&[], &[], 1), grace, now),
            Some(now)
        );
    }

    #[test]
    fn preserved_state_reads_each_rule_from_the_status_where_it_failed() {
        use crate::api::StatePreservationRule;
        let rules = StatePreservation {
            rules: vec![
                StatePreservationRule {
                    alias_label_name: "example.io/job-id".into(),
                    json_path: "{ .jobStatus.id }".into(),
                },
                StatePreservationRule {
                    alias_label_name: "example.io/replicas".into(),
                    json_path: ".replicas".into(),
                },
            ],
        };
        let item = |cluster: &str, status: Option<serde_json::Value>| AggregatedStatusItem {
            cluster_name: cluster.into(),
            status,
            applied: true,
            applied_message: None,
            health: None,
        };
        let status = vec![
            item(
                "a",
                Some(serde_json::json!({"jobStatus": {"id": "j-42"}, "replicas": 3})),
            ),
            item("b", None),
        ];
        let labels = preserved_state(&rules, &status, "a").unwrap();
        assert_eq!(labels["example.io/job-id"], "j-42");
        assert_eq!(labels["example.io/replicas"], "3");
        assert!(
            preserved_state(&rules, &status, "b")
                .unwrap_err()
                .contains("not yet been collected")
        );
        let missing = vec![item("a", Some(serde_json::json!({"replicas": 3})))];
        assert!(
            preserved_state(&rules, &missing, "a")
                .unwrap_err()
                .contains("jobStatus.id")
        );
    }

    #[test]
    fn state_is_injected_only_into_the_one_new_cluster_after_a_direct_purge() {
        let labels: BTreeMap<String, String> = [("k".to_string(), "v".to_string())].into();
        let mut spec = BindingSpec::default();
        spec.graceful_eviction_tasks.push(GracefulEvictionTask {
            from_cluster: "a".into(),
            purge_mode: Some("Immediately".into()),
            preserved_label_state: Some(labels.clone()),
            clusters_before_failover: Some(vec!["a".into()]),
            ..Default::default()
        });
        assert_eq!(injected_labels(&spec, "b", 1), Some(&labels));
        assert_eq!(injected_labels(&spec, "a", 1), None, "a cluster it was on");
        assert_eq!(
            injected_labels(&spec, "b", 2),
            None,
            "more than one cluster"
        );
        spec.graceful_eviction_tasks[0].purge_mode = Some("Gracefully".into());
        assert_eq!(injected_labels(&spec, "b", 1), None, "not purged directly");
    }
}
