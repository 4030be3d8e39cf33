//! Workloads: upstream's defaults, and their immutable fields as upstream
//! validates updates: a Deployment's, ReplicaSet's or DaemonSet's
//! `spec.selector`; a Job's `spec.selector` and `spec.template` (and its
//! controller-uid selector, set at creation); a StatefulSet's spec beyond
//! the fields upstream lets change.

use serde_json::Value;

use super::{Strategy, immutable};
use crate::defaults;
use crate::error::Cause;
use crate::table::prelude::*;

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

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"replicas": 0}))
    }
}

impl Strategy for Deployments {
    fn default(&self, obj: &mut Value) {
        defaults::deployment(obj);
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({}))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Ready", "string", 0),
            col("Up-to-date", "string", 0),
            col("Available", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/template/spec");
        let desired = o
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        vec![
            name,
            json!(format!("{}/{desired}", i(o, "/status/readyReplicas"))),
            json!(i(o, "/status/updatedReplicas")),
            json!(i(o, "/status/availableReplicas")),
            json!(created),
            json!(c),
            json!(im),
            json!(selector_string(o, "/spec/selector")),
        ]
    }
}

impl Strategy for ReplicaSets {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }

    fn default(&self, obj: &mut Value) {
        defaults::replica_set(obj);
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"replicas": 0}))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Desired", "integer", 0),
            col("Current", "integer", 0),
            col("Ready", "integer", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/template/spec");
        vec![
            name,
            json!(
                o.pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
            ),
            json!(i(o, "/status/replicas")),
            json!(i(o, "/status/readyReplicas")),
            json!(created),
            json!(c),
            json!(im),
            json!(selector_string(o, "/spec/selector")),
        ]
    }
}

impl Strategy for DaemonSets {
    fn default(&self, obj: &mut Value) {
        defaults::daemon_set(obj);
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                    "desiredNumberScheduled": 0, "numberReady": 0}))
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        selector_immutable(new, old)
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Desired", "integer", 0),
            col("Current", "integer", 0),
            col("Ready", "integer", 0),
            col("Up-to-date", "integer", 0),
            col("Available", "integer", 0),
            col("Node Selector", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/template/spec");
        vec![
            name,
            json!(i(o, "/status/desiredNumberScheduled")),
            json!(i(o, "/status/currentNumberScheduled")),
            json!(i(o, "/status/numberReady")),
            json!(i(o, "/status/updatedNumberScheduled")),
            json!(i(o, "/status/numberAvailable")),
            json!(map_selector(o, "/spec/template/spec/nodeSelector")),
            json!(created),
            json!(c),
            json!(im),
            json!(selector_string(o, "/spec/selector")),
        ]
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

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({}))
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

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Status", "string", 0),
            col("Completions", "string", 0),
            col("Duration", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/template/spec");
        let conditions = arr(o, "/status/conditions");
        let has = |t: &str| {
            conditions
                .iter()
                .any(|c| s(c, "/type") == t && s(c, "/status") == "True")
        };
        let status = if has("Complete") {
            "Complete"
        } else if has("Failed") {
            "Failed"
        } else if o.pointer("/metadata/deletionTimestamp").is_some() {
            "Terminating"
        } else {
            "Running"
        };
        let completions = match o.pointer("/spec/completions").and_then(Value::as_i64) {
            Some(n) => format!("{}/{n}", i(o, "/status/succeeded")),
            None => format!("{}/1", i(o, "/status/succeeded")),
        };
        let duration = match (
            s(o, "/status/startTime").parse::<jiff::Timestamp>(),
            s(o, "/status/completionTime").parse::<jiff::Timestamp>(),
        ) {
            (Ok(start), Ok(end)) => human_duration(end.as_second() - start.as_second()),
            (Ok(start), Err(_)) => {
                human_duration(jiff::Timestamp::now().as_second() - start.as_second())
            }
            _ => String::new(),
        };
        vec![
            name,
            json!(status),
            json!(completions),
            json!(duration),
            json!(created),
            json!(c),
            json!(im),
            json!(selector_string(o, "/spec/selector")),
        ]
    }
}

impl Strategy for CronJobs {
    fn default(&self, obj: &mut Value) {
        defaults::cron_job(obj);
    }

    /// The schedule and its zone must be what the controller can run.
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        use flotilla_core::schedule::{Schedule, ScheduleError};
        let schedule = s(obj, "/spec/schedule");
        let zone = obj.pointer("/spec/timeZone").and_then(Value::as_str);
        let invalid = |field: &str, value: &str, why: String| Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {value:?}: {why}"),
        };
        let mut causes: Vec<Cause> = [
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        ]
        .iter()
        .filter_map(|f| {
            let v = obj.pointer(&format!("/spec/{f}")).and_then(Value::as_i64)?;
            (v < 0).then(|| {
                invalid(
                    &format!("spec.{f}"),
                    &v.to_string(),
                    "must be greater than or equal to 0".into(),
                )
            })
        })
        .collect();
        // Upstream names a zone; "" and "Local" are the server's, not one.
        if let Some(z @ ("" | "Local")) = zone {
            causes.push(invalid(
                "spec.timeZone",
                z,
                format!("unknown time zone {z}"),
            ));
        }
        if !causes.is_empty() {
            return causes;
        }
        if schedule.is_empty() {
            return vec![Cause {
                reason: "FieldValueRequired",
                field: "spec.schedule".into(),
                message: "Required value".into(),
            }];
        }
        if schedule.contains("TZ") {
            return vec![invalid(
                "spec.schedule",
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into(),
            )];
        }
        match Schedule::parse(schedule, Some(zone.unwrap_or("UTC"))) {
            Ok(_) => Vec::new(),
            Err(ScheduleError::Format) => vec![invalid(
                "spec.schedule",
                schedule,
                "not a schedule: five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-6 or SUN-SAT) or a descriptor such as @daily".into(),
            )],
            Err(e @ ScheduleError::Zone(_)) => {
                vec![invalid("spec.timeZone", zone.unwrap_or_default(), e.to_string())]
            }
        }
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({}))
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Schedule", "string", 0),
            col("Timezone", "string", 0),
            col("Suspend", "boolean", 0),
            col("Active", "integer", 0),
            col("Last Schedule", "date", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/jobTemplate/spec/template/spec");
        let last = match s(o, "/status/lastScheduleTime") {
            "" => "<none>".to_string(),
            _ => age(o, "/status/lastScheduleTime"),
        };
        vec![
            name,
            json!(s(o, "/spec/schedule")),
            json!(or_none(s(o, "/spec/timeZone").to_string())),
            // Upstream's printBoolPtr: "True", "False", "<unset>".
            json!(match o.pointer("/spec/suspend").and_then(Value::as_bool) {
                Some(true) => "True",
                Some(false) => "False",
                None => "<unset>",
            }),
            json!(arr(o, "/status/active").len()),
            json!(last),
            json!(created),
            json!(c),
            json!(im),
            json!(selector_string(o, "/spec/jobTemplate/spec/selector")),
        ]
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

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"replicas": 0, "availableReplicas": 0}))
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

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Ready", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let (c, im) = containers_images(o, "/spec/template/spec");
        let desired = o
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        vec![
            name,
            json!(format!("{}/{desired}", i(o, "/status/readyReplicas"))),
            json!(created),
            json!(c),
            json!(im),
        ]
    }
}
