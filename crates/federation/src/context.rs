//! What every federation controller shares: the hub client, caches of
//! Clusters and Works, member clients, and the options they run with.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kube::Client;
use kube::runtime::reflector::Store;
use tracing::{debug, warn};

use crate::api::{Cluster, OverridePolicy, Work, sync_mode};
use crate::error::Error;
use crate::kinds::Kinds;
use crate::members::Members;
use crate::metrics::Metrics;
use crate::packed::PackedStore;
use crate::templates::Templates;

/// Tunables; the defaults are Karmada's.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often a Push member is probed (`--cluster-status-update-frequency`).
    pub cluster_status_interval: Duration,
    /// How long a failure must last before Ready turns False.
    pub cluster_failure_threshold: Duration,
    /// How long success must last before Ready turns True again.
    pub cluster_success_threshold: Duration,
    /// Work applies in flight per member (`--concurrent-work-syncs`).
    pub work_concurrency: u16,
    /// How long a Pull cluster's Lease may go unrenewed before it turns
    /// Ready=Unknown (`--cluster-monitor-grace-period`).
    pub cluster_monitor_grace_period: Duration,
    /// How long a cluster being evicted keeps its Work when the new
    /// placement does not become healthy (`--graceful-eviction-timeout`).
    pub graceful_eviction_timeout: Duration,
    /// The sync mode of the clusters whose Works this process applies:
    /// Push in the control plane, Pull in an agent.
    pub applies_sync_mode: &'static str,
    /// Where multi-cluster services' ClusterSetIPs come from: one range
    /// per IP family (`--clusterset-ip-range`).
    pub clusterset_ip_ranges: Vec<ipnet::IpNet>,
    /// The optional front ends to run, by name (`--frontends`).
    pub frontends: Vec<String>,
    /// The cores the pipeline may keep busy: the Work applies in flight,
    /// tuned on 2 cores, grow with them ([`Options::scaled`]).
    pub cores: usize,
}

/// The most a concurrency tuned on 2 cores is multiplied by: 8 cores'
/// worth. On 16 cores (docs/benchmarks.md) 8 times the applies in flight
/// made each one take three times as long, for 100 MiB more of the hub's
/// memory than 4 times.
const MOST_SCALE: usize = 4;

impl Default for Options {
    fn default() -> Options {
        Options {
            cluster_status_interval: Duration::from_secs(10),
            cluster_failure_threshold: Duration::from_secs(30),
            cluster_success_threshold: Duration::from_secs(30),
            work_concurrency: 5,
            cluster_monitor_grace_period: Duration::from_secs(40),
            graceful_eviction_timeout: Duration::from_secs(600),
            applies_sync_mode: sync_mode::PUSH,
            clusterset_ip_ranges: vec![ipnet::IpNet::V4(
                ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(243, 0, 0, 0), 16).unwrap_or_default(),
            )],
            frontends: Vec::new(),
            cores: usable_cores(),
        }
    }
}

pub use flotilla_store::usable_cores;

impl Options {
    /// `base`, a stage's concurrency as tuned on 2 cores, for this
    /// process's cores: on 16 a burst's Works waited on round trips, not
    /// on CPU (docs/architecture.md), so more in flight keep the cores
    /// busy; on 3 or fewer it stays as tuned.
    pub fn scaled(&self, base: usize) -> usize {
        base * (self.cores / 2).clamp(1, MOST_SCALE)
    }
}

pub struct Shared {
    pub hub: Client,
    pub hub_kinds: Kinds,
    pub clusters: Store<Cluster>,
    /// Every Work of the fleet, packed: at scale, they are most of the
    /// controllers' memory.
    pub works: PackedStore<Work>,
    pub members: Members,
    pub options: Options,
    pub metrics: Metrics,
    /// OverridePolicies, then ClusterOverridePolicies.
    pub override_policies: [Store<OverridePolicy>; 2],
    /// Bumped whenever an override policy changes: a binding's Works
    /// written at an older epoch are rendered again.
    pub overrides_epoch: AtomicU64,
    /// Bumped whenever a cluster changes in a way placement depends on;
    /// a binding scheduled at the current epoch and generation needs no
    /// new decision.
    pub placement_epoch: AtomicU64,
    /// The detector's template caches, for rendering Works.
    pub templates: Templates,
}

pub type Ctx = Arc<Shared>;

impl Shared {
    pub fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        self.clusters
            .get(&kube::runtime::reflector::ObjectRef::new(name))
    }

    /// Whether the cluster named is gone or going from the fleet.
    pub fn leaving(&self, name: &str) -> bool {
        self.cluster(name)
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
    }
}

/// Logs a failed reconcile that will be retried.
pub fn report(error: &Error) {
    if error.is_conflict() {
        // Someone wrote first: read again and redo, nothing is wrong.
        debug!(%error, "write conflict; retrying");
    } else {
        warn!(%error, "reconcile failed; retrying");
    }
}

#[cfg(test)]
mod scaled_tests {
    use super::*;

    fn with_cores(cores: usize) -> Options {
        Options {
            cores,
            ..Options::default()
        }
    }

    #[test]
    fn a_stage_keeps_its_tuning_up_to_three_cores_and_grows_with_more_up_to_eight() {
        assert_eq!(with_cores(1).scaled(32), 32);
        assert_eq!(with_cores(2).scaled(32), 32);
        assert_eq!(with_cores(3).scaled(32), 32);
        assert_eq!(with_cores(4).scaled(32), 64);
        assert_eq!(with_cores(8).scaled(100), 400);
        assert_eq!(with_cores(16).scaled(100), 400);
    }
}
