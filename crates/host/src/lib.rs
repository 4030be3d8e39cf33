//! The host side of everything that runs in network namespaces (the
//! member's netns runtime and kube-proxy, the fabric's gateways): the tools
//! they drive (iproute2's `ip`, `nft`, `sysctl`), the checks that they may
//! use them, sockets opened inside a network namespace, and the per-host
//! record of what was made ([`record`]), which `flotilla cleanup` reads.
//!
//! Nodes' and gateways' links are made with `ip`: every step is one
//! command a reader can run by hand, made once per node. A pod's, made in
//! bursts of hundreds, is made over netlink ([`netlink`]).
#![forbid(unsafe_code)]

pub mod netlink;
pub mod processes;
pub mod record;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// Why a host step failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        #[source]
        source: io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("{0}")]
    Missing(String),
}

/// Where iproute2 keeps named network namespaces.
pub const NETNS_DIR: &str = "/run/netns";

pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Runs `ip ARGS`, failing with its stderr.
pub async fn ip(args: &[&str]) -> Result<String, HostError> {
    run("ip", args, None).await
}

/// Runs `ip -n NETNS -batch -` over `lines`, one command per line.
pub async fn ip_batch(netns: &str, lines: &[String]) -> Result<(), HostError> {
    if lines.is_empty() {
        return Ok(());
    }
    let script = lines.join("\n") + "\n";
    run("ip", &["-n", netns, "-batch", "-"], Some(script)).await?;
    Ok(())
}

/// Sets sysctls (`net.ipv4.x=value`) inside a network namespace: a
/// thread that entered it writes `/proc/sys/...`, which is per namespace
/// for `net.*` (no process to spawn).
pub async fn sysctl(netns: &str, settings: &[&str]) -> Result<(), HostError> {
    let writes: Vec<(String, String)> = settings
        .iter()
        .filter_map(|s| s.split_once('='))
        .map(|(k, v)| (format!("/proc/sys/{}", k.replace('.', "/")), v.to_string()))
        .collect();
    let name = netns.to_string();
    in_netns(netns, move || {
        for (path, value) in &writes {
            std::fs::write(path, value)
                .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| HostError::Failed {
        command: format!("sysctl in {name}"),
        stderr: e.to_string(),
    })
}

async fn run(tool: &str, args: &[&str], stdin: Option<String>) -> Result<String, HostError> {
    use tokio::io::AsyncWriteExt;
    let mut cmd = Command::new(tool);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let spawn_error = |source| HostError::Spawn {
        tool: tool.to_string(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_error)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .await
            .map_err(spawn_error)?;
    }
    let out = child.wait_with_output().await.map_err(spawn_error)?;
    if !out.status.success() {
        return Err(HostError::Failed {
            command: format!("{tool} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks that this process may build pod networks: root (or
/// CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2, and a kernel that lets it
/// make a network namespace. The error is the one line a user reads.
pub async fn check(probe_name: &str) -> Result<(), HostError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(HostError::Missing(
            "--runtime netns needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to make network namespaces; run as root or use --runtime sim".into(),
        ));
    }
    if which("ip").is_none() {
        return Err(HostError::Missing(
            "--runtime netns needs iproute2's `ip` on PATH (apt-get install iproute2)".into(),
        ));
    }
    if which("nft").is_none() {
        return Err(HostError::Missing(
            "--runtime netns needs nftables's `nft` on PATH for Services and NetworkPolicy (apt-get install nftables)".into(),
        ));
    }
    // A namespace made and removed at once proves the kernel allows it.
    let _ = ip(&["netns", "del", probe_name]).await;
    ip(&["netns", "add", probe_name]).await.map_err(|e| {
        HostError::Missing(format!(
            "--runtime netns cannot make a network namespace here ({e}); is this a container without CAP_SYS_ADMIN?"
        ))
    })?;
    let _ = ip(&["netns", "del", probe_name]).await;
    Ok(())
}

/// The first `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into());
    which_in(name, &path)
}

/// Looks `name` up on a container's PATH.
pub fn which_in(name: &str, path: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|dir| Path::new(dir).join(name))
        .find(|p| is_executable(p))
}

/// The PATH a container gets when its image would set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Named network namespaces whose names start with `prefix`.
pub fn namespaces_with_prefix(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n == prefix || n.starts_with(&format!("{prefix}-")))
        .collect()
}

/// Processes inside a network namespace.
pub async fn pids_in(netns: &str) -> Vec<i32> {
    let netns = netns.to_string();
    tokio::task::spawn_blocking(move || netlink::pids_in(&netns))
        .await
        .unwrap_or_default()
}

/// Kills every process in a namespace and removes it.
pub async fn remove_netns(netns: &str) {
    for _ in 0..50 {
        let pids = pids_in(netns).await;
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Err(error) = netlink::delete_netns(netns) {
        tracing::warn!(%error, netns, "cannot remove a network namespace");
    }
}

/// Connects to `addr` from inside the named network namespace: the
/// socket is made by a thread that entered it, and stays there.
pub async fn connect_in(
    netns: &str,
    addr: SocketAddr,
    timeout: Duration,
) -> io::Result<tokio::net::TcpStream> {
    let stream = in_netns(netns, move || {
        std::net::TcpStream::connect_timeout(&addr, timeout)
    })
    .await?;
    stream.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(stream)
}

/// Applies an nftables script inside a network namespace, atomically.
pub async fn nft(netns: &str, script: &str) -> Result<(), HostError> {
    run(
        "ip",
        &["netns", "exec", netns, "nft", "-f", "-"],
        Some(script.to_string()),
    )
    .await
    .map(|_| ())
}

/// Runs `make` on a thread inside the named network namespace: sockets
/// it opens belong to that namespace for their whole life.
pub async fn in_netns<T, F>(netns: &str, make: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let path = netns_path(netns);
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path)?;
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(io::Error::from)?;
            make()
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
    })
    .await
    .map_err(io::Error::other)?
}
