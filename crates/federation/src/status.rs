//! The binding-status controller: folds each target cluster's Work status
//! into the binding's aggregatedStatus and FullyApplied condition, then
//! the members' statuses into the template's own status, so that
//! `kubectl get deploy` on the hub shows the fleet.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use serde::Deserialize;
use serde_json::{Value, json};
use tracing::debug;

use crate::api::{AggregatedStatusItem, Binding, Scope, Work, WorkStatus, annotations};
use crate::binding::{binding_api, template, template_api, work_keys};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::interpreter;
use crate::packed::{self, Key, Memo, PackedStore};
use crate::queue::{self, Next, WorkQueue};

/// How long a binding's changes gather before its status is written.
/// Scheduling writes a binding twice and its Works report in quick
/// succession; one status write for the lot, instead of one per change
/// (each racing the scheduler's own status write), is what lets the
/// scheduler place bindings at full speed in a burst.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// How long a binding's status waits for Works that are queued but not
/// yet tried (a Work with no condition at all) before it reports them as
/// not applied. In a burst the execution controller's queue is seconds
/// long: every binding's status was written once with all its Works
/// pending and again when they were applied, one hub write in 27 of a
/// template's, for a state the status already implies (no FullyApplied
/// yet). A new binding's Works still to be created wait the same way. A
/// Work tried and failed, or held back (suspended dispatching),
/// has a condition and is reported at once, as is a pending Work of a
/// binding whose status says FullyApplied (a cluster added to its
/// placement).
const PENDING_GRACE: Duration = Duration::from_secs(30);

/// Bindings whose status is written at once (Karmada's controllers run 5
/// workers each). In a burst, placement goes first: the scheduler runs
/// with more, and status reporting catches up behind it.
const STATUS_SYNCS: usize = 5;

/// Works' statuses kept decoded for bindings still settling
/// ([`packed::Memo`]): a binding on a thousand clusters reads all its
/// Works at each report, and decoded each of them every time. A settled
/// binding's (FullyApplied) are forgotten.
const WORK_MEMO: usize = 20_000;

/// Bindings on fewer clusters read their Works afresh: there the decodes
/// cost less than the memory of holding them (10 MiB more of the hub at
/// 3,000 × 10, 57 MiB at 2,000 × 100, for no time saved).
const MEMO_FROM_TARGETS: usize = 200;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    binding_changes: impl Stream<Item = Key> + Send + 'static,
    work_owners: impl Stream<Item = String> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("binding-status-controller"));
    let memo = Arc::new(Memo::new(WORK_MEMO));
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
            reconcile(b, ctx.clone(), memo.clone())
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
    metadata: CreatedAt,
    #[serde(default)]
    status: Option<WorkStatus>,
}

#[derive(Deserialize, Default)]
struct CreatedAt {
    #[serde(default, rename = "creationTimestamp")]
    created: Option<Timestamp>,
}

/// How long to wait before writing a status of `works` (one per target
/// cluster, None where not created yet) of a binding created at
/// `binding_created`: while a Work created less than [`PENDING_GRACE`]
/// ago has not been tried yet, or one of a binding that new is still to
/// be created, until the first of them has waited that long. A change of
/// any of the Works brings the binding back sooner.
fn pending_wait(
    works: &[Option<Arc<StatusOfWork>>],
    binding_created: Option<Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    let left = |since: Option<Timestamp>| {
        since
            .map(|t| crate::time::until(now, crate::time::after(t, PENDING_GRACE)))
            .filter(|left| !left.is_zero())
    };
    let untried = |w: &StatusOfWork| w.status.as_ref().is_none_or(|s| s.conditions.is_empty());
    works
        .iter()
        .filter_map(|w| match w {
            Some(w) if untried(w) => left(w.metadata.created),
            Some(_) => None,
            None => left(binding_created),
        })
        .min()
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

async fn reconcile(
    binding: Arc<Binding>,
    ctx: Ctx,
    memo: Arc<Memo<StatusOfWork>>,
) -> Result<Next, Error> {
    let keys = work_keys(&binding);
    let memo = (keys.len() >= MEMO_FROM_TARGETS).then_some(&*memo);
    let forget = || {
        if let Some(memo) = memo {
            keys.iter().for_each(|k| memo.forget(k));
        }
    };
    if binding.metadata.deletion_timestamp.is_some() {
        forget();
        return Ok(None);
    }
    let works: Vec<Option<Arc<StatusOfWork>>> = keys
        .iter()
        .map(|k| match memo {
            Some(memo) => ctx.works.get_key_memo(k, memo),
            None => ctx.works.get_key_as(k).map(Arc::new),
        })
        .collect();
    // Waiting hides nothing while the status does not claim FullyApplied.
    let claims_applied = binding.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "FullyApplied" && c.status == "True")
    });
    let binding_created = binding.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if !claims_applied && let Some(wait) = pending_wait(&works, binding_created, Timestamp::now()) {
        return Ok(Some(wait));
    }
    let items: Vec<AggregatedStatusItem> = binding
        .spec
        .clusters
        .iter()
        .zip(&works)
        .map(|(t, work)| item(&t.name, work.as_deref()))
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
    if fully {
        forget();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn work(created: &str, status: Value) -> Option<Arc<StatusOfWork>> {
        serde_json::from_value(json!({
            "metadata": {"creationTimestamp": created},
            "status": status,
        }))
        .ok()
        .map(Arc::new)
    }

    #[test]
    fn a_status_waits_only_for_works_not_yet_tried_and_not_for_long() {
        let now: Timestamp = "2026-11-27T10:00:30Z".parse().unwrap();
        let old_binding = Some("2026-11-27T09:00:00Z".parse().unwrap());
        let new_binding = Some("2026-11-27T10:00:10Z".parse().unwrap());
        let applied = json!({"conditions": [{"type": "Applied", "status": "True",
            "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": "2026-11-27T10:00:01Z"}]});
        let failed = json!({"conditions": [{"type": "Applied", "status": "False",
            "reason": "AppliedFailed", "message": "refused", "lastTransitionTime": "2026-11-27T10:00:01Z"}]});
        // One Work queued 10 s ago and not tried: wait out its grace.
        let queued = || work("2026-11-27T10:00:20Z", Value::Null);
        let applied_work = || work("2026-11-27T10:00:00Z", applied.clone());
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(
            pending_wait(&[queued(), applied_work()], old_binding, now),
            secs(20)
        );
        // A new binding's Work not created yet: wait; an old one's: write.
        assert_eq!(pending_wait(&[None], new_binding, now), secs(10));
        assert_eq!(pending_wait(&[queued(), None], new_binding, now), secs(10));
        assert_eq!(pending_wait(&[None], old_binding, now), None);
        // Every Work tried (applied or failed): write.
        let failed_work = work("2026-11-27T10:00:20Z", failed);
        assert_eq!(
            pending_wait(&[failed_work, applied_work()], new_binding, now),
            None
        );
        // Queued for longer than the grace: reported as not applied.
        let long_queued = work("2026-11-27T09:59:00Z", json!({}));
        assert_eq!(pending_wait(&[long_queued], old_binding, now), None);
    }
}
