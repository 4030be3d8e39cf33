//! The local provider's machines: each provisioned cluster is one
//! `flotilla member` process (its API server, with its nodes joining
//! through the member's admin endpoint), as CAPD's are Docker containers.
//!
//! Processes are started detached, in a process group of their own, so
//! they outlive a restart of the controllers; their pid and command line
//! are recorded in the cluster's directory, and a controller that starts
//! again finds them there rather than starting another. Each member is
//! told to exit when the provider's state directory goes, so a control
//! plane whose data dir is removed leaves no member behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use flotilla_member::admin::client::AdminClient;
use tracing::{info, warn};

use crate::error::Error;

/// What a cluster's member is started with.
#[derive(Clone, Debug)]
pub struct MemberSpec {
    /// The cluster's endpoint port.
    pub port: u16,
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub pod_cidr: Option<String>,
    pub service_cidr: Option<String>,
    /// `netns` to run pods for real (root), `sim` otherwise.
    pub runtime: String,
}

/// Where the provider keeps its clusters and how it starts them.
#[derive(Clone, Debug)]
pub struct Provider {
    /// The `flotilla` binary.
    pub exe: PathBuf,
    /// `<dir>/<namespace>/<cluster>` holds each member's data.
    pub dir: PathBuf,
    /// Environment variables a member must not inherit: `flotilla up`
    /// tells its children to stop with it, and a cluster's member
    /// outlives the controllers that started it.
    pub unset_env: Vec<String>,
    /// The etcd binary, when the host has one: a control plane of several
    /// machines needs it (their members share one store).
    pub etcd: Option<PathBuf>,
}

const PID_FILE: &str = "member.pid";
const ENDPOINT_PID_FILE: &str = "endpoint.pid";
const ETCD_PORTS_FILE: &str = "etcd.ports";
/// A cluster with this subdirectory has a control plane of several
/// machines: one member each, on the cluster's etcd, behind its endpoint.
const REPLICAS_DIR: &str = "machines";
/// The hidden command the endpoint runs as.
pub const ENDPOINT_COMMAND: &str = "__control-plane-endpoint";

impl Provider {
    /// The etcd binary on `PATH`, if any.
    pub fn find_etcd() -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    }

    pub fn member_dir(&self, namespace: &str, cluster: &str) -> PathBuf {
        self.dir.join(namespace).join(cluster)
    }

    fn replica_dir(&self, namespace: &str, cluster: &str, node: &str) -> PathBuf {
        self.member_dir(namespace, cluster)
            .join(REPLICAS_DIR)
            .join(node)
    }

    /// Whether the cluster's control plane is several members on etcd.
    pub fn replicated(&self, namespace: &str, cluster: &str) -> bool {
        self.member_dir(namespace, cluster)
            .join(REPLICAS_DIR)
            .is_dir()
    }

    /// Whether the cluster has a control plane of any shape yet.
    pub fn started(&self, namespace: &str, cluster: &str) -> bool {
        let dir = self.member_dir(namespace, cluster);
        dir.join(PID_FILE).exists() || dir.join(REPLICAS_DIR).is_dir()
    }

    /// The data dirs of the cluster's members: its one, or one per control
    /// plane machine.
    fn members(&self, namespace: &str, cluster: &str) -> Vec<PathBuf> {
        let dir = self.member_dir(namespace, cluster);
        if !self.replicated(namespace, cluster) {
            return vec![dir];
        }
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir.join(REPLICAS_DIR))
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        dirs.sort();
        dirs
    }

    /// The data dir of the member a machine runs, when it runs one whose
    /// failure is its own: a replica's control plane machine, or any
    /// machine of a cluster with one member.
    pub fn member_of_machine(
        &self,
        namespace: &str,
        cluster: &str,
        node: &str,
        control_plane: bool,
    ) -> Option<PathBuf> {
        if !self.replicated(namespace, cluster) {
            return Some(self.member_dir(namespace, cluster));
        }
        control_plane.then(|| self.replica_dir(namespace, cluster, node))
    }

    /// The pid of one of the cluster's members, when any runs.
    pub fn running(&self, namespace: &str, cluster: &str) -> Option<u32> {
        self.members(namespace, cluster)
            .iter()
            .find_map(|dir| running_in(dir))
    }

    /// Whether the cluster answers at its endpoint: a member has written
    /// its kubeconfig and admin address (once its API and nodes are up),
    /// and, for several, the endpoint passes to them.
    pub fn ready(&self, namespace: &str, cluster: &str) -> bool {
        let any = self.members(namespace, cluster).iter().any(|d| ready_in(d));
        any && (!self.replicated(namespace, cluster)
            || endpoint_running(&self.member_dir(namespace, cluster)).is_some())
    }

    /// Whether the member in `dir` serves.
    pub fn member_ready(&self, dir: &Path) -> bool {
        ready_in(dir)
    }

    /// Why the member in `dir` is not running, when it was started and
    /// has exited since: the last line it logged.
    pub fn exited(&self, dir: &Path) -> Option<String> {
        let pid = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
        let pid = pid.trim().parse::<u32>().ok()?;
        // Reaped as it exits, so gone from /proc; a process still there
        // (even between fork and exec) has not exited.
        if Path::new(&format!("/proc/{pid}")).exists() || running_in(dir).is_some() {
            return None;
        }
        let log = std::fs::read_to_string(dir.join("member.log")).unwrap_or_default();
        let last = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .unwrap_or_else(|| "it logged nothing".into());
        Some(last)
    }

    /// Forgets the member in `dir` that exited, so that the next `ensure`
    /// starts it.
    pub fn forget(&self, dir: &Path) {
        let _ = std::fs::remove_file(dir.join(PID_FILE));
    }

    /// The admin endpoints of the cluster's running members: each keeps
    /// its own roster of nodes, and whichever leads runs them.
    pub fn admins(&self, namespace: &str, cluster: &str) -> Result<Vec<AdminClient>, Error> {
        let mut admins = Vec::new();
        for dir in self.members(namespace, cluster) {
            if ready_in(&dir) {
                admins.push(AdminClient::from_data_dir(&dir)?);
            }
        }
        Ok(admins)
    }

    /// Starts the cluster's one member unless it runs.
    pub fn ensure(&self, namespace: &str, cluster: &str, spec: &MemberSpec) -> Result<(), Error> {
        let dir = self.member_dir(namespace, cluster);
        if running_in(&dir).is_some() {
            return Ok(());
        }
        let listen = format!("127.0.0.1:{}", spec.port);
        self.start(&dir, cluster, spec, &listen, None)
    }

    /// Starts the member of control plane machine `node` unless it runs,
    /// on the cluster's etcd, and the endpoint in front of the members.
    pub fn ensure_replica(
        &self,
        namespace: &str,
        cluster: &str,
        node: &str,
        spec: &MemberSpec,
    ) -> Result<(), Error> {
        let Some(etcd) = self.etcd.clone() else {
            return Err(Error::Provider(
                "a control plane of several machines needs etcd on this host's PATH".into(),
            ));
        };
        let cluster_dir = self.member_dir(namespace, cluster);
        let replicas = cluster_dir.join(REPLICAS_DIR);
        std::fs::create_dir_all(&replicas).map_err(|e| io(&replicas, e))?;
        let etcd = self.ensure_endpoint(&cluster_dir, spec.port, etcd)?;
        let dir = replicas.join(node);
        if running_in(&dir).is_some() {
            return Ok(());
        }
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        // A new replica knows the nodes its siblings run, so that it runs
        // them too should it lead before the machines tell it.
        let roster = dir.join(ROSTER_FILE);
        if !roster.exists()
            && let Some(sibling) = self
                .members(namespace, cluster)
                .into_iter()
                .find(|d| d != &dir && d.join(ROSTER_FILE).exists())
        {
            let _ = std::fs::copy(sibling.join(ROSTER_FILE), &roster);
        }
        let listen = format!("127.0.0.1:{}", free_port()?);
        self.start(&dir, cluster, spec, &listen, Some((node, &etcd)))
    }

    /// Starts the endpoint (and through it etcd) unless it runs; returns
    /// etcd's client URL.
    fn ensure_endpoint(
        &self,
        cluster_dir: &Path,
        port: u16,
        etcd: PathBuf,
    ) -> Result<String, Error> {
        let ports_file = cluster_dir.join(ETCD_PORTS_FILE);
        let (client, peer) = match std::fs::read_to_string(&ports_file).ok().and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        }) {
            Some(ports) => ports,
            None => {
                let ports = (free_port()?, free_port()?);
                std::fs::write(&ports_file, format!("{} {}", ports.0, ports.1))
                    .map_err(|e| io(&ports_file, e))?;
                ports
            }
        };
        let endpoint = format!("http://127.0.0.1:{client}");
        if endpoint_running(cluster_dir).is_some() {
            return Ok(endpoint);
        }
        let log = log_file(&cluster_dir.join("endpoint.log"))?;
        let err = log.try_clone().map_err(|e| io(cluster_dir, e))?;
        let mut command = Command::new(&self.exe);
        for name in &self.unset_env {
            command.env_remove(name);
        }
        command
            .arg(ENDPOINT_COMMAND)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--members")
            .arg(cluster_dir.join(REPLICAS_DIR))
            .arg("--exit-with-dir")
            .arg(&self.dir)
            .arg("--etcd")
            .arg(&etcd)
            .arg("--etcd-data-dir")
            .arg(cluster_dir.join("etcd"))
            .arg("--etcd-client-port")
            .arg(client.to_string())
            .arg("--etcd-peer-port")
            .arg(peer.to_string());
        let pid = spawn_detached(command, log, err)?;
        std::fs::write(cluster_dir.join(ENDPOINT_PID_FILE), pid.to_string())
            .map_err(|e| io(cluster_dir, e))?;
        info!(cluster = %cluster_dir.display(), pid, port, "control plane endpoint started");
        Ok(endpoint)
    }

    /// Starts a member serving `dir`; `replica` is its machine and the
    /// etcd it shares with the other control plane members.
    fn start(
        &self,
        dir: &Path,
        cluster: &str,
        spec: &MemberSpec,
        listen: &str,
        replica: Option<(&str, &str)>,
    ) -> Result<(), Error> {
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|e| io(&pki, e))?;
        // The cluster's CA, from its bootstrap data: the member serves
        // with it and accepts the admin kubeconfig's certificate.
        write_private(&pki.join("ca.key"), &spec.ca_key_pem)?;
        write_private(&pki.join("ca.crt"), &spec.ca_cert_pem)?;
        // Files of an earlier run would say it is ready before it is.
        let _ = std::fs::remove_file(dir.join("kubeconfig"));
        let _ = std::fs::remove_file(dir.join(flotilla_member::admin::client::ADDRESS_FILE));
        let log = log_file(&dir.join("member.log"))?;
        let err = log.try_clone().map_err(|e| io(dir, e))?;
        let mut command = Command::new(&self.exe);
        for name in &self.unset_env {
            command.env_remove(name);
        }
        command
            .arg("member")
            .arg("--name")
            .arg(cluster)
            .arg("--data-dir")
            .arg(dir)
            .arg("--listen")
            .arg(listen)
            .arg("--nodes")
            .arg("0")
            .arg("--runtime")
            .arg(&spec.runtime)
            .arg("--exit-with-dir")
            .arg(&self.dir)
            .arg("--peering-controllers")
            .arg("false")
            // A provisioned cluster has no Velero until one is installed.
            .arg("--velero")
            .arg("false");
        if let Some(cidr) = &spec.pod_cidr {
            command.arg("--pod-cidr").arg(cidr);
        }
        if let Some(cidr) = &spec.service_cidr {
            command.arg("--service-cidr").arg(cidr);
        }
        if let Some((node, etcd)) = replica {
            command
                .args(["--store", "etcd", "--etcd-endpoints", etcd])
                .arg("--leader-elect")
                // The machine's name, as a control plane container's host
                // name: the lease holder names it.
                .env("HOSTNAME", node);
        }
        let pid = spawn_detached(command, log, err)?;
        std::fs::write(dir.join(PID_FILE), pid.to_string()).map_err(|e| io(dir, e))?;
        info!(member = %dir.display(), pid, %listen, "cluster member started");
        Ok(())
    }

    /// Stops the member of control plane machine `node` and removes its
    /// data (the machine is deleted).
    pub async fn remove_replica(
        &self,
        namespace: &str,
        cluster: &str,
        node: &str,
    ) -> Result<(), Error> {
        let dir = self.replica_dir(namespace, cluster, node);
        if let Some(pid) = running_in(&dir) {
            stop(pid, || running_in(&dir).is_some()).await;
        }
        remove_dir(&dir)
    }

    /// Stops the cluster's members (SIGTERM, then SIGKILL after 10 s), its
    /// endpoint and etcd, and removes its data.
    pub async fn remove(&self, namespace: &str, cluster: &str) -> Result<(), Error> {
        for dir in self.members(namespace, cluster) {
            if let Some(pid) = running_in(&dir) {
                stop(pid, || running_in(&dir).is_some()).await;
            }
        }
        let dir = self.member_dir(namespace, cluster);
        if let Some(pid) = endpoint_running(&dir) {
            stop(pid, || endpoint_running(&dir).is_some()).await;
        }
        remove_dir(&dir)
    }
}

/// SIGTERM, then SIGKILL once `alive` has held for 10 s.
async fn stop(pid: u32, alive: impl Fn() -> bool) {
    let target = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while alive() {
        if tokio::time::Instant::now() >= deadline {
            warn!(pid, "did not stop on SIGTERM; killing it");
            let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn remove_dir(dir: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir, e)),
    }
}

/// The member's roster of nodes (`flotilla member` keeps it there).
const ROSTER_FILE: &str = "nodes.json";

fn log_file(path: &Path) -> Result<std::fs::File, Error> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io(path, e))
}

/// Starts `command` in a process group of its own (a signal to the
/// controllers' group does not reach it, and it outlives them); returns
/// its pid.
fn spawn_detached(
    mut command: Command,
    log: std::fs::File,
    err: std::fs::File,
) -> Result<u32, Error> {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| Error::Provider(format!("cannot start {:?}: {e}", command.get_program())))?;
    let pid = child.id();
    // Reaped while this process lives; adopted by init after it.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(pid)
}

/// The pid of the member serving `dir`: the one recorded, or one serving
/// it that was started but not recorded (the controllers died in
/// between), recorded now.
fn running_in(dir: &Path) -> Option<u32> {
    let recorded = std::fs::read_to_string(dir.join(PID_FILE))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok());
    if let Some(pid) = recorded
        && is_member_of(pid, dir)
    {
        return Some(pid);
    }
    let pid = pids().into_iter().find(|pid| is_member_of(*pid, dir))?;
    let _ = std::fs::write(dir.join(PID_FILE), pid.to_string());
    Some(pid)
}

fn ready_in(dir: &Path) -> bool {
    running_in(dir).is_some()
        && dir.join("kubeconfig").exists()
        && dir
            .join(flotilla_member::admin::client::ADDRESS_FILE)
            .exists()
}

/// The pid of the endpoint in front of the cluster's members in
/// `cluster_dir`, when it runs.
fn endpoint_running(cluster_dir: &Path) -> Option<u32> {
    let members = cluster_dir.join(REPLICAS_DIR);
    let is_endpoint = |pid: u32| {
        command_line(pid).is_some_and(|args| {
            args.iter().any(|a| a == ENDPOINT_COMMAND.as_bytes())
                && args
                    .iter()
                    .any(|a| a == members.as_os_str().as_encoded_bytes())
        })
    };
    let recorded = std::fs::read_to_string(cluster_dir.join(ENDPOINT_PID_FILE))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok());
    if let Some(pid) = recorded
        && is_endpoint(pid)
    {
        return Some(pid);
    }
    let pid = pids().into_iter().find(|pid| is_endpoint(*pid))?;
    let _ = std::fs::write(cluster_dir.join(ENDPOINT_PID_FILE), pid.to_string());
    Some(pid)
}

/// A process's arguments, when it runs.
pub(crate) fn command_line(pid: u32) -> Option<Vec<Vec<u8>>> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

/// Every process's pid.
pub(crate) fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a member serving `dir` (not a process that took the
/// pid since): its command line names the data dir.
fn is_member_of(pid: u32, dir: &Path) -> bool {
    command_line(pid).is_some_and(|args| {
        args.iter().any(|a| a == b"member")
            && args.iter().any(|a| a == dir.as_os_str().as_encoded_bytes())
    })
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Provider(format!("{}: {e}", path.display()))
}

fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    flotilla_apiserver::tls::write_private(path, contents)
        .map_err(|e| Error::Provider(e.to_string()))
}

/// A free loopback port for a cluster's API endpoint (its "load
/// balancer"), chosen once and kept in the DockerCluster's spec. It is
/// taken below the kernel's ephemeral range (`ip_local_port_range`), so
/// that no outgoing connection's source port takes it before the member
/// binds it (a port from `bind(0)` could be).
pub fn free_port() -> Result<u16, Error> {
    const FLOOR: u16 = 10_000;
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_from > FLOOR + 1_000 {
        for _ in 0..64 {
            let port = rand::random_range(FLOOR..ephemeral_from);
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Provider(format!("no free port: {e}")))?;
    Ok(listener
        .local_addr()
        .map_err(|e| Error::Provider(e.to_string()))?
        .port())
}
