//! What the benchmarks share: the server under measurement as a child
//! process (killed with its children when dropped), waiting for its
//! client, its peak RSS, percentiles and the machine line.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub(crate) struct ServerProcess(pub(crate) Child);

impl ServerProcess {
    /// Starts `command` (a server the bench measures) with the log filter
    /// of `FLOTILLA_BENCH_CHILD_LOG` (default `warn`), its stdout dropped
    /// and its stderr shown; killed when dropped.
    pub(crate) fn start(mut command: Command, what: &str) -> anyhow::Result<ServerProcess> {
        let child = command
            .env(
                "FLOTILLA_LOG",
                std::env::var("FLOTILLA_BENCH_CHILD_LOG").unwrap_or("warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        Ok(ServerProcess(child))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A wrapper (`FLOTILLA_BENCH_HUB_WRAPPER`, heaptrack say) may run
        // the server as its child: killing the wrapper alone would leave
        // the server running.
        for pid in descendants(self.0.id()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The processes under `pid` (children first, then theirs), from
/// `/proc/PID/task/TID/children`; none where the kernel does not say.
fn descendants(pid: u32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(parent) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if let Ok(raw) = i32::try_from(child) {
                    found.push(raw);
                    next.push(child);
                }
            }
        }
    }
    found
}

/// The line every bench prints about where it ran.
pub(crate) fn print_machine() {
    println!("{}", super::report::machine_line());
}

/// Waits for a server's kubeconfig to appear, then a client from it.
pub(crate) async fn client_when_ready(
    kubeconfig: &std::path::Path,
    timeout: Duration,
) -> anyhow::Result<kube::Client> {
    let deadline = Instant::now() + timeout;
    while !kubeconfig.exists() {
        if Instant::now() > deadline {
            bail!(
                "the server did not write {} within {timeout:?}",
                kubeconfig.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

pub(crate) fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The value at fraction `p` (0 to 1) of `sorted`, nearest rank; the
/// default (zero) of an empty one.
pub(crate) fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod server_process_tests {
    use super::*;

    /// Whether `pid` still runs (a zombie waiting for its reaper does not).
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat.rsplit_once(") ")?.1.chars().next()?;
                Some(state != 'Z' && state != 'X')
            })
            .unwrap_or(false)
    }

    #[test]
    fn a_server_run_under_a_wrapper_is_killed_with_it() {
        let mut wrapper = Command::new("sh");
        wrapper.args(["-c", "sleep 300 & wait"]);
        let server = ServerProcess::start(wrapper, "a wrapper").expect("sh starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        let child = loop {
            if let Some(pid) = descendants(server.0.id()).first() {
                break *pid;
            }
            assert!(
                Instant::now() < deadline,
                "the wrapper's child never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(running(child));
        drop(server);
        let deadline = Instant::now() + Duration::from_secs(10);
        while running(child) {
            assert!(Instant::now() < deadline, "the wrapper's child outlived it");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
