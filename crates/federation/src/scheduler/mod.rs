//! The scheduler: writes each binding's `spec.clusters` and its Scheduled
//! condition. Runs on binding changes and on changes to clusters that
//! matter to placement (labels, spec, API enablements, joins and leaves).

pub mod assign;
pub mod core;
pub mod tenancy;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{debug, info};

use crate::api::{Binding, BindingStatus, annotations};
use crate::conditions;
use crate::context::Ctx;
use crate::error::Error;
use crate::packed::{Key, PackedStore};
use crate::queue::{self, Next, WorkQueue};
use crate::quota::api::REASON_QUOTA_EXCEEDED;
use tenancy::{Charges, Limits, Outcome, Tenancy};

pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Bindings scheduled at once. Each decision is two writes to the hub;
/// enough of them in flight keeps both cores busy in a burst.
const SCHEDULE_SYNCS: usize = 32;

/// A kind a cluster serves: (apiVersion, kind), as a binding's resource
/// names it.
pub type ServedKind = (String, String);

/// What each binding was last scheduled at: (generation, placement epoch).
type Decided = Mutex<HashMap<String, (Option<i64>, u64)>>;

struct State {
    ctx: Ctx,
    decided: Decided,
    /// Namespaced bindings only: the tenants' sets and quotas.
    tenancy: Option<Tenancy>,
    charges: Charges,
    bindings: PackedStore<Binding>,
}

/// Schedules the bindings of `bindings`; `tenancy` restricts namespaced
/// ones to their namespace's cluster sets and quotas, and
/// `namespaces_changed` (a quota or its usage changed) looks again at a
/// namespace's bindings that a quota held back.
pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl Stream<Item = Key> + Send + 'static,
    clusters_changed: impl Stream<Item = ()> + Send + 'static,
    kinds_changed: impl Stream<Item = Arc<HashSet<ServedKind>>> + Send + 'static,
    tenancy: Option<Tenancy>,
    namespaces_changed: impl Stream<Item = String> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("scheduler-queue"));
    let state = Arc::new(State {
        ctx,
        decided: Decided::default(),
        tenancy,
        charges: Charges::default(),
        bindings: bindings.clone(),
    });
    let in_namespace = {
        let bindings = bindings.clone();
        namespaces_changed.flat_map(move |ns: String| {
            let keys: Vec<Key> = bindings
                .in_namespace(&ns)
                .iter()
                .map(|b| bindings.shared_key(&crate::packed::key(Some(&ns), &b.name_any())))
                .collect();
            futures::stream::iter(keys)
        })
    };
    let of_kinds = {
        let (bindings, state) = (bindings.clone(), state.clone());
        gathered(kinds_changed).flat_map(move |kinds| {
            let keys: Vec<Key> = bindings
                .keys()
                .into_iter()
                .filter(|key| {
                    // The resource's kind and the uid, not the whole
                    // binding: this looks at every binding of the fleet.
                    let Some(b) = bindings.get_key_as::<BindingOfKind>(key) else {
                        return false;
                    };
                    let r = b.spec.resource;
                    let of_kind = kinds.contains(&(r.api_version, r.kind));
                    if of_kind {
                        // Decided at this epoch, but on what clusters served then.
                        state.decided.lock().remove(&b.metadata.uid);
                    }
                    of_kind
                })
                .collect();
            futures::stream::iter(keys)
        })
    };
    tokio::join!(
        queue::feed(queue.clone(), changes),
        queue::feed(queue.clone(), in_namespace),
        queue::feed(queue.clone(), of_kinds),
        queue::feed_all_on(queue.clone(), bindings.clone(), clusters_changed),
        queue::reconcile_packed(queue, bindings, SCHEDULE_SYNCS, move |b| {
            reconcile(b, state.clone())
        }),
    );
}

/// How long kind changes are gathered into one look at every binding:
/// the members of a fleet report newly installed CRDs (the MCS kinds after
/// a join) one after another, a few milliseconds apart, and each look
/// reads every binding.
const KIND_CHANGES_GATHERED: Duration = Duration::from_millis(250);

/// `changes`, each joined with those that follow it within
/// [`KIND_CHANGES_GATHERED`].
fn gathered(
    changes: impl Stream<Item = Arc<HashSet<ServedKind>>> + Send + 'static,
) -> impl Stream<Item = HashSet<ServedKind>> + Send + 'static {
    futures::stream::unfold(changes.boxed(), |mut changes| async move {
        let mut kinds: HashSet<ServedKind> = (*changes.next().await?).clone();
        let until = tokio::time::Instant::now() + KIND_CHANGES_GATHERED;
        // A stream that ended gives what it gathered, then ends.
        while let Ok(Some(more)) = tokio::time::timeout_at(until, changes.next()).await {
            kinds.extend(more.iter().cloned());
        }
        Some((kinds, changes))
    })
}

/// What the look at every binding for changed kinds reads of each.
#[derive(serde::Deserialize)]
struct BindingOfKind {
    #[serde(default)]
    metadata: UidOnly,
    spec: ResourceOnly,
}

#[derive(Default, serde::Deserialize)]
struct UidOnly {
    #[serde(default)]
    uid: String,
}

#[derive(serde::Deserialize)]
struct ResourceOnly {
    resource: crate::api::ObjectReference,
}

async fn reconcile(binding: Arc<Binding>, state: Arc<State>) -> Result<Next, Error> {
    let (ctx, decided) = (&state.ctx, &state.decided);
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    if binding.metadata.deletion_timestamp.is_some() {
        decided.lock().remove(&uid);
        state.charges.forget(&uid);
        return Ok(None);
    }
    let epoch = ctx.placement_epoch.load(Ordering::SeqCst);
    // The cache may not show our last writes yet: what this scheduler
    // decided and wrote is the reference.
    if decided.lock().get(&uid) == Some(&(binding.metadata.generation, epoch)) {
        // Nothing placement depends on changed since the last decision.
        return Ok(None);
    }
    debug!(binding = %binding.name_any(), generation = ?binding.metadata.generation, epoch, last = ?decided.lock().get(&uid), "scheduling");
    let spec = &binding.spec;
    // A binding no policy placed (a dependency attached to the bindings
    // that require it) is not scheduled: its clusters are theirs.
    if spec.placement.is_none() {
        return Ok(None);
    }
    if spec
        .scheduler_name
        .as_deref()
        .is_some_and(|n| n != SCHEDULER_NAME)
    {
        return Ok(None);
    }
    if spec
        .suspension
        .as_ref()
        .and_then(|s| s.get("scheduling"))
        .and_then(|s| s.as_bool())
        == Some(true)
    {
        return Ok(None);
    }
    let started = Instant::now();
    let clusters = ctx.clusters.state();
    let status = binding.status.clone().unwrap_or_default();
    let fresh = rebalance_requested(
        spec.reschedule_triggered_at.as_deref(),
        status.last_scheduled_time.as_deref(),
    );
    let observing = status.scheduler_observing_affinity_name.as_deref();
    let Outcome {
        decision,
        under_quota,
    } = match (&state.tenancy, binding.metadata.namespace.as_deref()) {
        (Some(t), Some(ns)) => t.schedule(
            ns,
            &binding,
            &clusters,
            &state.bindings,
            (observing, fresh),
            &state.charges,
        ),
        _ => Outcome {
            decision: core::schedule(spec, &uid, &clusters, observing, fresh, &Limits::default()),
            under_quota: false,
        },
    };
    let api = crate::binding::binding_api(ctx, &binding);
    let name = binding.metadata.name.clone().unwrap_or_default();
    let placement = serde_json::to_string(&spec.placement.clone().unwrap_or_default())?;
    // The binding's version as the status write must find it.
    let mut written = crate::writes::Written {
        resource_version: binding.metadata.resource_version.clone(),
        generation: binding.metadata.generation,
    };
    let mut status = status;
    let mut changed = false;
    if fresh {
        info!(binding = %name, "fresh division asked by a WorkloadRebalancer");
    }
    let result = match &decision {
        Ok(d) => {
            let recorded = binding
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .get(annotations::APPLIED_PLACEMENT)
                .cloned();
            if d.clusters != spec.clusters || recorded.as_deref() != Some(placement.as_str()) {
                // spec.clusters is the scheduler's alone: a patch without a
                // resourceVersion cannot lose anyone else's write.
                let patch = json!({
                    "metadata": {"annotations": {annotations::APPLIED_PLACEMENT: placement}},
                    "spec": {"clusters": d.clusters},
                });
                written = crate::writes::merge_patch(&api, &name, &patch)
                    .await
                    // Not placed after all: the cache's charge holds.
                    .inspect_err(|_| state.charges.forget(&uid))?;
                changed = true;
                info!(binding = %name, clusters = ?d.clusters, "scheduled");
            }
            if status.scheduler_observing_affinity_name != d.affinity_name {
                status.scheduler_observing_affinity_name = d.affinity_name.clone();
                changed = true;
            }
            conditions::set(
                &mut status.conditions,
                "Scheduled",
                true,
                "Success",
                "Binding has been scheduled successfully.",
            )
        }
        Err(f) if f.reason == REASON_QUOTA_EXCEEDED => {
            info!(binding = %name, message = %f.message, "over quota: not scheduled");
            conditions::set(
                &mut status.conditions,
                "Scheduled",
                false,
                f.reason,
                &f.message,
            )
        }
        Err(f) => {
            debug!(binding = %name, reason = f.reason, message = %f.message, "not scheduled");
            // Nowhere fits: the last decision holds (a fleet briefly all
            // NotReady keeps its copies), but not for clusters leaving the
            // fleet, which can hold nothing.
            let staying: Vec<_> = spec
                .clusters
                .iter()
                .filter(|t| !ctx.leaving(&t.name))
                .cloned()
                .collect();
            if staying.len() != spec.clusters.len() {
                let patch = json!({"spec": {"clusters": staying}});
                written = crate::writes::merge_patch(&api, &name, &patch).await?;
                changed = true;
                info!(binding = %name, clusters = ?staying, "unscheduled from clusters leaving the fleet");
            }
            conditions::set(
                &mut status.conditions,
                "Scheduled",
                false,
                f.reason,
                &f.message,
            )
        }
    };
    let generation = written.generation;
    if result || changed || status.scheduler_observed_generation != generation {
        if changed || fresh {
            status.last_scheduled_time = Some(conditions::now().0.to_string());
        }
        status.scheduler_observed_generation = generation;
        write_status(&api, &name, &written, &status).await?;
    }
    ctx.metrics
        .observe_scheduling(decision.is_ok(), started.elapsed());
    if under_quota && decision.is_err() {
        // Another binding's change may make room: decide again then.
        decided.lock().remove(&uid);
    } else {
        decided.lock().insert(uid, (generation, epoch));
    }
    Ok(None)
}

/// Whether a WorkloadRebalancer asked for a fresh division after the last
/// scheduling (`rescheduleTriggeredAt` later than `lastScheduledTime`).
fn rebalance_requested(triggered: Option<&str>, last: Option<&str>) -> bool {
    let time = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().ok();
    match (triggered.and_then(time), last.and_then(time)) {
        (Some(t), Some(l)) => t > l,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Writes a binding's scheduling status, guarded by its resourceVersion so
/// that a concurrent status writer is never overwritten.
async fn write_status(
    api: &Api<Binding>,
    name: &str,
    written: &crate::writes::Written,
    status: &BindingStatus,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": written.resource_version},
        "status": {
            "schedulerObservedGeneration": status.scheduler_observed_generation,
            "schedulerObservingAffinityName": status.scheduler_observing_affinity_name,
            "lastScheduledTime": status.last_scheduled_time,
            "conditions": status.conditions,
        }
    });
    crate::writes::merge_patch_status(api, name, &patch).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn kinds(names: &[&str]) -> Arc<HashSet<ServedKind>> {
        Arc::new(
            names
                .iter()
                .map(|k| ("example.com/v1".to_string(), k.to_string()))
                .collect(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn kind_changes_close_together_make_one_look_at_the_bindings() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut looks = Box::pin(gathered(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        ));
        // Three members report within the window, a fourth well after it.
        tx.send(kinds(&["A"])).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.send(kinds(&["B"])).unwrap();
        tx.send(kinds(&["A", "C"])).unwrap();
        let first = looks.next().await.unwrap();
        assert_eq!(first, (*kinds(&["A", "B", "C"])).clone());
        tokio::time::sleep(KIND_CHANGES_GATHERED * 2).await;
        tx.send(kinds(&["D"])).unwrap();
        drop(tx);
        assert_eq!(looks.next().await.unwrap(), (*kinds(&["D"])).clone());
        assert!(
            looks.next().await.is_none(),
            "the stream ends with its source"
        );
    }

    #[test]
    fn the_look_for_changed_kinds_reads_a_binding_s_kind_and_uid() {
        let b: BindingOfKind = serde_json::from_value(serde_json::json!({
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "gear-widget", "uid": "u-1", "labels": {"a": "b"}},
            "spec": {"resource": {"apiVersion": "example.com/v1", "kind": "Widget",
                                  "name": "gear", "namespace": "shop"},
                     "clusters": [{"name": "member1"}]},
            "status": {"conditions": []}
        }))
        .unwrap();
        assert_eq!(b.metadata.uid, "u-1");
        assert_eq!(
            (b.spec.resource.api_version, b.spec.resource.kind),
            ("example.com/v1".to_string(), "Widget".to_string())
        );
    }
}
