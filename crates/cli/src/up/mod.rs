//! `flotilla up`: a local fleet in one command. A control plane and N
//! simulated members run as child processes of this binary, each with its
//! own data directory and log; the members are joined to the hub (every
//! third one in Pull mode, through a `flotilla agent`), and one kubeconfig
//! gets a context per cluster. The fleet's shape and ports are kept in
//! `fleet.json`, so `flotilla up` again resumes the same fleet. A new
//! fleet's servers listen on ports the OS chooses as they bind (a port
//! picked beforehand could be taken by anything in between), learned
//! from the kubeconfig each writes, and kept from then on.
//!
//! Children run in their own process group, so Ctrl-C reaches only `up`,
//! which stops them in order (agents, hub, members) by closing their
//! stdin; if `up` itself is killed, the closed pipes stop them as well.
//! Once the fleet is ready, a child that exits (killed, crashed) is started
//! again on its data dir and port, with a backoff while it keeps exiting
//! (`flotilla chaos` counts on it).

mod etcd;
mod process;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_federation::api::Cluster;
use flotilla_federation::join::{self as federation_join, JoinRequest};
use kube::Api;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use tokio::time::Instant;

use crate::apiserver::{default_data_dir, shutdown_signal};
use crate::kubeconfig::{self, Entry};
use crate::token;
use process::{Fleet, Process};

#[derive(clap::Args)]
pub struct UpArgs {
    /// Where the fleet keeps its state [default: <user data dir>/flotilla/fleet]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// How many members: member1, member2, ... (every third one in Pull
    /// mode) [default: 3, or as many as the fleet in --data-dir has]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=26))]
    pub members: Option<u16>,
    /// Write the fleet's kubeconfig here [default: <data dir>/kubeconfig]
    #[arg(long)]
    pub write_kubeconfig: Option<PathBuf>,
    /// What runs the members' pods: sim (bookkeeping) or netns (network
    /// namespaces with real processes; needs root) [default: sim, or what
    /// the fleet in --data-dir was started with]
    #[arg(long, value_enum)]
    pub runtime: Option<crate::member::RuntimeKind>,
    /// With --runtime netns: give every member the same pod and service
    /// CIDRs, joined through Globalnet (global CIDRs of 242.0.0.0/8),
    /// instead of distinct ones routed directly.
    #[arg(long)]
    pub overlapping_cidrs: bool,
    /// The hub's foreign fleet APIs, as `flotilla controlplane
    /// --frontends`: `kubefed`, `argocd`, or `none` [default: both, or
    /// what the fleet in --data-dir was last started with]
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(
        flotilla_federation::frontends::optional_names().chain(["none"])
    ))]
    pub frontends: Option<Vec<String>>,
    /// Run the hub as this many replicas on a local etcd (from the PATH):
    /// every replica serves the API, one leads the controllers [default:
    /// 1 on the embedded store, or what the fleet in --data-dir has]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=3))]
    pub hub_replicas: Option<u16>,
}

/// Regions given to members in turn.
const REGIONS: [&str; 6] = [
    "us-east",
    "eu-west",
    "ap-south",
    "us-west",
    "eu-central",
    "ap-northeast",
];

/// How long a process may take to answer, and the clusters to turn Ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A port not yet chosen: the server binds port 0 and the OS chooses.
const UNCHOSEN_PORT: u16 = 0;

/// The format of `fleet.json` this build writes and reads; files from
/// before the field existed are this format.
const SHAPE_FORMAT: u32 = 1;

fn first_format() -> u32 {
    1
}

/// What `fleet.json` keeps: enough to start the same fleet again.
#[derive(Serialize, Deserialize, Debug)]
struct Shape {
    #[serde(default = "first_format")]
    format: u32,
    hub_port: u16,
    members: Vec<MemberShape>,
    /// The members' `--runtime`.
    #[serde(default = "sim_runtime")]
    runtime: String,
    /// The underlay the members' gateways meet on (netns fleets).
    #[serde(default)]
    underlay: Option<String>,
    /// Members share their CIDRs and join through Globalnet.
    #[serde(default)]
    overlapping: bool,
    /// The hub's `--frontends`.
    #[serde(default = "all_frontends")]
    frontends: Vec<String>,
    /// With several hub replicas: the local etcd's ports, and the ports
    /// of the replicas after the first (`hub_port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etcd: Option<EtcdShape>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replica_ports: Vec<u16>,
}

#[derive(Serialize, Deserialize, Debug)]
struct EtcdShape {
    client_port: u16,
    peer_port: u16,
}

fn sim_runtime() -> String {
    "sim".into()
}

fn all_frontends() -> Vec<String> {
    flotilla_federation::frontends::optional_names()
        .map(String::from)
        .collect()
}

#[derive(Serialize, Deserialize, Debug)]
struct MemberShape {
    name: String,
    region: String,
    pull: bool,
    port: u16,
    /// Its pod and service CIDRs (netns fleets).
    #[serde(default)]
    pod_cidr: Option<String>,
    #[serde(default)]
    service_cidr: Option<String>,
}

impl MemberShape {
    fn mode(&self) -> &'static str {
        if self.pull { "Pull" } else { "Push" }
    }
}

impl Shape {
    fn new(
        members: u16,
        runtime: &str,
        underlay: Option<String>,
        overlapping: bool,
    ) -> anyhow::Result<Shape> {
        let netns = underlay.is_some();
        let members = (1..=members)
            .map(|i| {
                // Distinct CIDRs route directly; overlapping ones need Globalnet.
                let (pod, service) = match (netns, overlapping) {
                    (false, _) => (None, None),
                    (true, true) => (
                        Some("10.244.0.0/16".to_string()),
                        Some("10.96.0.0/16".to_string()),
                    ),
                    (true, false) => (
                        Some(format!("10.{}.0.0/16", 128 + i)),
                        Some(format!("10.{}.0.0/16", 64 + i)),
                    ),
                };
                Ok(MemberShape {
                    name: format!("member{i}"),
                    region: REGIONS[usize::from(i - 1) % REGIONS.len()].to_string(),
                    pull: i % 3 == 0,
                    port: UNCHOSEN_PORT,
                    pod_cidr: pod,
                    service_cidr: service,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Shape {
            format: SHAPE_FORMAT,
            hub_port: UNCHOSEN_PORT,
            members,
            runtime: runtime.to_string(),
            underlay,
            overlapping,
            frontends: all_frontends(),
            etcd: None,
            replica_ports: Vec::new(),
        })
    }

    fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        kubeconfig::write_atomically(path, &text)
            .with_context(|| format!("cannot write {}", path.display()))
    }

    fn load(path: &Path) -> anyhow::Result<Option<Shape>> {
        let shape: Shape = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is damaged; remove it to start afresh", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        if shape.format > SHAPE_FORMAT {
            bail!(
                "{} was written by a newer Flotilla (fleet format {}; this one reads up to {SHAPE_FORMAT}): \
                 run that version, or start another fleet with --data-dir DIR",
                path.display(),
                shape.format
            );
        }
        Ok(Some(shape))
    }

    /// Every port the fleet has listened on, with whose it is.
    fn ports(&self) -> Vec<(u16, String)> {
        std::iter::once((self.hub_port, "the control plane".to_string()))
            .chain(
                self.replica_ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (*p, format!("the control plane's replica {}", i + 2))),
            )
            .chain(
                self.etcd
                    .iter()
                    .flat_map(|e| [e.client_port, e.peer_port])
                    .map(|p| (p, "the fleet's etcd".to_string())),
            )
            .chain(self.members.iter().map(|m| (m.port, m.name.clone())))
            .filter(|(port, _)| *port != UNCHOSEN_PORT)
            .collect()
    }
}

/// Fails, naming the port and its owner, if another process listens on
/// one of the fleet's ports (another `flotilla up` on the same data dir,
/// or anything else that took it since the fleet last ran).
fn check_ports_free(shape: &Shape, shape_path: &Path) -> anyhow::Result<()> {
    for (port, whose) in shape.ports() {
        if let Err(e) = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))) {
            bail!(
                "port 127.0.0.1:{port} of {whose} (kept in {}) is unavailable: {e}; stop what \
                 listens there (another `flotilla up` on this data dir?), or start a separate \
                 fleet with --data-dir DIR",
                shape_path.display()
            );
        }
    }
    Ok(())
}

/// Waits for `path` to appear while `process` runs: servers write their
/// kubeconfig once they answer.
async fn wait_for_file(process: &mut Process, path: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !path.exists() {
        process.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{} did not answer within {}s; see {}",
                process.name,
                START_TIMEOUT.as_secs(),
                process.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The port of the server a kubeconfig it wrote points at.
fn served_port(kubeconfig: &Path) -> anyhow::Result<u16> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read {}", kubeconfig.display()))?;
    let server = kubeconfig::target_of(&config)?.server;
    server
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.port_u16())
        .with_context(|| format!("{} names no port in {server:?}", kubeconfig.display()))
}

/// A member's zones: two per region.
fn zones(region: &str) -> String {
    format!("{region}-a,{region}-b")
}

/// Prints one progress line.
fn progress(what: &str, state: &str, detail: &str) {
    println!("  {what:<15} {state:<8} {detail}");
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let dir = args.data_dir.unwrap_or_else(|| default_data_dir("fleet"));
    std::fs::create_dir_all(dir.join("logs")).with_context(|| {
        format!(
            "cannot use {} as the fleet's data dir; choose another with --data-dir DIR",
            dir.display()
        )
    })?;
    let shape_path = dir.join("fleet.json");
    let (mut shape, resumed) = match Shape::load(&shape_path)? {
        Some(shape) => {
            if let Some(n) = args.members
                && usize::from(n) != shape.members.len()
            {
                bail!(
                    "the fleet in {} has {} members, not {n}: use another --data-dir for another shape, or remove that one",
                    dir.display(),
                    shape.members.len()
                );
            }
            if let Some(r) = args.runtime
                && r.as_str() != shape.runtime
            {
                bail!(
                    "the fleet in {} runs its pods with --runtime {}, not {}: use another --data-dir, or remove that one",
                    dir.display(),
                    shape.runtime,
                    r.as_str()
                );
            }
            if args.overlapping_cidrs && !shape.overlapping {
                bail!(
                    "the fleet in {} has distinct CIDRs: use another --data-dir for overlapping ones, or remove that one",
                    dir.display()
                );
            }
            if let Some(n) = args.hub_replicas
                && usize::from(n) != shape.replica_ports.len() + 1
            {
                bail!(
                    "the fleet in {} has {} hub replicas, not {n}: use another --data-dir, or remove that one",
                    dir.display(),
                    shape.replica_ports.len() + 1
                );
            }
            if shape.etcd.is_some() {
                etcd::end_leftover(&dir).await;
            }
            check_ports_free(&shape, &shape_path)?;
            (shape, true)
        }
        None => {
            let runtime = args.runtime.map_or("sim", |r| r.as_str());
            if args.overlapping_cidrs && runtime != "netns" {
                bail!(
                    "--overlapping-cidrs needs --runtime netns: simulated pods have no network to overlap"
                );
            }
            // Named after the data dir, so two fleets never share one.
            let underlay = (runtime == "netns").then(|| {
                let digest = sha2::Sha256::digest(dir.display().to_string().as_bytes());
                format!(
                    "flt-ul-{:02x}{:02x}{:02x}{:02x}",
                    digest[0], digest[1], digest[2], digest[3]
                )
            });
            let mut shape = Shape::new(
                args.members.unwrap_or(3),
                runtime,
                underlay,
                args.overlapping_cidrs,
            )?;
            let replicas = args.hub_replicas.unwrap_or(1);
            if replicas > 1 {
                etcd::binary()?;
                shape.etcd = Some(EtcdShape {
                    client_port: etcd::free_port()?,
                    peer_port: etcd::free_port()?,
                });
                shape.replica_ports = vec![UNCHOSEN_PORT; usize::from(replicas - 1)];
            }
            shape.save(&shape_path)?;
            (shape, false)
        }
    };
    // Front ends may change from one start to the next: only the hub's
    // flags follow.
    if let Some(chosen) = args.frontends {
        shape.frontends = chosen.into_iter().filter(|f| f != "none").collect();
        shape.save(&shape_path)?;
    }
    let kubeconfig_path = args
        .write_kubeconfig
        .unwrap_or_else(|| dir.join("kubeconfig"));
    println!(
        "flotilla up: {} fleet in {} (logs in {})",
        if resumed { "resuming the" } else { "a new" },
        dir.display(),
        dir.join("logs").display()
    );
    // What earlier fleets killed with SIGKILL left on this host, whatever
    // their data dirs (the host's record; `flotilla cleanup` does the same).
    for left in flotilla_host::record::sweep_stale(false).await {
        if !left.made.is_empty() {
            println!(
                "removed what an earlier {} left ({}: {} network namespaces, {} processes)",
                left.record.what,
                left.record.prefix,
                left.made.namespaces.len(),
                left.made.processes.len()
            );
        }
    }
    let mut fleet = Fleet {
        processes: Vec::new(),
    };
    let started = tokio::select! {
        r = start(&dir, &mut shape, &shape_path, &kubeconfig_path, &mut fleet) => r,
        _ = shutdown_signal() => Err(anyhow::anyhow!("interrupted while starting")),
    };
    if let Err(e) = started {
        fleet.stop().await;
        if let Some(underlay) = &shape.underlay {
            flotilla_fabric::underlay::delete(underlay).await;
        }
        return Err(e);
    }
    println!(
        "\nThe fleet is ready. Try:\n  export KUBECONFIG={}\n  kubectl get clusters\n  flotilla clusters\n  kubectl config get-contexts       # flotilla (the hub), {}\nCtrl-C stops it; `flotilla up` again resumes it.",
        kubeconfig_path.display(),
        shape
            .members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let outcome = tokio::select! {
        _ = shutdown_signal() => Ok(()),
        e = watch(&mut fleet) => Err(e),
    };
    println!("stopping the fleet...");
    fleet.stop().await;
    if let Some(underlay) = &shape.underlay {
        flotilla_fabric::underlay::delete(underlay).await;
    }
    println!("stopped");
    outcome
}

/// Keeps every process of the fleet running, starting again whichever
/// exits; resolves only if one cannot be started at all.
async fn watch(fleet: &mut Fleet) -> anyhow::Error {
    loop {
        for p in &mut fleet.processes {
            if let Err(e) = p.keep_running().await {
                return e;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(
    dir: &Path,
    shape: &mut Shape,
    shape_path: &Path,
    kubeconfig_path: &Path,
    fleet: &mut Fleet,
) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the flotilla binary")?;
    let logs = dir.join("logs");
    let s = |v: &str| v.to_string();

    if let Some(underlay) = &shape.underlay {
        let cidr = UNDERLAY_CIDR.parse().context("the underlay CIDR")?;
        flotilla_fabric::underlay::own(underlay, &dir.display().to_string())?;
        flotilla_fabric::underlay::create(underlay, cidr)
            .await
            .with_context(|| {
                format!("cannot make the underlay {underlay} (needs root and iproute2)")
            })?;
        progress(
            "underlay",
            "ready",
            &format!("{underlay} ({UNDERLAY_CIDR})"),
        );
    }
    // Members first: the hub reaches for them as soon as it starts.
    for m in &shape.members {
        let data = dir.join(&m.name);
        let kubeconfig = data.join("kubeconfig");
        // Written anew once the member answers: its appearance means ready.
        let _ = std::fs::remove_file(&kubeconfig);
        let args = vec![
            s("member"),
            s("--runtime"),
            shape.runtime.clone(),
            s("--name"),
            m.name.clone(),
            s("--data-dir"),
            data.display().to_string(),
            s("--listen"),
            SocketAddr::from(([127, 0, 0, 1], m.port)).to_string(),
            s("--region"),
            m.region.clone(),
            s("--zone"),
            zones(&m.region),
        ];
        let mut args = args;
        if let Some(underlay) = &shape.underlay {
            args.extend([s("--underlay"), underlay.clone()]);
        }
        if let (Some(pod), Some(service)) = (&m.pod_cidr, &m.service_cidr) {
            args.extend([
                s("--pod-cidr"),
                pod.clone(),
                s("--service-cidr"),
                service.clone(),
            ]);
        }
        fleet.processes.push(Process::spawn(
            &exe,
            &m.name,
            &args,
            logs.join(format!("{}.log", m.name)),
        )?);
        progress(&m.name, "starting", &format!("{} ({})", m.region, m.mode()));
    }
    for (i, m) in shape.members.iter_mut().enumerate() {
        let kubeconfig = dir.join(&m.name).join("kubeconfig");
        wait_for_file(&mut fleet.processes[i], &kubeconfig).await?;
        m.port = served_port(&kubeconfig)?;
        fleet.processes[i].keep_port(m.port);
        progress(&m.name, "ready", &format!("https://127.0.0.1:{}", m.port));
    }

    // Several replicas share a local etcd, started first.
    let store_args = match &shape.etcd {
        Some(e) => {
            let args = etcd::args(dir, e.client_port, e.peer_port);
            fleet.processes.push(Process::spawn_foreign(
                &etcd::binary()?,
                "etcd",
                &args,
                logs.join("etcd.log"),
            )?);
            etcd::wait_listening(e.client_port, START_TIMEOUT).await?;
            progress("etcd", "ready", &etcd::client_url(e.client_port));
            vec![
                s("--store"),
                s("etcd"),
                s("--etcd-endpoints"),
                etcd::client_url(e.client_port),
            ]
        }
        None => Vec::new(),
    };
    let hub_dir = dir.join("hub");
    let hub_kubeconfig = hub_dir.join("kubeconfig");
    let _ = std::fs::remove_file(&hub_kubeconfig);
    let hub_args = |data: &Path, port: u16| {
        let mut args = vec![
            s("controlplane"),
            s("--data-dir"),
            data.display().to_string(),
            s("--listen"),
            SocketAddr::from(([127, 0, 0, 1], port)).to_string(),
            s("--write-kubeconfig"),
            data.join("kubeconfig").display().to_string(),
        ];
        args.extend(store_args.iter().cloned());
        if !shape.frontends.is_empty() {
            args.extend([s("--frontends"), shape.frontends.join(",")]);
        }
        args
    };
    let args = hub_args(&hub_dir, shape.hub_port);
    let mut hub_process =
        Process::spawn(&exe, "control plane", &args, logs.join("controlplane.log"))?;
    let frontends = if shape.frontends.is_empty() {
        "none".to_string()
    } else {
        shape.frontends.join(", ")
    };
    progress(
        "control plane",
        "starting",
        &format!("front ends: {frontends}"),
    );
    let answered = wait_for_file(&mut hub_process, &hub_kubeconfig).await;
    fleet.processes.push(hub_process);
    answered?;
    shape.hub_port = served_port(&hub_kubeconfig)?;
    if let Some(hub) = fleet.processes.last_mut() {
        hub.keep_port(shape.hub_port);
    }
    // Every port is known now: kept for the next start.
    shape.save(shape_path)?;
    progress(
        "control plane",
        "ready",
        &format!("https://127.0.0.1:{}", shape.hub_port),
    );
    // The other replicas serve with the first one's CA and admin token.
    for i in 0..shape.replica_ports.len() {
        let name = format!("control plane {}", i + 2);
        let data = dir.join(format!("hub-{}", i + 2));
        share_credentials(&hub_dir, &data)?;
        let kubeconfig = data.join("kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let args = hub_args(&data, shape.replica_ports[i]);
        let mut replica = Process::spawn(
            &exe,
            &name,
            &args,
            logs.join(format!("controlplane-{}.log", i + 2)),
        )?;
        let answered = wait_for_file(&mut replica, &kubeconfig).await;
        fleet.processes.push(replica);
        answered?;
        shape.replica_ports[i] = served_port(&kubeconfig)?;
        if let Some(r) = fleet.processes.last_mut() {
            r.keep_port(shape.replica_ports[i]);
        }
        progress(
            &name,
            "ready",
            &format!("https://127.0.0.1:{}", shape.replica_ports[i]),
        );
    }
    if !shape.replica_ports.is_empty() {
        shape.save(shape_path)?;
    }

    let hub = kubeconfig::client(&hub_kubeconfig).await?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    for m in &shape.members {
        let member_kubeconfig = dir.join(&m.name).join("kubeconfig");
        if m.pull {
            let agent_kubeconfig = dir.join(&m.name).join("agent.kubeconfig");
            if !agent_kubeconfig.exists() {
                token::create_agent_kubeconfig(
                    hub_kubeconfig.clone(),
                    &m.name,
                    agent_kubeconfig.clone(),
                )
                .await
                .with_context(|| format!("cannot issue the agent token of {}", m.name))?;
            }
            let args = vec![
                s("agent"),
                s("--cluster-name"),
                m.name.clone(),
                s("--kubeconfig"),
                agent_kubeconfig.display().to_string(),
                s("--cluster-kubeconfig"),
                member_kubeconfig.display().to_string(),
                s("--region"),
                m.region.clone(),
                s("--zone"),
                zones(&m.region),
            ];
            let name = format!("{} agent", m.name);
            fleet.processes.push(Process::spawn(
                &exe,
                &name,
                &args,
                logs.join(format!("{}-agent.log", m.name)),
            )?);
            progress(&m.name, "agent", "started (Pull)");
        } else if clusters.get_opt(&m.name).await?.is_none() {
            let request = JoinRequest {
                name: m.name.clone(),
                credentials: federation_join::credentials_from_kubeconfig(
                    &member_kubeconfig,
                    None,
                )?,
                provider: None,
                region: Some(m.region.clone()),
                zones: zones(&m.region).split(',').map(str::to_string).collect(),
                labels: Default::default(),
            };
            federation_join::join(&hub, &request)
                .await
                .with_context(|| format!("cannot join {}", m.name))?;
            progress(&m.name, "joined", "(Push)");
        }
    }

    if shape.underlay.is_some() {
        // Every member, Push or Pull, gets the broker Secret from here:
        // with Globalnet, its global CIDR is allocated with the hub's
        // admin credentials (an agent may not allocate).
        let admin = federation_join::credentials_from_kubeconfig(&hub_kubeconfig, None)?;
        let fabric = crate::join::FabricArgs {
            globalnet: shape.overlapping,
            global_cidr: None,
        };
        for m in &shape.members {
            let member = kubeconfig::client(&dir.join(&m.name).join("kubeconfig")).await?;
            let joined = crate::join::join_fabric(&hub, &member, admin.clone(), &m.name, &fabric)
                .await
                .with_context(|| format!("cannot connect {} to the network fabric", m.name))?;
            let how = match joined {
                Some(Some(cidr)) => format!("network fabric (Globalnet {cidr})"),
                _ => format!(
                    "network fabric ({} {})",
                    m.pod_cidr.as_deref().unwrap_or("-"),
                    m.service_cidr.as_deref().unwrap_or("-")
                ),
            };
            progress(&m.name, "gateway", &how);
        }
    }
    wait_all_ready(&clusters, shape, fleet).await?;
    write_kubeconfig(dir, shape, &hub_kubeconfig, kubeconfig_path)
}

/// Gives a replica's data dir the first replica's CA and admin token
/// (docs/operations.md: every replica serves with the same ones).
fn share_credentials(first: &Path, replica: &Path) -> anyhow::Result<()> {
    let pki = replica.join("pki");
    std::fs::create_dir_all(&pki).with_context(|| format!("cannot make {}", pki.display()))?;
    for file in ["pki/ca.crt", "pki/ca.key", "admin-token"] {
        let (from, to) = (first.join(file), replica.join(file));
        if !to.exists() {
            std::fs::copy(&from, &to)
                .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
        }
    }
    Ok(())
}

/// The underlay's range (gateways' public addresses).
const UNDERLAY_CIDR: &str = "100.64.0.0/16";

/// Waits until every member's Cluster is Ready on the hub, telling each.
async fn wait_all_ready(
    clusters: &Api<Cluster>,
    shape: &Shape,
    fleet: &mut Fleet,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut waiting: Vec<&MemberShape> = shape.members.iter().collect();
    while !waiting.is_empty() {
        fleet.check_alive()?;
        let mut still = Vec::new();
        for m in waiting {
            let ready = clusters
                .get_opt(&m.name)
                .await?
                .is_some_and(|c| c.is_ready());
            if ready {
                progress(&m.name, "Ready", &format!("{} mode", m.mode()));
            } else {
                still.push(m);
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            if Instant::now() > deadline {
                let names: Vec<&str> = waiting.iter().map(|m| m.name.as_str()).collect();
                bail!(
                    "{} did not turn Ready within {}s; see the logs",
                    names.join(", "),
                    START_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// One kubeconfig for the fleet: context `flotilla` (the hub, current)
/// and one per member, from the kubeconfigs each server wrote.
fn write_kubeconfig(
    dir: &Path,
    shape: &Shape,
    hub_kubeconfig: &Path,
    path: &Path,
) -> anyhow::Result<()> {
    struct Read {
        name: String,
        server: String,
        ca: String,
        token: String,
    }
    let read = |name: &str, file: &Path| -> anyhow::Result<Read> {
        let k = kube::config::Kubeconfig::read_from(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let cluster = k
            .clusters
            .first()
            .and_then(|c| c.cluster.clone())
            .with_context(|| format!("{} names no cluster", file.display()))?;
        let token = k
            .auth_infos
            .first()
            .and_then(|u| u.auth_info.as_ref())
            .and_then(|u| u.token.as_ref())
            .map(|t| secrecy::ExposeSecret::expose_secret(t).to_string())
            .with_context(|| format!("{} has no token", file.display()))?;
        Ok(Read {
            name: name.to_string(),
            server: cluster.server.unwrap_or_default(),
            ca: cluster.certificate_authority_data.unwrap_or_default(),
            token,
        })
    };
    let mut all = vec![read("flotilla", hub_kubeconfig)?];
    for m in &shape.members {
        all.push(read(&m.name, &dir.join(&m.name).join("kubeconfig"))?);
    }
    let entries: Vec<Entry> = all
        .iter()
        .map(|r| Entry {
            name: &r.name,
            server: &r.server,
            ca_base64: &r.ca,
            token: &r.token,
        })
        .collect();
    kubeconfig::write_atomically(path, &kubeconfig::render_contexts(&entries, "flotilla"))
}
