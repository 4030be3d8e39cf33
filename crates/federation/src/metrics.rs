//! The control plane's Prometheus metrics, named as Karmada names them so
//! that dashboards and the performance scripts carry over.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// A work queue's name, as client-go's `workqueue_*` metrics label it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub name: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    match_policy: Histogram,
    binding_sync_work: Family<ResultLabel, Histogram>,
    work_sync_workload: Family<ResultLabel, Histogram>,
    scheduling: Family<ResultLabel, Histogram>,
    queues: QueueFamilies,
}

/// client-go's work queue metrics, which Karmada's controllers export:
/// where a stage's time goes between waiting and working.
#[derive(Clone)]
struct QueueFamilies {
    depth: Family<QueueLabel, Gauge>,
    adds: Family<QueueLabel, Counter>,
    retries: Family<QueueLabel, Counter>,
    wait: Family<QueueLabel, Histogram>,
    work: Family<QueueLabel, Histogram>,
}

/// One queue's handles on its metrics. A queue made without a name (in
/// tests) gets handles that no registry exports.
#[derive(Clone)]
pub struct QueueMetrics {
    /// The controller the queue feeds: its metrics' `name` label, and its
    /// reconciles' span.
    pub name: &'static str,
    pub depth: Gauge,
    pub adds: Counter,
    pub retries: Counter,
    pub wait: Histogram,
    pub work: Histogram,
}

impl Default for QueueMetrics {
    fn default() -> QueueMetrics {
        QueueMetrics {
            name: "",
            depth: Gauge::default(),
            adds: Counter::default(),
            retries: Counter::default(),
            wait: queue_buckets(),
            work: queue_buckets(),
        }
    }
}

fn queue_buckets() -> Histogram {
    // client-go's ExponentialBuckets(10e-9, 10, 10).
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

fn buckets() -> Histogram {
    // 1 ms to ~16 s, as Karmada's ExponentialBuckets(0.001, 2, 15).
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn result(ok: bool) -> ResultLabel {
    ResultLabel {
        result: if ok { "success" } else { "error" },
    }
}

fn family() -> Family<ResultLabel, Histogram> {
    Family::new_with_constructor(buckets as fn() -> Histogram)
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            registry: Arc::default(),
            match_policy: buckets(),
            binding_sync_work: family(),
            work_sync_workload: family(),
            scheduling: family(),
            queues: QueueFamilies {
                depth: Family::default(),
                adds: Family::default(),
                retries: Family::default(),
                wait: Family::new_with_constructor(queue_buckets as fn() -> Histogram),
                work: Family::new_with_constructor(queue_buckets as fn() -> Histogram),
            },
        };
        {
            let mut r = metrics.registry.lock();
            r.register(
                "resource_match_policy_duration_seconds",
                "Duration in seconds to find a matched propagation policy for a resource template",
                metrics.match_policy.clone(),
            );
            r.register(
                "binding_sync_work_duration_seconds",
                "Duration in seconds to sync Works for a binding",
                metrics.binding_sync_work.clone(),
            );
            r.register(
                "work_sync_workload_duration_seconds",
                "Duration in seconds to sync a Work's workload to its member cluster",
                metrics.work_sync_workload.clone(),
            );
            r.register(
                "karmada_scheduler_e2e_scheduling_duration_seconds",
                "End-to-end scheduling latency of one binding",
                metrics.scheduling.clone(),
            );
            let q = &metrics.queues;
            r.register(
                "workqueue_depth",
                "Current depth of workqueue",
                q.depth.clone(),
            );
            r.register(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                q.adds.clone(),
            );
            r.register(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                q.retries.clone(),
            );
            r.register(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                q.wait.clone(),
            );
            r.register(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                q.work.clone(),
            );
        }
        metrics
    }
}

impl Metrics {
    pub fn observe_match(&self, d: Duration) {
        self.match_policy.observe(d.as_secs_f64());
    }

    pub fn observe_binding_sync(&self, ok: bool, d: Duration) {
        self.binding_sync_work
            .get_or_create(&result(ok))
            .observe(d.as_secs_f64());
    }

    pub fn observe_work_sync(&self, ok: bool, d: Duration) {
        self.work_sync_workload
            .get_or_create(&result(ok))
            .observe(d.as_secs_f64());
    }

    pub fn observe_scheduling(&self, ok: bool, d: Duration) {
        self.scheduling
            .get_or_create(&result(ok))
            .observe(d.as_secs_f64());
    }

    /// The handles of the queue called `name` (queues of one name, such as
    /// the detector's one per resource type, add up).
    pub fn queue(&self, name: &'static str) -> QueueMetrics {
        let label = QueueLabel { name };
        let q = &self.queues;
        QueueMetrics {
            name,
            depth: q.depth.get_or_create(&label).clone(),
            adds: q.adds.get_or_create(&label).clone(),
            retries: q.retries.get_or_create(&label).clone(),
            wait: q.wait.get_or_create(&label).clone(),
            work: q.work.get_or_create(&label).clone(),
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry.lock()).is_err() {
            out.clear();
        }
        out
    }
}
