//! The Job controller: runs up to `parallelism` pods at a time until
//! `completions` have succeeded (or, without completions, until one has
//! and none is active), fails the Job past `backoffLimit` failed pods or
//! `activeDeadlineSeconds`, and reports active, ready, succeeded, failed,
//! startTime, completionTime and the SuccessCriteriaMet/Complete or
//! FailureTarget/Failed conditions as upstream does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::pod::Pod;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::pods::PodControl;
use crate::controllers::status;
use crate::informer::owner_ref;
use crate::podutil;

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.jobs.own_triggers(|_| true);
    let from_pods = inf
        .pods
        .triggers(|c| owner_ref::<Pod, Job>(c.object()).into_iter().collect());
    let control = Arc::new(PodControl::new(cluster.clone(), "job-controller"));
    run_controller(
        "job",
        cluster.jobs.clone(),
        vec![boxed(own), boxed(from_pods)],
        cluster,
        4,
        move |job, cluster| reconcile(job, cluster, control.clone()),
    )
}

/// Whether the Job has ended (Complete or Failed).
pub(crate) fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True")
        })
}

async fn reconcile(
    job: Arc<Job>,
    cluster: Arc<Cluster>,
    control: Arc<PodControl>,
) -> Result<Action> {
    if job.metadata.deletion_timestamp.is_some() || finished(&job) {
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{ns}/{name}");
    let spec = job.spec.clone().unwrap_or_default();
    let pods = cluster.owned_pods(&job.uid().unwrap_or_default());
    let active: Vec<&Arc<Pod>> = pods.iter().filter(|p| podutil::is_active(p)).collect();
    let succeeded = pods
        .iter()
        .filter(|p| podutil::phase(p) == "Succeeded")
        .count() as i32;
    let failed = pods
        .iter()
        .filter(|p| podutil::phase(p) == "Failed")
        .count() as i32;
    let ready = active.iter().filter(|p| podutil::is_ready(p)).count() as i32;
    let old = job.status.clone().unwrap_or_default();
    let now = podutil::now();
    let start_time = old.start_time.clone().unwrap_or_else(|| now.clone());
    let suspended = spec.suspend.unwrap_or(false);
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);

    let complete = match spec.completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };
    let deadline = spec
        .active_deadline_seconds
        .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let past_deadline = deadline.is_some_and(|d| podutil::since(&start_time) >= d);
    let failure = if failed > backoff_limit {
        Some((
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if past_deadline {
        Some((
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };

    let mut conditions: Vec<Value> = Vec::new();
    let mut completion_time = None;
    let had = |kind: &str| {
        old.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    // The Events upstream's controller records when a Job ends.
    let events = cluster.recorder("job-controller");
    if let Some((reason, message)) = failure.filter(|_| !had("Failed")) {
        events.emit(&job.object_ref(&()), reason, message.to_string());
    } else if complete && !had("Complete") {
        events.emit(&job.object_ref(&()), "Completed", "Job completed".into());
    }
    if let Some((reason, message)) = failure {
        let doomed: Vec<String> = active.iter().map(|p| p.name_any()).collect();
        if !doomed.is_empty() {
            control
                .delete(&key, &job.object_ref(&()), &ns, doomed)
                .await?;
        }
        for kind in ["FailureTarget", "Failed"] {
            conditions.push(
                json!({"type": kind, "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": now, "lastTransitionTime": now}),
            );
        }
    } else if complete {
        for kind in ["SuccessCriteriaMet", "Complete"] {
            conditions.push(
                json!({"type": kind, "status": "True", "reason": "CompletionsReached",
                                   "message": "Reached expected number of succeeded pods",
                                   "lastProbeTime": now, "lastTransitionTime": now}),
            );
        }
        completion_time = Some(now.clone());
    } else if control.caught_up(&key, &ns) {
        let remaining = spec
            .completions
            .map(|c| (c - succeeded).max(0))
            .unwrap_or(parallelism);
        let want = if suspended {
            0
        } else {
            parallelism.min(remaining)
        };
        let have = active.len() as i32;
        if have < want {
            let template = spec.template.clone();
            let pods = (have..want)
                .map(|_| {
                    podutil::pod_from_template(&template, job.as_ref(), None, &BTreeMap::new())
                })
                .collect();
            control
                .create(&key, &job.object_ref(&()), &ns, pods)
                .await?;
        } else if have > want {
            let doomed = active
                .iter()
                .take((have - want) as usize)
                .map(|p| p.name_any())
                .collect();
            control
                .delete(&key, &job.object_ref(&()), &ns, doomed)
                .await?;
        }
    }
    if suspended && failure.is_none() && !complete {
        conditions.push(json!({"type": "Suspended", "status": "True", "reason": "JobSuspended",
                               "message": "Job suspended", "lastProbeTime": now, "lastTransitionTime": now}));
    }
    let mut status = json!({
        "startTime": if suspended && old.start_time.is_none() { Value::Null } else { json!(start_time) },
        "active": if failure.is_some() || complete { 0 } else { active.len() as i32 },
        "ready": ready,
        "succeeded": succeeded,
        "failed": failed,
        "terminating": 0,
        "uncountedTerminatedPods": {},
    });
    if !conditions.is_empty() {
        // Keep transition times of conditions already reported.
        let previous = serde_json::to_value(&old.conditions).unwrap_or(Value::Null);
        for c in conditions.iter_mut() {
            if let Some(p) = previous.as_array().and_then(|a| {
                a.iter()
                    .find(|p| p["type"] == c["type"] && p["status"] == c["status"])
            }) {
                c["lastTransitionTime"] = p["lastTransitionTime"].clone();
                c["lastProbeTime"] = p["lastProbeTime"].clone();
            }
        }
        status["conditions"] = json!(conditions);
    }
    if let Some(t) = completion_time {
        status["completionTime"] = json!(t);
    }
    let current = serde_json::to_value(&job.status).unwrap_or(Value::Null);
    let changed = status.as_object().is_some_and(|o| {
        o.iter().any(|(k, v)| {
            current.get(k).unwrap_or(&Value::Null) != v
                && !(v == &json!(0) && current.get(k).is_none())
        })
    });
    if changed {
        let api: Api<Job> = Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
        if !status::write(&api, &name, &json!({"status": status})).await? {
            return Ok(Action::await_change());
        }
    }
    Ok(match deadline {
        Some(d) if failure.is_none() && !complete => Action::requeue(
            d.saturating_sub(podutil::since(&start_time))
                .max(Duration::from_millis(100)),
        ),
        _ => Action::await_change(),
    })
}
