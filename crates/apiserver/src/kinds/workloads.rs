//! Workloads: upstream's defaults, and their immutable fields as upstream
//! validates updates: a Deployment's, ReplicaSet's or DaemonSet's
//! `spec.selector`; a Job's `spec.selector` and `spec.template` (and its
//! controller-uid selector, set at creation); a StatefulSet's spec beyond
//! the fields upstream lets change.

use serde_json::Value;

use super::{Strategy, immutable};
use crate::defaults;
use crate::error::Cause;

pub struct ReplicationControllers;
pub struct Deployments;
pub struct ReplicaSets;
pub struct DaemonSets;
pub struct StatefulSets;
pub struct Jobs;
pub struct CronJobs;

fn selector_immutable(new: &Value, old: &Value) -> Vec<Cause> {
    immutable(new, old, "/spec/selector", "spec.selector")
        .into_iter()
        .collect()
}

impl Strategy for ReplicationControllers {
    fn default(&self, obj: &mut Value) {
        defaults::replication_controller(obj);
    }
}

impl Strategy for Deployments {
    fn default(&self, obj: &mut Value) {
        defaults::deployment(obj);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }
}

impl Strategy for ReplicaSets {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }

    fn default(&self, obj: &mut Value) {
        defaults::replica_set(obj);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }
}

impl Strategy for DaemonSets {
    fn default(&self, obj: &mut Value) {
        defaults::daemon_set(obj);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }
}

impl Strategy for Jobs {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
    }

    fn default(&self, obj: &mut Value) {
        defaults::job(obj);
    }

    /// Upstream's Job strategy: a selector on the controller uid.
    fn prepare_create(&self, obj: &mut Value) {
        defaults::job_selector(obj);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        [
            immutable(new, old, "/spec/selector", "spec.selector"),
            immutable(new, old, "/spec/template", "spec.template"),
            immutable(new, old, "/spec/completionMode", "spec.completionMode"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

impl Strategy for CronJobs {
    fn default(&self, obj: &mut Value) {
        defaults::cron_job(obj);
    }
}

/// What an update may change in a StatefulSet's spec.
const STATEFULSET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

impl Strategy for StatefulSets {
    fn default(&self, obj: &mut Value) {
        defaults::stateful_set(obj);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        let rest = |o: &Value| {
            let mut spec = o.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(s) = spec.as_object_mut() {
                s.retain(|k, _| !STATEFULSET_MUTABLE.contains(&k.as_str()));
            }
            spec
        };
        if rest(new) == rest(old) {
            return Vec::new();
        }
        vec![Cause {
            reason: "FieldValueForbidden",
            field: "spec".into(),
            message: "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
        }]
    }
}
