//! The CronFederatedHPA controller (Karmada's
//! `cronFederatedHorizontalPodAutoscaler`): each rule fires on its
//! schedule, in its time zone, and sets either a FederatedHPA's bounds
//! (`targetMinReplicas`, `targetMaxReplicas`) or a workload's replicas
//! through the template's `/scale` (`targetReplicas`). The status keeps
//! per rule the next time it fires (none while suspended) and its latest
//! successful and failed executions, newest first, as many as the rule's
//! history limits.
//!
//! As Karmada's, the plan of each rule lives in memory: a rule changed or
//! added is planned afresh from now, and a firing missed while the
//! control plane was down is not caught up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tracing::info;

use super::api::{
    API_VERSION, CronFederatedHPA, CronFederatedHPARule, ExecutionHistory, FailedExecution,
    FederatedHPA, SuccessfulExecution,
};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::queue::{self, Next, WorkQueue};
use flotilla_client::events;
use flotilla_core::schedule::Schedule;

const COMPONENT: &str = "cronfederatedhpa-controller";
/// The history limits' default (the CRD defaults them too).
const HISTORY_LIMIT: i32 = 3;

/// A rule as planned: the rule it was planned from, and when it fires
/// next (None: suspended, or a schedule that never fires again).
struct Plan {
    rule: CronFederatedHPARule,
    schedule: Option<Schedule>,
    next: Option<Timestamp>,
}

#[derive(Default)]
struct Plans {
    /// By CronFederatedHPA (its uid: one deleted and made again is
    /// planned afresh), then by rule name.
    rules: HashMap<String, HashMap<String, Plan>>,
    /// The target each CronFederatedHPA's rules were planned for.
    targets: HashMap<String, String>,
}

struct State {
    ctx: Ctx,
    plans: Mutex<Plans>,
    store: Store<CronFederatedHPA>,
}

/// How many objects are reconciled at once (a rule firing is one scale).
const WORKERS: usize = 4;

pub async fn run(ctx: Ctx) {
    let api: Api<CronFederatedHPA> = Api::all(ctx.hub.clone());
    let queue = WorkQueue::named(ctx.metrics.queue("cronfederatedhpa-controller"));
    let (store, _watch) = queue::queue_touched(api, watcher::Config::default(), queue.clone());
    let state = Arc::new(State {
        ctx,
        plans: Mutex::default(),
        store: store.clone(),
    });
    queue::reconcile_stored(queue, store, WORKERS, move |cron| {
        let state = state.clone();
        async move { state.reconcile(&cron).await }
    })
    .await;
}

/// A time as the status writes it (whole seconds, as Karmada's).
fn stamp(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// What one rule's firing did.
enum Outcome {
    Applied,
    Failed(String),
}

impl State {
    async fn reconcile(&self, cron: &CronFederatedHPA) -> Result<Next, Error> {
        let key = flotilla_autoscaling::memory_key(&cron.metadata);
        {
            // What deleted CronFederatedHPAs planned goes.
            let mut plans = self.plans.lock();
            if plans.rules.len() >= self.store.state().len() {
                let live: std::collections::HashSet<String> = self
                    .store
                    .state()
                    .iter()
                    .map(|c| flotilla_autoscaling::memory_key(&c.metadata))
                    .collect();
                plans.rules.retain(|k, _| live.contains(k));
                plans.targets.retain(|k, _| live.contains(k));
            }
        }
        if cron.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let target = serde_json::to_string(&cron.spec.scale_target_ref).unwrap_or_default();
        let now = Timestamp::now();
        let mut status = cron.status.clone().unwrap_or_default();
        let mut due = Vec::new();
        let mut failed_to_start = Vec::new();
        {
            let mut guard = self.plans.lock();
            let plans = &mut *guard;
            // A new target: every rule is planned afresh (history kept).
            if plans.targets.insert(key.clone(), target.clone()) != Some(target) {
                plans.rules.remove(&key);
            }
            let rules = plans.rules.entry(key.clone()).or_default();
            rules.retain(|name, _| cron.spec.rules.iter().any(|r| &r.name == name));
            for rule in &cron.spec.rules {
                let unchanged = rules.get(&rule.name).is_some_and(|p| p.rule == *rule);
                if !unchanged {
                    let schedule = match Schedule::parse(&rule.schedule, rule.time_zone.as_deref())
                    {
                        Ok(s) => Some(s),
                        Err(e) => {
                            failed_to_start.push(format!(
                                "rule {}: schedule {:?}: {e}",
                                rule.name, rule.schedule
                            ));
                            None
                        }
                    };
                    let suspended = rule.suspend.unwrap_or(false);
                    let next = schedule
                        .as_ref()
                        .filter(|_| !suspended)
                        .and_then(|s| s.next_after(now));
                    rules.insert(
                        rule.name.clone(),
                        Plan {
                            rule: rule.clone(),
                            schedule,
                            next,
                        },
                    );
                }
                if let Some(plan) = rules.get(&rule.name)
                    && let Some(next) = plan.next
                    && next <= now
                {
                    due.push((rule.clone(), next));
                }
            }
        }
        for message in failed_to_start {
            self.event(cron, ("Warning", "StartRuleFailed", &message))
                .await;
        }
        // Fire what is due, one rule after another (they may share a
        // target, and the later one in the spec wins).
        let mut fired = Vec::new();
        for (rule, scheduled) in due {
            let outcome = self.fire(cron, &rule).await;
            if let Outcome::Failed(message) = &outcome {
                self.event(cron, ("Warning", "ScaleFailed", message)).await;
            }
            info!(namespace = %cron.namespace().unwrap_or_default(), cron = %cron.name_any(), rule = %rule.name, ok = matches!(outcome, Outcome::Applied), "rule fired");
            fired.push((rule, scheduled, outcome));
        }
        let executed = Timestamp::now();
        let wake = {
            let mut plans = self.plans.lock();
            let rules = plans.rules.entry(key.clone()).or_default();
            for (rule, _, _) in &fired {
                if let Some(plan) = rules.get_mut(&rule.name) {
                    plan.next = plan
                        .schedule
                        .as_ref()
                        .and_then(|s| s.next_after(executed.max(now)));
                }
            }
            // The status: one history per rule of the spec, in its order.
            let mut histories = Vec::new();
            for rule in &cron.spec.rules {
                let mut history = status
                    .execution_histories
                    .iter()
                    .find(|h| h.rule_name == rule.name)
                    .cloned()
                    .unwrap_or_else(|| ExecutionHistory {
                        rule_name: rule.name.clone(),
                        ..Default::default()
                    });
                if let Some((rule, scheduled, outcome)) =
                    fired.iter().find(|(r, _, _)| r.name == rule.name)
                {
                    record(&mut history, rule, *scheduled, executed, outcome);
                }
                history.next_execution_time = rules.get(&rule.name).and_then(|p| p.next).map(stamp);
                histories.push(history);
            }
            status.execution_histories = histories;
            rules.values().filter_map(|p| p.next).min()
        };
        if cron.status.as_ref() != Some(&status) {
            let api: Api<CronFederatedHPA> =
                Api::namespaced(self.ctx.hub.clone(), &cron.namespace().unwrap_or_default());
            match api
                .patch_status(
                    &cron.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => {
                    let message = format!("failed to update the status: {e}");
                    self.event(cron, ("Warning", "UpdateStatusFailed", &message))
                        .await;
                    return Err(e.into());
                }
            }
        }
        Ok(match wake {
            Some(at) => {
                let wait = at.duration_since(Timestamp::now());
                let wait = Duration::try_from(wait).unwrap_or_default();
                // A little past the minute, never before it.
                Some(wait + Duration::from_millis(50))
            }
            None => None,
        })
    }

    /// One firing of `rule`: a FederatedHPA's bounds or a workload's
    /// replicas.
    async fn fire(&self, cron: &CronFederatedHPA, rule: &CronFederatedHPARule) -> Outcome {
        let ns = cron.namespace().unwrap_or_default();
        let target = &cron.spec.scale_target_ref;
        let result = if target.api_version.as_deref() == Some(API_VERSION) {
            if target.kind == "FederatedHPA" {
                self.scale_federated_hpa(&ns, &target.name, rule).await
            } else {
                Err(format!(
                    "CronFederatedHPA({ns}/{}) do not support scale target {API_VERSION}/{}",
                    cron.name_any(),
                    target.kind
                ))
            }
        } else {
            self.scale_workload(
                &ns,
                target.api_version.as_deref(),
                &target.kind,
                &target.name,
                rule,
            )
            .await
        };
        match result {
            Ok(()) => Outcome::Applied,
            Err(message) => Outcome::Failed(message),
        }
    }

    /// Sets the FederatedHPA's bounds, read and written again when
    /// someone else wrote between (its own status writes do).
    async fn scale_federated_hpa(
        &self,
        ns: &str,
        name: &str,
        rule: &CronFederatedHPARule,
    ) -> Result<(), String> {
        let api: Api<FederatedHPA> = Api::namespaced(self.ctx.hub.clone(), ns);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let fhpa = api.get(name).await.map_err(|e| e.to_string())?;
            let mut spec = serde_json::Map::new();
            if let Some(max) = rule.target_max_replicas
                && max != fhpa.spec.max_replicas
            {
                spec.insert("maxReplicas".into(), json!(max));
            }
            if let Some(min) = rule.target_min_replicas
                && Some(min) != fhpa.spec.min_replicas
            {
                spec.insert("minReplicas".into(), json!(min));
            }
            if spec.is_empty() {
                return Ok(());
            }
            let patch =
                json!({"metadata": {"resourceVersion": fhpa.resource_version()}, "spec": spec});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && attempts < 5 => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    async fn scale_workload(
        &self,
        ns: &str,
        api_version: Option<&str>,
        kind: &str,
        name: &str,
        rule: &CronFederatedHPARule,
    ) -> Result<(), String> {
        let replicas = rule.target_replicas.unwrap_or(0);
        let (resource, _) = self
            .ctx
            .hub_kinds
            .resolve(api_version.unwrap_or("v1"), kind)
            .await
            .map_err(|e| e.to_string())?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.ctx.hub.clone(), ns, &resource);
        let scale = api.get_scale(name).await.map_err(|e| e.to_string())?;
        if scale.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) {
            return Ok(());
        }
        let patch = json!({"spec": {"replicas": replicas}});
        api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn event(&self, cron: &CronFederatedHPA, what: (&str, &str, &str)) {
        events::record(&self.ctx.hub, cron.object_ref(&()), COMPONENT, what).await;
    }
}

/// Adds a firing to a rule's history, newest first, keeping as many as
/// the rule's limit.
fn record(
    history: &mut ExecutionHistory,
    rule: &CronFederatedHPARule,
    scheduled: Timestamp,
    executed: Timestamp,
    outcome: &Outcome,
) {
    let keep = |limit: Option<i32>| usize::try_from(limit.unwrap_or(HISTORY_LIMIT)).unwrap_or(0);
    match outcome {
        Outcome::Applied => {
            let entry = SuccessfulExecution {
                schedule_time: stamp(scheduled),
                execution_time: stamp(executed),
                applied_replicas: rule.target_replicas,
                applied_max_replicas: rule.target_max_replicas,
                applied_min_replicas: rule.target_min_replicas,
            };
            let list = &mut history.successful_executions;
            list.insert(0, entry);
            list.truncate(keep(rule.successful_history_limit));
        }
        Outcome::Failed(message) => {
            let entry = FailedExecution {
                schedule_time: stamp(scheduled),
                execution_time: stamp(executed),
                message: message.clone(),
            };
            let list = &mut history.failed_executions;
            list.insert(0, entry);
            list.truncate(keep(rule.failed_history_limit));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histories_are_newest_first_within_their_limits() {
        let rule = CronFederatedHPARule {
            name: "scale-up".into(),
            schedule: "*/1 * * * *".into(),
            target_replicas: Some(5),
            successful_history_limit: Some(2),
            failed_history_limit: Some(0),
            ..Default::default()
        };
        let mut history = ExecutionHistory::default();
        let t = |m: i64| Timestamp::from_second(1_800_000_000 + m * 60).unwrap();
        for m in 0..3 {
            record(&mut history, &rule, t(m), t(m), &Outcome::Applied);
        }
        record(
            &mut history,
            &rule,
            t(4),
            t(4),
            &Outcome::Failed("no".into()),
        );
        let times: Vec<&str> = history
            .successful_executions
            .iter()
            .map(|e| e.schedule_time.as_str())
            .collect();
        assert_eq!(times, [stamp(t(2)), stamp(t(1))]);
        assert_eq!(history.successful_executions[0].applied_replicas, Some(5));
        assert!(history.failed_executions.is_empty());
    }
}
