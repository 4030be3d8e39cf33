//! Upstream's defaulting of built-in kinds, applied on create and update
//! by each kind's strategy (`kinds/`):
//! the values kube-apiserver fills in when a client leaves them out, so
//! clients (and controllers comparing desired with actual state) see the
//! same objects here as on any cluster.

use serde_json::{Map, Value, json};

// Each kind's defaults, called by its strategy (`kinds/`). None overwrites
// a set field.

pub fn pod(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec") {
        pod_spec(spec, true);
        default_tolerations(spec);
    }
}

pub fn replication_controller(obj: &mut Value) {
    set(obj, "/spec", "replicas", json!(1));
    template(obj, "/spec/template/spec", true);
}

pub fn deployment(obj: &mut Value) {
    set(obj, "/spec", "replicas", json!(1));
    set(obj, "/spec", "revisionHistoryLimit", json!(10));
    set(obj, "/spec", "progressDeadlineSeconds", json!(600));
    rolling_update(
        obj,
        "strategy",
        [("maxSurge", json!("25%")), ("maxUnavailable", json!("25%"))],
    );
    template(obj, "/spec/template/spec", true);
}

pub fn replica_set(obj: &mut Value) {
    set(obj, "/spec", "replicas", json!(1));
    template(obj, "/spec/template/spec", true);
}

pub fn stateful_set(obj: &mut Value) {
    set(obj, "/spec", "replicas", json!(1));
    set(obj, "/spec", "revisionHistoryLimit", json!(10));
    set(obj, "/spec", "podManagementPolicy", json!("OrderedReady"));
    rolling_update(obj, "updateStrategy", [("partition", json!(0))]);
    set(
        obj,
        "/spec",
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    template(obj, "/spec/template/spec", true);
}

pub fn daemon_set(obj: &mut Value) {
    set(obj, "/spec", "revisionHistoryLimit", json!(10));
    rolling_update(
        obj,
        "updateStrategy",
        [("maxUnavailable", json!(1)), ("maxSurge", json!(0))],
    );
    template(obj, "/spec/template/spec", true);
}

pub fn job(obj: &mut Value) {
    job_spec(obj, "/spec");
    template(obj, "/spec/template/spec", false);
}

pub fn cron_job(obj: &mut Value) {
    set(obj, "/spec", "concurrencyPolicy", json!("Allow"));
    set(obj, "/spec", "suspend", json!(false));
    set(obj, "/spec", "successfulJobsHistoryLimit", json!(3));
    set(obj, "/spec", "failedJobsHistoryLimit", json!(1));
    template(obj, "/spec/jobTemplate/spec/template/spec", false);
}

pub fn priority_class(obj: &mut Value) {
    top(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
}

pub fn storage_class(obj: &mut Value) {
    top(obj, "reclaimPolicy", json!("Delete"));
    top(obj, "volumeBindingMode", json!("Immediate"));
}

pub fn persistent_volume(obj: &mut Value) {
    set(
        obj,
        "/spec",
        "persistentVolumeReclaimPolicy",
        json!("Retain"),
    );
    set(obj, "/spec", "volumeMode", json!("Filesystem"));
}

pub fn persistent_volume_claim(obj: &mut Value) {
    set(obj, "/spec", "volumeMode", json!("Filesystem"));
}

pub fn network_policy(obj: &mut Value) {
    // Ingress always; Egress too when egress rules are given.
    let egress = obj.pointer("/spec/egress").is_some();
    let types = if egress {
        json!(["Ingress", "Egress"])
    } else {
        json!(["Ingress"])
    };
    set(obj, "/spec", "policyTypes", types);
}

/// autoscaling/v2's defaults: one replica at least, 80% of the pods' CPU
/// request when no metric is named, and a behavior's missing rules and
/// fields as the controller's built-in ones.
pub fn horizontal_pod_autoscaler(obj: &mut Value) {
    set(obj, "/spec", "minReplicas", json!(1));
    let no_metrics = obj
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if no_metrics && let Some(spec) = obj.pointer_mut("/spec").and_then(Value::as_object_mut) {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if obj.pointer("/spec/behavior").is_some_and(Value::is_object) {
        let up_policies = json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]);
        let down_policies = json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]);
        for (rules, window, policies) in [
            ("scaleUp", 0, up_policies),
            ("scaleDown", 300, down_policies),
        ] {
            set(obj, "/spec/behavior", rules, json!({}));
            let at = format!("/spec/behavior/{rules}");
            set(obj, &at, "stabilizationWindowSeconds", json!(window));
            set(obj, &at, "selectPolicy", json!("Max"));
            set(obj, &at, "policies", policies);
        }
    }
}

/// Sets a top-level field of `obj` unless it is set.
fn top(obj: &mut Value, field: &str, value: Value) {
    if let Some(o) = obj.as_object_mut() {
        o.entry(field).or_insert(value);
    }
}

/// What upstream's Job strategy does on create, once the uid is known: a
/// selector on the controller uid and the matching template labels, unless
/// the Job sets `manualSelector`.
pub fn job_selector(obj: &mut Value) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if !template.get("metadata").is_some_and(Value::is_object) {
        template["metadata"] = json!({});
    }
    let meta = &mut template["metadata"];
    if !meta.get("labels").is_some_and(Value::is_object) {
        meta["labels"] = json!({});
    }
    if let Some(labels) = meta["labels"].as_object_mut() {
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels.insert(k.into(), json!(v));
        }
    }
}

/// A workload's update strategy (`spec.<field>`): RollingUpdate unless
/// set, and the rolling parameters when it rolls.
fn rolling_update<const N: usize>(obj: &mut Value, field: &str, params: [(&str, Value); N]) {
    set(obj, "/spec", field, json!({"type": "RollingUpdate"}));
    let strategy = format!("/spec/{field}");
    if str_at(obj, &format!("{strategy}/type")) == "RollingUpdate" {
        set(obj, &strategy, "rollingUpdate", json!({}));
        let rolling = format!("{strategy}/rollingUpdate");
        for (k, v) in params {
            set(obj, &rolling, k, v);
        }
    }
}

/// Sets `parent[field]` to `value` when the parent is an object without it.
fn set(obj: &mut Value, parent: &str, field: &str, value: Value) {
    if let Some(o) = obj.pointer_mut(parent).and_then(Value::as_object_mut)
        && o.get(field).is_none_or(Value::is_null)
    {
        o.insert(field.into(), value);
    }
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn template(obj: &mut Value, pointer: &str, restart_always: bool) {
    if let Some(spec) = obj.pointer_mut(pointer) {
        pod_spec(spec, restart_always);
    }
}

fn job_spec(obj: &mut Value, spec: &str) {
    let Some(s) = obj.pointer_mut(spec).and_then(Value::as_object_mut) else {
        return;
    };
    // Upstream: both unset means one pod to completion; parallelism alone
    // means a work queue (completions stays unset).
    if s.get("completions").is_none_or(Value::is_null)
        && s.get("parallelism").is_none_or(Value::is_null)
    {
        s.insert("completions".into(), json!(1));
    }
    defaults_into(
        s,
        [
            ("parallelism", json!(1)),
            ("backoffLimit", json!(6)),
            ("completionMode", json!("NonIndexed")),
            ("suspend", json!(false)),
            ("manualSelector", json!(false)),
            ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ],
    );
}

fn defaults_into<const N: usize>(o: &mut Map<String, Value>, defaults: [(&str, Value); N]) {
    for (k, v) in defaults {
        if o.get(k).is_none_or(Value::is_null) {
            o.insert(k.into(), v);
        }
    }
}

fn pod_spec(spec: &mut Value, restart_always: bool) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    if restart_always {
        defaults_into(s, [("restartPolicy", json!("Always"))]);
    }
    defaults_into(
        s,
        [
            ("dnsPolicy", json!("ClusterFirst")),
            ("schedulerName", json!("default-scheduler")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("securityContext", json!({})),
        ],
    );
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(containers) = s.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            let pull = if image_tag(image).is_none_or(|t| t == "latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            defaults_into(
                c,
                [
                    ("imagePullPolicy", json!(pull)),
                    ("terminationMessagePath", json!("/dev/termination-log")),
                    ("terminationMessagePolicy", json!("File")),
                ],
            );
            // Ephemeral containers may hold no resources (upstream leaves
            // the struct empty).
            if list != "ephemeralContainers" {
                defaults_into(c, [("resources", json!({}))]);
            }
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    defaults_into(p, [("protocol", json!("TCP"))]);
                }
            }
        }
    }
}

/// The tag of an image reference, if it names one (a digest does not).
fn image_tag(image: &str) -> Option<&str> {
    if image.contains('@') {
        return Some("digest");
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, tag)| tag)
}

/// The DefaultTolerationSeconds admission plugin: pods tolerate a not-ready
/// or unreachable node for 300 s before the taint manager evicts them.
fn default_tolerations(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    let tolerations = s.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let tkey = t.get("key").and_then(Value::as_str).unwrap_or("");
            (effect.is_empty() || effect == "NoExecute") && (tkey.is_empty() || tkey == key)
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

pub fn service(obj: &mut Value) {
    let Some(s) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    defaults_into(
        s,
        [
            ("type", json!("ClusterIP")),
            ("sessionAffinity", json!("None")),
        ],
    );
    let kind = s
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind != "ExternalName" {
        defaults_into(s, [("internalTrafficPolicy", json!("Cluster"))]);
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        defaults_into(s, [("externalTrafficPolicy", json!("Cluster"))]);
    }
    if let Some(ports) = s.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            defaults_into(p, [("protocol", json!("TCP"))]);
            if p.get("targetPort").is_none_or(Value::is_null)
                && let Some(port) = p.get("port").cloned()
            {
                p.insert("targetPort".into(), port);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags() {
        assert_eq!(image_tag("nginx"), None);
        assert_eq!(image_tag("nginx:1.27"), Some("1.27"));
        assert_eq!(image_tag("registry:5000/app"), None);
        assert_eq!(image_tag("registry:5000/app:v1"), Some("v1"));
        assert_eq!(image_tag("app@sha256:abc"), Some("digest"));
    }

    #[test]
    fn update_strategies_default_only_when_rolling() {
        let apply = |plural: &str, obj: &mut Value| {
            let r = crate::builtin::resource("apps", plural);
            crate::kinds::strategy(&r).default(obj);
        };
        let mut d = json!({"spec": {}});
        apply("deployments", &mut d);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        let mut recreate = json!({"spec": {"strategy": {"type": "Recreate"}}});
        apply("deployments", &mut recreate);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
        let mut ds = json!({"spec": {}});
        apply("daemonsets", &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"maxUnavailable": 1, "maxSurge": 0})
        );
        let mut sts = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
        apply("statefulsets", &mut sts);
        assert_eq!(sts["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    }

    #[test]
    fn tolerations_added_once() {
        let mut spec = json!({"containers": [{"name": "a", "image": "x:1"}]});
        default_tolerations(&mut spec);
        default_tolerations(&mut spec);
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        let mut tolerant = json!({"tolerations": [{"operator": "Exists"}]});
        default_tolerations(&mut tolerant);
        assert_eq!(tolerant["tolerations"].as_array().map(Vec::len), Some(1));
    }
}
