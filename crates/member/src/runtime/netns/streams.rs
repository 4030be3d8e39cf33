//! The kubelet API of the netns runtime: container logs from the CRI log
//! files, `exec` through the shim joining the container's namespaces
//! (with a pseudo-terminal for `-t`), and port forwarding from inside the
//! pod's network namespace.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_apiserver::error::ApiError;
use flotilla_apiserver::kubelet::{
    ByteStream, ExecOptions, Kubelet, LogOptions, Session, Stream2, Target,
};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::NetnsRuntime;
use super::shim::Launch;
use flotilla_host as host;

/// How often a followed log is read for more.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// One entry of a CRI log file.
struct Entry<'a> {
    time: &'a str,
    full: bool,
    text: &'a [u8],
}

fn parse(line: &[u8]) -> Option<Entry<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    Some(Entry {
        time,
        full: tag != b"P",
        text: parts.next().unwrap_or_default(),
    })
}

/// Renders entries as `kubectl logs` shows them.
fn render(out: &mut Vec<u8>, e: &Entry<'_>, timestamps: bool) {
    if timestamps {
        out.extend_from_slice(e.time.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(e.text);
    if e.full {
        out.push(b'\n');
    }
}

fn keep(e: &Entry<'_>, options: &LogOptions) -> bool {
    match &options.since {
        Some(since) => e.time.parse::<jiff::Timestamp>().is_ok_and(|t| t >= *since),
        None => true,
    }
}

/// The log as it is now, filtered; and how far into the file it went.
fn snapshot(data: &[u8], options: &LogOptions) -> (Vec<u8>, usize) {
    // Only whole lines: a line being written is read on the next poll.
    let end = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let entries: Vec<Entry<'_>> = data[..end]
        .split(|b| *b == b'\n')
        .filter_map(parse)
        .filter(|e| keep(e, options))
        .collect();
    let skip = match options.tail_lines {
        Some(n) => entries.len().saturating_sub(n.max(0) as usize),
        None => 0,
    };
    let mut out = Vec::new();
    for e in &entries[skip..] {
        render(&mut out, e, options.timestamps);
    }
    (out, end)
}

async fn follow(
    path: &Path,
    mut offset: u64,
    mut exit: tokio::sync::watch::Receiver<Option<i32>>,
    options: &LogOptions,
    tx: &mpsc::Sender<std::io::Result<Bytes>>,
    mut budget: Option<usize>,
) {
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return;
    };
    let mut pending = Vec::new();
    loop {
        let exited = exit.borrow().is_some();
        if file.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
            return;
        }
        let mut fresh = Vec::new();
        if file.read_to_end(&mut fresh).await.is_err() {
            return;
        }
        offset += fresh.len() as u64;
        pending.extend_from_slice(&fresh);
        let (mut out, used) = snapshot(
            &pending,
            &LogOptions {
                tail_lines: None,
                ..options.clone()
            },
        );
        pending.drain(..used);
        if let Some(left) = budget.as_mut() {
            out.truncate(*left);
            *left -= out.len();
        }
        if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
            return;
        }
        if exited || budget == Some(0) {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = exit.changed() => {}
            _ = tx.closed() => return,
        }
    }
}

fn bad_request(message: String) -> ApiError {
    ApiError::bad_request(message)
}

#[async_trait]
impl Kubelet for NetnsRuntime {
    async fn checkpoint(&self, target: &Target) -> Result<String, ApiError> {
        Err(flotilla_apiserver::kubelet::checkpoint_failed(
            target,
            super::checkpoint::why_not(),
        ))
    }

    async fn logs(&self, target: &Target, options: &LogOptions) -> Result<ByteStream, ApiError> {
        let key = format!("{}/{}", target.namespace, target.pod);
        let run = self
            .log_of(&key, &target.uid, &target.container, options.previous)
            .await
            .map_err(bad_request)?;
        let data = tokio::fs::read(&run.path).await.unwrap_or_default();
        let (mut first, used) = snapshot(&data, options);
        let mut budget = options.limit_bytes.map(|l| l.max(0) as usize);
        if let Some(left) = budget.as_mut() {
            first.truncate(*left);
            *left -= first.len();
        }
        let (tx, rx) = mpsc::channel(16);
        let _ = tx.try_send(Ok(Bytes::from(first)));
        if options.follow
            && budget != Some(0)
            && let Some(exit) = run.exit
        {
            let options = options.clone();
            tokio::spawn(async move {
                follow(&run.path, used as u64, exit, &options, &tx, budget).await;
            });
        }
        Ok(Box::pin(ReceiverStream::new(rx)))
    }

    async fn exec(&self, target: &Target, options: &ExecOptions) -> Result<Session, ApiError> {
        let key = format!("{}/{}", target.namespace, target.pod);
        if options.command.is_empty() {
            return self.attach(&key, target, options.stdin).await;
        }
        let t = self
            .exec_target(&key, &target.uid, &target.container)
            .await
            .map_err(bad_request)?;
        let mut launch = Launch::joining(&t.launch, t.pid, options.command.clone())
            .ok_or_else(|| ApiError::internal("the container's launch record is gone"))?;
        let terminal = if options.tty {
            launch.tty = true;
            Some(
                super::process::open_pty()
                    .map_err(|e| ApiError::internal(format!("cannot open a terminal: {e}")))?,
            )
        } else {
            None
        };
        let file = t
            .dir
            .join("launch")
            .join(format!("exec-{}.json", uuid_like()));
        super::write_private(&file, &serde_json::to_vec(&launch).unwrap_or_default())
            .map_err(|e| ApiError::internal(format!("cannot write the exec launch: {e}")))?;
        let mut command = tokio::process::Command::new(&t.helper);
        command
            .arg("__container-shim")
            .arg(&file)
            .env_clear()
            .kill_on_drop(true);
        if let Some((_, slave)) = &terminal {
            // The terminal is the child's from its first instruction; this
            // process keeps only the master, so its reads end when the child does.
            let io = |f: &std::fs::File| f.try_clone().map(Stdio::from);
            let internal = |e: std::io::Error| ApiError::internal(e.to_string());
            command
                .stdin(io(slave).map_err(internal)?)
                .stdout(io(slave).map_err(internal)?)
                .stderr(io(slave).map_err(internal)?);
        } else {
            command
                .stdin(if options.stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        let mut child = command
            .spawn()
            .map_err(|e| ApiError::internal(format!("cannot start the exec: {e}")))?;
        drop(command);
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let exit = Box::pin(async move {
            let status = child.wait().await.map_err(|e| e.to_string());
            let _ = std::fs::remove_file(&file);
            use std::os::unix::process::ExitStatusExt;
            status.map(|s| {
                s.code()
                    .or_else(|| s.signal().map(|n| 128 + n))
                    .unwrap_or(-1)
            })
        });
        // The child's pipes, taken before `exit` owns it.
        Ok(match terminal {
            Some((master, slave)) => {
                drop(slave);
                let master = std::fs::File::from(master);
                let writer = master
                    .try_clone()
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let resize_fd = master
                    .try_clone()
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                Session {
                    stdin: options
                        .stdin
                        .then(|| Box::pin(tokio::fs::File::from_std(writer)) as _),
                    stdout: Some(Box::pin(super::process::PtyReader(
                        tokio::fs::File::from_std(master),
                    ))),
                    stderr: None,
                    resize: Some(Box::new(move |cols, rows| {
                        let size = rustix::termios::Winsize {
                            ws_col: cols,
                            ws_row: rows,
                            ws_xpixel: 0,
                            ws_ypixel: 0,
                        };
                        let _ = rustix::termios::tcsetwinsize(&resize_fd, size);
                    })),
                    exit,
                }
            }
            None => Session {
                stdin: stdin.map(|w| Box::pin(w) as _),
                stdout: stdout.map(|r| Box::pin(r) as _),
                stderr: stderr.map(|r| Box::pin(r) as _),
                resize: None,
                exit,
            },
        })
    }

    async fn port_forward(&self, target: &Target, port: u16) -> Result<Stream2, ApiError> {
        let key = format!("{}/{}", target.namespace, target.pod);
        let netns = self.pod_netns(&key).await.map_err(bad_request)?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let stream = host::connect_in(&netns, addr, Duration::from_secs(5))
            .await
            .map_err(|e| {
                ApiError::internal(format!(
                    "error forwarding port {port} to pod {}: failed to connect to localhost:{port} inside the pod's network namespace: {e}",
                    target.pod
                ))
            })?;
        Ok(Box::pin(stream))
    }
}

impl NetnsRuntime {
    /// `attach`: the container's output from now on, until it exits, and
    /// with `-i` its stdin, when its spec keeps one open (`stdin: true`).
    async fn attach(&self, key: &str, target: &Target, stdin: bool) -> Result<Session, ApiError> {
        let run = self
            .log_of(key, &target.uid, &target.container, false)
            .await
            .map_err(bad_request)?;
        let Some(exit) = run.exit else {
            return Err(bad_request(format!(
                "container {} is not running",
                target.container
            )));
        };
        let from = tokio::fs::metadata(&run.path)
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        let (mut writer, reader) = tokio::io::duplex(64 * 1024);
        let (tx, mut rx) = mpsc::channel(16);
        let followed = exit.clone();
        tokio::spawn(async move {
            follow(&run.path, from, followed, &LogOptions::default(), &tx, None).await;
        });
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Some(Ok(chunk)) = rx.recv().await {
                if writer.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let input = match (stdin, run.input) {
            (true, Some(container_stdin)) => {
                let (client, mut from_client) = tokio::io::duplex(16 * 1024);
                let once = run.stdin_once;
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let mut chunk = vec![0u8; 16 * 1024];
                    while let Ok(n) = from_client.read(&mut chunk).await {
                        let mut input = container_stdin.lock().await;
                        let Some(w) = input.as_mut() else { break };
                        if n == 0 || w.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                    }
                    // stdinOnce: the first attach's end is the container's
                    // EOF (dropping the pipe closes it).
                    if once && let Some(mut w) = container_stdin.lock().await.take() {
                        let _ = w.shutdown().await;
                    }
                });
                Some(Box::pin(client) as std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>)
            }
            (true, None) => {
                return Err(bad_request(format!(
                    "container {} is not set up for stdin (stdin: true in its spec)",
                    target.container
                )));
            }
            _ => None,
        };
        let mut exit = exit;
        Ok(Session {
            stdin: input,
            stdout: Some(Box::pin(reader)),
            stderr: None,
            resize: None,
            exit: Box::pin(async move {
                let code = exit
                    .wait_for(Option::is_some)
                    .await
                    .map(|c| c.unwrap_or(-1))
                    .map_err(|e| e.to_string())?;
                Ok(code)
            }),
        })
    }
}

fn uuid_like() -> String {
    format!("{:016x}", rand::random::<u64>())
}
