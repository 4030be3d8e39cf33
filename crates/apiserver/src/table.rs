//! `meta.k8s.io/v1 Table` rendering with the columns upstream `kubectl get`
//! shows for built-ins, and additionalPrinterColumns for custom resources.

use serde_json::{Value, json};

use crate::jsonpath;
use crate::resources::{Printer, ResourceInfo};
use crate::value::{array_at as arr, i64_at as i, str_at as s};

pub struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub format: &'static str,
    pub priority: i64,
    pub description: &'static str,
}

const fn col(name: &'static str, type_: &'static str, priority: i64) -> Column {
    Column {
        name,
        type_,
        format: "",
        priority,
        description: "",
    }
}

const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace.",
};
const AGE: Column = Column {
    name: "Age",
    type_: "string",
    format: "",
    priority: 0,
    description: "CreationTimestamp is the time the object was created.",
};

fn builtin_columns(r: &ResourceInfo) -> Vec<Column> {
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "namespaces") => vec![NAME, col("Status", "string", 0), AGE],
        ("", "configmaps") => vec![NAME, col("Data", "integer", 0), AGE],
        ("", "secrets") => vec![
            NAME,
            col("Type", "string", 0),
            col("Data", "integer", 0),
            AGE,
        ],
        ("", "serviceaccounts") => vec![NAME, col("Secrets", "integer", 0), AGE],
        ("", "services") => vec![
            NAME,
            col("Type", "string", 0),
            col("Cluster-IP", "string", 0),
            col("External-IP", "string", 0),
            col("Port(s)", "string", 0),
            AGE,
            col("Selector", "string", 1),
        ],
        ("", "endpoints") => vec![NAME, col("Endpoints", "string", 0), AGE],
        ("", "events") => vec![
            col("Last Seen", "string", 0),
            col("Type", "string", 0),
            col("Reason", "string", 0),
            col("Object", "string", 0),
            col("Subobject", "string", 1),
            col("Source", "string", 1),
            col("Message", "string", 0),
            col("First Seen", "string", 1),
            col("Count", "string", 1),
            Column {
                priority: 1,
                ..NAME
            },
        ],
        ("", "pods") => vec![
            NAME,
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            AGE,
            col("IP", "string", 1),
            col("Node", "string", 1),
            col("Nominated Node", "string", 1),
            col("Readiness Gates", "string", 1),
        ],
        ("", "nodes") => vec![
            NAME,
            col("Status", "string", 0),
            col("Roles", "string", 0),
            AGE,
            col("Version", "string", 0),
            col("Internal-IP", "string", 1),
            col("External-IP", "string", 1),
            col("OS-Image", "string", 1),
            col("Kernel-Version", "string", 1),
            col("Container-Runtime", "string", 1),
        ],
        ("", "persistentvolumeclaims") => vec![
            NAME,
            col("Status", "string", 0),
            col("Volume", "string", 0),
            col("Capacity", "string", 0),
            col("Access Modes", "string", 0),
            col("StorageClass", "string", 0),
            col("VolumeAttributesClass", "string", 0),
            AGE,
            col("VolumeMode", "string", 1),
        ],
        ("apps", "deployments") => vec![
            NAME,
            col("Ready", "string", 0),
            col("Up-to-date", "string", 0),
            col("Available", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ],
        ("apps", "replicasets") => vec![
            NAME,
            col("Desired", "integer", 0),
            col("Current", "integer", 0),
            col("Ready", "integer", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ],
        ("apps", "statefulsets") => vec![
            NAME,
            col("Ready", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
        ],
        ("apps", "daemonsets") => vec![
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
        ],
        ("batch", "jobs") => vec![
            NAME,
            col("Status", "string", 0),
            col("Completions", "string", 0),
            col("Duration", "string", 0),
            AGE,
            col("Containers", "string", 1),
            col("Images", "string", 1),
            col("Selector", "string", 1),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            NAME,
            col("Min Available", "string", 0),
            col("Max Unavailable", "string", 0),
            col("Allowed Disruptions", "integer", 0),
            AGE,
        ],
        ("", "componentstatuses") => vec![
            NAME,
            col("Status", "string", 0),
            col("Message", "string", 0),
            col("Error", "string", 0),
        ],
        ("batch", "cronjobs") => vec![
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
        ],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            NAME,
            col("Value", "integer", 0),
            col("Global-Default", "boolean", 0),
            AGE,
            col("PreemptionPolicy", "string", 0),
        ],
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => vec![
            NAME,
            col("Role", "string", 0),
            AGE,
            col("Users", "string", 1),
            col("Groups", "string", 1),
            col("ServiceAccounts", "string", 1),
        ],
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            vec![NAME, col("Created At", "date", 0)]
        }
        ("", "resourcequotas") => vec![
            NAME,
            AGE,
            col("Request", "string", 0),
            col("Limit", "string", 0),
        ],
        ("autoscaling", "horizontalpodautoscalers") => vec![
            NAME,
            col("Reference", "string", 0),
            col("Targets", "string", 0),
            col("MinPods", "string", 0),
            col("MaxPods", "integer", 0),
            col("Replicas", "integer", 0),
            AGE,
        ],
        ("networking.k8s.io", "ingressclasses") => vec![
            NAME,
            col("Controller", "string", 0),
            col("Parameters", "string", 0),
            AGE,
        ],
        ("networking.k8s.io", "networkpolicies") => {
            vec![NAME, col("Pod-Selector", "string", 0), AGE]
        }
        ("storage.k8s.io", "storageclasses") => vec![
            NAME,
            col("Provisioner", "string", 0),
            col("ReclaimPolicy", "string", 0),
            col("VolumeBindingMode", "string", 0),
            col("AllowVolumeExpansion", "string", 0),
            AGE,
        ],
        ("node.k8s.io", "runtimeclasses") => vec![NAME, col("Handler", "string", 0), AGE],
        ("certificates.k8s.io", "certificatesigningrequests") => vec![
            NAME,
            AGE,
            col("SignerName", "string", 0),
            col("Requestor", "string", 0),
            col("RequestedDuration", "string", 0),
            col("Condition", "string", 0),
        ],
        ("apiregistration.k8s.io", "apiservices") => vec![
            NAME,
            col("Service", "string", 0),
            col("Available", "string", 0),
            AGE,
        ],
        ("coordination.k8s.io", "leases") => vec![NAME, col("Holder", "string", 0), AGE],
        ("discovery.k8s.io", "endpointslices") => vec![
            NAME,
            col("AddressType", "string", 0),
            col("Ports", "string", 0),
            col("Endpoints", "string", 0),
            AGE,
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![NAME, col("Created At", "date", 0)]
        }
        _ => vec![NAME, AGE],
    }
}

fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

fn selector_string(o: &Value, pointer: &str) -> String {
    let mut parts = Vec::new();
    if let Some(m) = o
        .pointer(&format!("{pointer}/matchLabels"))
        .and_then(Value::as_object)
    {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    for e in arr(o, &format!("{pointer}/matchExpressions")) {
        let values: Vec<&str> = arr(e, "/values").iter().filter_map(Value::as_str).collect();
        let op = s(e, "/operator");
        let key = s(e, "/key");
        parts.push(match op {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_string(),
        });
    }
    or_none(parts.join(","))
}

fn map_selector(o: &Value, pointer: &str) -> String {
    let parts: Vec<String> = o
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    or_none(parts.join(","))
}

fn containers_images(o: &Value, spec: &str) -> (String, String) {
    let cs = arr(o, &format!("{spec}/containers"));
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// A duration rendered as kubectl does: `5s`, `3m20s`, `2d3h`.
pub fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 600 {
        let (m, s) = (secs / 60, secs % 60);
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if secs < 3 * 3600 {
        format!("{}m", secs / 60)
    } else if secs < 8 * 3600 {
        let (h, m) = (secs / 3600, (secs % 3600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{m}m")
        }
    } else if secs < 48 * 3600 {
        format!("{}h", secs / 3600)
    } else if secs < 8 * 86400 {
        let (d, h) = (secs / 86400, (secs % 86400) / 3600);
        if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        }
    } else if secs < 2 * 365 * 86400 {
        format!("{}d", secs / 86400)
    } else {
        format!("{}y", secs / (365 * 86400))
    }
}

fn age(o: &Value, pointer: &str) -> String {
    let ts = s(o, pointer);
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

fn ports_string(o: &Value) -> String {
    let ports: Vec<String> = arr(o, "/spec/ports")
        .iter()
        .map(|p| {
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) => format!("{}:{np}/{proto}", i(p, "/port")),
                None => format!("{}/{proto}", i(p, "/port")),
            }
        })
        .collect();
    or_none(ports.join(","))
}

fn builtin_cells(r: &ResourceInfo, o: &Value) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let created = age(o, "/metadata/creationTimestamp");
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "namespaces") => vec![name, json!(s(o, "/status/phase")), json!(created)],
        ("", "configmaps") => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + o.get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            vec![name, json!(n), json!(created)]
        }
        ("", "secrets") => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            let t = match s(o, "/type") {
                "" => "Opaque",
                t => t,
            };
            vec![name, json!(t), json!(n), json!(created)]
        }
        ("", "serviceaccounts") => vec![name, json!(arr(o, "/secrets").len()), json!(created)],
        ("", "services") => {
            let external: Vec<String> = arr(o, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| s(i, "/ip").to_string())
                .chain(
                    arr(o, "/spec/externalIPs")
                        .iter()
                        .filter_map(|v| v.as_str().map(String::from)),
                )
                .collect();
            let t = match s(o, "/spec/type") {
                "" => "ClusterIP",
                t => t,
            };
            let external = if external.is_empty() {
                if t == "LoadBalancer" {
                    "<pending>".to_string()
                } else {
                    "<none>".to_string()
                }
            } else {
                external.join(",")
            };
            vec![
                name,
                json!(t),
                json!(or_none(s(o, "/spec/clusterIP").to_string())),
                json!(external),
                json!(ports_string(o)),
                json!(created),
                json!(map_selector(o, "/spec/selector")),
            ]
        }
        ("", "endpoints") => {
            let mut eps = Vec::new();
            for subset in arr(o, "/subsets") {
                for a in arr(subset, "/addresses") {
                    for p in arr(subset, "/ports") {
                        eps.push(format!("{}:{}", s(a, "/ip"), i(p, "/port")));
                    }
                }
            }
            vec![name, json!(or_none(eps.join(","))), json!(created)]
        }
        ("", "events") => {
            let last = [
                "/lastTimestamp",
                "/eventTime",
                "/firstTimestamp",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .find(|p| !s(o, p).is_empty())
            .map_or("<unknown>".to_string(), |p| age(o, p));
            let object = format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_lowercase(),
                s(o, "/involvedObject/name")
            );
            let source = s(o, "/source/component");
            vec![
                json!(last),
                json!(s(o, "/type")),
                json!(s(o, "/reason")),
                json!(object),
                json!(s(o, "/involvedObject/fieldPath")),
                json!(source),
                json!(s(o, "/message")),
                json!(if s(o, "/firstTimestamp").is_empty() {
                    "<unknown>".to_string()
                } else {
                    age(o, "/firstTimestamp")
                }),
                json!(i(o, "/count").max(1).to_string()),
                name,
            ]
        }
        ("", "pods") => {
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
        ("", "nodes") => {
            let ready = arr(o, "/status/conditions")
                .iter()
                .find(|c| s(c, "/type") == "Ready")
                .map(|c| s(c, "/status"));
            let mut status = match ready {
                Some("True") => "Ready".to_string(),
                _ => "NotReady".to_string(),
            };
            if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let addr = |t: &str| {
                arr(o, "/status/addresses")
                    .iter()
                    .find(|a| s(a, "/type") == t)
                    .map(|a| s(a, "/address").to_string())
                    .unwrap_or_else(|| "<none>".into())
            };
            vec![
                name,
                json!(status),
                json!(or_none(roles.join(","))),
                json!(created),
                json!(s(o, "/status/nodeInfo/kubeletVersion")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(s(o, "/status/nodeInfo/osImage")),
                json!(s(o, "/status/nodeInfo/kernelVersion")),
                json!(s(o, "/status/nodeInfo/containerRuntimeVersion")),
            ]
        }
        ("", "persistentvolumeclaims") => {
            let modes: Vec<&str> = arr(o, "/status/accessModes")
                .iter()
                .filter_map(Value::as_str)
                .map(|m| match m {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    other => other,
                })
                .collect();
            vec![
                name,
                json!(s(o, "/status/phase")),
                json!(s(o, "/spec/volumeName")),
                json!(s(o, "/status/capacity/storage")),
                json!(modes.join(",")),
                json!(or_none(s(o, "/spec/storageClassName").to_string())),
                json!(or_none(s(o, "/spec/volumeAttributesClassName").to_string())),
                json!(created),
                json!(match s(o, "/spec/volumeMode") {
                    "" => "Filesystem",
                    m => m,
                }),
            ]
        }
        ("apps", "deployments") => {
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
        ("apps", "replicasets") => {
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
        ("apps", "statefulsets") => {
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
        ("apps", "daemonsets") => {
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
        ("batch", "jobs") => {
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
        ("policy", "poddisruptionbudgets") => {
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
        ("", "componentstatuses") => {
            let healthy = arr(o, "/conditions")
                .iter()
                .any(|c| s(c, "/type") == "Healthy" && s(c, "/status") == "True");
            let condition = arr(o, "/conditions").first().cloned().unwrap_or_default();
            vec![
                name,
                json!(if healthy { "Healthy" } else { "Unhealthy" }),
                json!(s(&condition, "/message")),
                json!(s(&condition, "/error")),
            ]
        }
        ("batch", "cronjobs") => {
            let (c, im) = containers_images(o, "/spec/jobTemplate/spec/template/spec");
            let last = match s(o, "/status/lastScheduleTime") {
                "" => "<none>".to_string(),
                _ => age(o, "/status/lastScheduleTime"),
            };
            vec![
                name,
                json!(s(o, "/spec/schedule")),
                json!(or_none(s(o, "/spec/timeZone").to_string())),
                json!(
                    o.pointer("/spec/suspend")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                ),
                json!(arr(o, "/status/active").len()),
                json!(last),
                json!(created),
                json!(c),
                json!(im),
                json!(selector_string(o, "/spec/jobTemplate/spec/selector")),
            ]
        }
        ("scheduling.k8s.io", "priorityclasses") => vec![
            name,
            json!(i(o, "/value")),
            json!(
                o.pointer("/globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            json!(created),
            json!(s(o, "/preemptionPolicy")),
        ],
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            let subjects = |kind: &str| {
                let names: Vec<String> = arr(o, "/subjects")
                    .iter()
                    .filter(|x| s(x, "/kind") == kind)
                    .map(|x| match (kind, s(x, "/namespace")) {
                        ("ServiceAccount", ns) => format!("{ns}/{}", s(x, "/name")),
                        _ => s(x, "/name").to_string(),
                    })
                    .collect();
                names.join(", ")
            };
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    s(o, "/roleRef/kind"),
                    s(o, "/roleRef/name")
                )),
                json!(created),
                json!(subjects("User")),
                json!(subjects("Group")),
                json!(subjects("ServiceAccount")),
            ]
        }
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            vec![name, json!(s(o, "/metadata/creationTimestamp"))]
        }
        ("", "resourcequotas") => {
            // "pods: 2/5, requests.cpu: 750m/1", limits apart, as kubectl.
            let (mut request, mut limit) = (Vec::new(), Vec::new());
            if let Some(hard) = o.pointer("/status/hard").and_then(Value::as_object) {
                for (k, v) in hard {
                    let used = o
                        .pointer(&format!("/status/used/{}", k.replace('/', "~1")))
                        .and_then(Value::as_str)
                        .unwrap_or("0");
                    let entry = format!("{k}: {used}/{}", v.as_str().unwrap_or_default());
                    if k.starts_with("limits.") {
                        limit.push(entry);
                    } else {
                        request.push(entry);
                    }
                }
            }
            vec![
                name,
                json!(created),
                json!(request.join(", ")),
                json!(limit.join(", ")),
            ]
        }
        ("autoscaling", "horizontalpodautoscalers") => {
            let targets: Vec<String> = arr(o, "/spec/metrics")
                .iter()
                .map(|m| {
                    let resource = s(m, "/resource/name");
                    match m.pointer("/resource/target/averageUtilization") {
                        Some(t) => format!("{resource}: <unknown>/{t}%"),
                        None => format!(
                            "{resource}: <unknown>/{}",
                            s(m, "/resource/target/averageValue")
                        ),
                    }
                })
                .collect();
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
        ("networking.k8s.io", "ingressclasses") => vec![
            name,
            json!(s(o, "/spec/controller")),
            json!(match s(o, "/spec/parameters/name") {
                "" => "<none>".to_string(),
                p => format!("{}/{p}", s(o, "/spec/parameters/kind")),
            }),
            json!(created),
        ],
        ("networking.k8s.io", "networkpolicies") => {
            let selector = selector_string(o, "/spec/podSelector");
            vec![name, json!(or_none(selector)), json!(created)]
        }
        ("storage.k8s.io", "storageclasses") => {
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
        ("node.k8s.io", "runtimeclasses") => vec![name, json!(s(o, "/handler")), json!(created)],
        ("certificates.k8s.io", "certificatesigningrequests") => {
            let conditions: Vec<&str> = arr(o, "/status/conditions")
                .iter()
                .map(|c| s(c, "/type"))
                .collect();
            let duration = o
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .map_or("<none>".to_string(), human_duration);
            vec![
                name,
                json!(created),
                json!(s(o, "/spec/signerName")),
                json!(s(o, "/spec/username")),
                json!(duration),
                json!(if conditions.is_empty() {
                    "Pending".to_string()
                } else {
                    conditions.join(",")
                }),
            ]
        }
        ("apiregistration.k8s.io", "apiservices") => {
            let service = match s(o, "/spec/service/name") {
                "" => "Local".to_string(),
                n => format!("{}/{n}", s(o, "/spec/service/namespace")),
            };
            let available = arr(o, "/status/conditions")
                .iter()
                .find(|c| s(c, "/type") == "Available")
                .map_or("Unknown".to_string(), |c| s(c, "/status").to_string());
            vec![name, json!(service), json!(available), json!(created)]
        }
        ("coordination.k8s.io", "leases") => {
            vec![name, json!(s(o, "/spec/holderIdentity")), json!(created)]
        }
        ("discovery.k8s.io", "endpointslices") => {
            let ports: Vec<String> = arr(o, "/ports")
                .iter()
                .map(|p| i(p, "/port").to_string())
                .collect();
            let addrs: Vec<String> = arr(o, "/endpoints")
                .iter()
                .flat_map(|e| arr(e, "/addresses").iter())
                .filter_map(|a| a.as_str().map(String::from))
                .collect();
            vec![
                name,
                json!(s(o, "/addressType")),
                json!(or_none(ports.join(","))),
                json!(or_none(addrs.join(","))),
                json!(created),
            ]
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![name, json!(s(o, "/metadata/creationTimestamp"))]
        }
        _ => vec![name, json!(created)],
    }
}

/// The column definitions of a resource's Table.
pub fn column_definitions(r: &ResourceInfo) -> Vec<Value> {
    match &r.printer {
        Printer::Builtin => builtin_columns(r)
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect(),
        Printer::Custom(cols) => {
            let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
                                       "description": NAME.description, "priority": 0})];
            for c in cols {
                defs.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                                 "description": c.description, "priority": c.priority}));
            }
            if !cols.iter().any(|c| c.name.eq_ignore_ascii_case("age")) {
                defs.push(json!({"name": "Age", "type": "date", "format": "",
                                 "description": AGE.description, "priority": 0}));
            }
            defs
        }
    }
}

/// One row's cells, aligned with [`column_definitions`].
pub fn cells(r: &ResourceInfo, o: &Value) -> Vec<Value> {
    match &r.printer {
        Printer::Builtin => builtin_cells(r, o),
        Printer::Custom(cols) => {
            let mut cells = vec![json!(s(o, "/metadata/name"))];
            for c in cols {
                let v = jsonpath::first(o, &c.json_path);
                cells.push(match (c.type_.as_str(), v) {
                    (_, None) => Value::Null,
                    ("date", Some(Value::String(ts))) => match ts.parse::<jiff::Timestamp>() {
                        Ok(t) => json!(human_duration(
                            jiff::Timestamp::now().as_second() - t.as_second()
                        )),
                        Err(_) => json!(ts),
                    },
                    (_, Some(v)) => v,
                });
            }
            if !cols.iter().any(|c| c.name.eq_ignore_ascii_case("age")) {
                cells.push(json!(age(o, "/metadata/creationTimestamp")));
            }
            cells
        }
    }
}

/// What each row carries as its `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

pub fn row(r: &ResourceInfo, o: &Value, include: IncludeObject) -> Value {
    let mut row = json!({"cells": cells(r, o)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
            });
        }
        IncludeObject::Object => row["object"] = o.clone(),
    }
    row
}

/// A Table of `objects`; `with_columns` false omits columnDefinitions (watch events after the first).
pub fn table(
    r: &ResourceInfo,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": if with_columns { Value::Array(column_definitions(r)) } else { json!([]) },
        "rows": objects.iter().map(|o| row(r, o, include)).collect::<Vec<_>>(),
    })
}
