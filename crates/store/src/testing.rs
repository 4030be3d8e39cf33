//! A real etcd for tests of the etcd backend (this crate's and the API
//! server's suites): Debian's `etcd-server` on free loopback ports with a
//! temporary data directory, killed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One etcd member, or a member of a cluster started with [`cluster`].
pub struct Etcd {
    child: Option<Child>,
    pub name: String,
    pub client_url: String,
    /// Plain-HTTP `/health`: the client URL, or a metrics URL under TLS.
    health_addr: String,
    _data: tempfile::TempDir,
}

/// PEM files for an etcd that serves TLS and asks for client certificates
/// signed by `ca`.
pub struct Tls<'a> {
    pub ca: &'a Path,
    pub cert: &'a Path,
    pub key: &'a Path,
}

/// Where the `etcd` binary is: `$ETCD_BIN`, or on the PATH.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(bin));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

struct Planned {
    name: String,
    client: String,
    peer: String,
    metrics: String,
}

fn plan(n: usize, scheme: &str) -> Vec<Planned> {
    (0..n)
        .map(|i| Planned {
            name: format!("etcd{i}"),
            client: format!("{scheme}://127.0.0.1:{}", free_port()),
            peer: format!("http://127.0.0.1:{}", free_port()),
            metrics: format!("http://127.0.0.1:{}", free_port()),
        })
        .collect()
}

fn spawn(
    bin: &Path,
    me: &Planned,
    initial_cluster: &str,
    data: &Path,
    tls: Option<&Tls>,
) -> std::io::Result<Child> {
    let mut command = Command::new(bin);
    if let Some(tls) = tls {
        command
            .arg("--cert-file")
            .arg(tls.cert)
            .arg("--key-file")
            .arg(tls.key)
            .arg("--trusted-ca-file")
            .arg(tls.ca)
            .arg("--client-cert-auth");
    }
    command
        .args(["--name", &me.name])
        .args(["--listen-metrics-urls", &me.metrics])
        .arg("--data-dir")
        .arg(data)
        .args(["--listen-client-urls", &me.client])
        .args(["--advertise-client-urls", &me.client])
        .args(["--listen-peer-urls", &me.peer])
        .args(["--initial-advertise-peer-urls", &me.peer])
        .args(["--initial-cluster", initial_cluster])
        .args(["--initial-cluster-state", "new"])
        .args(["--initial-cluster-token", "flotilla-test"])
        .args(["--log-level", "error"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Starts `n` etcd members forming one cluster and waits until each
/// answers `/health`. Panics with the fix when etcd is not installed.
pub fn cluster(n: usize) -> Vec<Etcd> {
    start(n, None)
}

/// One etcd serving TLS and requiring client certificates.
pub fn single_tls(tls: &Tls) -> Etcd {
    start(1, Some(tls)).pop().expect("one etcd")
}

fn start(n: usize, tls: Option<&Tls>) -> Vec<Etcd> {
    let bin = etcd_binary().unwrap_or_else(|| {
        panic!(
            "etcd not found: install Debian's etcd-server (bash .ci/run does it) or set ETCD_BIN"
        )
    });
    // The ports are picked before etcd binds them, so another process may
    // take one in between: etcd then exits, and the cluster is started
    // again on other ports.
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        match try_start(&bin, n, tls) {
            Ok(members) => return members,
            Err(why) if attempt < ATTEMPTS => {
                eprintln!("etcd did not start ({why}); again on other ports");
                attempt += 1;
            }
            Err(why) => panic!("etcd did not start: {why}"),
        }
    }
}

fn try_start(bin: &Path, n: usize, tls: Option<&Tls>) -> Result<Vec<Etcd>, String> {
    let planned = plan(n, if tls.is_some() { "https" } else { "http" });
    let initial: Vec<String> = planned
        .iter()
        .map(|p| format!("{}={}", p.name, p.peer))
        .collect();
    let initial = initial.join(",");
    let mut members: Vec<Etcd> = planned
        .iter()
        .map(|p| {
            let data = tempfile::tempdir().expect("a temporary directory for etcd");
            let child = spawn(bin, p, &initial, data.path(), tls).expect("start etcd");
            Etcd {
                child: Some(child),
                name: p.name.clone(),
                client_url: p.client.clone(),
                health_addr: p.metrics.trim_start_matches("http://").to_string(),
                _data: data,
            }
        })
        .collect();
    wait_healthy(&mut members, Duration::from_secs(30))?;
    Ok(members)
}

/// Waits until every member answers `/health`; an error as soon as one
/// exits (a member of a cluster that lost one never becomes healthy), or
/// when the time runs out.
fn wait_healthy(members: &mut [Etcd], within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        for m in members.iter_mut() {
            if let Some(Ok(Some(status))) = m.child.as_mut().map(Child::try_wait) {
                return Err(format!(
                    "etcd {} at {} exited ({status})",
                    m.name, m.client_url
                ));
            }
        }
        if members.iter().all(|m| health(&m.health_addr)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "etcd at {} did not become healthy",
                members
                    .iter()
                    .map(|m| m.client_url.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One etcd of its own.
pub fn single() -> Etcd {
    cluster(1).pop().expect("one etcd")
}

impl Etcd {
    /// Kills the member at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET /health` answers `"health":"true"`.
fn health(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}
