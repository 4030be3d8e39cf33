//! The detector: finds every propagatable type the hub serves (built-ins
//! and CRDs, rediscovered as CRDs come and go), matches each template to a
//! policy, claims it, and keeps its ResourceBinding or
//! ClusterResourceBinding up to date.

pub mod matching;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, verbs};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::api::{
    Binding, BindingSpec, EXECUTION_PREFIX, ObjectReference, Policy, Scope, annotations,
    binding_resource, finalizers, labels, policy_resource,
};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{PackedFanout, lean_watch};
use crate::interpreter;
use crate::kinds::scoped_api;
use crate::names;
use crate::packed::{self, PackedStore};
use crate::queue::{self, Next, WorkQueue};
use crate::recent::Recent;
use crate::templates;
use matching::Template;

/// How often the hub's types are rediscovered (Karmada: 30 s); a CRD
/// change triggers a rediscovery at once.
const REDISCOVER: Duration = Duration::from_secs(30);

/// Groups whose objects are the federation's own, never templates.
const SKIPPED_GROUPS: &[&str] = &[
    "cluster.karmada.io",
    "policy.karmada.io",
    "work.karmada.io",
    "config.karmada.io",
    "search.karmada.io",
    "apps.karmada.io",
    "autoscaling.karmada.io",
    "networking.karmada.io",
    "remedy.karmada.io",
    "coordination.k8s.io",
    "events.k8s.io",
    "discovery.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "apiregistration.k8s.io",
];

/// Core types that belong to a cluster, not to an application.
const SKIPPED_CORE: &[&str] = &[
    "Event",
    "Node",
    "Endpoints",
    "ComponentStatus",
    "Binding",
    "ReplicationController",
];

/// Namespaces whose objects are never propagated: Kubernetes' own
/// (`kube-*`, as Karmada's default `--skipped-propagating-namespaces`)
/// and the federation's.
pub fn skipped_namespace(ns: &str) -> bool {
    ns.starts_with("kube-")
        || ns.starts_with(EXECUTION_PREFIX)
        || ns == "karmada-system"
        || ns == crate::api::CLUSTER_NAMESPACE
}

/// What every cluster makes for itself (the `default` ServiceAccount and
/// the `kube-root-ca.crt` ConfigMap with its own CA in each namespace, the
/// `default/kubernetes` Service in front of its API server): never a
/// template, or one cluster's CA or address would overwrite another's.
fn cluster_default(kind: &str, namespace: Option<&str>, name: &str) -> bool {
    matches!(
        (kind, name),
        ("ServiceAccount", "default") | ("ConfigMap", "kube-root-ca.crt")
    ) || (kind, namespace, name) == ("Service", Some("default"), "kubernetes")
}

struct Policies {
    propagation: Store<Policy>,
    cluster: Store<Policy>,
}

struct TypeCtx {
    shared: Ctx,
    ar: ApiResource,
    policies: Arc<Policies>,
    bindings: [PackedStore<Binding>; 2],
    /// Bindings created (by key, with their template's uid) that the
    /// binding cache may not show yet: the claim's own event follows the
    /// create at once, and would otherwise create the binding again.
    created: Recent<String>,
}

/// How long a created binding may take to reach the binding cache.
const CACHE_GRACE: Duration = Duration::from_secs(5);

/// Runs the detector until the process ends.
pub async fn run(ctx: Ctx, bindings: [PackedStore<Binding>; 2]) {
    let (changed, _) = broadcast::channel::<()>(64);
    let policies = Arc::new(Policies {
        propagation: watch_policies(&ctx, Scope::Namespaced, changed.clone()),
        cluster: watch_policies(&ctx, Scope::Cluster, changed.clone()),
    });
    // A template judged before the policies are listed would lose its
    // claim (after a restart, every template would be released and claimed
    // again). An error means the watch is gone, with the process.
    let _ = policies.propagation.wait_until_ready().await;
    let _ = policies.cluster.wait_until_ready().await;
    // CRDs coming and going trigger a rediscovery.
    let (rediscover_tx, mut rediscover) = tokio::sync::mpsc::channel::<()>(1);
    let crds = Api::<CustomResourceDefinition>::all(ctx.hub.clone());
    tokio::spawn(async move {
        let mut events = watcher(crds, watcher::Config::default())
            .default_backoff()
            .boxed();
        while events.next().await.is_some() {
            let _ = rediscover_tx.try_send(());
        }
    });
    let mut running: HashMap<GroupVersionKind, JoinHandle<()>> = HashMap::new();
    loop {
        match propagatable(&ctx).await {
            Ok(types) => {
                let wanted: HashMap<GroupVersionKind, ApiResource> = types
                    .into_iter()
                    .map(|ar| (GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind), ar))
                    .collect();
                running.retain(|gvk, task| {
                    let keep = wanted.contains_key(gvk);
                    if !keep {
                        info!(kind = %gvk.kind, "no longer served; stopped watching");
                        task.abort();
                        ctx.templates.unregister(&gvk.api_version(), &gvk.kind);
                    }
                    keep
                });
                for (gvk, ar) in wanted {
                    if running.contains_key(&gvk) {
                        continue;
                    }
                    debug!(group = %gvk.group, kind = %gvk.kind, "watching templates");
                    let tctx = Arc::new(TypeCtx {
                        shared: ctx.clone(),
                        ar,
                        policies: policies.clone(),
                        bindings: bindings.clone(),
                        created: Recent::expiring(CACHE_GRACE),
                    });
                    running.insert(
                        gvk,
                        tokio::spawn(watch_templates(tctx, changed.subscribe())),
                    );
                }
            }
            Err(error) => warn!(%error, "discovery of the hub's types failed"),
        }
        // Let a burst of CRD events settle into one rediscovery.
        let _ = tokio::time::timeout(REDISCOVER, rediscover.recv()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        while rediscover.try_recv().is_ok() {}
        ctx.hub_kinds.forget();
    }
}

/// Every type the hub serves that can be listed, watched and created,
/// at its preferred version, except the federation's and the cluster's own.
async fn propagatable(ctx: &Ctx) -> Result<Vec<ApiResource>, kube::Error> {
    let discovery = Discovery::new(ctx.hub.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        if SKIPPED_GROUPS.contains(&group.name()) {
            continue;
        }
        for (ar, caps) in group.recommended_resources() {
            let ok = [verbs::LIST, verbs::WATCH, verbs::CREATE]
                .iter()
                .all(|v| caps.supports_operation(v));
            let skipped = ar.group.is_empty() && SKIPPED_CORE.contains(&ar.kind.as_str());
            if ok && !skipped && !ar.plural.contains('/') {
                out.push(ar);
            }
        }
    }
    Ok(out)
}

/// A reflector over one policy kind. Each change re-evaluates every
/// template, and a policy gets its permanent-id label (its uid) if it has
/// none, as Karmada labels policies.
fn watch_policies(ctx: &Ctx, scope: Scope, changed: broadcast::Sender<()>) -> Store<Policy> {
    let ar = policy_resource(scope);
    let api = Api::<Policy>::all_with(ctx.hub.clone(), &ar);
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let hub = ctx.hub.clone();
    let stream = reflector::reflector(writer, lean_watch(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let _ = changed.send(());
            let Ok(policy) = event else { continue };
            let key = id_label(scope);
            if policy.labels().contains_key(key) {
                continue;
            }
            let uid = policy.metadata.uid.clone().unwrap_or_default();
            let api: Api<Policy> =
                scoped_api(hub.clone(), policy.metadata.namespace.as_deref(), &ar);
            let patch = json!({"metadata": {"labels": {key: uid}}});
            if let Err(error) = api
                .patch(
                    &policy.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                warn!(%error, policy = %policy.name_any(), "cannot label policy");
            }
        }
    });
    reader
}

fn id_label(scope: Scope) -> &'static str {
    match scope {
        Scope::Namespaced => labels::PP_ID,
        Scope::Cluster => labels::CPP_ID,
    }
}

fn permanent_id(policy: &Policy, scope: Scope) -> String {
    policy
        .labels()
        .get(id_label(scope))
        .cloned()
        .or_else(|| policy.metadata.uid.clone())
        .unwrap_or_default()
}

/// Templates of one type are judged at most this many at once (kube-runtime's
/// `Controller` has no bound; each judgement is a few writes to the hub).
const TEMPLATE_SYNCS: usize = 32;

/// Templates are held packed: every object of every propagatable type
/// is one (10,000 ConfigMaps cost 60 MB as parsed objects).
async fn watch_templates(tctx: Arc<TypeCtx>, policies_changed: broadcast::Receiver<()>) {
    let api = Api::<DynamicObject>::all_with(tctx.shared.hub.clone(), &tctx.ar);
    let (templates, drive) = PackedFanout::new(api);
    let (api_version, kind) = (&tctx.ar.api_version, &tctx.ar.kind);
    tctx.shared
        .templates
        .register(api_version, kind, templates.store.clone());
    let queue = WorkQueue::named(tctx.shared.metrics.queue("resource-detector"));
    let every_template_on_policy_change = {
        let (queue, store) = (queue.clone(), templates.store.clone());
        async move {
            let mut changed = std::pin::pin!(tokio_stream::wrappers::BroadcastStream::new(
                policies_changed
            ));
            while changed.next().await.is_some() {
                queue.add_all(store.keys());
            }
        }
    };
    tokio::join!(
        drive,
        queue::feed(queue.clone(), templates.changes.keys()),
        every_template_on_policy_change,
        queue::reconcile_packed(queue, templates.store.clone(), TEMPLATE_SYNCS, move |obj| {
            reconcile(obj, tctx.clone())
        }),
    );
}

async fn reconcile(obj: Arc<DynamicObject>, tctx: Arc<TypeCtx>) -> Result<Next, Error> {
    let namespace = obj.metadata.namespace.as_deref();
    if namespace.is_some_and(skipped_namespace)
        || obj.metadata.deletion_timestamp.is_some()
        || cluster_default(&tctx.ar.kind, namespace, &obj.name_any())
    {
        return Ok(None);
    }
    let started = Instant::now();
    let no_labels = BTreeMap::new();
    let name = obj.name_any();
    let t = Template {
        api_version: &tctx.ar.api_version,
        kind: &tctx.ar.kind,
        namespace,
        name: &name,
        labels: obj.metadata.labels.as_ref().unwrap_or(&no_labels),
    };
    let chosen = choose(&tctx.policies, &obj, &t);
    tctx.shared.metrics.observe_match(started.elapsed());
    let api: Api<DynamicObject> = scoped_api(tctx.shared.hub.clone(), namespace, &tctx.ar);
    let Some((policy, scope)) = chosen else {
        // No policy (any more): drop the claim. The binding and the
        // members' copies stay: deleting a policy orphans, never deletes.
        if claimed_by(&obj).is_some() {
            let patch = json!({"metadata": {
                "labels": {labels::PP_ID: null, labels::CPP_ID: null},
                "annotations": {annotations::PP_NAME: null, annotations::PP_NAMESPACE: null,
                                annotations::CPP_NAME: null, annotations::APPLIED_PLACEMENT: null},
            }});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            info!(template = %name, kind = %tctx.ar.kind, "policy gone; claim removed");
        }
        return Ok(None);
    };
    // The binding is built from the template as claimed, so the claim's
    // own write does not count as a change of the template.
    let claimed = claim(&api, &obj, &policy, scope).await?;
    ensure_binding(&tctx, claimed.as_ref().unwrap_or(&obj), &policy, scope).await
}

/// The policy that claimed this template, if any: (scope, permanent id).
fn claimed_by(obj: &DynamicObject) -> Option<(Scope, String)> {
    let l = obj.labels();
    l.get(labels::PP_ID)
        .map(|id| (Scope::Namespaced, id.clone()))
        .or_else(|| l.get(labels::CPP_ID).map(|id| (Scope::Cluster, id.clone())))
}

/// A claimed template stays with its policy while that policy exists and
/// still selects it; otherwise Karmada's order picks one.
fn choose(policies: &Policies, obj: &DynamicObject, t: &Template) -> Option<(Policy, Scope)> {
    if let Some((scope, id)) = claimed_by(obj) {
        let store = match scope {
            Scope::Namespaced => &policies.propagation,
            Scope::Cluster => &policies.cluster,
        };
        let current = store.state().into_iter().find(|p| {
            permanent_id(p, scope) == id
                && (scope == Scope::Cluster || p.metadata.namespace.as_deref() == t.namespace)
        });
        if let Some(p) = current
            && matching::policy_matches(&p, t).is_some()
        {
            return Some(((*p).clone(), scope));
        }
    }
    let pps = policies.propagation.state();
    let cpps = policies.cluster.state();
    matching::choose(pps.iter().map(|p| &**p), cpps.iter().map(|p| &**p), t).map(
        |(p, namespaced)| {
            (
                p.clone(),
                if namespaced {
                    Scope::Namespaced
                } else {
                    Scope::Cluster
                },
            )
        },
    )
}

/// Writes the claim `policy` makes on the template (its labels and
/// annotations); the template as claimed, `None` when it already carried
/// the claim.
async fn claim(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    policy: &Policy,
    scope: Scope,
) -> Result<Option<DynamicObject>, Error> {
    let id = permanent_id(policy, scope);
    let placement = serde_json::to_string(&policy.spec.placement)?;
    let policy_name = policy.name_any();
    let (labels_patch, annotations_patch) = match scope {
        Scope::Namespaced => (
            json!({labels::PP_ID: id, labels::CPP_ID: null}),
            json!({annotations::PP_NAME: policy_name, annotations::PP_NAMESPACE: policy.metadata.namespace,
                   annotations::CPP_NAME: null, annotations::APPLIED_PLACEMENT: placement}),
        ),
        Scope::Cluster => (
            json!({labels::CPP_ID: id, labels::PP_ID: null}),
            json!({annotations::CPP_NAME: policy_name, annotations::PP_NAME: null,
                   annotations::PP_NAMESPACE: null, annotations::APPLIED_PLACEMENT: placement}),
        ),
    };
    let current_labels = obj.labels();
    let current_annotations = obj.annotations();
    let up_to_date = |patch: &Value, current: &BTreeMap<String, String>| {
        patch
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| match v.as_str() {
                Some(v) => current.get(k).map(String::as_str) == Some(v),
                None => !current.contains_key(k),
            })
    };
    if up_to_date(&labels_patch, current_labels)
        && up_to_date(&annotations_patch, current_annotations)
    {
        return Ok(None);
    }
    let patch = json!({"metadata": {"labels": labels_patch, "annotations": annotations_patch}});
    let claimed = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    debug!(template = %obj.name_any(), policy = %policy_name, "claimed");
    Ok(Some(claimed))
}

async fn ensure_binding(
    tctx: &TypeCtx,
    obj: &DynamicObject,
    policy: &Policy,
    scope: Scope,
) -> Result<Next, Error> {
    let hub = &tctx.shared.hub;
    let ar = &tctx.ar;
    let namespace = obj.metadata.namespace.clone();
    let binding_scope = if namespace.is_some() {
        Scope::Namespaced
    } else {
        Scope::Cluster
    };
    let bar = binding_resource(binding_scope);
    let name = names::binding_name(&ar.kind, &obj.name_any());
    let api: Api<Binding> = scoped_api(hub.clone(), namespace.as_deref(), &bar);
    let store = &tctx.bindings[match binding_scope {
        Scope::Namespaced => 0,
        Scope::Cluster => 1,
    }];
    let key = match &namespace {
        Some(ns) => ObjectRef::new_with(&name, bar.clone()).within(ns),
        None => ObjectRef::new_with(&name, bar.clone()),
    };
    let existing = store.get(&key);
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let created_key = packed::key(namespace.as_deref(), &name);
    if existing.is_some() {
        tctx.created.forget(&created_key);
    } else if let Some(left) = tctx.created.wait(&created_key, &uid) {
        return Ok(Some(left));
    }
    if existing
        .as_ref()
        .is_some_and(|b| b.metadata.deletion_timestamp.is_some())
    {
        // The previous template's binding is still being torn down.
        return Ok(Some(Duration::from_secs(1)));
    }
    let template = serde_json::to_value(obj)?;
    let manifest = interpreter::manifest(&template);
    let digest = templates::digest(&manifest);
    let unchanged_template = existing.as_ref().is_some_and(|b| {
        b.annotations().get(annotations::TEMPLATE_DIGEST) == Some(&digest)
            && b.spec.resource.uid == uid
    });
    let resource_version = match (&existing, unchanged_template) {
        (Some(b), true) => b.spec.resource.resource_version.clone(),
        _ => obj.metadata.resource_version.clone().unwrap_or_default(),
    };
    let replicas = interpreter::replicas(&ar.api_version, &ar.kind, &template);
    let conflict = obj
        .annotations()
        .get(annotations::CONFLICT_RESOLUTION)
        .cloned()
        .or_else(|| policy.spec.conflict_resolution.clone());
    let spec = BindingSpec {
        resource: ObjectReference {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            namespace: namespace.clone().unwrap_or_default(),
            name: obj.name_any(),
            uid: uid.clone(),
            resource_version,
        },
        replicas: replicas.as_ref().map(|(n, _)| *n),
        replica_requirements: replicas.and_then(|(_, r)| r),
        clusters: existing
            .as_ref()
            .map(|b| b.spec.clusters.clone())
            .unwrap_or_default(),
        placement: Some(policy.spec.placement.clone()),
        conflict_resolution: conflict,
        propagate_deps: policy.spec.propagate_deps,
        failover: policy.spec.failover.clone(),
        suspension: policy.spec.suspension.clone(),
        preserve_resources_on_deletion: policy.spec.preserve_resources_on_deletion,
        scheduler_name: policy.spec.scheduler_name.clone(),
        // Other controllers' fields: kept as they are.
        graceful_eviction_tasks: existing
            .as_ref()
            .map(|b| b.spec.graceful_eviction_tasks.clone())
            .unwrap_or_default(),
        reschedule_triggered_at: existing
            .as_ref()
            .and_then(|b| b.spec.reschedule_triggered_at.clone()),
        extra: existing
            .as_ref()
            .map(|b| b.spec.extra.clone())
            .unwrap_or_default(),
    };
    let binding_id_label = match binding_scope {
        Scope::Namespaced => labels::RB_ID,
        Scope::Cluster => labels::CRB_ID,
    };
    let binding_id = existing
        .as_ref()
        .and_then(|b| b.labels().get(binding_id_label).cloned())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut desired: Binding = match &existing {
        Some(b) => (**b).clone(),
        None => Binding::new(&name, &bar, spec.clone()),
    };
    desired.metadata.namespace = namespace.clone();
    desired.spec = spec;
    let l = desired.metadata.labels.get_or_insert_default();
    l.remove(labels::PP_ID);
    l.remove(labels::CPP_ID);
    l.insert(id_label(scope).into(), permanent_id(policy, scope));
    l.insert(binding_id_label.into(), binding_id);
    let a = desired.metadata.annotations.get_or_insert_default();
    for k in [
        annotations::PP_NAME,
        annotations::PP_NAMESPACE,
        annotations::CPP_NAME,
    ] {
        a.remove(k);
    }
    match scope {
        Scope::Namespaced => {
            a.insert(annotations::PP_NAME.into(), policy.name_any());
            a.insert(
                annotations::PP_NAMESPACE.into(),
                policy.metadata.namespace.clone().unwrap_or_default(),
            );
        }
        Scope::Cluster => {
            a.insert(annotations::CPP_NAME.into(), policy.name_any());
        }
    }
    a.insert(annotations::TEMPLATE_DIGEST.into(), digest);
    desired.metadata.owner_references = Some(vec![OwnerReference {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        name: obj.name_any(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let f = desired.metadata.finalizers.get_or_insert_default();
    if !f.iter().any(|f| f == finalizers::BINDING) {
        f.push(finalizers::BINDING.into());
    }
    match existing {
        None => match api.create(&PostParams::default(), &desired).await {
            Ok(_) => {
                tctx.created.record(&created_key, uid);
                info!(binding = %name, kind = %ar.kind, "binding created");
            }
            Err(e) if crate::error::is_conflict(&e) => {
                return Ok(Some(Duration::from_millis(200)));
            }
            Err(e) => return Err(e.into()),
        },
        Some(b) => {
            let same = b.spec == desired.spec
                && b.metadata.labels == desired.metadata.labels
                && b.metadata.annotations == desired.metadata.annotations
                && b.metadata.owner_references == desired.metadata.owner_references
                && b.metadata.finalizers == desired.metadata.finalizers;
            if !same {
                match api.replace(&name, &PostParams::default(), &desired).await {
                    Ok(_) => debug!(binding = %name, "binding updated"),
                    Err(e) if is_not_found(&e) => {
                        return Ok(Some(Duration::from_millis(200)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(None)
}
