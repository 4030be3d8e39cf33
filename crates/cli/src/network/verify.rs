//! `flotilla network verify --from A --to B`: what `subctl verify` checks,
//! as one line per hop. A client pod in A calls a stand-in server in B by
//! its pod IP, its Service (or global ingress IP), its ClusterSetIP and
//! its clusterset.local name; a failure says which hop lost the traffic,
//! read against the state of A's tunnel to B.

use std::time::{Duration, Instant};

use anyhow::bail;
use flotilla_fabric::api::{self, Gateway};
use serde_json::Value;

use super::probe_pods::{
    self, Exec, Fleet, Member, Namespaces, ReadyPod, SERVER_PORT, SERVICE_PORT,
};

/// The server's Deployment, Service and ServiceExport name.
pub const SERVER: &str = "verify-server";
/// The client pod's name.
pub const CLIENT: &str = "verify-client";
/// How long one HTTP check retries before it is a failure (routes may
/// lag the pods by a moment).
const CHECK_BUDGET: Duration = Duration::from_secs(20);
/// How long clusterset.local may lag a ServiceImport that has its
/// ClusterSetIP.
const DNS_AFTER_IMPORT: Duration = Duration::from_secs(30);
/// One curl's limit.
const CURL_TIME: Duration = Duration::from_secs(5);

#[derive(clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub pair: super::probe_pods::PairArgs,
}

/// A's tunnel to B, as A's active Gateway reports it.
#[derive(Clone, Debug, PartialEq)]
pub enum Tunnel {
    Connected {
        gateway: String,
        rtt: Option<String>,
    },
    /// Connecting or error, with the gateway's statusMessage.
    Down { status: String, message: String },
    /// No tunnel at all, and why.
    Missing(String),
}

/// Reads A's (`from`) tunnel to `to` from A's Gateways.
pub fn tunnel(from: &str, to: &str, gateways: &[Gateway]) -> Tunnel {
    let Some(active) = gateways.iter().find(|g| g.status.ha_status == "active") else {
        return Tunnel::Missing(if gateways.is_empty() {
            format!(
                "{from} has no gateway: start its member with --underlay, and join it to the fleet"
            )
        } else {
            format!(
                "{from} has no active gateway (none won the election): `flotilla network show gateways -C {from}`"
            )
        });
    };
    let Some(c) = active
        .status
        .connections
        .iter()
        .find(|c| c.endpoint.cluster_id == to)
    else {
        return Tunnel::Missing(format!(
            "{from}'s gateway has no connection to {to}: has {to}'s gateway published its endpoint to the broker? `flotilla network show endpoints`"
        ));
    };
    if c.status == api::CONNECTED {
        Tunnel::Connected {
            gateway: kube::ResourceExt::name_any(active),
            rtt: c
                .latency_rtt
                .as_ref()
                .map(|l| l.average.clone())
                .filter(|a| !a.is_empty()),
        }
    } else {
        Tunnel::Down {
            status: c.status.clone(),
            message: c.status_message.clone(),
        }
    }
}

/// Why traffic to `target` got no answer, given the tunnel: a connected
/// tunnel puts the loss past B's gateway (`past` names what is there).
pub fn no_answer(target: &str, from: &str, to: &str, tunnel: &Tunnel, past: &str) -> String {
    match tunnel {
        Tunnel::Connected { .. } => format!(
            "no answer from {target} — the tunnel {from}→{to} is connected, so the loss is past {to}'s gateway ({past})"
        ),
        Tunnel::Down { status, message } => {
            format!("no answer from {target} — the tunnel {from}→{to} is {status}: {message}")
        }
        Tunnel::Missing(why) => format!("no answer from {target} — {why}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// One check's result, printed as one line.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: &'static str,
    pub outcome: Outcome,
    pub detail: String,
}

impl Check {
    fn new(name: &'static str, outcome: Outcome, detail: impl Into<String>) -> Check {
        Check {
            name,
            outcome,
            detail: detail.into(),
        }
    }

    /// subctl's marks: ✓ passed, ✗ failed, and a skipped check says why.
    pub fn line(&self) -> String {
        let mark = match self.outcome {
            Outcome::Pass => "✓",
            Outcome::Fail => "✗",
            Outcome::Skip => "-",
        };
        let skipped = if self.outcome == Outcome::Skip {
            "skipped: "
        } else {
            ""
        };
        format!(" {mark} {}: {skipped}{}", self.name, self.detail)
    }
}

/// The closing line, and how many checks failed.
pub fn summary(checks: &[Check]) -> (String, usize) {
    let count = |o| checks.iter().filter(|c| c.outcome == o).count();
    let (pass, fail, skip) = (
        count(Outcome::Pass),
        count(Outcome::Fail),
        count(Outcome::Skip),
    );
    let mut s = format!("{pass} passed, {fail} failed");
    if skip > 0 {
        s.push_str(&format!(", {skip} skipped"));
    }
    (s, fail)
}

/// Whether a curl's output is B's stand-in answering: on success, who
/// answered ("west/verify-server-abc on west-n1").
pub fn answered_by(stdout: &str, cluster: &str) -> Result<String, String> {
    let body: Value = serde_json::from_str(stdout.trim()).map_err(|_| {
        format!(
            "the answer is not the stand-in's JSON identity: {:?}",
            stdout.chars().take(120).collect::<String>()
        )
    })?;
    let field = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or_default();
    if field("cluster") != cluster {
        return Err(format!(
            "answered by {}/{} rather than {cluster}'s server: another cluster claims that address",
            field("cluster"),
            field("pod")
        ));
    }
    Ok(format!(
        "{}/{} on {}",
        field("cluster"),
        field("pod"),
        field("node")
    ))
}

/// What went wrong with one curl: no answer (a timeout), or another
/// failure with curl's own words.
#[derive(Debug, PartialEq)]
pub enum CurlFailure {
    NoAnswer,
    Other(String),
}

pub fn curl_failure(e: &Exec) -> CurlFailure {
    let said = e.stderr.trim().trim_start_matches("curl: ").to_string();
    match e.code {
        // Timeouts (28) and unreachable hosts (7 with "No route"/"timed
        // out") are lost packets; a refusal (7) reached someone.
        28 => CurlFailure::NoAnswer,
        7 if said.contains("No route") || said.contains("timed out") => CurlFailure::NoAnswer,
        code => CurlFailure::Other(if said.is_empty() {
            format!("curl exited {code}")
        } else {
            format!("curl exited {code}: {said}")
        }),
    }
}

/// The run's probes, once ready.
struct Probes<'a> {
    fleet: &'a Fleet,
    namespace: String,
    client: ReadyPod,
    server: ReadyPod,
    timeout: Duration,
}

impl Probes<'_> {
    fn from(&self) -> &Member {
        &self.fleet.from
    }
    fn to(&self) -> &Member {
        &self.fleet.to
    }

    /// The tunnel now (re-read when a check fails: its state may have
    /// changed since the tunnel check).
    async fn tunnel(&self) -> Tunnel {
        match self.fleet.gateways(self.from()).await {
            Ok(g) => tunnel(&self.from().name, &self.to().name, &g),
            Err(why) => Tunnel::Missing(format!(
                "{}'s gateways cannot be read: {why}",
                self.from().name
            )),
        }
    }

    /// Curls `url` from the client until B's server answers or the
    /// budget is spent: who answered, or the last failure.
    async fn http(&self, url: &str) -> Result<String, CurlFailure> {
        let deadline = Instant::now() + CHECK_BUDGET.min(self.timeout);
        loop {
            let argv = probe_pods::curl(url, CURL_TIME, &[]);
            let result = match probe_pods::exec(
                self.from(),
                &self.namespace,
                &self.client.name,
                &argv,
                CURL_TIME + Duration::from_secs(10),
            )
            .await
            {
                Ok(e) if e.code == 0 => {
                    answered_by(&e.stdout, &self.to().name).map_err(CurlFailure::Other)
                }
                Ok(e) => Err(curl_failure(&e)),
                Err(e) => Err(CurlFailure::Other(format!("{e:#}"))),
            };
            if result.is_ok() || Instant::now() >= deadline {
                return result;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// An HTTP check's line: `past` says what lies beyond B's gateway
    /// for this hop, `what` names the target for the user.
    async fn http_check(&self, name: &'static str, target: &str, what: &str, past: &str) -> Check {
        match self.http(&format!("http://{target}/")).await {
            Ok(by) => Check::new(name, Outcome::Pass, format!("{what} answered, from {by}")),
            Err(CurlFailure::NoAnswer) => {
                let tunnel = self.tunnel().await;
                Check::new(
                    name,
                    Outcome::Fail,
                    no_answer(target, &self.from().name, &self.to().name, &tunnel, past),
                )
            }
            Err(CurlFailure::Other(why)) => {
                Check::new(name, Outcome::Fail, format!("{what}: {why}"))
            }
        }
    }

    /// The ClusterSetIP of B's export, as the hub imported it into A.
    async fn cluster_set_ip(&self) -> Result<String, String> {
        probe_pods::cluster_set_ip(
            self.from(),
            self.to(),
            &self.namespace,
            SERVER,
            self.timeout,
        )
        .await
    }

    /// Resolves `name` inside the client until it resolves or the
    /// timeout passes: its address, or why not.
    async fn resolve(&self, name: &str, wait: Duration) -> Result<String, String> {
        let deadline = Instant::now() + wait;
        let argv = vec!["getent".to_string(), "hosts".into(), name.into()];
        loop {
            let last = match probe_pods::exec(
                self.from(),
                &self.namespace,
                &self.client.name,
                &argv,
                Duration::from_secs(20),
            )
            .await
            {
                Ok(e) if e.code == 0 => {
                    if let Some(ip) = e.stdout.split_whitespace().next() {
                        return Ok(ip.to_string());
                    }
                    "getent printed nothing".to_string()
                }
                Ok(e) => getent_failure(e.code),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// A second tunnel line when the tunnel was connected at the start but
/// is not at the end (its status had not caught up).
pub fn tunnel_changed(from: &str, to: &str, start: &Tunnel, end: &Tunnel) -> Option<Check> {
    if !matches!(start, Tunnel::Connected { .. }) || matches!(end, Tunnel::Connected { .. }) {
        return None;
    }
    let now = tunnel_check(from, to, end);
    Some(Check::new(
        "tunnel (re-read)",
        Outcome::Fail,
        format!(
            "connected at the start, but now {} (the gateway's status lags a broken tunnel)",
            now.detail
        ),
    ))
}

/// What lies past B's gateway on the way to its Service: under
/// Globalnet, the gateway's own ingress rules (global IP → Service) too.
pub fn past_service(to: &str, globalnet: bool) -> String {
    if globalnet {
        format!("{to}'s Globalnet ingress rules for the global IP, its service proxy, node or pod")
    } else {
        format!("{to}'s service proxy, node or pod")
    }
}

/// getent's exit code in words (its man page's).
pub fn getent_failure(code: i32) -> String {
    match code {
        2 => "no such name (getent hosts exited 2)".into(),
        code => format!("getent hosts exited {code}"),
    }
}

/// The tunnel check's line.
pub fn tunnel_check(from: &str, to: &str, t: &Tunnel) -> Check {
    match t {
        Tunnel::Connected { gateway, rtt } => Check::new(
            "tunnel",
            Outcome::Pass,
            format!(
                "{from}'s gateway {gateway} is connected to {to}{}",
                rtt.as_ref()
                    .map(|r| format!(" (RTT avg. {r})"))
                    .unwrap_or_default()
            ),
        ),
        Tunnel::Down { status, message } => Check::new(
            "tunnel",
            Outcome::Fail,
            format!("the tunnel {from}→{to} is {status}: {message}"),
        ),
        Tunnel::Missing(why) => Check::new("tunnel", Outcome::Fail, why.clone()),
    }
}

pub async fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let fleet = Fleet::from_kubeconfig(&args.pair.hub, &args.pair.from, &args.pair.to).await?;
    let checks = verify_fleet(
        &fleet,
        args.pair.timeout,
        args.pair.keep,
        &probe_pods::Report::stdout(),
    )
    .await?;
    let failed = checks.iter().filter(|c| c.outcome == Outcome::Fail).count();
    if failed > 0 {
        bail!(
            "{failed} of {} checks failed: the ✗ lines above name the hop that lost the traffic",
            checks.len()
        );
    }
    Ok(())
}

/// Verifies `fleet`'s pair hop by hop in probe namespaces of its own
/// (deleted after, unless `keep`), reporting each line to `report`, the
/// summary last; returns the checks.
pub async fn verify_fleet(
    fleet: &Fleet,
    timeout: Duration,
    keep: bool,
    report: &probe_pods::Report,
) -> anyhow::Result<Vec<Check>> {
    let namespace = format!("flotilla-verify-{}", probe_pods::random_suffix());
    report.say(format!(
        "Verifying the fabric from cluster \"{}\" to cluster \"{}\" (namespace {namespace} in both)",
        fleet.from.name, fleet.to.name
    ));
    let namespaces = Namespaces::default();
    let checks = probe_pods::with_cleanup(
        &namespaces,
        keep,
        report,
        verify(fleet, timeout, &namespace, &namespaces, report),
    )
    .await?;
    report.say(summary(&checks).0);
    Ok(checks)
}

async fn verify(
    fleet: &Fleet,
    timeout: Duration,
    namespace: &str,
    namespaces: &Namespaces,
    out: &probe_pods::Report,
) -> anyhow::Result<Vec<Check>> {
    let (from, to) = (&fleet.from, &fleet.to);
    let deadline = Instant::now() + timeout;
    let from_gateways = fleet.gateways(from).await.unwrap_or_default();
    let to_gateways = fleet.gateways(to).await.unwrap_or_default();
    let globalnet = fleet.globalnet(to).await;
    // Probes on non-gateway nodes, as subctl's, so the node→gateway hop
    // is part of the path.
    let client_node = probe_pods::node_other_than(
        &probe_pods::nodes(from).await?,
        &[probe_pods::active_gateway_node(&from_gateways).as_deref()],
    );
    let server_node = probe_pods::node_other_than(
        &probe_pods::nodes(to).await?,
        &[probe_pods::active_gateway_node(&to_gateways).as_deref()],
    );
    namespaces.create(from, namespace).await?;
    namespaces.create(to, namespace).await?;
    probe_pods::create_server(to, namespace, SERVER, server_node.as_deref(), true).await?;
    probe_pods::create_client(from, namespace, CLIENT, client_node.as_deref()).await?;
    let server = probe_pods::wait_ready(to, namespace, SERVER, deadline).await?;
    let client = probe_pods::wait_ready(from, namespace, CLIENT, deadline).await?;
    out.say(format!(
        " • client {} on {}/{} ({}), server {} on {}/{} ({})",
        client.name,
        from.name,
        client.node,
        client.ip,
        server.name,
        to.name,
        server.node,
        server.ip
    ));
    let probes = Probes {
        fleet,
        namespace: namespace.to_string(),
        client,
        server,
        timeout,
    };
    let mut checks = Vec::new();
    let mut report = |c: Check| {
        out.say(c.line());
        checks.push(c);
    };

    let tunnel_at_start = probes.tunnel().await;
    report(tunnel_check(&from.name, &to.name, &tunnel_at_start));

    if globalnet {
        report(Check::new(
            "pod-to-pod",
            Outcome::Skip,
            format!(
                "{} uses Globalnet: its pod IPs are not routable from other clusters, pods are reached through exported Services",
                to.name
            ),
        ));
    } else {
        let target = format!("{}:{SERVER_PORT}", probes.server.ip);
        report(
            probes
                .http_check(
                    "pod-to-pod",
                    &target,
                    &format!("pod IP {target}"),
                    &format!("{}'s node or pod", to.name),
                )
                .await,
        );
    }

    let service = if globalnet {
        probe_pods::global_ingress_ip(to, namespace, SERVER, deadline)
            .await
            .map(|ip| (ip, "global ingress IP"))
    } else {
        probe_pods::cluster_ip(to, namespace, SERVER)
            .await
            .map(|ip| (ip, "ClusterIP"))
    };
    let service_ok = match service {
        Ok((ip, kind)) => {
            let target = format!("{ip}:{SERVICE_PORT}");
            let c = probes
                .http_check(
                    "pod-to-Service",
                    &target,
                    &format!("{SERVER}'s {kind} {target}"),
                    &past_service(&to.name, globalnet),
                )
                .await;
            let ok = c.outcome == Outcome::Pass;
            report(c);
            ok
        }
        Err(e) => {
            report(Check::new(
                "pod-to-Service",
                Outcome::Fail,
                format!("{e:#}"),
            ));
            false
        }
    };

    let cluster_set_ip = probes.cluster_set_ip().await;
    let imported = cluster_set_ip.is_ok();
    match cluster_set_ip {
        Ok(ip) => {
            let target = format!("{ip}:{SERVICE_PORT}");
            let mut c = probes
                .http_check(
                    "pod-to-ClusterSetIP",
                    &target,
                    &format!("ClusterSetIP {target}"),
                    &past_service(&to.name, globalnet),
                )
                .await;
            if c.outcome == Outcome::Fail && service_ok && c.detail.starts_with("no answer") {
                // The Service itself answered through the same tunnel:
                // what is missing is A's own rule for the ClusterSetIP.
                c.detail = format!(
                    "no answer from ClusterSetIP {target} — the Service answered through the tunnel, so {} does not route the ClusterSetIP (its service proxy's rules for ServiceImports)",
                    from.name
                );
            }
            report(c);
        }
        Err(why) => report(Check::new("pod-to-ClusterSetIP", Outcome::Fail, why)),
    }

    // With the import in place the name should follow within seconds;
    // without it, DNS gets the whole timeout to catch up.
    let name = format!("{SERVER}.{namespace}.svc.clusterset.local");
    let dns_wait = if imported {
        DNS_AFTER_IMPORT.min(timeout)
    } else {
        timeout
    };
    match probes.resolve(&name, dns_wait).await {
        Ok(ip) => {
            let c = probes
                .http_check(
                    "DNS",
                    &format!("{name}:{SERVICE_PORT}"),
                    &format!("{name} ({ip})"),
                    &past_service(&to.name, globalnet),
                )
                .await;
            report(c);
        }
        Err(why) => report(Check::new(
            "DNS",
            Outcome::Fail,
            format!(
                "{name} did not resolve in {} (its cluster DNS): {why}",
                from.name
            ),
        )),
    }
    // A gateway's status lags a broken tunnel by its handshake grace:
    // one that looked connected at the start may not be now.
    if let Some(c) = tunnel_changed(
        &from.name,
        &to.name,
        &tunnel_at_start,
        &probes.tunnel().await,
    ) {
        report(c);
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fabric::api::{Connection, EndpointSpec, GatewayStatus, LatencyRtt};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn gateway(ha: &str, status: &str, message: &str) -> Gateway {
        Gateway {
            metadata: ObjectMeta {
                name: Some("east-n0".into()),
                ..Default::default()
            },
            status: GatewayStatus {
                ha_status: ha.into(),
                connections: vec![Connection {
                    status: status.into(),
                    status_message: message.into(),
                    endpoint: EndpointSpec {
                        cluster_id: "west".into(),
                        ..Default::default()
                    },
                    latency_rtt: Some(LatencyRtt {
                        average: "1.2ms".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_tunnel_is_read_from_the_active_gateway() {
        let up = tunnel("east", "west", &[gateway("active", "connected", "")]);
        assert_eq!(
            up,
            Tunnel::Connected {
                gateway: "east-n0".into(),
                rtt: Some("1.2ms".into())
            }
        );
        assert_eq!(
            tunnel_check("east", "west", &up).line(),
            " ✓ tunnel: east's gateway east-n0 is connected to west (RTT avg. 1.2ms)"
        );
        let down = tunnel(
            "east",
            "west",
            &[gateway("active", "error", "no handshake with 100.65.0.3")],
        );
        assert_eq!(
            tunnel_check("east", "west", &down).line(),
            " ✗ tunnel: the tunnel east→west is error: no handshake with 100.65.0.3"
        );
        // A passive gateway's view does not count.
        assert!(matches!(
            tunnel("east", "west", &[gateway("passive", "connected", "")]),
            Tunnel::Missing(why) if why.contains("no active gateway")
        ));
        assert!(matches!(
            tunnel("east", "south", &[gateway("active", "connected", "")]),
            Tunnel::Missing(why) if why.contains("no connection to south")
        ));
        assert!(
            matches!(tunnel("east", "west", &[]), Tunnel::Missing(why) if why.contains("has no gateway"))
        );
    }

    #[test]
    fn a_tunnel_that_broke_during_the_run_is_reported() {
        let up = Tunnel::Connected {
            gateway: "east-n0".into(),
            rtt: None,
        };
        let down = Tunnel::Down {
            status: "error".into(),
            message: "no reply".into(),
        };
        assert!(tunnel_changed("east", "west", &up, &up).is_none());
        assert!(tunnel_changed("east", "west", &down, &down).is_none());
        assert_eq!(
            tunnel_changed("east", "west", &up, &down)
                .map(|c| c.line())
                .as_deref(),
            Some(
                " ✗ tunnel (re-read): connected at the start, but now the tunnel east→west is error: no reply (the gateway's status lags a broken tunnel)"
            )
        );
    }

    #[test]
    fn a_lost_answer_names_the_hop() {
        let up = Tunnel::Connected {
            gateway: "east-n0".into(),
            rtt: None,
        };
        assert_eq!(
            no_answer("10.174.0.5:8080", "east", "west", &up, "west's node or pod"),
            "no answer from 10.174.0.5:8080 — the tunnel east→west is connected, so the loss is past west's gateway (west's node or pod)"
        );
        let down = Tunnel::Down {
            status: "error".into(),
            message: "no reply through the tunnel for 9.0 seconds".into(),
        };
        assert_eq!(
            no_answer("10.174.0.5:8080", "east", "west", &down, "-"),
            "no answer from 10.174.0.5:8080 — the tunnel east→west is error: no reply through the tunnel for 9.0 seconds"
        );
    }

    #[test]
    fn curl_failures_are_told_apart() {
        let e = |code, stderr: &str| Exec {
            code,
            stderr: stderr.into(),
            ..Default::default()
        };
        assert_eq!(
            curl_failure(&e(28, "curl: (28) Connection timed out")),
            CurlFailure::NoAnswer
        );
        assert_eq!(
            curl_failure(&e(7, "curl: (7) Failed to connect: No route to host")),
            CurlFailure::NoAnswer
        );
        assert_eq!(
            curl_failure(&e(7, "curl: (7) Failed to connect: Connection refused")),
            CurlFailure::Other("curl exited 7: (7) Failed to connect: Connection refused".into())
        );
    }

    #[test]
    fn answers_must_come_from_the_server_cluster() {
        let body =
            r#"{"pod":"verify-server-x","cluster":"west","node":"west-n1","podIP":"10.174.0.5"}"#;
        assert_eq!(
            answered_by(body, "west").as_deref(),
            Ok("west/verify-server-x on west-n1")
        );
        assert!(
            answered_by(body, "east")
                .unwrap_err()
                .contains("rather than east's")
        );
        assert!(
            answered_by("<html>", "west")
                .unwrap_err()
                .contains("not the stand-in")
        );
    }

    #[test]
    fn lines_and_summary_read_like_subctls() {
        let checks = vec![
            Check::new("tunnel", Outcome::Pass, "up"),
            Check::new("pod-to-pod", Outcome::Skip, "Globalnet"),
            Check::new("DNS", Outcome::Fail, "did not resolve"),
        ];
        assert_eq!(checks[1].line(), " - pod-to-pod: skipped: Globalnet");
        assert_eq!(checks[2].line(), " ✗ DNS: did not resolve");
        assert_eq!(
            summary(&checks),
            ("1 passed, 1 failed, 1 skipped".into(), 1)
        );
    }
}
