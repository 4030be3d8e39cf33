//! `flotilla bench apiserver`: create throughput, list latency, watch
//! fan-out and peak RSS of `flotilla apiserver`.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

use super::harness::{ServerProcess, client_when_ready, peak_rss_kib, percentile};

#[derive(clap::Args)]
pub struct ApiserverArgs {
    /// Objects created (and then listed).
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Watchers for the fan-out measurement.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Events delivered to every watcher.
    #[arg(long, default_value_t = 200)]
    events: usize,
    #[command(flatten)]
    report: super::report::ReportArgs,
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn configmap(name: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"bench": "true"}},
        "data": {"key": "value", "payload": "x".repeat(256)},
    }))?)
}

pub(super) async fn run(args: ApiserverArgs) -> anyhow::Result<()> {
    let out = super::report::Reporter::from_args("apiserver", &args.report);
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let child = Command::new(std::env::current_exe()?)
        .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--write-kubeconfig")
        .arg(&kubeconfig)
        .env("FLOTILLA_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start flotilla apiserver")?;
    let server = ServerProcess(child);
    let client = client_when_ready(&kubeconfig, Duration::from_secs(30)).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["bench", "fanout"] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }

    out.line(format!(
        "flotilla bench apiserver: {} objects, {} writers, {} watchers x {} events",
        args.objects, args.concurrency, args.watchers, args.events
    ));
    out.line(super::report::machine_line());

    // Create throughput.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (api, next, total) = (api.clone(), next.clone(), args.objects);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return Ok::<_, anyhow::Error>(latencies);
                }
                let t = Instant::now();
                api.create(&PostParams::default(), &configmap(&format!("cm-{i:06}"))?)
                    .await?;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    out.line(format!(
        "create: {:.0} objects/s ({} in {:.2} s), latency p50 {} p99 {}",
        args.objects as f64 / elapsed.as_secs_f64(),
        args.objects,
        elapsed.as_secs_f64(),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99))
    ));
    let create = serde_json::json!({
        "objects_per_second": args.objects as f64 / elapsed.as_secs_f64(),
        "seconds": elapsed.as_secs_f64(),
        "latency_ms": {"p50": millis(percentile(&latencies, 0.5)),
                       "p99": millis(percentile(&latencies, 0.99))},
    });

    // List latency.
    let mut full = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        full.push(t.elapsed());
        // The namespace also holds what the server puts in every one
        // (kube-root-ca.crt).
        let listed = list
            .items
            .iter()
            .filter(|cm| {
                cm.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .count();
        if listed != args.objects {
            bail!(
                "listed {listed} of the bench's objects, expected {}",
                args.objects
            );
        }
    }
    full.sort();
    let mut paged = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(500);
            if let Some(c) = &token {
                lp = lp.continue_token(c);
            }
            let page = api.list(&lp).await?;
            token = page.metadata.continue_.filter(|c| !c.is_empty());
            if token.is_none() {
                break;
            }
        }
        paged.push(t.elapsed());
    }
    paged.sort();
    let selected = {
        let t = Instant::now();
        api.list(
            &ListParams::default()
                .labels("bench=true")
                .fields("metadata.name=cm-000001"),
        )
        .await?;
        t.elapsed()
    };
    out.line(format!(
        "list {} objects: full median {}, paginated (limit 500) median {}, field-selected {}",
        args.objects,
        ms(percentile(&full, 0.5)),
        ms(percentile(&paged, 0.5)),
        ms(selected)
    ));
    let list = serde_json::json!({
        "full_median_ms": millis(percentile(&full, 0.5)),
        "paginated_median_ms": millis(percentile(&paged, 0.5)),
        "field_selected_ms": millis(selected),
    });

    // Watch fan-out.
    let fanout: Api<ConfigMap> = Api::namespaced(client.clone(), "fanout");
    let rv = fanout
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let mut stream = fanout.watch(&WatchParams::default(), &rv).await?.boxed();
        let (tx, events) = (tx.clone(), args.events);
        watchers.push(tokio::spawn(async move {
            let mut n = 0;
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(cm) = event {
                    let i: usize = cm
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| n.strip_prefix("f-"))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    let _ = tx.send((i, Instant::now()));
                    n += 1;
                    if n == events {
                        return;
                    }
                }
            }
        }));
    }
    drop(tx);
    let mut sent = Vec::with_capacity(args.events);
    let started = Instant::now();
    for i in 0..args.events {
        sent.push(Instant::now());
        fanout
            .create(&PostParams::default(), &configmap(&format!("f-{i}"))?)
            .await?;
    }
    let mut delivery = Vec::new();
    while let Some((i, at)) = rx.recv().await {
        if let Some(s) = sent.get(i) {
            delivery.push(at.saturating_duration_since(*s));
        }
    }
    let total = started.elapsed();
    for w in watchers {
        w.await?;
    }
    delivery.sort();
    out.line(format!(
        "watch fan-out: {} deliveries in {:.2} s ({:.0}/s), create-to-delivery p50 {} p99 {}",
        delivery.len(),
        total.as_secs_f64(),
        delivery.len() as f64 / total.as_secs_f64(),
        ms(percentile(&delivery, 0.5)),
        ms(percentile(&delivery, 0.99))
    ));
    let watch = serde_json::json!({
        "deliveries": delivery.len(),
        "seconds": total.as_secs_f64(),
        "deliveries_per_second": delivery.len() as f64 / total.as_secs_f64(),
        "delivery_latency_ms": {"p50": millis(percentile(&delivery, 0.5)),
                                "p99": millis(percentile(&delivery, 0.99))},
    });
    let peak = peak_rss_kib(server.0.id());
    match peak {
        Some(kib) => out.line(format!("server peak RSS: {:.1} MiB", kib as f64 / 1024.0)),
        None => out.line("server peak RSS: unavailable (no /proc)"),
    }
    let report = out.document(
        "embedded",
        serde_json::json!({
            "objects": args.objects, "concurrency": args.concurrency,
            "watchers": args.watchers, "events": args.events,
        }),
        serde_json::json!({
            "create": create, "list": list, "watch": watch,
            "server_peak_rss_mib": peak.map(|kib| kib as f64 / 1024.0),
        }),
    );
    out.finish(&report)
}
