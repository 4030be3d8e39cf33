//! The control plane's `metrics.k8s.io`, as karmada-metrics-adapter serves
//! it: the control plane runs no pods, so a NodeMetrics or PodMetrics read
//! there is answered from the members' own Resource Metrics APIs, every
//! Ready Push member asked at once and the answers concatenated (`kubectl
//! top pod` on the control plane lists the pods of the whole fleet). A
//! member that does not answer within a few seconds is left out, as the
//! adapter skips a cluster it cannot reach; Pull members are not reached
//! from the control plane (their agents reach out).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_apiserver::resource_metrics::{
    NodeMetrics, PodMetrics, ResourceMetrics, Sample, Usage,
};
use flotilla_core::quantity;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::runtime::Handle;
use tracing::debug;

use crate::api::{Cluster, sync_mode};
use crate::members::Members;

/// How long a read waits for the slowest member.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(5);

pub struct FleetMetrics {
    hub: Client,
    /// Member clients of its own: the controllers' live in a runtime that
    /// goes with each term as leader, this serves from the API's.
    members: Members,
    runtime: Handle,
}

impl FleetMetrics {
    /// Reads through `hub` (the Clusters and their credentials); must be
    /// made inside the runtime that serves the API.
    pub fn new(hub: Client) -> FleetMetrics {
        FleetMetrics {
            members: Members::new(hub.clone()),
            hub,
            runtime: Handle::current(),
        }
    }

    /// Each reachable member's list of `plural` (`nodes`, `pods`) in
    /// `namespace`, as JSON objects.
    async fn gather(&self, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let clusters = match Api::<Cluster>::all(self.hub.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(error) => {
                debug!(%error, "cannot list clusters for metrics");
                return Vec::new();
            }
        };
        let kind = if plural == "nodes" {
            "NodeMetrics"
        } else {
            "PodMetrics"
        };
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", kind),
            plural,
        );
        let reads = clusters
            .iter()
            .filter(|c| c.is_ready() && c.spec.sync_mode != sync_mode::PULL)
            .map(|cluster| {
                let resource = resource.clone();
                async move {
                    let member = self.members.get(cluster).await.ok()?;
                    let api: Api<DynamicObject> = match namespace {
                        Some(ns) => Api::namespaced_with(member.client, ns, &resource),
                        None => Api::all_with(member.client, &resource),
                    };
                    let listed =
                        tokio::time::timeout(MEMBER_TIMEOUT, api.list(&ListParams::default()))
                            .await;
                    match listed {
                        Ok(Ok(list)) => Some(list.items),
                        Ok(Err(error)) => {
                            debug!(%error, cluster = %cluster.name_any(), "no metrics from the member");
                            None
                        }
                        Err(_) => {
                            debug!(cluster = %cluster.name_any(), "the member's metrics timed out");
                            None
                        }
                    }
                }
            });
        futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect()
    }
}

/// The Resource Metrics API is synchronous (a member measures its own
/// processes); it is called off the async workers, where waiting for the
/// members' answers on the runtime is allowed.
impl ResourceMetrics for FleetMetrics {
    fn nodes(&self) -> Vec<NodeMetrics> {
        self.runtime
            .block_on(self.gather("nodes", None))
            .iter()
            .filter_map(|v| {
                Some(NodeMetrics {
                    name: v.pointer("/metadata/name")?.as_str()?.to_string(),
                    sample: sample(v),
                    usage: usage(v.get("usage")),
                })
            })
            .collect()
    }

    fn pods(&self, namespace: Option<&str>) -> Vec<PodMetrics> {
        self.runtime
            .block_on(self.gather("pods", namespace))
            .iter()
            .filter_map(|v| {
                let containers = v
                    .get("containers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| {
                        Some((c.get("name")?.as_str()?.to_string(), usage(c.get("usage"))))
                    })
                    .collect();
                Some(PodMetrics {
                    namespace: v.pointer("/metadata/namespace")?.as_str()?.to_string(),
                    name: v.pointer("/metadata/name")?.as_str()?.to_string(),
                    sample: sample(v),
                    containers,
                })
            })
            .collect()
    }
}

fn usage(u: Option<&Value>) -> Usage {
    let q = |r: &str| {
        u.and_then(|u| u.get(r))
            .and_then(Value::as_str)
            .and_then(quantity::parse)
            .unwrap_or(0.0)
    };
    Usage {
        cpu_nanocores: (q("cpu") * 1e9).round() as u64,
        memory_bytes: q("memory").round() as u64,
    }
}

fn sample(v: &Value) -> Sample {
    let labels: BTreeMap<String, String> = v
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    Sample {
        timestamp: v
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .unwrap_or_else(Timestamp::now),
        window: v
            .get("window")
            .and_then(Value::as_str)
            .and_then(go_duration)
            .unwrap_or(Duration::from_secs(15)),
        labels,
    }
}

/// A Go duration as metrics-server writes its windows (`15s`, `10.062s`,
/// `1m0.5s`, `500ms`): numbers, each with its unit; `None` for anything
/// else, or beyond what a Duration holds.
fn go_duration(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut seconds = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (scale, unit_len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("\u{b5}s", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find(|(unit, _)| rest.starts_with(unit))
        .map(|(unit, scale)| (*scale, unit.len()))?;
        seconds += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_members_pod_metrics_read_back_as_served() {
        assert_eq!(go_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(go_duration("10.062s"), Some(Duration::from_millis(10_062)));
        assert_eq!(go_duration("1m0.5s"), Some(Duration::from_millis(60_500)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("1h2m"), Some(Duration::from_secs(3720)));
        for bad in ["soon", "", "15", "1e400s", "9999999999999999999999m"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
        let u = usage(Some(&json!({"cpu": "99997937n", "memory": "64Mi"})));
        assert_eq!(
            u,
            Usage {
                cpu_nanocores: 99_997_937,
                memory_bytes: 64 << 20
            }
        );
    }
}
