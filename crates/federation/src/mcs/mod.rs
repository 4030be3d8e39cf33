//! Multi-cluster services (KEP-1645) over the joined members: a Service
//! with a ServiceExport in some members becomes one ServiceImport, with a
//! ClusterSetIP, in every member and on the hub, and the ready endpoints
//! of each exporting cluster follow as EndpointSlices, one source cluster
//! per slice. The hub's copies are what `flotilla dns` serves.
//!
//! Each Ready Push member gets the MCS CRDs, its cluster id (KEP-2149's
//! ClusterProperty, the cluster's name unless one is set) and watches of
//! its ServiceExports, Services, EndpointSlices and ServiceImports; any
//! change queues its service, and a service is reconciled as a whole from
//! what every member shows ([`merge`]). A member that stops being Ready
//! leaves at once: its exports and endpoints are gone from every import
//! at the next reconcile.

pub use flotilla_core::mcs as api;
mod exports;
mod imports;
pub mod ips;
mod members;
pub mod merge;
pub mod pull;
pub mod slices;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DeleteParams;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource};
use parking_lot::Mutex;
use tracing::{debug, warn};

use crate::api::Cluster;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use api::{MANAGED_BY, MANAGED_BY_LABEL, MultiClusterService, ServiceImport};
use exports::{facts, write_export_status, write_front_status};
use imports::{apply_import, sync_slices};
use members::{Link, Member, follow, key_of, slice_service_key};
use merge::Export;

/// The field manager of every MCS write.
const MANAGER: &str = "flotilla-mcs";
/// How long a member whose services could not be followed waits before
/// the next try.
const MEMBER_RETRY: Duration = Duration::from_secs(5);
/// A sweep of every imported service, for what no watch reported.
const RESYNC: Duration = Duration::from_secs(60);

struct Mcs {
    ctx: Ctx,
    members: Mutex<HashMap<String, Arc<Member>>>,
    /// Members being set up (CRDs, identity, first lists).
    starting: Mutex<HashSet<String>>,
    queue: Arc<crate::queue::WorkQueue<String>>,
    hub_imports: Store<ServiceImport>,
    /// ClusterSetIPs given that `hub_imports` does not show yet.
    given: Mutex<ips::Ledger>,
    hub_slices: Store<EndpointSlice>,
    /// Karmada MultiClusterServices on the hub.
    fronts: Store<MultiClusterService>,
}

pub async fn run(ctx: Ctx, clusters: impl Stream<Item = Arc<Cluster>> + Send + 'static) {
    let queue = crate::queue::WorkQueue::named(ctx.metrics.queue("mcs-controller"));
    let managed = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let (hub_imports, t1) = follow(
        Api::<ServiceImport>::all(ctx.hub.clone()),
        watcher::Config::default(),
        queue.clone(),
        key_of,
    );
    let (hub_slices, t2) = follow(
        Api::<EndpointSlice>::all(ctx.hub.clone()),
        managed,
        queue.clone(),
        slice_service_key,
    );
    let (fronts, t3) = follow(
        Api::<MultiClusterService>::all(ctx.hub.clone()),
        watcher::Config::default(),
        queue.clone(),
        key_of,
    );
    let mcs = Arc::new(Mcs {
        ctx,
        members: Mutex::default(),
        starting: Mutex::default(),
        queue: queue.clone(),
        hub_imports,
        given: Mutex::default(),
        hub_slices,
        fronts,
    });
    let watch_clusters = {
        let mcs = mcs.clone();
        async move {
            let mut clusters = std::pin::pin!(clusters);
            while let Some(c) = clusters.next().await {
                mcs.cluster_changed(&c);
            }
        }
    };
    let sweep = {
        let mcs = mcs.clone();
        async move {
            let mut every = tokio::time::interval(RESYNC);
            loop {
                every.tick().await;
                mcs.queue_everything();
            }
        }
    };
    let work = {
        let mcs = mcs.clone();
        // Nothing is decided on the hub's caches before they have listed:
        // an empty import cache would give taken ClusterSetIPs again, an
        // empty MultiClusterService cache would import everywhere.
        let listed = {
            let mcs = mcs.clone();
            async move {
                let _ = tokio::join!(
                    mcs.hub_imports.wait_until_ready(),
                    mcs.hub_slices.wait_until_ready(),
                    mcs.fronts.wait_until_ready(),
                );
            }
        };
        let run = queue.run(4, move |key: String| {
            let mcs = mcs.clone();
            async move {
                if let Err(error) = mcs.reconcile(&key).await {
                    warn!(%error, service = %key, "multi-cluster service sync failed; retrying");
                    mcs.queue.add_after(key, Duration::from_secs(2));
                }
            }
        });
        async move {
            listed.await;
            run.await
        }
    };
    tokio::join!(watch_clusters, sweep, work);
    t1.abort();
    t2.abort();
    t3.abort();
}

impl Mcs {
    /// Every service some member exports or imports, or the hub imports.
    fn queue_everything(&self) {
        let mut keys: HashSet<String> = self
            .hub_imports
            .state()
            .iter()
            .filter_map(|i| key_of(&**i))
            .collect();
        keys.extend(self.fronts.state().iter().filter_map(|f| key_of(&**f)));
        for m in self.members.lock().values() {
            keys.extend(m.exports.state().iter().filter_map(|e| key_of(&**e)));
            keys.extend(m.imports.state().iter().filter_map(|e| key_of(&**e)));
        }
        self.queue.add_all(keys);
    }

    async fn reconcile(&self, key: &str) -> Result<(), Error> {
        let Some((ns, name)) = key.split_once('/') else {
            return Ok(());
        };
        debug!(service = %key, "reconciling");
        let members: Vec<Arc<Member>> = {
            let mut m: Vec<_> = self.members.lock().values().cloned().collect();
            m.sort_by(|a, b| a.id.cmp(&b.id));
            m
        };
        let front = self
            .fronts
            .get(&ObjectRef::new(name).within(ns))
            .filter(|f| f.metadata.deletion_timestamp.is_none());
        self.sync_front_exports(&members, ns, name, front.as_deref())
            .await?;
        let exports: Vec<Export> = members
            .iter()
            .filter_map(|m| {
                let e = m.exports.get(&ObjectRef::new(name).within(ns))?;
                if e.metadata.deletion_timestamp.is_some() {
                    return None;
                }
                let service = m.services.get(&ObjectRef::new(name).within(ns));
                Some(Export {
                    cluster: m.id.clone(),
                    created: e.metadata.creation_timestamp.as_ref()?.0,
                    service: service.map(|s| facts(&s)),
                    labels: e.spec.exported_labels.clone(),
                    annotations: e.spec.exported_annotations.clone(),
                })
            })
            .collect();
        let merged = merge::merge(key, &exports);
        if let Some(f) = &front {
            write_front_status(&self.ctx.hub, f, &merged).await?;
        }
        // A MultiClusterService names its consumers; otherwise every
        // member imports.
        let (consumers, others): (Vec<Arc<Member>>, Vec<Arc<Member>>) = members
            .iter()
            .cloned()
            .partition(|m| front.as_ref().is_none_or(|f| f.consumes(&m.name)));
        for m in &members {
            if let Some(conditions) = merged.conditions.get(&m.id) {
                write_export_status(
                    &self.ctx.hub,
                    m,
                    ns,
                    name,
                    conditions,
                    merged.import.is_some(),
                )
                .await?;
            }
        }
        let Some(import) = &merged.import else {
            self.withdraw(&members, true, ns, name).await?;
            self.given.lock().forget(key);
            return Ok(());
        };
        self.withdraw(&others, false, ns, name).await?;
        let spec = self.import_spec(ns, name, import)?;
        // The hub first: it holds the ClusterSetIP and feeds DNS.
        let hub = self.ctx.hub.clone();
        let cached = self.hub_imports.get(&ObjectRef::new(name).within(ns));
        let hub_import = apply_import(&hub, cached, ns, name, &spec, import).await?;
        let sources: BTreeMap<&str, &Member> = members
            .iter()
            .filter(|m| import.clusters.contains(&m.id))
            .map(|m| (m.id.as_str(), &**m))
            .collect();
        let owner = |i: &ServiceImport| {
            i.controller_owner_ref(&()).map(|mut o| {
                o.controller = None;
                o.block_owner_deletion = None;
                o
            })
        };
        sync_slices(
            &hub,
            &self.hub_slices,
            ns,
            name,
            &sources,
            None,
            owner(&hub_import),
        )
        .await?;
        for m in &consumers {
            let client = match &m.link {
                Link::Push(client) => client,
                Link::Pull => {
                    self.write_pull_import(m, ns, name, &spec, import, &sources)
                        .await?;
                    continue;
                }
            };
            let cached = m.imports.get(&ObjectRef::new(name).within(ns));
            let member_import = apply_import(client, cached, ns, name, &spec, import).await?;
            sync_slices(
                client,
                &m.slices,
                ns,
                name,
                &sources,
                Some(&m.id),
                owner(&member_import),
            )
            .await?;
        }
        debug!(service = %key, clusters = ?import.clusters, "service imported");
        Ok(())
    }
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
