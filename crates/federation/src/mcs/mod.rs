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
pub mod ips;
pub mod merge;
pub mod pull;
pub mod slices;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::api::{Cluster, Work, sync_mode};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use api::{
    CLUSTER_ID_PROPERTY, ClusterProperty, ClusterPropertySpec, ImportCluster, ImportPort,
    MANAGED_BY, MANAGED_BY_LABEL, MultiClusterService, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL,
    ServiceExport, ServiceExportStatus, ServiceImport, ServiceImportSpec,
};
use merge::{Export, Merged, Port, ServiceFacts};

/// The field manager of every MCS write.
const MANAGER: &str = "flotilla-mcs";
/// How long a member whose services could not be followed waits before
/// the next try.
const MEMBER_RETRY: Duration = Duration::from_secs(5);
/// A sweep of every imported service, for what no watch reported.
const RESYNC: Duration = Duration::from_secs(60);

/// How the controller reaches a member.
enum Link {
    /// Through the member's API.
    Push(Client),
    /// Through Works in its execution namespace on the hub, which its
    /// agent reports to and applies ([`pull`]).
    Pull,
}

/// What the controller follows of one member.
struct Member {
    link: Link,
    /// Its Cluster's name on the hub.
    name: String,
    /// Its cluster id (KEP-2149).
    id: String,
    exports: Store<ServiceExport>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    imports: Store<ServiceImport>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

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

fn key_of<K: Resource>(o: &K) -> Option<String> {
    Some(format!(
        "{}/{}",
        o.meta().namespace.as_deref()?,
        o.meta().name.as_deref()?
    ))
}

/// Follows `api` into a store, queueing `key(obj)` on every change.
fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    queue: Arc<crate::queue::WorkQueue<String>>,
    key: fn(&K) -> Option<String>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let task = tokio::spawn(async move {
        let events = reflector::reflector(writer, watcher(api, config))
            .default_backoff()
            .touched_objects();
        let mut events = std::pin::pin!(events);
        while let Some(e) = events.next().await {
            if let Ok(obj) = e
                && let Some(k) = key(&obj)
            {
                queue.add(k);
            }
        }
    });
    (store, task)
}

fn slice_service_key(s: &EndpointSlice) -> Option<String> {
    let labels = s.metadata.labels.as_ref()?;
    let name = labels
        .get("kubernetes.io/service-name")
        .or_else(|| labels.get(SERVICE_NAME_LABEL))?;
    Some(format!("{}/{name}", s.metadata.namespace.as_deref()?))
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

    fn cluster_changed(self: &Arc<Self>, c: &Cluster) {
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

    async fn start_member(&self, cluster: &Cluster) -> Result<Member, Error> {
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
    async fn start_pull_member(&self, cluster: &Cluster) -> Result<Member, Error> {
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

    /// A Pull consumer's import and slices, as one Work its agent applies.
    /// Its slices carry no owner: the Work's removal takes them.
    async fn write_pull_import(
        &self,
        m: &Member,
        ns: &str,
        name: &str,
        spec: &ServiceImportSpec,
        import: &merge::Import,
        sources: &BTreeMap<&str, &Member>,
    ) -> Result<(), Error> {
        let mut manifests = vec![import_manifest(ns, name, spec, import)];
        for slice in wanted_slices(ns, name, sources, Some(&m.id), None) {
            let mut body = serde_json::to_value(&slice)?;
            body["apiVersion"] = "discovery.k8s.io/v1".into();
            body["kind"] = "EndpointSlice".into();
            manifests.push(body);
        }
        self.write_pull_work(&m.name, pull::work_name("import", ns, name), &manifests)
            .await
    }

    /// Writes a Work for a Pull member unless it already says `manifests`.
    async fn write_pull_work(
        &self,
        cluster: &str,
        work: String,
        manifests: &[serde_json::Value],
    ) -> Result<(), Error> {
        let namespace = Cluster::execution_namespace(cluster);
        let have = self
            .ctx
            .works
            .get(&ObjectRef::new(&work).within(&namespace));
        if pull::carries(have.as_deref(), manifests) {
            return Ok(());
        }
        let labels = BTreeMap::from([(MANAGED_BY_LABEL, MANAGED_BY)]);
        let body = pull::work_body(&namespace, &work, labels, manifests);
        Api::<Work>::namespaced(self.ctx.hub.clone(), &namespace)
            .patch(
                &work,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(())
    }

    /// Removes a Pull member's Work, if there is one.
    async fn delete_pull_work(&self, cluster: &str, work: &str) -> Result<(), Error> {
        let namespace = Cluster::execution_namespace(cluster);
        if self
            .ctx
            .works
            .get(&ObjectRef::new(work).within(&namespace))
            .is_none()
        {
            return Ok(());
        }
        delete(
            &Api::<Work>::namespaced(self.ctx.hub.clone(), &namespace),
            work,
        )
        .await
    }

    fn import_spec(
        &self,
        ns: &str,
        name: &str,
        import: &merge::Import,
    ) -> Result<ServiceImportSpec, Error> {
        // One ClusterSetIP per family the Service asks for and a range
        // is configured for.
        let ranges: Vec<ipnet::IpNet> = self
            .ctx
            .options
            .clusterset_ip_ranges
            .iter()
            .filter(|r| {
                let family = if matches!(r, ipnet::IpNet::V4(_)) {
                    "IPv4"
                } else {
                    "IPv6"
                };
                import.ip_families.iter().any(|f| f == family)
            })
            .copied()
            .collect();
        let ips = if import.type_ == "ClusterSetIP" {
            // The pick and its record under one lock, the cache read
            // under it too: reconciles of other services run at once.
            let mut given = self.given.lock();
            let cached = self
                .hub_imports
                .get(&ObjectRef::new(name).within(ns))
                .map(|i| i.spec.ips.clone());
            let others: Vec<IpAddr> = self
                .hub_imports
                .state()
                .iter()
                .filter(|i| !(i.name_any() == name && i.namespace().as_deref() == Some(ns)))
                .flat_map(|i| i.spec.ips.clone())
                .filter_map(|s| s.parse().ok())
                .collect();
            given
                .assign(&format!("{ns}/{name}"), &ranges, cached.as_deref(), others)
                .map_err(Error::Mcs)?
        } else {
            self.given.lock().forget(&format!("{ns}/{name}"));
            Vec::new()
        };
        Ok(ServiceImportSpec {
            ports: import
                .ports
                .iter()
                .map(|p| ImportPort {
                    name: p.name.clone(),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                    port: p.port,
                })
                .collect(),
            ips,
            type_: import.type_.to_string(),
            session_affinity: Some(import.session_affinity.clone()),
            session_affinity_config: import.session_affinity_config.clone(),
            ip_families: import.ip_families.clone(),
            internal_traffic_policy: import.internal_traffic_policy.clone(),
            traffic_distribution: import.traffic_distribution.clone(),
        })
    }

    /// The imports of `members` (and, with `hub`, the hub's) and their
    /// slices go: no export is valid any more, or they are not consumers.
    /// An import someone made by hand says why it serves nothing.
    async fn withdraw(
        &self,
        members: &[Arc<Member>],
        hub: bool,
        ns: &str,
        name: &str,
    ) -> Result<(), Error> {
        let hub_import = hub.then(|| {
            (
                self.ctx.hub.clone(),
                self.hub_imports.get(&ObjectRef::new(name).within(ns)),
            )
        });
        let mut targets: Vec<(Client, Option<Arc<ServiceImport>>)> =
            hub_import.into_iter().collect();
        for m in members {
            match &m.link {
                Link::Push(client) => targets.push((
                    client.clone(),
                    m.imports.get(&ObjectRef::new(name).within(ns)),
                )),
                Link::Pull => {
                    self.delete_pull_work(&m.name, &pull::work_name("import", ns, name))
                        .await?
                }
            }
        }
        for (client, import) in targets {
            let Some(import) = import else { continue };
            let ours =
                import.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY);
            let imports: Api<ServiceImport> = Api::namespaced(client.clone(), ns);
            if ours {
                delete(&imports, name).await?;
                let slices: Api<EndpointSlice> = Api::namespaced(client, ns);
                let lp = ListParams::default().labels(&format!(
                    "{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}"
                ));
                for s in slices.list(&lp).await?.items {
                    delete(&slices, &s.name_any()).await?;
                }
                info!(service = %format!("{ns}/{name}"), "no valid export left: import withdrawn");
            } else {
                let mut status = import.status.clone().unwrap_or_default();
                if conditions::set(
                    &mut status.conditions,
                    "Ready",
                    false,
                    "NoServiceExport",
                    &format!(
                        "no cluster of the clusterset exports {ns}/{name}: ServiceImports are made by the MCS controller from ServiceExports, not by hand"
                    ),
                ) {
                    imports
                        .patch_status(
                            name,
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"status": status})),
                        )
                        .await?;
                }
            }
        }
        Ok(())
    }
}

impl Mcs {
    /// A MultiClusterService's exports: a ServiceExport (marked as ours) in
    /// each provider, and ours removed from the others.
    async fn sync_front_exports(
        &self,
        members: &[Arc<Member>],
        ns: &str,
        name: &str,
        front: Option<&MultiClusterService>,
    ) -> Result<(), Error> {
        for m in members {
            let have = m.exports.get(&ObjectRef::new(name).within(ns));
            let ours = have.as_ref().is_some_and(|e| {
                e.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            });
            let provides = front.is_some_and(|f| f.provides(&m.name));
            let mut export = ServiceExport::default();
            export.metadata.name = Some(name.to_string());
            export.metadata.namespace = Some(ns.to_string());
            export.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGED_BY.to_string(),
            )]));
            let client = match &m.link {
                Link::Push(client) => client,
                Link::Pull => {
                    let work = pull::work_name("front", ns, name);
                    if provides && (have.is_none() || ours) {
                        let mut manifest = serde_json::to_value(&export)?;
                        manifest["apiVersion"] = format!("{}/v1alpha1", api::GROUP).into();
                        manifest["kind"] = "ServiceExport".into();
                        self.write_pull_work(&m.name, work, &[manifest]).await?;
                    } else if !provides {
                        self.delete_pull_work(&m.name, &work).await?;
                    }
                    continue;
                }
            };
            let api: Api<ServiceExport> = Api::namespaced(client.clone(), ns);
            if provides && have.is_none() {
                flotilla_client::namespace::ensure(client, ns, &[]).await?;
                match api.create(&PostParams::default(), &export).await {
                    Ok(_) => {
                        info!(cluster = %m.name, service = %format!("{ns}/{name}"), "exported for a MultiClusterService")
                    }
                    Err(e) if crate::error::is_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if !provides && ours {
                delete(&api, name).await?;
            }
        }
        Ok(())
    }
}

/// A MultiClusterService's Ready condition: exported, or why not.
async fn write_front_status(
    hub: &Client,
    front: &MultiClusterService,
    merged: &Merged,
) -> Result<(), Error> {
    let mut status = front.status.clone().unwrap_or_default();
    let (ready, reason, message) = if !front.cross_cluster() {
        (
            false,
            "UnsupportedType",
            "only type CrossCluster is implemented; LoadBalancer is accepted and inert".to_string(),
        )
    } else if let Some(i) = &merged.import {
        (
            true,
            "Exported",
            format!("exported from {}", i.clusters.join(", ")),
        )
    } else {
        (
            false,
            "NoProvider",
            "no provider cluster is Ready with a Service of this name".to_string(),
        )
    };
    if !conditions::set(&mut status.conditions, "Ready", ready, reason, &message) {
        return Ok(());
    }
    let ns = front.namespace().unwrap_or_default();
    Api::<MultiClusterService>::namespaced(hub.clone(), &ns)
        .patch_status(
            &front.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    Ok(())
}

/// The member's cluster id: its KEP-2149 ClusterProperty, set to the
/// cluster's name when it has none.
async fn cluster_id(client: &Client, name: &str) -> Result<String, Error> {
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

fn facts(s: &Service) -> ServiceFacts {
    let spec = s.spec.clone().unwrap_or_default();
    ServiceFacts {
        type_: spec.type_.clone().unwrap_or_else(|| "ClusterIP".into()),
        headless: spec.cluster_ip.as_deref() == Some("None"),
        ports: spec
            .ports
            .iter()
            .flatten()
            .map(|p| Port {
                name: p.name.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: p.port,
                app_protocol: p.app_protocol.clone(),
            })
            .collect(),
        session_affinity: spec
            .session_affinity
            .clone()
            .unwrap_or_else(|| "None".into()),
        session_affinity_config: spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok()),
        ip_families: spec.ip_families.clone().unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy.clone(),
        traffic_distribution: spec.traffic_distribution.clone(),
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

async fn write_export_status(
    hub: &Client,
    m: &Member,
    ns: &str,
    name: &str,
    wanted: &[merge::ExportCondition],
    imported: bool,
) -> Result<(), Error> {
    let Some(export) = m.exports.get(&ObjectRef::new(name).within(ns)) else {
        return Ok(());
    };
    let mut status: ServiceExportStatus = export.status.clone().unwrap_or_default();
    let mut changed = false;
    for c in wanted {
        changed |= conditions::set(
            &mut status.conditions,
            c.type_,
            c.status,
            &c.reason,
            &c.message,
        );
    }
    let valid = wanted.iter().any(|c| c.type_ == "Valid" && c.status);
    let (ready, reason, message) = match (valid, imported) {
        (true, true) => (
            true,
            "Exported",
            "The service is exported to the clusterset",
        ),
        (true, false) => (false, "Pending", "The service is being exported"),
        (false, _) => (false, "Failed", "The export is not valid"),
    };
    changed |= conditions::set(&mut status.conditions, "Ready", ready, reason, message);
    if !wanted.iter().any(|c| c.type_ == "Conflict") {
        let before = status.conditions.len();
        status
            .conditions
            .retain(|c: &Condition| c.type_ != "Conflict");
        changed |= status.conditions.len() != before;
    }
    if !changed {
        return Ok(());
    }
    let client = match &m.link {
        Link::Push(client) => client,
        Link::Pull => {
            return pull::write_report_status(hub, &m.name, ns, name, &status.conditions).await;
        }
    };
    Api::<ServiceExport>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    Ok(())
}

/// The exported labels, and ours.
fn import_labels(import: &merge::Import) -> BTreeMap<String, String> {
    let mut labels = import.labels.clone();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels
}

/// The ServiceImport as the controller writes it, without status.
fn import_manifest(
    ns: &str,
    name: &str,
    spec: &ServiceImportSpec,
    import: &merge::Import,
) -> serde_json::Value {
    let mut metadata = json!({"name": name, "namespace": ns, "labels": import_labels(import)});
    if !import.annotations.is_empty() {
        metadata["annotations"] = json!(import.annotations);
    }
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceImport",
        "metadata": metadata,
        "spec": spec,
    })
}

/// Server-side applies the import and its status; returns it as stored.
async fn apply_import(
    client: &Client,
    cached: Option<Arc<ServiceImport>>,
    ns: &str,
    name: &str,
    spec: &ServiceImportSpec,
    import: &merge::Import,
) -> Result<ServiceImport, Error> {
    let want: Vec<ImportCluster> = import
        .clusters
        .iter()
        .map(|c| ImportCluster { cluster: c.clone() })
        .collect();
    // Most reconciles change nothing: the watch's copy says so without a
    // round trip.
    if let Some(have) = cached
        && have.spec == *spec
        && *have.labels() == import_labels(import)
        && *have.annotations() == import.annotations
        && have.status.as_ref().map(|s| &s.clusters) == Some(&want)
    {
        return Ok((*have).clone());
    }
    flotilla_client::namespace::ensure(client, ns, &[]).await?;
    let api: Api<ServiceImport> = Api::namespaced(client.clone(), ns);
    let body = import_manifest(ns, name, spec, import);
    let params = PatchParams::apply(MANAGER).force();
    let stored = api.patch(name, &params, &Patch::Apply(&body)).await?;
    if stored.status.as_ref().map(|s| &s.clusters) != Some(&want) {
        let status = json!({"status": {"clusters": want}});
        return Ok(api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?);
    }
    Ok(stored)
}

/// Brings the import's slices in one cluster (a member or the hub) to
/// [`wanted_slices`].
async fn sync_slices(
    client: &Client,
    have: &Store<EndpointSlice>,
    ns: &str,
    name: &str,
    sources: &BTreeMap<&str, &Member>,
    consumer: Option<&str>,
    owner: Option<OwnerReference>,
) -> Result<(), Error> {
    let want = wanted_slices(ns, name, sources, consumer, owner);
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let existing: Vec<Arc<EndpointSlice>> = have
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
                && s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        })
        .collect();
    for w in &want {
        let wname = w.metadata.name.clone().unwrap_or_default();
        if existing
            .iter()
            .any(|e| e.metadata.name.as_deref() == Some(wname.as_str()) && slices::same(e, w))
        {
            continue;
        }
        let mut body = serde_json::to_value(w)?;
        body["apiVersion"] = "discovery.k8s.io/v1".into();
        body["kind"] = "EndpointSlice".into();
        api.patch(
            &wname,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    }
    for e in existing {
        let ename = e.name_any();
        let source = e
            .labels()
            .get(SOURCE_CLUSTER_LABEL)
            .cloned()
            .unwrap_or_default();
        if !want
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(ename.as_str()))
        {
            debug!(slice = %ename, %source, "stale import slice removed");
            delete(&api, &ename).await?;
        }
    }
    Ok(())
}

/// One slice per source cluster, from the sources' own slices of the
/// Service, for the cluster `consumer` (None: the hub).
fn wanted_slices(
    ns: &str,
    name: &str,
    sources: &BTreeMap<&str, &Member>,
    consumer: Option<&str>,
    owner: Option<OwnerReference>,
) -> Vec<EndpointSlice> {
    let mut want: Vec<EndpointSlice> = Vec::new();
    for (id, m) in sources {
        let own = own_slices(&m.slices, ns, name);
        let own: Vec<&EndpointSlice> = own.iter().map(|s| &**s).collect();
        let key = ObjectRef::new(name).within(ns);
        // A Globalnet cluster's gateway annotates the export with the
        // Service's global IP: that, not its pod IPs, is what others reach.
        // A cluster reaches its own endpoints directly.
        let global_ip = (consumer != Some(*id))
            .then(|| m.exports.get(&key))
            .flatten()
            .and_then(|e| {
                e.metadata
                    .annotations
                    .as_ref()?
                    .get(GLOBAL_IP_ANNOTATION)
                    .cloned()
            });
        match global_ip {
            Some(ip) => {
                let ports = m
                    .services
                    .get(&ObjectRef::new(name).within(ns))
                    .and_then(|s| s.spec.clone())
                    .and_then(|s| s.ports)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| k8s_openapi::api::discovery::v1::EndpointPort {
                        name: p.name,
                        port: Some(p.port),
                        protocol: p.protocol,
                        app_protocol: p.app_protocol,
                    })
                    .collect();
                want.push(slices::global(
                    ns,
                    name,
                    id,
                    &ip,
                    &own,
                    ports,
                    owner.clone(),
                ));
            }
            None => {
                let mut from = slices::from_source(ns, name, id, &own, owner.clone());
                // A headless Service's pods each have a global IP there.
                if let Some(map) = global_pod_ips(m, &key, consumer, id) {
                    for slice in &mut from {
                        slice.endpoints.retain_mut(|e| {
                            e.addresses = e
                                .addresses
                                .iter()
                                .filter_map(|a| map.get(a).cloned())
                                .collect();
                            !e.addresses.is_empty()
                        });
                    }
                }
                want.extend(from)
            }
        }
    }
    want
}

/// A Globalnet cluster's map of its headless Service's pod IPs to their
/// global IPs, for any consumer but itself.
fn global_pod_ips(
    m: &Member,
    key: &ObjectRef<ServiceExport>,
    consumer: Option<&str>,
    id: &str,
) -> Option<BTreeMap<String, String>> {
    if consumer == Some(id) {
        return None;
    }
    let raw = m
        .exports
        .get(key)?
        .metadata
        .annotations
        .as_ref()?
        .get(GLOBAL_POD_IPS_ANNOTATION)?
        .clone();
    serde_json::from_str(&raw).ok()
}

/// The ServiceExport annotation of a Globalnet cluster's gateway
/// (Submariner's `submariner.io/globalIp`).
const GLOBAL_IP_ANNOTATION: &str = "submariner.io/globalIp";
/// A Globalnet cluster's headless export: its pods' global IPs (JSON,
/// pod IP to global IP).
const GLOBAL_POD_IPS_ANNOTATION: &str = "flotilla.io/global-pod-ips";

/// A cluster's own EndpointSlices of Service `ns/name` (not the slices
/// of an import of it).
fn own_slices(slices: &Store<EndpointSlice>, ns: &str, name: &str) -> Vec<Arc<EndpointSlice>> {
    slices
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(name)
                && !s.labels().contains_key(SERVICE_NAME_LABEL)
        })
        .collect()
}
