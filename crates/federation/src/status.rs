//! The binding-status controller: folds each target cluster's Work status
//! into the binding's aggregatedStatus and FullyApplied condition, then
//! the members' statuses into the template's own status, so that
//! `kubectl get deploy` on the hub shows the fleet.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::ResourceExt;

use serde::Deserialize;
use serde_json::{Value, json};
use tracing::debug;

use crate::api::{AggregatedStatusItem, Binding, Scope, Work, WorkStatus, annotations};
use crate::binding::{binding_api, template, template_api, work_ref};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::interpreter;
use crate::packed::{self, Key, PackedStore};
use crate::queue::{self, Next, WorkQueue};

/// How long a binding's changes gather before its status is written.
/// Scheduling writes a binding twice and its Works report in quick
/// succession; one status write for the lot, instead of one per change
/// (each racing the scheduler's own status write), is what lets the
/// scheduler place bindings at full speed in a burst.
const DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Bindings whose status is written at once (Karmada's controllers run 5
/// workers each). In a burst, placement goes first: the scheduler runs
/// with more, and status reporting catches up behind it.
const STATUS_SYNCS: usize = 5;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    binding_changes: impl Stream<Item = Key> + Send + 'static,
    work_owners: impl Stream<Item = String> + Send + 'static,
) {
    let queue = WorkQueue::new();
    let gather = {
        let (queue, bindings) = (queue.clone(), bindings.clone());
        let keys = futures::stream::select(
            binding_changes,
            work_owners.map(move |key| bindings.shared_key(&key)),
        );
        async move {
            let mut keys = std::pin::pin!(keys);
            while let Some(key) = keys.next().await {
                queue.add_after(key, DEBOUNCE);
            }
        }
    };
    tokio::join!(
        gather,
        queue::reconcile_packed(queue, bindings, STATUS_SYNCS, move |b| {
            reconcile(b, ctx.clone())
        }),
    );
}

/// The key of the binding of `scope` each changed Work belongs to.
pub fn work_owners(
    works: &Subscribers<Change<Work>>,
    scope: Scope,
) -> impl Stream<Item = String> + Send + 'static {
    works.subscribe(move |c: &Change<Work>| owner(&c.object, scope))
}

/// The key of the binding a Work belongs to, from the annotations the
/// binding controller writes, if it is of `scope`.
pub(crate) fn owner(work: &Work, scope: Scope) -> Option<String> {
    let a = work.annotations();
    match scope {
        Scope::Namespaced => {
            let name = a.get(annotations::RB_NAME)?;
            let ns = a.get(annotations::RB_NAMESPACE)?;
            Some(packed::key(Some(ns), name))
        }
        Scope::Cluster => {
            let name = a.get(annotations::CRB_NAME)?;
            Some(packed::key(None, name))
        }
    }
}

/// The part of a Work its binding's status is made of: a binding's status
/// reads every Work of the binding each time one of them changes, so the
/// manifests are not decoded for it.
#[derive(Deserialize)]
struct StatusOfWork {
    #[serde(default)]
    status: Option<WorkStatus>,
}

fn item(cluster: &str, work: Option<&StatusOfWork>) -> AggregatedStatusItem {
    let status = work.and_then(|w| w.status.as_ref());
    let applied = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"));
    let manifest = status.and_then(|s| s.manifest_statuses.first());
    AggregatedStatusItem {
        cluster_name: cluster.into(),
        status: manifest.and_then(|m| m.status.clone()),
        applied: applied.is_some_and(|c| c.status == "True"),
        applied_message: applied
            .filter(|c| c.status != "True")
            .map(|c| c.message.clone())
            .or_else(|| {
                work.is_none()
                    .then(|| "Work is not created yet".to_string())
            }),
        health: Some(
            manifest
                .and_then(|m| m.health.clone())
                .unwrap_or_else(|| "Unknown".into()),
        ),
    }
}

async fn reconcile(binding: Arc<Binding>, ctx: Ctx) -> Result<Next, Error> {
    if binding.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let items: Vec<AggregatedStatusItem> = binding
        .spec
        .clusters
        .iter()
        .map(|t| {
            item(
                &t.name,
                ctx.works.get_as(&work_ref(&binding, &t.name)).as_ref(),
            )
        })
        .collect();
    let mut status = binding.status.clone().unwrap_or_default();
    let failed: Vec<String> = items
        .iter()
        .filter(|i| !i.applied)
        .map(|i| {
            format!(
                "{}: {}",
                i.cluster_name,
                i.applied_message.as_deref().unwrap_or("not applied")
            )
        })
        .collect();
    let fully = !items.is_empty() && failed.is_empty();
    let (reason, message) = if fully {
        (
            "FullyAppliedSuccess",
            "All works have been successfully applied".to_string(),
        )
    } else if items.is_empty() {
        (
            "FullyAppliedFailed",
            "The binding is not scheduled to any cluster".to_string(),
        )
    } else {
        ("FullyAppliedFailed", failed.join("; "))
    };
    let mut changed = conditions::set(
        &mut status.conditions,
        "FullyApplied",
        fully,
        reason,
        &message,
    );
    if status.aggregated_status != items {
        status.aggregated_status = items.clone();
        changed = true;
    }
    if changed {
        let patch = json!({
            "metadata": {"resourceVersion": binding.resource_version()},
            "status": {"aggregatedStatus": status.aggregated_status, "conditions": status.conditions},
        });
        crate::writes::merge_patch_status(
            &binding_api(&ctx, &binding),
            &binding.name_any(),
            &patch,
        )
        .await?;
    }
    reflect_into_template(&ctx, &binding, &items).await?;
    Ok(None)
}

async fn reflect_into_template(
    ctx: &Ctx,
    binding: &Binding,
    items: &[AggregatedStatusItem],
) -> Result<(), Error> {
    let r = &binding.spec.resource;
    if !matches!(
        r.kind.as_str(),
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "Service"
    ) {
        return Ok(());
    }
    let Some(template) = template(ctx, binding).await? else {
        return Ok(());
    };
    if template.metadata.uid.as_deref() != Some(r.uid.as_str()) {
        return Ok(());
    }
    let value = serde_json::to_value(&template)?;
    let Some(aggregated) = interpreter::aggregate_status(&r.kind, &value, items) else {
        return Ok(());
    };
    let current = value.get("status").cloned().unwrap_or(Value::Null);
    let differs = aggregated
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| current.get(k) != Some(v));
    if !differs {
        return Ok(());
    }
    let api = template_api(ctx, binding).await?;
    let patch = json!({"status": aggregated});
    match crate::writes::merge_patch_status(&api, &r.name, &patch).await {
        Ok(_) => {
            debug!(kind = %r.kind, name = %r.name, "template status updated");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
