//! `flotilla bench fabric`: what the network fabric costs and how fast it
//! heals. A control plane and N netns members with gateways on one
//! underlay (needs root): the time from `join` to the first connected
//! tunnel, to a full mesh, and back to it after an underlay outage; the
//! gateways' memory; then `flotilla network benchmark` between the first
//! two members (throughput and latency through the tunnel against the
//! same between two nodes of one member).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_fabric::api::{CONNECTED, Gateway, OPERATOR_NAMESPACE};
use kube::Api;
use kube::api::ListParams;

use crate::bench::harness::{ServerProcess, client_when_ready};
use crate::bench::member::{cpu_seconds, rss_kib};
use crate::bench::report::Reporter;

#[derive(clap::Args)]
pub struct FabricArgs {
    /// Members, each with its gateways (one per node).
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Nodes (and so gateways) per member.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// How long the underlay stays cut.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    outage: Duration,
    /// Skip `flotilla network benchmark` between the first two members.
    #[arg(long)]
    no_throughput: bool,
    #[command(flatten)]
    report: crate::bench::report::ReportArgs,
}

const WAIT: Duration = Duration::from_secs(300);

struct Member {
    name: String,
    dir: PathBuf,
    client: kube::Client,
    process: ServerProcess,
}

pub(crate) fn spawn(args: &[String], log: &Path) -> anyhow::Result<ServerProcess> {
    let log = std::fs::File::create(log)?;
    let child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start flotilla")?;
    Ok(ServerProcess(child))
}

/// How many of each member's remote clusters its active gateway has
/// connected.
async fn connected(member: &Member) -> usize {
    let api: Api<Gateway> = Api::namespaced(member.client.clone(), OPERATOR_NAMESPACE);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|g| g.status.ha_status == "active")
        .map(|g| {
            g.status
                .connections
                .iter()
                .filter(|c| c.status == CONNECTED)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Waits until each of `members` has `want` connections up.
async fn wait_mesh(members: &[Member], want: usize) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let mut all = true;
        for m in members {
            if connected(m).await < want {
                all = false;
                break;
            }
        }
        if all {
            return Ok(started.elapsed());
        }
        if started.elapsed() > WAIT {
            bail!("the mesh did not form within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn join(hub: &Path, member: &Member) -> anyhow::Result<()> {
    let out = Command::new(std::env::current_exe()?)
        .args(["join", &member.name, "--kubeconfig"])
        .arg(hub)
        .arg("--cluster-kubeconfig")
        .arg(member.dir.join("kubeconfig"))
        .output()?;
    if !out.status.success() {
        bail!(
            "join {}: {}",
            member.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

pub async fn run(args: FabricArgs) -> anyhow::Result<()> {
    if args.members < 2 {
        bail!("--members must be at least 2: a fabric connects clusters");
    }
    let out = Reporter::from_args("fabric", &args.report);
    out.line(format!(
        "flotilla bench fabric: {} members, {} nodes (gateways) each, underlay outage {:?}",
        args.members, args.nodes, args.outage
    ));
    out.line(crate::bench::report::machine_line());
    let dir = tempfile::tempdir()?;
    let underlay = format!("flt-ul-b{:06x}", std::process::id() & 0xff_ffff);
    flotilla_fabric::underlay::own(&underlay, "")?;
    flotilla_fabric::underlay::create(&underlay, "100.64.0.0/16".parse()?)
        .await
        .context("cannot make the underlay (run as root)")?;
    let result = measure(&args, dir.path(), &underlay, &out).await;
    flotilla_fabric::underlay::delete(&underlay).await;
    let report = out.document(
        "embedded",
        serde_json::json!({
            "members": args.members, "nodes": args.nodes,
            "outage_seconds": args.outage.as_secs_f64(), "no_throughput": args.no_throughput,
        }),
        result?.into(),
    );
    out.finish(&report)
}

/// The figures, as the run's JSON has them.
/// The gateway processes of `members`, as their pid files name them.
fn gateway_pids(members: &[Member]) -> Vec<u32> {
    let mut pids = Vec::new();
    for m in members {
        let Ok(entries) = std::fs::read_dir(m.dir.join("gateways")) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "pid")
                && let Ok(pid) = std::fs::read_to_string(entry.path())
                && let Ok(pid) = pid.trim().parse::<u32>()
            {
                pids.push(pid);
            }
        }
    }
    pids
}

async fn measure(
    args: &FabricArgs,
    dir: &Path,
    underlay: &str,
    out: &Reporter,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut figures = serde_json::Map::new();
    let s = |v: &str| v.to_string();
    let hub_dir = dir.join("hub");
    let _hub = spawn(
        &[
            s("controlplane"),
            s("--listen"),
            s("127.0.0.1:0"),
            s("--data-dir"),
            hub_dir.display().to_string(),
        ],
        &dir.join("hub.log"),
    )?;
    let mut members = Vec::new();
    for i in 0..args.members {
        let name = format!("member{i}");
        let data = dir.join(&name);
        let process = spawn(
            &[
                s("member"),
                s("--name"),
                name.clone(),
                s("--runtime"),
                s("netns"),
                s("--underlay"),
                underlay.to_string(),
                s("--gateways"),
                args.nodes.to_string(),
                s("--nodes"),
                args.nodes.to_string(),
                s("--pod-cidr"),
                format!("10.{}.0.0/16", 100 + i),
                s("--service-cidr"),
                format!("10.{}.0.0/16", 60 + i),
                s("--listen"),
                s("127.0.0.1:0"),
                s("--data-dir"),
                data.display().to_string(),
            ],
            &dir.join(format!("{name}.log")),
        )?;
        members.push((name, data, process));
    }
    let hub_kubeconfig = hub_dir.join("kubeconfig");
    client_when_ready(&hub_kubeconfig, WAIT).await?;
    let mut ready = Vec::new();
    for (name, data, process) in members {
        let client = client_when_ready(&data.join("kubeconfig"), WAIT).await?;
        ready.push(Member {
            name,
            dir: data,
            client,
            process,
        });
    }
    let members = ready;

    // Two members: from the second join to a connected tunnel both ways.
    join(&hub_kubeconfig, &members[0])?;
    let joined = Instant::now();
    join(&hub_kubeconfig, &members[1])?;
    let join_took = joined.elapsed();
    let first = wait_mesh(&members[..2], 1).await?;
    out.line(format!(
        "join to the first connected tunnel: {:.2} s after the second `flotilla join` returned (the join itself took {:.2} s)",
        first.as_secs_f64(),
        join_took.as_secs_f64()
    ));
    figures.insert("join_seconds".into(), join_took.as_secs_f64().into());
    figures.insert("first_tunnel_seconds".into(), first.as_secs_f64().into());

    // The rest joined back to back: the full mesh.
    let started = Instant::now();
    for m in &members[2..] {
        join(&hub_kubeconfig, m)?;
    }
    let mesh = wait_mesh(&members, members.len() - 1).await?;
    let full = started.elapsed();
    out.line(format!(
        "full mesh of {} members ({} tunnels): {:.2} s from the first of the other {} joins ({:.2} s of which were the joins)",
        members.len(),
        members.len() * (members.len() - 1) / 2,
        full.as_secs_f64(),
        members.len().saturating_sub(2),
        (full - mesh).as_secs_f64()
    ));
    figures.insert("full_mesh_seconds".into(), full.as_secs_f64().into());

    // The underlay cut, then restored.
    flotilla_fabric::underlay::set_up(underlay, false).await?;
    tokio::time::sleep(args.outage).await;
    let down = {
        let mut n = 0;
        for m in &members {
            n += usize::from(connected(m).await < members.len() - 1);
        }
        n
    };
    flotilla_fabric::underlay::set_up(underlay, true).await?;
    let healed = wait_mesh(&members, members.len() - 1).await?;
    out.line(format!(
        "underlay cut for {:?} ({down} of {} members saw connections fail): the full mesh again {:.2} s after it was restored",
        args.outage,
        members.len(),
        healed.as_secs_f64()
    ));
    figures.insert("members_that_saw_the_outage".into(), down.into());
    figures.insert(
        "recovery_after_outage_seconds".into(),
        healed.as_secs_f64().into(),
    );

    // The gateways' memory.
    let rss: Vec<(u64, u64)> = gateway_pids(&members)
        .into_iter()
        .map(|pid| (rss_kib(pid, "VmRSS:"), rss_kib(pid, "VmHWM:")))
        .collect();
    if let (Some(max), Some(peak)) = (rss.iter().map(|r| r.0).max(), rss.iter().map(|r| r.1).max())
    {
        let mean = rss.iter().map(|r| r.0).sum::<u64>() / rss.len() as u64;
        out.line(format!(
            "gateway memory ({} gateways, active and standby): RSS mean {:.1} MiB, max {:.1} MiB, peak {:.1} MiB",
            rss.len(),
            mean as f64 / 1024.0,
            max as f64 / 1024.0,
            peak as f64 / 1024.0
        ));
        figures.insert(
            "gateway_rss_mib".into(),
            serde_json::json!({"mean": mean as f64 / 1024.0, "max": max as f64 / 1024.0,
                               "peak": peak as f64 / 1024.0}),
        );
    }

    if !args.no_throughput {
        // Its figures are its own output (for people; under --json on
        // stderr, so that stdout stays the JSON).
        out.line("\n$ flotilla network benchmark --from member0 --to member1");
        let stdout = if out.json() {
            Stdio::from(std::io::stderr())
        } else {
            Stdio::inherit()
        };
        let gateways = gateway_pids(&members);
        let cpu_before: f64 = gateways.iter().map(|p| cpu_seconds(*p)).sum();
        let summary = dir.join("network-benchmark.json");
        let status = Command::new(std::env::current_exe()?)
            .args([
                "network",
                "benchmark",
                "--from",
                "member0",
                "--to",
                "member1",
                "--summary",
            ])
            .arg(&summary)
            .arg("--kubeconfig")
            .arg(&hub_kubeconfig)
            .stdout(stdout)
            .status()?;
        if !status.success() {
            bail!("flotilla network benchmark failed");
        }
        let cpu = gateways.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - cpu_before;
        let mut measured: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&summary)?).context("the benchmark's figures")?;
        // The baseline does not pass the gateways; the tunnel's bytes do,
        // once through each side's.
        let bytes = measured["bytes_through_tunnel"].as_f64().unwrap_or(0.0);
        if bytes > 0.0 {
            let per_gb = cpu / (bytes / 1e9);
            out.line(format!(
                "gateways' CPU: {cpu:.2} s for {:.2} GB through the tunnel: {per_gb:.2} CPU-seconds per GB (both ends)",
                bytes / 1e9
            ));
            measured["gateway_cpu_seconds_per_gb"] = per_gb.into();
        }
        figures.insert("network_benchmark".into(), measured);
    }
    // Stopped as a user would, so that each removes its namespaces (and
    // its gateways, with them).
    for m in &members {
        let pid = m.process.0.id();
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let stopping = Instant::now();
    for mut m in members {
        while stopping.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = m.process.0.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(figures)
}
