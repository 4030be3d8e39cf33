//! Policies and classes, whose behaviour is upstream's defaults and
//! `kubectl get`'s columns: PriorityClass, StorageClass, IngressClass,
//! RuntimeClass, NetworkPolicy, PodDisruptionBudget (evictions read it in
//! `eviction.rs`), HorizontalPodAutoscaler (its v1 view is
//! `conversion.rs`).

use serde_json::Value;

use super::Strategy;
use crate::defaults;
use crate::table::prelude::*;

pub struct PriorityClasses;
pub struct StorageClasses;
pub struct NetworkPolicies;
pub struct HorizontalPodAutoscalers;

impl Strategy for PriorityClasses {
    fn default(&self, obj: &mut Value) {
        defaults::priority_class(obj);
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Value", "integer", 0),
            col("Global-Default", "boolean", 0),
            AGE,
            col("PreemptionPolicy", "string", 0),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![
            name,
            json!(i(o, "/value")),
            json!(
                o.pointer("/globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            json!(created),
            json!(s(o, "/preemptionPolicy")),
        ]
    }
}

impl Strategy for StorageClasses {
    fn default(&self, obj: &mut Value) {
        defaults::storage_class(obj);
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Provisioner", "string", 0),
            col("ReclaimPolicy", "string", 0),
            col("VolumeBindingMode", "string", 0),
            col("AllowVolumeExpansion", "string", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let default = o
            .pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
            .and_then(Value::as_str)
            == Some("true");
        let shown = if default {
            json!(format!("{} (default)", s(o, "/metadata/name")))
        } else {
            name
        };
        vec![
            shown,
            json!(s(o, "/provisioner")),
            json!(match s(o, "/reclaimPolicy") {
                "" => "Delete",
                p => p,
            }),
            json!(match s(o, "/volumeBindingMode") {
                "" => "Immediate",
                m => m,
            }),
            json!(
                o.pointer("/allowVolumeExpansion")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    .to_string()
            ),
            json!(created),
        ]
    }
}

impl Strategy for NetworkPolicies {
    fn default(&self, obj: &mut Value) {
        defaults::network_policy(obj);
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Pod-Selector", "string", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let selector = selector_string(o, "/spec/podSelector");
        vec![name, json!(or_none(selector)), json!(created)]
    }
}

impl Strategy for HorizontalPodAutoscalers {
    fn default(&self, obj: &mut Value) {
        defaults::horizontal_pod_autoscaler(obj);
    }

    /// v1 always writes both counts, v2 only the desired one (`conversion.rs`
    /// adds the other to v1's view of a v2 object).
    fn initial_status(&self, obj: &Value) -> Option<Value> {
        Some(match obj.get("apiVersion").and_then(Value::as_str) {
            Some("autoscaling/v1") => json!({"currentReplicas": 0, "desiredReplicas": 0}),
            _ => json!({"desiredReplicas": 0}),
        })
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Reference", "string", 0),
            col("Targets", "string", 0),
            col("MinPods", "string", 0),
            col("MaxPods", "integer", 0),
            col("Replicas", "integer", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        // As kubectl's printer: each metric's current value (from the
        // status entry of the same index) against its target.
        let statuses = arr(o, "/status/currentMetrics");
        let metrics = arr(o, "/spec/metrics");
        let mut targets: Vec<String> = metrics
            .iter()
            .take(2)
            .enumerate()
            .map(|(n, m)| {
                let status = statuses.get(n);
                let source = match s(m, "/type") {
                    "ContainerResource" => "/containerResource",
                    "Pods" => "/pods",
                    "Object" => "/object",
                    "External" => "/external",
                    _ => "/resource",
                };
                let current = |field: &str| {
                    status
                        .and_then(|st| st.pointer(&format!("{source}/current/{field}")))
                        .map(|v| match v {
                            Value::String(q) => q.clone(),
                            other => other.to_string(),
                        })
                };
                let target = |field: &str| m.pointer(&format!("{source}/target/{field}"));
                match source {
                    "/resource" | "/containerResource" => {
                        let resource = s(m, &format!("{source}/name"));
                        match target("averageValue") {
                            Some(v) => format!(
                                "{resource}: {}/{}",
                                current("averageValue").unwrap_or_else(|| "<unknown>".into()),
                                v.as_str().unwrap_or_default()
                            ),
                            None => format!(
                                "{resource}: {}/{}",
                                current("averageUtilization")
                                    .map_or_else(|| "<unknown>".into(), |u| format!("{u}%")),
                                target("averageUtilization")
                                    .map_or_else(|| "<auto>".into(), |t| format!("{t}%"))
                            ),
                        }
                    }
                    _ => {
                        let average = target("averageValue")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let (field, shown) = match target("value") {
                            Some(v) => ("value", v.as_str().unwrap_or_default().to_string()),
                            // kubectl marks an average only where a value
                            // could be meant (Object, External).
                            None if source == "/pods" => ("averageValue", average.to_string()),
                            None => ("averageValue", format!("{average} (avg)")),
                        };
                        format!(
                            "{}/{shown}",
                            current(field).unwrap_or_else(|| "<unknown>".into())
                        )
                    }
                }
            })
            .collect();
        if metrics.len() > 2 {
            let more = format!("{} + {} more...", targets.join(", "), metrics.len() - 2);
            targets = vec![more];
        }
        vec![
            name,
            json!(format!(
                "{}/{}",
                s(o, "/spec/scaleTargetRef/kind"),
                s(o, "/spec/scaleTargetRef/name")
            )),
            json!(or_none(targets.join(", "))),
            json!(
                o.pointer("/spec/minReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
                    .to_string()
            ),
            json!(i(o, "/spec/maxReplicas")),
            json!(i(o, "/status/currentReplicas")),
            json!(created),
        ]
    }
}

pub struct PodDisruptionBudgets;

impl Strategy for PodDisruptionBudgets {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Min Available", "string", 0),
            col("Max Unavailable", "string", 0),
            col("Allowed Disruptions", "integer", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let shown = |p: &str| match o.pointer(p) {
            Some(Value::String(v)) => v.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => "N/A".to_string(),
        };
        vec![
            name,
            json!(shown("/spec/minAvailable")),
            json!(shown("/spec/maxUnavailable")),
            json!(i(o, "/status/disruptionsAllowed")),
            json!(created),
        ]
    }
}

pub struct IngressClasses;

impl Strategy for IngressClasses {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Controller", "string", 0),
            col("Parameters", "string", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![
            name,
            json!(s(o, "/spec/controller")),
            json!(match s(o, "/spec/parameters/name") {
                "" => "<none>".to_string(),
                p => format!("{}/{p}", s(o, "/spec/parameters/kind")),
            }),
            json!(created),
        ]
    }
}

pub struct RuntimeClasses;

impl Strategy for RuntimeClasses {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Handler", "string", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![name, json!(s(o, "/handler")), json!(created)]
    }
}
