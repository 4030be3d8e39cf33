//! Peering, as Liqo does it: two clusters peer directly (no hub), the
//! consumer sees the provider as a virtual node, and an unmodified
//! workload in an offloaded namespace runs partly in the provider.
//!
//! - `api`: Liqo's types and CRDs, the contract between the two sides;
//! - `peer`: `flotilla peer`/`unpeer` (administrator's access to both);
//! - `consumer`: ResourceSlice replication, the virtual node, namespace
//!   offloading and the pods bound to the virtual node;
//! - `provider`: grants, twin namespaces and ShadowPods;
//! - `network`: the fabric between peers (the provider as broker);
//! - `admission`: the pod mutation of offloaded namespaces, in the
//!   consumer's API server;
//! - `concurrent`: a pass's per-object work, a few at a time;
//! - `admiralty`: Admiralty's elected pods (proxy and delegate pods,
//!   Targets) on the same machinery.
//!
//! Both sides reach each other only through the Kubernetes API, with the
//! identity the peering made.
#![forbid(unsafe_code)]

pub mod admiralty;
pub mod admission;
pub mod api;
pub mod concurrent;
pub mod consumer;
pub mod globalips;
pub mod identity;
pub mod network;
pub mod peer;
pub mod provider;
pub mod quantity;
pub mod remote;
pub mod wake;

use kube::Client;
use tracing::{info, warn};

/// Runs both sides' controllers for the cluster `local` reaches (a member
/// in process, or any cluster from outside it); `name` is its cluster ID
/// unless it already has one.
pub async fn run(local: Client, name: &str) {
    let id = loop {
        match identity::ensure_cluster_id(&local, &identity::sanitize(name)).await {
            Ok(id) => break id,
            Err(error) => {
                warn!(%error, "cannot read or set the cluster ID; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    };
    if let Err(error) = flotilla_client::crd::install(&local, api::crds()).await {
        warn!(%error, "cannot install the peering CRDs");
    }
    info!(cluster_id = %id, "peering controllers running");
    provider::spawn(local.clone());
    tokio::spawn(globalips::run(local.clone(), globalips::reached_by_a_peer));
    tokio::spawn(admiralty::run(local.clone()));
    consumer::spawn(consumer::Peers::new(local, id));
}
