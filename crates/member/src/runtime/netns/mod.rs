//! The netns runtime: pods are Linux network namespaces on the member's
//! own bridged network (`network`), their containers host processes
//! started by a shim (`shim`) in a private mount namespace with the pod's
//! volumes, environment and user (`spec`, from what the kubelet resolved:
//! the runtime holds no API client), logged and stopped as a
//! kubelet does (`process`). A container without a command runs the
//! stand-in workload (`standin`).
//!
//! It is a test bed, not a container runtime: commands are the host's
//! binaries and run on the host's kernel with its filesystem visible.

pub mod agnhost;
pub mod cgroups;
pub mod checkpoint;
pub mod images;
mod lifecycle;
pub mod network;
pub mod probes;
pub mod process;
pub mod shim;
pub mod spec;
pub mod standin;
pub mod streams;
pub mod timings;
pub mod usage;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flotilla_host as host;
use k8s_openapi::api::core::v1::{Container, Pod as FullPod};
use kube::ResourceExt;
use tracing::{Instrument, info, warn};

use super::{ContainerRun, ContainerState, Events, PodPhase, PodRun, Runtime, Sandbox};
use crate::config::SimConfig;
use crate::pod::Pod;
use crate::runtime::config::{ConfigError, PodConfig};
use network::{MemberNetwork, NodeNetwork};
use process::Process;

/// What the netns runtime is given.
pub struct NetnsConfig {
    /// The member's data dir; pods live under `pods/`.
    pub data_dir: PathBuf,
    /// The flotilla binary: the shim and the stand-in workload.
    pub helper: PathBuf,
    pub shape: SimConfig,
    /// The cluster DNS address written into pods' resolv.conf.
    pub dns_ip: Ipv4Addr,
    /// The pod in full and its references resolved: the kubelet's.
    pub pods: Arc<dyn PodConfig>,
    /// Records the kubelet's events about pods (Created, Started, ...).
    pub recorder: crate::events::EventRecorder,
    /// The member's nodes: each gets its network namespace while it is
    /// one of them.
    pub roster: Arc<crate::roster::Roster>,
    /// Where pods' start times go (the member's `/metrics` reads them).
    pub timings: Arc<timings::Timings>,
}

/// Keeps a network namespace for each of the member's nodes as they
/// join and leave, while the runtime lives.
async fn follow_roster(runtime: std::sync::Weak<NetnsRuntime>) {
    let Some(mut changes) = runtime.upgrade().map(|r| r.config.roster.subscribe()) else {
        return;
    };
    loop {
        let Some(alive) = runtime.upgrade() else {
            return;
        };
        let settled = alive.sync_nodes().await;
        drop(alive);
        if settled {
            if changes.changed().await.is_err() {
                return;
            }
        } else {
            // A node that could not be made is tried again.
            let _ = tokio::time::timeout(NODE_RETRY, changes.changed()).await;
        }
    }
}

/// Upstream's CrashLoopBackOff: 10 s doubling to 5 min.
const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How soon a node whose network could not be made is tried again.
const NODE_RETRY: Duration = Duration::from_secs(2);
/// How soon a pod whose configuration did not resolve is tried again.
const CONFIG_RETRY: Duration = Duration::from_secs(2);

pub struct NetnsRuntime {
    config: NetnsConfig,
    network: MemberNetwork,
    cgroups: cgroups::Cgroups,
    events: Events,
    recorder: crate::events::EventRecorder,
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
    /// The ephemeral containers `kubectl debug` added: each run once,
    /// never restarted.
    ephemeral: Vec<ContainerSlot>,
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
        let nodes: Vec<(String, usize)> = config
            .roster
            .entries()
            .into_iter()
            .map(|e| (e.name, e.index))
            .collect();
        let network = MemberNetwork::plan(&config.shape, &identity, &nodes)?;
        // Whether this process may make namespaces at all, before anything
        // else: the answer names what is missing.
        host::check(&format!("{}-probe", network.prefix))
            .await
            .map_err(|e| e.to_string())?;
        // What other processes left on this host (whatever their data
        // dirs), then this member's own prefix, recorded before anything
        // is made under it.
        host::record::sweep_stale(false).await;
        host::record::claim(&network.prefix, "netns member", &identity).map_err(|e| {
            format!(
                "cannot record the member's network in {}: {e}",
                host::record::dir().display()
            )
        })?;
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
            host::record::release(&network.prefix);
            return Err(format!("cannot build the member's pod network: {e}"));
        }
        warn!(
            prefix = %network.prefix,
            "the netns runtime runs pod commands as host processes: a test bed, not a container runtime"
        );
        let recorder = config.recorder.clone();
        let runtime = Arc::new(NetnsRuntime {
            config,
            network,
            cgroups,
            events,
            recorder,
            pods: Default::default(),
        });
        tokio::spawn(follow_roster(Arc::downgrade(&runtime)).in_current_span());
        Ok(runtime)
    }

    /// Makes the networks of nodes that joined and removes those of nodes
    /// that left; whether every node has its network.
    async fn sync_nodes(&self) -> bool {
        let wanted = self.config.roster.entries();
        for node in self.network.nodes() {
            if !wanted
                .iter()
                .any(|e| e.name == node.name && e.index == node.index)
            {
                info!(node = %node.name, "node left; removing its network");
                self.network.remove_node(&node.name).await;
            }
        }
        let mut settled = true;
        for entry in wanted {
            let Some(node) = self
                .network
                .node_plan(&self.config.shape, &entry.name, entry.index)
            else {
                warn!(node = %entry.name, "no address left for the node in the node or pod CIDR");
                continue;
            };
            if self.network.node(&node.name).is_some() {
                continue;
            }
            match self.network.add_node(node).await {
                Ok(()) => info!(node = %entry.name, "node joined; its network is made"),
                Err(error) => {
                    warn!(%error, node = %entry.name, "cannot make the node's network; retrying");
                    settled = false;
                }
            }
        }
        settled
    }

    /// The member's network: its router namespace and nodes.
    pub fn network(&self) -> &MemberNetwork {
        &self.network
    }

    /// The network namespace prefix of this member (for tests and tools).
    pub fn prefix(&self) -> &str {
        &self.network.prefix
    }

    /// The node namespace a pod IP is reached from.
    pub fn node_netns(&self, node: &str) -> Option<String> {
        self.network.node(node).map(|n| n.netns)
    }

    async fn create(&self, pod: &Pod, sandbox: &Sandbox) -> Result<PodSandbox, ConfigError> {
        let full = self
            .config
            .pods
            .pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
            .await?;
        let node = self
            .network
            .node(&sandbox.node)
            .ok_or_else(|| sandbox_error(format!("no node {} here", sandbox.node)))?;
        let Some((ip, _)) = sandbox.ip else {
            return Err(sandbox_error(format!(
                "no pod IP left in node {}'s block {}",
                node.name, node.pod_block
            )));
        };
        let uid = full.uid().unwrap_or_default();
        let netns = self.network.pod_netns(&uid);
        let files_started = Instant::now();
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
        self.config
            .timings
            .record(timings::Step::SandboxFiles, files_started.elapsed());
        let network_started = Instant::now();
        if let Err(e) = self.network.create_pod(&node, &netns, ip).await {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(sandbox_error(e.to_string()));
        }
        self.config
            .timings
            .record(timings::Step::Network, network_started.elapsed());
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
            ephemeral: Vec::new(),
            pod: full,
            volumes: None,
            grace: Duration::from_secs(grace),
            done: false,
        })
    }

    /// Gives the sandbox a slot for each ephemeral container the pod has
    /// gained (`pods/ephemeralcontainers` only ever adds them), read from
    /// the pod as it is now.
    async fn add_ephemeral(&self, sb: &mut PodSandbox, pod: &Pod) {
        let added = pod
            .spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten())
            .any(|c| !sb.ephemeral.iter().any(|e| e.spec.name == c.name));
        if !added || sb.done {
            return;
        }
        let read = self
            .config
            .pods
            .pod(&pod.namespace().unwrap_or_default(), &pod.name_any())
            .await;
        let full = match read {
            Ok(full) if full.uid() == Some(sb.uid.clone()) => full,
            // Gone, or another pod of its name: its own sync sees to it.
            Ok(_) => return,
            Err(error) => {
                warn!(pod = %pod.name_any(), %error, "cannot read the pod's ephemeral containers");
                return;
            }
        };
        for ephemeral in full
            .spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten())
        {
            if sb.ephemeral.iter().any(|e| e.spec.name == ephemeral.name) {
                continue;
            }
            // The same fields as a container's, less ports, probes and
            // resources (which the API refuses for them).
            match serde_json::to_value(ephemeral).and_then(serde_json::from_value::<Container>) {
                Ok(container) => sb.ephemeral.push(slot(&container)),
                Err(error) => {
                    warn!(pod = %pod.name_any(), container = %ephemeral.name, %error, "cannot read an ephemeral container")
                }
            }
        }
        sb.pod = full;
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
        host::record::release(&self.network.prefix);
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
            .chain(sb.ephemeral.iter())
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
                    input: slot.process.as_ref().and_then(|p| p.input.clone()),
                    stdin_once: slot.spec.stdin_once == Some(true),
                }),
                (true, n) if n >= 2 => Ok(LogRun {
                    path: log_path(&sb.dir, container, n - 2),
                    exit: None,
                    input: None,
                    stdin_once: false,
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
    /// Its stdin, when the container keeps one open (`stdin: true`).
    pub input: Option<process::Input>,
    /// Whether that stdin closes when the first attach ends.
    pub stdin_once: bool,
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
        self.add_ephemeral(&mut sb, pod).await;
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

    fn usage(&self, pods: &[Arc<Pod>]) -> Vec<Option<Vec<super::ContainerUsage>>> {
        let table = usage::ProcessTable::read();
        let at = jiff::Timestamp::now();
        pods.iter()
            .map(|pod| {
                let sandbox = self.pods.lock().get(&super::key(pod)).cloned()?;
                // A sandbox being changed is measured next time.
                let sb = sandbox.try_lock().ok()?;
                if Some(sb.uid.as_str()) != pod.metadata.uid.as_deref() {
                    return None;
                }
                let running = sb.containers.iter().filter_map(|slot| {
                    let p = slot
                        .process
                        .as_ref()
                        .filter(|p| p.exit.borrow().is_none())?;
                    Some(super::ContainerUsage {
                        name: slot.spec.name.clone(),
                        started: slot.started.as_ref()?.0,
                        at,
                        cpu: table.cpu(p.pid),
                        memory_bytes: table.memory(p.pid),
                    })
                });
                Some(running.collect())
            })
            .collect()
    }
}

/// A pod whose sandbox could not be made: Pending, retried.
fn waiting_run(pod: &Pod, e: &ConfigError) -> PodRun {
    let waiting = |name: &String| ContainerRun {
        name: name.clone(),
        state: ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: Some(format!("{}: {}", e.reason, e.message)),
        },
        last: None,
        restarts: 0,
        ready: false,
        started: false,
        id: None,
    };
    let spec = pod.spec.as_ref();
    PodRun {
        phase: PodPhase::Pending,
        sandbox_ready: false,
        initialized: false,
        init_containers: Vec::new(),
        containers: spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| waiting(&c.name))
            .collect(),
        ephemeral_containers: spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten())
            .map(|c| waiting(&c.name))
            .collect(),
        recheck: Some(Duration::from_secs(5)),
    }
}
