//! The simulator's view of a pod: the fields its controllers read, nothing
//! more.
//!
//! The pod informer caches every pod of the cluster, and upstream's `Pod`
//! type is large in memory (its `Container` alone is over 2 KiB inline,
//! about 8 KiB per running pod in all). A 10,000-pod member would spend
//! most of its memory there, so the informer deserializes into this view
//! instead (about a quarter of the size). It has the same field names and
//! types where it keeps a field, so controller code reads the same; writes
//! still send full objects (`k8s_openapi`'s types or JSON patches).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, ContainerState, NodeAffinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

use crate::quantity;

#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "k8s_openapi::api::core::v1::Pod")]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: Option<PodSpec>,
    pub status: Option<PodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    pub init_containers: Option<Vec<Container>>,
    /// What `kubectl debug` added (the same fields, none of the
    /// resources or ports a regular container may have).
    pub ephemeral_containers: Option<Vec<Container>>,
    pub node_name: Option<String>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub affinity: Option<Affinity>,
    pub tolerations: Option<Vec<Toleration>>,
    pub restart_policy: Option<String>,
    pub scheduler_name: Option<String>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    /// Only the PersistentVolumeClaims they name are kept of volumes.
    pub volumes: Option<Vec<Volume>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub persistent_volume_claim: Option<ClaimSource>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    pub claim_name: String,
}

impl PodSpec {
    /// The PersistentVolumeClaims the pod's volumes name.
    pub fn claims(&self) -> impl Iterator<Item = &str> {
        self.volumes
            .iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.as_str())
    }

    /// The view of a full spec, e.g. a workload's pod template.
    pub fn of(spec: &k8s_openapi::api::core::v1::PodSpec) -> PodSpec {
        serde_json::to_value(spec)
            .and_then(serde_json::from_value)
            .unwrap_or_default()
    }
}

/// Only node affinity: the simulator does not model inter-pod affinity.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    pub node_affinity: Option<NodeAffinity>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: Option<String>,
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default)]
    pub resources: Resources,
}

/// A container's CPU (millicores) and memory (bytes) requests and limits,
/// parsed once when the pod is read rather than kept as quantity maps.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(from = "ResourceMaps")]
pub struct Resources {
    pub cpu_request: Option<i64>,
    pub memory_request: Option<i64>,
    pub cpu_limit: Option<i64>,
    pub memory_limit: Option<i64>,
    /// Whether anything at all is requested or limited (else BestEffort).
    pub any: bool,
}

#[derive(Deserialize)]
struct ResourceMaps {
    requests: Option<BTreeMap<String, Quantity>>,
    limits: Option<BTreeMap<String, Quantity>>,
}

impl From<ResourceMaps> for Resources {
    fn from(m: ResourceMaps) -> Self {
        let cpu = |m: &Option<BTreeMap<String, Quantity>>| {
            m.as_ref()?
                .get("cpu")
                .and_then(|q| quantity::millicores(&q.0))
        };
        let memory = |m: &Option<BTreeMap<String, Quantity>>| {
            m.as_ref()?
                .get("memory")
                .and_then(|q| quantity::units(&q.0))
        };
        let non_empty =
            |m: &Option<BTreeMap<String, Quantity>>| m.as_ref().is_some_and(|m| !m.is_empty());
        Resources {
            cpu_request: cpu(&m.requests),
            memory_request: memory(&m.requests),
            cpu_limit: cpu(&m.limits),
            memory_limit: memory(&m.limits),
            any: non_empty(&m.requests) || non_empty(&m.limits),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    pub phase: Option<String>,
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    pub start_time: Option<Time>,
    pub qos_class: Option<String>,
    pub container_statuses: Option<Vec<ContainerStatus>>,
    /// Kept so that the kubelet sees an ephemeral container's first
    /// status as a change.
    pub ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
}

/// Upstream's PodCondition without lastProbeTime, which nothing reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    pub image: Option<String>,
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
    #[serde(default)]
    pub ready: bool,
    pub started: Option<bool>,
    pub state: Option<ContainerState>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_the_controllers_need_from_a_full_pod() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "web", "image": "nginx", "ports": [{"name": "http", "containerPort": 80}],
                                "resources": {"requests": {"cpu": "100m"}}, "env": [{"name": "A", "value": "b"}]}],
                "nodeName": "node-1", "nodeSelector": {"disk": "ssd"}, "hostname": "web-1",
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                    "podAntiAffinity": {}},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
            },
            "status": {
                "phase": "Running", "hostIP": "172.18.0.2", "podIP": "10.128.0.2",
                "podIPs": [{"ip": "10.128.0.2"}], "startTime": "2026-01-01T00:00:00Z", "qosClass": "Burstable",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "",
                                       "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}],
            },
        }))
        .unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0].container_port,
            80
        );
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert!(spec.affinity.as_ref().unwrap().node_affinity.is_some());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.128.0.2"));
        assert_eq!(status.host_ip.as_deref(), Some("172.18.0.2"));
        assert!(status.container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(<Pod as Resource>::kind(&()), "Pod");
    }
}
