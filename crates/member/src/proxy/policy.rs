//! NetworkPolicy, enforced in each node's `ip flotilla` table (beside the
//! Service rules of [`super`]) on the forward hook every pod's
//! packets cross, with their real addresses (pods are routed, not
//! bridged):
//!
//! - a pod selected by a policy with `Ingress` (`Egress`) in its
//!   policyTypes is isolated in that direction; what any selecting
//!   policy's rules allow passes, the rest is dropped;
//! - peers are pods (podSelector in the policy's namespace, or with a
//!   namespaceSelector across namespaces) and ipBlocks (with `except`);
//!   ports are numbers or the protected pod's named ports, with endPort;
//! - replies to allowed connections pass (`ct state established`).
//!
//! The node's own traffic (the kubelet's probes) is not forwarded and so
//! never filtered, as with most CNIs.

use crate::placement::label_selector_matches as selects;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::Sources;

/// One allowing rule: from/to whom (None: anyone) and on which ports
/// (None: all).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allow {
    pub peers: Option<Vec<String>>,
    pub except: Vec<String>,
    pub ports: Option<Vec<(String, u16, u16)>>,
}

/// A pod's isolation: None when not isolated in that direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRules {
    pub ip: Option<Ipv4Addr>,
    pub ingress: Option<Vec<Allow>>,
    pub egress: Option<Vec<Allow>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules(pub Vec<PodRules>);

fn pod_ip(p: &Pod) -> Option<Ipv4Addr> {
    p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()
}

impl Rules {
    pub fn compute(s: &Sources) -> Rules {
        let pods = s.pods.state();
        let namespaces = s.namespaces.state();
        let ns_labels = |ns: &str| {
            namespaces
                .iter()
                .find(|n| n.name_any() == ns)
                .map(|n| n.labels().clone())
                .unwrap_or_else(|| {
                    BTreeMap::from([("kubernetes.io/metadata.name".into(), ns.into())])
                })
        };
        let peers = |policy_ns: &str, list: &[NetworkPolicyPeer]| -> (Vec<String>, Vec<String>) {
            let mut out = Vec::new();
            let mut except = Vec::new();
            for peer in list {
                if let Some(block) = &peer.ip_block {
                    out.push(block.cidr.clone());
                    except.extend(block.except.iter().flatten().cloned());
                    continue;
                }
                for p in pods.iter() {
                    let Some(ip) = pod_ip(p) else { continue };
                    let ns = p.namespace().unwrap_or_default();
                    let ns_ok = match &peer.namespace_selector {
                        Some(sel) => selects(sel, &ns_labels(&ns)),
                        None => ns == policy_ns,
                    };
                    let pod_ok = peer
                        .pod_selector
                        .as_ref()
                        .is_none_or(|sel| selects(sel, p.labels()));
                    if ns_ok && pod_ok {
                        out.push(ip.to_string());
                    }
                }
            }
            (out, except)
        };
        let policies = s.policies.state();
        let mut rules = Vec::new();
        for pod in pods.iter() {
            let Some(ip) = pod_ip(pod) else { continue };
            let ns = pod.namespace().unwrap_or_default();
            let mut ingress: Option<Vec<Allow>> = None;
            let mut egress: Option<Vec<Allow>> = None;
            for policy in policies
                .iter()
                .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
            {
                let Some(spec) = &policy.spec else { continue };
                if !spec
                    .pod_selector
                    .as_ref()
                    .is_none_or(|s| selects(s, pod.labels()))
                {
                    continue;
                }
                let types = spec.policy_types.clone().unwrap_or_else(|| {
                    let mut t = vec!["Ingress".to_string()];
                    if spec.egress.is_some() {
                        t.push("Egress".into());
                    }
                    t
                });
                if types.iter().any(|t| t == "Ingress") {
                    let list = ingress.get_or_insert_with(Vec::new);
                    for rule in spec.ingress.iter().flatten() {
                        let (p, except) = match &rule.from {
                            Some(from) if !from.is_empty() => {
                                let (p, e) = peers(&ns, from);
                                (Some(p), e)
                            }
                            _ => (None, Vec::new()),
                        };
                        list.push(Allow {
                            peers: p,
                            except,
                            ports: ports(rule.ports.as_deref(), Some(pod)),
                        });
                    }
                }
                if types.iter().any(|t| t == "Egress") {
                    let list = egress.get_or_insert_with(Vec::new);
                    for rule in spec.egress.iter().flatten() {
                        let (p, except) = match &rule.to {
                            Some(to) if !to.is_empty() => {
                                let (p, e) = peers(&ns, to);
                                (Some(p), e)
                            }
                            _ => (None, Vec::new()),
                        };
                        list.push(Allow {
                            peers: p,
                            except,
                            ports: ports(rule.ports.as_deref(), None),
                        });
                    }
                }
            }
            if ingress.is_some() || egress.is_some() {
                rules.push(PodRules {
                    ip: Some(ip),
                    ingress,
                    egress,
                });
            }
        }
        Rules(rules)
    }
}

/// Ports as (protocol, first, last); named ports resolved on `pod`.
fn ports(list: Option<&[NetworkPolicyPort]>, pod: Option<&Pod>) -> Option<Vec<(String, u16, u16)>> {
    let list = list.filter(|l| !l.is_empty())?;
    let mut out = Vec::new();
    for p in list {
        let proto = p
            .protocol
            .clone()
            .unwrap_or_else(|| "TCP".into())
            .to_lowercase();
        let first = match &p.port {
            None => {
                out.push((proto, 1, 65535));
                continue;
            }
            Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
            Some(IntOrString::String(name)) => pod.and_then(|pod| {
                pod.spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                    .and_then(|cp| u16::try_from(cp.container_port).ok())
            }),
        };
        let Some(first) = first else { continue };
        let last = p
            .end_port
            .and_then(|e| u16::try_from(e).ok())
            .unwrap_or(first)
            .max(first);
        out.push((proto, first, last));
    }
    Some(out)
}

fn set(items: &[String]) -> String {
    format!("{{ {} }}", items.join(", "))
}

fn allow_line(direction: &str, a: &Allow) -> Vec<String> {
    // The peer is the source for ingress, the destination for egress.
    let field = if direction == "ingress" {
        "saddr"
    } else {
        "daddr"
    };
    let mut peer = String::new();
    match &a.peers {
        Some(p) if p.is_empty() => return Vec::new(),
        Some(p) => {
            if !a.except.is_empty() {
                peer.push_str(&format!("ip {field} != {} ", set(&a.except)));
            }
            peer.push_str(&format!("ip {field} {} ", set(p)));
        }
        None => {}
    }
    match &a.ports {
        None => vec![format!("{peer}return")],
        Some(ports) => ports
            .iter()
            .map(|(proto, first, last)| {
                let range = if first == last {
                    first.to_string()
                } else {
                    format!("{first}-{last}")
                };
                format!("{peer}meta l4proto {proto} th dport {range} return")
            })
            .collect(),
    }
}

/// The `policy` chain (jumped to from the forward hook) and its per-pod
/// chains.
pub fn render(rules: &Rules) -> String {
    let mut t = String::new();
    let mut dispatch = String::from("    ct state established,related accept\n");
    for (i, pod) in rules.0.iter().enumerate() {
        let Some(ip) = pod.ip else { continue };
        for (direction, allows, field) in [
            ("egress", &pod.egress, "saddr"),
            ("ingress", &pod.ingress, "daddr"),
        ] {
            let Some(allows) = allows else { continue };
            let chain = format!("{direction}_{i}");
            let _ = writeln!(dispatch, "    ip {field} {ip} jump {chain}");
            let mut body = String::new();
            for a in allows {
                for line in allow_line(direction, a) {
                    let _ = writeln!(body, "    {line}");
                }
            }
            let _ = writeln!(body, "    drop");
            let _ = writeln!(t, "  chain {chain} {{\n{body}  }}");
        }
    }
    let _ = writeln!(t, "  chain netpol {{\n{dispatch}  }}");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolated_pods_get_allow_lists_and_a_drop() {
        let rules = Rules(vec![PodRules {
            ip: Some("10.1.0.5".parse().unwrap()),
            ingress: Some(vec![Allow {
                peers: Some(vec!["10.1.0.7".into(), "192.168.0.0/16".into()]),
                except: vec!["192.168.1.0/24".into()],
                ports: Some(vec![("tcp".into(), 80, 80), ("tcp".into(), 8000, 8080)]),
            }]),
            egress: Some(vec![]),
        }]);
        let t = render(&rules);
        assert!(t.contains("ip daddr 10.1.0.5 jump ingress_0"));
        assert!(t.contains("ip saddr 10.1.0.5 jump egress_0"));
        assert!(t.contains(
            "ip saddr != { 192.168.1.0/24 } ip saddr { 10.1.0.7, 192.168.0.0/16 } meta l4proto tcp th dport 8000-8080 return"
        ));
        // Egress isolated with no rule: everything out is dropped.
        assert!(t.contains("chain egress_0 {\n    drop\n  }"));
        assert!(t.contains("ct state established,related accept"));
    }
}
