//! `flotilla apiserver`: the API server on the embedded store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use flotilla_apiserver::tls::{self, Pki};
use flotilla_apiserver::{ApiServer, Config, auth};
use flotilla_store::{EtcdOptions, EtcdStore, SqliteOptions, SqliteStore, Store};
use tracing::info;

use crate::kubeconfig;

/// The flags of a server command (`apiserver`, `controlplane`).
#[derive(clap::Args)]
pub struct Args {
    /// Where the embedded store keeps its data [default: <user data dir>/flotilla/<command>]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write a kubeconfig for this server here once it is ready [default: <data dir>/kubeconfig]
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl Args {
    /// The data dir and kubeconfig path, defaulted for `command`.
    pub fn paths(&self, command: &str) -> (PathBuf, PathBuf) {
        let data_dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| default_data_dir(command));
        let kubeconfig = self
            .write_kubeconfig
            .clone()
            .unwrap_or_else(|| data_dir.join("kubeconfig"));
        (data_dir, kubeconfig)
    }
}

pub fn default_data_dir(component: &str) -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("flotilla")
        .join(component)
}

/// Set by `flotilla up` on the processes it starts: each stops when its
/// stdin (a pipe from `up`) closes, which also happens when `up` itself is
/// killed, so that no process outlives the fleet.
pub const STOP_WITH_PARENT_ENV: &str = "FLOTILLA_STOP_WITH_PARENT";

/// Resolves when stdin reaches its end, if [`STOP_WITH_PARENT_ENV`] is
/// set; never otherwise. A plain thread reads it: a runtime's blocking
/// task would hold the process open at exit.
async fn parent_gone() {
    if std::env::var_os(STOP_WITH_PARENT_ENV).is_none() {
        return std::future::pending().await;
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// Resolves when SIGTERM or SIGINT arrives (or, under `flotilla up`, when
/// it goes).
pub async fn shutdown_signal() {
    tokio::select! {
        _ = signals() => {}
        _ = parent_gone() => {}
    }
}

async fn signals() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Asks the server for /readyz through `kubeconfig` until it answers:
/// proves the CA and token it carries work before anyone is told.
async fn wait_ready(kubeconfig: &str) -> anyhow::Result<()> {
    let client = kubeconfig::client_from(kube::config::Kubeconfig::from_yaml(kubeconfig)?).await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let req = http::Request::get("/readyz").body(Vec::new())?;
        let error = match client.request_text(req).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if tokio::time::Instant::now() > deadline {
            bail!("the server did not become ready within 30s: {error}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The URL clients use for a server listening on `addr`.
pub fn server_url(addr: SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        addr.ip()
    };
    format!("https://{}", SocketAddr::new(ip, addr.port()))
}

/// Storage, TLS and listening options every server command shares.
#[derive(clap::Args, Clone)]
pub struct ServeArgs {
    /// Address to serve on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// How many recent changes the watch window keeps in memory. On the
    /// embedded store a watch from an older resourceVersion reads the log
    /// back to the last compaction; on etcd it gets 410 Expired.
    #[arg(long, default_value_t = 100_000)]
    pub watch_history: usize,
    /// Extra names or IP addresses the serving certificate covers
    /// (besides the listen address, localhost and 127.0.0.1).
    #[arg(long = "tls-san", value_delimiter = ',')]
    pub tls_sans: Vec<String>,
    /// Static bearer tokens, kube-apiserver's CSV format: one
    /// token,user,uid[,"group1,group2"] per line; the token authenticates
    /// as that user, in those groups and system:authenticated.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// How requests are authorized: RBAC (roles and bindings decide), or
    /// AlwaysAllow (every authenticated request may do anything: for tests
    /// only, never for a shared server).
    #[arg(long, value_enum, default_value = "RBAC")]
    pub authorization_mode: AuthorizationMode,
    #[command(flatten)]
    pub storage: StorageArgs,
    #[command(flatten)]
    pub audit: AuditArgs,
}

/// kube-apiserver's audit log flags (docs/operations.md, "Audit").
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AuditArgs {
    /// The audit policy: an audit.k8s.io/v1 Policy (YAML). Without it
    /// nothing is audited
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// Where audit events go, one JSON object a line; `-` is stdout
    #[arg(long)]
    pub audit_log_path: Option<String>,
    /// Megabytes the audit log grows to before it is rotated; 0 never rotates
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// Rotated audit logs to keep; 0 keeps all (--audit-log-maxage still applies)
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// Days to keep rotated audit logs (by the time in their names); 0 keeps them
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u64,
}

impl AuditArgs {
    /// The auditor the flags ask for: none without a policy file; a
    /// policy that cannot be read or parsed is an error naming the file.
    pub fn start(&self) -> anyhow::Result<Option<Arc<flotilla_apiserver::audit::Auditor>>> {
        let (policy_file, log_path) = match (&self.audit_policy_file, &self.audit_log_path) {
            (None, None) => return Ok(None),
            (None, Some(path)) => {
                tracing::warn!(
                    audit_log_path = %path,
                    "--audit-log-path without --audit-policy-file: nothing is audited"
                );
                return Ok(None);
            }
            (Some(policy), None) => {
                // Read anyway, so that a bad policy is still found now.
                flotilla_apiserver::audit::load_policy(policy)?;
                tracing::warn!(
                    audit_policy_file = %policy.display(),
                    "--audit-policy-file without --audit-log-path: nothing is audited (--audit-log-path - writes to stdout)"
                );
                return Ok(None);
            }
            (Some(policy), Some(path)) => (policy, path),
        };
        let auditor =
            flotilla_apiserver::audit::Auditor::start(&flotilla_apiserver::audit::Options {
                policy_file: policy_file.clone(),
                log_path: log_path.clone(),
                max_size_mb: self.audit_log_maxsize,
                max_backups: self.audit_log_maxbackup,
                max_age_days: self.audit_log_maxage,
            })?;
        info!(policy = %policy_file.display(), log = %log_path, "audit log on");
        Ok(Some(auditor))
    }
}

/// kube-apiserver's `--authorization-mode` values we serve.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    #[value(name = "RBAC")]
    Rbac,
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// SQLite in the data dir: one machine.
    Embedded,
    /// An etcd cluster: several control-plane replicas.
    Etcd,
}

/// Where the API server keeps its objects.
#[derive(clap::Args, Clone)]
pub struct StorageArgs {
    #[arg(long, value_enum, default_value = "embedded")]
    pub store: StoreKind,
    /// etcd client URLs, comma-separated (with --store etcd)
    #[arg(long, value_delimiter = ',', default_value = flotilla_store::DEFAULT_ETCD_ENDPOINT)]
    pub etcd_endpoints: Vec<String>,
    /// Every key is stored under this prefix in etcd
    #[arg(long, default_value = flotilla_store::DEFAULT_ETCD_PREFIX)]
    pub etcd_prefix: String,
    /// The CA that signed etcd's serving certificate (PEM)
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// A client certificate for etcd (PEM), with --etcd-keyfile
    #[arg(long)]
    pub etcd_certfile: Option<PathBuf>,
    #[arg(long)]
    pub etcd_keyfile: Option<PathBuf>,
    /// How long to wait at start-up for etcd to answer (it may be starting
    /// beside this replica); 0 gives up at the first refusal
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub etcd_wait: std::time::Duration,
}

impl Default for StorageArgs {
    fn default() -> Self {
        StorageArgs {
            store: StoreKind::Embedded,
            etcd_endpoints: vec![flotilla_store::DEFAULT_ETCD_ENDPOINT.into()],
            etcd_prefix: flotilla_store::DEFAULT_ETCD_PREFIX.into(),
            etcd_cafile: None,
            etcd_certfile: None,
            etcd_keyfile: None,
            etcd_wait: std::time::Duration::from_secs(30),
        }
    }
}

/// Opens the store the flags name.
async fn open_store(
    data_dir: &std::path::Path,
    serve: &ServeArgs,
) -> anyhow::Result<Arc<dyn Store>> {
    let s = &serve.storage;
    Ok(match s.store {
        StoreKind::Embedded => SqliteStore::open(
            data_dir,
            SqliteOptions {
                history_capacity: serve.watch_history,
                ..SqliteOptions::default()
            },
        )
        .map_err(|e| match e {
            flotilla_store::StoreError::Incompatible(why) => anyhow::anyhow!(why),
            e => anyhow::Error::new(e).context(format!(
                "cannot open the store in {} (is another flotilla using it? --data-dir chooses another)",
                data_dir.display()
            )),
        })?,
        StoreKind::Etcd if !cfg!(feature = "etcd") => anyhow::bail!(
            "--store etcd: this flotilla was built without the etcd store (cargo feature \
             `etcd`); build it with the default features to use etcd"
        ),
        StoreKind::Etcd => open_etcd(s, serve.watch_history).await?,
    })
}

/// Connects to etcd, waiting up to `--etcd-wait` for it to answer: a
/// replica started together with its etcd (a systemd unit, a pod) must
/// not lose the race to it.
async fn open_etcd(s: &StorageArgs, history_capacity: usize) -> anyhow::Result<Arc<dyn Store>> {
    let deadline = tokio::time::Instant::now() + s.etcd_wait;
    let mut waited = false;
    loop {
        let opened = EtcdStore::open(EtcdOptions {
            endpoints: s.etcd_endpoints.clone(),
            prefix: s.etcd_prefix.clone(),
            ca_file: s.etcd_cafile.clone(),
            cert_file: s.etcd_certfile.clone(),
            key_file: s.etcd_keyfile.clone(),
            history_capacity,
            ..EtcdOptions::default()
        })
        .await;
        match opened {
            Ok(store) => return Ok(store),
            Err(
                error @ (flotilla_store::StoreError::Unavailable(_)
                | flotilla_store::StoreError::Etcd(_)),
            ) if tokio::time::Instant::now() < deadline => {
                if !waited {
                    tracing::warn!(%error, endpoints = %s.etcd_endpoints.join(","), "waiting for etcd");
                    waited = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(e) => anyhow::bail!(
                "cannot reach etcd at {}: {e} (is it running? check --etcd-endpoints and the TLS flags; --etcd-wait waits longer)",
                s.etcd_endpoints.join(",")
            ),
        }
    }
}

/// An API server on its store, bound but not yet serving.
pub struct Prepared {
    pub api: Arc<ApiServer>,
    pub listener: tokio::net::TcpListener,
    pub addr: SocketAddr,
    pub tls: Arc<rustls::ServerConfig>,
    pub ca_pem: String,
    pub admin_token: String,
}

/// Opens the store in `data_dir`, creates the API server and binds
/// `listen` with a serving certificate for it.
pub async fn prepare(
    data_dir: &std::path::Path,
    serve: &ServeArgs,
    config: Config,
) -> anyhow::Result<Prepared> {
    let audit = serve.audit.start()?;
    std::fs::create_dir_all(data_dir).with_context(|| {
        format!(
            "cannot create the data dir {} (choose another with --data-dir)",
            data_dir.display()
        )
    })?;
    // A bad token file stops the start before anything opens.
    let static_tokens = match &serve.token_auth_file {
        Some(path) => {
            let tokens = flotilla_apiserver::token_file::StaticTokens::load(path)
                .context("--token-auth-file (fix the line, or leave the flag out)")?;
            info!(path = %path.display(), users = tokens.len(), "static tokens loaded");
            Some(Arc::new(tokens))
        }
        None => None,
    };
    let store = open_store(data_dir, serve).await?;
    let admin_token = auth::load_or_create_admin_token(&data_dir.join("admin-token"))?;
    let listener = tokio::net::TcpListener::bind(serve.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (in use? pass --listen 127.0.0.1:0 for a free port)",
                serve.listen
            )
        })?;
    let addr = listener.local_addr()?;
    let pki = Pki::load_or_create(
        &data_dir.join("pki"),
        &tls::serving_names(addr, &serve.tls_sans),
    )?;
    let authorization_mode = match serve.authorization_mode {
        AuthorizationMode::Rbac => flotilla_apiserver::authz::Mode::Rbac,
        AuthorizationMode::AlwaysAllow => {
            tracing::warn!(
                "--authorization-mode=AlwaysAllow: every authenticated request may do anything; never use this outside tests"
            );
            flotilla_apiserver::authz::Mode::AlwaysAllow
        }
    };
    let config = Config {
        admin_token: Some(admin_token.clone()),
        root_ca: Some(pki.ca_pem.clone()),
        token_key: Some(pki.token_key),
        ca_key: Some(pki.ca_key_pem.clone()),
        static_tokens,
        authorization_mode,
        metrics: with_audit_metrics(config.metrics.clone(), audit.clone()),
        audit,
        ..config
    };
    let api = ApiServer::new(store, config)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the API server: {}", e.message))?;
    Ok(Prepared {
        api,
        listener,
        addr,
        tls: pki.server_config()?,
        ca_pem: pki.ca_pem.clone(),
        admin_token,
    })
}

/// `/metrics` with the audit counters added, when auditing.
fn with_audit_metrics(
    metrics: Option<flotilla_apiserver::server::MetricsSource>,
    audit: Option<Arc<flotilla_apiserver::audit::Auditor>>,
) -> Option<flotilla_apiserver::server::MetricsSource> {
    let Some(audit) = audit else {
        return metrics;
    };
    Some(Arc::new(move || {
        let mut text = metrics.as_ref().map(|m| m()).unwrap_or_default();
        text.push_str(&audit.metrics());
        text
    }))
}

/// Checks the server answers through the kubeconfig it is about to
/// publish, then writes it; returns the server URL.
pub async fn publish_kubeconfig(
    addr: SocketAddr,
    context: &str,
    ca_pem: &str,
    token: &str,
    path: &std::path::Path,
) -> anyhow::Result<String> {
    let url = server_url(addr);
    let kubeconfig = kubeconfig::render(&url, context, ca_pem, token);
    wait_ready(&kubeconfig).await?;
    kubeconfig::write_atomically(path, &kubeconfig)?;
    Ok(url)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (data_dir, kubeconfig_path) = args.paths("apiserver");
    let p = prepare(&data_dir, &args.serve, Config::default()).await?;
    let server = tokio::spawn(
        p.api
            .clone()
            .serve(p.listener, Some(p.tls), shutdown_signal()),
    );
    announce_and_serve(
        "apiserver",
        server,
        &p.ca_pem,
        &p.admin_token,
        p.addr,
        &data_dir,
        &kubeconfig_path,
    )
    .await
}

/// Publishes the kubeconfig of a server that is now serving, tells the
/// user, and runs until it shuts down.
pub async fn announce_and_serve(
    what: &str,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    ca_pem: &str,
    token: &str,
    addr: SocketAddr,
    data_dir: &std::path::Path,
    kubeconfig_path: &std::path::Path,
) -> anyhow::Result<()> {
    let url = publish_kubeconfig(addr, "flotilla", ca_pem, token, kubeconfig_path).await?;
    info!(kubeconfig = %kubeconfig_path.display(), data_dir = %data_dir.display(), "ready");
    eprintln!(
        "flotilla {what} ready on {url}\n  export KUBECONFIG={}",
        kubeconfig_path.display()
    );
    server.await.context("the server task failed")??;
    info!("shut down cleanly");
    Ok(())
}
