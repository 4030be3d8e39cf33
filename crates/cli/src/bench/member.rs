//! `flotilla bench member`: how fast simulated members run pods and what
//! they cost: time until every pod is Ready, peak and settled RSS, and CPU
//! while idle, for one big member or many small ones side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};

use crate::bench::harness::{ServerProcess, client_when_ready, peak_rss_kib};
use crate::bench::report::Reporter;

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
    /// one: every member in one `flotilla member --count M` process;
    /// each: a process per member, as before.
    #[arg(long, value_enum, default_value = "one")]
    member_processes: MemberProcesses,
    #[command(flatten)]
    pub(crate) report: crate::bench::report::ReportArgs,
}

/// How a bench runs its simulated members.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberProcesses {
    /// One `flotilla member --count M` process serves them all.
    One,
    /// One `flotilla member` process each.
    Each,
}

/// A member a bench started, ready to use.
pub(crate) struct BenchMember {
    pub(crate) name: String,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) client: kube::Client,
}

/// The members a bench started and the processes they run in (killed
/// when dropped).
pub(crate) struct BenchMembers {
    pub(crate) processes: Vec<ServerProcess>,
    pub(crate) members: Vec<BenchMember>,
}

impl BenchMembers {
    /// The members' processes' ids.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|p| p.0.id()).collect()
    }

    /// The members' processes' resident memory together (KiB): `field`
    /// is `VmRSS:` for now, `VmHWM:` for each process's peak.
    pub(crate) fn rss_kib(&self, field: &str) -> u64 {
        self.pids().iter().map(|p| rss_kib(*p, field)).sum()
    }
}

/// Starts `count` members with `flags` (`flotilla member` flags other
/// than the name, listen address and data dir) under `dir`: one process
/// for all of them or one each, as `how` says; returns once each answers.
pub(crate) async fn start_members(
    how: MemberProcesses,
    count: usize,
    flags: &[String],
    dir: &Path,
    timeout: Duration,
) -> anyhow::Result<BenchMembers> {
    let exe = std::env::current_exe()?;
    let spawn = |name: &str, data: &Path, extra: &[String]| -> anyhow::Result<ServerProcess> {
        let mut command = Command::new(&exe);
        command
            .args(["member", "--name", name, "--listen", "127.0.0.1:0"])
            .args(flags)
            .args(extra)
            .arg("--data-dir")
            .arg(data);
        ServerProcess::start(command, "flotilla member")
    };
    let deadline = Instant::now() + timeout;
    match how {
        MemberProcesses::Each => {
            let mut started = Vec::new();
            for i in 1..=count {
                let name = format!("member{i}");
                let data = dir.join(&name);
                started.push((spawn(&name, &data, &[])?, name, data.join("kubeconfig")));
            }
            let mut out = BenchMembers {
                processes: Vec::new(),
                members: Vec::new(),
            };
            for (process, name, kubeconfig) in started {
                let left = deadline.saturating_duration_since(Instant::now());
                let client = client_when_ready(&kubeconfig, left).await?;
                out.processes.push(process);
                out.members.push(BenchMember {
                    name,
                    kubeconfig,
                    client,
                });
            }
            Ok(out)
        }
        MemberProcesses::One => {
            let data = dir.join("members");
            let mut process = spawn("member", &data, &["--count".into(), count.to_string()])?;
            let list = data.join(crate::member::MEMBERS_FILE);
            while !list.exists() {
                if let Some(status) = process.0.try_wait()? {
                    bail!(
                        "flotilla member --count {count} exited ({status}) before its members were ready"
                    );
                }
                if Instant::now() > deadline {
                    bail!(
                        "flotilla member --count {count} did not write {} within {timeout:?}",
                        list.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let text = std::fs::read_to_string(&list)
                .with_context(|| format!("cannot read {}", list.display()))?;
            let file: crate::member::MembersFile = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a member list", list.display()))?;
            let mut members = Vec::with_capacity(file.members.len());
            for m in file.members {
                let client = client_when_ready(&m.kubeconfig, Duration::from_secs(30)).await?;
                members.push(BenchMember {
                    name: m.name,
                    kubeconfig: m.kubeconfig,
                    client,
                });
            }
            Ok(BenchMembers {
                processes: vec![process],
                members,
            })
        }
    }
}

impl MemberArgs {
    /// The arguments, for the run's JSON.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "members": self.members, "nodes": self.nodes, "pods": self.pods,
            "deployments": self.deployments, "watch_history": self.watch_history,
            "idle_seconds": self.idle.as_secs_f64(), "runtime": self.runtime.as_str(),
            "member_processes": format!("{:?}", self.member_processes).to_lowercase(),
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
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU seconds (user + system) of the process or thread whose `stat` file
/// (`/proc/PID/stat`, `/proc/PID/task/TID/stat`) is at `path`.
pub(crate) fn stat_cpu_seconds(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
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
        return crate::bench::netns::run(&args).await;
    }
    let out = Reporter::from_args("member", &args.report);
    let dir = tempfile::tempdir()?;
    out.line(format!(
        "flotilla bench member: {} member(s) x {} nodes x {} pods in {} Deployments",
        args.members, args.nodes, args.pods, args.deployments
    ));
    out.line(crate::bench::report::machine_line());
    let started = Instant::now();
    let flags: Vec<String> = [
        "--nodes",
        &args.nodes.to_string(),
        "--pod-startup",
        "1s",
        "--watch-history",
        &args.watch_history.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let fleet = start_members(
        args.member_processes,
        args.members,
        &flags,
        dir.path(),
        Duration::from_secs(300).max(Duration::from_millis(500) * args.members as u32),
    )
    .await?;
    let members = &fleet.members;
    let up = started.elapsed();
    out.line(format!(
        "members up with nodes Ready: {:.1} s ({} member process(es))",
        up.as_secs_f64(),
        fleet.processes.len()
    ));

    let applied = Instant::now();
    let per = args.pods / args.deployments.max(1);
    for m in members {
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
        for m in members {
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

    let pids = fleet.pids();
    let cpu_before: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    tokio::time::sleep(args.idle).await;
    let cpu_after: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
    let peak: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmHWM:")).collect();
    let now: Vec<u64> = pids.iter().map(|p| rss_kib(*p, "VmRSS:")).collect();
    let mib = |k: u64| k as f64 / 1024.0;
    let per_member = |k: u64| mib(k) / args.members.max(1) as f64;
    let (peak_per_member, settled_per_member, settled_all, peak_max) = (
        per_member(peak.iter().sum()),
        per_member(now.iter().sum()),
        mib(now.iter().sum()),
        mib(peak.iter().copied().max().unwrap_or(0)),
    );
    out.line(format!(
        "RSS per member: peak {peak_per_member:.1} MiB, settled {settled_per_member:.1} MiB; all members settled {settled_all:.0} MiB in {} process(es) (peak of the largest {peak_max:.0} MiB)",
        pids.len()
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
            "rss_mib": {"peak_per_member": peak_per_member, "settled_per_member": settled_per_member,
                        "settled_all_members": settled_all, "peak_max": peak_max},
            "idle_cpu_percent_of_core": idle_cpu,
        }),
    );
    out.finish(&report)
}
