//! `flotilla bench peering`: what peering costs. Two simulated members,
//! one consumer and one provider: the time from `flotilla peer` to a
//! Ready virtual node, the time from a pod's creation in the consumer to
//! Running as the consumer sees it (so: offloaded, run by the provider,
//! and its status reflected back), p50 and p99 over `--pods` pods, and the
//! consumer's memory per offloaded pod.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use std::collections::HashMap;

use crate::bench::fabric::spawn;
use crate::bench::harness::client_when_ready;
use crate::bench::member::rss_kib;

#[derive(clap::Args)]
pub struct PeeringArgs {
    /// Pods created at once in the offloaded namespace.
    #[arg(long, default_value_t = 200)]
    pods: usize,
    #[command(flatten)]
    report: crate::bench::report::ReportArgs,
}

const WAIT: Duration = Duration::from_secs(300);

pub async fn run(args: PeeringArgs) -> anyhow::Result<()> {
    if args.pods == 0 {
        bail!("--pods must be at least 1");
    }
    let reporter = crate::bench::report::Reporter::from_args("peering", &args.report);
    reporter.line(format!(
        "flotilla bench peering: 2 simulated members, {} offloaded pods",
        args.pods
    ));
    reporter.line(crate::bench::report::machine_line());
    let dir = tempfile::tempdir()?;
    let s = |v: &str| v.to_string();
    let mut procs = Vec::new();
    for name in ["consumer", "provider"] {
        let data = dir.path().join(name);
        procs.push(spawn(
            &[
                s("member"),
                s("--name"),
                s(name),
                s("--nodes"),
                s("3"),
                s("--node-pods"),
                s("500"),
                s("--pod-startup"),
                s("0s"),
                s("--listen"),
                s("127.0.0.1:0"),
                s("--data-dir"),
                data.display().to_string(),
            ],
            &dir.path().join(format!("{name}.log")),
        )?);
    }
    let consumer_kc = dir.path().join("consumer/kubeconfig");
    let provider_kc = dir.path().join("provider/kubeconfig");
    let consumer = client_when_ready(&consumer_kc, WAIT).await?;
    client_when_ready(&provider_kc, WAIT).await?;
    let pid = procs[0].0.id();
    let start = Instant::now();
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["peer", "--kubeconfig"])
        .arg(&consumer_kc)
        .arg("--remote-kubeconfig")
        .arg(&provider_kc)
        .output()
        .context("cannot run flotilla peer")?;
    if !out.status.success() {
        bail!(
            "flotilla peer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let peered = start.elapsed();
    reporter.line(format!(
        "`flotilla peer` to a Ready virtual node: {:.2} s",
        peered.as_secs_f64()
    ));

    let ns = "bench-offloaded";
    Api::<Namespace>::all(consumer.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let out = std::process::Command::new(std::env::current_exe()?)
        .args([
            "offload",
            "namespace",
            ns,
            "--pod-offloading-strategy",
            "Remote",
            "--kubeconfig",
        ])
        .arg(&consumer_kc)
        .output()?;
    if !out.status.success() {
        bail!(
            "flotilla offload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Settle, then the consumer's memory before the pods.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = rss_kib(pid, "VmRSS:");

    let pods: Api<Pod> = Api::namespaced(consumer.clone(), ns);
    let rv = pods
        .list(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut watch = pods.watch(&WatchParams::default(), &rv).await?.boxed();
    let mut created: HashMap<String, Instant> = HashMap::new();
    let began = Instant::now();
    for i in 0..args.pods {
        let name = format!("p{i:04}");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "example/app:1"}]}}))?;
        created.insert(name, Instant::now());
        pods.create(&PostParams::default(), &pod).await?;
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + WAIT;
    while latencies.len() < args.pods {
        let next = tokio::time::timeout_at(deadline.into(), watch.next()).await;
        let Ok(Some(event)) = next else {
            bail!(
                "only {} of {} pods Running within {:?}",
                latencies.len(),
                args.pods,
                WAIT
            );
        };
        if let Ok(WatchEvent::Modified(p)) = event {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("liqo-provider");
            if running && let Some(t) = created.remove(&p.name_any()) {
                latencies.push(t.elapsed());
            }
        }
    }
    let all = began.elapsed();
    latencies.sort();
    let pct = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    reporter.line(format!(
        "pod created in the consumer to Running there (offloaded, run, reflected): p50 {:.0} ms, p99 {:.0} ms, all {} in {:.2} s",
        pct(0.5).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        args.pods,
        all.as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = rss_kib(pid, "VmRSS:");
    let per_pod = (after.saturating_sub(before)) as f64 / args.pods as f64;
    reporter.line(format!(
        "consumer RSS: {} MiB before, {} MiB with {} offloaded pods: {per_pod:.1} KiB per pod",
        before / 1024,
        after / 1024,
        args.pods,
    ));
    let report = reporter.document(
        "embedded",
        serde_json::json!({"pods": args.pods}),
        serde_json::json!({
            "peer_ready_seconds": peered.as_secs_f64(),
            "pod_running_ms": {"p50": pct(0.5).as_secs_f64() * 1e3,
                               "p99": pct(0.99).as_secs_f64() * 1e3},
            "all_pods_running_seconds": all.as_secs_f64(),
            "consumer_rss_mib": {"before_pods": before as f64 / 1024.0,
                                 "with_pods": after as f64 / 1024.0},
            "consumer_rss_kib_per_pod": per_pod,
        }),
    );
    reporter.finish(&report)
}
