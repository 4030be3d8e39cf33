//! The simulated runtime: no processes. A new pod's containers are
//! "created" for `--pod-startup`, then run; pods that run to completion
//! (restartPolicy Never or OnFailure) exit after their run duration
//! (`--job-duration`, or the pod's `simulation.flotilla.io/run-duration`)
//! with `simulation.flotilla.io/exit-code` (0 by default). It keeps no
//! state of its own beyond the current startups: what a pod has been
//! through is read back from its recorded status, so a restarted member
//! carries on where it was.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use parking_lot::Mutex;

use async_trait::async_trait;

use super::{ContainerRun, ContainerState, PodPhase, PodRun, Runtime, Sandbox, key};
use crate::pod::Pod;
use crate::podutil;

pub const RUN_DURATION: &str = "simulation.flotilla.io/run-duration";
pub const EXIT_CODE: &str = "simulation.flotilla.io/exit-code";

pub struct SimRuntime {
    startup: Duration,
    job_duration: Duration,
    /// When this process began creating each pod's containers: startTime
    /// has whole-second precision, too coarse for sub-second startups.
    creating: Mutex<HashMap<String, Instant>>,
}

impl SimRuntime {
    pub fn new(startup: Duration, job_duration: Duration) -> Self {
        SimRuntime {
            startup,
            job_duration,
            creating: Mutex::default(),
        }
    }

    /// How long the pod's containers run before exiting, if they do.
    fn run_duration(&self, pod: &Pod) -> Option<Duration> {
        let policy = pod
            .spec
            .as_ref()?
            .restart_policy
            .as_deref()
            .unwrap_or("Always");
        if policy == "Always" {
            return None;
        }
        Some(
            annotation(pod, RUN_DURATION)
                .and_then(|d| humantime::parse_duration(d).ok())
                .unwrap_or(self.job_duration),
        )
    }
}

fn annotation<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(name)
        .map(String::as_str)
}

/// When the pod's containers started running, as its status records it.
fn container_started(pod: &Pod) -> Option<Time> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
}

/// The pod's containers (its ephemeral ones with `ephemeral`), all in
/// `state`.
fn containers(
    pod: &Pod,
    state: &ContainerState,
    running: bool,
    ephemeral: bool,
) -> Vec<ContainerRun> {
    let uid = pod.uid().unwrap_or_default();
    let names: Vec<String> = match &pod.spec {
        Some(s) if ephemeral => s
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect(),
        Some(s) => s.containers.iter().map(|c| c.name.clone()).collect(),
        None => Vec::new(),
    };
    names
        .into_iter()
        .map(|name| ContainerRun {
            id: (!matches!(state, ContainerState::Waiting { .. }))
                .then(|| format!("flotilla://{uid}-{name}")),
            name,
            state: state.clone(),
            last: None,
            restarts: 0,
            ready: running,
            started: running,
        })
        .collect()
}

fn report(pod: &Pod, phase: PodPhase, state: ContainerState, recheck: Option<Duration>) -> PodRun {
    let running = phase == PodPhase::Running;
    PodRun {
        phase,
        sandbox_ready: running,
        initialized: true,
        init_containers: Vec::new(),
        containers: containers(pod, &state, running, false),
        ephemeral_containers: containers(pod, &state, running, true),
        recheck,
    }
}

fn creating(pod: &Pod, remaining: Duration) -> PodRun {
    let waiting = ContainerState::Waiting {
        reason: "ContainerCreating".into(),
        message: None,
    };
    report(pod, PodPhase::Pending, waiting, Some(remaining))
}

#[async_trait]
impl Runtime for SimRuntime {
    async fn sync(&self, pod: &Pod, _sandbox: &Sandbox) -> PodRun {
        let started = pod.status.as_ref().and_then(|s| s.start_time.clone());
        let since = match (started, podutil::phase(pod)) {
            (None, _) => {
                self.creating.lock().insert(key(pod), Instant::now());
                return creating(pod, self.startup);
            }
            (Some(t), "Pending") => {
                let elapsed = match self.creating.lock().get(&key(pod)) {
                    Some(at) => at.elapsed(),
                    None => podutil::since(&t),
                };
                if elapsed < self.startup {
                    return creating(pod, self.startup - elapsed);
                }
                self.creating.lock().remove(&key(pod));
                podutil::now()
            }
            (Some(_), _) => container_started(pod).unwrap_or_else(podutil::now),
        };
        let running = ContainerState::Running {
            since: since.clone(),
        };
        let Some(duration) = self.run_duration(pod) else {
            return report(pod, PodPhase::Running, running, None);
        };
        let ran = podutil::since(&since);
        if ran < duration {
            return report(pod, PodPhase::Running, running, Some(duration - ran));
        }
        let code = annotation(pod, EXIT_CODE)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let (phase, reason) = if code == 0 {
            (PodPhase::Succeeded, "Completed")
        } else {
            (PodPhase::Failed, "Error")
        };
        let terminated = ContainerState::Terminated {
            code,
            reason: reason.into(),
            message: None,
            started: since,
            finished: podutil::now(),
        };
        report(pod, phase, terminated, None)
    }

    async fn remove(&self, pod_key: &str, _grace: Option<Duration>) {
        self.creating.lock().remove(pod_key);
    }

    /// A simulated container uses what it requests: CPU at its request's
    /// rate since it started (nothing without a request), memory its
    /// request, as the scheduler counts it. `kubectl top` and an HPA see
    /// the same figures the pods were placed by.
    fn usage(&self, pods: &[std::sync::Arc<Pod>]) -> Vec<Option<Vec<super::ContainerUsage>>> {
        let now = jiff::Timestamp::now();
        pods.iter()
            .map(|pod| {
                if podutil::phase(pod) != "Running" {
                    return None;
                }
                let started = container_started(pod)?.0;
                let elapsed = u128::try_from(now.duration_since(started).as_nanos()).unwrap_or(0);
                let containers = pod.spec.as_ref()?.containers.iter().map(move |c| {
                    let millis = u128::try_from(c.resources.cpu_request.unwrap_or(0)).unwrap_or(0);
                    let cpu = u64::try_from(millis * elapsed / 1000).unwrap_or(u64::MAX);
                    super::ContainerUsage {
                        name: c.name.clone(),
                        started,
                        at: now,
                        cpu: Duration::from_nanos(cpu),
                        memory_bytes: c.resources.memory_request.unwrap_or(0).max(0) as u64,
                    }
                });
                Some(containers.collect())
            })
            .collect()
    }
}
