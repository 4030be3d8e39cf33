//! What the replica calculator reads of a pod (its readiness and its
//! containers' requests) and of its metrics (each container's usage), in
//! one shape whichever cluster and client the pod was read from.

use std::collections::{BTreeMap, HashMap};

use flotilla_core::quantity;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// A pod the target's selector names and that counts (not terminating,
/// not Succeeded or Failed).
#[derive(Clone, Debug, Default)]
pub struct PodSample {
    /// Unique among the pods of one sync (the FederatedHPA prefixes the
    /// member cluster's name); the key of its usage in [`PodUsage`].
    pub name: String,
    pub pending: bool,
    pub ready: bool,
    pub containers: Vec<ContainerRequest>,
}

/// A container's requests: CPU in millicores, memory in bytes.
#[derive(Clone, Debug, Default)]
pub struct ContainerRequest {
    pub name: String,
    pub cpu: Option<i64>,
    pub memory: Option<i64>,
}

/// Usage by pod name and container name, in millicores and bytes.
pub type PodUsage = HashMap<String, BTreeMap<String, (f64, f64)>>;

impl PodSample {
    /// A pod as read from a cluster's API, named `name`; `None` when it
    /// does not count (terminating, Succeeded or Failed).
    pub fn from_pod(pod: &Pod, name: String) -> Option<PodSample> {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        if pod.metadata.deletion_timestamp.is_some() || matches!(phase, "Succeeded" | "Failed") {
            return None;
        }
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let containers = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| {
                let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                let request = |r: &str| requests.and_then(|m| m.get(r)).map(|q| q.0.as_str());
                ContainerRequest {
                    name: c.name.clone(),
                    cpu: request("cpu").and_then(quantity::millicores),
                    memory: request("memory").and_then(quantity::units),
                }
            })
            .collect();
        Some(PodSample {
            name,
            pending: phase == "Pending",
            ready,
            containers,
        })
    }

    /// The request of `resource` (millicores or bytes), summed over the
    /// containers (or `container`'s alone); an error names the container
    /// without one.
    pub fn request(&self, resource: &str, container: Option<&str>) -> Result<f64, String> {
        let mut total = 0.0;
        for c in &self.containers {
            if container.is_some_and(|n| n != c.name) {
                continue;
            }
            match if resource == "cpu" { c.cpu } else { c.memory } {
                Some(v) => total += v as f64,
                None => {
                    return Err(format!(
                        "missing request for {resource} in container {} of Pod {}",
                        c.name, self.name
                    ));
                }
            }
        }
        Ok(total)
    }
}

/// A `metrics.k8s.io` PodMetrics's containers (its `containers` field) as
/// usage by container: CPU as `Quantity.MilliValue()` reads it (rounded
/// up), memory in bytes.
pub fn container_usage(containers: Option<&Value>) -> BTreeMap<String, (f64, f64)> {
    containers
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let q = |r: &str| c.pointer(&format!("/usage/{r}")).and_then(Value::as_str);
            Some((
                c.get("name")?.as_str()?.to_string(),
                (
                    q("cpu").and_then(quantity::millicores).unwrap_or(0) as f64,
                    q("memory").and_then(quantity::parse).unwrap_or(0.0),
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_reads_as_its_requests_and_readiness() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1"},
            "spec": {"containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "sidecar", "image": "busybox"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let sample = PodSample::from_pod(&pod, "member1/web-1".into()).unwrap();
        assert!(sample.ready && !sample.pending);
        assert_eq!(sample.request("cpu", Some("app")), Ok(250.0));
        assert_eq!(
            sample.request("memory", Some("app")),
            Ok(64.0 * 1024.0 * 1024.0)
        );
        assert_eq!(
            sample.request("cpu", None),
            Err("missing request for cpu in container sidecar of Pod member1/web-1".into())
        );
        let mut done = pod.clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(PodSample::from_pod(&done, "x".into()).is_none());
    }

    #[test]
    fn metrics_read_in_millicores_rounded_up_and_bytes() {
        let usage = container_usage(Some(&json!([
            {"name": "app", "usage": {"cpu": "99997937n", "memory": "64Mi"}}
        ])));
        assert_eq!(usage["app"], (100.0, 64.0 * 1024.0 * 1024.0));
    }
}
