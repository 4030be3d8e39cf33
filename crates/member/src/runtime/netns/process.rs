//! Container processes: started through the shim, their output written
//! to log files in the CRI's format (`<RFC 3339 time> <stream> <F|P>
//! <line>`, as `kubectl logs` expects of a kubelet), their exit reported
//! once, and stopped with SIGTERM then SIGKILL after the grace period.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{Mutex, watch};

/// A started process: its PID (also its process group) and its exit.
pub struct Process {
    pub pid: i32,
    /// `None` while it runs, then its exit code (128+signal when killed).
    pub exit: watch::Receiver<Option<i32>>,
}

/// Longest line written as one log entry; longer ones are split (`P`).
const MAX_LINE: usize = 16 * 1024;

/// Starts `helper __container-shim launch_file`, logging to `log`, and
/// calls `on_exit` once it has exited.
pub fn spawn(
    helper: &Path,
    launch_file: &Path,
    log: PathBuf,
    on_exit: impl FnOnce() + Send + 'static,
) -> std::io::Result<Process> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut child = Command::new(helper)
        .arg("__container-shim")
        .arg(launch_file)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or_default();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let file = Arc::new(Mutex::new(tokio::fs::File::from_std(file)));
    let mut copies = Vec::new();
    if let Some(out) = child.stdout.take() {
        copies.push(tokio::spawn(copy_lines(out, "stdout", file.clone())));
    }
    if let Some(err) = child.stderr.take() {
        copies.push(tokio::spawn(copy_lines(err, "stderr", file.clone())));
    }
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let code = match child.wait().await {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                status
                    .code()
                    .or_else(|| status.signal().map(|s| 128 + s))
                    .unwrap_or(-1)
            }
            Err(_) => -1,
        };
        // The last lines are in the log before the exit is reported.
        for c in copies {
            let _ = c.await;
        }
        let _ = tx.send(Some(code));
        on_exit();
    });
    Ok(Process { pid, exit: rx })
}

async fn copy_lines(
    stream: impl AsyncRead + Unpin,
    name: &'static str,
    file: Arc<Mutex<tokio::fs::File>>,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let full = buf.last() == Some(&b'\n');
        let line = if full { &buf[..n - 1] } else { &buf[..n] };
        let tag = if full || n < MAX_LINE { "F" } else { "P" };
        let mut entry = format!("{} {name} {tag} ", timestamp()).into_bytes();
        entry.extend_from_slice(line);
        entry.push(b'\n');
        let _ = file.lock().await.write_all(&entry).await;
    }
}

use tokio::io::AsyncReadExt as _;

/// Now, as the CRI writes it (RFC 3339 with nanoseconds).
pub fn timestamp() -> String {
    jiff::Timestamp::now().to_string()
}

/// Stops a process group: SIGTERM, then SIGKILL after `grace`.
pub async fn stop(p: &Process, grace: Duration) {
    let mut exit = p.exit.clone();
    if exit.borrow().is_some() {
        return;
    }
    let group = Pid::from_raw(p.pid);
    let _ = killpg(group, Signal::SIGTERM);
    let exited = tokio::time::timeout(grace, exit.wait_for(Option::is_some))
        .await
        .is_ok();
    if !exited {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some)).await;
    }
}
