//! The binding controller: one Work per target cluster, in the cluster's
//! execution namespace, holding the template as delivered there (its share
//! of replicas included). Works of clusters no longer targeted go, and
//! with them the members' copies.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::{
    Binding, Cluster, ObjectReference, Scope, Work, WorkSpec, Workload, annotations,
    binding_resource, finalizers, labels,
};
use crate::conditions;
use crate::context::Ctx;
use crate::detector::matching::Template;
use crate::error::{Error, is_already_exists, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::finalizer;
use crate::kinds::scoped_api;
use crate::overrides::{self, Applied, OverrideError};
use crate::packed::{self, Key, PackedStore};
use crate::queue::{self, Next, WorkQueue};
use crate::recent::Recent;
use crate::{interpreter, names, templates};
use flotilla_client::events;

/// Bindings whose Works are written at once.
const BINDING_SYNCS: usize = 32;

/// Works of one binding written at once.
const WORK_WRITES: usize = 16;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl futures::Stream<Item = Key> + Send + 'static,
    works_removed: impl futures::Stream<Item = Key> + Send + 'static,
    overrides_changed: impl futures::Stream<Item = ()> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("binding-controller"));
    let state = Arc::new((ctx, Synced::new(CACHE_GRACE)));
    let removed_state = state.clone();
    // A Work gone from the cache is gone from the hub, not late: its
    // binding writes its Works again at once, without waiting out the
    // grace given to Works still on their way to the cache.
    let works_removed = works_removed.map(move |binding| {
        removed_state.1.forget(&binding);
        binding
    });
    tokio::join!(
        queue::feed(queue.clone(), works_removed),
        // A changed override policy: every binding's Works rendered again.
        queue::feed_all_on(queue.clone(), bindings.clone(), overrides_changed),
        queue::feed(queue.clone(), changes),
        queue::reconcile_packed(queue, bindings, BINDING_SYNCS, move |b| {
            reconcile(b, state.clone())
        }),
    );
}

/// The bindings (of `scope`) whose Work is gone from the hub: each is
/// written again at once, whoever deleted it (as Karmada's binding
/// controller, which watches Work deletions), while the binding stands.
pub fn works_removed(
    works: &Subscribers<Change<Work>>,
    store: PackedStore<Work>,
    scope: Scope,
) -> impl futures::Stream<Item = Key> + Send + 'static {
    works.subscribe(move |c: &Change<Work>| {
        if store.contains_key(&c.key) {
            return None;
        }
        crate::status::owner(&c.object, scope).map(Key::from)
    })
}

/// The label that ties Works to their binding, and its value.
pub fn binding_id(binding: &Binding) -> (&'static str, String) {
    let key = if binding.metadata.namespace.is_some() {
        labels::RB_ID
    } else {
        labels::CRB_ID
    };
    (key, binding.labels().get(key).cloned().unwrap_or_default())
}

pub fn binding_api(ctx: &Ctx, binding: &Binding) -> Api<Binding> {
    let ns = binding.metadata.namespace.as_deref();
    let scope = if ns.is_some() {
        Scope::Namespaced
    } else {
        Scope::Cluster
    };
    scoped_api(ctx.hub.clone(), ns, &binding_resource(scope))
}

/// The Work a binding has for `cluster`, where it lives.
pub fn work_ref(binding: &Binding, cluster: &str) -> ObjectRef<Work> {
    ObjectRef::new(&work_name(binding)).within(&Cluster::execution_namespace(cluster))
}

/// The Work cache's keys of a binding's Works, one per target cluster in
/// order (the Works' name worked out once).
pub fn work_keys(binding: &Binding) -> Vec<String> {
    let name = work_name(binding);
    binding
        .spec
        .clusters
        .iter()
        .map(|t| work_key(&name, &t.name))
        .collect()
}

/// The Work cache's key of the Work named `work_name` for `cluster`.
pub fn work_key(work_name: &str, cluster: &str) -> String {
    packed::key(Some(&Cluster::execution_namespace(cluster)), work_name)
}

/// The name of every Work of a binding (one per cluster's namespace).
pub fn work_name(binding: &Binding) -> String {
    let r = &binding.spec.resource;
    names::work_name(&r.kind, &r.namespace, &r.name)
}

/// The API of the template a binding refers to.
pub async fn template_api(ctx: &Ctx, binding: &Binding) -> Result<Api<DynamicObject>, Error> {
    let r = &binding.spec.resource;
    let (ar, namespaced) = ctx.hub_kinds.resolve(&r.api_version, &r.kind).await?;
    let ns = namespaced.then_some(r.namespace.as_str());
    Ok(scoped_api(ctx.hub.clone(), ns, &ar))
}

/// The template a binding refers to, as the hub serves it now.
pub async fn template(ctx: &Ctx, binding: &Binding) -> Result<Option<DynamicObject>, Error> {
    let api = template_api(ctx, binding).await?;
    Ok(api.get_opt(&binding.spec.resource.name).await?)
}

/// The binding (its uid), generation and override epoch each binding's
/// Works were last written at, by the binding's key in the cache.
type Synced = Recent<(String, Option<i64>, u64)>;

/// How long Works just written may take to reach the controller's cache
/// before their absence there means they are really gone. Without it a
/// binding's next event (its status, written as the first copies land)
/// finds the set incomplete and writes every Work again, each create of a
/// Work the hub already holds answering 409. A Work deleted is seen as
/// such (`works_removed` forgets its binding's write), so the grace only
/// bounds a cache that lags (10–12 s behind the writes in a burst of
/// 100,000 Works on 2 cores, when it was 5 s and a tenth of the Works
/// were created twice) or that missed a deletion while it listed again.
const CACHE_GRACE: Duration = Duration::from_secs(120);

/// How soon Works rendered from a template other than the binding's (the
/// detector's update of the binding not through yet) are rendered again.
const RENDER_AGAIN: Duration = Duration::from_millis(500);

async fn reconcile(binding: Arc<Binding>, state: Arc<(Ctx, Synced)>) -> Result<Next, Error> {
    let (ctx, synced) = (&state.0, &state.1);
    sync(&binding, ctx, synced).await
}

/// The Works this binding has now, found by name in every joined
/// cluster's execution namespace (Work names are deterministic), so a
/// sync costs the number of clusters, not the number of Works.
fn works_of(ctx: &Ctx, binding: &Binding, (id_key, id): (&str, &str)) -> Vec<(String, Arc<Work>)> {
    ctx.clusters
        .state()
        .iter()
        .filter_map(|c| {
            let name = c.name_any();
            let w = ctx.works.get(&work_ref(binding, &name))?;
            (!id.is_empty() && w.labels().get(id_key).map(String::as_str) == Some(id))
                .then_some((name, w))
        })
        .collect()
}

async fn sync(binding: &Binding, ctx: &Ctx, synced: &Synced) -> Result<Next, Error> {
    let (id_key, id) = binding_id(binding);
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    let key = packed::key_of(&binding.metadata).unwrap_or_default();
    if binding.metadata.deletion_timestamp.is_some() {
        synced.forget(&key);
        let ours = works_of(ctx, binding, (id_key, &id));
        for (_, w) in &ours {
            delete_work(ctx, w).await?;
        }
        if !ours.is_empty() {
            // Their finalizers clean the members first.
            return Ok(Some(Duration::from_millis(500)));
        }
        finalizer::remove(&binding_api(ctx, binding), binding, finalizers::BINDING).await?;
        return Ok(None);
    }
    let mut targets: BTreeSet<String> = binding
        .spec
        .clusters
        .iter()
        .map(|t| t.name.clone())
        .collect();
    // As Karmada's mergeTargetClusters: a dependency goes where the
    // bindings that require it go, whatever its own placement says.
    targets.extend(
        crate::dependencies::required_by(binding)
            .into_iter()
            .flat_map(|s| s.clusters.into_iter().map(|c| c.name)),
    );
    // Nothing is delivered to a cluster leaving the fleet: its Works are
    // being removed so that it can go (the scheduler drops it too).
    targets.retain(|c| !ctx.leaving(c));
    let epoch = ctx.overrides_epoch.load(Ordering::SeqCst);
    let stamp = (uid, binding.metadata.generation, epoch);
    if synced.wrote(&key, &stamp) {
        // The Works were written from this very spec and these overrides
        // (replacing any of another binding of the same name): done once
        // the cache holds each, which needs no Work decoded. A binding's
        // status changes as each of its Works reports, and each change
        // comes here.
        let cached = targets.iter().all(|c| {
            let r = work_ref(binding, c);
            ctx.works
                .contains_key(&packed::key(r.namespace.as_deref(), &r.name))
        });
        if cached {
            return Ok(None);
        }
        if let Some(left) = synced.wait(&key, &stamp) {
            return Ok(Some(left));
        }
    }
    let ours = works_of(ctx, binding, (id_key, &id));
    // Recorded before the writes: a Work deleted while they run forgets
    // it, rather than be waited for once they end.
    synced.record(&key, stamp);
    let started = Instant::now();
    let result = write_works(ctx, binding, &ours, &targets, (id_key, &id)).await;
    ctx.metrics
        .observe_binding_sync(result.is_ok(), started.elapsed());
    match result {
        Ok(true) => Ok(None),
        // Written from a template other than the binding's: rendered
        // again once the detector's cache and the binding agree.
        Ok(false) => {
            synced.forget(&key);
            Ok(Some(RENDER_AGAIN))
        }
        Err(error) => {
            synced.forget(&key);
            Err(error)
        }
    }
}

/// Writes the binding's Works; whether they were rendered from the very
/// template the binding was made from.
async fn write_works(
    ctx: &Ctx,
    binding: &Binding,
    ours: &[(String, Arc<Work>)],
    targets: &BTreeSet<String>,
    (id_key, id): (&str, &str),
) -> Result<bool, Error> {
    let name = binding.name_any();
    for (cluster, w) in ours {
        if targets.contains(cluster) {
            continue;
        }
        // A cluster being evicted keeps its Work until the eviction task
        // goes (the new placement is healthy, or the grace period ended),
        // unless the policy purges directly.
        let kept = binding
            .spec
            .evicting(cluster)
            .is_some_and(|t| !t.purges_directly());
        if kept {
            debug!(binding = %name, %cluster, "being evicted; its Work stays for now");
            continue;
        }
        info!(binding = %name, %cluster, "no longer targeted; removing its Work");
        delete_work(ctx, w).await?;
    }
    if targets.is_empty() {
        return Ok(true);
    }
    // The detector's cache holds the template the binding was made from,
    // unless it has moved on since (then the hub's is read, and the
    // detector's update of the binding follows).
    let (template, mut base, as_bound) = match ctx
        .templates
        .made_from(&binding.spec.resource, binding.annotations())
    {
        Some((template, manifest)) => (template, manifest, true),
        None => {
            let Some(template) = template(ctx, binding).await? else {
                // The template is gone; the garbage collector takes the binding.
                return Ok(true);
            };
            let manifest = interpreter::manifest(&serde_json::to_value(&template)?);
            // The hub's may be newer than the binding (an update the
            // detector has not brought to it yet) or, while a claim is in
            // flight, older.
            let as_bound = binding
                .annotations()
                .get(annotations::TEMPLATE_DIGEST)
                .is_none_or(|d| *d == templates::digest(&manifest));
            (Arc::new(template), manifest, as_bound)
        }
    };
    if let Some(g) = template.metadata.generation
        && let Some(meta) = base.get_mut("metadata").and_then(Value::as_object_mut)
    {
        let a = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = a.as_object_mut() {
            a.insert(
                annotations::TEMPLATE_GENERATION.into(),
                json!(g.to_string()),
            );
        }
    }
    let spec = &binding.spec;
    let labels = template.metadata.labels.clone().unwrap_or_default();
    let wants_data = crate::failover::hold::wants_data(&template);
    // Where the workload is leaving: its Works no longer targeted, and
    // the clusters it is evicted from.
    let leaving: Vec<String> = ours
        .iter()
        .map(|(c, _)| c.clone())
        .filter(|c| !targets.contains(c))
        .chain(
            binding
                .spec
                .graceful_eviction_tasks
                .iter()
                .map(|t| t.from_cluster.clone()),
        )
        .collect();
    let r = &spec.resource;
    let t = Template {
        api_version: &r.api_version,
        kind: &r.kind,
        namespace: (!r.namespace.is_empty()).then_some(r.namespace.as_str()),
        name: &r.name,
        labels: &labels,
    };
    let [policies, cluster_policies] = ctx.override_policies.each_ref().map(|s| s.state());
    // Rendered first, written after, several at once: a binding's sync
    // costs a few round trips, not one per cluster.
    let mut writes = Vec::new();
    for target in spec.clusters.iter().filter(|t| targets.contains(&t.name)) {
        let mut manifest = base.clone();
        if let (Some(n), Some(total)) = (target.replicas, spec.replicas) {
            interpreter::revise_replicas(&mut manifest, &spec.resource.kind, n, total);
        }
        // The state preserved from the cluster it failed over from.
        if let Some(labels) =
            crate::failover::decide::injected_labels(spec, &target.name, targets.len())
            && let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut)
        {
            let all = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(all) = all.as_object_mut() {
                for (k, v) in labels {
                    all.insert(k.clone(), json!(v));
                }
            }
        }
        let applied = match ctx.cluster(&target.name) {
            Some(cluster) => overrides::apply(
                &mut manifest,
                &t,
                &cluster,
                cluster_policies.iter().map(|p| &**p),
                policies.iter().map(|p| &**p),
            ),
            // Unjoined meanwhile: the scheduler takes it out of the binding.
            None => Ok(Applied::default()),
        };
        // A cluster the workload moves to waits for its data.
        let existing = ours
            .iter()
            .find(|(c, _)| *c == target.name)
            .map(|(_, w)| &**w);
        let awaiting = crate::failover::hold::awaiting_from(wants_data, existing, &leaving);
        let suspend = spec.dispatch_suspended_on(&target.name) || awaiting.is_some();
        let rendered = match applied {
            Ok(applied) => Ok((
                WorkSpec {
                    workload: Workload::new(&[manifest])?,
                    suspend_dispatching: suspend.then_some(true),
                    preserve_resources_on_deletion: spec.preserve_resources_on_deletion,
                },
                applied,
                awaiting,
            )),
            Err(error) => Err(error),
        };
        writes.push((target.name.clone(), rendered));
    }
    let name = name.as_str();
    let outcomes: Vec<Result<Option<String>, Error>> = futures::stream::iter(writes)
        .map(|(cluster, rendered)| async move {
            match rendered {
                Ok((desired, applied, awaiting)) => {
                    let work = write_work(
                        ctx,
                        binding,
                        &cluster,
                        desired,
                        (id_key, id),
                        (&applied, awaiting.as_deref()),
                    )
                    .await?;
                    // Tests of recovery stop here: some of the binding's
                    // Works written, others not yet.
                    flotilla_failpoint::hit("binding-after-work-write");
                    mark_work(ctx, Some(&work), None).await?;
                    Ok(None)
                }
                Err(error) => {
                    // The last good manifest stays delivered; nothing half
                    // overridden reaches the member.
                    warn!(binding = %name, %cluster, %error, "override cannot apply");
                    let work = ctx.works.get(&work_ref(binding, &cluster));
                    mark_work(ctx, work.as_deref(), Some(&error)).await?;
                    Ok(Some(format!("{cluster}: {error}")))
                }
            }
        })
        .buffered(WORK_WRITES)
        .collect()
        .await;
    let mut failed = Vec::new();
    for outcome in outcomes {
        failed.extend(outcome?);
    }
    mark_binding(ctx, binding, &failed).await?;
    Ok(as_bound)
}

/// The condition an override failure is reported under, on the Work of
/// the cluster it concerns and on the binding (Flotilla's own: Karmada
/// only records an Event). It is written once something failed, and
/// turns True again when the overrides apply.
const OVERRIDES_APPLIED: &str = "OverridesApplied";

/// Sets the Work's OverridesApplied condition: False with `error`; True
/// if it was False before. A Work not written yet has nothing to mark.
async fn mark_work(
    ctx: &Ctx,
    work: Option<&Work>,
    error: Option<&OverrideError>,
) -> Result<(), Error> {
    let Some(work) = work else {
        return Ok(());
    };
    let mut conditions = work
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if !set_overrides_condition(&mut conditions, error.map(ToString::to_string)) {
        return Ok(());
    }
    let patch = json!({
        "metadata": {"resourceVersion": work.resource_version()},
        "status": {"conditions": conditions},
    });
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &work.namespace().unwrap_or_default());
    crate::execution::patch_status(&api, work, patch).await
}

/// As [`mark_work`], on the binding, with every failed cluster named.
async fn mark_binding(ctx: &Ctx, binding: &Binding, failed: &[String]) -> Result<(), Error> {
    let mut conditions = binding
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let error = (!failed.is_empty()).then(|| failed.join("; "));
    if !set_overrides_condition(&mut conditions, error) {
        return Ok(());
    }
    let patch = json!({
        "metadata": {"resourceVersion": binding.resource_version()},
        "status": {"conditions": conditions},
    });
    binding_api(ctx, binding)
        .patch_status(
            &binding.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let (type_, reason, message) = match failed.is_empty() {
        false => ("Warning", "ApplyOverridePolicyFailed", failed.join("; ")),
        true => (
            "Normal",
            "ApplyOverridePolicySucceed",
            "Every override policy applied".to_string(),
        ),
    };
    record_event(ctx, &binding.spec.resource, type_, reason, &message).await;
    Ok(())
}

/// Records a core/v1 Event on the template, as Karmada's binding
/// controller does for overrides (here only when the outcome changes, not
/// on every sync).
async fn record_event(
    ctx: &Ctx,
    template: &ObjectReference,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let involved = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(template.api_version.clone()),
        kind: Some(template.kind.clone()),
        name: Some(template.name.clone()),
        namespace: (!template.namespace.is_empty()).then(|| template.namespace.clone()),
        uid: (!template.uid.is_empty()).then(|| template.uid.clone()),
        ..Default::default()
    };
    events::record(
        &ctx.hub,
        involved,
        "binding-controller",
        (type_, reason, message),
    )
    .await;
}

/// Whether the OverridesApplied condition changed.
fn set_overrides_condition(conditions: &mut Vec<Condition>, error: Option<String>) -> bool {
    match error {
        Some(message) => conditions::set(
            conditions,
            OVERRIDES_APPLIED,
            false,
            "OverrideFailed",
            &message,
        ),
        None if conditions.iter().any(|c| c.type_ == OVERRIDES_APPLIED) => conditions::set(
            conditions,
            OVERRIDES_APPLIED,
            true,
            "OverridesApplied",
            "Every override policy applied",
        ),
        None => false,
    }
}

/// Creates or updates the Work; returns it as the hub now holds it.
async fn write_work(
    ctx: &Ctx,
    binding: &Binding,
    cluster: &str,
    spec: WorkSpec,
    id: (&str, &str),
    (applied, awaiting): (&Applied, Option<&str>),
) -> Result<Arc<Work>, Error> {
    let key = work_ref(binding, cluster);
    let namespace = key.namespace.clone().unwrap_or_default();
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &namespace);
    let old = match ctx.works.get(&key) {
        Some(old) => old,
        None => {
            let mut work = Work::new(&key.name, spec.clone());
            work.metadata.namespace = Some(namespace.clone());
            desire(&mut work, binding, spec.clone(), id, (applied, awaiting));
            match crate::writes::create(&api, &work).await {
                Ok(created) => {
                    debug!(work = %key.name, %cluster, "work created");
                    return Ok(Arc::new(created));
                }
                // Written by an earlier sync, not in the cache yet: update
                // what the hub holds rather than fail and write them all again.
                Err(e) if is_already_exists(&e) => Arc::new(api.get(&key.name).await?),
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut work = (*old).clone();
    desire(&mut work, binding, spec, id, (applied, awaiting));
    if old.spec != work.spec
        || old.metadata.finalizers != work.metadata.finalizers
        || old.metadata.labels != work.metadata.labels
        || old.metadata.annotations != work.metadata.annotations
    {
        let replaced = api
            .replace(&key.name, &PostParams::default(), &work)
            .await?;
        debug!(work = %key.name, %cluster, "work updated");
        return Ok(Arc::new(replaced));
    }
    Ok(old)
}

/// Sets what the binding controller owns on a Work: its spec, the
/// execution finalizer, the labels and annotations tying it to the
/// binding, and the overrides applied.
fn desire(
    work: &mut Work,
    binding: &Binding,
    spec: WorkSpec,
    (id_key, id): (&str, &str),
    (applied, awaiting): (&Applied, Option<&str>),
) {
    work.spec = spec;
    // The execution controller's finalizer from the start: one write less,
    // and no window in which a Work could go without cleaning its member.
    let f = work.metadata.finalizers.get_or_insert_default();
    if !f.iter().any(|f| f == finalizers::EXECUTION) {
        f.push(finalizers::EXECUTION.into());
    }
    let l = work.metadata.labels.get_or_insert_default();
    l.insert(id_key.into(), id.into());
    if !l.contains_key(labels::WORK_ID) {
        l.insert(labels::WORK_ID.into(), uuid::Uuid::new_v4().to_string());
    }
    let a = work.metadata.annotations.get_or_insert_default();
    match &binding.metadata.namespace {
        Some(ns) => {
            a.insert(annotations::RB_NAME.into(), binding.name_any());
            a.insert(annotations::RB_NAMESPACE.into(), ns.clone());
        }
        None => {
            a.insert(annotations::CRB_NAME.into(), binding.name_any());
        }
    }
    let conflict = match binding.spec.conflict_resolution.as_deref() {
        Some(c) if c.eq_ignore_ascii_case("overwrite") => "overwrite",
        _ => "abort",
    };
    a.insert(annotations::CONFLICT_RESOLUTION.into(), conflict.into());
    match awaiting {
        Some(from) => a.insert(
            crate::failover::hold::AWAITING_ANNOTATION.into(),
            from.into(),
        ),
        None => a.remove(crate::failover::hold::AWAITING_ANNOTATION),
    };
    for (annotation, entries) in [
        (annotations::APPLIED_OVERRIDES, &applied.policies),
        (
            annotations::APPLIED_CLUSTER_OVERRIDES,
            &applied.cluster_policies,
        ),
    ] {
        if entries.is_empty() {
            a.remove(annotation);
        } else {
            a.insert(annotation.into(), Value::from(entries.clone()).to_string());
        }
    }
}

async fn delete_work(ctx: &Ctx, work: &Work) -> Result<(), Error> {
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &work.namespace().unwrap_or_default());
    match api.delete(&work.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
