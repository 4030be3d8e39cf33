//! The consumer's side of its peerings, as Liqo's controller manager and
//! virtual kubelet in the consumer: one loop per concern.
//!
//! - `slices`: ResourceSlices go to their provider, grants come back, and
//!   a granted slice gets its VirtualNode;
//! - `virtual_node`: a VirtualNode becomes a Node with the granted
//!   capacity, Ready while the provider answers;
//! - `offloading`: NamespaceOffloadings become twin namespaces in the
//!   selected providers, with status (`stranded`: a pod created before
//!   its namespace was offloaded is told why it cannot run);
//! - `pods`: a pod bound to a virtual node runs in the provider as a
//!   ShadowPod, and its status comes back;
//! - `reflection`: ConfigMaps, Secrets, Services, Ingresses and
//!   EndpointSlices follow to the twin namespaces, Events come back.

pub mod kubelet;
pub mod offloading;
pub mod pods;
pub mod reflection;
pub mod slices;
pub mod stranded;
pub mod tokens;
pub mod virtual_node;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_client::follow::{follow_optional, follow_optional_with};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::warn;

use crate::api::{
    ForeignCluster, OFFLOADING_GROUP, REMOTE_CLUSTER_ID, SHARING_GROUP, tenant_namespace,
};
use crate::remote;

/// How long a pass waits for the caches' first lists (a loop's first
/// pass after the start) before it reads what they hold.
const FIRST_LIST: Duration = Duration::from_secs(10);

/// A provider of this cluster, and how to reach it.
#[derive(Clone)]
pub struct Provider {
    pub id: String,
    pub client: Client,
    /// This cluster's tenant namespace in the provider.
    pub remote_tenant: String,
    /// The provider's tenant namespace here.
    pub local_tenant: String,
}

/// The providers of this cluster (ForeignClusters with the Provider
/// role), their clients built once per version of their kubeconfig, and
/// the NamespaceOffloadings: what every consumer loop reads on every
/// pass, kept by watches (shared informers) rather than listed each time.
pub struct Peers {
    pub local: Client,
    pub cluster_id: String,
    clients: Mutex<HashMap<String, (String, Client)>>,
    foreign_clusters: Store<ForeignCluster>,
    /// The providers' kubeconfig Secrets (labelled with their cluster ID).
    kubeconfigs: Store<Secret>,
    offloadings: Vec<(&'static str, Store<DynamicObject>)>,
    /// Loops woken when any of the caches changes.
    listeners: Arc<Mutex<Vec<Arc<Notify>>>>,
}

impl Peers {
    /// Starts following this cluster's peerings; needs a Tokio runtime.
    pub fn new(local: Client, cluster_id: String) -> Arc<Peers> {
        let listeners: Arc<Mutex<Vec<Arc<Notify>>>> = Arc::default();
        let changed = || {
            let listeners = listeners.clone();
            move || {
                for wake in listeners.lock().iter() {
                    wake.notify_one();
                }
            }
        };
        let foreign_clusters = follow_optional(
            Api::all(local.clone()),
            watcher::Config::default(),
            changed(),
        );
        let kubeconfigs = follow_optional(
            Api::all(local.clone()),
            watcher::Config::default().labels(REMOTE_CLUSTER_ID),
            changed(),
        );
        let offloadings = [OFFLOADING_GROUP, SHARING_GROUP]
            .into_iter()
            .map(|group| {
                let resource = offloading::resource(group);
                let api = Api::all_with(local.clone(), &resource);
                let store =
                    follow_optional_with(api, watcher::Config::default(), resource, changed());
                (group, store)
            })
            .collect();
        Arc::new(Peers {
            local,
            cluster_id,
            clients: Mutex::default(),
            foreign_clusters,
            kubeconfigs,
            offloadings,
            listeners,
        })
    }

    /// Wakes `wake` on every change of a ForeignCluster, a provider's
    /// kubeconfig or a NamespaceOffloading (of either group).
    pub fn wake_on_changes(&self, wake: &Arc<Notify>) {
        self.listeners.lock().push(wake.clone());
    }

    /// Until every cache has listed once (or [`FIRST_LIST`] has passed).
    async fn listed(&self) {
        let all = async {
            let _ = self.foreign_clusters.wait_until_ready().await;
            let _ = self.kubeconfigs.wait_until_ready().await;
            for (_, store) in &self.offloadings {
                let _ = store.wait_until_ready().await;
            }
        };
        let _ = tokio::time::timeout(FIRST_LIST, all).await;
    }

    pub async fn providers(&self) -> Vec<Provider> {
        self.listed().await;
        let mut out = Vec::new();
        for fc in self.foreign_clusters.state() {
            let status = fc.status.clone().unwrap_or_default();
            if !status.role.contains("Provider") {
                continue;
            }
            let id = fc.spec.cluster_id.clone();
            let local_tenant = tenant_namespace(&id);
            let secret_name = remote::kubeconfig_secret_name(&id);
            let Some(secret) = self.kubeconfigs.state().into_iter().find(|s| {
                s.name_any() == secret_name && s.namespace().as_deref() == Some(&local_tenant)
            }) else {
                continue;
            };
            let version = secret.resource_version().unwrap_or_default();
            let cached = self
                .clients
                .lock()
                .get(&id)
                .filter(|(v, _)| *v == version)
                .map(|(_, c)| c.clone());
            let client = match cached {
                Some(c) => c,
                None => match remote::from_secret_object(&secret).await {
                    Ok(c) => {
                        self.clients.lock().insert(id.clone(), (version, c.clone()));
                        c
                    }
                    Err(error) => {
                        warn!(%error, provider = %id, "cannot build the provider's client");
                        continue;
                    }
                },
            };
            let remote_tenant = if status.tenant_namespace.remote.is_empty() {
                tenant_namespace(&self.cluster_id)
            } else {
                status.tenant_namespace.remote.clone()
            };
            out.push(Provider {
                id,
                client,
                remote_tenant,
                local_tenant,
            });
        }
        out
    }

    /// Every namespace's NamespaceOffloading that counts (see
    /// [`offloading::entries`]).
    pub async fn offloadings(&self) -> Vec<offloading::Entry> {
        self.listed().await;
        offloading::entries(
            self.offloadings
                .iter()
                .flat_map(|(group, store)| store.state().into_iter().map(move |o| (*group, o))),
        )
    }
}

/// Starts the consumer's loops.
pub fn spawn(peers: Arc<Peers>) {
    tokio::spawn(slices::run(peers.clone()));
    tokio::spawn(virtual_node::run(peers.clone()));
    tokio::spawn(offloading::run(peers.clone()));
    tokio::spawn(reflection::run(peers.clone()));
    tokio::spawn(pods::run(peers));
}
