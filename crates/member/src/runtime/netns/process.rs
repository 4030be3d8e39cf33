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
    /// Its stdin, for `attach -i`, when its container asks for one.
    pub input: Option<Input>,
}

/// A container's stdin (a pipe, or its terminal), shared by attaches;
/// `None` once closed (dropping it is what closes a pipe).
pub type Input = Arc<Mutex<Option<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>>>>;

/// What a container's spec asks of its standard streams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Streams {
    /// `stdin: true`: kept open for attaches.
    pub stdin: bool,
    /// `tty: true`: a terminal for stdin, stdout and stderr.
    pub tty: bool,
}

/// Longest line written as one log entry; longer ones are split (`P`).
const MAX_LINE: usize = 16 * 1024;

/// Starts `helper __container-shim launch_file`, logging to `log`, and
/// calls `on_exit` once it has exited.
pub fn spawn(
    helper: &Path,
    launch_file: &Path,
    log: PathBuf,
    streams: Streams,
    on_exit: impl FnOnce() + Send + 'static,
) -> std::io::Result<Process> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut command = Command::new(helper);
    command.arg("__container-shim").arg(launch_file).env_clear();
    // Its own process group, to signal all it starts: with a terminal the
    // shim's setsid makes one (and would fail on a group leader).
    if !streams.tty {
        command.process_group(0);
    }
    let terminal = if streams.tty {
        let (master, slave) = open_pty()?;
        command
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        Some(std::fs::File::from(master))
    } else {
        command
            .stdin(if streams.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        None
    };
    let mut child = command.spawn()?;
    // Only the child holds the terminal's other end now.
    drop(command);
    let pid = child.id().map(|p| p as i32).unwrap_or_default();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let file = Arc::new(Mutex::new(tokio::fs::File::from_std(file)));
    let mut copies = Vec::new();
    let mut input: Option<Input> = None;
    if let Some(master) = terminal {
        let writer = master.try_clone()?;
        copies.push(tokio::spawn(copy_lines(
            PtyReader(tokio::fs::File::from_std(master)),
            "stdout",
            file.clone(),
        )));
        let terminal_input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>> =
            Box::pin(tokio::fs::File::from_std(writer));
        input = Some(Arc::new(Mutex::new(Some(terminal_input))));
    }
    if let Some(stdin) = child.stdin.take() {
        input = Some(Arc::new(Mutex::new(Some(Box::pin(stdin)))));
    }
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
    Ok(Process {
        pid,
        exit: rx,
        input,
    })
}

/// A pseudo-terminal: its master, and its slave opened.
pub fn open_pty() -> std::io::Result<(std::os::fd::OwnedFd, std::fs::File)> {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    use std::os::unix::fs::OpenOptionsExt;
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(name.to_string_lossy().as_ref())?;
    Ok((master, slave))
}

/// A pty's master reads EIO once the other side has closed: that is EOF.
pub struct PtyReader(pub tokio::fs::File);

impl tokio::io::AsyncRead for PtyReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
            std::task::Poll::Ready(Err(e)) if e.raw_os_error() == Some(5) => {
                std::task::Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
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
