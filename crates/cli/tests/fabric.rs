//! The cross-cluster network fabric end to end: netns members with
//! gateways on a shared underlay, joined with `flotilla join`, their
//! pods calling each other's pods, Services and ClusterSetIPs with curl
//! and resolving `clusterset.local` from inside pods; a gateway killed
//! and taken over, the underlay cut and restored, overlapping CIDRs
//! through Globalnet, and what goes wrong said on the Gateway objects.
//! Like the runtime's tests they need root, and are skipped only when
//! FLOTILLA_SKIP_NETNS_AS_ROOT=1 says so.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fleet::{SHORT_THRESHOLDS, jsonpath, stderr};
use common::underlay::{Underlay, rand_u32};
use common::{Running, Server, assert_has, flotilla, wait_for};

const WAIT: Duration = Duration::from_secs(90);

use common::can_run_netns as can_run;

/// An underlay of the test's own, removed on drop.
fn member(name: &str, underlay: &Underlay, pod_cidr: &str, service_cidr: &str) -> Server {
    member_with_env(name, underlay, pod_cidr, service_cidr, &[])
}

fn member_with_env(
    name: &str,
    underlay: &Underlay,
    pod_cidr: &str,
    service_cidr: &str,
    env: &[(&str, &str)],
) -> Server {
    Server::netns_member_with_env(
        name,
        &[
            "--nodes",
            "2",
            "--underlay",
            &underlay.0,
            "--pod-cidr",
            pod_cidr,
            "--service-cidr",
            service_cidr,
        ],
        env,
    )
}

fn join(hub: &Server, name: &str, m: &Server, extra: &[&str]) {
    let mut args = vec![
        "join",
        name,
        "--kubeconfig",
        hub.kubeconfig.to_str().unwrap(),
        "--cluster-kubeconfig",
        m.kubeconfig.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = flotilla(&args);
    assert!(out.status.success(), "join {name}: {}", stderr(&out));
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &["joined the network fabric"],
    );
}

/// The member's Gateway objects.
fn gateways(m: &Server) -> Vec<serde_json::Value> {
    let out = m.kubectl(&[
        "get",
        "gateways.submariner.io",
        "-n",
        "submariner-operator",
        "-o",
        "json",
    ]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn active(m: &Server) -> Option<serde_json::Value> {
    gateways(m)
        .into_iter()
        .find(|g| g["status"]["haStatus"] == "active")
}

/// Each connection of the member's active gateway: "cluster=status: message" lines.
fn connection_messages(m: &Server) -> String {
    let Some(g) = active(m) else {
        return String::new();
    };
    g["status"]["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}: {}\n",
                c["endpoint"]["cluster_id"].as_str().unwrap_or_default(),
                c["status"].as_str().unwrap_or_default(),
                c["statusMessage"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Each connection of the member's active gateway: "cluster=status ".
fn connections(m: &Server) -> String {
    connection_messages(m)
        .lines()
        .map(|l| format!("{} ", l.split(':').next().unwrap_or_default()))
        .collect()
}

/// The network namespace of node `node` (`<member>-node-<i>`).
fn node_netns(m: &Server, node: &str) -> String {
    let prefix = std::fs::read_to_string(m.data_dir().join("netns-prefix")).unwrap_or_default();
    format!(
        "{}-n{}",
        prefix.trim(),
        node.rsplit('-').next().unwrap_or("0")
    )
}

fn active_gateway(m: &Server) -> String {
    active(m)
        .and_then(|g| g["metadata"]["name"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn wait_connected(m: &Server, clusters: &[&str]) {
    let mut last = String::new();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        last = connections(m);
        if clusters
            .iter()
            .all(|c| last.contains(&format!("{c}=connected")))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let gateways = m.kubectl(&[
        "get",
        "gateways.submariner.io",
        "-n",
        "submariner-operator",
        "-o",
        "yaml",
    ]);
    let logs = gateway_logs(m);
    panic!(
        "not connected to {clusters:?}: {last}\n{}\ngateway logs:\n{logs}",
        String::from_utf8_lossy(&gateways.stdout),
    );
}

/// What the member's gateways logged.
fn gateway_logs(m: &Server) -> String {
    std::fs::read_dir(m.data_dir().join("gateways"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}

/// Runs `cmd` in `pod` of `m`; its stdout, or None when it failed.
fn exec(m: &Server, pod: &str, cmd: &[&str]) -> Option<String> {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(cmd);
    let out = m.kubectl(&args);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn curl(m: &Server, pod: &str, url: &str) -> Option<String> {
    exec(m, pod, &["curl", "-sS", "-m", "3", url])
}

/// Waits until `url` answers in `pod` with a body containing `want`.
fn wait_curl(m: &Server, pod: &str, url: &str, want: &str) -> Duration {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < WAIT {
        last = curl(m, pod, url);
        if last.as_deref().is_some_and(|b| b.contains(want)) {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{url} from {pod} never answered with {want:?}; last: {last:?}");
}

const CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers:
  - {name: main, image: busybox, command: ["sleep", "3600"]}
"#;

/// The Service users read about: payment-api in production, exported.
fn app(name: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: production}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: production}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: api
        image: example/{name}:1.0
        ports: [{{name: http, containerPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: production}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: 8080, targetPort: http}}]
"#
    )
}

fn export(m: &Server, name: &str) {
    let out = flotilla(&[
        "export",
        "service",
        name,
        "-n",
        "production",
        "--kubeconfig",
        m.kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "export: {}", stderr(&out));
}

fn pod_ip(m: &Server, ns: &str, selector: &str) -> String {
    let mut ip = String::new();
    wait_for(WAIT, "a running pod with an IP", || {
        ip = jsonpath(
            m,
            &["get", "pods", "-n", ns, "-l", selector],
            "{.items[?(@.status.phase==\"Running\")].status.podIP}",
        );
        !ip.is_empty()
    });
    ip.split_whitespace().next().unwrap_or_default().to_string()
}

/// Captures the underlay's bridge and a gateway node's tunnel device
/// while `send` runs; returns both captures' bytes.
fn capture(underlay: &Underlay, member_netns: &str, send: impl FnOnce()) -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |netns: &str, iface: &str, file: &str| {
        Command::new("ip")
            .args([
                "netns", "exec", netns, "tcpdump", "-U", "-n", "-i", iface, "-w",
            ])
            .arg(dir.path().join(file))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join(format!("{file}.err"))).expect("log"))
            .spawn()
            .expect("tcpdump (bash .ci/run installs it)")
    };
    let mut on_underlay = start(&underlay.0, "ul0", "underlay.pcap");
    let mut on_member = start(member_netns, "submariner", "member.pcap");
    wait_for(Duration::from_secs(10), "tcpdump listening", || {
        ["underlay.pcap.err", "member.pcap.err"].iter().all(|f| {
            std::fs::read_to_string(dir.path().join(f)).is_ok_and(|t| t.contains("listening on"))
        })
    });
    send();
    std::thread::sleep(Duration::from_millis(1500));
    for c in [&mut on_underlay, &mut on_member] {
        let _ = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
        let _ = c.wait();
    }
    for f in ["underlay.pcap.err", "member.pcap.err"] {
        eprintln!(
            "{f}: {}",
            std::fs::read_to_string(dir.path().join(f)).unwrap_or_default()
        );
    }
    (
        std::fs::read(dir.path().join("underlay.pcap")).unwrap_or_default(),
        std::fs::read(dir.path().join("member.pcap")).unwrap_or_default(),
    )
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn members_reach_each_others_pods_services_and_clusterset_names() {
    if !can_run() {
        return;
    }
    let underlay = Underlay::new();
    let hub = Server::controlplane(&SHORT_THRESHOLDS);
    // east and south overlap (same pod and service CIDRs): Globalnet;
    // west has its own, and is routed directly.
    let east = member("east", &underlay, "10.201.0.0/16", "10.96.0.0/16");
    let south = member("south", &underlay, "10.201.0.0/16", "10.96.0.0/16");
    let west = member("west", &underlay, "10.202.0.0/16", "10.97.0.0/16");
    join(&hub, "east", &east, &["--globalnet"]);
    join(&hub, "south", &south, &["--globalnet"]);
    join(&hub, "west", &west, &[]);
    let joined = Instant::now();
    wait_connected(&east, &["west", "south"]);
    wait_connected(&west, &["east", "south"]);
    wait_connected(&south, &["east", "west"]);
    eprintln!(
        "full mesh of 3 connected {:?} after the last join",
        joined.elapsed()
    );
    // The gateways connected with an identity of their own, confined to
    // what a gateway does.
    let gateway_kubeconfig = east.data_dir().join("gateways/gateway.kubeconfig");
    let whoami = east.ok(&[
        "--kubeconfig",
        gateway_kubeconfig.to_str().unwrap(),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        whoami,
        "system:serviceaccount:submariner-operator:submariner-gateway"
    );
    let gateway = "system:serviceaccount:submariner-operator:submariner-gateway";
    for (args, expected) in [
        (
            &[
                "update",
                "endpoints.submariner.io",
                "-n",
                "submariner-operator",
            ][..],
            "yes",
        ),
        (&["get", "secrets", "-n", "submariner-operator"], "yes"),
        (&["get", "secrets", "-n", "default"], "no"),
        (&["create", "namespaces"], "no"),
        (&["create", "pods", "-n", "default"], "no"),
    ] {
        let mut all = vec!["auth", "can-i", "--as", gateway];
        all.extend_from_slice(args);
        let out = east.kubectl(&all);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            expected,
            "{args:?}"
        );
    }

    // The broker holds each cluster and its endpoint; Globalnet's
    // allocations show in the members.
    let broker = hub.ok(&[
        "get",
        "endpoints.submariner.io",
        "-n",
        "submariner-k8s-broker",
    ]);
    assert_has(
        &broker,
        &[
            "east-submariner-cable-east-",
            "west-",
            "south-",
            "wireguard",
        ],
    );
    let east_global = jsonpath(
        &hub,
        &[
            "get",
            "clusters.submariner.io",
            "east",
            "-n",
            "submariner-k8s-broker",
        ],
        "{.spec.global_cidr[0]}",
    );
    assert!(east_global.starts_with("242."), "{east_global}");
    let egress = jsonpath(
        &east,
        &[
            "get",
            "clusterglobalegressips.submariner.io",
            "cluster-egress.submariner.io",
        ],
        "{.status.allocatedIPs}",
    );
    assert_eq!(egress.matches("242.").count(), 8, "{egress}");

    for m in [&east, &south, &west] {
        m.ok_stdin(&["apply", "-f", "-"], CLIENT);
    }
    west.ok_stdin(&["apply", "-f", "-"], &app("payment-api"));
    east.ok_stdin(&["apply", "-f", "-"], &app("orders"));
    export(&west, "payment-api");
    export(&east, "orders");
    for m in [&east, &south, &west] {
        wait_for(WAIT, "the client pod running", || {
            jsonpath(m, &["get", "pod", "client"], "{.status.phase}") == "Running"
        });
    }

    // Pod to pod and pod to ClusterIP, routed directly (west's addresses),
    // from an overlapping cluster whose pods leave SNATed.
    let payment_pod = pod_ip(&west, "production", "app=payment-api");
    wait_curl(
        &east,
        "client",
        &format!("http://{payment_pod}:8080/"),
        "\"cluster\":\"west\"",
    );
    let payment_ip = jsonpath(
        &west,
        &["get", "svc", "payment-api", "-n", "production"],
        "{.spec.clusterIP}",
    );
    wait_curl(
        &east,
        "client",
        &format!("http://{payment_ip}:8080/"),
        "\"cluster\":\"west\"",
    );

    // The scenario from the README, verbatim, from two clusters.
    let url = "http://payment-api.production.svc.clusterset.local:8080/health";
    for m in [&east, &south] {
        wait_curl(m, "client", url, "ok");
    }
    let resolved = exec(
        &east,
        "client",
        &[
            "getent",
            "hosts",
            "payment-api.production.svc.clusterset.local",
        ],
    )
    .unwrap_or_default();
    let clusterset_ip = jsonpath(
        &east,
        &["get", "serviceimport", "payment-api", "-n", "production"],
        "{.spec.ips[0]}",
    );
    assert!(
        !clusterset_ip.is_empty() && resolved.starts_with(&clusterset_ip),
        "{resolved} vs {clusterset_ip}"
    );

    // A Globalnet cluster's Service: reached through its global ingress
    // IP, from a routed cluster and from the cluster it overlaps with.
    let orders = "http://orders.production.svc.clusterset.local:8080/";
    wait_curl(&west, "client", orders, "\"cluster\":\"east\"");
    wait_curl(&south, "client", orders, "\"cluster\":\"east\"");
    let giip = jsonpath(
        &east,
        &[
            "get",
            "globalingressips.submariner.io",
            "orders",
            "-n",
            "production",
        ],
        "{.status.allocatedIP}",
    );
    assert!(giip.starts_with("242."), "{giip}");

    // A Globalnet cluster's headless Service: each pod has a global IP,
    // and the name answers those, from a routed cluster.
    east.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Service\nmetadata: {name: ledger, namespace: production}\n\
         spec:\n  clusterIP: None\n  selector: {app: orders}\n  ports: [{name: http, port: 8080}]\n",
    );
    export(&east, "ledger");
    let ledger = "ledger.production.svc.clusterset.local";
    let mut answers = String::new();
    wait_for(WAIT, "the headless import's global pod IPs", || {
        answers = exec(&west, "client", &["getent", "ahostsv4", ledger]).unwrap_or_default();
        answers.contains("242.")
    });
    let local = pod_ip(&east, "production", "app=orders");
    assert!(
        !answers.contains(&local),
        "{answers}: pod IPs of east leaked"
    );
    wait_curl(
        &west,
        "client",
        &format!("http://{ledger}:8080/"),
        "\"cluster\":\"east\"",
    );

    // On the underlay, only WireGuard: a marker sent across is nowhere in
    // the capture there, and is on the sending gateway's tunnel device,
    // where packets are still plaintext.
    let marker = format!("flotilla-plaintext-{:08x}", rand_u32());
    let gateway_netns = node_netns(&west, &active_gateway(&west));
    let (on_underlay, on_member) = capture(&underlay, &gateway_netns, || {
        let data = format!("x={marker}");
        exec(
            &west,
            "client",
            &["curl", "-sS", "-m", "3", "-d", &data, orders],
        )
        .expect("the marker's request");
    });
    assert!(
        contains(&on_member, marker.as_bytes()),
        "the capture works: the marker is on the gateway's tunnel device ({gateway_netns}: {} bytes captured, underlay {} bytes); gateways: {:#?}",
        on_member.len(),
        on_underlay.len(),
        gateways(&west)
            .iter()
            .map(|g| (
                g["metadata"]["name"].clone(),
                g["status"]["haStatus"].clone()
            ))
            .collect::<Vec<_>>()
    );
    assert!(!on_underlay.is_empty(), "traffic crossed the underlay");
    assert!(
        !contains(&on_underlay, marker.as_bytes()),
        "plaintext on the underlay"
    );

    // `flotilla network verify` passes, routed and through Globalnet.
    for (from, to) in [("east", "west"), ("west", "east")] {
        let out = flotilla(&[
            "network",
            "verify",
            "--from",
            from,
            "--to",
            to,
            "--kubeconfig",
            hub.kubeconfig.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "verify {from} -> {to}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }
    let show = flotilla(&[
        "network",
        "show",
        "connections",
        "--kubeconfig",
        hub.kubeconfig.to_str().unwrap(),
    ]);
    assert_has(
        &String::from_utf8_lossy(&show.stdout),
        &["Cluster \"east\"", "connected", "wireguard"],
    );

    // The active gateway's metrics, named as Submariner's.
    let log = gateway_logs(&west);
    let metrics_url = log
        .lines()
        .filter_map(|l| l.split("metrics on ").nth(1))
        .map(str::trim)
        .collect::<Vec<_>>();
    let scraped: String = metrics_url
        .iter()
        .filter_map(|url| {
            let out = Command::new("curl")
                .args(["-s", "-m", "3", url])
                .output()
                .ok()?;
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .collect();
    assert_has(
        &scraped,
        &[
            "submariner_gateways 1",
            "submariner_connections{",
            "status=\"connected\"",
            "remote_cluster=\"east\"",
            "submariner_connection_latency_seconds{",
            "submariner_gateway_rx_bytes{",
        ],
    );

    // The active gateway killed: the standby takes over, traffic flows.
    let was = active_gateway(&west);
    let pid = std::fs::read_to_string(west.data_dir().join("gateways").join(format!("{was}.pid")))
        .expect("pid file");
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    let deadline = Instant::now() + WAIT;
    loop {
        let actives: Vec<String> = gateways(&west)
            .iter()
            .filter(|g| g["status"]["haStatus"] == "active")
            .filter_map(|g| g["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        if actives.len() == 1 && actives[0] != was {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no takeover from {was}: active {actives:?}\ngateway logs:\n{}",
            gateway_logs(&west)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = wait_curl(
        &east,
        "client",
        &format!("http://{payment_ip}:8080/"),
        "\"cluster\":\"west\"",
    );
    eprintln!(
        "gateway takeover: traffic again {:?} after the kill",
        killed.elapsed()
    );
    let _ = took;
    wait_connected(&west, &["east", "south"]);

    // The underlay cut: connections fail; restored: they come back.
    underlay.cut();
    assert!(
        curl(&east, "client", &format!("http://{payment_ip}:8080/")).is_none(),
        "no path while cut"
    );
    wait_for(WAIT, "connections in error while cut", || {
        !connections(&east).contains("west=connected")
    });
    let restored = Instant::now();
    underlay.restore();
    wait_curl(
        &east,
        "client",
        &format!("http://{payment_ip}:8080/"),
        "\"cluster\":\"west\"",
    );
    eprintln!(
        "underlay restored: traffic again after {:?}",
        restored.elapsed()
    );
    wait_connected(&east, &["west", "south"]);

    // Unjoined: the others drop its tunnel and routes.
    let south_global = jsonpath(
        &hub,
        &[
            "get",
            "clusters.submariner.io",
            "south",
            "-n",
            "submariner-k8s-broker",
        ],
        "{.spec.global_cidr[0]}",
    );
    assert!(south_global.starts_with("242."), "{south_global}");
    let out = flotilla(&[
        "unjoin",
        "south",
        "--kubeconfig",
        hub.kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "unjoin: {}", stderr(&out));
    wait_for(WAIT, "south gone from east's connections", || {
        !connections(&east).contains("south=")
    });
    let east_router =
        std::fs::read_to_string(east.data_dir().join("netns-prefix")).unwrap_or_default();
    let routes = Command::new("ip")
        .args(["-n", east_router.trim(), "route"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        !routes.contains(&south_global),
        "south's route left behind:\n{routes}"
    );

    // The hub down: names still resolve (from each member's own imports)
    // and traffic still flows, even through a gateway that takes over
    // meanwhile (it connects from the member's copies of the endpoints).
    let mut hub = hub;
    hub.kill9();
    wait_curl(&east, "client", url, "ok");
    let was = active_gateway(&west);
    let pid = std::fs::read_to_string(west.data_dir().join("gateways").join(format!("{was}.pid")))
        .expect("pid file");
    let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    wait_for(WAIT, "a takeover while the hub is down", || {
        let now = active_gateway(&west);
        !now.is_empty() && now != was
    });
    wait_curl(&east, "client", url, "ok");
    wait_curl(&west, "client", orders, "\"cluster\":\"east\"");
}

fn wait_message(m: &Server, cluster: &str, status: &str, text: &str) {
    let mut last = String::new();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        last = connection_messages(m);
        if last
            .lines()
            .any(|l| l.starts_with(&format!("{cluster}={status}: ")) && l.contains(text))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("no {status} connection to {cluster} saying {text:?}:\n{last}");
}

/// The public keys of `cluster`'s endpoints on the broker, space-separated.
fn broker_key(hub: &Server, cluster: &str) -> String {
    let out = hub.kubectl(&[
        "get",
        "endpoints.submariner.io",
        "-n",
        "submariner-k8s-broker",
        "-o",
        "json",
    ]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["spec"]["cluster_id"] == cluster)
        .filter_map(|e| e["spec"]["backend_config"]["publicKey"].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn broker_endpoint(hub: &Server, name: &str, cluster: &str, ip: &str, key: &str, subnet: &str) {
    let yaml = format!(
        r#"
apiVersion: submariner.io/v1
kind: Endpoint
metadata: {{name: {name}, namespace: submariner-k8s-broker}}
spec:
  cluster_id: {cluster}
  cable_name: submariner-cable-{cluster}-x
  hostname: {cluster}-gw
  subnets: ["{subnet}"]
  private_ip: {ip}
  public_ip: {ip}
  nat_enabled: false
  backend: wireguard
  backend_config: {{publicKey: "{key}"}}
"#
    );
    hub.ok_stdin(&["apply", "-f", "-"], &yaml);
}

#[test]
fn what_cannot_connect_is_said_and_the_rest_keeps_working() {
    if !can_run() {
        return;
    }
    let underlay = Underlay::new();
    let hub = Server::controlplane(&SHORT_THRESHOLDS);
    // a and b overlap, without Globalnet; c is distinct.
    let a = member("a", &underlay, "10.211.0.0/16", "10.98.0.0/16");
    let b = member("b", &underlay, "10.211.0.0/16", "10.98.0.0/16");
    let c = member("c", &underlay, "10.212.0.0/16", "10.99.0.0/16");
    join(&hub, "a", &a, &[]);
    join(&hub, "b", &b, &[]);
    join(&hub, "c", &c, &[]);
    // d is a Pull member: its agent joins it to the fabric with its own
    // token, which may write only d's objects on the broker.
    let d = member("d", &underlay, "10.213.0.0/16", "10.100.0.0/16");
    let agent_kubeconfig = hub.dir.path().join("d-agent.kubeconfig");
    let out = flotilla(&[
        "token",
        "create",
        "--kubeconfig",
        hub.kubeconfig.to_str().unwrap(),
        "--cluster",
        "d",
        "--write-kubeconfig",
        agent_kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "token: {}", stderr(&out));
    let _agent = Running::start(&[
        "agent",
        "--cluster-name",
        "d",
        "--kubeconfig",
        agent_kubeconfig.to_str().unwrap(),
        "--cluster-kubeconfig",
        d.kubeconfig.to_str().unwrap(),
        "--cluster-status-update-frequency",
        "500ms",
        "--cluster-lease-duration",
        "2s",
    ]);
    wait_connected(&a, &["c", "d"]);
    wait_connected(&d, &["a", "c"]);
    wait_message(&a, "b", "error", "overlap this cluster's 10.211.0.0/16");
    wait_message(&a, "b", "error", "Globalnet");
    // Nothing of b's is routed in a: only c's subnets go to the tunnel.
    let node = active_gateway(&a);
    let prefix = std::fs::read_to_string(a.data_dir().join("netns-prefix")).unwrap_or_default();
    let node_netns = format!(
        "{}-n{}",
        prefix.trim(),
        node.rsplit('-').next().unwrap_or("0")
    );
    let routes = Command::new("ip")
        .args(["-n", &node_netns, "route", "show", "dev", "submariner"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(routes.contains("10.212.0.0/16"), "c is routed:\n{routes}");
    assert!(
        !routes.contains("10.211."),
        "b's overlapping subnets are not routed:\n{routes}"
    );

    // Endpoints that cannot be used: a key that is no key, an address
    // nobody answers on. Each says why; c stays connected.
    broker_endpoint(
        &hub,
        "ghost-bad-key",
        "ghost",
        "100.64.255.249",
        "not-a-key",
        "10.250.0.0/16",
    );
    // Any 32 bytes are a valid Curve25519 public key.
    let valid_key = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    broker_endpoint(
        &hub,
        "far-unreachable",
        "far",
        "100.64.255.250",
        valid_key,
        "10.251.0.0/16",
    );
    wait_message(&a, "ghost", "error", "is not a WireGuard public key");
    wait_message(&a, "far", "connecting", "no initial handshake yet");
    wait_message(&a, "far", "error", "unreachable");
    assert!(
        connections(&a).contains("c=connected"),
        "{}",
        connections(&a)
    );

    // Two clusters claiming one cluster ID: the second is refused.
    let secret = b.ok(&[
        "get",
        "secret",
        "submariner-broker-secret",
        "-n",
        "submariner-operator",
        "-o",
        "json",
    ]);
    let c_id = "Yw=="; // base64 of "c"
    let forged = secret.replacen(
        &format!("\"clusterID\": \"{}\"", "Yg=="),
        &format!("\"clusterID\": \"{c_id}\""),
        1,
    );
    assert_ne!(forged, secret, "the Secret names b");
    b.ok_stdin(&["replace", "-f", "-"], &forged);
    wait_for(
        WAIT,
        "b's gateway refusing the duplicate cluster ID",
        || {
            gateways(&b).iter().any(|g| {
                g["status"]["statusFailure"]
                    .as_str()
                    .is_some_and(|f| f.contains("is already used by another cluster"))
            })
        },
    );
    assert!(
        connections(&a).contains("c=connected"),
        "{}",
        connections(&a)
    );

    // c's key rotated (a new Secret, its gateways restarted): a follows.
    let old_key = broker_key(&hub, "c");
    c.ok(&[
        "delete",
        "secret",
        "submariner-wireguard-key",
        "-n",
        "submariner-operator",
    ]);
    for node in ["c-node-0", "c-node-1"] {
        if let Ok(pid) =
            std::fs::read_to_string(c.data_dir().join("gateways").join(format!("{node}.pid")))
        {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
    wait_for(WAIT, "c's new key on the broker", || {
        let now = broker_key(&hub, "c");
        !now.is_empty() && now != old_key && !now.contains(' ')
    });
    wait_connected(&a, &["c"]);

    // An export whose pods do not serve its port says so.
    c.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: misport, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: misport}}
  template:
    metadata: {labels: {app: misport}}
    spec:
      containers:
      - {name: web, image: example/web, ports: [{containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: misport, namespace: default}
spec:
  selector: {app: misport}
  ports: [{name: http, port: 80, targetPort: 9999}]
"#,
    );
    let out = flotilla(&[
        "export",
        "service",
        "misport",
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "export: {}", stderr(&out));
    let deadline = Instant::now() + WAIT;
    loop {
        let export = c.kubectl(&[
            "get",
            "serviceexports.multicluster.x-k8s.io",
            "misport",
            "-o",
            "json",
        ]);
        let export: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap_or_default();
        let said = export["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Reachable"
                    && c["status"] == "False"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("do not serve"))
            });
        if said {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no Reachable=False condition on the export: {export:#}\ngateway logs:\n{}",
            gateway_logs(&c)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A gateway stopped right after it made and stored its cluster's new
/// WireGuard key, before it published an Endpoint with it (the
/// `gateway-after-key-made` failpoint, as kill -9 there): the member
/// starts the gateway again, which takes the stored key rather than make
/// another, publishes it, and the clusters connect.
#[test]
fn a_gateway_stopped_after_making_its_key_comes_back_with_that_key() {
    if !can_run() {
        return;
    }
    let underlay = Underlay::new();
    let hub = Server::controlplane(&SHORT_THRESHOLDS);
    let east = member_with_env(
        "east",
        &underlay,
        "10.211.0.0/16",
        "10.98.0.0/16",
        &[(common::FAILPOINTS, "gateway-after-key-made=return(crash)")],
    );
    let west = member("west", &underlay, "10.212.0.0/16", "10.99.0.0/16");
    join(&hub, "east", &east, &[]);
    join(&hub, "west", &west, &[]);
    wait_connected(&east, &["west"]);
    wait_connected(&west, &["east"]);
    // The gateway that made the key stopped there, and was started again.
    assert_has(&east.log(), &["the gateway exited; restarting it"]);
    let stored = east.ok(&[
        "get",
        "secret",
        "submariner-wireguard-key",
        "-n",
        "submariner-operator",
        "-o",
        "jsonpath={.data.publicKey}",
    ]);
    let stored = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, stored.trim())
            .expect("base64"),
    )
    .expect("utf-8");
    assert_eq!(broker_key(&hub, "east"), stored, "one key, the stored one");
}
