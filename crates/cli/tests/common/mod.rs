//! Test harness: a real `flotilla apiserver` process on a free port with a
//! temporary data dir, killed on drop, and clients pointed at it.
#![allow(dead_code)]

pub mod fleet;
pub mod lifecycle;
pub mod underlay;
pub mod up;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    /// The subcommand and its own flags (`apiserver`, `member --name x`).
    command: Vec<String>,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    /// The etcd the server stores its objects in, with `--store etcd`.
    pub etcd: Option<flotilla_store::testing::Etcd>,
    /// Stopped with SIGTERM on drop (a netns member removes its network).
    graceful: bool,
}

/// Which store a test's API server runs on.
#[derive(Clone, Copy, Debug)]
pub enum Store {
    Embedded,
    Etcd,
}

/// Runs API-suite tests, `fn NAME(store: common::Store)` (sync or, with
/// `async`, async), once on each store: `NAME::embedded` and `NAME::etcd`.
#[macro_export]
macro_rules! on_both_stores {
    (async $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn embedded() {
                super::$name(super::common::Store::Embedded).await;
            }
            #[tokio::test]
            async fn etcd() {
                super::$name(super::common::Store::Etcd).await;
            }
        }
    )*};
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn embedded() {
                super::$name(super::common::Store::Embedded);
            }
            #[test]
            fn etcd() {
                super::$name(super::common::Store::Etcd);
            }
        }
    )*};
}

/// The variable that configures failpoints; set (even empty), failpoints
/// can be armed at run time through `/debug/failpoints`.
pub const FAILPOINTS: &str = "FLOTILLA_FAILPOINTS";

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// Starts with extra `flotilla apiserver` flags.
    pub fn start_with(extra: &[&str]) -> Server {
        Self::start_with_env(extra, &[])
    }

    /// `flotilla apiserver` with extra flags on `store`; on etcd, a real
    /// etcd of its own.
    pub fn start_on(store: Store, extra: &[&str]) -> Server {
        match store {
            Store::Embedded => Self::start_with(extra),
            Store::Etcd => {
                let etcd = flotilla_store::testing::single();
                let mut args = vec!["--store", "etcd", "--etcd-endpoints", &etcd.client_url];
                args.extend_from_slice(extra);
                let mut s = Self::prepare(&["apiserver"], &args, &[]);
                s.etcd = Some(etcd);
                s.spawn();
                s
            }
        }
    }

    /// `flotilla controlplane` on an etcd cluster someone else started.
    pub fn controlplane_on_etcd(endpoints: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--store", "etcd", "--etcd-endpoints", endpoints];
        args.extend_from_slice(extra);
        Self::start_command(&["controlplane"], &args, &[])
    }

    /// `n` `flotilla controlplane` replicas on one etcd, their processes
    /// started at the same instant; returns once each has written its
    /// kubeconfig.
    pub fn controlplanes_on_etcd(n: usize, endpoints: &str, extra: &[&str]) -> Vec<Server> {
        let mut args = vec!["--store", "etcd", "--etcd-endpoints", endpoints];
        args.extend_from_slice(extra);
        let mut replicas: Vec<Server> = (0..n)
            .map(|_| Self::prepare(&["controlplane"], &args, &[]))
            .collect();
        for r in &mut replicas {
            r.start_process();
        }
        for r in &replicas {
            r.wait_started();
        }
        replicas
    }

    /// Starts with extra flags and environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_command(&["apiserver"], extra, env)
    }

    /// A simulated member cluster (`flotilla member --name NAME`) with
    /// extra flags; pods start fast unless `extra` says otherwise.
    pub fn member(name: &str, extra: &[&str]) -> Server {
        Self::member_with_env(name, extra, &[])
    }

    /// A simulated member with extra flags and environment variables
    /// (`FLOTILLA_FAILPOINTS`).
    pub fn member_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["--job-duration", "1s"];
        if !extra.contains(&"--pod-startup") {
            args.extend(["--pod-startup", "300ms"]);
        }
        args.extend_from_slice(extra);
        Self::start_command(&["member", "--name", name], &args, env)
    }

    /// A member whose pods run (`--runtime netns`); it is stopped with
    /// SIGTERM when dropped, so that it removes its pod network.
    pub fn netns_member(name: &str, extra: &[&str]) -> Server {
        Self::netns_member_with_env(name, extra, &[])
    }

    /// A netns member with environment variables (its gateways and
    /// containers inherit them).
    pub fn netns_member_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["--runtime", "netns"];
        args.extend_from_slice(extra);
        let mut s = Self::prepare(&["member", "--name", name], &args, env);
        s.graceful = true;
        s.spawn();
        s
    }

    /// Sends SIGTERM and waits (30 s at most) for the process to end.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// The control plane (`flotilla controlplane`) with extra flags.
    pub fn controlplane(extra: &[&str]) -> Server {
        Self::start_command(&["controlplane"], extra, &[])
    }

    /// The control plane with extra flags and environment variables.
    pub fn controlplane_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_command(&["controlplane"], extra, env)
    }

    /// The environment of the next start ([`Server::spawn`]).
    pub fn set_env(&mut self, env: &[(&str, &str)]) {
        self.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Arms failpoint `name` with `actions` in the running process (one
    /// started with `FLOTILLA_FAILPOINTS` set), through its API.
    pub fn arm_failpoint(&self, name: &str, actions: &str) {
        let path = format!("/debug/failpoints/{name}");
        let out = self.kubectl_stdin(&["replace", "--raw", &path, "-f", "-"], Some(actions));
        assert!(
            out.status.success(),
            "arming {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits (up to `timeout`) for the process to end by itself, as a
    /// failpoint's `return(crash)` ends it; whether it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(Some(_))) | None => {
                    self.child = None;
                    return true;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        false
    }

    fn start_command(command: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut s = Self::prepare(command, extra, env);
        s.spawn();
        s
    }

    fn prepare(command: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        Server {
            command: command.iter().map(|s| s.to_string()).collect(),
            child: None,
            kubeconfig: dir.path().join("kubeconfig"),
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            etcd: None,
            graceful: false,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the process (again) on the same data dir and waits for its kubeconfig.
    pub fn spawn(&mut self) {
        self.start_process();
        self.wait_started();
    }

    fn start_process(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(&self.command)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(self.data_dir())
            .arg("--write-kubeconfig")
            .arg(&self.kubeconfig)
            .args(&self.extra)
            // The runtime's size is the test's to say, not the runner's.
            .env_remove("TOKIO_WORKER_THREADS")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn flotilla");
        self.child = Some(child);
    }

    fn wait_started(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self.kubeconfig.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for kubeconfig to appear; server log tail:\n{}",
                tail(&self.log())
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A kube-rs client from the kubeconfig the server wrote, loaded as any user's would be.
    pub async fn client(&self) -> kube::Client {
        kube_client(&self.kubeconfig).await
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The first line of the server's log containing `marker`, waiting up
    /// to `timeout`.
    pub fn wait_for_log_line(&self, marker: &str, timeout: Duration) -> String {
        let mut found = None;
        wait_for(timeout, &format!("{marker:?} in the server's log"), || {
            found = line_with(&self.log(), marker);
            found.is_some()
        });
        found.unwrap_or_default()
    }

    /// Runs kubectl against this server with its own discovery cache.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let kubectl = which("kubectl")
            .expect("kubectl not found: install Debian's kubernetes-client (bash .ci/run does it)");
        let mut cmd = Command::new(kubectl);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("run kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }

    /// kubectl that must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_with(args, None)
    }

    /// kubectl reading `stdin`, that must succeed; returns stdout.
    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        self.ok_with(args, Some(stdin))
    }

    fn ok_with(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_stdin(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}\nserver log tail: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail(&self.log())
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let running = self.child.is_some();
        if self.graceful {
            self.stop();
        }
        self.kill9();
        // A netns member stopped gracefully leaves nothing on the host.
        if self.graceful && running && !std::thread::panicking() {
            let left = self.left_on_host();
            assert!(
                left.is_empty(),
                "the stopped member left on the host: {left:?}"
            );
        }
    }
}

impl Server {
    /// What a netns member made on the host and left: namespaces under
    /// its prefix (their links, TUN devices and nftables tables with
    /// them), its cgroups, its entry in the host's record.
    pub fn left_on_host(&self) -> Vec<String> {
        let Ok(prefix) = std::fs::read_to_string(self.data_dir().join("netns-prefix")) else {
            return Vec::new();
        };
        let prefix = prefix.trim();
        let mut left: Vec<String> = std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n == prefix || n.starts_with(&format!("{prefix}-")))
                    .map(|n| format!("netns {n}"))
                    .collect()
            })
            .unwrap_or_default();
        for root in ["", "memory/", "cpu/"] {
            let cgroup = format!("/sys/fs/cgroup/{root}flotilla-{prefix}");
            if Path::new(&cgroup).exists() {
                left.push(format!("cgroup {cgroup}"));
            }
        }
        let entry = format!("/run/flotilla/made/{prefix}.owner");
        if Path::new(&entry).exists() {
            left.push(format!("record entry {entry}"));
        }
        left
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    kube::Client::try_from(kube_config(kubeconfig).await).expect("client")
}

/// The kube-rs configuration a kubeconfig file gives, to alter in tests.
pub async fn kube_config(kubeconfig: &Path) -> kube::Config {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("kubeconfig is usable")
}

/// A long-running `flotilla` command (an agent, a DNS server), killed when
/// dropped. The last lines of its stderr are kept, to show when a test fails.
pub struct Running {
    child: Child,
    stderr: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// How many of a running command's last stderr lines are kept.
const STDERR_LINES: usize = 500;

impl Running {
    pub fn start(args: &[&str]) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flotilla");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        if let Some(pipe) = child.stderr.take() {
            let tail = stderr.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        Running { child, stderr }
    }

    /// The last lines the command wrote to stderr.
    pub fn stderr(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().map(|l| format!("{l}\n")).collect()
    }

    /// The first stderr line containing `marker`, waiting up to `timeout`;
    /// panics with the stderr if the command exits first.
    pub fn wait_for_line(&mut self, marker: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = line_with(&self.stderr(), marker) {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the reader thread catch up with the last lines.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "flotilla exited ({status}) before printing {marker:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {marker:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- stderr of a flotilla command ---\n{}", self.stderr());
        }
    }
}

/// The first line of `text` containing `marker`.
fn line_with(text: &str, marker: &str) -> Option<String> {
    text.lines()
        .find(|l| l.contains(marker))
        .map(str::to_string)
}

/// Runs `flotilla` with `args`, returning its output.
pub fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .output()
        .expect("run flotilla")
}

/// The first event of a watch on `api` from `resource_version`, within 10 s.
pub async fn first_watch_event<K>(
    api: &kube::Api<K>,
    resource_version: &str,
) -> kube::api::WatchEvent<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
{
    use futures::StreamExt;
    let mut stream = api
        .watch(&kube::api::WatchParams::default(), resource_version)
        .await
        .expect("watch starts")
        .boxed();
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10s")
        .expect("the stream has an event")
        .expect("the event decodes")
}

/// The Status of an API error; panics on any other error.
pub fn status_of(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Names of the objects `api` lists now, in list order.
pub async fn names<K>(api: &kube::Api<K>) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    api.list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| o.name_any())
        .filter(|name| !is_cluster_default(name))
        .collect()
}

/// What the server makes in every namespace by itself (the root CA
/// ConfigMap, the `default` ServiceAccount), which tests listing their
/// own objects leave out.
pub fn is_cluster_default(name: &str) -> bool {
    matches!(name, "kube-root-ca.crt" | "default")
}

/// Asserts that `output` contains every one of `needles`.
#[track_caller]
pub fn assert_has(output: &str, needles: &[&str]) {
    for needle in needles {
        assert!(output.contains(needle), "missing {needle:?} in:\n{output}");
    }
}

pub fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(bin))
            .find(|p| p.is_file())
    })
}

/// Polls `cond` every half second (each poll may run kubectl) until it
/// holds; on timeout, fails with what `describe` shows.
pub fn until(
    timeout: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
    describe: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            describe()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Polls `cond` until it holds or the deadline passes.
pub fn wait_for(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that what `watched` reads is the same after a few seconds as
/// before: nothing rewrites it on its own. What it rightly follows
/// (`cause`, such as a status collected from members) may move, and
/// `watched` then follows it a moment later: a window counts only when
/// `cause` stood still through it and through the window before, so a
/// change of `cause` just before the window is not taken for a rewrite.
/// Windows are tried until one counts or `timeout` passes (then the last
/// one is judged).
pub fn assert_left_alone<W, C>(
    timeout: Duration,
    what: &str,
    watched: impl Fn() -> W,
    cause: impl Fn() -> C,
) where
    W: PartialEq + std::fmt::Debug,
    C: PartialEq,
{
    let deadline = Instant::now() + timeout;
    let (mut before, mut cause_before) = (watched(), cause());
    let mut settled = false;
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let (after, cause_after) = (watched(), cause());
        let still = cause_after == cause_before;
        if (still && settled) || Instant::now() >= deadline {
            assert_eq!(
                after, before,
                "{what} rewritten while what it follows stood still"
            );
            return;
        }
        settled = still;
        (before, cause_before) = (after, cause_after);
    }
}

pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("write file");
    p
}

/// Whether the tests that make network namespaces run here: they need
/// root (CI has it), and are skipped only when
/// FLOTILLA_SKIP_NETNS_AS_ROOT=1 says so; without root they fail.
pub fn can_run_netns() -> bool {
    if std::env::var("FLOTILLA_SKIP_NETNS_AS_ROOT").as_deref() == Ok("1") {
        eprintln!("skipped: FLOTILLA_SKIP_NETNS_AS_ROOT=1");
        return false;
    }
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    assert_eq!(
        uid, "0",
        "the tests that make network namespaces need root (or FLOTILLA_SKIP_NETNS_AS_ROOT=1)"
    );
    true
}

/// The StatefulSet of Kubernetes' "StatefulSet Basics" tutorial: nginx
/// with a claim per pod from `volumeClaimTemplates`.
pub const STATEFUL_WEB: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: nginx
  replicas: 2
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      containers:
      - name: nginx
        image: registry.k8s.io/nginx-slim:0.21
        ports: [{containerPort: 80, name: web}]
        volumeMounts: [{name: www, mountPath: /usr/share/nginx/html}]
  volumeClaimTemplates:
  - metadata: {name: www}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

/// A filesystem BackupStorageLocation `default` of Velero's in `dir`
/// (bucket `velero`, prefix `fleet`): members given the same `dir` share it.
pub fn velero_location(dir: &Path) -> String {
    format!(
        r#"
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: default, namespace: velero}}
spec:
  provider: filesystem
  objectStorage: {{bucket: velero, prefix: fleet}}
  config: {{path: "{}"}}
  default: true
"#,
        dir.display()
    )
}
