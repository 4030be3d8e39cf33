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

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::warn;

use crate::api::{ForeignCluster, tenant_namespace};
use crate::remote;

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
/// role), their clients built once per version of their kubeconfig.
pub struct Peers {
    pub local: Client,
    pub cluster_id: String,
    clients: Mutex<HashMap<String, (String, Client)>>,
}

impl Peers {
    pub fn new(local: Client, cluster_id: String) -> Arc<Peers> {
        Arc::new(Peers {
            local,
            cluster_id,
            clients: Mutex::default(),
        })
    }

    pub async fn providers(&self) -> Vec<Provider> {
        let fcs = match Api::<ForeignCluster>::all(self.local.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            // Not peered yet: the CRDs come with the first peering.
            Err(_) => return Vec::new(),
        };
        let mut out = Vec::new();
        for fc in fcs {
            let status = fc.status.clone().unwrap_or_default();
            if !status.role.contains("Provider") {
                continue;
            }
            let id = fc.spec.cluster_id.clone();
            let local_tenant = tenant_namespace(&id);
            let secret_name = remote::kubeconfig_secret_name(&id);
            let secrets: Api<Secret> = Api::namespaced(self.local.clone(), &local_tenant);
            let Ok(Some(secret)) = secrets.get_opt(&secret_name).await else {
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
                None => match remote::from_secret(&self.local, &local_tenant, &secret_name).await {
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
}

/// Wakes a loop on every change of a NamespaceOffloading, of either group.
pub(crate) fn wake_on_offloadings(local: &Client, wake: &Arc<Notify>) {
    for group in [crate::api::OFFLOADING_GROUP, crate::api::SHARING_GROUP] {
        let api: Api<DynamicObject> = Api::all_with(local.clone(), &offloading::resource(group));
        crate::wake::on_changes(api, wake.clone());
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
