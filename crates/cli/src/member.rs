//! `flotilla member`: a simulated member cluster (the API server plus
//! nodes and workload controllers), and `flotilla member fault` to inject
//! failures into a running one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use flotilla_apiserver::Config;
use flotilla_apiserver::allocation::ServiceNetwork;
use flotilla_apiserver::loopback;
use flotilla_member::admin::client::AdminClient;
use flotilla_member::roster::{NodeSpec, Roster};
use flotilla_member::runtime::netns::{NetnsConfig, NetnsRuntime};
use flotilla_member::runtime::{Events, Runtime, RuntimeHandle};
use flotilla_member::{Clients, Faults, SimConfig, Simulator, admin, front_door};
use std::sync::Arc;
use tracing::{Instrument, info};

use crate::apiserver::{self, ServeArgs, StorageArgs};

/// A member's default watch window (`--watch-history`).
pub const WATCH_HISTORY: usize = 5_000;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<MemberCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum MemberCommand {
    /// Inject or clear faults in a running member (for tests of failover).
    Fault(FaultArgs),
    /// Add, remove or list the nodes of a running simulated member (as
    /// machines join a cluster and leave it).
    Node(NodeArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The cluster's name; nodes are called NAME-node-0, NAME-node-1, ...
    #[arg(long, required = true)]
    name: Option<String>,
    /// Where the member keeps its data [default: <user data dir>/flotilla/member-NAME]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to serve the API on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    #[command(flatten)]
    audit: crate::apiserver::AuditArgs,
    /// Write a kubeconfig here once the member answers and its nodes are
    /// registered [default: <data dir>/kubeconfig]
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// CPU capacity of each node.
    #[arg(long, default_value = "4")]
    node_cpu: String,
    /// Memory capacity of each node.
    #[arg(long, default_value = "16Gi")]
    node_memory: String,
    /// Pod capacity of each node.
    #[arg(long, default_value_t = 110)]
    node_pods: u32,
    /// topology.kubernetes.io/region of the nodes.
    #[arg(long, default_value = "region-1")]
    region: String,
    /// topology.kubernetes.io/zone; several (comma-separated) spread the nodes round robin.
    #[arg(long, value_delimiter = ',', default_value = "zone-a")]
    zone: Vec<String>,
    /// Cloud provider, in the nodes' providerID.
    #[arg(long, default_value = "flotilla")]
    provider: String,
    /// node.kubernetes.io/instance-type of the nodes.
    #[arg(long, default_value = "sim.standard-4")]
    instance_type: String,
    /// Extra node labels, k=v,...
    #[arg(long, value_delimiter = ',')]
    node_labels: Vec<String>,
    /// How long a pod takes from bound to Running and Ready.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pod_startup: Duration,
    /// How long pods of Jobs (restartPolicy Never/OnFailure) run before
    /// succeeding; the pod annotation simulation.flotilla.io/run-duration overrides it.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    job_duration: Duration,
    /// How often nodes renew their Leases.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    node_heartbeat: Duration,
    /// Range Service ClusterIPs come from.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cidr: ipnet::Ipv4Net,
    /// Range pod IPs come from; each node gets a block [default: a /16
    /// in 10.128.0.0/9 chosen by the cluster's name, so members differ].
    /// Members may overlap.
    #[arg(long)]
    pod_cidr: Option<ipnet::Ipv4Net>,
    /// sim: pods are bookkeeping (Running after --pod-startup); netns:
    /// pods are network namespaces with real processes (needs root).
    #[arg(long, value_enum, default_value = "sim")]
    runtime: RuntimeKind,
    /// With --runtime netns, run the network fabric's gateways on this
    /// underlay (`flotilla underlay create`): the member connects to the
    /// fleet's other members once it is joined.
    #[arg(long)]
    underlay: Option<String>,
    /// Gateway nodes to label when none is (one active, the rest standby).
    #[arg(long, default_value_t = 2)]
    gateways: usize,
    /// With --runtime netns, serve the API on a non-loopback --listen even
    /// though `kubectl exec` then runs commands on this host as root can.
    #[arg(long)]
    allow_remote_exec: bool,
    /// Loopback address of the admin (fault injection) endpoint.
    #[arg(long, default_value = "127.0.0.1:0")]
    admin_listen: SocketAddr,
    /// How many recent changes the watch window keeps in memory. A watcher
    /// further behind reads the log until it catches up (410 Expired only
    /// past the last compaction); a 1,000-node member's Lease renewals
    /// alone fill 5,000 in 50 s.
    #[arg(long, default_value_t = WATCH_HISTORY)]
    watch_history: usize,
    /// Extra names or IP addresses the serving certificate covers.
    #[arg(long = "tls-san", value_delimiter = ',')]
    tls_sans: Vec<String>,
    /// Static bearer tokens, kube-apiserver's CSV format:
    /// token,user,uid[,"group1,group2"] per line.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// How requests are authorized: RBAC, or AlwaysAllow (tests only).
    #[arg(long, value_enum, default_value = "RBAC")]
    authorization_mode: crate::apiserver::AuthorizationMode,
    /// Where the member keeps its objects: its data dir (embedded), or
    /// etcd (--store etcd --etcd-endpoints ...), as the control plane.
    #[command(flatten)]
    storage: StorageArgs,
    /// Members this process serves, each a full member with its own store,
    /// API endpoint, kubeconfig, nodes and admin endpoint: NAME-1 ..
    /// NAME-N in DATA_DIR/NAME-i. DATA_DIR/members.json lists them once
    /// all are ready. 1 serves NAME in DATA_DIR itself.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// With --count, how many members start at once.
    #[arg(long, default_value_t = 8)]
    start_concurrency: usize,
    /// Run Liqo's and Admiralty's peering controllers (`flotilla peer`,
    /// `flotilla offload`) [default: true; false with --count above 1:
    /// they poll the member's API twice a second each, about 30
    /// requests/s per idle member]
    #[arg(long, value_name = "BOOL")]
    peering_controllers: Option<bool>,
    /// Run Velero's server: backups and restores on velero.io/v1
    /// (BackupStorageLocation, Backup, Restore) [default: true; false
    /// with --count above 1]
    #[arg(long, value_name = "BOOL")]
    velero: Option<bool>,
    /// Stop when this directory no longer exists (an infrastructure
    /// provider's state, so its members go with it).
    #[arg(long, value_name = "DIR")]
    exit_with_dir: Option<PathBuf>,
    /// Run the controllers and the nodes' kubelets only while this process
    /// holds the Lease kube-system/kube-controller-manager, as
    /// kube-controller-manager's --leader-elect: for several members
    /// serving one cluster from one etcd (--store etcd, same
    /// --etcd-prefix), a control plane of several machines. Every one
    /// serves the API. Needs --runtime sim; Velero and the peering
    /// controllers are off.
    #[arg(long)]
    leader_elect: bool,
}

impl RunArgs {
    /// Whether the peering controllers run: on for a lone member, off by
    /// default when one process serves many.
    fn peering(&self) -> bool {
        self.peering_controllers
            .unwrap_or(self.count <= 1 && !self.leader_elect)
    }

    /// Whether Velero's server runs: as the peering controllers.
    fn velero(&self) -> bool {
        self.velero.unwrap_or(self.count <= 1 && !self.leader_elect)
    }
}

#[derive(clap::Args)]
struct FaultArgs {
    /// The data directory of the running member.
    #[arg(long)]
    data_dir: PathBuf,
    #[command(subcommand)]
    fault: Fault,
}

#[derive(clap::Args)]
struct NodeArgs {
    /// The data directory of the running member.
    #[arg(long)]
    data_dir: PathBuf,
    #[command(subcommand)]
    action: NodeAction,
}

#[derive(Subcommand)]
enum NodeAction {
    /// A node joins (or an existing one takes these labels and versions).
    Add {
        name: String,
        /// Node labels, k=v,...
        #[arg(long = "labels", value_delimiter = ',')]
        labels: Vec<String>,
        /// Taints it registers with, key[=value]:Effect (repeatable).
        #[arg(long = "taint")]
        taints: Vec<String>,
        /// spec.providerID [default: the member's own form]
        #[arg(long)]
        provider_id: Option<String>,
        /// The kubelet version it reports [default: the server's]
        #[arg(long)]
        kubelet_version: Option<String>,
    },
    /// The node leaves: its Node and the pods bound to it are deleted.
    Remove { name: String },
    /// The member's nodes, as JSON.
    List,
}

#[derive(Subcommand)]
enum Fault {
    /// Make the member's API unreachable; its state is kept.
    Unreachable {
        /// refuse: connections are refused; hang: accepted and never answered.
        #[arg(long, value_enum, default_value = "refuse")]
        mode: Mode,
    },
    /// Make the member's API reachable again.
    Reachable,
    /// Make a node's kubelet report NotReady (taints it; pods become unready and are evicted after their tolerations).
    NodeNotReady { node: String },
    /// Clear a node's NotReady fault.
    NodeReady { node: String },
    /// Make the pods a selector matches fail readiness.
    PodsUnready {
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(short = 'l', long)]
        selector: String,
    },
    /// Clear a pods-unready fault (all of them with --all).
    PodsReady {
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(short = 'l', long, required_unless_present = "all")]
        selector: Option<String>,
        #[arg(long)]
        all: bool,
    },
    /// Show the faults in force.
    List,
}

/// What runs a member's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    Sim,
    Netns,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Sim => "sim",
            RuntimeKind::Netns => "netns",
        }
    }
}

/// A member's default pod CIDR: a /16 of 10.128.0.0/9 picked by name.
/// A member's default pod range: a /16 of 10.128.0.0/9 picked by its name
/// (so that the members of one machine seldom overlap), widened when its
/// nodes' blocks need more than a /16 holds (1,000 nodes: a /14).
fn default_pod_cidr(name: &str, nodes: usize, node_pods: u32) -> ipnet::Ipv4Net {
    let h = name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let second = 128 + (h % 128) as u8;
    let needed = u64::from(flotilla_member::config::pod_block_size(node_pods))
        .saturating_mul(nodes.max(1) as u64);
    let bits = needed.next_power_of_two().trailing_zeros().min(23) as u8;
    let prefix = (32 - bits).min(16);
    ipnet::Ipv4Net::new(std::net::Ipv4Addr::new(10, second, 0, 0), prefix)
        .map(|n| n.trunc())
        .unwrap_or_default()
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Mode {
    Refuse,
    Hang,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Some(MemberCommand::Fault(f)) => fault(f).await,
        Some(MemberCommand::Node(n)) => node(n).await,
        None => serve(args.run).await,
    }
}

fn parse_labels(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => {
                bail!("--node-labels {p:?} is not key=value (try --node-labels disk=ssd,gpu=none)")
            }
        })
        .collect()
}

/// The file, in the data dir, that lists the members a process serves.
pub const MEMBERS_FILE: &str = "members.json";

/// One member's name and where it keeps its files.
struct Placement {
    /// 1-based position among the process's members.
    index: usize,
    name: String,
    data_dir: PathBuf,
    kubeconfig: PathBuf,
}

/// Where the process's members are: with `--count 1` the member is NAME
/// in the data dir itself (as always); with more, NAME-i in DATA_DIR/NAME-i.
fn placements(args: &RunArgs, name: &str, data_dir: &Path) -> Vec<Placement> {
    if args.count <= 1 {
        let kubeconfig = args
            .write_kubeconfig
            .clone()
            .unwrap_or_else(|| data_dir.join("kubeconfig"));
        return vec![Placement {
            index: 1,
            name: name.to_string(),
            data_dir: data_dir.to_path_buf(),
            kubeconfig,
        }];
    }
    (1..=args.count)
        .map(|index| {
            let name = format!("{name}-{index}");
            let dir = data_dir.join(&name);
            Placement {
                index,
                kubeconfig: dir.join("kubeconfig"),
                name,
                data_dir: dir,
            }
        })
        .collect()
}

/// The flags that name one thing (a port, a file) cannot serve several
/// members, and the netns runtime owns host-wide state.
fn check_count(args: &RunArgs) -> anyhow::Result<()> {
    let count = args.count;
    if count == 0 {
        bail!("--count 0 starts nothing (use --count 1 or more)");
    }
    if count == 1 {
        return Ok(());
    }
    for (flag, addr) in [
        ("--listen", args.listen),
        ("--admin-listen", args.admin_listen),
    ] {
        if addr.port() != 0 {
            bail!(
                "{flag} {addr} names one port, which {count} members cannot share: use port 0 ({flag} {}:0) and each member gets a free port",
                addr.ip()
            );
        }
    }
    if args.write_kubeconfig.is_some() {
        bail!(
            "--write-kubeconfig names one file, and --count {count} starts {count} members: leave it out (each member writes DATA_DIR/NAME-i/kubeconfig)"
        );
    }
    if args.runtime == RuntimeKind::Netns || args.underlay.is_some() {
        bail!(
            "--runtime netns and --underlay run one member per process: its pods' network is the host's (start one `flotilla member --runtime netns` per member, or leave --count out)"
        );
    }
    if args.storage.store == crate::apiserver::StoreKind::Etcd {
        bail!(
            "--store etcd keeps one member's objects under --etcd-prefix, which {count} members cannot share: start one `flotilla member --store etcd` per member, each with its own --etcd-prefix"
        );
    }
    if matches!(args.audit.audit_log_path.as_deref(), Some(path) if path != "-") {
        bail!(
            "--audit-log-path names one file, which {count} members cannot share: use --audit-log-path - (stdout), or leave --count out"
        );
    }
    Ok(())
}

/// Open files a member may hold: about 7 when idle (two listeners, the
/// store's writer with its WAL and shared memory, one reader), up to 4
/// more pooled readers under load, and its clients' connections.
const FILES_PER_MEMBER: u64 = 16;

/// Raises this process's open-files limit to the hard limit, since many
/// members hold many descriptors; warns when even that looks too few.
fn raise_open_files(count: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let mut current = limit.current;
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => current = limit.maximum,
            Err(error) => tracing::warn!(%error, "cannot raise the open-files limit"),
        }
    }
    let wanted = count as u64 * FILES_PER_MEMBER;
    if let Some(current) = current
        && current < wanted
    {
        tracing::warn!(
            limit = current,
            wanted,
            "the open-files limit may be too low for {count} members (raise it with ulimit -n)"
        );
    }
}

/// A member that answers through its kubeconfig.
struct Started {
    index: usize,
    name: String,
    url: String,
    kubeconfig: PathBuf,
    data_dir: PathBuf,
    /// Ends once the member has stopped: its shutdown resolved, or its
    /// server failed.
    running: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// What `members.json` says of each member.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct MemberEntry {
    pub name: String,
    pub server: String,
    pub kubeconfig: PathBuf,
    pub data_dir: PathBuf,
}

/// `members.json`: the members one `flotilla member` process serves, in
/// order, written once every one of them is ready.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub struct MembersFile {
    pub members: Vec<MemberEntry>,
}

/// Resolves once `stop` says so (or its sender is gone).
/// SIGTERM or SIGINT, or `--exit-with-dir`'s directory gone (checked
/// every second): an infrastructure provider's member stops with the
/// provider's state, whoever removes it.
async fn stop_signal(dir: Option<PathBuf>) {
    let gone = async {
        let Some(dir) = dir else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if !dir.exists() {
                tracing::info!(dir = %dir.display(), "--exit-with-dir is gone; stopping");
                return;
            }
        }
    };
    tokio::select! {
        _ = apiserver::shutdown_signal() => {}
        _ = gone => {}
    }
}

async fn until_stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Runs `--count` members (one by default) in this process until SIGTERM
/// or SIGINT, or until every member has stopped on its own.
async fn serve(args: RunArgs) -> anyhow::Result<()> {
    use futures::StreamExt;
    check_count(&args)?;
    let name = args.name.clone().unwrap_or_default();
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| apiserver::default_data_dir(&format!("member-{name}")));
    std::fs::create_dir_all(&data_dir).with_context(|| {
        format!(
            "cannot create the data dir {} (choose another with --data-dir)",
            data_dir.display()
        )
    })?;
    // A list left by an earlier run must not be read as this one's.
    let members_file = data_dir.join(MEMBERS_FILE);
    match std::fs::remove_file(&members_file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove {}", members_file.display()));
        }
    }
    let count = args.count;
    if count > 1 {
        raise_open_files(count);
    }
    let concurrency = args.start_concurrency.max(1);
    let placements = placements(&args, &name, &data_dir);
    let args = Arc::new(args);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = stop_signal(args.exit_with_dir.clone());
    tokio::pin!(signal);

    let began = std::time::Instant::now();
    let mut starting = futures::stream::iter(placements)
        .map(|place| {
            let args = args.clone();
            let shutdown = until_stopped(stopped.clone());
            let span = tracing::info_span!("member", name = %place.name);
            let member = place.name.clone();
            let start = async move {
                let started = start_member(&args, place, shutdown).await;
                if count > 1 {
                    started.with_context(|| format!("cannot start member {member}"))
                } else {
                    started
                }
            };
            if count > 1 {
                tokio::spawn(start.instrument(span))
            } else {
                tokio::spawn(start)
            }
        })
        .buffer_unordered(concurrency);
    let mut members = Vec::with_capacity(count);
    let interrupted = loop {
        tokio::select! {
            next = starting.next() => match next {
                None => break None,
                Some(Ok(Ok(member))) => members.push(member),
                Some(Ok(Err(e))) => break Some(Err(e)),
                Some(Err(e)) => break Some(Err(anyhow::Error::new(e).context("a member's start-up task failed"))),
            },
            _ = &mut signal => break Some(Ok(())),
        }
    };
    if let Some(outcome) = interrupted {
        // Those still starting see the stop as soon as they serve.
        let _ = stop.send(true);
        drop(starting);
        for m in members {
            let _ = m.running.await;
        }
        return outcome;
    }
    members.sort_by_key(|m| m.index);
    let list = MembersFile {
        members: members
            .iter()
            .map(|m| MemberEntry {
                name: m.name.clone(),
                server: m.url.clone(),
                kubeconfig: m.kubeconfig.clone(),
                data_dir: m.data_dir.clone(),
            })
            .collect(),
    };
    crate::kubeconfig::write_atomically(&members_file, &serde_json::to_string_pretty(&list)?)?;
    if let [m] = members.as_slice() {
        eprintln!(
            "flotilla member {} ready on {} ({} nodes)\n  export KUBECONFIG={}\n  faults: flotilla member fault --data-dir {} --help",
            m.name,
            m.url,
            args.nodes,
            m.kubeconfig.display(),
            m.data_dir.display()
        );
    } else {
        info!(members = count, seconds = began.elapsed().as_secs_f64(), list = %members_file.display(), "all members ready");
        eprintln!(
            "flotilla member: {count} members {name}-1 .. {name}-{count} ready in {:.1} s ({} nodes each), listed in {}\n  export KUBECONFIG={}\n  faults: flotilla member fault --data-dir {} --help",
            began.elapsed().as_secs_f64(),
            args.nodes,
            members_file.display(),
            members[0].kubeconfig.display(),
            members[0].data_dir.display()
        );
    }

    let mut running: futures::stream::FuturesUnordered<_> = members
        .into_iter()
        .map(|m| async move {
            match m.running.await {
                Ok(result) => result.with_context(|| format!("member {}", m.name)),
                Err(e) => {
                    Err(anyhow::Error::new(e).context(format!("member {}'s task failed", m.name)))
                }
            }
        })
        .collect();
    let mut result = Ok(());
    let mut signalled = false;
    loop {
        tokio::select! {
            _ = &mut signal, if !signalled => {
                signalled = true;
                let _ = stop.send(true);
            }
            ended = running.next() => match ended {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    if count > 1 {
                        tracing::error!(error = %format!("{e:#}"), "a member stopped");
                    }
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            },
        }
    }
    result?;
    info!("shut down cleanly");
    Ok(())
}

/// Starts one member: its store and API server, nodes and controllers,
/// admin endpoint and TLS listener; returns once it answers through the
/// kubeconfig it wrote. It serves until `shutdown` resolves.
async fn start_member(
    args: &RunArgs,
    place: Placement,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Started> {
    let Placement {
        index,
        name,
        data_dir,
        kubeconfig: kubeconfig_path,
    } = place;
    let pod_cidr = args
        .pod_cidr
        .unwrap_or_else(|| default_pod_cidr(&name, args.nodes, args.node_pods));
    let sim = SimConfig {
        cluster_name: name.clone(),
        nodes: args.nodes,
        node_cpu: args.node_cpu.clone(),
        node_memory: args.node_memory.clone(),
        node_pods: args.node_pods,
        region: args.region.clone(),
        zones: args.zone.clone(),
        provider: args.provider.clone(),
        instance_type: args.instance_type.clone(),
        node_labels: parse_labels(&args.node_labels)?,
        pod_startup: args.pod_startup,
        job_duration: args.job_duration,
        heartbeat: args.node_heartbeat,
        pod_cidr,
        volumes_dir: data_dir.join("volumes"),
        ..SimConfig::default()
    };
    sim.validate().map_err(anyhow::Error::msg)?;
    if args.runtime == RuntimeKind::Netns
        && !args.listen.ip().is_loopback()
        && !args.allow_remote_exec
    {
        bail!(
            "--runtime netns runs pod commands on this host, and `kubectl exec` reaches them: --listen {} is not loopback (use 127.0.0.1, or add --allow-remote-exec)",
            args.listen
        );
    }
    if args.leader_elect {
        if args.runtime != RuntimeKind::Sim {
            bail!(
                "--leader-elect runs the nodes' kubelets in whichever replica leads, which --runtime netns cannot move between processes: use --runtime sim"
            );
        }
        if args.velero() || args.peering() {
            bail!(
                "--leader-elect runs only the workload controllers and kubelets under the lease: leave out --velero true and --peering-controllers true"
            );
        }
    }
    if args.underlay.is_some() && args.runtime != RuntimeKind::Netns {
        bail!("--underlay needs --runtime netns: simulated pods have no network to connect");
    }
    let serve_args = ServeArgs {
        listen: args.listen,
        audit: args.audit.clone(),
        watch_history: args.watch_history,
        tls_sans: args.tls_sans.clone(),
        token_auth_file: args.token_auth_file.clone(),
        authorization_mode: args.authorization_mode,
        storage: args.storage.clone(),
    };
    // Pods' start, step by step, in `/metrics` (a netns member's only).
    let timings = Arc::new(flotilla_member::runtime::netns::timings::Timings::default());
    let metrics: Option<flotilla_apiserver::config::MetricsSource> =
        matches!(args.runtime, RuntimeKind::Netns).then(|| {
            let timings = timings.clone();
            Arc::new(move || timings.render()) as flotilla_apiserver::config::MetricsSource
        });
    let config = Config {
        service_network: ServiceNetwork {
            cluster_ip_range: args.service_cidr,
            ..ServiceNetwork::default()
        },
        metrics,
        ..Config::default()
    };
    let p = apiserver::prepare(&data_dir, &serve_args, config).await?;
    let faults = Faults::default();

    // The controllers talk to the API in process, so they keep running
    // while the member plays unreachable.
    let clients = Clients {
        controller_manager: loopback::in_process(&p.api, &p.admin_token, "kube-controller-manager"),
        scheduler: loopback::in_process(&p.api, &p.admin_token, "kube-scheduler"),
        kubelet: loopback::in_process(&p.api, &p.admin_token, "kubelet"),
    };
    // Velero's server, as `velero install` would run it in a cluster.
    let velero = args.velero().then(|| {
        let client = loopback::in_process(&p.api, &p.admin_token, "velero");
        tokio::spawn(flotilla_backup::run(client).in_current_span())
    });
    // Nodes may join and leave while the member runs (an infrastructure
    // provider's machines), each netns node with its namespace; but the
    // fabric's gateways are chosen among the nodes at start.
    let roster = Roster::load(&sim, Some(data_dir.join(NODES_FILE)));
    let roster = Arc::new(match (&args.runtime, &args.underlay) {
        (RuntimeKind::Netns, Some(_)) => {
            roster.fixed("a member with a network fabric keeps the nodes it started with")
        }
        _ => roster,
    });
    let (runtime, netns) = match args.runtime {
        RuntimeKind::Sim => {
            // Simulated pods have no logs; offloaded ones do, in the
            // provider.
            p.api
                .set_connect_kubelet(flotilla_peering::consumer::kubelet::VirtualKubelet::new(
                    loopback::in_process(&p.api, &p.admin_token, "liqo-virtual-kubelet"),
                    None,
                ));
            (RuntimeHandle::sim(&sim), None)
        }
        RuntimeKind::Netns => {
            let (events, rx) = Events::channel();
            let config = NetnsConfig {
                data_dir: data_dir.clone(),
                helper: std::env::current_exe()
                    .context("cannot find this binary, which pods' containers run through")?,
                shape: sim.clone(),
                dns_ip: dns_ip(args.service_cidr),
                pods: Arc::new(flotilla_member::kubelet::config::ApiPodConfig::new(
                    clients.kubelet.clone(),
                )),
                recorder: flotilla_member::events::EventRecorder::new(
                    clients.kubelet.clone(),
                    "kubelet",
                    &sim.cluster_name,
                ),
                roster: roster.clone(),
                timings,
            };
            let netns = NetnsRuntime::start(config, events)
                .await
                .map_err(anyhow::Error::msg)?;
            // Services and cluster DNS on the pods' network, as kube-proxy
            // and CoreDNS provide them.
            tokio::spawn(flotilla_member::proxy::run(
                clients.kubelet.clone(),
                Arc::new(netns.network().clone()),
            ));
            let network = netns.network();
            if let Err(e) = flotilla_member::dns::start(
                clients.kubelet.clone(),
                &network.prefix,
                network.bridge_ip(),
                dns_ip(args.service_cidr),
            )
            .await
            {
                netns.shutdown().await;
                bail!(e);
            }
            // Pods on a peering's virtual node are reached through the
            // provider; the rest through the netns runtime.
            p.api
                .set_kubelet(flotilla_peering::consumer::kubelet::VirtualKubelet::new(
                    loopback::in_process(&p.api, &p.admin_token, "liqo-virtual-kubelet"),
                    Some(netns.clone()),
                ));
            let runtime: Arc<dyn Runtime> = netns.clone();
            (
                RuntimeHandle {
                    runtime,
                    events: rx,
                },
                Some(netns),
            )
        }
    };
    // Peering (Liqo's model): pods of offloaded namespaces are mutated at
    // admission, and both sides' controllers run in process.
    let peering = if args.peering() {
        p.api
            .add_mutating_admission(Arc::new(flotilla_peering::admission::OffloadedPods));
        p.api
            .add_mutating_admission(Arc::new(flotilla_peering::admiralty::ProxyPods));
        let client = loopback::in_process(&p.api, &p.admin_token, "liqo-controller-manager");
        let name = name.clone();
        Some(tokio::spawn(
            async move { flotilla_peering::run(client, &name).await }.in_current_span(),
        ))
    } else {
        None
    };
    let simulator = if args.leader_elect {
        // metrics.k8s.io from whichever term leads; nothing between terms.
        let metrics = Arc::new(LeaderMetrics::default());
        p.api.set_resource_metrics(metrics.clone());
        let lease_client = loopback::in_process(&p.api, &p.admin_token, "kube-controller-manager");
        let term = Term {
            clients,
            sim: sim.clone(),
            roster: roster.clone(),
            faults: faults.clone(),
            metrics,
        };
        Running::Elected(tokio::spawn(
            lead_terms(lease_client, term).in_current_span(),
        ))
    } else {
        let simulator = Simulator::start(
            clients,
            sim.clone(),
            roster.clone(),
            faults.clone(),
            runtime,
        )
        .await
        .context("cannot start the simulated nodes and controllers")?;
        // metrics.k8s.io, as metrics-server would add it to a real cluster.
        p.api.set_resource_metrics(simulator.metrics.clone());
        Running::Always(simulator)
    };

    let admin_listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} for the admin endpoint",
                args.admin_listen
            )
        })?;
    let admin_addr = admin_listener.local_addr()?;
    let admin_router = admin::router(faults.clone(), sim, roster, &p.admin_token);
    let admin_task = tokio::spawn(
        async move {
            let _ = axum::serve(admin_listener, admin_router).await;
        }
        .in_current_span(),
    );
    write_plain(&data_dir.join(ADMIN_ADDRESS), &admin_addr.to_string())?;

    let server = tokio::spawn(
        front_door::serve(p.api.clone(), p.listener, p.tls, faults, shutdown).in_current_span(),
    );
    // Before anyone is told the member is ready (`flotilla join` looks for
    // the operator's namespace to know the member runs a fabric): the
    // fabric's namespace, CRDs and the gateways' own identity.
    let gateway_token = if args.underlay.is_some() && netns.is_some() {
        let operator = loopback::in_process(&p.api, &p.admin_token, "submariner-operator");
        Some(
            flotilla_fabric::identity::bootstrap(&operator)
                .await
                .map_err(anyhow::Error::msg)
                .context("cannot prepare the network fabric")?,
        )
    } else {
        None
    };
    let url =
        apiserver::publish_kubeconfig(p.addr, &name, &p.ca_pem, &p.admin_token, &kubeconfig_path)
            .await?;
    info!(member = %name, kubeconfig = %kubeconfig_path.display(), admin = %admin_addr, "ready");
    let fabric = match (&netns, &args.underlay) {
        (Some(netns), Some(underlay)) => {
            let network = netns.network();
            let config = flotilla_fabric::supervisor::SupervisorConfig {
                member: loopback::in_process(&p.api, &p.admin_token, "submariner-operator"),
                binary: std::env::current_exe()
                    .context("cannot find this binary, which gateways run")?,
                kubeconfig: gateway_kubeconfig(
                    &data_dir,
                    &url,
                    &p.ca_pem,
                    gateway_token.as_deref().unwrap_or_default(),
                )?,
                dir: data_dir.join("gateways"),
                router_netns: network.prefix.clone(),
                nodes: network
                    .nodes()
                    .iter()
                    .map(|n| flotilla_fabric::supervisor::GatewayNode {
                        name: n.name.clone(),
                        netns: n.netns.clone(),
                        ip: n.ip,
                    })
                    .collect(),
                underlay: underlay.clone(),
                cluster_cidrs: vec![pod_cidr],
                service_cidrs: vec![args.service_cidr],
                gateways: args.gateways,
            };
            Some(tokio::spawn(
                flotilla_fabric::supervisor::run(config).in_current_span(),
            ))
        }
        _ => None,
    };
    let running = tokio::spawn(
        async move {
            let served = server.await.context("the server task failed");
            if let Some(f) = fabric {
                f.abort();
                let _ = f.await;
            }
            match simulator {
                Running::Always(simulator) => drop(simulator),
                Running::Elected(term) => term.abort(),
            }
            if let Some(peering) = peering {
                peering.abort();
            }
            if let Some(velero) = velero {
                velero.abort();
            }
            admin_task.abort();
            if let Some(netns) = netns {
                netns.shutdown().await;
            }
            served??;
            Ok(())
        }
        .in_current_span(),
    );
    Ok(Started {
        index,
        name,
        url,
        kubeconfig: kubeconfig_path,
        data_dir,
        running,
    })
}

/// The nodes and controllers: always, or while this replica leads.
enum Running {
    Always(Simulator),
    Elected(tokio::task::JoinHandle<()>),
}

/// What each term as leader starts its nodes and controllers with.
#[derive(Clone)]
struct Term {
    clients: Clients,
    sim: SimConfig,
    roster: Arc<Roster>,
    faults: Faults,
    metrics: Arc<LeaderMetrics>,
}

/// Stands for the Lease kube-system/kube-controller-manager, and runs the
/// nodes and controllers for each term held, as kube-controller-manager's
/// replicas do.
async fn lead_terms(client: kube::Client, term: Term) {
    let election = flotilla_federation::leader::Election {
        name: "kube-controller-manager".into(),
        ..flotilla_federation::leader::Election::new(
            flotilla_federation::leader::Election::identity(),
        )
    };
    flotilla_federation::leader::lead_each_term(client, election, || {
        let term = term.clone();
        async move {
            loop {
                let runtime = RuntimeHandle::sim(&term.sim);
                match Simulator::start(
                    term.clients.clone(),
                    term.sim.clone(),
                    term.roster.clone(),
                    term.faults.clone(),
                    runtime,
                )
                .await
                {
                    Ok(simulator) => {
                        *term.metrics.0.write() = Some(simulator.metrics.clone());
                        // Held for the term: it ends when the lease is lost.
                        let _simulator = simulator;
                        std::future::pending::<()>().await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot start the nodes and controllers; trying again");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        }
    })
    .await;
}

/// The leading term's metrics-server; none between terms.
#[derive(Default)]
struct LeaderMetrics(parking_lot::RwLock<Option<Arc<flotilla_member::metrics::MetricsServer>>>);

impl flotilla_apiserver::resource_metrics::ResourceMetrics for LeaderMetrics {
    fn nodes(&self) -> Vec<flotilla_apiserver::resource_metrics::NodeMetrics> {
        self.0
            .read()
            .as_ref()
            .map(|m| m.nodes())
            .unwrap_or_default()
    }

    fn pods(
        &self,
        namespace: Option<&str>,
    ) -> Vec<flotilla_apiserver::resource_metrics::PodMetrics> {
        self.0
            .read()
            .as_ref()
            .map(|m| m.pods(namespace))
            .unwrap_or_default()
    }
}

/// The cluster DNS address: the service range's tenth, as kubeadm picks.
fn dns_ip(service_cidr: ipnet::Ipv4Net) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(service_cidr.network()).saturating_add(10))
}

/// Where a running member says its admin endpoint listens.
const ADMIN_ADDRESS: &str = flotilla_member::admin::client::ADDRESS_FILE;
/// The nodes a simulated member runs, once they have changed since it
/// first started (`flotilla_member::roster`).
const NODES_FILE: &str = "nodes.json";

fn write_plain(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("cannot write {}", path.display()))
}

async fn fault(args: FaultArgs) -> anyhow::Result<()> {
    let admin = AdminClient::from_data_dir(&args.data_dir)?;
    let (method, path, body) = match &args.fault {
        Fault::Unreachable { mode } => {
            let mode = match mode {
                Mode::Refuse => "refuse",
                Mode::Hang => "hang",
            };
            (
                http::Method::PUT,
                "/faults/unreachable".to_string(),
                Some(serde_json::json!({"mode": mode})),
            )
        }
        Fault::Reachable => (http::Method::DELETE, "/faults/unreachable".into(), None),
        Fault::NodeNotReady { node } => (
            http::Method::PUT,
            format!("/faults/nodes/{node}/not-ready"),
            None,
        ),
        Fault::NodeReady { node } => (
            http::Method::DELETE,
            format!("/faults/nodes/{node}/not-ready"),
            None,
        ),
        Fault::PodsUnready {
            namespace,
            selector,
        } => (
            http::Method::PUT,
            "/faults/unready-pods".into(),
            Some(serde_json::json!({"namespace": namespace, "selector": selector})),
        ),
        Fault::PodsReady {
            namespace,
            selector,
            all,
        } => (
            http::Method::DELETE,
            "/faults/unready-pods".into(),
            match (all, selector) {
                (false, Some(s)) => {
                    Some(serde_json::json!({"namespace": namespace, "selector": s}))
                }
                _ => None,
            },
        ),
        Fault::List => (http::Method::GET, "/faults".into(), None),
    };
    println!("{}", admin.request(method, &path, body).await?);
    Ok(())
}

async fn node(args: NodeArgs) -> anyhow::Result<()> {
    let admin = AdminClient::from_data_dir(&args.data_dir)?;
    let text = match args.action {
        NodeAction::Add {
            name,
            labels,
            taints,
            provider_id,
            kubelet_version,
        } => {
            let taints = taints
                .iter()
                .map(|t| parse_taint(t))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let spec = NodeSpec {
                labels: parse_labels(&labels)?,
                taints,
                provider_id,
                kubelet_version,
            };
            let body = serde_json::to_value(spec)?;
            admin
                .request(http::Method::PUT, &format!("/nodes/{name}"), Some(body))
                .await?
        }
        NodeAction::Remove { name } => {
            admin
                .request(http::Method::DELETE, &format!("/nodes/{name}"), None)
                .await?;
            format!("node {name} removed")
        }
        NodeAction::List => admin.request(http::Method::GET, "/nodes", None).await?,
    };
    println!("{text}");
    Ok(())
}

/// `key[=value]:Effect`, as `kubectl taint` writes a taint.
fn parse_taint(text: &str) -> anyhow::Result<serde_json::Value> {
    let (kv, effect) = text
        .rsplit_once(':')
        .with_context(|| format!("taint {text:?} has no effect: write key[=value]:NoSchedule"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        bail!("taint {text:?}: the effect is NoSchedule, PreferNoSchedule or NoExecute");
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let mut taint = serde_json::json!({"key": key, "effect": effect});
    if !value.is_empty() {
        taint["value"] = value.into();
    }
    Ok(taint)
}

/// The kubeconfig the gateways reach their member with: the token of
/// their own ServiceAccount (`flotilla_fabric::identity`), not the admin's.
fn gateway_kubeconfig(
    data_dir: &std::path::Path,
    server: &str,
    ca_pem: &str,
    token: &str,
) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("gateways");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("gateway.kubeconfig");
    let contents = crate::kubeconfig::render(server, "submariner-gateway", ca_pem, token);
    crate::kubeconfig::write_atomically(&path, &contents)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::default_pod_cidr;

    #[test]
    fn the_default_pod_range_holds_every_nodes_block() {
        let small = default_pod_cidr("east", 3, 110);
        assert_eq!(small.prefix_len(), 16);
        assert_eq!(default_pod_cidr("east", 3, 110), small, "stable per name");
        for (nodes, prefix) in [(256, 16), (257, 15), (1000, 14), (100_000, 9)] {
            let range = default_pod_cidr("east", nodes, 110);
            assert_eq!(range.prefix_len(), prefix, "{nodes} nodes: {range}");
            assert_eq!(range, range.trunc(), "{range} is aligned");
            let sim = flotilla_member::config::SimConfig {
                nodes: nodes.min(1000),
                pod_cidr: range,
                ..Default::default()
            };
            assert!(sim.node_pod_cidr(sim.nodes - 1).is_some(), "{range}");
        }
    }
}
