//! Services in the member's network, as kube-proxy's nftables mode makes
//! them: one table (`ip flotilla`) in every node's namespace, rewritten
//! whole in one `nft -f` transaction whenever Services or EndpointSlices
//! change.
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
//! The NetworkPolicy chains ([`super::policy`]) live in the same table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tracing::warn;

use super::network::MemberNetwork;
use super::{host, policy};

pub const TABLE: &str = "flotilla";
/// The mark of packets to masquerade (hairpin).
const MASQ_MARK: &str = "0x4000";

/// One port of one Service, with where it goes.
struct ServicePort {
    /// A name unique to this Service and port, for chains and sets.
    id: String,
    cluster_ip: Ipv4Addr,
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
    super::network::short_hash(&parts.join("/"), 12)
}

fn service_ports(services: &[Arc<Service>], slices: &[Arc<EndpointSlice>]) -> Vec<ServicePort> {
    let mut out = Vec::new();
    for svc in services {
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
        let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .unwrap_or(10800)
        });
        for p in spec.ports.iter().flatten() {
            let Some(proto) = protocol(p.protocol.as_deref()) else {
                continue;
            };
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            let port_name = p.name.clone().unwrap_or_default();
            let mut endpoints = Vec::new();
            for slice in slices {
                if slice.namespace().as_deref() != Some(ns.as_str())
                    || slice.labels().get("kubernetes.io/service-name") != Some(&name)
                    || slice.address_type != "IPv4"
                {
                    continue;
                }
                let Some(target) = slice.ports.iter().flatten().find(|sp| {
                    sp.name.clone().unwrap_or_default() == port_name
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
            out.push(ServicePort {
                id: ident(&[&ns, &name, &port_name, proto]),
                cluster_ip,
                node_port: p
                    .node_port
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|_| matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"))),
                port,
                protocol: proto,
                endpoints,
                affinity_timeout,
            });
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The whole table, as one `nft -f` script that replaces the last one.
pub fn render(
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    policies: &policy::Rules,
) -> String {
    let ports = service_ports(services, slices);
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
            let _ = writeln!(rejects, "    ip daddr {} {target} {how}", p.cluster_ip);
            if let Some(np) = p.node_port {
                let _ = writeln!(
                    rejects,
                    "    fib daddr type local {} dport {np} {how}",
                    p.protocol
                );
            }
            continue;
        }
        let _ = writeln!(
            dispatch,
            "    ip daddr {} {target} goto svc_{}",
            p.cluster_ip, p.id
        );
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
}

fn follow<K>(api: Api<K>, changed: Arc<Notify>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, Default::default()))
        .default_backoff()
        .for_each(move |_| {
            changed.notify_one();
            async {}
        });
    tokio::spawn(stream);
    store
}

/// Keeps every node's table in step with the cluster, for ever.
pub async fn run(client: Client, network: Arc<MemberNetwork>) {
    let changed = Arc::new(Notify::new());
    let sources = Sources {
        services: follow(Api::all(client.clone()), changed.clone()),
        slices: follow(Api::all(client.clone()), changed.clone()),
        policies: follow(Api::all(client.clone()), changed.clone()),
        pods: follow(Api::all(client.clone()), changed.clone()),
        namespaces: follow(Api::all(client), changed.clone()),
    };
    let mut applied: BTreeMap<String, String> = BTreeMap::new();
    loop {
        changed.notified().await;
        // Changes come in bursts (a rollout): write once they settle.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rules = policy::Rules::compute(&sources);
        let script = render(&sources.services.state(), &sources.slices.state(), &rules);
        for node in &network.nodes {
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
        let t = render(&services, &slices, &policy::Rules::default());
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
}
