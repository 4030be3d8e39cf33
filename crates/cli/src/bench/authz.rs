//! `flotilla bench authz`: what authorization adds to a read and a write,
//! and how it grows with the number of bindings. One API server in this
//! process over plain HTTP on loopback (so TLS does not blur the figure),
//! the same user and requests under `AlwaysAllow` (no authorization) and
//! under RBAC with that user's one RoleBinding among 0 to N others.

use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_apiserver::auth;
use flotilla_apiserver::authz::Mode;
use flotilla_apiserver::user::User;
use flotilla_apiserver::{ApiServer, Config};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(clap::Args)]
pub struct AuthzArgs {
    /// Requests per measurement.
    #[arg(long, default_value_t = 2_000)]
    requests: usize,
    /// Binding counts to measure at (other users' RoleBindings), besides none.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    bindings: Vec<usize>,
    #[command(flatten)]
    report: crate::bench::report::ReportArgs,
}

const NAMESPACE: &str = "bench";

/// One measurement: p50 and p99 of a read and a write.
#[derive(serde::Serialize)]
struct Row {
    mode: &'static str,
    bindings: usize,
    read_p50_us: f64,
    read_p99_us: f64,
    write_p50_us: f64,
    write_p99_us: f64,
    /// The authorizer alone: one decision for the read, in nanoseconds.
    decision_ns: f64,
}

pub async fn run(args: AuthzArgs) -> anyhow::Result<()> {
    let out = crate::bench::report::Reporter::from_args("authz", &args.report);
    out.line(crate::bench::report::machine_line());
    let mut rows = Vec::new();
    rows.push(
        measure(Mode::AlwaysAllow, &[0], args.requests)
            .await?
            .remove(0),
    );
    let mut counts = vec![0];
    counts.extend(args.bindings.iter().copied());
    rows.extend(measure(Mode::Rbac, &counts, args.requests).await?);
    out.line(format!(
        "{:<12} {:>9} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "mode", "bindings", "read p50", "read p99", "write p50", "write p99", "decision"
    ));
    for r in &rows {
        out.line(format!(
            "{:<12} {:>9} {:>9.0} µs {:>9.0} µs {:>9.0} µs {:>9.0} µs {:>7.0} ns",
            r.mode,
            r.bindings,
            r.read_p50_us,
            r.read_p99_us,
            r.write_p50_us,
            r.write_p99_us,
            r.decision_ns
        ));
    }
    let report = out.document(
        "embedded",
        json!({"requests": args.requests, "bindings": args.bindings}),
        json!({"authz": rows}),
    );
    out.finish(&report)
}

/// Starts a server in `mode` and measures at each binding count, adding
/// other users' bindings between measurements.
async fn measure(mode: Mode, counts: &[usize], requests: usize) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let store = flotilla_store::SqliteStore::open(dir.path(), Default::default())
        .context("cannot open a store for the benchmark")?;
    let admin_token = auth::random_token_part(48);
    let (user_token, user) = auth::component_identity("bench-user");
    let config = Config {
        admin_token: Some(admin_token.clone()),
        component_identities: vec![(user_token.clone(), user.clone())],
        authorization_mode: mode,
        ..Config::default()
    };
    let api = ApiServer::new(store, config)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the API server: {}", e.message))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(api.clone().serve(listener, None, async move {
        let _ = stopped.await;
    }));
    let admin = client(addr, &admin_token)?;
    let as_user = client(addr, &user_token)?;
    set_up(&admin, &user).await?;
    let mut rows = Vec::new();
    let mut made = 0;
    for &count in counts {
        add_bindings(&admin, made, count).await?;
        made = made.max(count);
        let (read, write) = latencies(&as_user, requests).await?;
        let decision_ns = decision(&api, &user);
        rows.push(Row {
            mode: match mode {
                Mode::AlwaysAllow => "AlwaysAllow",
                Mode::Rbac => "RBAC",
            },
            bindings: count,
            read_p50_us: micros(&read, 0.50),
            read_p99_us: micros(&read, 0.99),
            write_p50_us: micros(&write, 0.50),
            write_p99_us: micros(&write, 0.99),
            decision_ns,
        });
    }
    let _ = stop.send(());
    let _ = server.await;
    Ok(rows)
}

fn client(addr: std::net::SocketAddr, token: &str) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::new(format!("http://{addr}").parse()?);
    config.auth_info.token = Some(token.to_string().into());
    config.default_namespace = NAMESPACE.into();
    Ok(kube::Client::try_from(config)?)
}

/// The namespace, the object read and written, and the user's own binding.
async fn set_up(admin: &kube::Client, user: &User) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "target"}, "data": {"k": "v"}}))?;
    Api::<ConfigMap>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &cm)
        .await?;
    let binding = role_binding("bench-user-edit", &user.name)?;
    Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

fn role_binding(name: &str, user: &str) -> anyhow::Result<RoleBinding> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))?)
}

/// Other users' bindings, `from` to `to` (16 at a time).
async fn add_bindings(admin: &kube::Client, from: usize, to: usize) -> anyhow::Result<()> {
    let api = Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE);
    let mut pending = futures::stream::iter(from..to)
        .map(|i| {
            let api = api.clone();
            async move {
                let binding = role_binding(&format!("other-{i}"), &format!("user-{i}"))?;
                api.create(&PostParams::default(), &binding).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16);
    while let Some(result) = pending.next().await {
        result?;
    }
    Ok(())
}

/// `requests` sequential reads (GET of one ConfigMap) and writes (a merge
/// patch of its data), each timed.
async fn latencies(
    as_user: &kube::Client,
    requests: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let api = Api::<ConfigMap>::namespaced(as_user.clone(), NAMESPACE);
    // Warm the connection and the server's caches.
    for _ in 0..50 {
        api.get("target").await?;
    }
    let mut reads = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        api.get("target").await?;
        reads.push(started.elapsed());
    }
    let mut writes = Vec::with_capacity(requests);
    for i in 0..requests {
        let patch = json!({"data": {"k": i.to_string()}});
        let started = Instant::now();
        api.patch("target", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        writes.push(started.elapsed());
    }
    reads.sort();
    writes.sort();
    Ok((reads, writes))
}

/// The mean time of one authorization decision for the user's read,
/// without the HTTP around it.
fn decision(api: &ApiServer, user: &User) -> f64 {
    const DECISIONS: u32 = 100_000;
    let read = flotilla_apiserver::authz::Attributes {
        verb: flotilla_apiserver::authz::Verb::Get,
        group: "",
        resource: "configmaps",
        subresource: None,
        namespace: Some(NAMESPACE),
        path_name: Some("target"),
        field_selector: None,
        body: &[],
    };
    let started = Instant::now();
    for _ in 0..DECISIONS {
        std::hint::black_box(api.authorize(user, &read));
    }
    started.elapsed().as_nanos() as f64 / f64::from(DECISIONS)
}

fn micros(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}
