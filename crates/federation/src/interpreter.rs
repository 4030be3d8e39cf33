//! What the pipeline knows about kinds, as Karmada's native resource
//! interpreter: replicas and per-replica requests (InterpretReplica),
//! per-cluster replicas (ReviseReplica), what of a template is delivered
//! (Retain's counterpart), health (InterpretHealth), and how member
//! statuses fold into the template's (AggregateStatus).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value, json};

use crate::api::{AggregatedStatusItem, ReplicaRequirements, annotations};
use flotilla_core::quantity;

/// Kinds whose replicas Flotilla divides; everything else is Duplicated.
fn is_workload(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet")
            | ("batch/v1", "Job")
            | ("v1", "Pod")
    )
}

/// The pod spec replicas of this kind run.
fn pod_spec<'a>(kind: &str, obj: &'a Value) -> Option<&'a Value> {
    if kind == "Pod" {
        obj.get("spec")
    } else {
        obj.pointer("/spec/template/spec")
    }
}

/// Replicas and per-replica requirements; `None` for kinds that are not
/// divided.
pub fn replicas(
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Option<(i32, Option<ReplicaRequirements>)> {
    if !is_workload(api_version, kind) {
        return None;
    }
    let field = |p: &str| obj.pointer(p).and_then(Value::as_i64).map(|n| n as i32);
    let n = match kind {
        "Pod" => 1,
        "Job" => field("/spec/parallelism").unwrap_or(1),
        _ => field("/spec/replicas").unwrap_or(1),
    };
    let requests = pod_spec(kind, obj).map(pod_requests).unwrap_or_default();
    let requirements = (!requests.is_empty()).then(|| ReplicaRequirements {
        resource_request: requests,
        ..Default::default()
    });
    Some((n, requirements))
}

/// A pod's effective requests: the sum over containers, or the largest
/// init container's where that is more, as the scheduler counts them.
fn pod_requests(spec: &Value) -> BTreeMap<String, Quantity> {
    let requests_of = |c: &Value| -> BTreeMap<String, f64> {
        c.pointer("/resources/requests")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), quantity::parse(v.as_str()?)?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let list = |k: &str| {
        spec.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for c in list("containers") {
        for (k, v) in requests_of(&c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in list("initContainers") {
        for (k, v) in requests_of(&c) {
            let t = total.entry(k).or_default();
            *t = t.max(v);
        }
    }
    total
        .into_iter()
        .map(|(k, v)| {
            let q = if k == "cpu" {
                quantity::format_millicores((v * 1000.0).ceil() as i64)
            } else {
                (v.ceil() as i64).to_string()
            };
            (k, Quantity(q))
        })
        .collect()
}

/// The template as delivered to a member: no status, none of the hub's
/// server-set metadata, and none of the fields a member allocates itself.
pub fn manifest(template: &Value) -> Value {
    let mut m = template.clone();
    let Some(obj) = m.as_object_mut() else {
        return m;
    };
    obj.remove("status");
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "ownerReferences",
            "finalizers",
            "selfLink",
            "generateName",
        ] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
            a.remove(annotations::TEMPLATE_DIGEST);
        }
    }
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Service") => {
            // Each member allocates its own cluster IPs and node ports.
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
                spec.remove("healthCheckNodePort");
                for port in spec
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(p) = port.as_object_mut() {
                        p.remove("nodePort");
                    }
                }
            }
        }
        ("batch/v1", "Job") => {
            // The hub's generated selector names the hub's Job uid.
            let manual = m.pointer("/spec/manualSelector") == Some(&Value::Bool(true));
            if !manual {
                if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("selector");
                }
                if let Some(labels) = m
                    .pointer_mut("/spec/template/metadata/labels")
                    .and_then(Value::as_object_mut)
                {
                    for k in [
                        "controller-uid",
                        "batch.kubernetes.io/controller-uid",
                        "job-name",
                        "batch.kubernetes.io/job-name",
                    ] {
                        labels.remove(k);
                    }
                }
            }
        }
        _ => {}
    }
    m
}

/// Sets this cluster's share of replicas in a delivered manifest. Job
/// completions are split in the same proportion as parallelism.
pub fn revise_replicas(manifest: &mut Value, kind: &str, replicas: i32, total: i32) {
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" => {
            spec.insert("replicas".into(), json!(replicas));
        }
        "Job" => {
            spec.insert("parallelism".into(), json!(replicas));
            if let Some(c) = spec.get("completions").and_then(Value::as_i64)
                && total > 0
            {
                let share = c * i64::from(replicas) / i64::from(total);
                spec.insert("completions".into(), json!(share.max(1)));
            }
        }
        _ => {}
    }
}

/// Karmada's Healthy, Unhealthy or Unknown for a member object.
pub fn health(kind: &str, obj: &Value) -> &'static str {
    let int = |p: &str| obj.pointer(p).and_then(Value::as_i64);
    let observed =
        int("/status/observedGeneration").unwrap_or(0) >= int("/metadata/generation").unwrap_or(0);
    let healthy = match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" => {
            let want = int("/spec/replicas").unwrap_or(1);
            let updated = if kind == "ReplicaSet" {
                int("/status/replicas")
            } else {
                int("/status/updatedReplicas")
            };
            observed
                && updated.unwrap_or(0) == want
                && int("/status/availableReplicas").unwrap_or(0) == want
        }
        "DaemonSet" => {
            observed
                && int("/status/updatedNumberScheduled") == int("/status/desiredNumberScheduled")
                && int("/status/numberAvailable") == int("/status/desiredNumberScheduled")
        }
        "Job" => !has_condition(obj, "Failed"),
        "Pod" => matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Running" | "Succeeded")
        ),
        // Any other kind: a Ready or Available condition speaks for it;
        // without one, existing is healthy.
        _ => {
            for t in ["Ready", "Available"] {
                if let Some(s) = condition_status(obj, t) {
                    return if s == "True" { "Healthy" } else { "Unhealthy" };
                }
            }
            true
        }
    };
    if healthy { "Healthy" } else { "Unhealthy" }
}

fn condition_status<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

fn has_condition(obj: &Value, type_: &str) -> bool {
    condition_status(obj, type_) == Some("True")
}

/// The status a member object reports back (ReflectStatus): its status,
/// plus for workloads the generations needed to judge whether the member
/// has caught up with the template.
pub fn reflect_status(obj: &Value) -> Option<Value> {
    let mut status = obj.get("status").cloned()?;
    if let Some(s) = status.as_object_mut() {
        if let Some(g) = obj.pointer("/metadata/generation") {
            s.insert("generation".into(), g.clone());
        }
        let template_generation = obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(annotations::TEMPLATE_GENERATION))
            .and_then(Value::as_str)
            .and_then(|g| g.parse::<i64>().ok());
        if let Some(g) = template_generation {
            s.insert("resourceTemplateGeneration".into(), json!(g));
        }
    }
    Some(status)
}

const DEPLOYMENT_COUNTS: &[&str] = &[
    "replicas",
    "readyReplicas",
    "updatedReplicas",
    "availableReplicas",
    "unavailableReplicas",
];
const STATEFULSET_COUNTS: &[&str] = &[
    "replicas",
    "readyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "availableReplicas",
];
const DAEMONSET_COUNTS: &[&str] = &[
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberAvailable",
    "numberMisscheduled",
    "numberReady",
    "updatedNumberScheduled",
    "numberUnavailable",
];
const JOB_COUNTS: &[&str] = &["active", "succeeded", "failed"];

/// The template's status from its members' (AggregateStatus), or `None`
/// for kinds whose status is not aggregated.
pub fn aggregate_status(
    kind: &str,
    template: &Value,
    items: &[AggregatedStatusItem],
) -> Option<Value> {
    let statuses: Vec<&Map<String, Value>> = items
        .iter()
        .filter_map(|i| i.status.as_ref()?.as_object())
        .collect();
    let generation = template
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let counts = match kind {
        "Deployment" => DEPLOYMENT_COUNTS,
        "StatefulSet" => STATEFULSET_COUNTS,
        "DaemonSet" => DAEMONSET_COUNTS,
        "Job" => JOB_COUNTS,
        "Service" => return aggregate_service(template, &statuses),
        _ => return None,
    };
    let mut out = Map::new();
    for field in counts {
        let sum: i64 = statuses
            .iter()
            .filter_map(|s| s.get(*field).and_then(Value::as_i64))
            .sum();
        // Zeros too: a merge patch must overwrite a count that fell to 0.
        out.insert((*field).into(), json!(sum));
    }
    // The template is observed once every member has caught up with it.
    let caught_up = !statuses.is_empty()
        && statuses.len() == items.len()
        && statuses.iter().all(|s| {
            let int = |k: &str| s.get(k).and_then(Value::as_i64);
            int("resourceTemplateGeneration") == generation
                && int("observedGeneration") >= int("generation")
        });
    if kind != "Job" {
        let observed = if caught_up {
            generation
        } else {
            template
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
        };
        if let Some(g) = observed {
            out.insert("observedGeneration".into(), json!(g));
        }
    }
    if kind == "Job" {
        let clusters = items.len();
        let done = |t: &str| {
            clusters > 0
                && statuses.len() == clusters
                && statuses.iter().all(|s| {
                    s.get("conditions")
                        .and_then(Value::as_array)
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c["type"] == t && c["status"] == "True")
                        })
                })
        };
        if done("Complete") {
            out.insert(
                "conditions".into(),
                json!([{"type": "Complete", "status": "True", "reason": "Completed",
                         "message": "Job completed in every cluster"}]),
            );
        } else if statuses.iter().any(|s| {
            s.get("conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Failed" && c["status"] == "True")
                })
        }) {
            out.insert(
                "conditions".into(),
                json!([{"type": "Failed", "status": "True", "reason": "JobFailed",
                         "message": "Job failed in at least one cluster"}]),
            );
        }
        for k in ["startTime", "completionTime"] {
            let pick = statuses
                .iter()
                .filter_map(|s| s.get(k).and_then(Value::as_str));
            let v = if k == "startTime" {
                pick.min()
            } else if done("Complete") {
                pick.max()
            } else {
                None
            };
            if let Some(v) = v {
                out.insert(k.into(), json!(v));
            }
        }
    }
    Some(Value::Object(out))
}

/// LoadBalancer ingress points of every member, for LoadBalancer Services.
fn aggregate_service(template: &Value, statuses: &[&Map<String, Value>]) -> Option<Value> {
    if template.pointer("/spec/type").and_then(Value::as_str) != Some("LoadBalancer") {
        return None;
    }
    let ingress: Vec<Value> = statuses
        .iter()
        .filter_map(|s| s.get("loadBalancer")?.get("ingress")?.as_array())
        .flatten()
        .cloned()
        .collect();
    Some(json!({"loadBalancer": {"ingress": ingress}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx", "namespace": "default", "uid": "u", "generation": 2,
                          "resourceVersion": "7", "managedFields": []},
            "spec": {"replicas": replicas, "template": {"spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                               {"name": "b", "resources": {"requests": {"cpu": "0.5"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}]}}},
            "status": {"replicas": 3}
        })
    }

    #[test]
    fn workloads_report_replicas_and_effective_requests() {
        let (n, req) = replicas("apps/v1", "Deployment", &deployment(3)).unwrap();
        assert_eq!(n, 3);
        let req = req.unwrap().resource_request;
        assert_eq!(req["cpu"].0, "1");
        assert_eq!(req["memory"].0, (64 * 1024 * 1024).to_string());
        assert!(replicas("v1", "ConfigMap", &json!({})).is_none());
    }

    #[test]
    fn manifests_drop_server_fields_and_member_allocations() {
        let m = manifest(&deployment(3));
        assert!(m.get("status").is_none());
        assert_eq!(
            m["metadata"],
            json!({"name": "nginx", "namespace": "default"})
        );
        let svc = manifest(
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "type": "NodePort",
                     "ports": [{"port": 80, "nodePort": 30001}]}}),
        );
        assert_eq!(
            svc["spec"],
            json!({"type": "NodePort", "ports": [{"port": 80}]})
        );
    }

    #[test]
    fn deployment_status_sums_and_observes_once_members_caught_up() {
        let item = |ready: i64, tg: i64| AggregatedStatusItem {
            cluster_name: "m".into(),
            status: Some(
                json!({"replicas": 2, "readyReplicas": ready, "availableReplicas": ready,
                "updatedReplicas": 2, "observedGeneration": 1, "generation": 1,
                "resourceTemplateGeneration": tg}),
            ),
            applied: true,
            ..Default::default()
        };
        let s = aggregate_status("Deployment", &deployment(4), &[item(1, 2), item(2, 2)]).unwrap();
        assert_eq!(s["replicas"], 4);
        assert_eq!(s["readyReplicas"], 3);
        assert_eq!(s["observedGeneration"], 2);
        let stale =
            aggregate_status("Deployment", &deployment(4), &[item(1, 1), item(2, 2)]).unwrap();
        assert!(stale.get("observedGeneration").is_none());
    }

    #[test]
    fn jobs_daemonsets_and_load_balancers_aggregate() {
        let item = |status: Value| AggregatedStatusItem {
            cluster_name: "m".into(),
            status: Some(status),
            applied: true,
            ..Default::default()
        };
        let complete = json!({"succeeded": 2, "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:01:00Z",
            "conditions": [{"type": "Complete", "status": "True"}]});
        let running = json!({"active": 1, "startTime": "2025-12-31T00:00:00Z"});
        let job = json!({"kind": "Job", "metadata": {"generation": 1}});
        let s = aggregate_status(
            "Job",
            &job,
            &[item(complete.clone()), item(running.clone())],
        )
        .unwrap();
        assert_eq!(
            (s["active"].clone(), s["succeeded"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(s["startTime"], "2025-12-31T00:00:00Z");
        assert!(s.get("conditions").is_none(), "one cluster still runs: {s}");
        let done =
            aggregate_status("Job", &job, &[item(complete.clone()), item(complete)]).unwrap();
        assert_eq!(done["conditions"][0]["type"], "Complete");
        assert_eq!(done["succeeded"], 4);
        let ds = aggregate_status(
            "DaemonSet",
            &json!({"metadata": {"generation": 1}}),
            &[
                item(json!({"desiredNumberScheduled": 3, "numberReady": 3})),
                item(json!({"desiredNumberScheduled": 2, "numberReady": 1})),
            ],
        )
        .unwrap();
        assert_eq!(
            (
                ds["desiredNumberScheduled"].clone(),
                ds["numberReady"].clone()
            ),
            (json!(5), json!(4))
        );
        let lb = json!({"spec": {"type": "LoadBalancer"}});
        let svc = aggregate_status(
            "Service",
            &lb,
            &[
                item(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}})),
                item(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}]}})),
            ],
        )
        .unwrap();
        assert_eq!(
            svc["loadBalancer"]["ingress"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(
            aggregate_status("Service", &json!({"spec": {"type": "ClusterIP"}}), &[]).is_none()
        );
    }

    #[test]
    fn health_follows_rollout_and_conditions() {
        let mut d = deployment(2);
        d["status"] =
            json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert_eq!(health("Deployment", &d), "Healthy");
        d["status"]["availableReplicas"] = json!(1);
        assert_eq!(health("Deployment", &d), "Unhealthy");
        let cr = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert_eq!(health("Widget", &cr), "Unhealthy");
        assert_eq!(health("ConfigMap", &json!({"data": {}})), "Healthy");
    }
}
