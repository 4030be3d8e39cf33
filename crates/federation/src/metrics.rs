//! The control plane's Prometheus metrics, named as Karmada names them so
//! that dashboards and the performance scripts carry over.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    match_policy: Histogram,
    binding_sync_work: Family<ResultLabel, Histogram>,
    work_sync_workload: Family<ResultLabel, Histogram>,
    scheduling: Family<ResultLabel, Histogram>,
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

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry.lock()).is_err() {
            out.clear();
        }
        out
    }
}
