//! Where a pod's start goes, step by step, in the member's `/metrics`:
//! the sandbox's files, its network (namespace, veth, addresses, routes)
//! and each container's start (volumes, environment, cgroup, spawn). Upstream's
//! kubelet exports the like as histograms
//! (`kubelet_run_podsandbox_duration_seconds`,
//! `kubelet_network_plugin_operations_duration_seconds`); these are
//! summaries (sum and count), enough for a mean per pod over any window.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The steps timed, with their metric names.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    SandboxFiles,
    Network,
    ProcessStart,
}

impl Step {
    const ALL: [Step; 3] = [Step::SandboxFiles, Step::Network, Step::ProcessStart];

    pub fn metric(self) -> &'static str {
        match self {
            Step::SandboxFiles => "flotilla_kubelet_pod_sandbox_files_seconds",
            Step::Network => "flotilla_kubelet_pod_network_setup_seconds",
            Step::ProcessStart => "flotilla_kubelet_container_process_start_seconds",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Step::SandboxFiles => {
                "Writing a pod sandbox's directory and files (hosts, resolv.conf, hostname)."
            }
            Step::Network => "Making a pod's network: its namespace, veth, addresses and routes.",
            Step::ProcessStart => {
                "Starting a container: its volumes, environment, cgroup, launch record and process."
            }
        }
    }
}

/// Sums and counts of each step, shared by every pod of the runtime.
#[derive(Debug, Default)]
pub struct Timings {
    nanos: [AtomicU64; 3],
    count: [AtomicU64; 3],
}

impl Timings {
    pub fn record(&self, step: Step, took: Duration) {
        let i = step as usize;
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos[i].fetch_add(nanos, Ordering::Relaxed);
        self.count[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The summaries as Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for step in Step::ALL {
            let i = step as usize;
            let name = step.metric();
            let _ = writeln!(out, "# HELP {name} {}", step.help());
            let _ = writeln!(out, "# TYPE {name} summary");
            let seconds = self.nanos[i].load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum {seconds:.9}");
            let _ = writeln!(
                out,
                "{name}_count {}",
                self.count[i].load(Ordering::Relaxed)
            );
        }
        out
    }
}

/// A summary's sum and count in a Prometheus text exposition.
pub fn read(exposition: &str, metric: &str) -> Option<(f64, u64)> {
    let value = |suffix: &str| {
        let key = format!("{metric}{suffix} ");
        exposition
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some((value("_sum")?, value("_count")? as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_round_trip_through_the_exposition() {
        let t = Timings::default();
        t.record(Step::Network, Duration::from_millis(3));
        t.record(Step::Network, Duration::from_millis(5));
        t.record(Step::ProcessStart, Duration::from_micros(1500));
        let text = t.render();
        assert!(text.contains("# TYPE flotilla_kubelet_pod_network_setup_seconds summary"));
        let (sum, count) = read(&text, Step::Network.metric()).unwrap();
        assert_eq!(count, 2);
        assert!((sum - 0.008).abs() < 1e-9, "{sum}");
        assert_eq!(read(&text, Step::SandboxFiles.metric()), Some((0.0, 0)));
        assert_eq!(read(&text, "no_such_metric"), None);
    }
}
