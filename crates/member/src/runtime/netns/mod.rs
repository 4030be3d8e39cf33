//! The netns runtime: pods are Linux network namespaces on the member's
//! own bridged network (`network`), their containers host processes
//! started by a shim (`shim`) in a private mount namespace with the pod's
//! volumes, environment and user (`spec`), logged and stopped as a
//! kubelet does (`process`). A container without a command runs the
//! stand-in workload (`standin`).
//!
//! It is a test bed, not a container runtime: commands are the host's
//! binaries and run on the host's kernel with its filesystem visible.

pub mod cgroups;
pub mod cluster_dns;
pub mod events;
pub mod host;
pub mod network;
pub mod policy;
pub mod probes;
pub mod process;
pub mod proxy;
pub mod shim;
pub mod spec;
pub mod standin;
pub mod streams;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod as FullPod};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use super::{ContainerRun, ContainerState, Events, PodPhase, PodRun, Runtime, Sandbox};
use crate::config::SimConfig;
use crate::pod::Pod;
use crate::podutil;
use network::{MemberNetwork, NodeNetwork};
use process::Process;
use spec::{ConfigError, PodIdentity, Resolver};

/// What the netns runtime is given.
pub struct NetnsConfig {
    /// The member's data dir; pods live under `pods/`.
    pub data_dir: PathBuf,
    /// The flotilla binary: the shim and the stand-in workload.
    pub helper: PathBuf,
    pub shape: SimConfig,
    /// The cluster DNS address written into pods' resolv.conf.
    pub dns_ip: Ipv4Addr,
    /// Reads pods, ConfigMaps and Secrets, and requests tokens.
    pub client: Client,
}

/// Upstream's CrashLoopBackOff: 10 s doubling to 5 min.
const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How soon a pod whose configuration did not resolve is tried again.
const CONFIG_RETRY: Duration = Duration::from_secs(2);

pub struct NetnsRuntime {
    config: NetnsConfig,
    network: MemberNetwork,
    cgroups: cgroups::Cgroups,
    events: Events,
    recorder: events::KubeletEvents,
    pods: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<PodSandbox>>>>,
}

/// One container of a sandbox.
struct ContainerSlot {
    spec: Container,
    state: ContainerState,
    last: Option<ContainerState>,
    restarts: i32,
    process: Option<Process>,
    /// When the current process started.
    started: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Not restarted before this (CrashLoopBackOff).
    backoff_until: Option<Instant>,
    backoff: Duration,
    /// Its launches so far (for log file names).
    runs: u32,
    /// What the current run's probes say, and their task.
    probes: Option<probes::ProbeState>,
    prober: Option<tokio::task::JoinHandle<()>>,
}

struct PodSandbox {
    uid: String,
    netns: String,
    node: NodeNetwork,
    ip: Ipv4Addr,
    dir: PathBuf,
    pod: FullPod,
    volumes: Option<std::collections::BTreeMap<String, PathBuf>>,
    init: Vec<ContainerSlot>,
    containers: Vec<ContainerSlot>,
    grace: Duration,
    /// Set once the pod has finished (nothing restarts any more).
    done: bool,
}

fn slot(spec: &Container) -> ContainerSlot {
    ContainerSlot {
        spec: spec.clone(),
        state: ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: None,
        },
        last: None,
        restarts: 0,
        process: None,
        started: None,
        backoff_until: None,
        backoff: BACKOFF_START,
        runs: 0,
        probes: None,
        prober: None,
    }
}

impl NetnsRuntime {
    /// Checks the host, removes what an earlier run left and builds the
    /// member's network.
    pub async fn start(config: NetnsConfig, events: Events) -> Result<Arc<NetnsRuntime>, String> {
        let identity = std::fs::canonicalize(&config.data_dir)
            .unwrap_or_else(|_| config.data_dir.clone())
            .to_string_lossy()
            .into_owned();
        let network = MemberNetwork::plan(&config.shape, &identity)?;
        host::check(&format!("{}-probe", network.prefix))
            .await
            .map_err(|e| e.to_string())?;
        let left = network.leftovers();
        if !left.is_empty() {
            info!(
                namespaces = left.len(),
                "removing the pod network an earlier run left"
            );
        }
        network.clean().await;
        // Limits go to whichever cgroup controllers there are; an earlier
        // run's groups are emptied by now (their processes were in its
        // namespaces) and go.
        let cgroups = cgroups::Cgroups::detect(&network.prefix);
        cgroups.destroy();
        let cgroups = cgroups::Cgroups::detect(&network.prefix);
        let pods_dir = config.data_dir.join("pods");
        let _ = std::fs::remove_dir_all(&pods_dir);
        std::fs::create_dir_all(&pods_dir)
            .map_err(|e| format!("cannot make {}: {e}", pods_dir.display()))?;
        // Says which namespaces are this member's, to people and tests.
        let _ = std::fs::write(config.data_dir.join("netns-prefix"), &network.prefix);
        if let Err(e) = network.create().await {
            network.destroy().await;
            return Err(format!("cannot build the member's pod network: {e}"));
        }
        // Services and cluster DNS, as kube-proxy and CoreDNS provide them.
        let shared = Arc::new(network.clone());
        tokio::spawn(proxy::run(config.client.clone(), shared));
        if let Err(e) = cluster_dns::start(
            config.client.clone(),
            &network.prefix,
            network.bridge_ip(),
            config.dns_ip,
        )
        .await
        {
            network.destroy().await;
            return Err(e);
        }
        warn!(
            prefix = %network.prefix,
            "the netns runtime runs pod commands as host processes: a test bed, not a container runtime"
        );
        let recorder =
            events::KubeletEvents::new(config.client.clone(), &config.shape.cluster_name);
        Ok(Arc::new(NetnsRuntime {
            config,
            network,
            cgroups,
            events,
            recorder,
            pods: Default::default(),
        }))
    }

    /// The network namespace prefix of this member (for tests and tools).
    pub fn prefix(&self) -> &str {
        &self.network.prefix
    }

    /// The node namespace a pod IP is reached from.
    pub fn node_netns(&self, node: &str) -> Option<String> {
        self.network.node(node).map(|n| n.netns.clone())
    }

    async fn create(&self, pod: &Pod, sandbox: &Sandbox) -> Result<PodSandbox, ConfigError> {
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<FullPod> = Api::namespaced(self.config.client.clone(), &namespace);
        let full = api
            .get(&pod.name_any())
            .await
            .map_err(|e| sandbox_error(format!("cannot read the pod: {e}")))?;
        let node = self
            .network
            .node(&sandbox.node)
            .cloned()
            .ok_or_else(|| sandbox_error(format!("no node {} here", sandbox.node)))?;
        let Some((ip, _)) = sandbox.ip else {
            return Err(sandbox_error(format!(
                "no pod IP left in node {}'s block {}",
                node.name, node.pod_block
            )));
        };
        let uid = full.uid().unwrap_or_default();
        let netns = self.network.pod_netns(&uid);
        let dir = self.config.data_dir.join("pods").join(&uid);
        std::fs::create_dir_all(dir.join("etc"))
            .map_err(|e| sandbox_error(format!("cannot make {}: {e}", dir.display())))?;
        let write = |name: &str, contents: String| {
            std::fs::write(dir.join("etc").join(name), contents)
                .map_err(|e| sandbox_error(format!("cannot write {name}: {e}")))
        };
        write("hosts", spec::hosts_file(&full, ip))?;
        write("resolv.conf", spec::resolv_file(&full, self.config.dns_ip))?;
        write(
            "hostname",
            format!(
                "{}\n",
                full.spec
                    .as_ref()
                    .and_then(|s| s.hostname.clone())
                    .unwrap_or_else(|| full.name_any())
            ),
        )?;
        if let Err(e) = self.network.create_pod(&node, &netns, ip).await {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(sandbox_error(e.to_string()));
        }
        let spec = full.spec.clone().unwrap_or_default();
        let grace = spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64;
        Ok(PodSandbox {
            uid,
            netns,
            node,
            ip,
            dir,
            init: spec.init_containers.iter().flatten().map(slot).collect(),
            containers: spec.containers.iter().map(slot).collect(),
            pod: full,
            volumes: None,
            grace: Duration::from_secs(grace),
            done: false,
        })
    }

    /// Starts one container of `sb` (init when `init`), or records why not.
    async fn launch(&self, sb: &mut PodSandbox, key: &str, init: bool, index: usize) {
        let namespace = sb.pod.namespace().unwrap_or_default();
        let resolver = Resolver::new(self.config.client.clone(), &namespace);
        let host_ip = self
            .config
            .shape
            .node_index(&sb.node.name)
            .and_then(|i| self.config.shape.node_ip(i))
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let cluster = self.config.shape.cluster_name.clone();
        let id = PodIdentity {
            pod: &sb.pod,
            ip: sb.ip,
            host_ip,
            node: &sb.node.name,
            cluster: &cluster,
        };
        let prepared = async {
            if sb.volumes.is_none() {
                sb.volumes = Some(spec::volumes(&resolver, &id, &sb.dir.join("volumes")).await?);
            }
            let slots = if init { &sb.init } else { &sb.containers };
            let c = &slots[index].spec;
            let env = spec::environment(&resolver, c, &id).await?;
            let root = sb.dir.join("rootfs").join(&c.name);
            let tmp = sb.dir.join("tmp").join(&c.name);
            for d in [&root, &tmp] {
                std::fs::create_dir_all(d).map_err(|e| sandbox_error(e.to_string()))?;
            }
            // A private /tmp as the host's: anyone may write, sticky.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777));
            let etc = [
                (sb.dir.join("etc/hosts"), "/etc/hosts"),
                (sb.dir.join("etc/resolv.conf"), "/etc/resolv.conf"),
                (sb.dir.join("etc/hostname"), "/etc/hostname"),
            ];
            let mut launch = spec::launch(
                &id,
                c,
                env,
                sb.volumes.as_ref().unwrap_or(&Default::default()),
                &etc,
                &self.config.helper,
                host::netns_path(&sb.netns),
                root,
                tmp,
            )?;
            launch.launch.cgroups = self
                .cgroups
                .create(&cgroup_id(&sb.netns, &c.name), spec::limits(c));
            let file = sb.dir.join("launch").join(format!("{}.json", c.name));
            write_private(
                &file,
                &serde_json::to_vec(&launch.launch).unwrap_or_default(),
            )
            .map_err(|e| sandbox_error(format!("cannot write {}: {e}", file.display())))?;
            Ok::<PathBuf, ConfigError>(file)
        }
        .await;
        let dir = sb.dir.clone();
        let (netns, node_netns, ip, grace) =
            (sb.netns.clone(), sb.node.netns.clone(), sb.ip, sb.grace);
        let reference = kube::Resource::object_ref(&sb.pod, &());
        let slots = if init {
            &mut sb.init
        } else {
            &mut sb.containers
        };
        let slot = &mut slots[index];
        let file = match prepared {
            Ok(f) => f,
            Err(e) if e.reason == "StartError" => {
                // As containerd: the container is created and fails to start.
                self.recorder
                    .emit(&reference, "Failed", format!("Error: {}", e.message));
                let now = podutil::now();
                if slot.runs > 0 {
                    slot.restarts += 1;
                }
                slot.runs += 1;
                record_exit(
                    slot,
                    ContainerState::Terminated {
                        code: shim::START_ERROR,
                        reason: "StartError".into(),
                        message: Some(e.message),
                        started: now.clone(),
                        finished: now,
                    },
                );
                return;
            }
            Err(e) => {
                let reason = if e.reason == "FailedMount" {
                    "FailedMount"
                } else {
                    "Failed"
                };
                self.recorder
                    .emit(&reference, reason, format!("Error: {}", e.message));
                slot.state = ContainerState::Waiting {
                    reason: e.reason.into(),
                    message: Some(e.message),
                };
                return;
            }
        };
        let log = log_path(&dir, &slot.spec.name, slot.runs);
        let events = self.events.clone();
        let pod_key = key.to_string();
        match process::spawn(&self.config.helper, &file, log, move || {
            events.changed(&pod_key)
        }) {
            Ok(p) => {
                let target = probes::ProbeTarget {
                    netns: netns.clone(),
                    node_netns: node_netns.clone(),
                    ip,
                    pid: p.pid,
                    launch: file.clone(),
                    helper: self.config.helper.clone(),
                    grace,
                };
                let name = slot.spec.name.clone();
                self.recorder
                    .emit(&reference, "Created", format!("Created container {name}"));
                self.recorder
                    .emit(&reference, "Started", format!("Started container {name}"));
                let notify = self.recorder.for_pod(reference.clone());
                let (state, task) = probes::start(
                    &slot.spec,
                    target,
                    &p,
                    self.events.clone(),
                    key.to_string(),
                    notify,
                );
                slot.probes = Some(state);
                slot.prober = task;
                let now = podutil::now();
                if slot.runs > 0 {
                    slot.restarts += 1;
                    slot.last = Some(slot.state.clone());
                }
                slot.runs += 1;
                slot.process = Some(p);
                slot.started = Some(now.clone());
                slot.state = ContainerState::Running { since: now };
            }
            Err(e) => {
                let message = format!("cannot start the container: {e}");
                self.recorder
                    .emit(&reference, "Failed", format!("Error: {message}"));
                slot.state = ContainerState::Waiting {
                    reason: "RunContainerError".into(),
                    message: Some(message),
                };
            }
        }
    }

    /// Drives one pod towards its spec; returns what to report.
    async fn drive(&self, sb: &mut PodSandbox, key: &str) -> PodRun {
        let policy = sb
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into());
        let mut recheck: Option<Duration> = None;
        let mut soonest = |d: Duration| {
            recheck = Some(recheck.map_or(d, |r: Duration| r.min(d)));
        };
        let oom = |c: &ContainerSlot| self.cgroups.oom_killed(&cgroup_id(&sb.netns, &c.spec.name));
        reap(&mut sb.init, &oom);
        reap(&mut sb.containers, &oom);
        // Init containers, one at a time, each to success.
        let mut initialized = true;
        let mut failed_init = false;
        for i in 0..sb.init.len() {
            match &sb.init[i].state {
                ContainerState::Terminated { code: 0, .. } => continue,
                ContainerState::Running { .. } => {}
                ContainerState::Terminated { .. } if policy == "Never" => failed_init = true,
                _ => match ready_to_start(&sb.init[i]) {
                    Ok(()) => self.launch(sb, key, true, i).await,
                    Err(wait) => soonest(wait),
                },
            }
            initialized = false;
            if matches!(sb.init[i].state, ContainerState::Waiting { .. }) {
                soonest(CONFIG_RETRY);
            }
            break;
        }
        if initialized && !sb.done {
            for i in 0..sb.containers.len() {
                let restart = match &sb.containers[i].state {
                    ContainerState::Running { .. } => false,
                    ContainerState::Waiting { .. } => true,
                    ContainerState::Terminated { code, .. } => {
                        policy == "Always" || (policy == "OnFailure" && *code != 0)
                    }
                };
                if !restart {
                    continue;
                }
                match ready_to_start(&sb.containers[i]) {
                    Ok(()) => self.launch(sb, key, false, i).await,
                    Err(wait) => {
                        self.recorder.emit(
                            &kube::Resource::object_ref(&sb.pod, &()),
                            "BackOff",
                            format!(
                                "Back-off restarting failed container {} in pod {}",
                                sb.containers[i].spec.name,
                                sb.pod.name_any()
                            ),
                        );
                        soonest(wait)
                    }
                }
                if matches!(sb.containers[i].state, ContainerState::Waiting { .. })
                    && sb.containers[i].backoff_until.is_none()
                {
                    soonest(CONFIG_RETRY);
                }
            }
        }
        // Restarts still to come wake this pod when their back-off ends.
        for c in sb.init.iter().chain(sb.containers.iter()) {
            if let (ContainerState::Terminated { code, .. }, Some(t)) = (&c.state, c.backoff_until)
                && (policy == "Always" || (policy == "OnFailure" && *code != 0))
            {
                soonest(
                    t.saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(10)),
                );
            }
        }
        let all_terminated = sb
            .containers
            .iter()
            .all(|c| matches!(c.state, ContainerState::Terminated { .. }));
        let any_failed = sb
            .containers
            .iter()
            .any(|c| matches!(c.state, ContainerState::Terminated { code, .. } if code != 0));
        let will_restart = |c: &ContainerSlot| match c.state {
            ContainerState::Terminated { code, .. } => {
                policy == "Always" || (policy == "OnFailure" && code != 0)
            }
            _ => true,
        };
        let phase =
            if failed_init {
                PodPhase::Failed
            } else if !initialized {
                PodPhase::Pending
            } else if all_terminated && !sb.containers.iter().any(will_restart) {
                if any_failed {
                    PodPhase::Failed
                } else {
                    PodPhase::Succeeded
                }
            } else if sb.containers.iter().any(|c| {
                c.started.is_some() || matches!(c.state, ContainerState::Terminated { .. })
            }) {
                PodPhase::Running
            } else {
                PodPhase::Pending
            };
        if matches!(phase, PodPhase::Succeeded | PodPhase::Failed) {
            sb.done = true;
        }
        let pod_name = format!(
            "{}_{}({})",
            sb.pod.name_any(),
            sb.pod.namespace().unwrap_or_default(),
            sb.uid
        );
        let done = sb.done;
        let report = |c: &ContainerSlot| {
            // Between a crash and its restart: CrashLoopBackOff, as upstream.
            let backing_off = !done
                && will_restart(c)
                && matches!(c.state, ContainerState::Terminated { .. })
                && c.backoff_until.is_some_and(|t| t > Instant::now());
            let (state, last) = if backing_off {
                let wait = c
                    .backoff_until
                    .map(|t| t - Instant::now())
                    .unwrap_or_default();
                (
                    ContainerState::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(format!(
                            "back-off {}s restarting failed container={} pod={pod_name}",
                            wait.as_secs().max(1),
                            c.spec.name
                        )),
                    },
                    Some(c.state.clone()),
                )
            } else {
                (c.state.clone(), c.last.clone())
            };
            let running = matches!(state, ContainerState::Running { .. });
            let probed = |f: fn(&probes::ProbeState) -> bool| c.probes.as_ref().is_none_or(f);
            ContainerRun {
                name: c.spec.name.clone(),
                ready: running && probed(|p| p.ready.load(std::sync::atomic::Ordering::SeqCst)),
                started: running && probed(|p| p.started.load(std::sync::atomic::Ordering::SeqCst)),
                state,
                last,
                restarts: c.restarts,
                id: c
                    .started
                    .as_ref()
                    .map(|_| format!("flotilla://{}/{}-{}", sb.uid, c.spec.name, c.runs)),
            }
        };
        PodRun {
            phase,
            sandbox_ready: !sb.done,
            initialized,
            init_containers: sb.init.iter().map(report).collect(),
            containers: sb.containers.iter().map(report).collect(),
            recheck,
        }
    }

    async fn teardown(&self, sb: &mut PodSandbox) {
        let grace = sb.grace;
        let reference = kube::Resource::object_ref(&sb.pod, &());
        for c in sb.init.iter().chain(sb.containers.iter()) {
            if c.process
                .as_ref()
                .is_some_and(|p| p.exit.borrow().is_none())
            {
                self.recorder.emit(
                    &reference,
                    "Killing",
                    format!("Stopping container {}", c.spec.name),
                );
            }
        }
        let stops = sb
            .init
            .iter()
            .chain(sb.containers.iter())
            .filter_map(|c| c.process.as_ref())
            .map(|p| process::stop(p, grace));
        futures::future::join_all(stops).await;
        for c in sb.init.iter_mut().chain(sb.containers.iter_mut()) {
            if let Some(task) = c.prober.take() {
                task.abort();
            }
        }
        self.network.remove_pod(&sb.node, &sb.netns).await;
        for c in sb.init.iter().chain(sb.containers.iter()) {
            self.cgroups.remove(&cgroup_id(&sb.netns, &c.spec.name));
        }
        if let Err(error) = std::fs::remove_dir_all(&sb.dir) {
            warn!(%error, dir = %sb.dir.display(), "cannot remove a pod's directory");
        }
    }

    /// Stops every pod and removes the member's network.
    pub async fn shutdown(&self) {
        let all: Vec<_> = self.pods.lock().drain().map(|(_, p)| p).collect();
        for pod in all {
            let mut sb = pod.lock().await;
            // The member is going away: a short grace, as a node shutdown.
            sb.grace = sb.grace.min(Duration::from_secs(2));
            self.teardown(&mut sb).await;
        }
        self.network.destroy().await;
        self.cgroups.destroy();
    }

    /// Runs `f` on one container of a pod's sandbox; the errors are the
    /// messages the API answers with.
    async fn with_container<T>(
        &self,
        pod_key: &str,
        uid: &str,
        container: &str,
        f: impl FnOnce(&PodSandbox, &ContainerSlot) -> Result<T, String>,
    ) -> Result<T, String> {
        let sb = self.sandbox(pod_key, uid)?;
        // The kubelet holds a pod only briefly, but for a teardown's grace.
        let Ok(sb) = tokio::time::timeout(Duration::from_secs(5), sb.lock()).await else {
            return Err(format!("pod {pod_key} is busy (stopping?); try again"));
        };
        let slot = sb
            .containers
            .iter()
            .chain(sb.init.iter())
            .find(|c| c.spec.name == container)
            .ok_or_else(|| {
                format!(
                    "container {container} is not valid for pod {}",
                    sb.pod.name_any()
                )
            })?;
        f(&sb, slot)
    }

    /// A container's log: the file of its current run (with that run's
    /// exit, to follow it) or of the one before.
    pub async fn log_of(
        &self,
        pod_key: &str,
        uid: &str,
        container: &str,
        previous: bool,
    ) -> Result<LogRun, String> {
        self.with_container(pod_key, uid, container, |sb, slot| {
            let pod = sb.pod.name_any();
            match (previous, slot.runs) {
                (false, 0) => Err(format!(
                    "container \"{container}\" in pod \"{pod}\" is waiting to start: {}",
                    match &slot.state {
                        ContainerState::Waiting { reason, .. } => reason.as_str(),
                        _ => "ContainerCreating",
                    }
                )),
                (false, n) => Ok(LogRun {
                    path: log_path(&sb.dir, container, n - 1),
                    exit: slot.process.as_ref().map(|p| p.exit.clone()),
                }),
                (true, n) if n >= 2 => Ok(LogRun {
                    path: log_path(&sb.dir, container, n - 2),
                    exit: None,
                }),
                (true, _) => Err(format!(
                    "previous terminated container \"{container}\" in pod \"{pod}\" not found"
                )),
            }
        })
        .await
    }

    /// What `exec` needs of a running container: its process, launch and
    /// the pod's directory.
    pub async fn exec_target(
        &self,
        pod_key: &str,
        uid: &str,
        container: &str,
    ) -> Result<ExecTarget, String> {
        let helper = self.config.helper.clone();
        self.with_container(pod_key, uid, container, |sb, slot| {
            let Some(p) = slot.process.as_ref().filter(|p| p.exit.borrow().is_none()) else {
                return Err(format!("container {container} is not running"));
            };
            Ok(ExecTarget {
                pid: p.pid,
                launch: sb.dir.join("launch").join(format!("{container}.json")),
                dir: sb.dir.clone(),
                netns: sb.netns.clone(),
                helper,
            })
        })
        .await
    }

    /// The network namespace of a pod's sandbox.
    pub async fn pod_netns(&self, pod_key: &str) -> Result<String, String> {
        let sb = self.sandbox(pod_key, "")?;
        match tokio::time::timeout(Duration::from_secs(5), sb.lock()).await {
            Ok(s) => Ok(s.netns.clone()),
            Err(_) => Err(format!("pod {pod_key} is busy (stopping?); try again")),
        }
    }

    fn sandbox(
        &self,
        pod_key: &str,
        uid: &str,
    ) -> Result<Arc<tokio::sync::Mutex<PodSandbox>>, String> {
        let sb = self.pods.lock().get(pod_key).cloned();
        let sb = sb.ok_or_else(|| format!("pod {pod_key} has no sandbox on its node yet"))?;
        if !uid.is_empty() && sb.try_lock().is_ok_and(|s| s.uid != uid) {
            return Err(format!("pod {pod_key} has no sandbox on its node yet"));
        }
        Ok(sb)
    }
}

/// A container run's log file.
pub struct LogRun {
    pub path: PathBuf,
    /// The run's exit, while it may still write.
    pub exit: Option<tokio::sync::watch::Receiver<Option<i32>>>,
}

/// A running container, for `exec`.
pub struct ExecTarget {
    pub pid: i32,
    pub launch: PathBuf,
    pub dir: PathBuf,
    pub netns: String,
    pub helper: PathBuf,
}

/// A container's cgroup, by its pod's namespace and its name.
fn cgroup_id(netns: &str, container: &str) -> String {
    format!("{netns}-{container}")
}

fn log_path(dir: &Path, container: &str, run: u32) -> PathBuf {
    dir.join("logs").join(container).join(format!("{run}.log"))
}

fn sandbox_error(message: String) -> ConfigError {
    ConfigError {
        reason: "FailedCreatePodSandBox",
        message,
    }
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// Whether a container may start now, or how long its back-off lasts.
fn ready_to_start(c: &ContainerSlot) -> Result<(), Duration> {
    match c.backoff_until {
        Some(t) if t > Instant::now() => Err(t - Instant::now()),
        _ => Ok(()),
    }
}

/// Turns exited processes into Terminated states.
fn reap(slots: &mut [ContainerSlot], oom_killed: &dyn Fn(&ContainerSlot) -> bool) {
    for c in slots {
        let Some(code) = c.process.as_ref().and_then(|p| *p.exit.borrow()) else {
            continue;
        };
        c.process = None;
        if let Some(task) = c.prober.take() {
            task.abort();
        }
        let killed = c
            .probes
            .as_ref()
            .and_then(|p| p.killed_because.lock().take());
        let started = c.started.clone().unwrap_or_else(podutil::now);
        // SIGKILL with the group's OOM count up: the memory limit did it.
        let reason = match code {
            0 => "Completed",
            137 if oom_killed(c) => "OOMKilled",
            _ => "Error",
        };
        record_exit(
            c,
            ContainerState::Terminated {
                code,
                reason: reason.into(),
                message: killed,
                started,
                finished: podutil::now(),
            },
        );
    }
}

/// Records an exit and schedules the restart back-off, should it restart.
fn record_exit(c: &mut ContainerSlot, state: ContainerState) {
    c.state = state;
    // The first restart is at once; then 10 s, 20 s, ... up to 5 min.
    let delay = if c.runs <= 1 {
        Duration::ZERO
    } else {
        let d = c.backoff;
        c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
        d
    };
    c.backoff_until = Some(Instant::now() + delay);
}

#[async_trait]
impl Runtime for NetnsRuntime {
    async fn sync(&self, pod: &Pod, sandbox: &Sandbox) -> PodRun {
        let key = super::key(pod);
        let uid = pod.uid().unwrap_or_default();
        let existing = self.pods.lock().get(&key).cloned();
        let entry = match existing {
            Some(e) if e.lock().await.uid == uid => e,
            other => {
                // A pod of the same name that went away: its sandbox goes first.
                if let Some(old) = other {
                    self.pods.lock().remove(&key);
                    self.teardown(&mut *old.lock().await).await;
                }
                match self.create(pod, sandbox).await {
                    Ok(sb) => {
                        let e = Arc::new(tokio::sync::Mutex::new(sb));
                        self.pods.lock().insert(key.clone(), e.clone());
                        e
                    }
                    Err(e) => {
                        warn!(pod = %key, reason = e.reason, error = %e.message, "cannot make the pod's sandbox");
                        self.recorder.emit(
                            &kube::Resource::object_ref(pod, &()),
                            "FailedCreatePodSandBox",
                            format!("Failed to create pod sandbox: {}", e.message),
                        );
                        return waiting_run(pod, &e);
                    }
                }
            }
        };
        let mut sb = entry.lock().await;
        self.drive(&mut sb, &key).await
    }

    async fn remove(&self, pod_key: &str, grace: Option<Duration>) {
        let entry = self.pods.lock().remove(pod_key);
        if let Some(e) = entry {
            let mut sb = e.lock().await;
            if let Some(g) = grace {
                sb.grace = sb.grace.min(g);
            }
            self.teardown(&mut sb).await;
        }
    }
}

/// A pod whose sandbox could not be made: Pending, retried.
fn waiting_run(pod: &Pod, e: &ConfigError) -> PodRun {
    let containers = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| ContainerRun {
            name: c.name.clone(),
            state: ContainerState::Waiting {
                reason: "ContainerCreating".into(),
                message: Some(format!("{}: {}", e.reason, e.message)),
            },
            last: None,
            restarts: 0,
            ready: false,
            started: false,
            id: None,
        })
        .collect();
    PodRun {
        phase: PodPhase::Pending,
        sandbox_ready: false,
        initialized: false,
        init_containers: Vec::new(),
        containers,
        recheck: Some(Duration::from_secs(5)),
    }
}
