//! Workloads' immutable fields, as upstream validates their updates:
//! a Deployment's, ReplicaSet's or DaemonSet's `spec.selector`; a Job's
//! `spec.selector` and `spec.template`; a StatefulSet's spec beyond the
//! fields upstream lets change.

use serde_json::Value;

use super::{Strategy, immutable};
use crate::error::Cause;

/// `spec.selector` may not change; the field selectors given.
pub struct SelectorImmutable(pub &'static [&'static str]);

impl Strategy for SelectorImmutable {
    fn selectable_fields(&self) -> &'static [&'static str] {
        self.0
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        immutable(new, old, "/spec/selector", "spec.selector")
            .into_iter()
            .collect()
    }
}

pub struct Jobs;

impl Strategy for Jobs {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
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

pub struct StatefulSets;

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
