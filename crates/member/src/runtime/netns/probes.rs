//! Container probes, run against the process as a kubelet runs them:
//! `httpGet` (a request to the pod's IP from its node), `tcpSocket` (a
//! connection), `exec` (a command in the container, success on exit 0).
//! The startup probe gates the other two; readiness sets the container's
//! `ready`; a failed liveness (or startup) probe stops the process, which
//! then restarts by the pod's restartPolicy.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::info;

use super::process::{self, Process};
use super::shim::Launch;
use crate::events::Notify;
use crate::runtime::Events;
use flotilla_host as host;

/// What probes report about one container run.
#[derive(Clone)]
pub struct ProbeState {
    pub ready: Arc<AtomicBool>,
    pub started: Arc<AtomicBool>,
    /// Set when a probe failed and stopped the process (why, for its state).
    pub killed_because: Arc<parking_lot::Mutex<Option<String>>>,
}

/// Where probes reach the container.
pub struct ProbeTarget {
    pub netns: String,
    pub node_netns: String,
    pub ip: Ipv4Addr,
    pub pid: i32,
    pub launch: PathBuf,
    pub helper: PathBuf,
    pub grace: Duration,
}

/// Starts the probes of `c` (if any); returns their state and the task,
/// to abort when the process ends.
pub fn start(
    c: &Container,
    target: ProbeTarget,
    process: &Process,
    events: Events,
    pod_key: String,
    notify: Notify,
) -> (ProbeState, Option<tokio::task::JoinHandle<()>>) {
    let state = ProbeState {
        ready: Arc::new(AtomicBool::new(c.readiness_probe.is_none())),
        started: Arc::new(AtomicBool::new(c.startup_probe.is_none())),
        killed_because: Default::default(),
    };
    if c.readiness_probe.is_none() && c.liveness_probe.is_none() && c.startup_probe.is_none() {
        return (state, None);
    }
    let c = c.clone();
    let s = state.clone();
    let exit = process.exit.clone();
    let pid = process.pid;
    let task = tokio::spawn(async move {
        let target = Arc::new(target);
        let changed = || events.changed(&pod_key);
        if let Some(p) = &c.startup_probe {
            match run_until(&c, p, &target, true, "Startup", &notify).await {
                true => {
                    s.started.store(true, Ordering::SeqCst);
                    changed();
                }
                false => {
                    kill(&s, "startup", &c.name, pid, exit, target.grace, &notify).await;
                    return;
                }
            }
        }
        let readiness = c.readiness_probe.clone().map(|p| {
            let (c, s, target, events, key, notify) = (
                c.clone(),
                s.clone(),
                target.clone(),
                events.clone(),
                pod_key.clone(),
                notify.clone(),
            );
            tokio::spawn(async move {
                let mut last = s.ready.load(Ordering::SeqCst);
                let mut counter = Counter::new(&p);
                tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
                loop {
                    let result = check(&c, &p, &target).await;
                    if let Err(why) = &result {
                        notify("Unhealthy", format!("Readiness probe failed: {why}"));
                    }
                    if let Some(now) = counter.observe(result.is_ok(), last)
                        && now != last
                    {
                        last = now;
                        s.ready.store(now, Ordering::SeqCst);
                        events.changed(&key);
                    }
                    tokio::time::sleep(secs(p.period_seconds, 10)).await;
                }
            })
        });
        if let Some(p) = &c.liveness_probe {
            if !run_until(&c, p, &target, false, "Liveness", &notify).await {
                kill(&s, "liveness", &c.name, pid, exit, target.grace, &notify).await;
            }
        } else {
            std::future::pending::<()>().await;
        }
        if let Some(r) = readiness {
            r.abort();
        }
    });
    (state, Some(task))
}

async fn kill(
    s: &ProbeState,
    which: &str,
    container: &str,
    pid: i32,
    exit: tokio::sync::watch::Receiver<Option<i32>>,
    grace: Duration,
    notify: &Notify,
) {
    info!(
        container,
        probe = which,
        "probe failed; the container will be restarted"
    );
    let message = format!("Container {container} failed {which} probe, will be restarted");
    notify("Killing", message.clone());
    *s.killed_because.lock() = Some(message);
    process::stop(
        &Process {
            pid,
            exit,
            input: None,
        },
        grace,
    )
    .await;
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(0) as u64)
}

/// Consecutive successes and failures against the thresholds.
struct Counter {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
}

impl Counter {
    fn new(p: &Probe) -> Self {
        Counter {
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
            successes: 0,
            failures: 0,
        }
    }

    /// The verdict once a threshold is crossed: Some(true) passing,
    /// Some(false) failing; None while undecided.
    fn observe(&mut self, ok: bool, current: bool) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes += 1;
            (self.successes >= self.success_threshold || current).then_some(true)
        } else {
            self.successes = 0;
            self.failures += 1;
            (self.failures >= self.failure_threshold).then_some(false)
        }
    }
}

/// Probes until the probe passes (`until_success`) or fails for good;
/// returns whether it passed. A liveness probe (`!until_success`) runs
/// until it fails.
async fn run_until(
    c: &Container,
    p: &Probe,
    target: &ProbeTarget,
    until_success: bool,
    which: &str,
    notify: &Notify,
) -> bool {
    let mut counter = Counter::new(p);
    tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
    loop {
        let result = check(c, p, target).await;
        if let Err(why) = &result {
            notify("Unhealthy", format!("{which} probe failed: {why}"));
        }
        match counter.observe(result.is_ok(), false) {
            Some(true) if until_success => return true,
            Some(false) => return false,
            _ => {}
        }
        tokio::time::sleep(secs(p.period_seconds, 10)).await;
    }
}

fn port(c: &Container, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// One probe attempt, within its timeout; why it failed, as upstream words it.
async fn check(c: &Container, p: &Probe, target: &ProbeTarget) -> Result<(), String> {
    let timeout = secs(p.timeout_seconds, 1).max(Duration::from_secs(1));
    let attempt = async {
        if let Some(h) = &p.http_get {
            let Some(port) = port(c, &h.port) else {
                return Err(format!("no port {:?} in the container", h.port));
            };
            let host = h
                .host
                .as_deref()
                .and_then(|h| h.parse().ok())
                .unwrap_or(target.ip);
            let path = h.path.as_deref().unwrap_or("/");
            let mut headers = String::new();
            for hd in h.http_headers.iter().flatten() {
                headers.push_str(&format!("{}: {}\r\n", hd.name, hd.value));
            }
            http_get(
                target,
                SocketAddr::from((host, port)),
                path,
                &headers,
                timeout,
            )
            .await
        } else if let Some(t) = &p.tcp_socket {
            let Some(port) = port(c, &t.port) else {
                return Err(format!("no port {:?} in the container", t.port));
            };
            let addr = SocketAddr::from((target.ip, port));
            host::connect_in(&target.node_netns, addr, timeout)
                .await
                .map(|_| ())
                .map_err(|e| format!("dial tcp {addr}: {e}"))
        } else if let Some(e) = &p.exec {
            exec(target, e.command.clone().unwrap_or_default(), timeout).await
        } else {
            // gRPC probes are not run here: counted as passing.
            Ok(())
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("timeout after {}s", timeout.as_secs())))
}

async fn http_get(
    target: &ProbeTarget,
    addr: SocketAddr,
    path: &str,
    headers: &str,
    timeout: Duration,
) -> Result<(), String> {
    let url = format!("http://{addr}{path}");
    let mut stream = host::connect_in(&target.node_netns, addr, timeout)
        .await
        .map_err(|e| format!("Get \"{url}\": dial tcp {addr}: {e}"))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\n{headers}Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    let mut head = [0u8; 32];
    let n = stream
        .read(&mut head)
        .await
        .map_err(|e| format!("Get \"{url}\": {e}"))?;
    // "HTTP/1.1 200 OK": success is 200 to 399.
    let code = std::str::from_utf8(&head[..n])
        .ok()
        .and_then(|s| s.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok());
    match code {
        Some(code) if (200..400).contains(&code) => Ok(()),
        Some(code) => Err(format!("HTTP probe failed with statuscode: {code}")),
        None => Err(format!("Get \"{url}\": malformed HTTP response")),
    }
}

/// The most of an exec probe's output kept for its message (upstream's
/// limit).
const MAX_EXEC_OUTPUT: usize = 10 * 1024;

async fn exec(target: &ProbeTarget, command: Vec<String>, timeout: Duration) -> Result<(), String> {
    if command.is_empty() {
        return Err("no command to run".into());
    }
    let Some(launch) = Launch::joining(&target.launch, target.pid, command) else {
        return Err("the container's launch record is gone".into());
    };
    let file = target
        .launch
        .with_extension(format!("probe-{:08x}.json", rand::random::<u32>()));
    super::write_private(&file, &serde_json::to_vec(&launch).unwrap_or_default())
        .map_err(|e| format!("cannot write the probe's launch: {e}"))?;
    let child = tokio::process::Command::new(&target.helper)
        .arg("__container-shim")
        .arg(&file)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let result = match child {
        Ok(child) => match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            // As upstream's exec prober: the failure is what the command
            // said (its first 10 KiB).
            Ok(Ok(out)) => {
                let mut said = out.stdout;
                said.extend_from_slice(&out.stderr);
                said.truncate(MAX_EXEC_OUTPUT);
                let said = String::from_utf8_lossy(&said).trim_end().to_string();
                Err(if said.is_empty() {
                    format!(
                        "command {:?} exited with {}",
                        launch.argv.join(" "),
                        out.status.code().unwrap_or(-1)
                    )
                } else {
                    said
                })
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("command {:?} timed out", launch.argv.join(" "))),
        },
        Err(e) => Err(format!("cannot run the probe: {e}")),
    };
    let _ = std::fs::remove_file(&file);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_decide_as_upstream() {
        let p = Probe {
            failure_threshold: Some(2),
            success_threshold: Some(2),
            ..Probe::default()
        };
        let mut c = Counter::new(&p);
        assert_eq!(c.observe(true, false), None, "one success of two");
        assert_eq!(c.observe(true, false), Some(true));
        assert_eq!(c.observe(false, true), None, "one failure of two");
        assert_eq!(c.observe(true, true), Some(true), "still passing");
        assert_eq!(c.observe(false, true), None);
        assert_eq!(c.observe(false, true), Some(false));
    }
}
