//! The pull-mode agent (`flotilla agent`), run next to a member the hub
//! cannot reach. With a token confined to its cluster (see
//! [`crate::agents`]) it registers the Cluster with syncMode Pull, renews
//! its Lease in `karmada-cluster` so the hub knows it is alive, and
//! reports the member's status as the hub's probes would for a Push
//! member, and runs the control plane's execution controller for its one
//! member: it follows the Works of its execution namespace, applies them,
//! and writes their status back, from which the hub's status controller
//! aggregates as it does for Push members.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher};
use kube::{Api, Client};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{
    CLUSTER_NAMESPACE, Cluster, ClusterSpec, Scope, Work, override_resource, sync_mode,
};
use crate::cluster::health::Damper;
use crate::cluster::{next_status, probe};
use crate::context::{Options, Shared};
use crate::execution;
use crate::fanout::{Fanout, PackedFanout};
use crate::join::{JoinError, valid_name};
use crate::kinds::Kinds;
use crate::members::Members;
use crate::metrics::Metrics;

/// What the agent registers and how often it reports.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub cluster: String,
    pub api_endpoint: String,
    pub provider: Option<String>,
    pub region: Option<String>,
    pub zones: Vec<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// How often the member is probed and its status reported.
    pub status_interval: Duration,
    pub success_threshold: Duration,
    pub failure_threshold: Duration,
    /// The Lease's duration; it is renewed every quarter of it.
    pub lease_duration: Duration,
    /// Concurrent Work applies.
    pub work_concurrency: u16,
}

/// Registers the cluster in Pull mode, or finds it registered so; a Push
/// cluster of that name is refused.
pub async fn register(hub: &Client, o: &AgentOptions) -> Result<(), JoinError> {
    valid_name(&o.cluster)?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    if let Some(c) = clusters.get_opt(&o.cluster).await? {
        if c.spec.sync_mode != sync_mode::PULL {
            return Err(JoinError::Duplicate(format!(
                "{} (joined in {} mode: unjoin it first)",
                o.cluster, c.spec.sync_mode
            )));
        }
        return Ok(());
    }
    let mut cluster = Cluster::new(
        &o.cluster,
        ClusterSpec {
            sync_mode: sync_mode::PULL.into(),
            api_endpoint: Some(o.api_endpoint.clone()),
            provider: o.provider.clone(),
            region: o.region.clone(),
            zones: o.zones.clone(),
            ..Default::default()
        },
    );
    if !o.labels.is_empty() {
        cluster.metadata.labels = Some(o.labels.clone());
    }
    match clusters.create(&PostParams::default(), &cluster).await {
        Ok(_) => {
            info!(cluster = %o.cluster, "registered in Pull mode");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Renews the Lease for ever.
pub async fn renew_lease(hub: Client, o: AgentOptions) {
    let leases: Api<Lease> = Api::namespaced(hub, CLUSTER_NAMESPACE);
    let seconds = i32::try_from(o.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let mut every = tokio::time::interval(o.lease_duration / 4);
    loop {
        every.tick().await;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let result = match leases.get_opt(&o.cluster).await {
            Ok(Some(_)) => leases
                .patch(
                    &o.cluster,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"spec": {"renewTime": now, "leaseDurationSeconds": seconds}}),
                    ),
                )
                .await
                .map(|_| ()),
            Ok(None) => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(o.cluster.clone()),
                        namespace: Some(CLUSTER_NAMESPACE.into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(o.cluster.clone()),
                        lease_duration_seconds: Some(seconds),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                leases
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(error) = result {
            warn!(%error, cluster = %o.cluster, "cannot renew the lease");
        }
    }
}

/// Probes the member and reports its status to the hub, for ever.
pub async fn report_status(hub: Client, member: Client, o: AgentOptions) {
    let clusters: Api<Cluster> = Api::all(hub);
    let mut damper = Damper::default();
    let mut every = tokio::time::interval(o.status_interval);
    loop {
        every.tick().await;
        let cluster = match clusters.get(&o.cluster).await {
            Ok(c) => c,
            Err(error) => {
                warn!(%error, cluster = %o.cluster, "cannot read the cluster from the hub");
                continue;
            }
        };
        let health = probe::health(&member).await;
        let observation = match health {
            Ok(()) => probe::observe(&member).await,
            Err(_) => Default::default(),
        };
        let old = cluster.status.clone().unwrap_or_default();
        // Ready as this agent last reported it; Unknown (the hub's mark
        // of a lapsed lease) counts as not yet recorded.
        let recorded = cluster
            .condition("Ready")
            .filter(|c| c.status != "Unknown")
            .map(|c| c.status == "True");
        let ready = damper.decide(
            recorded,
            health.is_ok(),
            Instant::now(),
            o.success_threshold,
            o.failure_threshold,
        );
        let status = next_status(&old, &health, observation, ready);
        if status == old {
            continue;
        }
        if recorded != Some(ready) {
            info!(cluster = %o.cluster, ready, "cluster readiness changed");
        }
        let patch = json!({"status": status});
        if let Err(error) = clusters
            .patch_status(&o.cluster, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(%error, cluster = %o.cluster, "cannot report the cluster's status");
        }
    }
}

/// Applies the cluster's Works to the member and reports their status,
/// for ever. The token allows following only this cluster's execution
/// namespace and its own Cluster (watched by name), so those are the
/// caches the execution controller gets.
pub async fn apply_works(hub: Client, member: Client, o: AgentOptions) {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={}", o.cluster));
    let (clusters, drive_clusters) =
        Fanout::selecting(Api::<Cluster>::all(hub.clone()), (), by_name);
    let namespace = Cluster::execution_namespace(&o.cluster);
    let (works, drive_works) = PackedFanout::new(Api::<Work>::namespaced(hub.clone(), &namespace));
    // No overrides are rendered here: the hub wrote them into the Works.
    let no_overrides =
        || reflector::store::Writer::new(override_resource(Scope::Namespaced)).as_reader();
    let ctx = Arc::new(Shared {
        hub_kinds: Kinds::new(hub.clone()),
        members: Members::fixed(&o.cluster, member),
        hub,
        clusters: clusters.store.clone(),
        works: works.store.clone(),
        options: Options {
            work_concurrency: o.work_concurrency,
            applies_sync_mode: sync_mode::PULL,
            ..Options::default()
        },
        metrics: Metrics::default(),
        override_policies: [no_overrides(), no_overrides()],
        overrides_epoch: Default::default(),
        placement_epoch: Default::default(),
        templates: Default::default(),
    });
    let changes = execution::changes(&works.changes, works.store.clone());
    let execution = async {
        // As in the control plane: nothing is decided on a half-filled cache.
        let _ = clusters.store.wait_until_ready().await;
        works.store.wait_until_listed().await;
        execution::run(ctx, changes).await;
    };
    tokio::join!(drive_clusters, drive_works, execution);
}
