//! A control plane's endpoint when it has several machines, as CAPD's
//! `<cluster>-lb` haproxy container is: TCP on the cluster's endpoint
//! port, passed to whichever control plane member answers (TLS end to
//! end, so the member's certificate is the one a client checks). It also
//! keeps the cluster's etcd running, the store every control plane member
//! serves from, and stops it when it stops.
//!
//! A member is a backend once it has written its kubeconfig (it serves
//! then); one that refuses a connection is passed over for the next.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tracing::{info, warn};

use crate::error::Error;

/// What the load balancer serves.
#[derive(Clone, Debug)]
pub struct Options {
    pub listen: SocketAddr,
    /// Each subdirectory a control plane member's data dir.
    pub members: PathBuf,
    /// Stop when this directory is gone (the provider's state).
    pub exit_with_dir: Option<PathBuf>,
    pub etcd: Option<Etcd>,
}

/// The cluster's etcd, kept running beside the endpoint.
#[derive(Clone, Debug)]
pub struct Etcd {
    pub binary: PathBuf,
    pub data_dir: PathBuf,
    pub client_port: u16,
    pub peer_port: u16,
}

impl Etcd {
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }
}

/// Serves until stopped (SIGTERM, SIGINT, or the directory gone).
pub async fn serve(options: Options) -> Result<(), Error> {
    let listener = TcpListener::bind(options.listen)
        .await
        .map_err(|e| Error::Provider(format!("cannot listen on {}: {e}", options.listen)))?;
    info!(listen = %options.listen, members = %options.members.display(), "control plane endpoint serving");
    let backends = Arc::new(Backends::new(options.members.clone()));
    let etcd = options.etcd.clone().map(Supervised::new);
    let keep_etcd = async {
        match &etcd {
            Some(e) => e.keep().await,
            None => std::future::pending().await,
        }
    };
    let accept = async {
        loop {
            match listener.accept().await {
                Ok((client, _)) => {
                    let backends = backends.clone();
                    tokio::spawn(async move { backends.pass(client).await });
                }
                Err(error) => {
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    tokio::select! {
        () = accept => {}
        () = keep_etcd => {}
        () = stopped(options.exit_with_dir.clone()) => {}
    }
    if let Some(etcd) = &etcd {
        etcd.stop().await;
    }
    info!("control plane endpoint stopped");
    Ok(())
}

async fn stopped(dir: Option<PathBuf>) {
    use tokio::signal::unix::{SignalKind, signal};
    let gone = async {
        let Some(dir) = dir else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if !dir.exists() {
                info!(dir = %dir.display(), "--exit-with-dir is gone; stopping");
                return;
            }
        }
    };
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return gone.await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        () = gone => {}
    }
}

/// The members' addresses, read from their kubeconfigs at most once a
/// second, tried round robin.
struct Backends {
    dir: PathBuf,
    cached: Mutex<(Option<Instant>, Vec<String>)>,
    next: AtomicUsize,
}

impl Backends {
    fn new(dir: PathBuf) -> Backends {
        Backends {
            dir,
            cached: Mutex::new((None, Vec::new())),
            next: AtomicUsize::new(0),
        }
    }

    fn list(&self) -> Vec<String> {
        let mut cached = self.cached.lock();
        if cached
            .0
            .is_none_or(|t| t.elapsed() > Duration::from_secs(1))
        {
            *cached = (Some(Instant::now()), members_serving(&self.dir));
        }
        cached.1.clone()
    }

    async fn pass(&self, mut client: TcpStream) {
        let backends = self.list();
        if backends.is_empty() {
            warn!("no control plane member serves yet; connection closed");
            return;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..backends.len() {
            let address = &backends[(start + i) % backends.len()];
            let connect = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(address));
            match connect.await {
                Ok(Ok(mut backend)) => {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    return;
                }
                Ok(Err(error)) => {
                    warn!(%error, %address, "control plane member refused; trying the next")
                }
                Err(_) => {
                    warn!(%address, "control plane member did not answer in 1s; trying the next")
                }
            }
        }
        warn!("no control plane member answered; connection closed");
    }
}

/// `host:port` of each member under `dir` that has written its kubeconfig.
fn members_serving(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path().join("kubeconfig")).ok()?;
            let address = server_address(&text)?;
            Some((e.file_name().to_string_lossy().into_owned(), address))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, a)| a).collect()
}

/// The `host:port` of a kubeconfig's first cluster.
pub fn server_address(kubeconfig: &str) -> Option<String> {
    let value: serde_yaml::Value = serde_yaml::from_str(kubeconfig).ok()?;
    let server = value["clusters"][0]["cluster"]["server"].as_str()?;
    let rest = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))?;
    Some(rest.trim_end_matches('/').to_string())
}

/// etcd, started when no etcd serves its data dir (one left by an earlier
/// run of the endpoint is adopted), and started again when it exits.
struct Supervised {
    etcd: Etcd,
    pid: Mutex<Option<u32>>,
}

impl Supervised {
    fn new(etcd: Etcd) -> Supervised {
        Supervised {
            etcd,
            pid: Mutex::new(None),
        }
    }

    async fn keep(&self) {
        loop {
            let alive = self
                .pid
                .lock()
                .is_some_and(|pid| serves(pid, &self.etcd.data_dir));
            if !alive {
                match etcd_serving(&self.etcd.data_dir) {
                    Some(pid) => {
                        info!(pid, "etcd found running; adopted");
                        *self.pid.lock() = Some(pid);
                    }
                    None => match self.start() {
                        Ok(pid) => *self.pid.lock() = Some(pid),
                        Err(error) => warn!(%error, "cannot start etcd; trying again"),
                    },
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn start(&self) -> Result<u32, Error> {
        let e = &self.etcd;
        std::fs::create_dir_all(&e.data_dir)
            .map_err(|err| Error::Provider(format!("{}: {err}", e.data_dir.display())))?;
        let log_path = e.data_dir.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|err| Error::Provider(format!("{}: {err}", log_path.display())))?;
        let err = log
            .try_clone()
            .map_err(|err| Error::Provider(format!("{}: {err}", log_path.display())))?;
        let client = e.endpoint();
        let peer = format!("http://127.0.0.1:{}", e.peer_port);
        let mut child = Command::new(&e.binary)
            .arg("--data-dir")
            .arg(&e.data_dir)
            .arg("--name")
            .arg("default")
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("default={peer}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|err| {
                Error::Provider(format!("cannot start {}: {err}", e.binary.display()))
            })?;
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        info!(pid, endpoint = %client, "etcd started");
        Ok(pid)
    }

    /// SIGTERM, then SIGKILL after 10 s.
    async fn stop(&self) {
        let Some(pid) = *self.pid.lock() else {
            return;
        };
        let target = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while serves(pid, &self.etcd.data_dir) {
            if Instant::now() >= deadline {
                let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether `pid` is an etcd serving `data_dir`.
fn serves(pid: u32, data_dir: &Path) -> bool {
    crate::docker::process::command_line(pid).is_some_and(|args| {
        args.first().is_some_and(|a| a.ends_with(b"etcd"))
            && args
                .iter()
                .any(|a| a == data_dir.as_os_str().as_encoded_bytes())
    })
}

fn etcd_serving(data_dir: &Path) -> Option<u32> {
    crate::docker::process::pids()
        .into_iter()
        .find(|pid| serves(*pid, data_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfigs_server_is_its_address() {
        let text = "apiVersion: v1\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: c\n";
        assert_eq!(server_address(text).as_deref(), Some("127.0.0.1:6443"));
        assert_eq!(server_address("clusters: []"), None);
        assert_eq!(server_address("not: [yaml"), None);
    }
}
