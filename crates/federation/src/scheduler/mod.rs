//! The scheduler: writes each binding's `spec.clusters` and its Scheduled
//! condition. Runs on binding changes and on changes to clusters that
//! matter to placement (labels, spec, API enablements, joins and leaves).

pub mod assign;
pub mod core;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::Stream;
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

pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Bindings scheduled at once. Each decision is two writes to the hub;
/// enough of them in flight keeps both cores busy in a burst.
const SCHEDULE_SYNCS: usize = 32;

/// What each binding was last scheduled at: (generation, placement epoch).
type Decided = Mutex<HashMap<String, (Option<i64>, u64)>>;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl Stream<Item = Key> + Send + 'static,
    clusters_changed: impl Stream<Item = ()> + Send + 'static,
) {
    let queue = WorkQueue::new();
    let state = Arc::new((ctx, Decided::default()));
    tokio::join!(
        queue::feed(queue.clone(), changes),
        queue::feed_all_on(queue.clone(), bindings.clone(), clusters_changed),
        queue::reconcile_packed(queue, bindings, SCHEDULE_SYNCS, move |b| {
            reconcile(b, state.clone())
        }),
    );
}

async fn reconcile(binding: Arc<Binding>, state: Arc<(Ctx, Decided)>) -> Result<Next, Error> {
    let (ctx, decided) = (&state.0, &state.1);
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    if binding.metadata.deletion_timestamp.is_some() {
        decided.lock().remove(&uid);
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
    let decision = core::schedule(
        spec,
        &uid,
        &clusters,
        status.scheduler_observing_affinity_name.as_deref(),
        fresh,
    );
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
                written = crate::writes::merge_patch(&api, &name, &patch).await?;
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
        Err(f) => {
            debug!(binding = %name, reason = f.reason, message = %f.message, "not scheduled");
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
    decided.lock().insert(uid, (generation, epoch));
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
