//! Pods: created `Pending` with their QoS class (whatever status the
//! client sent), selectable by node, phase and the rest upstream allows,
//! answered with themselves on deletion. Their subresources are listed
//! here; `/binding` is served in `handlers.rs`, `/eviction` in
//! `eviction.rs`, the kubelet's in `connect.rs`.

use serde_json::{Value, json};

use super::{Discovered, Methods, READ_WRITE_VERBS, ServedBy, Strategy, Subresource};
use crate::error::Cause;
use crate::table::prelude::*;
use flotilla_core::quantity;

pub struct Pods;

const fn kubelet(name: &'static str) -> Subresource {
    Subresource {
        name,
        methods: Methods::Any,
        served_by: ServedBy::Kubelet,
        discovered: None,
    }
}

/// A pod's own subresources.
const SUBRESOURCES: &[Subresource] = &[
    Subresource {
        name: "binding",
        methods: Methods::Post,
        served_by: ServedBy::Binding,
        discovered: None,
    },
    Subresource {
        name: "eviction",
        methods: Methods::Post,
        served_by: ServedBy::Eviction,
        discovered: Some(Discovered {
            response: Some(("policy", "v1", "Eviction")),
            verbs: &["create"],
        }),
    },
    Subresource {
        name: "ephemeralcontainers",
        methods: Methods::ReadWrite,
        served_by: ServedBy::Handlers,
        discovered: Some(Discovered {
            response: None,
            verbs: READ_WRITE_VERBS,
        }),
    },
    kubelet("log"),
    kubelet("exec"),
    kubelet("attach"),
    kubelet("portforward"),
];

impl Strategy for Pods {
    fn subresources(&self) -> &'static [Subresource] {
        SUBRESOURCES
    }

    /// A pod on a node is stopped by its kubelet first: the grace is the
    /// request's, or the pod's terminationGracePeriodSeconds (30). One not
    /// scheduled, or already finished, goes at once.
    fn deletion_grace(&self, obj: &Value, requested: Option<i64>) -> i64 {
        let bound = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !bound || finished {
            return 0;
        }
        requested
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    fn default(&self, pod: &mut Value) {
        crate::defaults::pod(pod);
    }

    fn prepare_create(&self, pod: &mut Value) {
        pod["status"] = initial_status(pod);
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    /// `/ephemeralcontainers` (after the merge kept everything else):
    /// containers may be added, never changed or removed, as upstream.
    fn update_subresource(&self, subresource: &str, new: &mut Value, old: &Value) -> Vec<Cause> {
        match subresource {
            "ephemeralcontainers" => ephemeral_containers_update(new, old),
            _ => Vec::new(),
        }
    }

    /// Upstream lets an update change only images, `activeDeadlineSeconds`,
    /// tolerations and `terminationGracePeriodSeconds` of a pod's spec (and
    /// remove scheduling gates); the node comes through `/binding`.
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        let fixed = |pod: &Value| {
            let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(s) = spec.as_object_mut() {
                for field in [
                    "activeDeadlineSeconds",
                    "tolerations",
                    "terminationGracePeriodSeconds",
                    "schedulingGates",
                    "nodeName",
                ] {
                    s.remove(field);
                }
                for list in ["containers", "initContainers"] {
                    for c in s
                        .get_mut(list)
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(c) = c.as_object_mut() {
                            c.remove("image");
                        }
                    }
                }
            }
            spec
        };
        if fixed(new) == fixed(old) {
            return Vec::new();
        }
        vec![Cause {
            reason: "FieldValueForbidden",
            field: "spec".into(),
            message: "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
        }]
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            AGE,
            col("IP", "string", 1),
            col("Node", "string", 1),
            col("Nominated Node", "string", 1),
            col("Readiness Gates", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let statuses = arr(o, "/status/containerStatuses");
        let total = arr(o, "/spec/containers").len();
        let ready = statuses
            .iter()
            .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
            .count();
        let restarts: i64 = statuses.iter().map(|c| i(c, "/restartCount")).sum();
        let mut status = s(o, "/status/reason").to_string();
        if status.is_empty() {
            status = s(o, "/status/phase").to_string();
        }
        if o.pointer("/metadata/deletionTimestamp").is_some() {
            status = "Terminating".into();
        }
        if status.is_empty() {
            status = "Pending".into();
        }
        vec![
            name,
            json!(format!("{ready}/{total}")),
            json!(status),
            json!(restarts.to_string()),
            json!(created),
            json!(or_none(s(o, "/status/podIP").to_string())),
            json!(or_none(s(o, "/spec/nodeName").to_string())),
            json!(or_none(s(o, "/status/nominatedNodeName").to_string())),
            json!("<none>"),
        ]
    }
}

/// The status a new pod starts with (whatever the client sent).
pub fn initial_status(pod: &Value) -> Value {
    json!({"phase": "Pending", "qosClass": qos_class(pod.get("spec").unwrap_or(&Value::Null))})
}

/// Kubernetes' QoS class of a pod spec: `Guaranteed` when every container
/// (init containers included) limits CPU and memory and requests what it
/// limits, `BestEffort` when none requests or limits either, `Burstable`
/// otherwise. Requests default to limits (as upstream's defaulting does).
pub fn qos_class(spec: &Value) -> &'static str {
    const COMPUTE: [&str; 2] = ["cpu", "memory"];
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten();
    let amount = |list: Option<&Value>, name: &str| {
        list.and_then(|l| l.get(name))
            .and_then(|q| match q {
                Value::String(s) => quantity::parse(s),
                Value::Number(n) => n.as_f64(),
                _ => None,
            })
            .filter(|v| *v > 0.0)
    };
    let (mut any, mut guaranteed) = (false, true);
    for container in containers {
        let resources = container.get("resources");
        let limits = resources.and_then(|r| r.get("limits"));
        let requests = resources.and_then(|r| r.get("requests"));
        for name in COMPUTE {
            let limit = amount(limits, name);
            let request = amount(requests, name).or(limit);
            any |= limit.is_some() || request.is_some();
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Upstream's checks of an `/ephemeralcontainers` write: every container
/// already there unchanged; each new one named (unique among the pod's
/// containers) with an image, and without what only a regular container
/// may have (ports, resources, probes, lifecycle hooks).
fn ephemeral_containers_update(new: &Value, old: &Value) -> Vec<Cause> {
    let list =
        |pod: &Value, field: &str| -> Vec<Value> { arr(pod, &format!("/spec/{field}")).to_vec() };
    let (before, after) = (
        list(old, "ephemeralContainers"),
        list(new, "ephemeralContainers"),
    );
    let mut causes = Vec::new();
    let field = |i: usize, f: &str| {
        if f.is_empty() {
            format!("spec.ephemeralContainers[{i}]")
        } else {
            format!("spec.ephemeralContainers[{i}].{f}")
        }
    };
    for b in &before {
        let name = s(b, "/name");
        match after.iter().position(|a| s(a, "/name") == name) {
            None => causes.push(Cause {
                reason: "FieldValueNotFound",
                field: "spec.ephemeralContainers".into(),
                message: format!("Not found: \"{name}\""),
            }),
            Some(i) if after[i] != *b => causes.push(Cause {
                reason: "FieldValueForbidden",
                field: field(i, ""),
                message: format!(
                    "Forbidden: existing ephemeral containers \"{name}\" may not be changed"
                ),
            }),
            Some(_) => {}
        }
    }
    let regular: Vec<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|f| list(new, f))
        .map(|c| s(&c, "/name").to_string())
        .collect();
    for (i, c) in after.iter().enumerate() {
        if before.iter().any(|b| s(b, "/name") == s(c, "/name")) {
            continue;
        }
        let name = s(c, "/name");
        if name.is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: field(i, "name"),
                message: "Required value".into(),
            });
        } else if regular.iter().any(|r| r == name)
            || after.iter().filter(|a| s(a, "/name") == name).count() > 1
        {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: field(i, "name"),
                message: format!("Duplicate value: \"{name}\""),
            });
        }
        if s(c, "/image").is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: field(i, "image"),
                message: "Required value".into(),
            });
        }
        for f in [
            "ports",
            "resources",
            "lifecycle",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        ] {
            let set = c.get(f).is_some_and(|v| match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => true,
            });
            if set {
                causes.push(Cause {
                    reason: "FieldValueForbidden",
                    field: field(i, f),
                    message: "Forbidden: cannot be set for an Ephemeral Container".into(),
                });
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(resources: &[Value]) -> Value {
        let containers: Vec<Value> = resources
            .iter()
            .map(|r| json!({"name": "c", "image": "i", "resources": r}))
            .collect();
        json!({"containers": containers})
    }

    #[test]
    fn qos_classes_follow_upstreams_rules() {
        assert_eq!(qos_class(&spec(&[json!({})])), "BestEffort");
        assert_eq!(
            qos_class(&spec(&[json!({"limits": {"cpu": "1", "memory": "1Gi"}})])),
            "Guaranteed",
            "requests default to limits"
        );
        assert_eq!(
            qos_class(&spec(&[json!({"limits": {"cpu": "1", "memory": "1Gi"},
                                     "requests": {"cpu": "1000m", "memory": "1Gi"}})])),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&spec(&[json!({"requests": {"cpu": "100m"}})])),
            "Burstable"
        );
        assert_eq!(
            qos_class(&spec(&[
                json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
                json!({})
            ])),
            "Burstable",
            "every container must be guaranteed"
        );
        assert_eq!(qos_class(&Value::Null), "BestEffort");
    }
}
