//! Cluster API's v1beta1 and v1beta2 shapes of the same objects, as its
//! conversion webhooks convert them: v1beta2 is stored, v1beta1 is served
//! converted on its way out and converted back on its way in, so a client
//! of either version reads and writes its own shape.
//!
//! What moved between the two: references (`{apiVersion, kind, name,
//! namespace}` and `{apiGroup, kind, name}`), a MachineDeployment's
//! `strategy` (`rollout.strategy`), a KubeadmControlPlane's machine
//! template's `infrastructureRef` (under `spec`), a topology's `class`
//! (`classRef`), a MachineHealthCheck's conditions and timeouts (under
//! `checks`, in seconds), a ClusterClass's templates (`ref` to
//! `templateRef`, worker templates up a level) and health checks, a
//! Machine's `nodeRef` (a name), and the status:
//! v1beta2's conditions are v1beta1's `v1beta2.conditions`, v1beta1's are
//! v1beta2's `deprecated.v1beta1.conditions`, the readiness flags are
//! under `initialization`, the old replica counts under `deprecated`.

use serde_json::{Map, Value, json};

/// The reference fields of every kind, as JSON pointers.
const REFS: &[&str] = &[
    "/spec/infrastructureRef",
    "/spec/controlPlaneRef",
    "/spec/bootstrap/configRef",
    "/spec/template/spec/infrastructureRef",
    "/spec/template/spec/bootstrap/configRef",
    "/spec/machineTemplate/infrastructureRef",
    "/spec/machineTemplate/spec/infrastructureRef",
];

/// A kind's `initialization` flags (v1beta2) and their v1beta1 names.
fn ready_flags(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "Cluster" => &[
            ("infrastructureProvisioned", "infrastructureReady"),
            ("controlPlaneInitialized", "controlPlaneReady"),
        ],
        "Machine" => &[
            ("bootstrapDataSecretCreated", "bootstrapReady"),
            ("infrastructureProvisioned", "infrastructureReady"),
        ],
        "KubeadmControlPlane" => &[("controlPlaneInitialized", "initialized")],
        "KubeadmConfig" => &[("dataSecretCreated", "ready")],
        "DockerCluster" | "DockerMachine" | "DevCluster" | "DevMachine" | "DockerMachinePool" => {
            &[("provisioned", "ready")]
        }
        _ => &[],
    }
}

/// Counts v1beta2 keeps under `deprecated.v1beta1`.
const OLD_COUNTS: &[&str] = &[
    "readyReplicas",
    "availableReplicas",
    "updatedReplicas",
    "unavailableReplicas",
    "failureReason",
    "failureMessage",
];

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Moves the value at `from` to `to` (pointers), when there is one.
fn relocate(obj: &mut Value, from: &str, to: &str) {
    let Some(value) = take(obj, from) else {
        return;
    };
    put(obj, to, value);
}

fn take(obj: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, key) = pointer.rsplit_once('/')?;
    let parent = if parent.is_empty() {
        Some(obj)
    } else {
        obj.pointer_mut(parent)
    };
    parent?.as_object_mut()?.remove(key)
}

fn put(obj: &mut Value, pointer: &str, value: Value) {
    let mut at = obj;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert(part.to_string(), value);
            return;
        }
        at = map.entry(part.to_string()).or_insert_with(|| json!({}));
    }
}

/// `300` seconds as a v1beta1 duration, `"300s"`.
fn seconds_to_duration(v: &Value) -> Option<Value> {
    v.as_i64().map(|s| json!(format!("{s}s")))
}

/// A v1beta1 duration (`"5m"`, `"300s"`, `"1h30m"`) in seconds.
fn duration_to_seconds(v: &Value) -> Option<Value> {
    flotilla_core::duration::parse(v).map(|d| json!(d.as_secs()))
}

/// The object as v1beta1 serves it, from its stored (v1beta2) shape.
pub fn to_v1beta1(obj: &mut Value) {
    let namespace = obj["metadata"]["namespace"].clone();
    for pointer in REFS {
        if let Some(r) = obj.pointer_mut(pointer).and_then(Value::as_object_mut)
            && let Some(group) = r.remove("apiGroup")
        {
            let group = group.as_str().unwrap_or_default().to_string();
            r.insert("apiVersion".into(), json!(format!("{group}/v1beta1")));
            if !namespace.is_null() {
                r.insert("namespace".into(), namespace.clone());
            }
        }
    }
    relocate(obj, "/spec/rollout/strategy", "/spec/strategy");
    if obj["spec"]["rollout"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        take(obj, "/spec/rollout");
    }
    relocate(
        obj,
        "/spec/machineTemplate/spec/infrastructureRef",
        "/spec/machineTemplate/infrastructureRef",
    );
    if obj["spec"]["machineTemplate"]["spec"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        take(obj, "/spec/machineTemplate/spec");
    }
    if let Some(class) = take(obj, "/spec/topology/classRef") {
        put(obj, "/spec/topology/class", class["name"].clone());
        if let Some(ns) = class.get("namespace") {
            put(obj, "/spec/topology/classNamespace", ns.clone());
        }
    }
    health_check_to_v1beta1(obj);
    if obj["kind"] == "ClusterClass" {
        class_to_v1beta1(obj);
    }
    status_to_v1beta1(obj);
}

fn status_to_v1beta1(obj: &mut Value) {
    let flags = ready_flags(obj["kind"].as_str().unwrap_or_default());
    let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) else {
        return;
    };
    if let Some(name) = status["nodeRef"]["name"].as_str().map(String::from)
        && status["nodeRef"].get("kind").is_none()
    {
        status["nodeRef"] = json!({"apiVersion": "v1", "kind": "Node", "name": name});
    }
    let conditions = take(status, "/conditions");
    let old = take(status, "/deprecated/v1beta1/conditions")
        .or_else(|| conditions.as_ref().map(v1beta1_conditions));
    if let Some(c) = conditions {
        put(status, "/v1beta2/conditions", c);
    }
    if let Some(c) = old {
        put(status, "/conditions", c);
    }
    for (v2, v1) in flags {
        relocate(status, &format!("/initialization/{v2}"), &format!("/{v1}"));
    }
    if status["initialization"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        take(status, "/initialization");
    }
    // v1beta2's counts keep their names where v1beta1 has none of its own.
    if let Some(n) = take(status, "/upToDateReplicas") {
        put(status, "/v1beta2/upToDateReplicas", n);
    }
    for key in ["readyReplicas", "availableReplicas"] {
        if let Some(n) = status.get(key).cloned() {
            put(status, &format!("/v1beta2/{key}"), n);
        }
    }
    for key in OLD_COUNTS {
        relocate(
            status,
            &format!("/deprecated/v1beta1/{key}"),
            &format!("/{key}"),
        );
    }
    if status["deprecated"]["v1beta1"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        take(status, "/deprecated");
    }
}

/// v1beta1's conditions where the writer kept none of its own: each of
/// v1beta2's in v1beta1's shape (a severity when not True), and `Ready`
/// from `Available` (v1beta1's summary) where there is none.
fn v1beta1_conditions(conditions: &Value) -> Value {
    let list = conditions.as_array().cloned().unwrap_or_default();
    let mut converted: Vec<Value> = list
        .iter()
        .map(|c| {
            let mut v = json!({
                "type": c["type"], "status": c["status"],
                "lastTransitionTime": c["lastTransitionTime"],
            });
            if c["status"] != "True" {
                v["severity"] = json!("Warning");
                v["reason"] = c["reason"].clone();
                v["message"] = c["message"].clone();
            }
            v
        })
        .collect();
    if !list.iter().any(|c| c["type"] == "Ready")
        && let Some(available) = converted.iter().find(|c| c["type"] == "Available")
    {
        let mut ready = available.clone();
        ready["type"] = json!("Ready");
        converted.insert(0, ready);
    }
    Value::Array(converted)
}

/// The object as stored (v1beta2), from what a v1beta1 client wrote.
pub fn to_v1beta2(obj: &mut Value) {
    for pointer in REFS {
        if let Some(r) = obj.pointer_mut(pointer).and_then(Value::as_object_mut)
            && let Some(api_version) = r.remove("apiVersion")
        {
            r.insert(
                "apiGroup".into(),
                json!(group_of(api_version.as_str().unwrap_or_default())),
            );
            r.remove("namespace");
            r.remove("uid");
            r.remove("resourceVersion");
            r.remove("fieldPath");
        }
    }
    relocate(obj, "/spec/strategy", "/spec/rollout/strategy");
    relocate(
        obj,
        "/spec/machineTemplate/infrastructureRef",
        "/spec/machineTemplate/spec/infrastructureRef",
    );
    if let Some(class) = take(obj, "/spec/topology/class") {
        put(obj, "/spec/topology/classRef/name", class);
        relocate(
            obj,
            "/spec/topology/classNamespace",
            "/spec/topology/classRef/namespace",
        );
    }
    health_check_to_v1beta2(obj);
    if obj["kind"] == "ClusterClass" {
        class_to_v1beta2(obj);
    }
    status_to_v1beta2(obj);
}

/// A MachineHealthCheck's spec (or a ClusterClass's health check, put
/// under `spec`) as v1beta1 has it: conditions, timeouts as durations,
/// `maxUnhealthy`, `unhealthyRange`, `remediationTemplate`.
fn health_check_to_v1beta1(obj: &mut Value) {
    if let Some(mut checks) = take(obj, "/spec/checks") {
        if let Some(t) = checks
            .get("nodeStartupTimeoutSeconds")
            .and_then(seconds_to_duration)
        {
            put(obj, "/spec/nodeStartupTimeout", t);
        }
        if let Some(list) = checks["unhealthyNodeConditions"].as_array_mut() {
            let converted: Vec<Value> = list
                .iter_mut()
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(t) = take(&mut c, "/timeoutSeconds") {
                        c["timeout"] = seconds_to_duration(&t).unwrap_or(Value::Null);
                    }
                    c
                })
                .collect();
            put(obj, "/spec/unhealthyConditions", Value::Array(converted));
        }
    }
    relocate(
        obj,
        "/spec/remediation/triggerIf/unhealthyLessThanOrEqualTo",
        "/spec/maxUnhealthy",
    );
    relocate(
        obj,
        "/spec/remediation/triggerIf/unhealthyInRange",
        "/spec/unhealthyRange",
    );
    if obj.pointer("/spec/remediation/triggerIf").is_some() {
        take(obj, "/spec/remediation/triggerIf");
    }
    relocate(
        obj,
        "/spec/remediation/templateRef",
        "/spec/remediationTemplate",
    );
    if obj["spec"]["remediation"]
        .as_object()
        .is_some_and(Map::is_empty)
    {
        take(obj, "/spec/remediation");
    }
}

/// A v1beta1 MachineHealthCheck's spec (or a ClusterClass's health check)
/// as v1beta2 has it: under `checks` and `remediation`, in seconds.
fn health_check_to_v1beta2(obj: &mut Value) {
    if let Some(t) = take(obj, "/spec/nodeStartupTimeout")
        && let Some(s) = duration_to_seconds(&t)
    {
        put(obj, "/spec/checks/nodeStartupTimeoutSeconds", s);
    }
    if let Some(Value::Array(list)) = take(obj, "/spec/unhealthyConditions") {
        let converted: Vec<Value> = list
            .into_iter()
            .map(|mut c| {
                if let Some(t) = take(&mut c, "/timeout") {
                    c["timeoutSeconds"] = duration_to_seconds(&t).unwrap_or(Value::Null);
                }
                c
            })
            .collect();
        put(
            obj,
            "/spec/checks/unhealthyNodeConditions",
            Value::Array(converted),
        );
    }
    relocate(
        obj,
        "/spec/maxUnhealthy",
        "/spec/remediation/triggerIf/unhealthyLessThanOrEqualTo",
    );
    relocate(
        obj,
        "/spec/unhealthyRange",
        "/spec/remediation/triggerIf/unhealthyInRange",
    );
    relocate(
        obj,
        "/spec/remediationTemplate",
        "/spec/remediation/templateRef",
    );
}

/// Removes the object at `pointer` if it is empty.
fn prune_empty(obj: &mut Value, pointer: &str) {
    if obj
        .pointer(pointer)
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        take(obj, pointer);
    }
}

/// Converts the health check at `from` to the one at `to` with `convert`,
/// which sees it as a MachineHealthCheck's spec.
fn convert_health_check(obj: &mut Value, from: &str, to: &str, convert: fn(&mut Value)) {
    if let Some(check) = take(obj, from) {
        let mut wrapped = json!({"spec": check});
        convert(&mut wrapped);
        put(obj, to, wrapped["spec"].take());
    }
}

/// Where a ClusterClass's templates and health checks are, per version:
/// (v1beta1, v1beta2) pointers below a class (`spec` or a worker class).
const CLASS_FIELDS: &[(&str, &str)] = &[
    ("/infrastructure/ref", "/infrastructure/templateRef"),
    ("/controlPlane/ref", "/controlPlane/templateRef"),
    (
        "/controlPlane/machineInfrastructure/ref",
        "/controlPlane/machineInfrastructure/templateRef",
    ),
];
const WORKER_CLASS_FIELDS: &[(&str, &str)] = &[
    ("/template/bootstrap/ref", "/bootstrap/templateRef"),
    (
        "/template/infrastructure/ref",
        "/infrastructure/templateRef",
    ),
    ("/template/metadata", "/metadata"),
];
const HEALTH_CHECKS: &[(&str, &str)] = &[(
    "/controlPlane/machineHealthCheck",
    "/controlPlane/healthCheck",
)];
const WORKER_POOLS: &[&str] = &["machineDeployments", "machinePools"];

/// A ClusterClass as v1beta1 has it: `ref`s (with a namespace) where
/// v1beta2 has `templateRef`s, worker templates under `template`,
/// `machineHealthCheck` where v1beta2 has `healthCheck`.
fn class_to_v1beta1(obj: &mut Value) {
    let namespace = obj["metadata"]["namespace"].clone();
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let with_namespace = |r: &mut Value| {
        if let Some(r) = r.as_object_mut()
            && !namespace.is_null()
        {
            r.insert("namespace".into(), namespace.clone());
        }
    };
    for (old, new) in CLASS_FIELDS {
        relocate(spec, new, old);
        if let Some(r) = spec.pointer_mut(old) {
            with_namespace(r);
        }
    }
    for (old, new) in HEALTH_CHECKS {
        convert_health_check(spec, new, old, health_check_to_v1beta1);
    }
    for class in worker_classes(spec) {
        for (old, new) in WORKER_CLASS_FIELDS {
            relocate(class, new, old);
            if old.ends_with("/ref")
                && let Some(r) = class.pointer_mut(old)
            {
                with_namespace(r);
            }
        }
        for emptied in ["/bootstrap", "/infrastructure"] {
            prune_empty(class, emptied);
        }
        convert_health_check(
            class,
            "/healthCheck",
            "/machineHealthCheck",
            health_check_to_v1beta1,
        );
    }
}

/// A ClusterClass's worker classes, of MachineDeployments and
/// MachinePools (not `spec["workers"][pool]`, which would add a null pool).
fn worker_classes(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    let Some(workers) = spec.get_mut("workers").and_then(Value::as_object_mut) else {
        return Vec::new().into_iter();
    };
    workers
        .iter_mut()
        .filter(|(pool, _)| WORKER_POOLS.contains(&pool.as_str()))
        .filter_map(|(_, classes)| classes.as_array_mut())
        .flatten()
        .collect::<Vec<_>>()
        .into_iter()
}

/// A v1beta1 ClusterClass as v1beta2 has it.
fn class_to_v1beta2(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let without_namespace = |r: &mut Value| {
        if let Some(r) = r.as_object_mut() {
            for field in ["namespace", "uid", "resourceVersion", "fieldPath"] {
                r.remove(field);
            }
        }
    };
    for (old, new) in CLASS_FIELDS {
        relocate(spec, old, new);
        if let Some(r) = spec.pointer_mut(new) {
            without_namespace(r);
        }
    }
    for (old, new) in HEALTH_CHECKS {
        convert_health_check(spec, old, new, health_check_to_v1beta2);
    }
    for class in worker_classes(spec) {
        for (old, new) in WORKER_CLASS_FIELDS {
            relocate(class, old, new);
            if new.ends_with("templateRef")
                && let Some(r) = class.pointer_mut(new)
            {
                without_namespace(r);
            }
        }
        for emptied in [
            "/template/bootstrap",
            "/template/infrastructure",
            "/template",
        ] {
            prune_empty(class, emptied);
        }
        convert_health_check(
            class,
            "/machineHealthCheck",
            "/healthCheck",
            health_check_to_v1beta2,
        );
    }
}

fn status_to_v1beta2(obj: &mut Value) {
    let flags = ready_flags(obj["kind"].as_str().unwrap_or_default());
    let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) else {
        return;
    };
    if let Some(name) = status["nodeRef"]["name"].as_str().map(String::from) {
        status["nodeRef"] = json!({"name": name});
    }
    let old = take(status, "/conditions");
    let conditions = take(status, "/v1beta2/conditions");
    if let Some(c) = old {
        put(status, "/deprecated/v1beta1/conditions", c);
    }
    if let Some(c) = conditions {
        put(status, "/conditions", c);
    }
    for (v2, v1) in flags {
        relocate(status, &format!("/{v1}"), &format!("/initialization/{v2}"));
    }
    for key in OLD_COUNTS {
        relocate(
            status,
            &format!("/{key}"),
            &format!("/deprecated/v1beta1/{key}"),
        );
    }
    for key in ["readyReplicas", "availableReplicas", "upToDateReplicas"] {
        relocate(status, &format!("/v1beta2/{key}"), &format!("/{key}"));
    }
    if status["v1beta2"].as_object().is_some_and(Map::is_empty) {
        take(status, "/v1beta2");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine_deployment_v1beta2() -> Value {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "md", "namespace": "default"},
            "spec": {
                "clusterName": "c", "replicas": 3,
                "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
                "template": {"spec": {
                    "clusterName": "c",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "md"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "md"},
                }},
            },
            "status": {
                "replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "upToDateReplicas": 3,
                "conditions": [{"type": "Available", "status": "True"}],
                "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "True"}],
                                           "readyReplicas": 2, "updatedReplicas": 3, "unavailableReplicas": 1}},
            },
        })
    }

    #[test]
    fn v1beta1_reads_references_strategy_and_status_in_its_own_shape() {
        let mut md = machine_deployment_v1beta2();
        to_v1beta1(&mut md);
        let infra = &md["spec"]["template"]["spec"]["infrastructureRef"];
        assert_eq!(
            infra["apiVersion"],
            "infrastructure.cluster.x-k8s.io/v1beta1"
        );
        assert_eq!(infra["namespace"], "default");
        assert!(infra.get("apiGroup").is_none());
        assert_eq!(md["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
        assert!(md["spec"].get("rollout").is_none());
        assert_eq!(md["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(
            md["status"]["v1beta2"]["conditions"][0]["type"],
            "Available"
        );
        assert_eq!(md["status"]["updatedReplicas"], 3);
        assert_eq!(md["status"]["unavailableReplicas"], 1);
        assert!(md["status"].get("deprecated").is_none());
    }

    #[test]
    fn a_v1beta1_write_is_stored_as_v1beta2_and_reads_back_the_same() {
        let stored = machine_deployment_v1beta2();
        let mut served = stored.clone();
        to_v1beta1(&mut served);
        let mut back = served.clone();
        to_v1beta2(&mut back);
        assert_eq!(back["spec"], stored["spec"]);
        assert_eq!(back["status"]["conditions"], stored["status"]["conditions"]);
        assert_eq!(
            back["status"]["deprecated"]["v1beta1"]["conditions"],
            stored["status"]["deprecated"]["v1beta1"]["conditions"]
        );
        assert_eq!(back["status"]["upToDateReplicas"], 3);
        assert_eq!(back["status"]["readyReplicas"], 2);
        // And the v1beta1 view is stable through a round trip.
        let mut again = back;
        to_v1beta1(&mut again);
        assert_eq!(again, served);
    }

    #[test]
    fn clusters_control_planes_and_health_checks_convert_their_own_fields() {
        let mut cluster = json!({
            "kind": "Cluster",
            "metadata": {"namespace": "ns"},
            "spec": {"topology": {"class": "quick-start", "version": "v1.33.0"},
                     "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerCluster", "name": "c", "namespace": "ns"}},
            "status": {"infrastructureReady": true, "controlPlaneReady": false, "phase": "Provisioning"},
        });
        to_v1beta2(&mut cluster);
        assert_eq!(
            cluster["spec"]["topology"]["classRef"]["name"],
            "quick-start"
        );
        assert_eq!(
            cluster["spec"]["infrastructureRef"],
            json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c"})
        );
        assert_eq!(
            cluster["status"]["initialization"]["infrastructureProvisioned"],
            true
        );
        assert_eq!(cluster["status"]["phase"], "Provisioning");

        let mut kcp = json!({"spec": {"machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate", "name": "cp"}}}});
        to_v1beta2(&mut kcp);
        assert_eq!(
            kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["apiGroup"],
            "infrastructure.cluster.x-k8s.io"
        );

        let mut mhc = json!({"spec": {"clusterName": "c", "maxUnhealthy": "40%", "nodeStartupTimeout": "10m",
            "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}]}});
        to_v1beta2(&mut mhc);
        assert_eq!(mhc["spec"]["checks"]["nodeStartupTimeoutSeconds"], 600);
        assert_eq!(
            mhc["spec"]["checks"]["unhealthyNodeConditions"][0]["timeoutSeconds"],
            300
        );
        assert_eq!(
            mhc["spec"]["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"],
            "40%"
        );
        to_v1beta1(&mut mhc);
        assert_eq!(mhc["spec"]["nodeStartupTimeout"], "600s");
        assert_eq!(mhc["spec"]["unhealthyConditions"][0]["timeout"], "300s");
        assert_eq!(mhc["spec"]["maxUnhealthy"], "40%");
        assert!(mhc["spec"].get("remediation").is_none());

        // Conditions v1beta2 writers left no v1beta1 copy of.
        let mut written = json!({"status": {"conditions": [
            {"type": "Available", "status": "True", "reason": "Available", "lastTransitionTime": "t"},
            {"type": "InfrastructureReady", "status": "False", "reason": "Waiting", "message": "m", "lastTransitionTime": "t"}]}});
        to_v1beta1(&mut written);
        let types: Vec<&str> = written["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Ready", "Available", "InfrastructureReady"]);
        assert_eq!(written["status"]["conditions"][2]["severity"], "Warning");
        assert!(written["status"]["conditions"][0].get("severity").is_none());

        let mut machine = json!({"kind": "Machine", "status": {"nodeRef": {"name": "n1"}, "initialization": {"bootstrapDataSecretCreated": true}}});
        to_v1beta1(&mut machine);
        assert_eq!(
            machine["status"]["nodeRef"],
            json!({"apiVersion": "v1", "kind": "Node", "name": "n1"})
        );
        assert_eq!(machine["status"]["bootstrapReady"], true);
    }

    #[test]
    fn cluster_classes_move_their_templates_and_health_checks() {
        let v1beta1 = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "ClusterClass",
            "metadata": {"name": "quick-start", "namespace": "default"},
            "spec": {
                "controlPlane": {
                    "ref": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlaneTemplate", "name": "cp", "namespace": "default"},
                    "machineInfrastructure": {"ref": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate", "name": "cp-m", "namespace": "default"}},
                    "machineHealthCheck": {"maxUnhealthy": "33%", "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "5m"}],
                                           "remediationTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerRemediationTemplate", "name": "r"}},
                },
                "infrastructure": {"ref": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerClusterTemplate", "name": "c", "namespace": "default"}},
                "workers": {"machineDeployments": [{
                    "class": "default-worker",
                    "template": {
                        "metadata": {"labels": {"pool": "a"}},
                        "bootstrap": {"ref": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate", "name": "b", "namespace": "default"}},
                        "infrastructure": {"ref": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate", "name": "w", "namespace": "default"}},
                    },
                    "machineHealthCheck": {"nodeStartupTimeout": "10m"},
                }]},
                "variables": [{"name": "imageRepository", "required": true, "schema": {"openAPIV3Schema": {"type": "string"}}}],
            },
        });
        let mut stored = v1beta1.clone();
        to_v1beta2(&mut stored);
        let spec = &stored["spec"];
        assert_eq!(
            spec["infrastructure"],
            json!({"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerClusterTemplate", "name": "c"}})
        );
        assert_eq!(spec["controlPlane"]["templateRef"]["name"], "cp");
        assert_eq!(
            spec["controlPlane"]["machineInfrastructure"]["templateRef"]["name"],
            "cp-m"
        );
        let check = &spec["controlPlane"]["healthCheck"];
        assert_eq!(
            check["checks"]["unhealthyNodeConditions"][0]["timeoutSeconds"],
            300
        );
        assert_eq!(
            check["remediation"]["triggerIf"]["unhealthyLessThanOrEqualTo"],
            "33%"
        );
        assert_eq!(check["remediation"]["templateRef"]["name"], "r");
        let worker = &spec["workers"]["machineDeployments"][0];
        assert_eq!(worker["bootstrap"]["templateRef"]["name"], "b");
        assert_eq!(worker["infrastructure"]["templateRef"]["name"], "w");
        assert_eq!(worker["metadata"]["labels"]["pool"], "a");
        assert!(worker.get("template").is_none(), "{worker}");
        assert_eq!(
            worker["healthCheck"]["checks"]["nodeStartupTimeoutSeconds"],
            600
        );
        assert_eq!(spec["variables"], v1beta1["spec"]["variables"]);

        // And back: what a v1beta1 client wrote, but for durations in
        // seconds.
        let mut served = stored.clone();
        to_v1beta1(&mut served);
        let mut expected = v1beta1.clone();
        expected["spec"]["controlPlane"]["machineHealthCheck"]["unhealthyConditions"][0]["timeout"] =
            json!("300s");
        expected["spec"]["workers"]["machineDeployments"][0]["machineHealthCheck"]["nodeStartupTimeout"] =
            json!("600s");
        assert_eq!(served["spec"], expected["spec"]);
    }
}
