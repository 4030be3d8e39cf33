//! Failover that takes the data along (beyond Karmada): a workload
//! template annotated `backup.flotilla.io/migrate-data: "true"` that is
//! evicted from a cluster has its volumes backed up there while that
//! cluster still answers (else the newest backup of its namespace the new
//! cluster knows of is used, a Schedule's), restored in each cluster it
//! moves to, and only then delivered there: until then its Work in a new
//! cluster is written with `suspendDispatching` (Karmada's own switch),
//! so no replacement starts on empty volumes. The pods there start once
//! their data is back ([`flotilla_core::volume_data`]); a ServiceExport's
//! endpoints in the new cluster count once those pods are ready, so
//! traffic follows readiness.
//!
//! The Work waiting for data carries [`AWAITING_ANNOTATION`] (naming the
//! cluster the data comes from); once the claims are restored this
//! controller delivers it (removes the mark and the suspension), and the
//! binding controller leaves a Work without the mark alone. When the move
//! cannot be made (no backup anywhere, a restore that fails) the Work is
//! delivered anyway, with a Warning Event saying what was not carried,
//! rather than hold the workload down.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_backup::migration::{self, Cluster as Member, Volumes};
use futures::Stream;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{Instrument, info, info_span, warn};

use super::hold::AWAITING_ANNOTATION;
use crate::api::{Binding, Work, annotations};
use crate::binding::template;
use crate::context::Ctx;
use crate::error::Error;
use crate::fanout::{Change, Subscribers};
use crate::packed::{self, Key, PackedStore};
use crate::queue::{self, Next, WorkQueue};

/// How long each step of a move may take.
const STEP: Duration = Duration::from_secs(120);

/// The moves under way, by Work.
type Running = Mutex<HashSet<Key>>;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    works: PackedStore<Work>,
    changes: impl Stream<Item = Key> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("data-migration-controller"));
    let state = Arc::new((ctx, Running::default(), bindings));
    tokio::join!(
        queue::feed(queue.clone(), changes),
        queue::reconcile_packed(queue, works, 2, move |w| reconcile(w, state.clone())),
    );
}

/// Works waiting for data.
pub fn changes(works: &Subscribers<Change<Work>>) -> impl Stream<Item = Key> + Send + 'static {
    works.subscribe(|c: &Change<Work>| {
        c.object
            .annotations()
            .contains_key(AWAITING_ANNOTATION)
            .then(|| c.key.clone())
    })
}

async fn reconcile(
    work: Arc<Work>,
    state: Arc<(Ctx, Running, PackedStore<Binding>)>,
) -> Result<Next, Error> {
    let (ctx, running, bindings) = (&state.0, &state.1, &state.2);
    let Some(from) = work.annotations().get(AWAITING_ANNOTATION).cloned() else {
        return Ok(None);
    };
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    // Its binding, from the annotations the binding controller wrote.
    let a = work.annotations();
    let owner = match (
        a.get(annotations::RB_NAME),
        a.get(annotations::RB_NAMESPACE),
    ) {
        (Some(name), Some(ns)) => packed::key(Some(ns), name),
        _ => match a.get(annotations::CRB_NAME) {
            Some(name) => packed::key(None, name),
            None => return Ok(None),
        },
    };
    let Some(binding) = bindings.get_key(&owner) else {
        return Ok(None);
    };
    let key = Key::from(packed::key_of(&work.metadata).unwrap_or_default());
    if !running.lock().insert(key.clone()) {
        return Ok(None);
    }
    let to = work
        .metadata
        .namespace
        .as_deref()
        .and_then(|ns| ns.strip_prefix(crate::api::EXECUTION_PREFIX))
        .unwrap_or_default()
        .to_string();
    let (ctx, state) = (ctx.clone(), state.clone());
    let span = info_span!("data-migration", binding = %binding.name_any(), %from, %to);
    tokio::spawn(
        async move {
            let outcome = match template(&ctx, &binding).await {
                Ok(Some(template)) => carry(&ctx, &binding, &template, &from, &to).await,
                Ok(None) => Err("the template is gone".into()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(error) = deliver(&ctx, &binding, &work, &to, outcome).await {
                warn!(%error, "cannot deliver the Work");
            }
            state.1.lock().remove(&key);
        }
        .instrument(span),
    );
    Ok(None)
}

/// Backs the volumes up where the workload is leaving (while that cluster
/// answers) and restores their claims in `to`; the restore's name.
async fn carry(
    ctx: &Ctx,
    binding: &Binding,
    template: &DynamicObject,
    from: &str,
    to: &str,
) -> Result<String, String> {
    let object = serde_json::to_value(template).map_err(|e| e.to_string())?;
    let volumes = Volumes::of_workload(&template.namespace().unwrap_or_default(), &object)
        .ok_or("the workload has no pod selector")?;
    let target_cluster = ctx
        .cluster(to)
        .ok_or_else(|| format!("cluster {to} left the fleet"))?;
    let target_client = ctx
        .members
        .get(&target_cluster)
        .await
        .map_err(|e| format!("cannot reach {to}: {e}"))?
        .client;
    let target = Member {
        name: to,
        client: &target_client,
    };
    let name = migration::move_name("failover", &binding.spec.resource.name);
    let backup = match back_up_at_source(ctx, from, &target, &volumes, &name).await {
        Ok(backup) => backup,
        Err(why) => {
            // Gone, or not answering: the newest backup in the storage.
            migration::wait_synced_now(&target, STEP)
                .await
                .map_err(|e| format!("{why}, and {e}"))?;
            let last = migration::latest_backup(&target, &volumes.namespace)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "{why}, and {to} knows no completed backup of namespace {}",
                        volumes.namespace
                    )
                })?;
            let last = last["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            warn!(%why, backup = %last, "restoring from the newest backup instead");
            last
        }
    };
    migration::wait_synced(&target, &backup, STEP)
        .await
        .map_err(|e| e.to_string())?;
    if let Err(e) = migration::restore_claims(&target, &volumes, &backup, &name, STEP).await {
        migration::discard_restore(&target, &volumes, &name).await;
        return Err(e.to_string());
    }
    info!(%backup, restore = %name, "claims restored; delivering the workload");
    Ok(name)
}

/// A backup at the cluster being left, if it still answers.
async fn back_up_at_source(
    ctx: &Ctx,
    from: &str,
    target: &Member<'_>,
    volumes: &Volumes,
    name: &str,
) -> Result<String, String> {
    let cluster = ctx
        .cluster(from)
        .ok_or_else(|| format!("{from} left the fleet"))?;
    let client = ctx
        .members
        .get(&cluster)
        .await
        .map_err(|e| format!("{from} cannot be reached: {e}"))?
        .client;
    let answers = migration::answers(&client).await;
    if !answers {
        return Err(format!("{from} does not answer"));
    }
    let source = Member {
        name: from,
        client: &client,
    };
    migration::check_shared_storage(&source, target)
        .await
        .map_err(|e| e.to_string())?;
    migration::back_up(&source, volumes, name, STEP)
        .await
        .map_err(|e| e.to_string())?;
    Ok(name.to_string())
}

/// Delivers the Work (no longer suspended, unless the binding suspends
/// it, and no longer marked), with an Event on the template saying how
/// the data came or why it did not.
async fn deliver(
    ctx: &Ctx,
    binding: &Binding,
    work: &Work,
    cluster: &str,
    outcome: Result<String, String>,
) -> Result<(), Error> {
    let suspended = binding.spec.dispatch_suspended_on(cluster);
    let patch = json!({
        "metadata": {"annotations": {AWAITING_ANNOTATION: null}},
        "spec": {"suspendDispatching": if suspended { json!(true) } else { json!(null) }},
    });
    let api: kube::Api<Work> = kube::Api::namespaced(
        ctx.hub.clone(),
        work.metadata.namespace.as_deref().unwrap_or_default(),
    );
    api.patch(
        &work.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    let (kind, reason, message) = match &outcome {
        Ok(restore) => (
            "Normal",
            "DataMigrated",
            format!(
                "the volumes' data was restored in {cluster} (restore velero/{restore}) before the workload was delivered there"
            ),
        ),
        Err(why) => (
            "Warning",
            "DataNotMigrated",
            format!("the workload is delivered to {cluster} without its data: {why}"),
        ),
    };
    match &outcome {
        Ok(_) => info!(%cluster, "data migrated"),
        Err(why) => warn!(%cluster, %why, "data not migrated"),
    }
    let r = &binding.spec.resource;
    let involved = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(r.api_version.clone()),
        kind: Some(r.kind.clone()),
        name: Some(r.name.clone()),
        namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
        uid: (!r.uid.is_empty()).then(|| r.uid.clone()),
        ..Default::default()
    };
    flotilla_client::events::record(
        &ctx.hub,
        involved,
        "data-migration-controller",
        (kind, reason, &message),
    )
    .await;
    Ok(())
}
