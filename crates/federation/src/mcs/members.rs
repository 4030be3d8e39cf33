//! The members the controller follows: how each is reached (its API, or
//! Works for a Pull member), the watches of its exports, Services, slices
//! and imports, and its cluster id.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::api::{
    CLUSTER_ID_PROPERTY, ClusterProperty, ClusterPropertySpec, SERVICE_NAME_LABEL, ServiceExport,
    ServiceImport,
};
use crate::api::{Cluster, sync_mode};
use crate::error::Error;

use super::{MEMBER_RETRY, Mcs, api, pull};

/// How the controller reaches a member.
pub(super) enum Link {
    /// Through the member's API.
    Push(Client),
    /// Through Works in its execution namespace on the hub, which its
    /// agent reports to and applies ([`pull`]).
    Pull,
}

/// What the controller follows of one member.
pub(super) struct Member {
    pub(super) link: Link,
    /// Its Cluster's name on the hub.
    pub(super) name: String,
    /// Its cluster id (KEP-2149).
    pub(super) id: String,
    pub(super) exports: Store<ServiceExport>,
    pub(super) services: Store<Service>,
    pub(super) slices: Store<EndpointSlice>,
    pub(super) imports: Store<ServiceImport>,
    pub(super) tasks: Vec<JoinHandle<()>>,
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

pub(super) fn key_of<K: Resource>(o: &K) -> Option<String> {
    Some(format!(
        "{}/{}",
        o.meta().namespace.as_deref()?,
        o.meta().name.as_deref()?
    ))
}

/// Follows `api` into a store, queueing `key(obj)` on every change.
pub(super) fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    queue: Arc<crate::queue::WorkQueue<String>>,
    key: fn(&K) -> Option<String>,
) -> (Store<K>, JoinHandle<()>)
where
    K: flotilla_client::follow::Followable,
{
    flotilla_client::follow::follow(api, config, move |event| {
        if let Some(k) = flotilla_client::follow::touched(event).and_then(key) {
            queue.add(k);
        }
    })
}

pub(super) fn slice_service_key(s: &EndpointSlice) -> Option<String> {
    let labels = s.metadata.labels.as_ref()?;
    let name = labels
        .get("kubernetes.io/service-name")
        .or_else(|| labels.get(SERVICE_NAME_LABEL))?;
    Some(format!("{}/{name}", s.metadata.namespace.as_deref()?))
}

/// The member's cluster id: its KEP-2149 ClusterProperty, set to the
/// cluster's name when it has none.
pub(super) async fn cluster_id(client: &Client, name: &str) -> Result<String, Error> {
    let api: Api<ClusterProperty> = Api::all(client.clone());
    if let Some(p) = api.get_opt(CLUSTER_ID_PROPERTY).await? {
        return Ok(p.spec.value);
    }
    let property = ClusterProperty::new(
        CLUSTER_ID_PROPERTY,
        ClusterPropertySpec {
            value: name.to_string(),
        },
    );
    match api.create(&PostParams::default(), &property).await {
        Ok(p) => Ok(p.spec.value),
        Err(e) if crate::error::is_conflict(&e) => {
            Ok(api.get(CLUSTER_ID_PROPERTY).await?.spec.value)
        }
        Err(e) => Err(e.into()),
    }
}

impl Mcs {
    pub(super) fn cluster_changed(self: &Arc<Self>, c: &Cluster) {
        let name = c.name_any();
        let usable = c.is_ready() && c.metadata.deletion_timestamp.is_none();
        if !usable {
            if self.members.lock().remove(&name).is_some() {
                info!(cluster = %name, "member left the clusterset's services");
                self.queue_everything();
            }
            return;
        }
        if self.members.lock().contains_key(&name) || !self.starting.lock().insert(name.clone()) {
            return;
        }
        let mcs = self.clone();
        let cluster = c.clone();
        tokio::spawn(async move {
            let result = mcs.start_member(&cluster).await;
            mcs.starting.lock().remove(&cluster.name_any());
            match result {
                Ok(member) => {
                    info!(cluster = %cluster.name_any(), id = %member.id, "member joined the clusterset's services");
                    mcs.members
                        .lock()
                        .insert(cluster.name_any(), Arc::new(member));
                    mcs.queue_everything();
                }
                Err(error) => {
                    warn!(%error, cluster = %cluster.name_any(), "cannot follow the member's services; retrying");
                    tokio::time::sleep(MEMBER_RETRY).await;
                    if let Some(now) = mcs.ctx.cluster(&cluster.name_any()) {
                        mcs.cluster_changed(&now);
                    }
                }
            }
        });
    }

    pub(super) async fn start_member(&self, cluster: &Cluster) -> Result<Member, Error> {
        if cluster.spec.sync_mode == sync_mode::PULL {
            return self.start_pull_member(cluster).await;
        }
        let client = self.ctx.members.get(cluster).await?.client;
        flotilla_client::crd::install(&client, api::crds()).await?;
        let id = cluster_id(&client, &cluster.name_any()).await?;
        let q = || self.queue.clone();
        let all = watcher::Config::default;
        let (exports, a) = follow(
            Api::<ServiceExport>::all(client.clone()),
            all(),
            q(),
            key_of,
        );
        let (services, b) = follow(Api::<Service>::all(client.clone()), all(), q(), key_of);
        let (slices, c) = follow(
            Api::<EndpointSlice>::all(client.clone()),
            all(),
            q(),
            slice_service_key,
        );
        let (imports, d) = follow(
            Api::<ServiceImport>::all(client.clone()),
            all(),
            q(),
            key_of,
        );
        let member = Member {
            link: Link::Push(client),
            name: cluster.name_any(),
            id,
            exports,
            services,
            slices,
            imports,
            tasks: vec![a, b, c, d],
        };
        for ready in [
            member.exports.wait_until_ready().await.is_ok(),
            member.services.wait_until_ready().await.is_ok(),
            member.slices.wait_until_ready().await.is_ok(),
            member.imports.wait_until_ready().await.is_ok(),
        ] {
            if !ready {
                return Err(Error::Mcs("a member watch ended before listing".into()));
            }
        }
        Ok(member)
    }

    /// A Pull member is what its agent reports; its imports are Works.
    pub(super) async fn start_pull_member(&self, cluster: &Cluster) -> Result<Member, Error> {
        let name = cluster.name_any();
        let Some(id) = cluster
            .annotations()
            .get(pull::CLUSTER_ID_ANNOTATION)
            .cloned()
        else {
            return Err(Error::Mcs(format!(
                "no cluster id reported by {name}'s agent yet"
            )));
        };
        let reports = pull::follow_reports(&self.ctx.hub, &name, self.queue.clone());
        let member = Member {
            link: Link::Pull,
            name,
            id,
            exports: reports.exports,
            services: reports.services,
            slices: reports.slices,
            // The hub does not see what the agent applied; it keeps the
            // import Works current instead.
            imports: reflector::store::Writer::default().as_reader(),
            tasks: vec![reports.task],
        };
        if reports.works.wait_until_ready().await.is_err()
            || member.exports.wait_until_ready().await.is_err()
        {
            return Err(Error::Mcs("a member watch ended before listing".into()));
        }
        Ok(member)
    }
}
