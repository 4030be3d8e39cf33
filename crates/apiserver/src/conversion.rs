//! Built-in kinds served at a version other than the one stored: the
//! object is converted on its way out of the store (`objects::decode`) and
//! back on its way in (`objects::encode_as_stored`), so every handler sees
//! the version the client asked for.
//!
//! Event: `events.k8s.io/v1` Events are core Events (one storage, as
//! upstream), their fields renamed (`regarding` is `involvedObject`,
//! `note` is `message`, the `deprecated*` fields the old counters).
//!
//! HorizontalPodAutoscaler: stored as `autoscaling/v2`, also served as
//! `autoscaling/v1` (`kubectl autoscale` writes v1). As upstream, what v1
//! has no field for (metrics other than CPU utilization, behavior, current
//! metrics, conditions) travels in v1 annotations, so a v1 read-modify-
//! write keeps it.

use serde_json::{Map, Value, json};

/// How a served version maps to the stored one.
#[derive(Clone, Copy)]
pub struct Conversion {
    pub to_served: fn(&mut Value),
    pub to_stored: fn(&mut Value),
}

/// The conversion of a built-in resource at `version`, if it needs one.
pub fn for_version(group: &str, version: &str, plural: &str) -> Option<Conversion> {
    match (group, version, plural) {
        ("autoscaling", "v1", "horizontalpodautoscalers") => Some(Conversion {
            to_served: hpa_v2_to_v1,
            to_stored: hpa_v1_to_v2,
        }),
        ("events.k8s.io", "v1", "events") => Some(Conversion {
            to_served: core_event_to_events_v1,
            to_stored: events_v1_to_core_event,
        }),
        _ => None,
    }
}

/// The group whose storage a resource shares: `events.k8s.io` Events are
/// core Events, as upstream stores them.
pub fn stored_group<'a>(group: &'a str, plural: &str) -> &'a str {
    match (group, plural) {
        ("events.k8s.io", "events") => "",
        _ => group,
    }
}

/// Field pairs (core/v1, events.k8s.io/v1) of an Event.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename_fields(obj: &mut Value, from_core: bool) {
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    for (core, events) in EVENT_FIELDS {
        let (from, to) = if from_core {
            (core, events)
        } else {
            (events, core)
        };
        if let Some(v) = o.remove(*from) {
            o.insert(to.to_string(), v);
        }
    }
}

fn core_event_to_events_v1(obj: &mut Value) {
    rename_fields(obj, true);
}

fn events_v1_to_core_event(obj: &mut Value) {
    rename_fields(obj, false);
    obj["apiVersion"] = json!("v1");
}

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";

fn is_cpu_utilization(metric: &Value) -> bool {
    metric.pointer("/type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && metric
            .pointer("/resource/target/type")
            .and_then(Value::as_str)
            == Some("Utilization")
}

fn annotate(obj: &mut Value, key: &str, value: String) {
    let annotations = crate::value::meta_mut(obj)
        .entry("annotations")
        .or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(key.into(), Value::String(value));
    }
}

fn take_annotation(obj: &mut Value, key: &str) -> Option<Value> {
    crate::value::meta_mut(obj)
        .get_mut("annotations")?
        .as_object_mut()?
        .remove(key)
}

fn hpa_v2_to_v1(obj: &mut Value) {
    let mut spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let metrics = spec
        .get_mut("metrics")
        .and_then(Value::as_array_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu_utilization);
    if let Some(s) = spec.as_object_mut() {
        s.remove("metrics");
        let behavior = s.remove("behavior");
        if let Some(target) = cpu
            .first()
            .and_then(|m| m.pointer("/resource/target/averageUtilization"))
        {
            s.insert("targetCPUUtilizationPercentage".into(), target.clone());
        }
        if !others.is_empty() {
            annotate(obj, METRICS, Value::Array(others).to_string());
        }
        if let Some(b) = behavior.filter(|b| !b.is_null()) {
            annotate(obj, BEHAVIOR, b.to_string());
        }
    }
    obj["spec"] = spec;
    if let Some(mut status) = obj.get("status").cloned().filter(Value::is_object) {
        let current = status
            .get_mut("currentMetrics")
            .and_then(Value::as_array_mut)
            .map(std::mem::take)
            .unwrap_or_default();
        let conditions = status.as_object_mut().and_then(|s| s.remove("conditions"));
        if let Some(s) = status.as_object_mut() {
            s.remove("currentMetrics");
            // v1 always writes both counts (v2 leaves a zero
            // `currentReplicas` out); clients' v1 models require them.
            for count in ["currentReplicas", "desiredReplicas"] {
                s.entry(count).or_insert(json!(0));
            }
            let cpu = current.iter().find_map(|m| {
                (m.pointer("/type").and_then(Value::as_str) == Some("Resource")
                    && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
                .then(|| m.pointer("/resource/current/averageUtilization").cloned())
                .flatten()
            });
            if let Some(cpu) = cpu {
                s.insert("currentCPUUtilizationPercentage".into(), cpu);
            }
        }
        if !current.is_empty() {
            annotate(obj, CURRENT_METRICS, Value::Array(current).to_string());
        }
        if let Some(c) = conditions.filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
            annotate(obj, CONDITIONS, c.to_string());
        }
        obj["status"] = status;
    }
    drop_empty_annotations(obj);
}

fn hpa_v1_to_v2(obj: &mut Value) {
    let taken = |obj: &mut Value, key: &str| -> Option<Value> {
        let raw = take_annotation(obj, key)?;
        serde_json::from_str(raw.as_str()?).ok()
    };
    let others = taken(obj, METRICS);
    let behavior = taken(obj, BEHAVIOR);
    let current = taken(obj, CURRENT_METRICS);
    let conditions = taken(obj, CONDITIONS);
    drop_empty_annotations(obj);
    let mut spec = obj.get("spec").cloned().unwrap_or(json!({}));
    if let Some(s) = spec.as_object_mut() {
        let mut metrics = Vec::new();
        if let Some(target) = s.remove("targetCPUUtilizationPercentage") {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": target}}}));
        }
        if let Some(Value::Array(more)) = others {
            metrics.extend(more);
        }
        if !metrics.is_empty() {
            s.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = behavior {
            s.insert("behavior".into(), b);
        }
    }
    obj["spec"] = spec;
    if let Some(mut status) = obj.get("status").cloned().filter(Value::is_object) {
        if let Some(s) = status.as_object_mut() {
            let cpu = s.remove("currentCPUUtilizationPercentage");
            let mut current = match current {
                Some(Value::Array(c)) => c,
                _ => Vec::new(),
            };
            if let Some(cpu) = cpu
                && !current
                    .iter()
                    .any(|m| m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
            {
                current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": cpu}}}));
            }
            if !current.is_empty() {
                s.insert("currentMetrics".into(), Value::Array(current));
            }
            if let Some(c) = conditions {
                s.insert("conditions".into(), c);
            }
        }
        obj["status"] = status;
    }
    obj["apiVersion"] = json!("autoscaling/v2");
}

fn drop_empty_annotations(obj: &mut Value) {
    let meta = crate::value::meta_mut(obj);
    if meta
        .get("annotations")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hpa_round_trips_through_v1_keeping_what_v1_cannot_say() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": 5,
                     "metrics": [
                        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}}],
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 2,
                       "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}]}});
        let mut v1 = v2.clone();
        hpa_v2_to_v1(&mut v1);
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        assert!(
            v1["metadata"]["annotations"][METRICS]
                .as_str()
                .unwrap()
                .contains("memory")
        );
        let mut back = v1.clone();
        hpa_v1_to_v2(&mut back);
        assert_eq!(back["spec"], v2["spec"]);
        assert_eq!(
            back["status"]["currentMetrics"],
            v2["status"]["currentMetrics"]
        );
        assert!(back["metadata"].get("annotations").is_none());

        // What kubectl autoscale writes.
        let mut written = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "d"}, "spec": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 80,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}});
        hpa_v1_to_v2(&mut written);
        assert_eq!(
            written["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
    }
}
