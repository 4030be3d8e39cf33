//! `flotilla network benchmark --from A --to B`: what `subctl benchmark`
//! measures, with curl against the stand-in's `/bytes/{n}` instead of
//! iperf3 and netperf (no images to pull here). Throughput and TCP
//! connect latency from a non-gateway pod in A to a pod in B, and the
//! same within A across two nodes (no tunnel) as the baseline the
//! tunnel's cost is read against.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::probe_pods::{self, Fleet, Member, Namespaces, ReadyPod, SERVER_PORT, SERVICE_PORT};

const SERVER: &str = "benchmark-server";
const BASELINE: &str = "benchmark-baseline";
const CLIENT: &str = "benchmark-client";
/// How long a server may take to answer its first request.
const REACH_TIME: Duration = Duration::from_secs(20);
/// One transfer's limit: a slow tunnel should fail, not hang.
const TRANSFER_TIME: Duration = Duration::from_secs(120);

#[derive(clap::Args)]
pub struct BenchmarkArgs {
    #[command(flatten)]
    pub pair: super::probe_pods::PairArgs,
    /// Bytes per throughput run (B, KB, KiB, MB, MiB, GB, GiB; at most 1GiB).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub size: u64,
    /// Throughput runs per measurement.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// TCP connections for the latency measurement.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub requests: u32,
    /// Parallel TCP streams per throughput run, each moving --size
    /// (measured after the single-stream runs; 1 measures one stream only).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub streams: u32,
    /// Also write the figures as JSON to this file (for `flotilla bench
    /// fabric`).
    #[arg(long, hide = true)]
    pub summary: Option<std::path::PathBuf>,
}

/// "64MiB", "100MB", "1GiB", "4096": bytes, at most the stand-in's cap.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size: write e.g. 64MiB or 100MB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit {other:?}: use B, KB, KiB, MB, MiB, GB or GiB"
            ));
        }
    };
    let bytes = (number * scale).round() as u64;
    let max = flotilla_member::runtime::netns::standin::MAX_BYTES;
    if bytes == 0 || bytes > max {
        return Err(format!("{s} is out of range: pick a size from 1B to 1GiB"));
    }
    Ok(bytes)
}

/// min/mean/max/stddev (population) of samples.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Stats {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p99: f64,
    pub count: usize,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n;
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        // Nearest rank.
        let rank = |q: f64| sorted[((q * n).ceil() as usize).clamp(1, sorted.len()) - 1];
        Some(Stats {
            min: sorted[0],
            mean,
            max: sorted[sorted.len() - 1],
            stddev: var.sqrt(),
            p50: rank(0.50),
            p99: rank(0.99),
            count: samples.len(),
        })
    }
}

/// Bytes/s as MB/s (decimal, as iperf3 and curl count).
pub fn mbps(bytes_per_sec: f64) -> String {
    format!("{:.1} MB/s", bytes_per_sec / 1e6)
}

/// A size as the user would write it.
pub fn human_size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{bytes}B")
    }
}

pub fn throughput_line(s: &Stats) -> String {
    format!(
        " Throughput: {} (mean of {} runs; min {}, max {})",
        mbps(s.mean),
        s.count,
        mbps(s.min),
        mbps(s.max)
    )
}

/// A request's time, start to last byte: p50 and p99, in ms.
pub fn request_line(s: &Stats) -> String {
    format!(
        " Request time (connect, GET, answer) over {} requests: p50 {:.3} ms, p99 {:.3} ms",
        s.count,
        s.p50 * 1e3,
        s.p99 * 1e3
    )
}

/// Latency samples are seconds; printed in ms.
pub fn latency_line(s: &Stats, asked: u32) -> String {
    let ms = |v: f64| format!("{:.3} ms", v * 1e3);
    let lost = asked as usize - s.count.min(asked as usize);
    format!(
        " TCP connect RTT over {} requests: min {}, mean {}, max {}, stddev {}{}",
        s.count,
        ms(s.min),
        ms(s.mean),
        ms(s.max),
        ms(s.stddev),
        if lost > 0 {
            format!(" ({lost} failed)")
        } else {
            String::new()
        }
    )
}

/// What one path measured; a figure whose measurement failed is None.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// One TCP stream, bytes/s.
    pub throughput: Option<Stats>,
    /// `streams` TCP streams at once, bytes/s in all.
    pub parallel: Option<Stats>,
    /// TCP connect times, seconds.
    pub connect: Option<Stats>,
    /// Small requests' times on fresh connections, seconds.
    pub request: Option<Stats>,
}

impl Measured {
    /// The transfers of `--size` its throughput runs made (a run with
    /// `streams` streams made that many).
    fn transfers(&self, streams: u32) -> u64 {
        let runs = |s: Option<Stats>| s.map_or(0, |s| s.count as u64);
        runs(self.throughput) + runs(self.parallel) * u64::from(streams)
    }

    fn failed(&self, streams: u32) -> bool {
        self.throughput.is_none()
            || (streams > 1 && self.parallel.is_none())
            || self.connect.is_none()
            || self.request.is_none()
    }
}

/// The comparison with the baseline: the tunnel's share of the
/// in-cluster throughput, and the latency it adds.
pub fn comparison(from: &str, tunnel: &Measured, baseline: &Measured, streams: u32) -> String {
    let mut s = String::from("Tunnel compared with the baseline\n");
    let share = |label: &str, t: Option<Stats>, b: Option<Stats>| match (t, b) {
        (Some(t), Some(b)) if b.mean > 0.0 => format!(
            " {label}: {} through the tunnel, {} within {from}: {:.2}× the baseline ({:.0}%)\n",
            mbps(t.mean),
            mbps(b.mean),
            t.mean / b.mean,
            100.0 * t.mean / b.mean
        ),
        _ => format!(" {label}: not compared (a measurement failed)\n"),
    };
    s.push_str(&share("Throughput", tunnel.throughput, baseline.throughput));
    if streams > 1 {
        s.push_str(&share(
            &format!("Throughput, {streams} streams"),
            tunnel.parallel,
            baseline.parallel,
        ));
    }
    match (tunnel.connect, baseline.connect) {
        (Some(t), Some(b)) => s.push_str(&format!(
            " Latency: {:.3} ms through the tunnel, {:.3} ms within {from}: the tunnel adds {:.3} ms (mean)\n",
            t.mean * 1e3,
            b.mean * 1e3,
            (t.mean - b.mean) * 1e3
        )),
        _ => s.push_str(" Latency: not compared (a measurement failed)\n"),
    }
    s
}

/// Parses `curl -w '%{size_download} %{time_total}\n'` of `streams`
/// transfers run at once: bytes/s of them all (their bytes over the
/// longest one's time), after checking every byte arrived.
pub fn parse_transfers(stdout: &str, want: u64, streams: u32) -> Result<f64, String> {
    let mut bytes = 0u64;
    let mut longest = 0f64;
    let mut seen = 0;
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let size: f64 = fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("curl printed no size: {line:?}"))?;
        let time: f64 = fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("curl printed no time: {line:?}"))?;
        if size as u64 != want {
            return Err(format!(
                "only {size} of {want} bytes arrived: the transfer was cut short"
            ));
        }
        bytes += want;
        longest = longest.max(time);
        seen += 1;
    }
    if seen != streams {
        return Err(format!(
            "{seen} of {streams} transfers finished: {stdout:?}"
        ));
    }
    if longest <= 0.0 {
        return Err(format!("curl printed no time: {stdout:?}"));
    }
    Ok(bytes as f64 / longest)
}

/// Parses `%{time_connect} %{time_total}` per line (seconds): connect
/// times and request times; a 0 is a transfer that did not connect, and
/// is left out.
pub fn parse_request_times(stdout: &str) -> (Vec<f64>, Vec<f64>) {
    stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|f| f.parse::<f64>().ok());
            Some((f.next()??, f.next().flatten().unwrap_or(0.0)))
        })
        .filter(|(connect, _)| *connect > 0.0)
        .unzip()
}

#[derive(Clone)]
struct Bench<'a> {
    from: &'a Member,
    namespace: String,
    client: ReadyPod,
    size: u64,
    runs: u32,
    requests: u32,
    streams: u32,
}

impl Bench<'_> {
    /// Throughput runs against `base` (http://ip:port) with `streams`
    /// TCP streams at once, printed as they go.
    async fn throughput(&self, base: &str, streams: u32) -> anyhow::Result<Stats> {
        let url = format!("{base}/bytes/{}", self.size);
        let mut speeds = Vec::new();
        for run in 1..=self.runs {
            let mut argv = probe_pods::curl(
                &url,
                TRANSFER_TIME,
                &["-w", "%{size_download} %{time_total}\\n"],
            );
            argv.pop();
            if streams > 1 {
                argv.extend(["-Z", "--parallel-immediate", "--parallel-max"].map(String::from));
                argv.push(streams.to_string());
            }
            for _ in 0..streams {
                argv.extend(["-o".into(), "/dev/null".into(), url.clone()]);
            }
            let e = probe_pods::exec(
                self.from,
                &self.namespace,
                &self.client.name,
                &argv,
                TRANSFER_TIME + Duration::from_secs(10),
            )
            .await?;
            if e.code != 0 {
                bail!(
                    "curl {url} failed (exit code {}): {} — run `flotilla network verify` to find the hop",
                    e.code,
                    e.stderr.trim()
                );
            }
            let speed = parse_transfers(&e.stdout, self.size, streams)
                .map_err(|why| anyhow::anyhow!("{url}: {why}"))?;
            if streams > 1 {
                println!(
                    " Run {run}: {streams} × {} at {} in all",
                    human_size(self.size),
                    mbps(speed)
                );
            } else {
                println!(" Run {run}: {} at {}", human_size(self.size), mbps(speed));
            }
            speeds.push(speed);
        }
        Stats::of(&speeds).context("no throughput runs")
    }

    /// `requests` fresh TCP connections to `base`, in one curl (each
    /// URL its own transfer, `Connection: close` so none is reused).
    async fn latency(&self, base: &str) -> anyhow::Result<(Stats, Option<Stats>)> {
        let url = format!("{base}/health");
        let mut argv = probe_pods::curl(
            &url,
            Duration::from_secs(5),
            &[
                "-H",
                "Connection: close",
                "-w",
                "%{time_connect} %{time_total}\\n",
            ],
        );
        argv.pop();
        for _ in 0..self.requests {
            argv.extend(["-o".into(), "/dev/null".into(), url.clone()]);
        }
        let limit =
            Duration::from_secs(10 + 5 * u64::from(self.requests)).min(Duration::from_secs(590));
        let e =
            probe_pods::exec(self.from, &self.namespace, &self.client.name, &argv, limit).await?;
        let (connects, requests) = parse_request_times(&e.stdout);
        let connect = Stats::of(&connects).with_context(|| {
            format!(
                "no connection to {url} succeeded (curl exit code {}: {}): run `flotilla network verify` to find the hop",
                e.code,
                e.stderr.trim()
            )
        })?;
        Ok((connect, Stats::of(&requests)))
    }

    /// Whether `base` answers at all, retried for a few seconds (routes
    /// may lag the pods): measuring an unreachable server would only
    /// wait out every timeout.
    async fn reachable(&self, base: &str) -> Result<(), String> {
        let url = format!("{base}/health");
        let argv = probe_pods::curl(&url, Duration::from_secs(5), &["-o", "/dev/null"]);
        let deadline = Instant::now() + REACH_TIME;
        loop {
            let last = match probe_pods::exec(
                self.from,
                &self.namespace,
                &self.client.name,
                &argv,
                Duration::from_secs(15),
            )
            .await
            {
                Ok(e) if e.code == 0 => return Ok(()),
                Ok(e) => format!(
                    "curl exited {}: {}",
                    e.code,
                    e.stderr.trim().trim_start_matches("curl: ")
                ),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                return Err(format!("{url} does not answer ({last})"));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Every measurement against `base`, each printed; a failure is
    /// printed and leaves its figure out.
    async fn measure(&self, base: &str, title: &str) -> Measured {
        let mut m = Measured::default();
        if let Err(why) = self.reachable(base).await {
            println!("Performing tests from {title}");
            println!(" ✗ {why}");
            return m;
        }
        let mut counts = vec![1];
        if self.streams > 1 {
            counts.push(self.streams);
        }
        for streams in counts {
            if streams == 1 {
                println!("Performing throughput tests from {title}");
            } else {
                println!("Performing throughput tests with {streams} streams from {title}");
            }
            let got = match self.throughput(base, streams).await {
                Ok(s) => {
                    println!("{}", throughput_line(&s));
                    Some(s)
                }
                Err(e) => {
                    println!(" ✗ {e:#}");
                    None
                }
            };
            if streams == 1 {
                m.throughput = got;
            } else {
                m.parallel = got;
            }
        }
        println!("Performing latency tests from {title}");
        match self.latency(base).await {
            Ok((connect, request)) => {
                println!("{}", latency_line(&connect, self.requests));
                if let Some(r) = &request {
                    println!("{}", request_line(r));
                }
                m.connect = Some(connect);
                m.request = request;
            }
            Err(e) => println!(" ✗ {e:#}"),
        }
        m
    }
}

pub async fn run(args: BenchmarkArgs) -> anyhow::Result<()> {
    let fleet = Fleet::from_kubeconfig(&args.pair.hub, &args.pair.from, &args.pair.to).await?;
    let namespace = format!("flotilla-benchmark-{}", probe_pods::random_suffix());
    let namespaces = Namespaces::default();
    let failed = probe_pods::with_cleanup(
        &namespaces,
        args.pair.keep,
        &probe_pods::Report::stdout(),
        benchmark(&fleet, &args, &namespace, &namespaces),
    )
    .await?;
    if failed {
        bail!(
            "a measurement failed (see the ✗ lines): `flotilla network verify --from {} --to {}` finds the hop",
            args.pair.from,
            args.pair.to
        );
    }
    Ok(())
}

/// Sets up, measures and prints; true if a measurement failed.
async fn benchmark(
    fleet: &Fleet,
    args: &BenchmarkArgs,
    namespace: &str,
    namespaces: &Namespaces,
) -> anyhow::Result<bool> {
    let (from, to) = (&fleet.from, &fleet.to);
    let deadline = Instant::now() + args.pair.timeout;
    let from_gateways = fleet.gateways(from).await.unwrap_or_default();
    let to_gateways = fleet.gateways(to).await.unwrap_or_default();
    let from_gateway = probe_pods::active_gateway_node(&from_gateways);
    let globalnet = fleet.globalnet(to).await;
    let from_nodes = probe_pods::nodes(from).await?;
    let client_node = probe_pods::node_other_than(&from_nodes, &[from_gateway.as_deref()]);
    // The baseline server on another node than the client's, so the
    // baseline crosses a node boundary as the tunnel path does.
    let baseline_node = probe_pods::node_other_than(&from_nodes, &[client_node.as_deref()]);
    let server_node = probe_pods::node_other_than(
        &probe_pods::nodes(to).await?,
        &[probe_pods::active_gateway_node(&to_gateways).as_deref()],
    );
    println!(
        "Setting up the benchmark's pods (namespace {namespace} in \"{}\" and \"{}\")",
        from.name, to.name
    );
    namespaces.create(from, namespace).await?;
    namespaces.create(to, namespace).await?;
    // Exported: Globalnet reaches B's pods only through an exported
    // Service, and the ClusterSetIP path is measured too.
    probe_pods::create_server(to, namespace, SERVER, server_node.as_deref(), true).await?;
    probe_pods::create_server(from, namespace, BASELINE, baseline_node.as_deref(), false).await?;
    probe_pods::create_client(from, namespace, CLIENT, client_node.as_deref()).await?;
    let server = probe_pods::wait_ready(to, namespace, SERVER, deadline).await?;
    let baseline = probe_pods::wait_ready(from, namespace, BASELINE, deadline).await?;
    let client = probe_pods::wait_ready(from, namespace, CLIENT, deadline).await?;
    let target = if globalnet {
        let ip = probe_pods::global_ingress_ip(to, namespace, SERVER, deadline).await?;
        format!("http://{ip}:{SERVICE_PORT}")
    } else {
        format!("http://{}:{SERVER_PORT}", server.ip)
    };
    let gateway_note = |node: &str, gw: Option<&str>| {
        if gw == Some(node) {
            " (gateway node)"
        } else {
            ""
        }
    };
    println!(
        " • client {} on {}{}; server {} on {}/{} via {}{}; baseline {} on {}/{}",
        client.name,
        client.node,
        gateway_note(&client.node, from_gateway.as_deref()),
        server.name,
        to.name,
        server.node,
        target,
        if globalnet {
            " (global ingress IP)"
        } else {
            ""
        },
        baseline.name,
        from.name,
        baseline.node
    );
    if baseline.node == client.node {
        println!(
            " • {} has one node: the baseline does not cross nodes",
            from.name
        );
    }
    let bench = Bench {
        from,
        namespace: namespace.to_string(),
        client,
        size: args.size,
        runs: args.runs,
        requests: args.requests,
        streams: args.streams,
    };
    let tunnel = bench
        .measure(
            &target,
            &format!(
                "non-gateway pod on cluster \"{}\" to non-gateway pod on cluster \"{}\"",
                from.name, to.name
            ),
        )
        .await;
    // The ClusterSetIP: the same pod behind the importing cluster's
    // service proxy (one stream, and latency).
    let cluster_set = match probe_pods::cluster_set_ip(
        from,
        to,
        namespace,
        SERVER,
        deadline.saturating_duration_since(Instant::now()),
    )
    .await
    {
        Ok(ip) => {
            let one_stream = Bench {
                streams: 1,
                ..bench.clone()
            };
            Some(
                one_stream
                    .measure(
                        &format!("http://{ip}:{SERVICE_PORT}"),
                        &format!(
                            "non-gateway pod on cluster \"{}\" to ClusterSetIP {ip} (the server's export)",
                            from.name
                        ),
                    )
                    .await,
            )
        }
        Err(why) => {
            println!("Performing tests through the ClusterSetIP");
            println!(" ✗ {why}");
            None
        }
    };
    let base = bench
        .measure(
            &format!("http://{}:{SERVER_PORT}", baseline.ip),
            &format!(
                "non-gateway pod to a pod on another node of cluster \"{}\" (baseline, no tunnel)",
                from.name
            ),
        )
        .await;
    print!("{}", comparison(&from.name, &tunnel, &base, args.streams));
    if let Some(path) = &args.summary {
        let through_tunnel = args.size
            * (tunnel.transfers(args.streams) + cluster_set.map_or(0, |m| m.transfers(1)));
        let json = serde_json::json!({
            "tunnel": tunnel,
            "baseline": base,
            "cluster_set_ip": cluster_set,
            "streams": args.streams,
            "bytes_through_tunnel": through_tunnel,
        });
        std::fs::write(path, json.to_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(tunnel.failed(args.streams)
        || base.failed(args.streams)
        || cluster_set.is_none_or(|m| m.failed(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_subctls() {
        assert_eq!(parse_size("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert!(parse_size("2GiB").unwrap_err().contains("out of range"));
        assert!(parse_size("0").is_err());
        assert!(
            parse_size("12 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn stats_are_population_figures() {
        let s = Stats::of(&[4.0, 2.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.min, s.mean, s.max, s.count), (1.0, 2.5, 4.0, 4));
        assert_eq!((s.p50, s.p99), (2.0, 4.0));
        assert!((s.stddev - 1.118_034).abs() < 1e-6);
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn curl_output_is_read() {
        assert_eq!(parse_transfers("4096 0.5\n", 4096, 1), Ok(8192.0));
        // Streams at once: all their bytes over the longest one's time.
        assert_eq!(parse_transfers("1000 0.5\n1000 1.0\n", 1000, 2), Ok(2000.0));
        assert!(
            parse_transfers("1024 0.1", 4096, 1)
                .unwrap_err()
                .contains("cut short")
        );
        assert!(
            parse_transfers("4096 0.1", 4096, 2)
                .unwrap_err()
                .contains("1 of 2")
        );
        assert!(parse_transfers("", 1, 1).is_err());
        assert_eq!(
            parse_request_times("0.000412 0.001\n0.000000 0.000\n0.000503 0.002\n"),
            (vec![0.000412, 0.000503], vec![0.001, 0.002])
        );
    }

    #[test]
    fn figures_read_like_subctls() {
        let t = Stats::of(&[100e6, 120e6]).unwrap();
        assert_eq!(
            throughput_line(&t),
            " Throughput: 110.0 MB/s (mean of 2 runs; min 100.0 MB/s, max 120.0 MB/s)"
        );
        let l = Stats::of(&[0.001, 0.003]).unwrap();
        assert_eq!(
            latency_line(&l, 3),
            " TCP connect RTT over 2 requests: min 1.000 ms, mean 2.000 ms, max 3.000 ms, stddev 1.000 ms (1 failed)"
        );
        let b = Measured {
            throughput: Stats::of(&[440e6]),
            parallel: Stats::of(&[800e6]),
            connect: Stats::of(&[0.0005]),
            request: Stats::of(&[0.001]),
        };
        let tunnel = Measured {
            throughput: Some(t),
            parallel: Stats::of(&[400e6]),
            connect: Some(l),
            request: Stats::of(&[0.002]),
        };
        let c = comparison("east", &tunnel, &b, 8);
        assert!(c.contains("Throughput: 110.0 MB/s through the tunnel, 440.0 MB/s within east: 0.25× the baseline (25%)"), "{c}");
        assert!(c.contains("Throughput, 8 streams: 400.0 MB/s through the tunnel, 800.0 MB/s within east: 0.50× the baseline (50%)"), "{c}");
        assert!(c.contains("the tunnel adds 1.500 ms (mean)"), "{c}");
        assert!(!comparison("east", &tunnel, &b, 1).contains("8 streams"));
        assert!(comparison("east", &Measured::default(), &b, 8).contains("not compared"));
        assert!(Measured::default().failed(1) && !tunnel.failed(8));
        // Two single-stream runs and one run of 8 streams.
        assert_eq!(tunnel.transfers(8), 10);
        assert_eq!(Measured::default().transfers(8), 0);
        assert_eq!(
            request_line(&Stats::of(&[0.001, 0.003]).unwrap()),
            " Request time (connect, GET, answer) over 2 requests: p50 1.000 ms, p99 3.000 ms"
        );
        assert_eq!(human_size(64 << 20), "64MiB");
    }
}
