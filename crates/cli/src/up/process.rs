//! The fleet's processes: each a child of `flotilla up` in its own process
//! group, stopped by closing its stdin, and once the fleet runs started
//! again whenever it exits.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::apiserver::STOP_WITH_PARENT_ENV;

/// A process of the fleet; its stdin is the pipe whose closing stops it.
pub(super) struct Process {
    pub(super) name: String,
    exe: PathBuf,
    args: Vec<String>,
    child: Child,
    pub(super) log: PathBuf,
    /// When it was (re)started, and how long to wait before the next
    /// restart should it exit again soon.
    started: Instant,
    backoff: Duration,
    /// Stopped with SIGTERM rather than by closing its stdin (a program
    /// that does not read it: etcd).
    terminate: bool,
}

/// A component that exits is started again after this, doubled while it
/// keeps exiting soon after its start (as a kubelet's CrashLoopBackOff),
/// up to [`MOST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MOST_BACKOFF: Duration = Duration::from_secs(10);
/// Running this long, it counts as healthy: the backoff starts over.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);

impl Process {
    pub(super) fn spawn(
        exe: &Path,
        name: &str,
        args: &[String],
        log: PathBuf,
    ) -> anyhow::Result<Process> {
        Ok(Process {
            name: name.to_string(),
            exe: exe.to_path_buf(),
            args: args.to_vec(),
            child: Self::start(exe, name, args, &log)?,
            log,
            started: Instant::now(),
            backoff: FIRST_BACKOFF,
            terminate: false,
        })
    }

    /// A program other than Flotilla (`exe`), stopped with SIGTERM.
    pub(super) fn spawn_foreign(
        exe: &Path,
        name: &str,
        args: &[String],
        log: PathBuf,
    ) -> anyhow::Result<Process> {
        let mut p = Self::spawn(exe, name, args, log)?;
        p.terminate = true;
        Ok(p)
    }

    fn start(exe: &Path, name: &str, args: &[String], log: &Path) -> anyhow::Result<Child> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(exe);
        command
            .args(args)
            .env(STOP_WITH_PARENT_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        command
            .spawn()
            .with_context(|| format!("cannot start {name}"))
    }

    /// The port it listens on from now on (learned from its kubeconfig
    /// when it was started on a port the OS chose): a restart takes the
    /// same one, where the hub and agents reach it.
    pub(super) fn keep_port(&mut self, port: u16) {
        if let Some(i) = self.args.iter().position(|a| a == "--listen")
            && let Some(listen) = self.args.get_mut(i + 1)
        {
            *listen = SocketAddr::from(([127, 0, 0, 1], port)).to_string();
        }
    }

    /// Fails, with the end of its log, if the process has exited.
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); the end of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            );
        }
        Ok(())
    }

    /// Once the fleet runs: a process that exited (killed, crashed) is
    /// started again on the same data dir and port, after its backoff.
    pub(super) async fn keep_running(&mut self) -> anyhow::Result<()> {
        let Some(status) = self.child.try_wait()? else {
            if self.started.elapsed() >= HEALTHY_AFTER {
                self.backoff = FIRST_BACKOFF;
            }
            return Ok(());
        };
        println!(
            "{} exited ({status}); starting it again in {:.1}s (log: {})",
            self.name,
            self.backoff.as_secs_f64(),
            self.log.display()
        );
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(MOST_BACKOFF);
        self.child = Self::start(&self.exe, &self.name, &self.args, &self.log)?;
        self.started = Instant::now();
        Ok(())
    }

    /// Closes its stdin and waits for it to stop; kills it after 10 s.
    pub(super) async fn stop(mut self) {
        drop(self.child.stdin.take());
        if self.terminate
            && let Some(pid) = self
                .child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

pub(super) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The fleet's processes, stopped in reverse order of start.
pub(super) struct Fleet {
    pub(super) processes: Vec<Process>,
}

impl Fleet {
    pub(super) async fn stop(mut self) {
        while let Some(p) = self.processes.pop() {
            p.stop().await;
        }
    }

    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        self.processes.iter_mut().try_for_each(Process::check_alive)
    }
}
