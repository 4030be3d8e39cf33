//! Multi-cluster services end to end: Services exported from members
//! become one ServiceImport everywhere, their endpoints follow, conflicts
//! say who won, and `flotilla dns` answers for them, read with `dig`.

mod common;

use std::process::Command;
use std::time::Duration;

use common::fleet::{Fleet, jsonpath, member_fault};
use common::{Running, Server, assert_has, flotilla, wait_for, which};

const WAIT: Duration = Duration::from_secs(60);

/// A fleet of three members with pod ranges of their own, so that
/// endpoints tell their clusters apart.
fn fleet() -> Fleet {
    fleet_with_hub_args(&[])
}

fn fleet_with_hub_args(hub_args: &[&str]) -> Fleet {
    let mut fleet = Fleet::with_args(&[], &[], hub_args);
    for (i, (name, region)) in [
        ("member1", "us-east"),
        ("member2", "eu-west"),
        ("member3", "ap-south"),
    ]
    .into_iter()
    .enumerate()
    {
        let cidr = format!("10.{}.0.0/16", 10 + i);
        let m = Server::member(name, &["--nodes", "2", "--pod-cidr", &cidr]);
        fleet.members.push((name.to_string(), m));
        fleet.join(name, region);
    }
    for name in ["member1", "member2", "member3"] {
        fleet.wait_ready(name);
    }
    fleet
}

fn app(name: &str, replicas: u32, service: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - {{name: {name}, image: nginx:1.27}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: shop}}
spec:
  selector: {{app: {name}}}
{service}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: {name}, namespace: shop}}
"#
    )
}

const WEB_PORTS: &str = "  ports: [{name: http, port: 80, targetPort: 8080}]";
const DB_HEADLESS: &str = "  clusterIP: None\n  ports: [{name: sql, port: 5432}]";

fn apply(m: &Server, yaml: &str) {
    let out = m.kubectl_stdin(&["apply", "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dig` against the fleet's DNS; `+short` lines, or the status line.
fn dig(port: u16, args: &[&str]) -> String {
    let dig =
        which("dig").expect("dig not found: install Debian's dnsutils (bash .ci/run does it)");
    let out = Command::new(dig)
        .args(["@127.0.0.1", "-p", &port.to_string(), "+time=2", "+tries=1"])
        .args(args)
        .output()
        .expect("run dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn short(port: u16, args: &[&str]) -> Vec<String> {
    let mut all = vec!["+short"];
    all.extend_from_slice(args);
    let mut lines: Vec<String> = dig(port, &all).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// What a DNS server prints once it serves, from `flotilla dns` or the
/// control plane's log.
const SERVING: &str = "serving clusterset.local on";

/// The port in the line a DNS server printed when it started to serve.
/// Tests listen on port 0 and read it back: a port picked beforehand may
/// be taken by the time the server binds it.
fn serving_port(line: &str) -> u16 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"))
}

fn condition(m: &Server, kind: &str, name: &str, type_: &str, field: &str) -> String {
    jsonpath(
        m,
        &["get", kind, name, "-n", "shop"],
        &format!("{{.status.conditions[?(@.type==\"{type_}\")].{field}}}"),
    )
}

/// The import slices of `web` in `m`: `source=addresses;` per slice.
fn slices(m: &Server) -> String {
    jsonpath(
        m,
        &[
            "get",
            "endpointslices",
            "-n",
            "shop",
            "-l",
            "multicluster.kubernetes.io/service-name=web",
        ],
        "{range .items[*]}{.metadata.labels.multicluster\\.kubernetes\\.io/source-cluster}={.endpoints[*].addresses[0]};{end}",
    )
}

/// How many of `web`'s endpoints `m` imports from `cluster`.
fn count(m: &Server, cluster: &str) -> usize {
    slices(m)
        .split(';')
        .find(|s| s.starts_with(&format!("{cluster}=")))
        .map_or(0, |s| {
            s.split_once('=')
                .map_or(0, |(_, ips)| ips.split_whitespace().count())
        })
}

#[test]
fn exported_services_are_imported_everywhere_and_resolve_in_clusterset_local() {
    let fleet = fleet();
    let (m1, m2, m3) = (
        fleet.member("member1"),
        fleet.member("member2"),
        fleet.member("member3"),
    );
    apply(m1, &app("web", 2, WEB_PORTS));
    apply(m2, &app("web", 1, WEB_PORTS));

    // One import in every member (member3 exports nothing), from both.
    let import =
        |m: &Server, path: &str| jsonpath(m, &["get", "serviceimport", "web", "-n", "shop"], path);
    wait_for(
        WAIT,
        "the import in member3 from member1 and member2",
        || import(m3, "{.status.clusters[*].cluster}") == "member1 member2",
    );
    assert_eq!(import(m3, "{.spec.type}"), "ClusterSetIP");
    assert_eq!(
        import(m3, "{.spec.ports[0].name}:{.spec.ports[0].port}"),
        "http:80"
    );
    let ip = import(m3, "{.spec.ips[0]}");
    assert!(ip.starts_with("243.0."), "{ip}");
    assert_eq!(
        import(m1, "{.spec.ips[0]}"),
        ip,
        "the same ClusterSetIP everywhere"
    );
    assert_eq!(
        jsonpath(
            &fleet.hub,
            &["get", "serviceimport", "web", "-n", "shop"],
            "{.spec.ips[0]}"
        ),
        ip
    );
    wait_for(WAIT, "a slice per source cluster in member3", || {
        count(m3, "member1") == 2 && count(m3, "member2") == 1
    });
    assert!(slices(m3).contains("member1=10.10."), "{}", slices(m3));
    for (field, want) in [("status", "True"), ("reason", "Exported")] {
        assert_eq!(condition(m1, "serviceexport", "web", "Ready", field), want);
    }
    assert_eq!(
        condition(m1, "serviceexport", "web", "Valid", "status"),
        "True"
    );
    assert_eq!(
        condition(m1, "serviceexport", "web", "Conflict", "reason"),
        "NoConflicts"
    );

    // Scaling a source changes its slice everywhere.
    m1.ok(&["scale", "deploy", "web", "-n", "shop", "--replicas", "3"]);
    wait_for(WAIT, "member1's slice with 3 endpoints", || {
        count(m3, "member1") == 3
    });

    // DNS, read with a real resolver client, over UDP and TCP.
    let hub = fleet.hub.kubeconfig.to_str().unwrap().to_string();
    let mut dns = Running::start(&["dns", "--kubeconfig", &hub, "--listen", "127.0.0.1:0"]);
    let port = serving_port(&dns.wait_for_line(SERVING, WAIT));
    wait_for(WAIT, "DNS to answer", || {
        short(port, &["web.shop.svc.clusterset.local", "A"]) == [ip.clone()]
    });
    assert_eq!(
        short(port, &["+tcp", "web.shop.svc.clusterset.local", "A"]),
        vec![ip.to_string()]
    );
    assert_eq!(
        short(port, &["dns-version.clusterset.local", "TXT"]),
        ["\"1.0.0\""]
    );
    assert_eq!(
        short(port, &["_http._tcp.web.shop.svc.clusterset.local", "SRV"]),
        ["0 100 80 web.shop.svc.clusterset.local."]
    );
    assert_eq!(
        short(port, &["-x", &ip]),
        ["web.shop.svc.clusterset.local."]
    );
    // No per-cluster names for a ClusterSetIP service; unknown names are
    // NXDOMAIN; other zones are refused.
    assert_has(
        &dig(port, &["member1.web.shop.svc.clusterset.local", "A"]),
        &["status: NXDOMAIN"],
    );
    assert_has(
        &dig(port, &["nope.shop.svc.clusterset.local", "A"]),
        &["status: NXDOMAIN"],
    );
    assert_has(&dig(port, &["example.com", "A"]), &["status: REFUSED"]);

    // Services exported all at once get ClusterSetIPs of their own,
    // however quickly the hub's imports follow one another.
    let burst: String = (0..8)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: burst-{i}, namespace: shop}}\nspec: {{selector: {{app: burst-{i}}}, ports: [{{port: 80}}]}}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: burst-{i}, namespace: shop}}\n---\n"
            )
        })
        .collect();
    apply(m2, &burst);
    let burst_ips = || {
        jsonpath(
            &fleet.hub,
            &["get", "serviceimports", "-n", "shop"],
            "{range .items[*]}{.metadata.name}={.spec.ips[0]} {end}",
        )
        .split_whitespace()
        .filter(|p| p.starts_with("burst-") && !p.ends_with('='))
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    wait_for(WAIT, "the 8 burst imports with their IPs", || {
        burst_ips().len() == 8
    });
    let mut given: Vec<String> = burst_ips()
        .iter()
        .map(|p| p.split_once('=').unwrap().1.to_string())
        .chain([ip.clone()])
        .collect();
    given.sort();
    given.dedup();
    assert_eq!(
        given.len(),
        9,
        "a ClusterSetIP given twice: {:?}",
        burst_ips()
    );
    assert_eq!(
        short(port, &["burst-7.shop.svc.clusterset.local", "A"]),
        [burst_ips()
            .iter()
            .find_map(|p| p.strip_prefix("burst-7="))
            .unwrap()
            .to_string()]
    );

    // A headless service: one record per ready endpoint, per cluster.
    apply(m1, &app("db", 1, DB_HEADLESS));
    apply(m2, &app("db", 1, DB_HEADLESS));
    let db = || short(port, &["db.shop.svc.clusterset.local", "A"]);
    wait_for(WAIT, "db's endpoints from both clusters", || {
        let ips = db();
        ips.len() == 2 && ips[0].starts_with("10.10.") && ips[1].starts_with("10.11.")
    });
    let srv = short(port, &["_sql._tcp.db.shop.svc.clusterset.local", "SRV"]);
    assert_eq!(srv.len(), 2, "{srv:?}");
    assert!(
        srv[0].contains(".member1.db.shop.svc.clusterset.local."),
        "{srv:?}"
    );
    let target = srv[0].split_whitespace().last().unwrap().to_string();
    assert_eq!(short(port, &[&target, "A"]), [db()[0].clone()]);
    // Readiness: no ready endpoint in member2, then none at all.
    m2.ok(&["scale", "deploy", "db", "-n", "shop", "--replicas", "0"]);
    wait_for(WAIT, "db without member2", || {
        let ips = db();
        ips.len() == 1 && ips[0].starts_with("10.10.")
    });
    m1.ok(&["scale", "deploy", "db", "-n", "shop", "--replicas", "0"]);
    wait_for(WAIT, "db NXDOMAIN with no ready endpoint", || {
        dig(port, &["db.shop.svc.clusterset.local", "A"]).contains("status: NXDOMAIN")
    });
    m1.ok(&["scale", "deploy", "db", "-n", "shop", "--replicas", "1"]);

    // A conflicting export, the newest: the oldest (member1's) wins, and
    // every export says which field, who won and why.
    apply(
        m3,
        &app(
            "web",
            1,
            "  clusterIP: None\n  ports: [{name: http, port: 8080}]",
        ),
    );
    wait_for(WAIT, "member3's export in conflict", || {
        condition(m3, "serviceexport", "web", "Conflict", "status") == "True"
    });
    assert_eq!(
        condition(m3, "serviceexport", "web", "Conflict", "reason"),
        "TypeConflict,PortConflict"
    );
    assert_has(
        &condition(m3, "serviceexport", "web", "Conflict", "message"),
        &[
            "type: member3 has Headless; ClusterSetIP from member1 is used",
            "member1's export is the oldest",
        ],
    );
    wait_for(WAIT, "member1's export in conflict too", || {
        condition(m1, "serviceexport", "web", "Conflict", "status") == "True"
    });
    assert_eq!(
        import(m2, "{.spec.type}:{.spec.ports[*].port}"),
        "ClusterSetIP:80"
    );
    assert_eq!(
        short(port, &["web.shop.svc.clusterset.local", "A"]),
        vec![ip.to_string()],
        "the DNS name kept its IP"
    );

    // Bad exports say why, and change nobody else's records.
    apply(
        m3,
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: ghost, namespace: shop}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: ext, namespace: shop}\nspec: {type: ExternalName, externalName: example.com}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: ext, namespace: shop}\n---\napiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: handmade, namespace: shop}\nspec: {type: ClusterSetIP, ports: [{port: 80, protocol: TCP}]}\n",
    );
    wait_for(WAIT, "the bad exports' conditions", || {
        condition(m3, "serviceexport", "ghost", "Valid", "reason") == "NoService"
            && condition(m3, "serviceexport", "ext", "Valid", "reason") == "InvalidServiceType"
            && condition(m3, "serviceimport", "handmade", "Ready", "reason") == "NoServiceExport"
    });
    assert!(
        !fleet
            .member("member1")
            .kubectl(&["get", "serviceimport", "ghost", "-n", "shop"])
            .status
            .success(),
        "an import for an invalid export"
    );
    assert_eq!(
        short(port, &["web.shop.svc.clusterset.local", "A"]),
        vec![ip.to_string()]
    );

    // An unreachable member leaves: its endpoints go from the imports and
    // from DNS once it is NotReady (1 s failure threshold here).
    wait_for(WAIT, "db back in member1", || db().len() == 1);
    m2.ok(&["scale", "deploy", "db", "-n", "shop", "--replicas", "1"]);
    wait_for(WAIT, "db in both again", || db().len() == 2);
    member_fault(&fleet, "member2", &["unreachable", "--mode", "refuse"]);
    wait_for(WAIT, "member2's endpoints gone from DNS", || {
        let ips = db();
        ips.len() == 1 && ips[0].starts_with("10.10.")
    });
    wait_for(WAIT, "member2 gone from the import", || {
        import(m3, "{.status.clusters[*].cluster}") == "member1 member3"
    });
}

#[test]
fn a_karmada_multicluster_service_exports_from_providers_to_consumers() {
    // This time the control plane serves DNS itself.
    let fleet = fleet_with_hub_args(&["--dns-listen", "127.0.0.1:0"]);
    let port = serving_port(&fleet.hub.wait_for_log_line(SERVING, WAIT));
    let (m1, m2, m3) = (
        fleet.member("member1"),
        fleet.member("member2"),
        fleet.member("member3"),
    );
    // The Service runs in member1 and member2, exported by neither.
    let service = app("api", 1, WEB_PORTS);
    let without_export = service
        .split("---\napiVersion: multicluster")
        .next()
        .unwrap();
    apply(m1, without_export);
    apply(m2, without_export);
    fleet.apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterService
metadata: {name: api, namespace: shop}
spec:
  types: [CrossCluster]
  providerClusters: [{name: member1}]
  consumerClusters: [{name: member3}]
"#,
    );
    let import =
        |m: &Server, path: &str| jsonpath(m, &["get", "serviceimport", "api", "-n", "shop"], path);
    wait_for(WAIT, "member3 importing api from member1", || {
        import(m3, "{.status.clusters[*].cluster}") == "member1"
    });
    assert!(
        m1.kubectl(&["get", "serviceexport", "api", "-n", "shop"])
            .status
            .success(),
        "no export in the provider"
    );
    assert!(
        !m2.kubectl(&["get", "serviceexport", "api", "-n", "shop"])
            .status
            .success(),
        "an export in a cluster that is not a provider"
    );
    assert!(
        !m2.kubectl(&["get", "serviceimport", "api", "-n", "shop"])
            .status
            .success(),
        "an import in a cluster that is not a consumer"
    );
    let ready = || {
        jsonpath(
            &fleet.hub,
            &["get", "multiclusterservice", "api", "-n", "shop"],
            "{.status.conditions[?(@.type==\"Ready\")].reason}",
        )
    };
    wait_for(WAIT, "the MultiClusterService Ready", || {
        ready() == "Exported"
    });
    let ip = import(m3, "{.spec.ips[0]}");
    wait_for(WAIT, "the control plane's DNS to answer", || {
        short(port, &["api.shop.svc.clusterset.local", "A"]) == vec![ip.clone()]
    });
    assert_has(&fleet.hub.ok(&["get", "mcs", "-n", "shop"]), &["api"]);

    // Gone from the hub: the export it made goes, and with it the import.
    fleet
        .hub
        .ok(&["delete", "multiclusterservice", "api", "-n", "shop"]);
    wait_for(WAIT, "the export and the import withdrawn", || {
        !m1.kubectl(&["get", "serviceexport", "api", "-n", "shop"])
            .status
            .success()
            && !m3
                .kubectl(&["get", "serviceimport", "api", "-n", "shop"])
                .status
                .success()
    });
}

#[test]
fn a_pull_member_exports_and_imports_through_its_agent() {
    // member1 is joined (Push); member2 is reached only by its agent.
    let mut fleet = Fleet::with_args(&[], &[], &[]);
    let m1 = Server::member("member1", &["--nodes", "2", "--pod-cidr", "10.10.0.0/16"]);
    fleet.members.push(("member1".into(), m1));
    fleet.join("member1", "us-east");
    fleet.wait_ready("member1");
    let _agent = fleet.pull_member("member2", "eu-west", &["--pod-cidr", "10.11.0.0/16"]);
    let (m1, m2) = (fleet.member("member1"), fleet.member("member2"));
    let hub_import = |path: &str| {
        jsonpath(
            &fleet.hub,
            &["get", "serviceimport", "web", "-n", "shop"],
            path,
        )
    };

    // Exported from member1: member2 imports it through a Work its agent
    // applies, with the hub's ClusterSetIP and member1's endpoints.
    apply(m1, &app("web", 2, WEB_PORTS));
    wait_for(
        WAIT,
        "the import in member2 with member1's endpoints",
        || count(m2, "member1") == 2,
    );
    let ip = hub_import("{.spec.ips[0]}");
    assert!(ip.starts_with("243.0."), "{ip}");
    assert_eq!(
        jsonpath(
            m2,
            &["get", "serviceimport", "web", "-n", "shop"],
            "{.spec.ips[0]}:{.spec.ports[0].port}"
        ),
        format!("{ip}:80")
    );

    // v1beta1's exportedLabels and exportedAnnotations reach every import,
    // the one member2's agent applies included.
    apply(
        m1,
        r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: web, namespace: shop}
spec:
  exportedLabels: {tier: frontend}
  exportedAnnotations: {team: shop}
"#,
    );
    let labelled = |m: &Server| {
        jsonpath(
            m,
            &[
                "get",
                "serviceimports.v1beta1.multicluster.x-k8s.io",
                "web",
                "-n",
                "shop",
            ],
            "{.apiVersion} {.metadata.labels.tier} {.metadata.annotations.team}",
        )
    };
    wait_for(WAIT, "the exported label and annotation in member2", || {
        labelled(m2) == "multicluster.x-k8s.io/v1beta1 frontend shop"
    });
    assert_eq!(
        labelled(&fleet.hub),
        "multicluster.x-k8s.io/v1beta1 frontend shop"
    );

    // Exported from member2 too: its agent reports the export and its
    // endpoints, member1 imports them, and the hub's verdict reaches the
    // export in member2.
    apply(m2, &app("web", 1, WEB_PORTS));
    wait_for(WAIT, "the import from both", || {
        hub_import("{.status.clusters[*].cluster}") == "member1 member2"
    });
    wait_for(WAIT, "member2's endpoint in member1", || {
        count(m1, "member2") == 1
    });
    assert!(slices(m1).contains("member2=10.11."), "{}", slices(m1));
    wait_for(WAIT, "member2's export Ready", || {
        condition(m2, "serviceexport", "web", "Ready", "status") == "True"
    });
    assert_eq!(
        condition(m2, "serviceexport", "web", "Valid", "status"),
        "True"
    );

    // Scaling member2's source reaches member1.
    let out = m2.kubectl(&[
        "scale",
        "deployment",
        "web",
        "-n",
        "shop",
        "--replicas",
        "3",
    ]);
    assert!(out.status.success(), "{}", common::fleet::stderr(&out));
    wait_for(WAIT, "member2's three endpoints in member1", || {
        count(m1, "member2") == 3
    });

    // Its export withdrawn, member2's endpoints leave, and so does its
    // report on the hub.
    let out = m2.kubectl(&["delete", "serviceexport", "web", "-n", "shop"]);
    assert!(out.status.success(), "{}", common::fleet::stderr(&out));
    wait_for(WAIT, "member2 no longer a source", || {
        hub_import("{.status.clusters[*].cluster}") == "member1" && count(m1, "member2") == 0
    });
    wait_for(WAIT, "member2's report gone", || {
        fleet
            .hub
            .ok(&["get", "works", "-n", "karmada-es-member2", "-o", "name"])
            .lines()
            .all(|w| !w.contains("mcs-export."))
    });
    // member2 still imports member1's endpoints.
    assert_eq!(count(m2, "member1"), 2);
}

/// Karmada's multi-cluster service walkthrough, verbatim in its selectors:
/// the ServiceExport is selected as `multicluster.x-k8s.io/v1alpha1`, the
/// version its documentation writes, although the hub also serves (and
/// prefers) `v1beta1`.
#[test]
fn a_policy_selecting_the_v1alpha1_service_export_propagates_it() {
    let fleet = Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    let (m1, m2) = (fleet.member("member1"), fleet.member("member2"));
    fleet.apply(&format!(
        "{}{}",
        app("serve", 2, WEB_PORTS),
        r#"
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: serve, namespace: shop}
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, name: serve}
    - {apiVersion: v1, kind: Service, name: serve}
  placement:
    clusterAffinity: {clusterNames: [member1]}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: serve-export, namespace: shop}
spec:
  resourceSelectors:
    - {apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceExport, name: serve}
  placement:
    clusterAffinity: {clusterNames: [member1]}
"#
    ));
    wait_for(WAIT, "the ServiceExport propagated to member1", || {
        m1.kubectl(&["get", "serviceexport", "serve", "-n", "shop"])
            .status
            .success()
    });
    // The hub's template names the policy that claimed it.
    assert_eq!(
        jsonpath(
            &fleet.hub,
            &["get", "serviceexport", "serve", "-n", "shop"],
            "{.metadata.annotations.propagationpolicy\\.karmada\\.io/name}"
        ),
        "serve-export"
    );
    // The export took effect: member2 imports the Service with a
    // ClusterSetIP and member1's endpoints, read at either served version.
    wait_for(WAIT, "member2 importing serve from member1", || {
        jsonpath(
            m2,
            &[
                "get",
                "serviceimports.v1alpha1.multicluster.x-k8s.io",
                "serve",
                "-n",
                "shop",
            ],
            "{.status.clusters[*].cluster}",
        ) == "member1"
    });
    let ip = jsonpath(
        m2,
        &["get", "serviceimport", "serve", "-n", "shop"],
        "{.spec.ips[0]}",
    );
    assert!(ip.starts_with("243."), "ClusterSetIP {ip:?}");
    assert!(
        !m2.kubectl(&["get", "serviceexport", "serve", "-n", "shop"])
            .status
            .success(),
        "the export reached a cluster its policy does not name"
    );

    // `flotilla describe placement` of a policy says what each selector
    // matched, and why one matched nothing.
    fleet.apply(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: misses, namespace: shop}
spec:
  resourceSelectors:
    - {apiVersion: example.com/v1, kind: Widget}
    - {apiVersion: apps/v1, kind: Deployment, name: missing}
    - {apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {tier: none}}}
    - {apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceExport}
  placement:
    clusterAffinity: {clusterNames: [member2]}
"#,
    );
    let describe = |target: &str| {
        let out = flotilla(&[
            "describe",
            "placement",
            target,
            "-n",
            "shop",
            "--kubeconfig",
            fleet.hub.kubeconfig.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let held = describe("pp/serve-export");
    assert_has(
        &held,
        &[
            "PropagationPolicy shop/serve-export",
            "multicluster.x-k8s.io/v1alpha1 ServiceExport serve: matched 1 template in namespace shop; propagates shop/serve",
        ],
    );
    let missed = describe("pp/misses");
    assert_has(
        &missed,
        &[
            "example.com/v1 Widget: matched nothing: the hub serves no kind Widget in the API group \"example.com\"",
            "apps/v1 Deployment missing: matched nothing: no Deployment named \"missing\" in namespace shop",
            "v1 ConfigMap with labels tier=none: matched nothing: no ConfigMap with those labels in namespace shop",
            "ServiceExport: matched 1 template in namespace shop; not by this policy: shop/serve (held by PropagationPolicy shop/serve-export)",
        ],
    );
}
