//! Services in the member's network, as kube-proxy's nftables mode makes
//! them: one table (`ip flotilla`) in every node's namespace, rewritten
//! whole in one `nft -f` transaction whenever Services, EndpointSlices,
//! ServiceImports or GlobalIngressIPs change.
//!
//! - a ClusterIP (and on every node, a NodePort) jumps to its service
//!   chain, which picks one *ready* endpoint at random (`numgen`), or the
//!   one a client had within `sessionAffinity: ClientIP`'s timeout (a
//!   dynamic set per endpoint);
//! - the endpoint chain DNATs to the endpoint's port, resolved per
//!   endpoint from its slice (named target ports);
//! - a Service without ready endpoints rejects (TCP reset, ICMP
//!   unreachable) rather than letting the connection hang;
//! - a pod that reaches itself through its Service is masqueraded
//!   (hairpin), as kube-proxy does.
//!
//! Headless and ExternalName Services get no rules: DNS answers them.
//!
//! Multi-cluster services are carried the same way:
//!
//! - a ServiceImport of type ClusterSetIP (written here by the hub's MCS
//!   controller) gets a chain like a ClusterIP's at its ClusterSetIP,
//!   over the ready endpoints of all its EndpointSlices (one per source
//!   cluster, labelled `multicluster.kubernetes.io/service-name`; never
//!   mixed with a Service's own slices), target ports resolved by name;
//! - a Globalnet GlobalIngressIP (`submariner.io/v1`, target
//!   ClusterIPService) with an allocated IP leads, port by port, to its
//!   Service's own chain, as the ClusterIP does.
//!
//! Their CRDs may not be installed (a member that never joined): they
//! then read as empty, and the Services' rules do not wait for them.
//! The NetworkPolicy chains ([`policy`]) live in the same table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_client::follow::follow_optional;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, SessionAffinityConfig};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tracing::warn;

pub mod policy;
pub mod views;

use crate::runtime::netns::network::MemberNetwork;
use flotilla_host as host;
use views::{GlobalIngressIP, IMPORT_NAME_LABEL, ServiceImport};

pub const TABLE: &str = "flotilla";
/// The mark of packets to masquerade (hairpin).
const MASQ_MARK: &str = "0x4000";

/// What the rules are made from, at one moment.
#[derive(Default)]
pub struct State {
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
    pub imports: Vec<Arc<ServiceImport>>,
    pub ingress_ips: Vec<Arc<GlobalIngressIP>>,
}

/// One port of one Service (or ServiceImport), with where it goes.
struct ServicePort {
    /// A name unique to this Service and port, for chains and sets.
    id: String,
    /// The addresses that lead to it: a ClusterIP and the Service's
    /// Globalnet ingress IPs, or an import's ClusterSetIPs.
    addresses: Vec<Ipv4Addr>,
    node_port: Option<u16>,
    port: u16,
    protocol: &'static str,
    /// Ready endpoints: address and target port.
    endpoints: Vec<(Ipv4Addr, u16)>,
    affinity_timeout: Option<i32>,
}

fn protocol(p: Option<&str>) -> Option<&'static str> {
    match p.unwrap_or("TCP") {
        "TCP" => Some("tcp"),
        "UDP" => Some("udp"),
        "SCTP" => Some("sctp"),
        _ => None,
    }
}

/// Short, stable, nft-safe identifier.
fn ident(parts: &[&str]) -> String {
    crate::runtime::netns::network::short_hash(&parts.join("/"), 12)
}

/// `sessionAffinity: ClientIP`'s timeout, when it is asked for.
fn affinity(kind: Option<&str>, config: Option<&SessionAffinityConfig>) -> Option<i32> {
    (kind == Some("ClientIP")).then(|| {
        config
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(10800)
    })
}

/// The ready IPv4 endpoints of `slices` for the port named `port_name`,
/// each with its target port as its slice resolves the name.
fn ready_endpoints<'a>(
    slices: impl Iterator<Item = &'a EndpointSlice>,
    port_name: &str,
    proto: &'static str,
) -> Vec<(Ipv4Addr, u16)> {
    let mut endpoints = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(target) = slice.ports.iter().flatten().find(|sp| {
            sp.name.as_deref().unwrap_or_default() == port_name
                && protocol(sp.protocol.as_deref()) == Some(proto)
        }) else {
            continue;
        };
        let Some(target) = target.port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        for e in &slice.endpoints {
            // Only ready endpoints take traffic (unset counts as ready).
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                if let Ok(ip) = a.parse() {
                    endpoints.push((ip, target));
                }
            }
        }
    }
    endpoints.sort();
    endpoints.dedup();
    endpoints
}

/// Where Globalnet's annotation on a headless Service's pod's
/// GlobalIngressIP says the pod is (Submariner's name for it).
pub const HEADLESS_POD_IP_ANNOTATION: &str = "submariner.io/headless-svc-pod-ip";

/// The allocated global IPs of headless Services' pods, with the pods'
/// addresses.
fn headless_pod_ips(gips: &[Arc<GlobalIngressIP>]) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    let mut out: Vec<(Ipv4Addr, Ipv4Addr)> = gips
        .iter()
        .filter(|g| g.spec.target == "HeadlessServicePod")
        .filter_map(|g| {
            let global = g
                .status
                .as_ref()?
                .allocated_ip
                .as_deref()?
                .parse::<Ipv4Addr>()
                .ok()?;
            let pod = g
                .annotations()
                .get(HEADLESS_POD_IP_ANNOTATION)?
                .parse::<Ipv4Addr>()
                .ok()?;
            Some((global, pod))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The allocated Globalnet ingress IPs of Services, by namespace and name.
fn ingress_ips(gips: &[Arc<GlobalIngressIP>]) -> BTreeMap<(String, String), Vec<Ipv4Addr>> {
    let mut out: BTreeMap<(String, String), Vec<Ipv4Addr>> = BTreeMap::new();
    for g in gips {
        // A headless Service's pod (HeadlessServicePod) is not a Service's.
        if g.spec.target != "ClusterIPService" {
            continue;
        }
        let Some(service) = g.spec.service_ref.as_ref().filter(|r| !r.name.is_empty()) else {
            continue;
        };
        let Some(ip) = g
            .status
            .as_ref()
            .and_then(|s| s.allocated_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        else {
            continue; // not allocated yet
        };
        let ips = out
            .entry((g.namespace().unwrap_or_default(), service.name.clone()))
            .or_default();
        ips.push(ip);
        ips.sort();
        ips.dedup();
    }
    out
}

fn service_ports(state: &State) -> Vec<ServicePort> {
    let global = ingress_ips(&state.ingress_ips);
    let mut out = Vec::new();
    for svc in &state.services {
        let Some(spec) = &svc.spec else { continue };
        let Some(cluster_ip) = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        else {
            continue; // headless or ExternalName
        };
        let ns = svc.namespace().unwrap_or_default();
        let name = svc.name_any();
        let mut addresses = vec![cluster_ip];
        if let Some(ips) = global.get(&(ns.clone(), name.clone())) {
            addresses.extend(ips);
        }
        let affinity_timeout = affinity(
            spec.session_affinity.as_deref(),
            spec.session_affinity_config.as_ref(),
        );
        // The Service's own slices; an import's slices (for an import of
        // the same name) are not its endpoints.
        let slices = || {
            state.slices.iter().map(Arc::as_ref).filter(|s| {
                s.namespace().as_deref() == Some(ns.as_str())
                    && s.labels().get("kubernetes.io/service-name") == Some(&name)
                    && !s.labels().contains_key(IMPORT_NAME_LABEL)
            })
        };
        for p in spec.ports.iter().flatten() {
            let Some(proto) = protocol(p.protocol.as_deref()) else {
                continue;
            };
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            let port_name = p.name.clone().unwrap_or_default();
            out.push(ServicePort {
                id: ident(&[&ns, &name, &port_name, proto]),
                addresses: addresses.clone(),
                node_port: p
                    .node_port
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|_| matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"))),
                port,
                protocol: proto,
                endpoints: ready_endpoints(slices(), &port_name, proto),
                affinity_timeout,
            });
        }
    }
    for import in &state.imports {
        let spec = &import.spec;
        if spec.type_ != "ClusterSetIP" {
            continue; // Headless: DNS answers it
        }
        let addresses: Vec<Ipv4Addr> = spec.ips.iter().filter_map(|ip| ip.parse().ok()).collect();
        if addresses.is_empty() {
            continue; // no ClusterSetIP given yet (or IPv6 only)
        }
        let ns = import.namespace().unwrap_or_default();
        let name = import.name_any();
        // Every source cluster's slice together: one pool, load balanced.
        let slices = || {
            state.slices.iter().map(Arc::as_ref).filter(|s| {
                s.namespace().as_deref() == Some(ns.as_str())
                    && s.labels().get(IMPORT_NAME_LABEL) == Some(&name)
            })
        };
        let affinity_timeout = affinity(
            spec.session_affinity.as_deref(),
            spec.session_affinity_config.as_ref(),
        );
        for p in &spec.ports {
            let Some(proto) = protocol(p.protocol.as_deref()) else {
                continue;
            };
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            let port_name = p.name.clone().unwrap_or_default();
            out.push(ServicePort {
                // Five parts: never a Service's four.
                id: ident(&["import", &ns, &name, &port_name, proto]),
                addresses: addresses.clone(),
                node_port: None,
                port,
                protocol: proto,
                endpoints: ready_endpoints(slices(), &port_name, proto),
                affinity_timeout,
            });
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The whole table, as one `nft -f` script that replaces the last one.
pub fn render(state: &State, policies: &policy::Rules) -> String {
    let ports = service_ports(state);
    let mut t = String::new();
    // Declaring then deleting makes the first run and every later one alike.
    let _ = writeln!(
        t,
        "table ip {TABLE}\ndelete table ip {TABLE}\ntable ip {TABLE} {{"
    );
    let _ = writeln!(
        t,
        "  chain prerouting {{ type nat hook prerouting priority -100; policy accept; jump services; }}"
    );
    let _ = writeln!(
        t,
        "  chain output {{ type nat hook output priority -100; policy accept; jump services; }}"
    );
    let _ = writeln!(
        t,
        "  chain postrouting {{ type nat hook postrouting priority 100; policy accept; meta mark & {MASQ_MARK} == {MASQ_MARK} masquerade; }}"
    );
    let mut dispatch = String::new();
    let mut rejects = String::new();
    for p in &ports {
        let target = format!("{} dport {}", p.protocol, p.port);
        if p.endpoints.is_empty() {
            let how = if p.protocol == "tcp" {
                "reject with tcp reset"
            } else {
                "reject"
            };
            for ip in &p.addresses {
                let _ = writeln!(rejects, "    ip daddr {ip} {target} {how}");
            }
            if let Some(np) = p.node_port {
                let _ = writeln!(
                    rejects,
                    "    fib daddr type local {} dport {np} {how}",
                    p.protocol
                );
            }
            continue;
        }
        // A Globalnet ingress IP or a ClusterSetIP goes to the same chain
        // as the ClusterIP beside it.
        for ip in &p.addresses {
            let _ = writeln!(dispatch, "    ip daddr {ip} {target} goto svc_{}", p.id);
        }
        if let Some(np) = p.node_port {
            let _ = writeln!(
                dispatch,
                "    fib daddr type local {} dport {np} goto svc_{}",
                p.protocol, p.id
            );
        }
        let mut chain = String::new();
        let mut picks = Vec::new();
        for (i, (ip, port)) in p.endpoints.iter().enumerate() {
            let ep = format!("ep_{}_{i}", p.id);
            let mut body = format!("    ip saddr {ip} meta mark set meta mark | {MASQ_MARK}\n");
            if let Some(timeout) = p.affinity_timeout {
                let _ = writeln!(
                    t,
                    "  set aff_{}_{i} {{ type ipv4_addr; flags dynamic,timeout; timeout {timeout}s; }}",
                    p.id
                );
                let _ = writeln!(chain, "    ip saddr @aff_{}_{i} goto {ep}", p.id);
                let _ = writeln!(body, "    update @aff_{}_{i} {{ ip saddr }}", p.id);
            }
            let _ = writeln!(body, "    meta l4proto {} dnat to {ip}:{port}", p.protocol);
            let _ = writeln!(t, "  chain {ep} {{\n{body}  }}");
            picks.push(format!("{i} : goto {ep}"));
        }
        let _ = writeln!(
            chain,
            "    numgen random mod {} vmap {{ {} }}",
            picks.len(),
            picks.join(", ")
        );
        let _ = writeln!(t, "  chain svc_{} {{\n{chain}  }}", p.id);
    }
    // A headless Service's pod under Globalnet: its global IP is the pod,
    // every port of it.
    for (global, pod) in headless_pod_ips(&state.ingress_ips) {
        let _ = writeln!(dispatch, "    ip daddr {global} dnat to {pod}");
    }
    let _ = writeln!(t, "  chain services {{\n{dispatch}  }}");
    let _ = writeln!(
        t,
        "  chain no_endpoints {{\n{rejects}  }}\n  chain filter_forward {{ type filter hook forward priority 0; policy accept; ct state new jump no_endpoints; jump netpol; }}\n  chain filter_output {{ type filter hook output priority 0; policy accept; ct state new jump no_endpoints; }}"
    );
    t.push_str(&policy::render(policies));
    t.push_str("}\n");
    t
}

/// The objects the rules come from, followed.
#[derive(Clone)]
pub struct Sources {
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub policies: Store<NetworkPolicy>,
    pub pods: Store<Pod>,
    pub namespaces: Store<Namespace>,
    /// CRDs a member may not have: they read as empty until installed.
    pub imports: Store<ServiceImport>,
    pub ingress_ips: Store<GlobalIngressIP>,
}

impl Sources {
    fn state(&self) -> State {
        State {
            services: self.services.state(),
            slices: self.slices.state(),
            imports: self.imports.state(),
            ingress_ips: self.ingress_ips.state(),
        }
    }
}

fn follow<K>(api: Api<K>, changed: Arc<Notify>) -> Store<K>
where
    K: flotilla_client::follow::Followable,
{
    // Every event, a relist's included: what a relist removed changes
    // the rules too.
    let (store, _task) =
        flotilla_client::follow::follow(api, Default::default(), move |_| changed.notify_one());
    store
}

/// Keeps every node's table in step with the cluster, for ever.
pub async fn run(client: Client, network: Arc<MemberNetwork>) {
    let changed = Arc::new(Notify::new());
    let notify = |changed: &Arc<Notify>| {
        let changed = changed.clone();
        move || changed.notify_one()
    };
    let sources = Sources {
        services: follow(Api::all(client.clone()), changed.clone()),
        slices: follow(Api::all(client.clone()), changed.clone()),
        policies: follow(Api::all(client.clone()), changed.clone()),
        pods: follow(Api::all(client.clone()), changed.clone()),
        namespaces: follow(Api::all(client.clone()), changed.clone()),
        imports: follow_optional(
            Api::all(client.clone()),
            Default::default(),
            notify(&changed),
        ),
        ingress_ips: follow_optional(Api::all(client), Default::default(), notify(&changed)),
    };
    let mut applied: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes_changed = network.subscribe();
    loop {
        tokio::select! {
            _ = changed.notified() => {}
            // A node that joined gets the rules too.
            Ok(()) = nodes_changed.changed() => {}
        }
        // Changes come in bursts (a rollout): write once they settle.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rules = policy::Rules::compute(&sources);
        let script = render(&sources.state(), &rules);
        let nodes = network.nodes();
        // A node that left and joined again starts with no rules.
        applied.retain(|netns, _| nodes.iter().any(|n| &n.netns == netns));
        for node in &nodes {
            if applied.get(&node.netns) == Some(&script) {
                continue;
            }
            match host::nft(&node.netns, &script).await {
                Ok(()) => {
                    applied.insert(node.netns.clone(), script.clone());
                }
                Err(error) => {
                    warn!(%error, node = %node.name, "cannot apply the service rules; retrying");
                    changed.notify_one();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_endpoints_named_ports_affinity_and_rejects() {
        let svc = |v: serde_json::Value| Arc::new(serde_json::from_value::<Service>(v).unwrap());
        let services = vec![
            svc(
                json!({"metadata": {"name": "web", "namespace": "a"}, "spec": {
                "clusterIP": "10.96.0.20", "type": "NodePort", "sessionAffinity": "ClientIP",
                "ports": [{"name": "http", "port": 80, "targetPort": "web", "nodePort": 30080}]}}),
            ),
            svc(
                json!({"metadata": {"name": "empty", "namespace": "a"}, "spec": {
                "clusterIP": "10.96.0.21", "ports": [{"port": 53, "protocol": "UDP"}]}}),
            ),
            svc(
                json!({"metadata": {"name": "headless", "namespace": "a"}, "spec": {
                "clusterIP": "None", "ports": [{"port": 80}]}}),
            ),
        ];
        let slices = vec![Arc::new(
            serde_json::from_value::<EndpointSlice>(json!({
                "metadata": {"name": "web-x", "namespace": "a", "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.1.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.1.0.3"], "conditions": {"ready": false}},
                    {"addresses": ["10.1.0.4"]},
                ],
            }))
            .unwrap(),
        )];
        let state = State {
            services,
            slices,
            ..Default::default()
        };
        let t = render(&state, &policy::Rules::default());
        assert!(t.contains("ip daddr 10.96.0.20 tcp dport 80 goto svc_"));
        assert!(t.contains("fib daddr type local tcp dport 30080 goto svc_"));
        assert!(t.contains("meta l4proto tcp dnat to 10.1.0.2:8080"));
        assert!(t.contains("meta l4proto tcp dnat to 10.1.0.4:8080"));
        assert!(
            !t.contains("10.1.0.3"),
            "an unready endpoint takes no traffic"
        );
        assert!(t.contains("numgen random mod 2"));
        assert!(t.contains("timeout 10800s"), "ClientIP affinity");
        assert!(t.contains("ip daddr 10.96.0.21 udp dport 53 reject"));
        assert!(!t.contains("headless"));
    }

    fn slice(v: serde_json::Value) -> Arc<EndpointSlice> {
        Arc::new(serde_json::from_value::<EndpointSlice>(v).unwrap())
    }

    /// The chain a dispatch rule for `daddr` goes to.
    fn chain_of<'a>(t: &'a str, daddr: &str) -> &'a str {
        let line = t
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("ip daddr {daddr} ")))
            .unwrap_or_else(|| panic!("no rule for {daddr}:\n{t}"));
        line.rsplit(' ').next().unwrap()
    }

    /// The body of chain `name`.
    fn body<'a>(t: &'a str, name: &str) -> &'a str {
        let start = t.find(&format!("chain {name} {{")).unwrap();
        let rest = &t[start..];
        &rest[..rest.find("\n  }").unwrap()]
    }

    #[test]
    fn a_clusterset_ip_balances_over_every_clusters_ready_endpoints() {
        let import =
            |v: serde_json::Value| Arc::new(serde_json::from_value::<ServiceImport>(v).unwrap());
        let state = State {
            services: vec![Arc::new(
                serde_json::from_value::<Service>(json!({
                    "metadata": {"name": "web", "namespace": "shop"},
                    "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}}))
                .unwrap(),
            )],
            imports: vec![
                import(
                    json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {
                    "type": "ClusterSetIP", "ips": ["242.0.0.1"],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}),
                ),
                import(
                    json!({"metadata": {"name": "gone", "namespace": "shop"}, "spec": {
                    "type": "ClusterSetIP", "ips": ["242.0.0.2"],
                    "ports": [{"port": 53, "protocol": "UDP"}]}}),
                ),
                import(
                    json!({"metadata": {"name": "db", "namespace": "shop"}, "spec": {
                    "type": "Headless", "ports": [{"port": 5432}]}}),
                ),
            ],
            slices: vec![
                // The member's own Service: its own endpoints only.
                slice(json!({
                    "metadata": {"name": "web-abc", "namespace": "shop",
                        "labels": {"kubernetes.io/service-name": "web"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": [{"addresses": ["10.1.0.2"]}],
                })),
                // The import's slices, one per source cluster, with
                // their own target ports.
                slice(json!({
                    "metadata": {"name": "web-member1", "namespace": "shop", "labels": {
                        "multicluster.kubernetes.io/service-name": "web",
                        "multicluster.kubernetes.io/source-cluster": "member1"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": [
                        {"addresses": ["10.1.0.2"], "conditions": {"ready": true}},
                        {"addresses": ["10.1.0.9"], "conditions": {"ready": false}},
                    ],
                })),
                slice(json!({
                    "metadata": {"name": "web-member2", "namespace": "shop", "labels": {
                        "multicluster.kubernetes.io/service-name": "web",
                        "multicluster.kubernetes.io/source-cluster": "member2"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 9090, "protocol": "TCP"}],
                    "endpoints": [{"addresses": ["10.2.0.5"]}],
                })),
                slice(json!({
                    "metadata": {"name": "db-member2", "namespace": "shop", "labels": {
                        "multicluster.kubernetes.io/service-name": "db"}},
                    "addressType": "IPv4",
                    "ports": [{"port": 5432, "protocol": "TCP"}],
                    "endpoints": [{"addresses": ["10.2.0.7"]}],
                })),
            ],
            ..Default::default()
        };
        let t = render(&state, &policy::Rules::default());
        let set = chain_of(&t, "242.0.0.1 tcp dport 80 goto");
        let local = chain_of(&t, "10.96.0.20 tcp dport 80 goto");
        assert_ne!(set, local, "the import has its own chain");
        assert!(body(&t, set).contains("numgen random mod 2"), "{t}");
        let mut eps: Vec<&str> = t
            .lines()
            .filter(|l| l.contains("dnat to"))
            .map(str::trim)
            .collect();
        eps.sort();
        assert_eq!(
            eps,
            [
                "meta l4proto tcp dnat to 10.1.0.2:8080",
                "meta l4proto tcp dnat to 10.1.0.2:8080",
                "meta l4proto tcp dnat to 10.2.0.5:9090",
            ],
            "two clusters' ready endpoints for the import, the Service's own for the Service"
        );
        assert!(
            body(&t, local).contains("numgen random mod 1"),
            "the import's slices are not the Service's"
        );
        assert!(!t.contains("10.1.0.9"), "unready endpoints take no traffic");
        assert!(
            t.contains("ip daddr 242.0.0.2 udp dport 53 reject"),
            "no endpoints: rejected"
        );
        assert!(!t.contains("5432"), "a headless import has no rules");
    }

    #[test]
    fn a_global_ingress_ip_leads_to_its_services_chain() {
        let gip =
            |v: serde_json::Value| Arc::new(serde_json::from_value::<GlobalIngressIP>(v).unwrap());
        let state = State {
            services: vec![Arc::new(
                serde_json::from_value::<Service>(json!({
                        "metadata": {"name": "web", "namespace": "shop"},
                        "spec": {"clusterIP": "10.96.0.20", "ports": [
                            {"name": "http", "port": 80},
                            {"name": "dns", "port": 53, "protocol": "UDP"}]}}))
                .unwrap(),
            )],
            slices: vec![slice(json!({
                "metadata": {"name": "web-abc", "namespace": "shop",
                    "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.1.0.2"]}],
            }))],
            ingress_ips: vec![
                gip(json!({"metadata": {"name": "svc-web", "namespace": "shop"},
                    "spec": {"target": "ClusterIPService", "serviceRef": {"name": "web"}},
                    "status": {"allocatedIP": "243.0.0.7"}})),
                // Not allocated yet, another namespace's, and a pod's.
                gip(json!({"metadata": {"name": "pending", "namespace": "shop"},
                    "spec": {"target": "ClusterIPService", "serviceRef": {"name": "web"}}})),
                gip(
                    json!({"metadata": {"name": "other", "namespace": "elsewhere"},
                    "spec": {"target": "ClusterIPService", "serviceRef": {"name": "web"}},
                    "status": {"allocatedIP": "243.0.0.8"}}),
                ),
                gip(json!({"metadata": {"name": "pod", "namespace": "shop"},
                    "spec": {"target": "HeadlessServicePod", "serviceRef": {"name": "web"}},
                    "status": {"allocatedIP": "243.0.0.9"}})),
            ],
            ..Default::default()
        };
        let t = render(&state, &policy::Rules::default());
        assert_eq!(
            chain_of(&t, "243.0.0.7 tcp dport 80 goto"),
            chain_of(&t, "10.96.0.20 tcp dport 80 goto"),
            "the same chain as the ClusterIP"
        );
        assert_eq!(
            t.matches("dnat to 10.1.0.2:8080").count(),
            1,
            "not duplicated"
        );
        assert!(
            t.contains("ip daddr 243.0.0.7 udp dport 53 reject"),
            "a port without endpoints rejects at the global IP too"
        );
        for ip in ["243.0.0.8", "243.0.0.9"] {
            assert!(!t.contains(ip), "{ip} is not this Service's");
        }
    }

    #[test]
    fn a_headless_pods_global_ip_is_the_pod() {
        let gip = serde_json::from_value::<GlobalIngressIP>(json!({
            "metadata": {"name": "pod-db-0", "namespace": "shop",
                "annotations": {"submariner.io/headless-svc-pod-ip": "10.1.0.5"}},
            "spec": {"target": "HeadlessServicePod", "serviceRef": {"name": "db"}},
            "status": {"allocatedIP": "242.0.0.30"}}))
        .unwrap();
        let state = State {
            ingress_ips: vec![Arc::new(gip)],
            ..Default::default()
        };
        let t = render(&state, &policy::Rules::default());
        assert!(t.contains("ip daddr 242.0.0.30 dnat to 10.1.0.5"), "{t}");
    }
}
