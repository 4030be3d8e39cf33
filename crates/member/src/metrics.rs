//! The member's metrics-server: nodes' and pods' usage for
//! `metrics.k8s.io` (`kubectl top`, HPAs), measured when asked.
//!
//! Upstream, metrics-server scrapes each kubelet every `--metric-resolution`
//! (15 s) and serves CPU as the rate between a container's last two
//! cumulative counters (or since the container started, when it has one),
//! memory as the last working set. This does the same from the runtime's
//! counters, but reads them only when a request comes: a point is kept per
//! container and moved on once it is a resolution old, so a rate spans
//! between one and two resolutions (a container younger than that: its
//! whole life). Nothing runs between requests. A node's usage is the sum
//! of its pods'.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::resource_metrics::{
    NodeMetrics, PodMetrics, ResourceMetrics, Sample, Usage,
};
use kube::ResourceExt;
use parking_lot::Mutex;

use crate::cluster::Cluster;
use crate::pod::Pod;
use crate::podutil;
use crate::runtime::{ContainerUsage, Runtime, key};

/// metrics-server's default `--metric-resolution`.
pub const RESOLUTION: Duration = Duration::from_secs(15);

/// A container's CPU counter at the moment the runtime read it.
#[derive(Clone, Copy, Debug)]
struct Point {
    at: jiff::Timestamp,
    cpu: Duration,
}

/// A container's last two points, as metrics-server keeps them.
#[derive(Clone, Copy, Debug)]
struct Points {
    /// The start of the run they are of (a new run starts at zero).
    started: jiff::Timestamp,
    prev: Point,
    last: Point,
}

impl Points {
    /// The time between the two points.
    fn window(&self) -> Duration {
        let d = self.last.at.duration_since(self.prev.at);
        if d.is_negative() {
            Duration::ZERO
        } else {
            d.unsigned_abs()
        }
    }

    /// CPU used between them, in nanocores, rounded down (so that a
    /// whole request reads as itself once in millicores, rounded up).
    fn rate(&self) -> u64 {
        let window = self.window().as_nanos();
        if window == 0 {
            return 0;
        }
        let used = self.last.cpu.saturating_sub(self.prev.cpu).as_nanos();
        u64::try_from(used * 1_000_000_000 / window).unwrap_or(u64::MAX)
    }
}

pub struct MetricsServer {
    cluster: Arc<Cluster>,
    runtime: Arc<dyn Runtime>,
    resolution: Duration,
    /// By `namespace/pod/container`.
    points: Mutex<HashMap<String, Points>>,
}

impl MetricsServer {
    pub fn new(cluster: Arc<Cluster>, runtime: Arc<dyn Runtime>, resolution: Duration) -> Self {
        MetricsServer {
            cluster,
            runtime,
            resolution,
            points: Mutex::default(),
        }
    }

    /// The usage of each of `pods` that runs, with its node.
    /// `namespace`: the namespace `pods` are all of, or None for all of them.
    fn measure(
        &self,
        pods: &[Arc<Pod>],
        namespace: Option<&str>,
    ) -> Vec<(Option<String>, PodMetrics)> {
        let running: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| podutil::phase(p) == "Running" && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        let usage = self.runtime.usage(&running);
        let wall = jiff::Timestamp::now();
        let mut points = self.points.lock();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (pod, containers) in running.iter().zip(usage) {
            let Some(containers) = containers else {
                continue;
            };
            let pod_key = key(pod);
            let mut window = Duration::ZERO;
            let mut timestamp = wall;
            let mut measured = Vec::new();
            for c in containers {
                let id = format!("{pod_key}/{}", c.name);
                let p = self.advance(&mut points, &id, &c);
                seen.insert(id);
                window = window.max(p.window());
                timestamp = timestamp.min(p.last.at);
                measured.push((
                    c.name.clone(),
                    Usage {
                        cpu_nanocores: p.rate(),
                        memory_bytes: c.memory_bytes,
                    },
                ));
            }
            if measured.is_empty() {
                continue;
            }
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            out.push((
                node,
                PodMetrics {
                    namespace: pod.namespace().unwrap_or_default(),
                    name: pod.name_any(),
                    sample: Sample {
                        timestamp,
                        window,
                        labels: pod.labels().clone(),
                    },
                    containers: measured,
                },
            ));
        }
        // Points of containers that no longer run go.
        match namespace {
            None => points.retain(|id, _| seen.contains(id)),
            Some(ns) => {
                let prefix = format!("{ns}/");
                points.retain(|id, _| !id.starts_with(&prefix) || seen.contains(id));
            }
        }
        out
    }

    /// A container's points, moved on when the last is a resolution old.
    fn advance(
        &self,
        points: &mut HashMap<String, Points>,
        id: &str,
        c: &ContainerUsage,
    ) -> Points {
        let current = Point {
            at: c.at,
            cpu: c.cpu,
        };
        let kept = points
            .get(id)
            .copied()
            .filter(|p| p.started == c.started && p.last.cpu <= c.cpu);
        let next = match kept {
            Some(p) if c.at.duration_since(p.last.at).unsigned_abs() >= self.resolution => Points {
                prev: p.last,
                last: current,
                ..p
            },
            Some(p) => p,
            // First seen, or started again: its counter was zero when it
            // started.
            None => Points {
                started: c.started,
                prev: Point {
                    at: c.started,
                    cpu: Duration::ZERO,
                },
                last: current,
            },
        };
        points.insert(id.to_string(), next);
        next
    }
}

impl ResourceMetrics for MetricsServer {
    fn pods(&self, namespace: Option<&str>) -> Vec<PodMetrics> {
        match namespace {
            Some(ns) => self.measure(&self.cluster.pods_by_namespace.get(ns), Some(ns)),
            None => self.measure(&self.cluster.pods.state(), None),
        }
        .into_iter()
        .map(|(_, p)| p)
        .collect()
    }

    fn nodes(&self) -> Vec<NodeMetrics> {
        let pods = self.measure(&self.cluster.pods.state(), None);
        let mut by_node: BTreeMap<String, (Usage, Duration)> = BTreeMap::new();
        for (node, p) in &pods {
            let Some(node) = node else { continue };
            let (usage, window) = by_node.entry(node.clone()).or_default();
            for (_, u) in &p.containers {
                *usage += *u;
            }
            *window = (*window).max(p.sample.window);
        }
        let wall = jiff::Timestamp::now();
        self.cluster
            .nodes
            .state()
            .iter()
            .map(|n| {
                let name = n.name_any();
                let (usage, window) = by_node.remove(&name).unwrap_or_default();
                NodeMetrics {
                    sample: Sample {
                        timestamp: wall,
                        window: if window.is_zero() {
                            self.resolution
                        } else {
                            window
                        },
                        labels: n.labels().clone(),
                    },
                    name,
                    usage,
                }
            })
            .collect()
    }
}
