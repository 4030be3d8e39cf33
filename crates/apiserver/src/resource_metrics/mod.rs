//! `metrics.k8s.io/v1beta1`, the Resource Metrics API (`kubectl top`, the
//! HorizontalPodAutoscaler's resource metrics). Upstream, metrics-server
//! scrapes the kubelets and serves it through the aggregator; here
//! whatever runs the cluster's pods implements [`ResourceMetrics`] (the
//! member: its runtime's usage) and the server answers from it. A server
//! given no source does not serve the group, as a cluster without
//! metrics-server (`kubectl top`: "Metrics API not available").
//!
//! Read-only, as metrics-server: get and list, label and field
//! selectors; no watch (`handler.rs`).

pub mod handler;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::resources::{Computed, Printer, PrinterColumn, ResourceInfo};

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// CPU (nanocores: billionths of a core) and memory (working set, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.cpu_nanocores = self.cpu_nanocores.saturating_add(other.cpu_nanocores);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
    }
}

/// One sample: when it ends, how long it spans, and the object's labels
/// (metrics-server copies them, so label selectors work).
#[derive(Clone, Debug)]
pub struct Sample {
    pub timestamp: jiff::Timestamp,
    pub window: Duration,
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug)]
pub struct NodeMetrics {
    pub name: String,
    pub sample: Sample,
    pub usage: Usage,
}

#[derive(Clone, Debug)]
pub struct PodMetrics {
    pub namespace: String,
    pub name: String,
    pub sample: Sample,
    /// By container name.
    pub containers: Vec<(String, Usage)>,
}

/// What measures the cluster's nodes and pods.
pub trait ResourceMetrics: Send + Sync {
    fn nodes(&self) -> Vec<NodeMetrics>;
    /// Pods of `namespace`, or of every namespace.
    fn pods(&self, namespace: Option<&str>) -> Vec<PodMetrics>;
}

/// The two resources of the group, as the registry serves them.
pub fn resources() -> Vec<ResourceInfo> {
    let column = |name: &str, path: &str| PrinterColumn {
        name: name.into(),
        type_: "string".into(),
        format: String::new(),
        description: String::new(),
        priority: 0,
        json_path: path.into(),
    };
    let info = |plural: &str, kind: &str, namespaced: bool, columns: Vec<PrinterColumn>| {
        ResourceInfo::computed(
            (GROUP, VERSION),
            (plural, kind),
            namespaced,
            Printer::Custom(columns),
            Computed::Metrics,
        )
    };
    vec![
        info(
            "nodes",
            "NodeMetrics",
            false,
            vec![
                column("CPU", ".usage.cpu"),
                column("Memory", ".usage.memory"),
                column("Window", ".window"),
            ],
        ),
        info(
            "pods",
            "PodMetrics",
            true,
            vec![column("Window", ".window")],
        ),
    ]
}

/// A CPU quantity as metrics-server writes it (`resource.NewScaledQuantity
/// (n, Nano)`, canonical: the largest suffix that is exact).
pub fn cpu_quantity(nanocores: u64) -> String {
    match nanocores {
        0 => "0".into(),
        n if n.is_multiple_of(1_000_000_000) => format!("{}", n / 1_000_000_000),
        n if n.is_multiple_of(1_000_000) => format!("{}m", n / 1_000_000),
        n if n.is_multiple_of(1_000) => format!("{}u", n / 1_000),
        n => format!("{n}n"),
    }
}

fn usage_json(u: Usage) -> Value {
    let memory = i64::try_from(u.memory_bytes).unwrap_or(i64::MAX);
    json!({"cpu": cpu_quantity(u.cpu_nanocores), "memory": flotilla_core::quantity::format_bytes(memory)})
}

/// metrics-server's window: a Go duration (`10.062s`, `1m0s`).
fn window(d: Duration) -> String {
    let ms = d.as_millis();
    let (minutes, rest) = (ms / 60_000, ms % 60_000);
    let seconds = format!("{}.{:03}", rest / 1000, rest % 1000);
    let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
    if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

fn metadata(name: &str, namespace: Option<&str>, s: &Sample) -> Value {
    // metrics-server stamps its objects as made when asked.
    let mut meta = json!({"name": name, "creationTimestamp": crate::meta::now()});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    if !s.labels.is_empty() {
        meta["labels"] = json!(s.labels);
    }
    meta
}

pub fn node_json(n: &NodeMetrics) -> Value {
    json!({"kind": "NodeMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
           "metadata": metadata(&n.name, None, &n.sample),
           "timestamp": crate::meta::format_time(n.sample.timestamp),
           "window": window(n.sample.window),
           "usage": usage_json(n.usage)})
}

pub fn pod_json(p: &PodMetrics) -> Value {
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|(name, u)| json!({"name": name, "usage": usage_json(*u)}))
        .collect();
    json!({"kind": "PodMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
           "metadata": metadata(&p.name, Some(&p.namespace), &p.sample),
           "timestamp": crate::meta::format_time(p.sample.timestamp),
           "window": window(p.sample.window),
           "containers": containers})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_windows_as_metrics_server_writes_them() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(137_158_232), "137158232n");
        assert_eq!(cpu_quantity(5_000), "5u");
        assert_eq!(window(Duration::from_millis(10_062)), "10.062s");
        assert_eq!(window(Duration::from_secs(15)), "15s");
        assert_eq!(window(Duration::from_millis(60_500)), "1m0.5s");
    }
}
