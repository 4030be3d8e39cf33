//! The container runtime seam of the member's kubelet, shaped like the
//! CRI: the kubelet asks a [`Runtime`] to run a pod's sandbox and its
//! containers and to report how they are ([`PodRun`]), then maps that
//! onto the PodStatus it writes; the runtime knows nothing of statuses.
//! A runtime wakes the kubelet through [`Events`] when something changes
//! (a process exits), or asks to be asked again after a while
//! ([`PodRun::recheck`]). Pod addresses come from
//! [`crate::kubelet::addressing::PodAddresses`], apart from both.
//!
//! Two runtimes: `sim` (no processes; timers and annotations) and
//! `netns` (real processes in Linux network namespaces).

pub mod config;
pub mod netns;
pub mod sim;

use std::net::Ipv4Addr;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use tokio::sync::mpsc;

use crate::pod::Pod;

/// Where a pod's sandbox goes: its node and the address it was given.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub node: String,
    /// The pod's IP, from the node's block, and the block itself.
    pub ip: Option<(Ipv4Addr, ipnet::Ipv4Net)>,
}

/// One container's state, as the CRI reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum ContainerState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        since: Time,
    },
    Terminated {
        code: i32,
        reason: String,
        message: Option<String>,
        started: Time,
        finished: Time,
    },
}

/// One container of a pod, as its runtime sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerRun {
    pub name: String,
    pub state: ContainerState,
    /// The state before the last restart.
    pub last: Option<ContainerState>,
    pub restarts: i32,
    /// Whether its readiness probe (if any) passes.
    pub ready: bool,
    /// Whether its startup probe (if any) has passed.
    pub started: bool,
    /// The runtime's ID for the container, with its scheme.
    pub id: Option<String>,
}

/// Where the pod as a whole is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// The sandbox or the containers are being made.
    Pending,
    Running,
    /// Every container exited and none will restart.
    Succeeded,
    Failed,
}

/// What a runtime reports of one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRun {
    pub phase: PodPhase,
    /// Whether the sandbox (network, mounts) is up.
    pub sandbox_ready: bool,
    /// Whether every init container has completed.
    pub initialized: bool,
    pub init_containers: Vec<ContainerRun>,
    pub containers: Vec<ContainerRun>,
    /// The ephemeral containers `kubectl debug` added.
    pub ephemeral_containers: Vec<ContainerRun>,
    /// Ask again after this long even without an event.
    pub recheck: Option<Duration>,
}

/// Wakes the kubelet for a pod (namespace/name) whose runtime state changed.
#[derive(Clone)]
pub struct Events(mpsc::UnboundedSender<String>);

impl Events {
    pub fn channel() -> (Events, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Events(tx), rx)
    }

    pub fn changed(&self, pod_key: &str) {
        let _ = self.0.send(pod_key.to_string());
    }
}

/// What the kubelet asks of a container runtime.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// Brings `pod`'s sandbox and containers towards its spec (creating
    /// them when it is new) and reports how they are.
    async fn sync(&self, pod: &Pod, sandbox: &Sandbox) -> PodRun;
    /// Stops a pod's containers (within `grace`, else the pod's own
    /// terminationGracePeriodSeconds) and removes its sandbox; returns
    /// once nothing of it runs.
    async fn remove(&self, pod_key: &str, grace: Option<Duration>);
    /// What each of `pods`' running containers has used so far, in the
    /// same order: None for a pod it runs nothing of. Read by the
    /// member's metrics (`metrics.rs`), which turns the CPU counters into
    /// rates.
    fn usage(&self, pods: &[std::sync::Arc<Pod>]) -> Vec<Option<Vec<ContainerUsage>>> {
        vec![None; pods.len()]
    }
}

/// A running container's use of resources, as a kubelet's summary API
/// reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUsage {
    pub name: String,
    /// When the container started: its CPU counter was zero then.
    pub started: jiff::Timestamp,
    /// When these figures were read.
    pub at: jiff::Timestamp,
    /// CPU time used since it started (all its processes).
    pub cpu: Duration,
    /// Memory in use now (resident set of its processes), bytes.
    pub memory_bytes: u64,
}

/// The key runtimes know a pod by.
pub fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// A runtime with the events it sends, as the kubelet takes them.
pub struct RuntimeHandle {
    pub runtime: std::sync::Arc<dyn Runtime>,
    pub events: mpsc::UnboundedReceiver<String>,
}

impl RuntimeHandle {
    /// The simulated runtime for a cluster of `config`'s shape.
    pub fn sim(config: &crate::config::SimConfig) -> RuntimeHandle {
        let (_events, rx) = Events::channel();
        RuntimeHandle {
            runtime: std::sync::Arc::new(sim::SimRuntime::new(
                config.pod_startup,
                config.job_duration,
            )),
            events: rx,
        }
    }
}
