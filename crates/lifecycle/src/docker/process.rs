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
}

const PID_FILE: &str = "member.pid";

impl Provider {
    pub fn member_dir(&self, namespace: &str, cluster: &str) -> PathBuf {
        self.dir.join(namespace).join(cluster)
    }

    /// The pid of the cluster's member, when one runs: the one recorded,
    /// or one serving its directory that was started but not recorded
    /// (the controllers died in between), recorded now.
    pub fn running(&self, namespace: &str, cluster: &str) -> Option<u32> {
        let dir = self.member_dir(namespace, cluster);
        let recorded = std::fs::read_to_string(dir.join(PID_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let Some(pid) = recorded
            && is_member_of(pid, &dir)
        {
            return Some(pid);
        }
        let pid = member_serving(&dir)?;
        let _ = std::fs::write(dir.join(PID_FILE), pid.to_string());
        Some(pid)
    }

    /// Whether the member answers: it writes its kubeconfig and admin
    /// address once its API and nodes are up.
    pub fn ready(&self, namespace: &str, cluster: &str) -> bool {
        let dir = self.member_dir(namespace, cluster);
        self.running(namespace, cluster).is_some()
            && dir.join("kubeconfig").exists()
            && dir
                .join(flotilla_member::admin::client::ADDRESS_FILE)
                .exists()
    }

    /// Why the cluster's member is not running, when it was started and
    /// has exited since: the last line it logged.
    pub fn exited(&self, namespace: &str, cluster: &str) -> Option<String> {
        let dir = self.member_dir(namespace, cluster);
        let pid = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
        let pid = pid.trim().parse::<u32>().ok()?;
        // Reaped as it exits, so gone from /proc; a process still there
        // (even between fork and exec) has not exited.
        if Path::new(&format!("/proc/{pid}")).exists() || self.running(namespace, cluster).is_some()
        {
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

    /// Forgets a member that exited, so that the next `ensure` starts it.
    pub fn forget(&self, namespace: &str, cluster: &str) {
        let _ = std::fs::remove_file(self.member_dir(namespace, cluster).join(PID_FILE));
    }

    pub fn admin(&self, namespace: &str, cluster: &str) -> Result<AdminClient, Error> {
        Ok(AdminClient::from_data_dir(
            &self.member_dir(namespace, cluster),
        )?)
    }

    /// Starts the cluster's member unless one runs.
    pub fn ensure(&self, namespace: &str, cluster: &str, spec: &MemberSpec) -> Result<(), Error> {
        if self.running(namespace, cluster).is_some() {
            return Ok(());
        }
        let dir = self.member_dir(namespace, cluster);
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|e| io(&pki, e))?;
        // The cluster's CA, from its bootstrap data: the member serves
        // with it and accepts the admin kubeconfig's certificate.
        write_private(&pki.join("ca.key"), &spec.ca_key_pem)?;
        write_private(&pki.join("ca.crt"), &spec.ca_cert_pem)?;
        // Files of an earlier run would say it is ready before it is.
        let _ = std::fs::remove_file(dir.join("kubeconfig"));
        let _ = std::fs::remove_file(dir.join(flotilla_member::admin::client::ADDRESS_FILE));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("member.log"))
            .map_err(|e| io(&dir, e))?;
        let err = log.try_clone().map_err(|e| io(&dir, e))?;
        let mut command = Command::new(&self.exe);
        for name in &self.unset_env {
            command.env_remove(name);
        }
        command
            .arg("member")
            .arg("--name")
            .arg(cluster)
            .arg("--data-dir")
            .arg(&dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", spec.port))
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
        {
            use std::os::unix::process::CommandExt;
            // A group of its own: a signal to the controllers' group does
            // not reach it, and it outlives them.
            command.process_group(0);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Provider(format!("cannot start {}: {e}", self.exe.display())))?;
        let pid = child.id();
        std::fs::write(dir.join(PID_FILE), pid.to_string()).map_err(|e| io(&dir, e))?;
        // Reaped while this process lives; adopted by init after it.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        info!(%namespace, %cluster, pid, port = spec.port, "cluster member started");
        Ok(())
    }

    /// Stops the cluster's member (SIGTERM, then SIGKILL after 10 s) and
    /// removes its data.
    pub async fn remove(&self, namespace: &str, cluster: &str) -> Result<(), Error> {
        if let Some(pid) = self.running(namespace, cluster) {
            let target = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while self.running(namespace, cluster).is_some() {
                if tokio::time::Instant::now() >= deadline {
                    warn!(%namespace, %cluster, pid, "member did not stop on SIGTERM; killing it");
                    let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let dir = self.member_dir(namespace, cluster);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&dir, e)),
        }
    }
}

/// Whether `pid` is a member serving `dir` (not a process that took the
/// pid since): its command line names the data dir.
fn is_member_of(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let dir = dir.as_os_str().as_encoded_bytes();
    args.contains(&&b"member"[..]) && args.contains(&dir)
}

/// A member process serving `dir`, whatever the records say.
fn member_serving(dir: &Path) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| is_member_of(*pid, dir))
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
