//! `flotilla bench propagation`: how fast and at what cost the control
//! plane distributes templates. Starts a control plane and M simulated
//! members, applies N templates under one policy, and measures the time
//! from each template's creation to its copies existing in the members,
//! scheduling throughput, the control plane's memory, the time to
//! converge after a kill -9, and, as the baseline nothing in between can
//! beat, the same N x M objects written straight to the members.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::bench::harness::{ServerProcess, client_when_ready, peak_rss_kib, print_machine};

#[derive(clap::Args)]
pub struct PropagationArgs {
    /// Templates applied.
    #[arg(long, default_value_t = 1000)]
    templates: usize,
    /// Member clusters.
    #[arg(long, default_value_t = 2)]
    members: usize,
    /// What the templates are: ConfigMaps, Deployments, or half of each.
    #[arg(long, value_enum, default_value_t = Kind::Configmap)]
    kind: Kind,
    /// Replicas of each Deployment.
    #[arg(long, default_value_t = 0)]
    replicas: i32,
    /// How the policy places them.
    #[arg(long, value_enum, default_value_t = Division::Duplicated)]
    division: Division,
    /// Concurrent creates, for the templates and the direct baseline alike.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Templates created per second; 0 creates them as fast as the
    /// concurrency allows. A low rate measures latency at idle load.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Then kill -9 the control plane and time its cold convergence.
    #[arg(long)]
    restart: bool,
    /// Measure the scheduler alone: N ResourceBindings created directly
    /// (of templates that do not exist, so no Work follows), held
    /// unschedulable, then timed from the moment a cluster becomes
    /// eligible until every one is scheduled.
    #[arg(long)]
    scheduler_only: bool,
    /// Print the results as one JSON object: the machine, the build, the
    /// store, the arguments and every figure. Save it (`--json >
    /// run.json`) to `--compare` later.
    #[arg(long)]
    json: bool,
    /// After the run, compare each figure with an earlier run's JSON
    /// (before, now, now/before, better or worse; on stderr under
    /// --json). The file is read before the run starts.
    #[arg(long, value_name = "FILE", value_parser = crate::bench::report::Baseline::parse)]
    compare: Option<crate::bench::report::Baseline>,
    /// The control plane's store; with etcd, the bench starts an etcd of
    /// its own (the `etcd` binary on the PATH, or $ETCD_BIN).
    #[arg(long, value_enum, default_value = "embedded")]
    store: crate::apiserver::StoreKind,
    /// The control plane's watch history (see `flotilla controlplane
    /// --watch-history`); its default when not given.
    #[arg(long)]
    watch_history: Option<usize>,
    /// The control plane's Work applies in flight per member (see
    /// `flotilla controlplane --concurrent-work-syncs`); its default when
    /// not given.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    concurrent_work_syncs: Option<u16>,
    /// one: every member in one `flotilla member --count M` process, so
    /// that the members cost little beside the hub; each: a process per
    /// member.
    #[arg(long, value_enum, default_value = "one")]
    member_processes: crate::bench::member::MemberProcesses,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum Kind {
    Configmap,
    Deployment,
    Mixed,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum Division {
    Duplicated,
    Divided,
}

const NAMESPACE: &str = "bench";

/// How long the joined fleet's idle CPU is sampled before the templates.
const JOINED_IDLE: Duration = Duration::from_secs(5);

/// Starts `flotilla ARGS` on `data`. `FLOTILLA_BENCH_HUB_WRAPPER` (e.g.
/// `heaptrack -o /tmp/hub`) runs the control plane under a profiler.
fn spawn(args: &[&str], data: &Path) -> anyhow::Result<ServerProcess> {
    let exe = std::env::current_exe()?;
    let wrapper = std::env::var("FLOTILLA_BENCH_HUB_WRAPPER").unwrap_or_default();
    let mut wrapper = wrapper.split_whitespace();
    let mut command = match wrapper.next() {
        Some(program) if args.first() == Some(&"controlplane") => {
            let mut c = Command::new(program);
            c.args(wrapper).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    command
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data);
    ServerProcess::start(command, "flotilla")
}

fn template(kind: &str, i: usize, replicas: i32) -> Value {
    let name = format!("t{i:06}");
    if kind == "ConfigMap" {
        return json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"index": i.to_string(), "payload": "x".repeat(256)}});
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}})
}

/// The kinds the bench writes: its templates, and the bindings of
/// `--scheduler-only`.
fn resource(kind: &str) -> ApiResource {
    let (group, version) = match kind {
        "ConfigMap" => ("", "v1"),
        "ResourceBinding" => ("work.karmada.io", "v1alpha2"),
        _ => ("apps", "v1"),
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn kind_of(args: &PropagationArgs, i: usize) -> &'static str {
    match args.kind {
        Kind::Configmap => "ConfigMap",
        Kind::Deployment => "Deployment",
        Kind::Mixed if i.is_multiple_of(2) => "Deployment",
        Kind::Mixed => "ConfigMap",
    }
}

async fn create_all(
    client: &kube::Client,
    objects: Vec<Value>,
    concurrency: usize,
    rate: f64,
    created: Option<&Mutex<HashMap<String, Instant>>>,
) -> anyhow::Result<()> {
    let start = tokio::time::Instant::now();
    let paced =
        futures::stream::iter(objects.into_iter().enumerate()).then(move |(i, obj)| async move {
            if rate > 0.0 {
                tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            }
            obj
        });
    let results: Vec<anyhow::Result<()>> = paced
        .map(|obj| async move {
            let kind = obj["kind"].as_str().unwrap_or_default().to_string();
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or(NAMESPACE)
                .to_string();
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &resource(&kind));
            let obj: DynamicObject = serde_json::from_value(obj)?;
            let at = Instant::now();
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("create {kind} {name}"))?;
            if let Some(created) = created {
                created.lock().insert(format!("{kind}/{name}"), at);
            }
            Ok(())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Records when each object of `kind` first appears in a member.
fn observe(
    member: kube::Client,
    kind: &'static str,
    seen: Arc<Mutex<HashMap<String, Vec<Instant>>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<DynamicObject> = Api::namespaced_with(member, NAMESPACE, &resource(kind));
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        let mut mine = std::collections::HashSet::new();
        while let Some(Ok(obj)) = events.next().await {
            let key = format!("{kind}/{}", obj.metadata.name.unwrap_or_default());
            if mine.insert(key.clone()) {
                seen.lock().entry(key).or_default().push(Instant::now());
            }
        }
    })
}

async fn metric_sum(hub: &kube::Client, name: &str) -> f64 {
    let Some(text) = crate::bench::queues::metrics_text(hub).await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The store revision of the server behind `client` (a list's
/// resourceVersion).
async fn revision(client: &kube::Client) -> u64 {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) => list
            .metadata
            .resource_version
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// Waits until the fleet is idle: fewer than [`IDLE_WRITES`] writes a
/// second across the hub and every member (leases and probes go on) for
/// two seconds running, so that a restart starts from a converged fleet
/// rather than one whose members are still creating what they were sent.
async fn wait_idle(clients: &[&kube::Client]) -> anyhow::Result<Duration> {
    const IDLE_WRITES: u64 = 20;
    const WINDOW: Duration = Duration::from_secs(2);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut last = Vec::new();
    for c in clients {
        last.push(revision(c).await);
    }
    loop {
        tokio::time::sleep(WINDOW).await;
        let mut writes = 0;
        for (c, before) in clients.iter().zip(last.iter_mut()) {
            let now = revision(c).await;
            writes += now.saturating_sub(*before);
            *before = now;
        }
        if writes < IDLE_WRITES * WINDOW.as_secs() {
            return Ok(started.elapsed());
        }
        if Instant::now() > deadline {
            bail!("the fleet did not become idle within 10 minutes");
        }
    }
}

pub async fn run(args: PropagationArgs) -> anyhow::Result<()> {
    if args.templates == 0 || args.members == 0 {
        bail!("--templates and --members must be at least 1");
    }
    let dir = tempfile::tempdir()?;
    let hub_data = dir.path().join("hub");
    if !args.json {
        println!(
            "flotilla bench propagation: {} {:?} templates x {} members, {:?}, concurrency {}",
            args.templates, args.kind, args.members, args.division, args.concurrency
        );
        print_machine();
    }
    if args.store == crate::apiserver::StoreKind::Etcd
        && flotilla_store::testing::etcd_binary().is_none()
    {
        bail!("--store etcd needs etcd: install Debian's etcd-server or set ETCD_BIN");
    }
    // Kept until the end: dropping it stops etcd.
    let etcd =
        (args.store == crate::apiserver::StoreKind::Etcd).then(flotilla_store::testing::single);
    let mut hub_args = vec!["controlplane".to_string()];
    if let Some(etcd) = &etcd {
        // One replica: no election, so that a restart leads at once.
        hub_args.extend(
            [
                "--store",
                "etcd",
                "--etcd-endpoints",
                &etcd.client_url,
                "--leader-elect=false",
            ]
            .map(String::from),
        );
    }
    if let Some(history) = args.watch_history {
        hub_args.extend(["--watch-history".to_string(), history.to_string()]);
    }
    if let Some(syncs) = args.concurrent_work_syncs {
        hub_args.extend(["--concurrent-work-syncs".to_string(), syncs.to_string()]);
    }
    let hub_args: Vec<&str> = hub_args.iter().map(String::as_str).collect();
    let mut hub_process = spawn(&hub_args, &hub_data)?;
    let hub = client_when_ready(&hub_data.join("kubeconfig"), Duration::from_secs(60)).await?;
    let members_started = Instant::now();
    let flags: Vec<String> = ["--nodes", "3", "--pod-startup", "1s"]
        .map(String::from)
        .to_vec();
    let fleet = crate::bench::member::start_members(
        args.member_processes,
        args.members,
        &flags,
        dir.path(),
        Duration::from_secs(120).max(Duration::from_millis(500) * args.members as u32),
    )
    .await?;
    let members_up_in = members_started.elapsed();
    let members = &fleet.members;
    let joins: Vec<anyhow::Result<()>> = futures::stream::iter(members)
        .map(|m| {
            let hub = &hub;
            async move {
                let credentials =
                    flotilla_federation::join::credentials_from_kubeconfig(&m.kubeconfig, None)?;
                let request = flotilla_federation::join::JoinRequest {
                    name: m.name.clone(),
                    credentials,
                    ..Default::default()
                };
                flotilla_federation::join::join(hub, &request)
                    .await
                    .with_context(|| format!("cannot join {}", m.name))?;
                Ok(())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    joins.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    // Every member Ready before the clock starts.
    let clusters: Api<flotilla_federation::api::Cluster> = Api::all(hub.clone());
    let ready_within =
        Duration::from_secs(120).max(Duration::from_millis(200) * args.members as u32);
    let deadline = Instant::now() + ready_within;
    loop {
        let list = clusters.list(&Default::default()).await?;
        let ready = list.items.iter().filter(|c| c.is_ready()).count();
        if ready == args.members {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of {} members became Ready within {ready_within:?}",
                args.members
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let joined_in = members_started.elapsed();
    // The fleet joined and idle: what the hub and the members cost before
    // any template, each apart.
    let cpu = |pids: &[u32]| -> f64 {
        pids.iter()
            .map(|p| crate::bench::member::cpu_seconds(*p))
            .sum()
    };
    let hub_pid = [hub_process.0.id()];
    let member_pids = fleet.pids();
    let (hub_before, members_before) = (cpu(&hub_pid), cpu(&member_pids));
    tokio::time::sleep(JOINED_IDLE).await;
    let idle_percent =
        |before: f64, after: f64| (after - before) / JOINED_IDLE.as_secs_f64() * 100.0;
    let hub_idle_cpu = idle_percent(hub_before, cpu(&hub_pid));
    let members_idle_cpu = idle_percent(members_before, cpu(&member_pids));
    let hub_rss_joined_kib = crate::bench::member::rss_kib(hub_process.0.id(), "VmRSS:");
    let members_rss_joined_kib = fleet.rss_kib("VmRSS:");
    if !args.json {
        println!(
            "{} members up in {:.1} s ({} member process(es)); joined and Ready {:.1} s after their start",
            args.members,
            members_up_in.as_secs_f64(),
            fleet.processes.len(),
            joined_in.as_secs_f64(),
        );
        println!(
            "joined, idle over {JOINED_IDLE:?}: hub RSS {:.0} MiB, CPU {hub_idle_cpu:.1}% of a core; members RSS {:.0} MiB ({:.2} MiB each), CPU {members_idle_cpu:.1}% of a core",
            hub_rss_joined_kib as f64 / 1024.0,
            members_rss_joined_kib as f64 / 1024.0,
            members_rss_joined_kib as f64 / 1024.0 / args.members as f64,
        );
    }
    flotilla_client::namespace::ensure(&hub, NAMESPACE, &[]).await?;
    let placement = match args.division {
        Division::Duplicated => json!({}),
        Division::Divided => json!({"replicaScheduling": {"replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted"}}),
    };
    if args.scheduler_only {
        let first = members.first().map(|m| m.name.clone()).unwrap_or_default();
        let result = scheduler_only(&args, &hub, placement, &first).await;
        drop(hub_process);
        drop(fleet);
        return result;
    }
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"},
                                       {"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "placement": placement}}))?;
    let pp_ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy.karmada.io",
        "v1alpha1",
        "PropagationPolicy",
    ));
    Api::<DynamicObject>::namespaced_with(hub.clone(), NAMESPACE, &pp_ar)
        .create(&PostParams::default(), &policy)
        .await?;

    // Expected copies per template.
    let copies = |kind: &str| -> usize {
        match (args.division, kind) {
            (Division::Divided, "Deployment") if args.replicas > 0 => {
                args.members.min(args.replicas as usize)
            }
            _ => args.members,
        }
    };
    let seen: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
    let mut observers = Vec::new();
    for m in members {
        for kind in ["ConfigMap", "Deployment"] {
            observers.push(observe(m.client.clone(), kind, seen.clone()));
        }
    }
    let created: Mutex<HashMap<String, Instant>> = Mutex::default();
    let objects: Vec<Value> = (0..args.templates)
        .map(|i| template(kind_of(&args, i), i, args.replicas))
        .collect();
    let expected: HashMap<String, usize> = objects
        .iter()
        .map(|o| {
            let k = o["kind"].as_str().unwrap_or_default();
            (
                format!("{k}/{}", o["metadata"]["name"].as_str().unwrap_or_default()),
                copies(k),
            )
        })
        .collect();
    // Where the machine's CPU goes while the copies travel: on a machine
    // whose cores are all busy, the time follows it.
    let client_pid = [std::process::id()];
    let spent = |pids: &[u32], since: f64| cpu(pids) - since;
    let cpu_before = (cpu(&hub_pid), cpu(&member_pids), cpu(&client_pid));
    let pipeline_watch = crate::bench::queues::PipelineWatch::start(&hub).await;
    let started = Instant::now();
    create_all(&hub, objects, args.concurrency, args.rate, Some(&created)).await?;
    let created_in = started.elapsed();
    // Ten minutes, or 2 ms a copy for runs past 300,000 copies (10,000
    // templates on 100 members take about 20 minutes on 2 cores).
    let all_copies: usize = expected.values().sum();
    let within = Duration::from_secs(600).max(Duration::from_millis(2) * all_copies as u32);
    let deadline = Instant::now() + within;
    loop {
        let done = {
            let seen = seen.lock();
            expected
                .iter()
                .all(|(k, n)| seen.get(k).is_some_and(|v| v.len() >= *n))
        };
        if done {
            break;
        }
        if Instant::now() > deadline {
            let seen = seen.lock();
            let arrived: usize = expected
                .iter()
                .map(|(k, n)| seen.get(k).map_or(0, |v| v.len().min(*n)))
                .sum();
            let complete = expected
                .iter()
                .filter(|(k, n)| seen.get(*k).is_some_and(|v| v.len() >= **n))
                .count();
            bail!(
                "not every copy arrived within {} s: {arrived} of {all_copies} copies, {complete} of {} templates in every member",
                within.as_secs(),
                expected.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let distributed_in = started.elapsed();
    let crate::bench::queues::Watched {
        queues,
        store_writer,
    } = pipeline_watch.finish(&hub).await;
    let distribution_cpu = (
        spent(&hub_pid, cpu_before.0),
        spent(&member_pids, cpu_before.1),
        spent(&client_pid, cpu_before.2),
    );
    let mut latencies: Vec<f64> = {
        let seen = seen.lock();
        let created = created.lock();
        expected
            .keys()
            .filter_map(|k| {
                let last = seen.get(k)?.iter().max()?;
                Some(
                    last.saturating_duration_since(*created.get(k)?)
                        .as_secs_f64()
                        * 1000.0,
                )
            })
            .collect()
    };
    latencies.sort_by(f64::total_cmp);
    let scheduled = metric_sum(
        &hub,
        "karmada_scheduler_e2e_scheduling_duration_seconds_count",
    )
    .await;
    let scheduling_busy = metric_sum(
        &hub,
        "karmada_scheduler_e2e_scheduling_duration_seconds_sum",
    )
    .await;
    let mut stages = serde_json::Map::new();
    for stage in [
        "resource_match_policy_duration_seconds",
        "karmada_scheduler_e2e_scheduling_duration_seconds",
        "binding_sync_work_duration_seconds",
        "work_sync_workload_duration_seconds",
    ] {
        let count = metric_sum(&hub, &format!("{stage}_count")).await;
        let sum = metric_sum(&hub, &format!("{stage}_sum")).await;
        let mean_ms = if count > 0.0 {
            sum / count * 1000.0
        } else {
            0.0
        };
        stages.insert(stage.into(), json!({"count": count, "mean_ms": mean_ms}));
    }
    let peak_kib = peak_rss_kib(hub_process.0.id()).unwrap_or(0);
    let members_rss_kib = fleet.rss_kib("VmRSS:");
    let members_peak_kib = fleet.rss_kib("VmHWM:");
    let total_copies: usize = expected.values().sum();
    for o in &observers {
        o.abort();
    }

    // The restart first, once the fleet is idle: not while the members
    // still run the baseline's objects, nor while they still create what
    // Flotilla sent them (ReplicaSets of the Deployments; their statuses
    // flowing back). Either would be measured as the restart's cost.
    let mut restart = None;
    if args.restart {
        let works = total_copies as f64;
        let bindings = args.templates as f64;
        let mut clients = vec![&hub];
        clients.extend(members.iter().map(|m| &m.client));
        let settled = wait_idle(&clients).await?;
        if !args.json {
            println!(
                "fleet idle {:.1} s after the last copy arrived; now kill -9",
                settled.as_secs_f64()
            );
        }
        drop(hub_process);
        let _ = std::fs::remove_file(hub_data.join("kubeconfig"));
        let restarted = Instant::now();
        hub_process = spawn(&hub_args, &hub_data)?;
        let hub = client_when_ready(&hub_data.join("kubeconfig"), Duration::from_secs(60)).await?;
        let serving = restarted.elapsed();
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let synced = metric_sum(&hub, "work_sync_workload_duration_seconds_count").await;
            let bound = metric_sum(&hub, "binding_sync_work_duration_seconds_count").await;
            if synced >= works && bound >= bindings {
                break;
            }
            if Instant::now() > deadline {
                bail!("the control plane did not converge within 10 minutes of its restart");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        restart = Some((
            restarted.elapsed(),
            peak_rss_kib(hub_process.0.id()).unwrap_or(0),
            serving,
        ));
    }

    // The baseline: the same objects straight to the members.
    for m in members {
        flotilla_client::namespace::ensure(&m.client, "direct", &[]).await?;
    }
    let direct_cpu_before = (cpu(&member_pids), cpu(&client_pid));
    let direct_started = Instant::now();
    let mut direct_objects = Vec::new();
    for (m, client) in members.iter().map(|m| &m.client).enumerate() {
        for (i, obj) in
            (0..args.templates).map(|i| (i, template(kind_of(&args, i), i, args.replicas)))
        {
            let mut obj = obj;
            obj["metadata"]["namespace"] = json!("direct");
            if m < copies(kind_of(&args, i)) {
                direct_objects.push((client.clone(), obj));
            }
        }
    }
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(direct_objects)
        .map(|(client, obj)| async move { create_all(&client, vec![obj], 1, 0.0, None).await })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let direct_in = direct_started.elapsed();
    let direct_cpu = (
        spent(&member_pids, direct_cpu_before.0),
        spent(&client_pid, direct_cpu_before.1),
    );

    let p = |q: f64| crate::bench::harness::percentile(&latencies, q);
    let hub_cpu_ms_per_copy = distribution_cpu.0 * 1000.0 / total_copies.max(1) as f64;
    let ratio = distributed_in.as_secs_f64() / direct_in.as_secs_f64().max(1e-9);
    let out = reporter(&args);
    let result = json!({
        "templates": args.templates, "members": args.members, "kind": format!("{:?}", args.kind),
        "division": format!("{:?}", args.division), "replicas": args.replicas,
        "concurrency": args.concurrency, "rate": args.rate, "copies": total_copies,
        "create_seconds": created_in.as_secs_f64(),
        "distribution_seconds": distributed_in.as_secs_f64(),
        "latency_ms": {"p50": p(0.5), "p90": p(0.9), "p99": p(0.99), "max": p(1.0)},
        "templates_per_second": args.templates as f64 / distributed_in.as_secs_f64(),
        "scheduled_bindings": scheduled,
        "bindings_per_second_of_scheduler_time": if scheduling_busy > 0.0 { scheduled / scheduling_busy } else { 0.0 },
        "controlplane_peak_rss_mib": peak_kib as f64 / 1024.0,
        "controlplane_rss_joined_mib": hub_rss_joined_kib as f64 / 1024.0,
        "controlplane_idle_cpu_percent": hub_idle_cpu,
        "members_rss_joined_mib": members_rss_joined_kib as f64 / 1024.0,
        "members_idle_cpu_percent": members_idle_cpu,
        "member_process_count": fleet.processes.len(),
        "members_start_seconds": members_up_in.as_secs_f64(),
        "members_joined_seconds": joined_in.as_secs_f64(),
        "members_rss_mib": members_rss_kib as f64 / 1024.0,
        "members_peak_rss_mib": members_peak_kib as f64 / 1024.0,
        "stages": stages,
        // client-go's work queue figures of each stage over the distribution.
        "queues": queues,
        // The hub's store writer over the distribution (embedded store).
        "store_writer": store_writer,
        "direct_seconds": direct_in.as_secs_f64(),
        // CPU-seconds from the first create to the last copy's arrival,
        // and over the baseline (which the control plane takes no part in).
        "cpu_seconds": {
            "distribution": {"controlplane": distribution_cpu.0, "members": distribution_cpu.1, "client": distribution_cpu.2},
            "direct": {"members": direct_cpu.0, "client": direct_cpu.1},
        },
        "controlplane_cpu_ms_per_copy": hub_cpu_ms_per_copy,
        "flotilla_over_direct": ratio,
        "restart_serving_seconds": restart.map(|(_, _, s)| s.as_secs_f64()),
        "restart_converge_seconds": restart.map(|(d, _, _)| d.as_secs_f64()),
        "restart_peak_rss_mib": restart.map(|(_, k, _)| k as f64 / 1024.0),
    });
    let result = out.document(store_name(&args), args_json(&args), result);
    if args.json {
        let finished = out.finish(&result);
        drop(hub_process);
        drop(fleet);
        return finished;
    }
    println!(
        "templates created in {:.2} s; every copy ({total_copies}) in its member after {:.2} s ({:.0} templates/s)",
        created_in.as_secs_f64(),
        distributed_in.as_secs_f64(),
        args.templates as f64 / distributed_in.as_secs_f64()
    );
    println!(
        "distribution latency (create -> present in every member it is placed in): p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0)
    );
    println!(
        "CPU while the copies travelled: control plane {:.1} s ({:.2} ms a copy), members {:.1} s, this client {:.1} s; over the baseline: members {:.1} s, this client {:.1} s",
        distribution_cpu.0,
        hub_cpu_ms_per_copy,
        distribution_cpu.1,
        distribution_cpu.2,
        direct_cpu.0,
        direct_cpu.1,
    );
    println!(
        "scheduler: {scheduled} decisions, {:.0} bindings/s of scheduler time",
        result["bindings_per_second_of_scheduler_time"]
            .as_f64()
            .unwrap_or(0.0)
    );
    println!(
        "control plane peak RSS: {:.1} MiB; the members' {} process(es) apart: {:.0} MiB RSS after the copies arrived ({:.1} MiB per member), peak {:.0} MiB",
        peak_kib as f64 / 1024.0,
        fleet.processes.len(),
        members_rss_kib as f64 / 1024.0,
        members_rss_kib as f64 / 1024.0 / args.members as f64,
        members_peak_kib as f64 / 1024.0
    );
    for (stage, v) in &result["stages"].as_object().cloned().unwrap_or_default() {
        println!(
            "  {stage}: {} runs, mean {:.2} ms",
            v["count"],
            v["mean_ms"].as_f64().unwrap_or(0.0)
        );
    }
    for (queue, v) in &result["queues"].as_object().cloned().unwrap_or_default() {
        println!(
            "  queue {queue}: {} adds, waited {:.2} ms and worked {:.2} ms on average, {} deep at most",
            v["adds"],
            v["mean_wait_ms"].as_f64().unwrap_or(0.0),
            v["mean_work_ms"].as_f64().unwrap_or(0.0),
            v["peak_depth"]
        );
    }
    let w = &result["store_writer"];
    if w.is_object() {
        println!(
            "  store writer: {} writes in {} commits ({:.1} a commit, {:.0}/s) and {} syncs, busy {:.0}% of the time; the log syncing {:.0}%, the publisher busy {:.0}%",
            w["writes"],
            w["commits"],
            w["writes_per_commit"].as_f64().unwrap_or(0.0),
            w["writes_per_second"].as_f64().unwrap_or(0.0),
            w["syncs"],
            w["busy_percent"].as_f64().unwrap_or(0.0),
            w["sync_percent"].as_f64().unwrap_or(0.0),
            w["publisher_busy_percent"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "direct to the members, one client, concurrency {}: {:.2} s; Flotilla/direct = {ratio:.2}",
        args.concurrency,
        direct_in.as_secs_f64()
    );
    if let Some((d, k, serving)) = restart {
        println!(
            "after kill -9: serving again after {:.2} s; every binding and Work re-synced {:.2} s after the restart (peak RSS {:.1} MiB)",
            serving.as_secs_f64(),
            d.as_secs_f64(),
            k as f64 / 1024.0
        );
    }
    out.finish(&result)?;
    // The hub first, so that it does not log its members going away.
    drop(hub_process);
    drop(fleet);
    Ok(())
}

/// The run's JSON and `--compare`; the lines for people are printed
/// only without --json.
fn reporter(args: &PropagationArgs) -> crate::bench::report::Reporter {
    crate::bench::report::Reporter::new("propagation", args.json, args.compare.clone())
}

fn store_name(args: &PropagationArgs) -> &'static str {
    match args.store {
        crate::apiserver::StoreKind::Embedded => "embedded",
        crate::apiserver::StoreKind::Etcd => "etcd",
    }
}

/// The arguments, for the run's JSON.
fn args_json(args: &PropagationArgs) -> Value {
    json!({
        "templates": args.templates, "members": args.members,
        "kind": format!("{:?}", args.kind).to_lowercase(),
        "division": format!("{:?}", args.division).to_lowercase(),
        "replicas": args.replicas, "concurrency": args.concurrency, "rate": args.rate,
        "restart": args.restart, "scheduler_only": args.scheduler_only,
        "store": store_name(args), "watch_history": args.watch_history,
        "concurrent_work_syncs": args.concurrent_work_syncs,
        "member_processes": format!("{:?}", args.member_processes).to_lowercase(),
    })
}

/// `--scheduler-only`: the scheduler's throughput, apart from how fast
/// bindings arrive. N bindings are created for a cluster label no member
/// has yet (each is found unschedulable); then the first member gets the label,
/// and the clock runs from that change until the scheduler has written
/// every binding's placement and Scheduled condition.
async fn scheduler_only(
    args: &PropagationArgs,
    hub: &kube::Client,
    mut placement: Value,
    first_member: &str,
) -> anyhow::Result<()> {
    const GATE: &str = "bench.flotilla.io/schedule";
    placement["clusterAffinity"] = json!({"labelSelector": {"matchLabels": {GATE: "now"}}});
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), NAMESPACE, &resource("ResourceBinding"));
    // When each binding was first seen unschedulable, then scheduled.
    let held: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let scheduled: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let observer = {
        let (held, scheduled) = (held.clone(), scheduled.clone());
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            while let Some(Ok(b)) = events.next().await {
                let condition = b.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Scheduled")
                    .map(|c| c["status"] == "True");
                let placed = b.data["spec"]["clusters"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty());
                let name = b.metadata.name.unwrap_or_default();
                match condition {
                    Some(true) if placed => {
                        scheduled.lock().entry(name).or_insert_with(Instant::now);
                    }
                    Some(false) => {
                        held.lock().entry(name).or_insert_with(Instant::now);
                    }
                    _ => {}
                }
            }
        })
    };
    let replicas = if args.division == Division::Divided {
        args.replicas.max(1)
    } else {
        args.replicas
    };
    let bindings: Vec<Value> = (0..args.templates)
        .map(|i| {
            json!({
                "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                "metadata": {"name": format!("b{i:06}"), "namespace": NAMESPACE},
                "spec": {
                    "resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": NAMESPACE,
                                 "name": format!("absent{i:06}"), "uid": format!("bench-{i}")},
                    "replicas": replicas,
                    "placement": placement,
                }
            })
        })
        .collect();
    create_all(hub, bindings, args.concurrency, 0.0, None).await?;
    all_seen(&held, args.templates, "found unschedulable").await?;
    let clusters: Api<flotilla_federation::api::Cluster> = Api::all(hub.clone());
    let label = json!({"metadata": {"labels": {GATE: "now"}}});
    // One cluster, one change: every binding is decided once.
    let started = Instant::now();
    clusters
        .patch(
            first_member,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await?;
    all_seen(&scheduled, args.templates, "scheduled").await?;
    observer.abort();
    let last = scheduled.lock().values().max().copied().unwrap_or(started);
    let all_in = last.saturating_duration_since(started);
    let per_second = args.templates as f64 / all_in.as_secs_f64().max(1e-9);
    let result = json!({
        "bindings": args.templates, "members": args.members,
        "division": format!("{:?}", args.division),
        "scheduled_seconds": all_in.as_secs_f64(),
        "bindings_per_second": per_second,
    });
    let out = reporter(args);
    let result = out.document(store_name(args), args_json(args), result);
    if !args.json {
        println!(
            "{} bindings placed {:.2} s after their clusters became eligible: {per_second:.0} bindings/s",
            args.templates,
            all_in.as_secs_f64()
        );
    }
    out.finish(&result)
}

/// Waits (10 minutes at most) until `seen` holds `n` bindings.
async fn all_seen(
    seen: &Mutex<HashMap<String, Instant>>,
    n: usize,
    what: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while seen.lock().len() < n {
        if Instant::now() > deadline {
            bail!("not every binding was {what} within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
