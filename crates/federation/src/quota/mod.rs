//! FederatedResourceQuota, as Karmada: the scheduler enforces
//! `spec.overall` and `spec.staticAssignments` (see
//! `scheduler::tenancy`); this controller keeps the rest:
//!
//! - each statically assigned cluster gets a ResourceQuota named after
//!   the quota, in the quota's namespace, with that cluster's `hard`,
//!   through a Work in the cluster's execution namespace (Karmada's
//!   sync controller; the member's own quota admission then holds it);
//! - `status.overall` is `spec.overall`, `status.overallUsed` what the
//!   namespace's scheduled bindings take, and `status.aggregatedStatus`
//!   each member's ResourceQuota status, as the Works report it.
//!
//! A quota is looked at again when it changes, when a binding of its
//! namespace changes, and when one of its Works reports.

pub mod api;
pub mod usage;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::{Binding, Cluster, Work, WorkSpec, Workload, finalizers, labels};
use crate::context::{Ctx, report};
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::names;
use crate::packed::{self, PackedStore};
use crate::queue::WorkQueue;
use api::{
    ClusterQuotaStatus, FederatedResourceQuota, FederatedResourceQuotaStatus, NAME_LABEL,
    NAMESPACE_LABEL, ResourceList,
};
use usage::Charge;

/// Quotas looked at once; they are few.
const QUOTA_SYNCS: usize = 2;
/// Binding changes come in bursts: one look at their quotas after them.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The Work carrying a quota's ResourceQuota in each assigned cluster.
pub fn work_name(namespace: &str, name: &str) -> String {
    names::work_name("ResourceQuota", namespace, name)
}

/// The quota keys (`namespace/name`) a Work of a quota belongs to.
pub fn work_owners(
    works: &Subscribers<Change<Work>>,
) -> impl Stream<Item = String> + Send + 'static {
    works.subscribe(|c: &Change<Work>| {
        let l = c.object.labels();
        Some(packed::key(
            Some(l.get(NAMESPACE_LABEL)?),
            l.get(NAME_LABEL)?,
        ))
    })
}

/// What each namespaced binding of `bindings` counts against: every
/// quota of its namespace.
pub async fn run(
    ctx: Ctx,
    quotas: Store<FederatedResourceQuota>,
    bindings: PackedStore<Binding>,
    quota_changes: impl Stream<Item = Arc<FederatedResourceQuota>> + Send + 'static,
    binding_changes: impl Stream<Item = packed::Key> + Send + 'static,
    work_owners: impl Stream<Item = String> + Send + 'static,
) {
    let queue: Arc<WorkQueue<String>> =
        WorkQueue::named(ctx.metrics.queue("federated-resource-quota"));
    let of_namespace = {
        let quotas = quotas.clone();
        move |ns: &str| -> Vec<String> {
            quotas
                .state()
                .iter()
                .filter(|q| q.namespace().as_deref() == Some(ns))
                .map(|q| packed::key(Some(ns), &q.name_any()))
                .collect()
        }
    };
    let keys = futures::stream::select_all([
        quota_changes
            .map(|q| vec![packed::key(q.namespace().as_deref(), &q.name_any())])
            .boxed(),
        binding_changes
            .map(move |k| {
                let ns = k.split_once('/').map_or("", |(ns, _)| ns).to_string();
                of_namespace(&ns)
            })
            .boxed(),
        work_owners.map(|k| vec![k]).boxed(),
    ]);
    let gather = {
        let queue = queue.clone();
        async move {
            let mut keys = std::pin::pin!(keys);
            while let Some(keys) = keys.next().await {
                for key in keys {
                    queue.add_after(key, DEBOUNCE);
                }
            }
        }
    };
    let again = queue.clone();
    let work = queue.run(QUOTA_SYNCS, move |key: String| {
        let (ctx, quotas, bindings, again) =
            (ctx.clone(), quotas.clone(), bindings.clone(), again.clone());
        async move {
            if let Err(error) = reconcile(&ctx, &quotas, &bindings, &key).await {
                report(&error);
                again.retry_after(key, error.retry_after());
            }
        }
    });
    tokio::join!(gather, work);
}

async fn reconcile(
    ctx: &Ctx,
    quotas: &Store<FederatedResourceQuota>,
    bindings: &PackedStore<Binding>,
    key: &str,
) -> Result<(), Error> {
    let Some((ns, name)) = key.split_once('/') else {
        return Ok(());
    };
    let quota = quotas.get(&ObjectRef::new(name).within(ns));
    let assigned: Vec<String> = quota
        .iter()
        .filter(|q| q.metadata.deletion_timestamp.is_none())
        .flat_map(|q| q.spec.static_assignments.iter())
        .map(|a| a.cluster_name.clone())
        .collect();
    // Works of clusters no longer assigned (or of a quota gone) go.
    let work_name = work_name(ns, name);
    for c in ctx.clusters.state() {
        let cluster = c.name_any();
        if assigned.contains(&cluster) {
            continue;
        }
        let exec = Cluster::execution_namespace(&cluster);
        if let Some(w) = ctx.works.get(&ObjectRef::new(&work_name).within(&exec))
            && w.metadata.deletion_timestamp.is_none()
        {
            let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &exec);
            match api.delete(&work_name, &DeleteParams::default()).await {
                Ok(_) => info!(quota = %key, %cluster, "quota's ResourceQuota withdrawn"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let Some(quota) = quota else {
        return Ok(());
    };
    for a in &quota.spec.static_assignments {
        if ctx.cluster(&a.cluster_name).is_some() {
            write_work(ctx, &quota, &a.cluster_name, &a.hard).await?;
        }
    }
    let used = usage::total(
        bindings
            .in_namespace(ns)
            .iter()
            .map(|b| Charge::of(&b.spec.clusters, b.spec.replica_requirements.as_ref()))
            .collect::<Vec<_>>()
            .iter(),
    );
    let status = FederatedResourceQuotaStatus {
        overall: quota.spec.overall.clone(),
        overall_used: usage::as_list(&quota.spec.overall, &used),
        aggregated_status: quota
            .spec
            .static_assignments
            .iter()
            .filter_map(|a| member_status(ctx, &work_name, &a.cluster_name))
            .collect(),
    };
    let old = quota.status.clone().unwrap_or_default();
    if old == status {
        return Ok(());
    }
    let mut patch = serde_json::to_value(&status)?;
    // A merge patch keeps keys it does not name: removed ones are nulled.
    for (field, before) in [
        ("overall", &old.overall),
        ("overallUsed", &old.overall_used),
    ] {
        let after = patch
            .as_object_mut()
            .map(|p| p.entry(field).or_insert_with(|| json!({})));
        if let Some(Value::Object(after)) = after {
            for k in before.keys() {
                after.entry(k.clone()).or_insert(Value::Null);
            }
        }
    }
    if status.aggregated_status.is_empty() {
        patch["aggregatedStatus"] = Value::Null;
    }
    debug!(quota = %key, used = ?status.overall_used, "quota status");
    let api: Api<FederatedResourceQuota> = Api::namespaced(ctx.hub.clone(), ns);
    match crate::writes::merge_patch_status(&api, name, &json!({ "status": patch })).await {
        Err(e) if is_not_found(&e) => Ok(()),
        other => Ok(other?),
    }
}

/// A member's ResourceQuota status, as its Work reports it.
fn member_status(ctx: &Ctx, work_name: &str, cluster: &str) -> Option<ClusterQuotaStatus> {
    let exec = Cluster::execution_namespace(cluster);
    let work = ctx.works.get(&ObjectRef::new(work_name).within(&exec))?;
    let status = work
        .status
        .as_ref()?
        .manifest_statuses
        .first()?
        .status
        .clone()?;
    let list = |field: &str| -> ResourceList {
        status
            .get(field)
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    };
    Some(ClusterQuotaStatus {
        cluster_name: cluster.to_string(),
        hard: list("hard"),
        used: list("used"),
    })
}

/// Creates or updates the Work of `quota`'s ResourceQuota in `cluster`.
async fn write_work(
    ctx: &Ctx,
    quota: &FederatedResourceQuota,
    cluster: &str,
    hard: &ResourceList,
) -> Result<(), Error> {
    let (ns, name) = (quota.namespace().unwrap_or_default(), quota.name_any());
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": hard},
    });
    let spec = WorkSpec {
        workload: Workload::new(&[manifest])?,
        suspend_dispatching: None,
        preserve_resources_on_deletion: None,
    };
    let exec = Cluster::execution_namespace(cluster);
    let work_name = work_name(&ns, &name);
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &exec);
    let existing = ctx.works.get(&ObjectRef::new(&work_name).within(&exec));
    let mut work = match &existing {
        Some(w) if w.spec == spec => return Ok(()),
        Some(w) => (**w).clone(),
        None => Work::new(&work_name, spec.clone()),
    };
    work.metadata.namespace = Some(exec.clone());
    work.spec = spec;
    let l = work.metadata.labels.get_or_insert_default();
    l.insert(NAMESPACE_LABEL.into(), ns.clone());
    l.insert(NAME_LABEL.into(), name.clone());
    if !l.contains_key(labels::WORK_ID) {
        l.insert(labels::WORK_ID.into(), uuid::Uuid::new_v4().to_string());
    }
    let f = work.metadata.finalizers.get_or_insert_default();
    if !f.iter().any(|f| f == finalizers::EXECUTION) {
        f.push(finalizers::EXECUTION.into());
    }
    if existing.is_some() {
        api.replace(&work_name, &PostParams::default(), &work)
            .await?;
    } else {
        match api.create(&PostParams::default(), &work).await {
            Err(e) if crate::error::is_conflict(&e) => {}
            other => {
                other?;
            }
        }
    }
    info!(%cluster, quota = %format!("{ns}/{name}"), "quota's ResourceQuota assigned");
    Ok(())
}
