//! Wires the federation controllers together over shared caches of the
//! hub's Clusters, bindings and Works: one watch per kind, fanned out to
//! every controller that needs it.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tracing::info;

use crate::api::{
    Binding, Cluster, ClusterTaintPolicy, OverridePolicy, Scope, Work, binding_resource,
    override_resource,
};
use crate::clustersets::api::{ManagedClusterSet, ManagedClusterSetBinding};
use crate::context::{Ctx, Options, Shared};
use crate::fanout::{Fanout, PackedFanout};
use crate::kinds::Kinds;
use crate::members::Members;
use crate::metrics::Metrics;
use crate::packed::PackedStore;
use crate::quota::api::FederatedResourceQuota;
use crate::scheduler::tenancy::Tenancy;
use crate::{
    autoscaling, binding, cluster, dependencies, detector, execution, failover, frontends, mcs,
    quota, rebalancer, scheduler, status, taint_policy,
};

/// What of a cluster placement depends on: a change here reschedules.
fn placement_fingerprint(c: &Cluster) -> u64 {
    let mut h = DefaultHasher::new();
    c.labels().hash(&mut h);
    serde_json::to_string(&c.spec)
        .unwrap_or_default()
        .hash(&mut h);
    c.metadata.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// The kinds a cluster serves, as the scheduler's API filter reads them.
fn served_kinds(c: &Cluster) -> HashSet<scheduler::ServedKind> {
    c.status
        .iter()
        .flat_map(|s| &s.api_enablements)
        .flat_map(|e| {
            e.resources
                .iter()
                .map(|r| (e.group_version.clone(), r.kind.clone()))
        })
        .collect()
}

/// Sends the kinds a known cluster started or stopped serving (a CRD
/// installed in a member): only bindings of those kinds are scheduled
/// again, not the whole fleet's. Joins and leaves reschedule everything
/// through the placement fingerprint.
async fn served_kind_changes(
    clusters: impl Stream<Item = Arc<Cluster>> + Send + 'static,
    tx: broadcast::Sender<Arc<HashSet<scheduler::ServedKind>>>,
) {
    let mut seen: HashMap<String, HashSet<scheduler::ServedKind>> = HashMap::new();
    let mut clusters = std::pin::pin!(clusters);
    while let Some(c) = clusters.next().await {
        let now = served_kinds(&c);
        let Some(before) = seen.insert(c.name_any(), now.clone()) else {
            continue;
        };
        let changed: HashSet<_> = before.symmetric_difference(&now).cloned().collect();
        if !changed.is_empty() {
            tracing::debug!(cluster = %c.name_any(), kinds = changed.len(), "served kinds changed");
            let _ = tx.send(Arc::new(changed));
        }
    }
}

/// Signals `tx` whenever what `fingerprint` takes of a cluster changes
/// (a join included), after `also`; not on every status probe.
async fn cluster_changes(
    clusters: impl Stream<Item = Arc<Cluster>> + Send + 'static,
    fingerprint: fn(&Cluster) -> u64,
    also: impl Fn(&Cluster) + Send,
    tx: broadcast::Sender<()>,
) {
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut clusters = std::pin::pin!(clusters);
    while let Some(c) = clusters.next().await {
        let f = fingerprint(&c);
        if seen.insert(c.name_any(), f) != Some(f) {
            also(&c);
            let _ = tx.send(());
        }
    }
}

/// What of a cluster failover depends on: readiness, and taints (NoExecute
/// ones evict; a NoSchedule one still on a recovered cluster keeps a
/// return from choosing it).
fn readiness_fingerprint(c: &Cluster) -> u64 {
    let mut h = DefaultHasher::new();
    c.condition("Ready").map(|r| r.status.clone()).hash(&mut h);
    for t in &c.spec.taints {
        t.key.hash(&mut h);
        t.value.hash(&mut h);
        t.effect.hash(&mut h);
    }
    h.finish()
}

/// Turns override policy changes into "render every binding's Works
/// again" signals. The policies of the first list are not changes: every
/// binding is rendered once after a start anyway.
async fn override_changes(
    ctx: Ctx,
    store: Store<OverridePolicy>,
    policies: impl Stream<Item = Arc<OverridePolicy>> + Send + 'static,
    tx: broadcast::Sender<()>,
) {
    type Id = (Option<String>, String);
    let id = |p: &OverridePolicy| -> Id { (p.namespace(), p.name_any()) };
    let mut seen: HashMap<Id, Option<String>> = store
        .state()
        .iter()
        .map(|p| (id(p), p.resource_version()))
        .collect();
    let mut policies = std::pin::pin!(policies);
    while let Some(p) = policies.next().await {
        let key = id(&p);
        // A deleted policy comes with its last state: gone from the store.
        let present = store.state().iter().any(|s| id(s) == key);
        if present {
            if seen.get(&key) == Some(&p.resource_version()) {
                continue;
            }
            seen.insert(key, p.resource_version());
        } else {
            seen.remove(&key);
        }
        ctx.overrides_epoch.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(policy = %p.name_any(), "override policy changed");
        let _ = tx.send(());
    }
}

/// What of a cluster set or set binding placement depends on: its
/// spec, and whether it exists (not its status, which is ours).
fn spec_fingerprint<K: kube::Resource + serde::Serialize>(o: &K) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_value(o)
        .ok()
        .and_then(|v| v.get("spec").map(|s| s.to_string()))
        .hash(&mut h);
    o.meta().deletion_timestamp.is_some().hash(&mut h);
    h.finish()
}

/// Signals `tx` (at a new placement epoch) whenever a cluster set or a
/// set binding appears, goes or changes its spec: which clusters a
/// namespace may use changed.
async fn tenancy_changes<K>(
    ctx: Ctx,
    store: Store<K>,
    objects: impl Stream<Item = Arc<K>> + Send + 'static,
    tx: broadcast::Sender<()>,
) where
    K: kube::Resource<DynamicType = ()> + serde::Serialize + Clone + 'static,
{
    type Id = (Option<String>, String);
    let mut seen: HashMap<Id, u64> = store
        .state()
        .iter()
        .map(|o| ((o.namespace(), o.name_any()), spec_fingerprint(&**o)))
        .collect();
    let mut objects = std::pin::pin!(objects);
    while let Some(o) = objects.next().await {
        let id = (o.namespace(), o.name_any());
        let present = store
            .get(&kube::runtime::reflector::ObjectRef::from_obj(&*o))
            .is_some();
        let changed = if present {
            let f = spec_fingerprint(&*o);
            seen.insert(id, f) != Some(f)
        } else {
            seen.remove(&id).is_some()
        };
        if changed {
            ctx.placement_epoch.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(kind = %K::kind(&()), name = %o.name_any(), "cluster set change");
            let _ = tx.send(());
        }
    }
}

/// Resolves once `store` holds its watch's first list.
fn listed<K>(store: Store<K>) -> BoxFuture<'static, ()>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    Box::pin(async move {
        // An error means the watch is gone, with the process.
        let _ = store.wait_until_ready().await;
    })
}

/// Resolves once `store` holds its watch's first list.
fn packed_listed<K>(store: &PackedStore<K>) -> BoxFuture<'static, ()>
where
    K: kube::Resource + serde::de::DeserializeOwned + 'static,
{
    let store = store.clone();
    Box::pin(async move { store.wait_until_listed().await })
}

fn signal(rx: broadcast::Receiver<()>) -> impl Stream<Item = ()> + Send + 'static {
    tokio_stream::wrappers::BroadcastStream::new(rx).map(|_| ())
}

/// Runs every federation controller against the hub until one stops
/// (which only happens when the process is shutting down).
pub async fn run(hub: Client, options: Options, metrics: Metrics) {
    let (clusters, drive_clusters) = Fanout::new(Api::<Cluster>::all(hub.clone()), ());
    let (works, drive_works) = PackedFanout::new(Api::<Work>::all(hub.clone()));
    let (taint_policies, drive_taint_policies) =
        Fanout::new(Api::<ClusterTaintPolicy>::all(hub.clone()), ());
    let (cluster_sets, drive_cluster_sets) =
        Fanout::new(Api::<ManagedClusterSet>::all(hub.clone()), ());
    let (set_bindings, drive_set_bindings) =
        Fanout::new(Api::<ManagedClusterSetBinding>::all(hub.clone()), ());
    let (quotas, drive_quotas) = Fanout::new(Api::<FederatedResourceQuota>::all(hub.clone()), ());
    let tenancy = Tenancy {
        sets: cluster_sets.store.clone(),
        set_bindings: set_bindings.store.clone(),
        quotas: quotas.store.clone(),
    };
    let bindings = [Scope::Namespaced, Scope::Cluster].map(|scope| {
        let ar = binding_resource(scope);
        (
            scope,
            PackedFanout::new(Api::<Binding>::all_with(hub.clone(), &ar)),
        )
    });
    let overrides = [Scope::Namespaced, Scope::Cluster].map(|scope| {
        let ar = override_resource(scope);
        Fanout::new(Api::<OverridePolicy>::all_with(hub.clone(), &ar), ar)
    });
    let ctx = Arc::new(Shared {
        hub_kinds: Kinds::new(hub.clone()),
        members: Members::new(hub.clone()),
        hub,
        clusters: clusters.store.clone(),
        works: works.store.clone(),
        options,
        metrics,
        override_policies: [overrides[0].0.store.clone(), overrides[1].0.store.clone()],
        overrides_epoch: Default::default(),
        placement_epoch: Default::default(),
        templates: Default::default(),
    });
    let (placement_tx, _) = broadcast::channel(16);
    let (kinds_tx, _) = broadcast::channel(64);
    let (overrides_tx, _) = broadcast::channel(16);
    let (readiness_tx, _) = broadcast::channel(16);
    // Every controller subscribes before any watch runs, so none misses
    // the initial lists; the futures start once the caches are filled.
    let mut controllers: Vec<BoxFuture<'static, ()>> = vec![
        // Placement: reschedule everything, at a new epoch.
        Box::pin(cluster_changes(
            clusters.changes.shared(),
            placement_fingerprint,
            {
                let ctx = ctx.clone();
                move |c: &Cluster| {
                    ctx.placement_epoch.fetch_add(1, Ordering::SeqCst);
                    tracing::debug!(cluster = %c.name_any(), "placement-relevant cluster change");
                }
            },
            placement_tx.clone(),
        )),
        // Kinds served: reschedule the bindings of those kinds.
        Box::pin(served_kind_changes(
            clusters.changes.shared(),
            kinds_tx.clone(),
        )),
        // Readiness: look at every binding for failover.
        Box::pin(cluster_changes(
            clusters.changes.shared(),
            readiness_fingerprint,
            |_: &Cluster| {},
            readiness_tx.clone(),
        )),
        Box::pin(rebalancer::run(ctx.clone())),
        Box::pin(autoscaling::run(ctx.clone())),
        Box::pin(cluster::run(
            ctx.clone(),
            clusters.store.clone(),
            clusters.changes.objects(),
        )),
        Box::pin(detector::run(
            ctx.clone(),
            [bindings[0].1.0.store.clone(), bindings[1].1.0.store.clone()],
        )),
        Box::pin(execution::run(
            ctx.clone(),
            execution::changes(&works.changes, works.store.clone()),
        )),
        Box::pin(mcs::run(ctx.clone(), clusters.changes.shared())),
        Box::pin(taint_policy::run(
            ctx.clone(),
            clusters.store.clone(),
            clusters.changes.objects(),
            taint_policies.store.clone(),
            taint_policies.changes.shared().map(|_| ()),
        )),
    ];
    // Tenancy: set and binding changes reschedule; their conditions.
    controllers.push(Box::pin(tenancy_changes(
        ctx.clone(),
        cluster_sets.store.clone(),
        cluster_sets.changes.shared(),
        placement_tx.clone(),
    )));
    controllers.push(Box::pin(tenancy_changes(
        ctx.clone(),
        set_bindings.store.clone(),
        set_bindings.changes.shared(),
        placement_tx.clone(),
    )));
    controllers.push(Box::pin(crate::clustersets::run(
        ctx.hub.clone(),
        cluster_sets.store.clone(),
        set_bindings.store.clone(),
        clusters.store.clone(),
        futures::stream::select_all([
            futures::stream::once(async {}).boxed(),
            cluster_sets.changes.shared().map(|_| ()).boxed(),
            set_bindings.changes.shared().map(|_| ()).boxed(),
            signal(placement_tx.subscribe()).boxed(),
        ]),
    )));
    // The front ends that are on: foreign fleet APIs into the pipeline.
    let informers = frontends::Informers {
        cluster_sets: cluster_sets.store.clone(),
        set_bindings: set_bindings.store.clone(),
    };
    for frontend in frontends::ALL {
        if frontends::is_on(frontend, &ctx.options.frontends) {
            controllers.extend(frontend.controllers(&ctx, &informers));
        }
    }
    let mut caches = vec![
        listed(clusters.store.clone()),
        packed_listed(&works.store),
        listed(taint_policies.store.clone()),
        listed(cluster_sets.store.clone()),
        listed(set_bindings.store.clone()),
        listed(quotas.store.clone()),
    ];
    let mut tasks = JoinSet::new();
    for (fanout, drive) in overrides {
        controllers.push(Box::pin(override_changes(
            ctx.clone(),
            fanout.store.clone(),
            fanout.changes.shared(),
            overrides_tx.clone(),
        )));
        caches.push(listed(fanout.store.clone()));
        tasks.spawn(drive);
    }
    for (scope, (fanout, drive)) in bindings {
        let store = fanout.store.clone();
        // Tenancy holds namespaced bindings only; a quota's change (its
        // usage included) looks again at its namespace's bindings.
        let (tenancy, quota_namespaces) = match scope {
            Scope::Namespaced => {
                controllers.push(Box::pin(quota::run(
                    ctx.clone(),
                    quotas.store.clone(),
                    store.clone(),
                    quotas.changes.shared(),
                    fanout.changes.keys(),
                    quota::work_owners(&works.changes),
                )));
                (
                    Some(tenancy.clone()),
                    quotas
                        .changes
                        .subscribe(|q: &Arc<FederatedResourceQuota>| q.namespace())
                        .boxed(),
                )
            }
            Scope::Cluster => (None, futures::stream::empty().boxed()),
        };
        controllers.push(Box::pin(scheduler::run(
            ctx.clone(),
            store.clone(),
            fanout.changes.keys(),
            signal(placement_tx.subscribe()),
            tokio_stream::wrappers::BroadcastStream::new(kinds_tx.subscribe())
                .filter_map(|kinds| async move { kinds.ok() }),
            tenancy,
            quota_namespaces,
        )));
        controllers.push(Box::pin(binding::run(
            ctx.clone(),
            store.clone(),
            fanout.changes.keys(),
            binding::works_removed(&works.changes, works.store.clone(), scope),
            signal(overrides_tx.subscribe()),
        )));
        controllers.push(Box::pin(failover::run(
            ctx.clone(),
            store.clone(),
            failover::changes(&fanout.changes),
            signal(readiness_tx.subscribe()),
        )));
        if scope == Scope::Namespaced {
            controllers.push(Box::pin(failover::data::run(
                ctx.clone(),
                store.clone(),
                works.store.clone(),
                failover::data::changes(&works.changes),
            )));
            controllers.push(Box::pin(dependencies::run(
                ctx.clone(),
                store.clone(),
                dependencies::changes(&fanout.changes),
            )));
        }
        controllers.push(Box::pin(status::run(
            ctx.clone(),
            store.clone(),
            fanout.changes.keys(),
            status::work_owners(&works.changes, scope),
        )));
        caches.push(packed_listed(&store));
        tasks.spawn(drive);
    }
    tasks.spawn(drive_clusters);
    tasks.spawn(drive_works);
    tasks.spawn(drive_taint_policies);
    tasks.spawn(drive_cluster_sets);
    tasks.spawn(drive_set_bindings);
    tasks.spawn(drive_quotas);
    // A controller deciding on a half-filled cache after a restart would
    // write churn: a binding whose Works are not listed yet would report
    // them missing, and the binding controller would create them again
    // only to be told they exist.
    futures::future::join_all(caches).await;
    for c in controllers {
        tasks.spawn(c);
    }
    info!("federation controllers started");
    tasks.join_next().await;
}
