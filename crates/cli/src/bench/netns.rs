//! `flotilla bench member --runtime netns`: what running pods cost. One
//! member whose pods are network namespaces running the stand-in
//! workload: each pod's time from created to Running (seen through a
//! watch), the member's memory per running pod above the pods' own
//! processes, and HTTP request latency and throughput to a Service's
//! ClusterIP against the pod IP directly, from a node's namespace.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bench::harness::percentile;
use crate::bench::member::{MemberArgs, rss_kib, start};
use crate::bench::report::Reporter;
use flotilla_host as host;

/// The processes whose network namespace is one of the member's pods'.
async fn pod_processes(prefix: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for ns in host::namespaces_with_prefix(prefix) {
        if ns.contains("-p") {
            pids.extend(host::pids_in(&ns).await.into_iter().map(|p| p as u32));
        }
    }
    pids
}

/// Each pod-start step's (label, sum seconds, count) in the member's
/// `/metrics`; empty where it has none.
async fn step_timings(client: &kube::Client) -> Vec<(&'static str, (f64, u64))> {
    use flotilla_member::runtime::netns::timings::{Step, read};
    let Ok(request) = http::Request::get("/metrics").body(Vec::new()) else {
        return Vec::new();
    };
    let Ok(text) = client.request_text(request).await else {
        return Vec::new();
    };
    [
        ("sandbox files", Step::SandboxFiles),
        ("network", Step::Network),
        ("container start", Step::ProcessStart),
    ]
    .into_iter()
    .filter_map(|(label, step)| Some((label, read(&text, step.metric())?)))
    .collect()
}

/// One HTTP/1.1 request on a fresh connection from inside `netns`.
async fn request(netns: &str, addr: SocketAddr) -> anyhow::Result<()> {
    let mut s = host::connect_in(netns, addr, Duration::from_secs(5)).await?;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        bail!("unexpected answer from {addr}");
    }
    Ok(())
}

/// Latency percentiles (ms) of `n` sequential requests, and requests per
/// second with `concurrency` clients for `duration`.
async fn http(netns: &str, addr: SocketAddr) -> (f64, f64, f64, usize) {
    let mut lat = Vec::new();
    let mut failed = 0;
    for _ in 0..500 {
        let t = Instant::now();
        match request(netns, addr).await {
            Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
            Err(_) => failed += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    let duration = Duration::from_secs(5);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let netns = netns.to_string();
        clients.push(tokio::spawn(async move {
            let mut n = 0u64;
            while started.elapsed() < duration {
                if request(&netns, addr).await.is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0;
    for c in clients {
        total += c.await.unwrap_or(0);
    }
    (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        total as f64 / started.elapsed().as_secs_f64(),
        failed,
    )
}

pub async fn run(args: &MemberArgs) -> anyhow::Result<()> {
    let out = Reporter::from_args("member", &args.report);
    let dir = tempfile::tempdir()?;
    out.line(format!(
        "flotilla bench member --runtime netns: {} nodes, {} pods (stand-in workload)",
        args.nodes, args.pods
    ));
    out.line(crate::bench::report::machine_line());
    let member = start(0, args, dir.path()).await?;
    let pid = member.process.0.id();
    let measured = measure(args, &member, dir.path(), &out).await;
    // Stopped as a user would, whatever happened, so that it removes its
    // pods and network.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let mut process = member.process;
    let stopped = Instant::now();
    while stopped.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(_)) = process.0.try_wait() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stop = stopped.elapsed();
    out.line(format!(
        "stopped, its {} pods and network removed, in {:.1} s",
        args.pods,
        stop.as_secs_f64()
    ));
    let mut figures = measured?;
    figures.insert("stop_seconds".into(), stop.as_secs_f64().into());
    let report = out.document("embedded", args.to_json(), figures.into());
    out.finish(&report)
}

/// The figures, as the run's JSON has them.
async fn measure(
    args: &MemberArgs,
    member: &crate::bench::member::Member,
    dir: &std::path::Path,
    out: &Reporter,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut figures = serde_json::Map::new();
    let pid = member.process.0.id();
    let prefix = std::fs::read_to_string(dir.join("member0").join("netns-prefix"))
        .context("the member did not say which namespaces are its own")?;
    let before_kib = rss_kib(pid, "VmRSS:");

    // Every pod's creation and Running, as a watcher sees them.
    let pods: Api<Pod> = Api::default_namespaced(member.client.clone());
    let took_by_pod = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, f64>::new()));
    let shared = took_by_pod.clone();
    let watch = tokio::spawn(async move {
        let mut created: HashMap<String, Instant> = HashMap::new();
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(item) = events.next().await {
            let Ok(p) = item else { continue };
            let name = p.metadata.name.clone().unwrap_or_default();
            let at = *created.entry(name.clone()).or_insert_with(Instant::now);
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let mut took = shared.lock().unwrap_or_else(|e| e.into_inner());
            if running && !took.contains_key(&name) {
                took.insert(name, at.elapsed().as_secs_f64());
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deployments: Api<Deployment> = Api::default_namespaced(member.client.clone());
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": args.pods,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example/web:1.0",
                          "ports": [{"containerPort": 8080}]}]},
            },
        },
    }))?;
    let steps_before = step_timings(&member.client).await;
    let applied = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let d = deployments.get("web").await?;
        let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if usize::try_from(ready).unwrap_or(0) >= args.pods {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ready} pods Ready after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all_ready = applied.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let mut took: Vec<f64> = took_by_pod
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .copied()
        .collect();
    took.sort_by(f64::total_cmp);
    out.line(format!(
        "all {} pods Ready {:.1} s after the Deployment was created; created to Running: p50 {:.0} ms, p99 {:.0} ms ({} pods seen)",
        args.pods,
        all_ready.as_secs_f64(),
        percentile(&took, 0.5) * 1000.0,
        percentile(&took, 0.99) * 1000.0,
        took.len()
    ));
    figures.insert("pods_ready_seconds".into(), all_ready.as_secs_f64().into());
    figures.insert(
        "created_to_running_ms".into(),
        serde_json::json!({"p50": percentile(&took, 0.5) * 1000.0,
                           "p99": percentile(&took, 0.99) * 1000.0}),
    );
    figures.insert("pods_seen".into(), took.len().into());
    // Each step's mean per pod over the burst, from the member's /metrics.
    let steps_after = step_timings(&member.client).await;
    let mut split = serde_json::Map::new();
    for ((label, before), (_, after)) in steps_before.iter().zip(&steps_after) {
        let n = after.1.saturating_sub(before.1);
        if n > 0 {
            split.insert(
                label.to_string(),
                ((after.0 - before.0) / n as f64 * 1000.0).into(),
            );
        }
    }
    if !split.is_empty() {
        out.line(format!(
            "per pod, the member's own steps (mean, ms, as its /metrics sums them; under a burst they include waiting for the CPU): {}",
            split
                .iter()
                .map(|(k, v)| format!("{k} {:.2}", v.as_f64().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        figures.insert("pod_start_step_ms".into(), split.into());
    }

    let after_kib = rss_kib(pid, "VmRSS:");
    let pod_pids = pod_processes(prefix.trim()).await;
    let pods_kib: u64 = pod_pids.iter().map(|p| rss_kib(*p, "VmRSS:")).sum();
    let per_pod_kib = after_kib.saturating_sub(before_kib) as f64 / args.pods.max(1) as f64;
    let standin_mib = pods_kib as f64 / 1024.0 / pod_pids.len().max(1) as f64;
    out.line(format!(
        "memory: the member {:.0} MiB before the pods, {:.0} MiB with them: {per_pod_kib:.0} KiB per running pod above its process; the stand-in processes {standin_mib:.1} MiB each",
        before_kib as f64 / 1024.0,
        after_kib as f64 / 1024.0,
    ));
    figures.insert(
        "member_rss_mib".into(),
        serde_json::json!({"before_pods": before_kib as f64 / 1024.0,
                           "with_pods": after_kib as f64 / 1024.0}),
    );
    figures.insert("member_rss_kib_per_pod".into(), per_pod_kib.into());
    figures.insert("standin_rss_mib_each".into(), standin_mib.into());

    // Requests to the Service's ClusterIP and to a pod's IP, from node 0.
    let services: Api<Service> = Api::default_namespaced(member.client.clone());
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    let created = services.create(&PostParams::default(), &service).await?;
    let cluster_ip: std::net::Ipv4Addr = created
        .spec
        .and_then(|s| s.cluster_ip)
        .and_then(|ip| ip.parse().ok())
        .context("the Service has no ClusterIP")?;
    let pod_ip: std::net::Ipv4Addr = Api::<Pod>::default_namespaced(member.client.clone())
        .list(&Default::default())
        .await?
        .items
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.as_deref()?.parse().ok())
        .context("no pod IP")?;
    let node = format!("{}-n0", prefix.trim());
    // The proxy's rules follow the Service within a moment.
    let svc = SocketAddr::from((cluster_ip, 80));
    let deadline = Instant::now() + Duration::from_secs(30);
    while request(&node, svc).await.is_err() {
        if Instant::now() > deadline {
            bail!("the Service never answered");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut http_figures = serde_json::Map::new();
    for (what, key, addr) in [
        ("pod IP", "pod_ip", SocketAddr::from((pod_ip, 8080))),
        ("ClusterIP", "cluster_ip", svc),
    ] {
        let (p50, p99, rps, failed) = http(&node, addr).await;
        out.line(format!(
            "HTTP to the {what} (a new connection each, from a node): p50 {p50:.2} ms, p99 {p99:.2} ms ({failed} of 500 failed); {rps:.0} requests/s with 8 clients"
        ));
        http_figures.insert(
            key.into(),
            serde_json::json!({"latency_ms": {"p50": p50, "p99": p99}, "failed": failed,
                               "requests_per_second": rps}),
        );
    }
    figures.insert("http".into(), http_figures.into());
    Ok(figures)
}
