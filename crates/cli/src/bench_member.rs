//! `flotilla bench member`: how fast simulated members run pods and what
//! they cost: time until every pod is Ready, peak and settled RSS, and CPU
//! while idle, for one big member or many small ones side by side.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};

use crate::bench::{ServerProcess, client_when_ready, peak_rss_kib};
use crate::bench_report::Reporter;

#[derive(clap::Args)]
pub struct MemberArgs {
    /// Members started side by side.
    #[arg(long, default_value_t = 1)]
    pub(crate) members: usize,
    /// Nodes per member.
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per member (spread over --deployments Deployments).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) pods: usize,
    /// Deployments per member.
    #[arg(long, default_value_t = 10)]
    deployments: usize,
    /// The members' watch history (see `flotilla member --watch-history`).
    #[arg(long, default_value_t = crate::member::WATCH_HISTORY)]
    watch_history: usize,
    /// How long to sample idle CPU once everything is Ready.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    idle: Duration,
    /// sim, or netns: pods as network namespaces running the stand-in
    /// workload (needs root); adds per-pod start latency, memory per pod
    /// and Service latency and throughput (`bench_netns`).
    #[arg(long, value_enum, default_value = "sim")]
    runtime: crate::member::RuntimeKind,
    #[command(flatten)]
    pub(crate) report: crate::bench_report::ReportArgs,
}

impl MemberArgs {
    /// The arguments, for the run's JSON.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "members": self.members, "nodes": self.nodes, "pods": self.pods,
            "deployments": self.deployments, "watch_history": self.watch_history,
            "idle_seconds": self.idle.as_secs_f64(), "runtime": self.runtime.as_str(),
        })
    }
}

pub(crate) struct Member {
    pub(crate) process: ServerProcess,
    pub(crate) client: kube::Client,
}

pub(crate) fn rss_kib(pid: u32, field: &str) -> u64 {
    if field == "VmHWM:" {
        return peak_rss_kib(pid).unwrap_or(0);
    }
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat: 11 and 12 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}

pub(crate) async fn start(i: usize, args: &MemberArgs, dir: &Path) -> anyhow::Result<Member> {
    let data = dir.join(format!("member{i}"));
    let kubeconfig = data.join("kubeconfig");
    let child = Command::new(std::env::current_exe()?)
        .args([
            "member",
            "--name",
            &format!("member{i}"),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--nodes", &args.nodes.to_string(), "--pod-startup", "1s"])
        .args(["--watch-history", &args.watch_history.to_string()])
        .args(["--runtime", args.runtime.as_str()])
        .arg("--data-dir")
        .arg(&data)
        .env("FLOTILLA_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start flotilla member")?;
    let process = ServerProcess(child);
    let client = client_when_ready(&kubeconfig, Duration::from_secs(300)).await?;
    Ok(Member { process, client })
}

fn deployment(name: &str, replicas: usize) -> anyhow::Result<Deployment> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                          "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            },
        },
    }))?)
}

async fn ready_pods(client: &kube::Client) -> usize {
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.list(&Default::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter_map(|d| d.status.as_ref()?.ready_replicas)
                .map(|n| usize::try_from(n).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

pub async fn run(args: MemberArgs) -> anyhow::Result<()> {
    if args.runtime == crate::member::RuntimeKind::Netns {
        return crate::bench_netns::run(&args).await;
    }
    let out = Reporter::from_args("member", &args.report);
    let dir = tempfile::tempdir()?;
    out.line(format!(
        "flotilla bench member: {} member(s) x {} nodes x {} pods in {} Deployments",
        args.members, args.nodes, args.pods, args.deployments
    ));
    out.line(crate::bench_report::machine_line());
    let started = Instant::now();
    let mut members = Vec::new();
    for i in 0..args.members {
        members.push(start(i, &args, dir.path()).await?);
    }
    let up = started.elapsed();
    out.line(format!(
        "members up with nodes Ready: {:.1} s",
        up.as_secs_f64()
    ));

    let applied = Instant::now();
    let per = args.pods / args.deployments.max(1);
    for m in &members {
        let api: Api<Deployment> = Api::default_namespaced(m.client.clone());
        for d in 0..args.deployments {
            let replicas = if d + 1 == args.deployments {
                args.pods - per * d
            } else {
                per
            };
            api.create(
                &PostParams::default(),
                &deployment(&format!("app{d}"), replicas)?,
            )
            .await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let mut ready = 0;
        for m in &members {
            ready += ready_pods(&m.client).await;
        }
        if ready >= args.pods * args.members {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ready} pods Ready after 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = applied.elapsed();
    let total = args.pods * args.members;
    out.line(format!(
        "all {total} pods Ready: {:.1} s after the Deployments were created ({:.0} pods/s, incl. the 1 s startup delay)",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64()
    ));

    let pids: Vec<u32> = members.iter().map(|m| m.process.0.id()).collect();
    let cpu_before: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    tokio::time::sleep(args.idle).await;
    let cpu_after: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    let peak: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmHWM:")).collect();
    let now: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmRSS:")).collect();
    let mib = |k: u64| k as f64 / 1024.0;
    let (peak_max, settled_mean, settled_all) = (
        mib(peak.iter().copied().max().unwrap_or(0)),
        mib(now.iter().sum::<u64>() / now.len().max(1) as u64),
        mib(now.iter().sum()),
    );
    out.line(format!(
        "RSS per member: peak max {peak_max:.0} MiB, settled mean {settled_mean:.0} MiB; all members settled {settled_all:.0} MiB",
    ));
    let idle_cpu = (cpu_after - cpu_before) / args.idle.as_secs_f64().max(1e-9) * 100.0;
    out.line(format!(
        "idle CPU, all members: {idle_cpu:.1}% of one core (over {:?})",
        args.idle
    ));
    let report = out.document(
        "embedded",
        args.to_json(),
        serde_json::json!({
            "members_up_seconds": up.as_secs_f64(),
            "pods_ready": total,
            "pods_ready_seconds": took.as_secs_f64(),
            "pods_per_second": total as f64 / took.as_secs_f64(),
            "rss_mib": {"peak_max": peak_max, "settled_mean": settled_mean,
                        "settled_all_members": settled_all},
            "idle_cpu_percent_of_core": idle_cpu,
        }),
    );
    out.finish(&report)
}
