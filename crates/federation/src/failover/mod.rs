//! Failover: bindings that opted in (the policy's `failover`) leave a
//! cluster that stops being Ready, or carries a NoExecute taint they do
//! not tolerate, once their toleration runs out (Karmada's taint
//! manager), and a cluster where their workload stays Unhealthy
//! (application failover). Leaving is an eviction task on the binding:
//! the scheduler divides the cluster's replicas among the others, and the
//! binding controller keeps the cluster's Work until the task goes, which
//! this controller decides too (Karmada's graceful eviction controller):
//! once the new placement is healthy, or the grace period ends.
//!
//! Flapping does not churn: readiness changes only after the cluster
//! controller's thresholds (30 s each way by default), and eviction waits
//! a further toleration (300 s by default) of continuous NotReady.

pub mod data;
pub mod decide;
pub mod hold;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{info, warn};

use crate::api::{Binding, GracefulEvictionTask, ReturnWhenRecovered, StatePreservation};
use crate::binding::binding_api;
use crate::context::Ctx;
use crate::error::Error;
use crate::fanout::{Change, Subscribers};
use crate::packed::{Key, PackedStore};
use crate::queue::{self, Next, WorkQueue};
use crate::scheduler::core;
use crate::time;
use decide::Verdict;

/// Bindings looked at once: most have no failover and cost a lookup.
const FAILOVER_SYNCS: usize = 4;
/// Application failover's default `decisionConditions.tolerationSeconds`.
const APPLICATION_TOLERATION: Duration = Duration::from_secs(300);

/// Since when each (binding uid, cluster) has been reported Unhealthy.
type Unhealthy = Mutex<HashMap<(String, String), Timestamp>>;

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl Stream<Item = Key> + Send + 'static,
    readiness_changed: impl Stream<Item = ()> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("failover-controller"));
    let state = Arc::new((ctx, Unhealthy::default()));
    tokio::join!(
        queue::feed_all_on(queue.clone(), bindings.clone(), readiness_changed),
        queue::feed(queue.clone(), changes),
        queue::reconcile_packed(queue, bindings, FAILOVER_SYNCS, move |b| {
            reconcile(b, state.clone())
        }),
    );
}

/// The keys of changed bindings that concern failover: those that opted
/// in, or are being evicted. The rest are not even queued (nor decoded
/// again).
pub fn changes(
    bindings: &Subscribers<Change<Binding>>,
) -> impl Stream<Item = Key> + Send + 'static {
    bindings.subscribe(|c: &Change<Binding>| {
        let spec = &c.object.spec;
        (spec.failover.is_some() || !spec.graceful_eviction_tasks.is_empty()).then(|| c.key.clone())
    })
}

fn earliest(next: &mut Option<Timestamp>, at: Timestamp) {
    if next.is_none_or(|n| at < n) {
        *next = Some(at);
    }
}

/// Why and how a binding leaves a cluster.
struct Eviction<'a> {
    from: &'a str,
    purge_mode: Option<&'a str>,
    reason: &'a str,
    producer: &'a str,
    message: String,
    grace_period_seconds: Option<i32>,
    preservation: Option<&'a StatePreservation>,
}

impl Eviction<'_> {
    /// The task, carrying the replicas the cluster had (Gracefully unless
    /// the policy says otherwise) and, where the policy preserves state,
    /// the labels read from the workload's status there; an error while
    /// that status is not collected yet.
    fn task(self, binding: &Binding, now: Timestamp) -> Result<GracefulEvictionTask, String> {
        let spec = &binding.spec;
        let mut preserved = None;
        if let Some(p) = self.preservation.filter(|p| !p.rules.is_empty()) {
            let status = binding.status.clone().unwrap_or_default();
            let labels = decide::preserved_state(p, &status.aggregated_status, self.from)?;
            let before = spec.clusters.iter().map(|c| c.name.clone()).collect();
            preserved = Some((labels, before));
        }
        let (preserved_label_state, clusters_before_failover) = preserved.unzip();
        Ok(GracefulEvictionTask {
            from_cluster: self.from.to_string(),
            purge_mode: Some(self.purge_mode.unwrap_or("Gracefully").to_string()),
            replicas: spec
                .clusters
                .iter()
                .find(|c| c.name == self.from)
                .and_then(|c| c.replicas),
            reason: self.reason.into(),
            message: Some(self.message),
            producer: self.producer.into(),
            grace_period_seconds: self.grace_period_seconds,
            creation_timestamp: Some(now.to_string()),
            preserved_label_state,
            clusters_before_failover,
            ..Default::default()
        })
    }
}

/// Whether the binding has somewhere to go without `cluster` (its only
/// one): application failover does not leave a workload nowhere.
fn can_leave(ctx: &Ctx, binding: &Binding, cluster: &str, now: Timestamp) -> bool {
    let mut spec = binding.spec.clone();
    spec.graceful_eviction_tasks.push(GracefulEvictionTask {
        from_cluster: cluster.into(),
        creation_timestamp: Some(now.to_string()),
        ..Default::default()
    });
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    let limits = crate::scheduler::tenancy::Limits::default();
    core::schedule(&spec, &uid, &ctx.clusters.state(), None, false, &limits)
        .is_ok_and(|d| !d.clusters.is_empty() && d.clusters.iter().all(|c| c.name != cluster))
}

/// How soon an eviction waiting for the workload's status to preserve
/// is tried again.
const STATUS_RETRY: Duration = Duration::from_secs(1);

/// When a binding that opted into returning should be divided afresh:
/// when a fresh division would use a cluster it is not on (or an earlier
/// clusterAffinities term), once every cluster of that division has been
/// Ready for the policy's time; at most once per that time.
fn return_due(ctx: &Ctx, binding: &Binding, back: &ReturnWhenRecovered) -> Option<Timestamp> {
    let spec = &binding.spec;
    let wait = time::seconds(back.after_seconds.unwrap_or(300));
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    let clusters = ctx.clusters.state();
    // Without the tenant's limits: the scheduler applies them when the
    // return is asked for, and keeps a binding within its sets.
    let limits = crate::scheduler::tenancy::Limits::default();
    let fresh = match core::schedule(spec, &uid, &clusters, None, true, &limits) {
        Ok(f) => f,
        Err(f) => {
            tracing::debug!(binding = %binding.name_any(), reason = f.reason, message = %f.message, "no fresh division to return to");
            return None;
        }
    };
    let status = binding.status.clone().unwrap_or_default();
    let gained = fresh
        .clusters
        .iter()
        .any(|f| !spec.clusters.iter().any(|c| c.name == f.name));
    let earlier_term = fresh.affinity_name.is_some()
        && fresh.affinity_name != status.scheduler_observing_affinity_name;
    if !gained && !earlier_term {
        tracing::debug!(binding = %binding.name_any(), fresh = ?fresh.clusters, "already where a fresh division would put it");
        return None;
    }
    let mut ready_since = Timestamp::UNIX_EPOCH;
    for f in &fresh.clusters {
        let ready = ctx.cluster(&f.name)?.condition("Ready")?.clone();
        if ready.status != "True" {
            return None;
        }
        ready_since = ready_since.max(ready.last_transition_time.0);
    }
    // Not again before the last request has had its time.
    let last = spec
        .reschedule_triggered_at
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    Some(time::after(ready_since.max(last), wait))
}

async fn reconcile(binding: Arc<Binding>, state: Arc<(Ctx, Unhealthy)>) -> Result<Next, Error> {
    let (ctx, unhealthy) = (&state.0, &state.1);
    let spec = &binding.spec;
    let uid = binding.metadata.uid.clone().unwrap_or_default();
    if binding.metadata.deletion_timestamp.is_some() {
        unhealthy.lock().retain(|(u, _), _| *u != uid);
        return Ok(None);
    }
    let failover = spec.failover();
    if failover.is_none() && spec.graceful_eviction_tasks.is_empty() {
        return Ok(None);
    }
    let now = Timestamp::now();
    let mut tasks = spec.graceful_eviction_tasks.clone();
    let mut next: Option<Timestamp> = None;
    let evict = |tasks: &mut Vec<GracefulEvictionTask>,
                 next: &mut Option<Timestamp>,
                 task: Result<GracefulEvictionTask, String>| match task {
        Ok(task) => {
            info!(binding = %binding.name_any(), cluster = %task.from_cluster, reason = %task.reason, "evicting");
            tasks.push(task);
        }
        Err(why) => {
            warn!(binding = %binding.name_any(), %why, "not evicting yet: the state to preserve is not known");
            earliest(next, time::after(now, STATUS_RETRY));
        }
    };
    let placement = spec.placement.clone().unwrap_or_default();
    if let Some(cluster_failover) = failover.as_ref().and_then(|f| f.cluster.as_ref()) {
        for target in &spec.clusters {
            if spec.evicting(&target.name).is_some() {
                continue;
            }
            let Some(cluster) = ctx.cluster(&target.name) else {
                continue;
            };
            if let Verdict::EvictAt(at, why) =
                decide::cluster_verdict(&cluster, &placement.cluster_tolerations, now)
            {
                if at > now {
                    earliest(&mut next, at);
                    continue;
                }
                evict(
                    &mut tasks,
                    &mut next,
                    Eviction {
                        from: &target.name,
                        purge_mode: cluster_failover.purge_mode.as_deref(),
                        reason: "TaintUntolerated",
                        producer: "TaintManager",
                        message: why,
                        grace_period_seconds: None,
                        preservation: cluster_failover.state_preservation.as_ref(),
                    }
                    .task(&binding, now),
                );
            }
        }
    }
    // Not while the binding is moving already (its new clusters report
    // Unhealthy while they start).
    let settled = tasks.is_empty();
    if let Some(app) = failover.as_ref().and_then(|f| f.application.as_ref())
        && settled
    {
        let toleration = app
            .decision_conditions
            .as_ref()
            .and_then(|d| d.toleration_seconds)
            .map_or(APPLICATION_TOLERATION, time::seconds);
        let status = binding.status.clone().unwrap_or_default();
        let mut since = unhealthy.lock();
        for item in &status.aggregated_status {
            let key = (uid.clone(), item.cluster_name.clone());
            let placed = spec.clusters.iter().any(|c| c.name == item.cluster_name);
            if !placed || item.health.as_deref() != Some("Unhealthy") {
                since.remove(&key);
                continue;
            }
            if spec.evicting(&item.cluster_name).is_some() {
                continue;
            }
            let first = *since.entry(key).or_insert(now);
            let at = time::after(first, toleration);
            if at > now {
                earliest(&mut next, at);
                continue;
            }
            // Its only cluster is left only for another that fits.
            if spec.clusters.len() == 1 && !can_leave(ctx, &binding, &item.cluster_name, now) {
                continue;
            }
            evict(
                &mut tasks,
                &mut next,
                Eviction {
                    from: &item.cluster_name,
                    purge_mode: app.purge_mode.as_deref(),
                    reason: "ApplicationFailure",
                    producer: "ApplicationFailover",
                    message: format!(
                        "the workload has been Unhealthy for over {}s",
                        toleration.as_secs()
                    ),
                    grace_period_seconds: app.grace_period_seconds,
                    preservation: app.state_preservation.as_ref(),
                }
                .task(&binding, now),
            );
        }
    }
    let grace = ctx.options.graceful_eviction_timeout;
    tasks.retain(|t| match decide::task_ends(t, &binding, grace, now) {
        Some(at) if at <= now => {
            info!(binding = %binding.name_any(), cluster = %t.from_cluster, "eviction done; the old Work goes");
            false
        }
        Some(at) => {
            earliest(&mut next, at);
            true
        }
        None => true,
    });
    let mut reschedule = None;
    if let Some(back) = failover
        .as_ref()
        .and_then(|f| f.return_when_recovered.as_ref())
        && tasks.is_empty()
    {
        match return_due(ctx, &binding, back) {
            Some(at) if at <= now => {
                info!(binding = %binding.name_any(), "the preferred clusters are back; dividing afresh");
                reschedule = Some(now.to_string());
            }
            Some(at) => earliest(&mut next, at),
            None => {}
        }
    }
    if tasks != spec.graceful_eviction_tasks || reschedule.is_some() {
        // None left: the field goes, as Karmada leaves it.
        let tasks = if tasks.is_empty() {
            serde_json::Value::Null
        } else {
            json!(tasks)
        };
        let mut patch = json!({
            "metadata": {"resourceVersion": binding.resource_version()},
            "spec": {"gracefulEvictionTasks": tasks},
        });
        if let Some(at) = reschedule {
            patch["spec"]["rescheduleTriggeredAt"] = json!(at);
        }
        binding_api(ctx, &binding)
            .patch(
                &binding.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(next.map(|at| time::until(now, at) + Duration::from_millis(100)))
}
