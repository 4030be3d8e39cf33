//! The local etcd of a fleet whose hub runs several replicas
//! (`flotilla up --hub-replicas N`): one member (Debian's `etcd-server`
//! from the PATH) on the ports `fleet.json` keeps, its data in
//! `<data dir>/etcd`. An etcd does not read stdin, so it does not stop with
//! `up` when `up` is killed: the next start finds it by its data dir and
//! ends it first.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The etcd binary, or how to get one.
pub(super) fn binary() -> anyhow::Result<PathBuf> {
    flotilla_store::testing::etcd_binary()
        .context("--hub-replicas needs etcd on the PATH (Debian's etcd-server; or set ETCD_BIN)")
}

/// A free loopback port, chosen now (etcd takes its ports as flags).
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn client_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// `etcd`'s arguments for the fleet's member.
pub(super) fn args(dir: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let peer = format!("http://127.0.0.1:{peer_port}");
    let client = client_url(client_port);
    vec![
        "--name".into(),
        "flotilla".into(),
        "--data-dir".into(),
        data_dir(dir).display().to_string(),
        "--listen-client-urls".into(),
        client.clone(),
        "--advertise-client-urls".into(),
        client,
        "--listen-peer-urls".into(),
        peer.clone(),
        "--initial-advertise-peer-urls".into(),
        peer.clone(),
        "--initial-cluster".into(),
        format!("flotilla={peer}"),
        "--log-level".into(),
        "warn".into(),
    ]
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("etcd")
}

/// Ends an etcd an earlier `up` of this fleet left running (killed
/// before it could stop it), and waits (5 s at most) until it is gone.
pub(super) async fn end_leftover(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = leftovers(dir);
        if left.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in left {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The etcd processes on this fleet's data dir.
fn leftovers(dir: &Path) -> Vec<i32> {
    let data = data_dir(dir).display().to_string();
    flotilla_host::processes::all()
        .into_iter()
        .filter(|p| p.running && p.is_program("etcd") && p.has_flag("--data-dir", &data))
        .map(|p| p.pid)
        .collect()
}

/// Waits until the etcd takes connections on `port`.
pub(super) async fn wait_listening(port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            bail!(
                "etcd did not listen on {addr} within {}s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
