//! The binding controller: one Work per target cluster, in the cluster's
//! execution namespace, holding the template as delivered there (its share
//! of replicas included). Works of clusters no longer targeted go, and
//! with them the members' copies.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::{
    Binding, Cluster, Scope, Work, WorkSpec, Workload, annotations, binding_resource, finalizers,
    labels,
};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::finalizer;
use crate::kinds::scoped_api;
use crate::packed::PackedStore;
use crate::queue::{self, Next, WorkQueue};
use crate::{interpreter, names};

/// Bindings whose Works are written at once.
const BINDING_SYNCS: usize = 32;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl futures::Stream<Item = Arc<Binding>> + Send + 'static,
) {
    let queue = WorkQueue::new();
    let state = Arc::new((ctx, Synced::default()));
    tokio::join!(
        queue::feed(queue.clone(), bindings.clone(), changes),
        queue::reconcile_packed(queue, bindings, BINDING_SYNCS, move |b| {
            reconcile(b, state.clone())
        }),
    );
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
    let r = &binding.spec.resource;
    ObjectRef::new(&names::work_name(&r.kind, &r.namespace, &r.name))
        .within(&Cluster::execution_namespace(cluster))
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

/// The generation each binding's Works were last written from.
type Synced = Mutex<HashMap<String, Option<i64>>>;

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
    let ours = works_of(ctx, binding, (id_key, &id));
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    if binding.metadata.deletion_timestamp.is_some() {
        synced.lock().remove(&uid);
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
    let targets: BTreeSet<String> = binding
        .spec
        .clusters
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let complete = ours.len() == targets.len() && ours.iter().all(|(c, _)| targets.contains(c));
    if complete && synced.lock().get(&uid) == Some(&binding.metadata.generation) {
        // The Works were written from this very spec.
        return Ok(None);
    }
    let started = Instant::now();
    let result = write_works(ctx, binding, &ours, &targets, (id_key, &id)).await;
    ctx.metrics
        .observe_binding_sync(result.is_ok(), started.elapsed());
    result?;
    synced.lock().insert(uid, binding.metadata.generation);
    Ok(None)
}

async fn write_works(
    ctx: &Ctx,
    binding: &Binding,
    ours: &[(String, Arc<Work>)],
    targets: &BTreeSet<String>,
    (id_key, id): (&str, &str),
) -> Result<(), Error> {
    let name = binding.name_any();
    for (cluster, w) in ours {
        if !targets.contains(cluster) {
            info!(binding = %name, %cluster, "no longer targeted; removing its Work");
            delete_work(ctx, w).await?;
        }
    }
    if targets.is_empty() {
        return Ok(());
    }
    let Some(template) = template(ctx, binding).await? else {
        // The template is gone; the garbage collector takes the binding.
        return Ok(());
    };
    let template = serde_json::to_value(&template)?;
    let mut base = interpreter::manifest(&template);
    if let Some(g) = template
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
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
    let suspension = spec.suspension.clone().unwrap_or_default();
    let suspended_everywhere = suspension.get("dispatching").and_then(Value::as_bool) == Some(true);
    let suspended_on: Vec<&str> = suspension
        .pointer("/dispatchingOnClusters/clusterNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for target in &spec.clusters {
        let mut manifest = base.clone();
        if let (Some(n), Some(total)) = (target.replicas, spec.replicas) {
            interpreter::revise_replicas(&mut manifest, &spec.resource.kind, n, total);
        }
        let suspend = suspended_everywhere || suspended_on.contains(&target.name.as_str());
        let desired = WorkSpec {
            workload: Workload::new(&[manifest])?,
            suspend_dispatching: suspend.then_some(true),
            preserve_resources_on_deletion: spec.preserve_resources_on_deletion,
        };
        write_work(ctx, binding, &target.name, desired, (id_key, id)).await?;
    }
    Ok(())
}

async fn write_work(
    ctx: &Ctx,
    binding: &Binding,
    cluster: &str,
    spec: WorkSpec,
    (id_key, id): (&str, &str),
) -> Result<(), Error> {
    let key = work_ref(binding, cluster);
    let namespace = key.namespace.clone().unwrap_or_default();
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &namespace);
    let existing = ctx.works.get(&key);
    let mut work = match &existing {
        Some(w) => (**w).clone(),
        None => Work::new(&key.name, spec.clone()),
    };
    work.metadata.namespace = Some(namespace.clone());
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
    match existing {
        None => {
            api.create(&PostParams::default(), &work).await?;
            debug!(work = %key.name, %cluster, "work created");
        }
        Some(old) => {
            if old.spec != work.spec
                || old.metadata.finalizers != work.metadata.finalizers
                || old.metadata.labels != work.metadata.labels
                || old.metadata.annotations != work.metadata.annotations
            {
                api.replace(&key.name, &PostParams::default(), &work)
                    .await?;
                debug!(work = %key.name, %cluster, "work updated");
            }
        }
    }
    Ok(())
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
