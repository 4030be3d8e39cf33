//! Core kinds whose behaviour is their field selectors, what their
//! deletion answers, their first status and `kubectl get`'s columns:
//! ServiceAccounts, Events, Nodes, PersistentVolumes and their claims,
//! ComponentStatuses, ResourceQuotas.

use super::{Discovered, Methods, ServedBy, Strategy, Subresource};
use crate::table::prelude::*;

pub struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn subresources(&self) -> &'static [Subresource] {
        &[Subresource {
            name: "token",
            methods: Methods::Post,
            served_by: ServedBy::Token,
            discovered: Some(Discovered {
                response: Some(("authentication.k8s.io", "v1", "TokenRequest")),
                verbs: &["create"],
            }),
        }]
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Secrets", "integer", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![name, json!(arr(o, "/secrets").len()), json!(created)]
    }
}

pub struct Events;

impl Strategy for Events {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
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
        ])
    }

    fn cells(&self, o: &Value, name: Value, _created: String) -> Vec<Value> {
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
}

pub struct Nodes;

impl Strategy for Nodes {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
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
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
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
}

pub struct PersistentVolumes;

impl Strategy for PersistentVolumes {
    fn default(&self, obj: &mut Value) {
        crate::defaults::persistent_volume(obj);
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Capacity", "string", 0),
            col("Access Modes", "string", 0),
            col("Reclaim Policy", "string", 0),
            col("Status", "string", 0),
            col("Claim", "string", 0),
            col("StorageClass", "string", 0),
            col("VolumeAttributesClass", "string", 0),
            col("Reason", "string", 0),
            AGE,
            col("VolumeMode", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let claim = match (
            s(o, "/spec/claimRef/namespace"),
            s(o, "/spec/claimRef/name"),
        ) {
            (_, "") => String::new(),
            (ns, name) => format!("{ns}/{name}"),
        };
        vec![
            name,
            json!(s(o, "/spec/capacity/storage")),
            json!(access_modes(o, "/spec/accessModes")),
            json!(s(o, "/spec/persistentVolumeReclaimPolicy")),
            json!(s(o, "/status/phase")),
            json!(claim),
            json!(s(o, "/spec/storageClassName")),
            json!(or_none(s(o, "/spec/volumeAttributesClassName").to_string())),
            json!(s(o, "/status/reason")),
            json!(created),
            json!(volume_mode(o)),
        ]
    }
}

/// Access modes as kubectl abbreviates them (`RWO,ROX`).
fn access_modes(o: &Value, pointer: &str) -> String {
    arr(o, pointer)
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn volume_mode(o: &Value) -> &str {
    match s(o, "/spec/volumeMode") {
        "" => "Filesystem",
        m => m,
    }
}

pub struct PersistentVolumeClaims;

impl Strategy for PersistentVolumeClaims {
    fn default(&self, obj: &mut Value) {
        crate::defaults::persistent_volume_claim(obj);
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Status", "string", 0),
            col("Volume", "string", 0),
            col("Capacity", "string", 0),
            col("Access Modes", "string", 0),
            col("StorageClass", "string", 0),
            col("VolumeAttributesClass", "string", 0),
            AGE,
            col("VolumeMode", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![
            name,
            json!(s(o, "/status/phase")),
            json!(s(o, "/spec/volumeName")),
            json!(s(o, "/status/capacity/storage")),
            json!(access_modes(o, "/status/accessModes")),
            json!(or_none(s(o, "/spec/storageClassName").to_string())),
            json!(or_none(s(o, "/spec/volumeAttributesClassName").to_string())),
            json!(created),
            json!(volume_mode(o)),
        ]
    }
}

pub struct ComponentStatuses;

impl Strategy for ComponentStatuses {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Status", "string", 0),
            col("Message", "string", 0),
            col("Error", "string", 0),
        ])
    }

    fn cells(&self, o: &Value, name: Value, _created: String) -> Vec<Value> {
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
}

pub struct ResourceQuotas;

impl Strategy for ResourceQuotas {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            AGE,
            col("Request", "string", 0),
            col("Limit", "string", 0),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
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
}
