//! From the broker's endpoints to what this gateway does: one peer per
//! remote cluster, the subnets routed to the tunnel, and, for endpoints
//! that cannot be used, why (shown on the Gateway's connections). No I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};

use ipnet::Ipv4Net;

use crate::api::{BACKEND, EndpointSpec, PUBLIC_KEY, UDP_PORT};
use crate::wireguard::{PeerConfig, decode_key};

/// This cluster, as the plan needs it.
#[derive(Clone, Debug)]
pub struct Local {
    pub cluster_id: String,
    /// Its real pod and service CIDRs.
    pub cidrs: Vec<Ipv4Net>,
    /// Its global CIDR, under Globalnet.
    pub global_cidr: Option<Ipv4Net>,
}

impl Local {
    /// What it routes through its gateway, as its Endpoint says.
    pub fn subnets(&self) -> Vec<Ipv4Net> {
        match self.global_cidr {
            Some(g) => vec![g],
            None => self.cidrs.clone(),
        }
    }
}

/// One remote cluster's endpoint and what became of it.
#[derive(Clone, Debug)]
pub struct Remote {
    pub endpoint: EndpointSpec,
    pub peer: Option<PeerConfig>,
    /// Why it is not used, when it is not.
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub remotes: Vec<Remote>,
    pub routes: BTreeSet<Ipv4Net>,
}

impl Plan {
    pub fn peers(&self) -> Vec<PeerConfig> {
        self.remotes.iter().filter_map(|r| r.peer.clone()).collect()
    }
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn list(nets: &[Ipv4Net]) -> String {
    nets.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plan for `endpoints` (each with its creation time, newest wins
/// when a cluster has two during a failover).
pub fn plan(local: &Local, endpoints: &[(EndpointSpec, Option<jiff::Timestamp>)]) -> Plan {
    let mut newest: BTreeMap<&str, &(EndpointSpec, Option<jiff::Timestamp>)> = BTreeMap::new();
    for e in endpoints {
        if e.0.cluster_id == local.cluster_id || e.0.cluster_id.is_empty() {
            continue;
        }
        let keep = newest
            .get(e.0.cluster_id.as_str())
            .is_none_or(|have| e.1 > have.1);
        if keep {
            newest.insert(&e.0.cluster_id, e);
        }
    }
    let mut own: Vec<Ipv4Net> = local.cidrs.clone();
    own.extend(local.global_cidr);
    let mut claimed: Vec<(Ipv4Net, String)> = Vec::new();
    let mut keys: Vec<([u8; 32], String)> = Vec::new();
    let mut plan = Plan::default();
    for (cluster, (endpoint, _)) in newest {
        let result = peer(local, endpoint, &own, &claimed).and_then(|p| {
            // A key identifies the peer a handshake comes from.
            match keys.iter().find(|(k, _)| *k == p.public_key) {
                Some((_, other)) => Err(format!(
                    "its public key is also cluster {other}'s: not connected (each cluster needs a key of its own)"
                )),
                None => {
                    keys.push((p.public_key, cluster.to_string()));
                    Ok(p)
                }
            }
        });
        let (peer, problem) = match result {
            Ok(p) => {
                for n in &p.allowed {
                    claimed.push((*n, cluster.to_string()));
                    plan.routes.insert(*n);
                }
                (Some(p), None)
            }
            Err(problem) => (None, Some(problem)),
        };
        plan.remotes.push(Remote {
            endpoint: endpoint.clone(),
            peer,
            problem,
        });
    }
    plan
}

fn peer(
    local: &Local,
    e: &EndpointSpec,
    own: &[Ipv4Net],
    claimed: &[(Ipv4Net, String)],
) -> Result<PeerConfig, String> {
    if e.backend != BACKEND {
        return Err(format!(
            "cable driver {:?} is not supported: this gateway speaks {BACKEND}",
            e.backend
        ));
    }
    let key = e
        .backend_config
        .get(PUBLIC_KEY)
        .ok_or_else(|| format!("backend_config has no {PUBLIC_KEY}"))?;
    let public_key = decode_key(key).ok_or_else(|| {
        format!("backend_config.{PUBLIC_KEY} {key:?} is not a WireGuard public key")
    })?;
    let ip: Ipv4Addr = e
        .public_ip
        .parse()
        .map_err(|_| format!("public_ip {:?} is not an IPv4 address", e.public_ip))?;
    let port = match e.backend_config.get("udp-port") {
        Some(p) => p
            .parse()
            .map_err(|_| format!("backend_config.udp-port {p:?} is not a port"))?,
        None => UDP_PORT,
    };
    let mut allowed = Vec::new();
    for s in &e.subnets {
        let net: Ipv4Net = s
            .parse()
            .map_err(|_| format!("subnet {s:?} is not an IPv4 CIDR"))?;
        allowed.push(net.trunc());
    }
    if allowed.is_empty() {
        return Err("it advertises no subnets".into());
    }
    let clash: Vec<Ipv4Net> = own
        .iter()
        .filter(|o| allowed.iter().any(|a| overlaps(a, o)))
        .copied()
        .collect();
    if !clash.is_empty() {
        let hint = if local.global_cidr.is_some() {
            "give that cluster a global CIDR too (join it with Globalnet)"
        } else {
            "join the clusters with Globalnet (flotilla join --globalnet), or give them distinct CIDRs"
        };
        return Err(format!(
            "its subnets {} overlap this cluster's {}: not routed; {hint}",
            list(&allowed),
            list(&clash)
        ));
    }
    if let Some((net, other)) = claimed
        .iter()
        .find(|(n, _)| allowed.iter().any(|a| overlaps(a, n)))
    {
        return Err(format!(
            "its subnets {} overlap {net} of cluster {other}: not routed",
            list(&allowed)
        ));
    }
    let health_ip = e.health_check_ip.parse().unwrap_or(ip);
    Ok(PeerConfig {
        cluster: e.cluster_id.clone(),
        public_key,
        endpoint: SocketAddr::from((ip, port)),
        allowed,
        health_ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wireguard::KeyPair;

    fn endpoint(cluster: &str, ip: &str, subnets: &[&str]) -> EndpointSpec {
        EndpointSpec {
            cluster_id: cluster.into(),
            cable_name: EndpointSpec::cable_name(cluster, ip),
            public_ip: ip.into(),
            private_ip: ip.into(),
            subnets: subnets.iter().map(|s| s.to_string()).collect(),
            backend: BACKEND.into(),
            backend_config: [(PUBLIC_KEY.to_string(), KeyPair::generate().public_base64())].into(),
            ..Default::default()
        }
    }

    fn local() -> Local {
        Local {
            cluster_id: "a".into(),
            cidrs: vec![
                "10.1.0.0/16".parse().unwrap(),
                "10.96.0.0/16".parse().unwrap(),
            ],
            global_cidr: None,
        }
    }

    #[test]
    fn distinct_clusters_are_peers_and_routed() {
        let p = plan(
            &local(),
            &[
                (endpoint("a", "100.64.0.2", &["10.1.0.0/16"]), None),
                (
                    endpoint("b", "100.64.0.3", &["10.2.0.0/16", "10.97.0.0/16"]),
                    None,
                ),
            ],
        );
        assert_eq!(p.remotes.len(), 1, "its own endpoint is not a peer");
        let peer = p.remotes[0].peer.as_ref().unwrap();
        assert_eq!(peer.endpoint.to_string(), "100.64.0.3:4500");
        assert_eq!(p.routes.len(), 2);
    }

    #[test]
    fn overlapping_and_broken_endpoints_are_explained_not_routed() {
        let mut bad_key = endpoint("c", "100.64.0.4", &["10.3.0.0/16"]);
        bad_key
            .backend_config
            .insert(PUBLIC_KEY.into(), "garbage".into());
        let p = plan(
            &local(),
            &[
                (endpoint("b", "100.64.0.3", &["10.1.0.0/16"]), None),
                (bad_key, None),
                (endpoint("d", "100.64.0.5", &["10.5.0.0/16"]), None),
                (endpoint("e", "100.64.0.6", &["10.5.128.0/17"]), None),
            ],
        );
        let problem = |c: &str| {
            p.remotes
                .iter()
                .find(|r| r.endpoint.cluster_id == c)
                .and_then(|r| r.problem.clone())
        };
        assert!(
            problem("b")
                .unwrap()
                .contains("overlap this cluster's 10.1.0.0/16")
        );
        assert!(problem("b").unwrap().contains("Globalnet"));
        assert!(problem("c").unwrap().contains("not a WireGuard public key"));
        assert_eq!(problem("d"), None);
        assert!(problem("e").unwrap().contains("of cluster d"));
        assert_eq!(
            p.routes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            vec!["10.5.0.0/16"]
        );
    }

    #[test]
    fn globalnet_advertises_the_global_cidr_and_newest_endpoint_wins() {
        let mut l = local();
        l.global_cidr = Some("242.0.0.0/16".parse().unwrap());
        assert_eq!(l.subnets().len(), 1);
        let old = jiff::Timestamp::from_second(1).unwrap();
        let new = jiff::Timestamp::from_second(2).unwrap();
        let p = plan(
            &l,
            &[
                (endpoint("b", "100.64.0.3", &["242.1.0.0/16"]), Some(new)),
                (endpoint("b", "100.64.0.9", &["242.1.0.0/16"]), Some(old)),
            ],
        );
        assert_eq!(p.remotes.len(), 1);
        assert_eq!(p.remotes[0].endpoint.public_ip, "100.64.0.3");
    }
}
