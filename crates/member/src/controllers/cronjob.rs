//! The CronJob controller (kube-controller-manager's `cronjob`): at each
//! time the schedule names (in `timeZone`, else this process's zone) it
//! creates a Job from `jobTemplate`, named `<cronjob>-<minutes since the
//! epoch>` and owned by the CronJob, unless the policy says otherwise:
//! `concurrencyPolicy` Forbid skips a time while a Job runs, Replace
//! deletes the running ones first; a time later than its
//! `startingDeadlineSeconds` is missed; `suspend` stops it. It reports the
//! running Jobs (`status.active`), `lastScheduleTime` and
//! `lastSuccessfulTime`, and keeps `successfulJobsHistoryLimit` finished
//! Jobs (3) and `failedJobsHistoryLimit` failed ones (1), deleting older
//! ones. As upstream, only the most recent missed time runs after a pause.

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::schedule::Schedule;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::job::finished;
use crate::controllers::status;
use crate::informer::owner_ref;

const COMPONENT: &str = "cronjob-controller";

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.cronjobs.own_triggers(|_| true);
    let from_jobs = inf
        .jobs
        .triggers(|c| owner_ref::<Job, CronJob>(c.object()).into_iter().collect());
    run_controller(
        "cronjob",
        cluster.cronjobs.clone(),
        vec![boxed(own), boxed(from_jobs)],
        cluster,
        2,
        reconcile,
    )
}

fn succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        namespace: job.namespace(),
        name: Some(job.name_any()),
        uid: job.uid(),
        ..Default::default()
    }
}

/// When the Job started (its start time, else when it was made), for
/// ordering the history.
fn started(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(job.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

async fn reconcile(cron: Arc<CronJob>, cluster: Arc<Cluster>) -> Result<Action> {
    if cron.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = cron.namespace().unwrap_or_default();
    let name = cron.name_any();
    let uid = cron.uid().unwrap_or_default();
    let spec = cron.spec.clone().unwrap_or_default();
    let events = cluster.recorder(COMPONENT);
    let me = cron.object_ref(&());
    let client = cluster.clients.controller_manager.clone();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let old = cron.status.clone().unwrap_or_default();

    let mut owned: Vec<Arc<Job>> = cluster.jobs_by_owner.get(&uid);
    owned.sort_by_key(|j| started(j));

    // What ended since the last look.
    let was_active = |j: &Job| {
        old.active
            .iter()
            .flatten()
            .any(|r| r.uid.as_deref() == j.uid().as_deref())
    };
    let mut last_successful = old.last_successful_time.clone();
    for j in owned.iter().filter(|j| finished(j) && was_active(j)) {
        let outcome = if succeeded(j) { "Complete" } else { "Failed" };
        events.emit(
            &me,
            "SawCompletedJob",
            format!("Saw completed job: {}, condition: {outcome}", j.name_any()),
        );
    }
    for j in owned.iter().filter(|j| succeeded(j)) {
        let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
        if done.as_ref().map(|t| t.0) > last_successful.as_ref().map(|t| t.0) {
            last_successful = done;
        }
    }

    // The history: the oldest finished Jobs beyond the limits go.
    let ended: Vec<(bool, bool)> = owned.iter().map(|j| (finished(j), succeeded(j))).collect();
    let limits = (
        spec.successful_jobs_history_limit,
        spec.failed_jobs_history_limit,
    );
    for i in beyond_history(&ended, limits) {
        delete(&jobs_api, &owned[i], &events, &me).await;
    }
    let mut active: Vec<ObjectReference> = owned
        .iter()
        .filter(|j| !finished(j) && j.metadata.deletion_timestamp.is_none())
        .map(|j| reference(j))
        .collect();
    let mut last_schedule = old.last_schedule_time.clone();

    let schedule = match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
        Ok(s) => Some(s),
        Err(e) => {
            events.emit(
                &me,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", spec.schedule),
            );
            None
        }
    };
    let now = Timestamp::now();
    let mut wake = None;
    if let Some(schedule) = schedule.as_ref().filter(|_| !spec.suspend.unwrap_or(false)) {
        let since = last_schedule
            .as_ref()
            .or(cron.metadata.creation_timestamp.as_ref())
            .map_or(now, |t| t.0);
        let due = due(schedule, since, spec.starting_deadline_seconds, now);
        wake = schedule.next_after(now);
        // A time whose Job exists was handled (by an earlier look whose
        // writes the cache does not show yet, or before a restart).
        let made = |at: Timestamp| {
            let name = job_name(&cron, at);
            owned.iter().any(|j| j.name_any() == name)
        };
        if let Some(at) = due.filter(|at| made(*at)) {
            if last_schedule.as_ref().is_none_or(|t| t.0 < at) {
                last_schedule = Some(Time(at));
            }
        } else if let Some(at) = due {
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            if !active.is_empty() && policy == "Forbid" {
                events.emit(
                    &me,
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
                );
            } else {
                if policy == "Replace" {
                    for j in owned.iter().filter(|j| !finished(j)) {
                        delete(&jobs_api, j, &events, &me).await;
                    }
                    active.clear();
                }
                match create(&jobs_api, &cron, &spec, schedule, at).await {
                    Ok(Some(job)) => {
                        events.emit(
                            &me,
                            "SuccessfulCreate",
                            format!("Created job {}", job.name_any()),
                        );
                        active.push(reference(&job));
                    }
                    // Made at this time already (a retry, or a restart).
                    Ok(None) => {}
                    Err(e) => {
                        events.emit(&me, "FailedCreate", format!("Error creating job: {e}"));
                        return Ok(Action::requeue(Duration::from_secs(5)));
                    }
                }
                last_schedule = Some(Time(at));
            }
        }
    }

    active.sort_by(|a, b| a.name.cmp(&b.name));
    let mut desired = json!({});
    if !active.is_empty() {
        desired["active"] = json!(active);
    }
    if let Some(t) = &last_schedule {
        desired["lastScheduleTime"] = json!(t);
    }
    if let Some(t) = &last_successful {
        desired["lastSuccessfulTime"] = json!(t);
    }
    if let Some(patch) = status::patch(&cron.status, &desired) {
        let api: Api<CronJob> = Api::namespaced(client, &ns);
        status::write(&api, &name, &patch).await?;
    }
    Ok(match wake {
        Some(at) => {
            let wait = Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or_default();
            // Just past the time, so that it is due when looked at.
            Action::requeue(wait + Duration::from_millis(100))
        }
        None => Action::await_change(),
    })
}

/// The Job for the time `at`, or `None` when it exists already.
/// The time a Job is due for at `now`, if any: the most recent the
/// schedule names after `since` (the last scheduled time, else the
/// CronJob's creation) and within `startingDeadlineSeconds` of now. Only
/// it runs, however many were missed, as upstream.
fn due(
    schedule: &Schedule,
    since: Timestamp,
    deadline_seconds: Option<i64>,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut earliest = since;
    if let Some(deadline) = deadline_seconds {
        let window = now
            .checked_sub(SignedDuration::from_secs(deadline.max(0)))
            .unwrap_or(Timestamp::MIN);
        earliest = earliest.max(window);
    }
    schedule.latest_at_or_before(now).filter(|t| *t > earliest)
}

/// Which finished Jobs (`(finished, succeeded)` each, oldest first) are
/// beyond the history limits `(successful, failed)`: the oldest of each
/// kind past its limit. No limit keeps all; a negative one is ignored.
fn beyond_history(
    jobs: &[(bool, bool)],
    (successful, failed): (Option<i32>, Option<i32>),
) -> Vec<usize> {
    let mut gone = Vec::new();
    for (limit, want) in [(successful, true), (failed, false)] {
        let Some(keep) = limit.and_then(|k| usize::try_from(k).ok()) else {
            continue;
        };
        let done: Vec<usize> = (0..jobs.len())
            .filter(|&i| jobs[i].0 && jobs[i].1 == want)
            .collect();
        let extra = done.len().saturating_sub(keep);
        gone.extend(done.into_iter().take(extra));
    }
    gone.sort_unstable();
    gone
}

/// The Job of the time `at`: named after its minute since the epoch.
fn job_name(cron: &CronJob, at: Timestamp) -> String {
    format!("{}-{}", cron.name_any(), at.as_second().div_euclid(60))
}

async fn create(
    api: &Api<Job>,
    cron: &CronJob,
    spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    schedule: &Schedule,
    at: Timestamp,
) -> std::result::Result<Option<Job>, kube::Error> {
    let template = &spec.job_template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(
        "batch.kubernetes.io/cronjob-scheduled-timestamp".into(),
        schedule.rfc3339_in_zone(at),
    );
    let owner = crate::podutil::controller_ref(cron);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(cron, at),
            "namespace": cron.namespace(),
            "labels": meta.labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": template.spec,
    }))
    .map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &job).await {
        Ok(j) => Ok(Some(j)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

async fn delete(
    api: &Api<Job>,
    job: &Job,
    events: &crate::events::EventRecorder,
    me: &ObjectReference,
) {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(&job.name_any(), &params).await {
        Ok(_) => events.emit(
            me,
            "SuccessfulDelete",
            format!("Deleted job {}", job.name_any()),
        ),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => events.emit(me, "FailedDelete", format!("Deleted job: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn only_the_latest_missed_time_runs_within_the_deadline() {
        let hourly = Schedule::parse("0 * * * *", Some("UTC")).unwrap();
        let now = at("2026-12-01T10:20:00Z");
        // Missed since 07:30: 10:00 alone is due.
        assert_eq!(
            due(&hourly, at("2026-12-01T07:30:00Z"), None, now),
            Some(at("2026-12-01T10:00:00Z"))
        );
        // Run already: nothing more until 11:00.
        assert_eq!(due(&hourly, at("2026-12-01T10:00:00Z"), None, now), None);
        // 20 minutes late, with 10 minutes allowed: missed.
        assert_eq!(
            due(&hourly, at("2026-12-01T07:30:00Z"), Some(600), now),
            None
        );
        assert_eq!(
            due(&hourly, at("2026-12-01T07:30:00Z"), Some(1800), now),
            Some(at("2026-12-01T10:00:00Z"))
        );
        // In a zone: 09:00 in Shanghai is 01:00 UTC.
        let nine = Schedule::parse("0 9 * * *", Some("Asia/Shanghai")).unwrap();
        assert_eq!(
            due(&nine, at("2026-11-30T12:00:00Z"), None, now),
            Some(at("2026-12-01T01:00:00Z"))
        );
    }

    #[test]
    fn the_oldest_finished_jobs_beyond_the_limits_go() {
        // Oldest first: ok, failed, ok, running, failed, ok.
        let jobs = [
            (true, true),
            (true, false),
            (true, true),
            (false, false),
            (true, false),
            (true, true),
        ];
        // Upstream's defaults: 3 successful, 1 failed.
        assert_eq!(beyond_history(&jobs, (Some(3), Some(1))), [1]);
        assert_eq!(beyond_history(&jobs, (Some(1), Some(0))), [0, 1, 2, 4]);
        assert!(beyond_history(&jobs, (None, Some(-1))).is_empty());
    }
}
