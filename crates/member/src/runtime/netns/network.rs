//! A member's pod network, made of network namespaces:
//!
//! ```text
//!  <prefix>            the member's own network: bridge br0 (node CIDR .1),
//!   │                  a route to each node's pod block via that node
//!   ├─ <prefix>-n0     node 0: eth0 (its InternalIP) on br0, a veth and
//!   │   ├─ <prefix>-p… a /32 route per pod
//!   │   └─ <prefix>-p…
//!   └─ <prefix>-n1 …
//! ```
//!
//! Pods are routed, not bridged (as Calico does): a pod's `eth0` has its
//! IP as a /32 and a default route via the link-local 169.254.1.1, which
//! the node's end of the veth answers by proxy ARP. Every packet to or
//! from a pod is then routed by its node, where Services (DNAT) and
//! NetworkPolicy (filter) see it with its real addresses, whether the
//! peer is on the same node or not. Nothing is made in the host's own
//! network namespace, so members on one machine may use the same
//! (overlapping) CIDRs.

use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::config::SimConfig;
use flotilla_host::netlink::Netlink;
use flotilla_host::{self as host, HostError};

/// The names and addresses of one member's network. Clones share its
/// nodes, which join and leave while the member runs (an infrastructure
/// provider's machines).
#[derive(Clone, Debug)]
pub struct MemberNetwork {
    /// Every namespace of this member starts with it (`flt-` and a hash
    /// of the member's data dir, so two members never share one).
    pub prefix: String,
    pub node_cidr: Ipv4Net,
    nodes: Arc<RwLock<Vec<NodeNetwork>>>,
    /// Bumped whenever a node's network is made or removed.
    changes: Arc<watch::Sender<u64>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeNetwork {
    pub name: String,
    pub netns: String,
    pub ip: Ipv4Addr,
    pub pod_block: Ipv4Net,
    /// The node's slot: its address, pod block and link names follow it.
    pub index: usize,
}

/// Every pod's default gateway: its node's end of the veth, by proxy ARP.
pub const POD_GATEWAY: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);

fn first_host(net: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net.network()).saturating_add(1))
}

/// Short hex of a hash, for names that must fit in 15 characters.
pub fn short_hash(input: &str, chars: usize) -> String {
    let digest = Sha256::digest(input.as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(chars)
        .collect()
}

impl MemberNetwork {
    /// The network a member of `config` whose data lives in `identity`
    /// gets, with the nodes named (by their slots).
    pub fn plan(
        config: &SimConfig,
        identity: &str,
        nodes: &[(String, usize)],
    ) -> Result<MemberNetwork, String> {
        let prefix = format!("flt-{}", short_hash(identity, 8));
        let network = MemberNetwork {
            prefix,
            node_cidr: config.node_cidr,
            nodes: Default::default(),
            changes: Arc::new(watch::channel(0).0),
        };
        let nodes = nodes
            .iter()
            .map(|(name, i)| network.node_plan(config, name, *i))
            .collect::<Option<Vec<_>>>()
            .ok_or("the node or pod CIDR is too small for the nodes")?;
        *network.nodes.write() = nodes;
        Ok(network)
    }

    /// The network of the node named `name` in slot `index`.
    pub fn node_plan(&self, config: &SimConfig, name: &str, index: usize) -> Option<NodeNetwork> {
        Some(NodeNetwork {
            name: name.into(),
            netns: format!("{}-n{index}", self.prefix),
            ip: config.node_ip(index)?,
            pod_block: config.node_pod_cidr(index)?,
            index,
        })
    }

    /// The nodes whose network is made.
    pub fn nodes(&self) -> Vec<NodeNetwork> {
        self.nodes.read().clone()
    }

    /// Changes whenever a node's network is made or removed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The member's address on its bridge (where cluster DNS listens).
    pub fn bridge_ip(&self) -> Ipv4Addr {
        first_host(self.node_cidr)
    }

    pub fn node(&self, name: &str) -> Option<NodeNetwork> {
        self.nodes.read().iter().find(|n| n.name == name).cloned()
    }

    /// The namespace of a pod with `uid`.
    pub fn pod_netns(&self, uid: &str) -> String {
        format!("{}-p{}", self.prefix, short_hash(uid, 10))
    }

    /// Every namespace this member has, from this run or an earlier one.
    pub fn leftovers(&self) -> Vec<String> {
        host::namespaces_with_prefix(&self.prefix)
    }

    /// Removes whatever an earlier run left (its processes included).
    pub async fn clean(&self) {
        // Pods first: their veths' peers live in the nodes.
        let mut all = self.leftovers();
        all.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for ns in all {
            host::remove_netns(&ns).await;
        }
    }

    /// Makes the member's bridge and its nodes.
    pub async fn create(&self) -> Result<(), HostError> {
        let member = &self.prefix;
        host::ip(&["netns", "add", member]).await?;
        let bridge_ip = first_host(self.node_cidr);
        let len = self.node_cidr.prefix_len();
        host::ip_batch(
            member,
            &[
                "link set lo up".to_string(),
                "link add br0 type bridge".into(),
                format!("addr add {bridge_ip}/{len} dev br0"),
                "link set br0 up".into(),
            ],
        )
        .await?;
        host::sysctl(member, &["net.ipv4.ip_forward=1"]).await?;
        for node in self.nodes() {
            self.make_node(&node).await?;
        }
        Ok(())
    }

    /// Makes a node's namespace, on the bridge, with a route to its pod
    /// block; a node already made is left as it is. On failure nothing of
    /// it is left.
    pub async fn add_node(&self, node: NodeNetwork) -> Result<(), HostError> {
        if self.node(&node.name).as_ref() == Some(&node) {
            return Ok(());
        }
        if let Err(e) = self.make_node(&node).await {
            self.unmake_node(&node).await;
            return Err(e);
        }
        self.nodes.write().push(node);
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Removes a node's namespace and route (its pods' links go with it).
    pub async fn remove_node(&self, name: &str) {
        let Some(node) = self.node(name) else {
            return;
        };
        self.nodes.write().retain(|n| n.name != name);
        self.unmake_node(&node).await;
        self.changes.send_modify(|n| *n += 1);
    }

    async fn make_node(&self, node: &NodeNetwork) -> Result<(), HostError> {
        let bridge_ip = first_host(self.node_cidr);
        let len = self.node_cidr.prefix_len();
        let i = node.index;
        host::ip(&["netns", "add", &node.netns]).await?;
        host::ip_batch(
            &self.prefix,
            &[
                format!(
                    "link add n{i} type veth peer name eth0 netns {}",
                    node.netns
                ),
                format!("link set n{i} master br0 up"),
                format!("route add {} via {}", node.pod_block, node.ip),
            ],
        )
        .await?;
        host::ip_batch(
            &node.netns,
            &[
                "link set lo up".into(),
                format!("addr add {}/{len} dev eth0", node.ip),
                "link set eth0 up".into(),
                format!("route add default via {bridge_ip}"),
            ],
        )
        .await?;
        // Pods' veths, made later, answer ARP for their gateway.
        host::sysctl(
            &node.netns,
            &["net.ipv4.ip_forward=1", "net.ipv4.conf.default.proxy_arp=1"],
        )
        .await
    }

    async fn unmake_node(&self, node: &NodeNetwork) {
        // The bridge's end of its veth goes with the namespace.
        host::remove_netns(&node.netns).await;
        let block = node.pod_block.to_string();
        let _ = host::ip(&["-n", &self.prefix, "route", "del", &block]).await;
        let _ = host::ip(&[
            "-n",
            &self.prefix,
            "link",
            "del",
            &format!("n{}", node.index),
        ])
        .await;
    }

    /// Makes a pod's namespace, with `ip` on its node's bridge. On
    /// failure nothing of it is left.
    pub async fn create_pod(
        &self,
        node: &NodeNetwork,
        netns: &str,
        ip: Ipv4Addr,
    ) -> Result<(), HostError> {
        let made = async {
            host::netlink::add_netns(netns)
                .await
                .map_err(|e| failed("netns add", e))?;
            // The node's end is named after the pod's namespace (15 chars max).
            let veth = veth_name(netns);
            let pod_ns = std::fs::File::open(host::netns_path(netns))
                .map_err(|e| failed("open the pod's namespace", e))?;
            let on_node = Netlink::open(&node.netns)
                .await
                .map_err(|e| failed("netlink in the node", e))?;
            let in_pod = Netlink::open(netns)
                .await
                .map_err(|e| failed("netlink in the pod", e))?;
            let wire = async {
                on_node.add_veth(&veth, "eth0", &pod_ns).await?;
                let node_end = on_node.index(&veth).await?;
                on_node.set_up(node_end).await?;
                on_node.add_route(ip, 32, node_end, None).await?;
                in_pod.set_up(in_pod.index("lo").await?).await?;
                let eth0 = in_pod.index("eth0").await?;
                in_pod.add_address(eth0, ip, 32).await?;
                in_pod.set_up(eth0).await?;
                in_pod.add_route(POD_GATEWAY, 32, eth0, None).await?;
                in_pod
                    .add_route(Ipv4Addr::UNSPECIFIED, 0, eth0, Some(POD_GATEWAY))
                    .await
            };
            wire.await.map_err(|e| failed("wire the pod", e))?;
            // Containers run as users other than root and still bind the
            // ports their manifests declare, as with a container runtime.
            host::sysctl(
                netns,
                &[
                    "net.ipv4.ip_unprivileged_port_start=0",
                    "net.ipv4.ping_group_range=0 2147483647",
                ],
            )
            .await?;
            // The node answers the pod's ARP for its gateway at once: by
            // default a proxied answer waits up to 0.8 s (`proxy_delay`),
            // which a pod whose neighbour entry had expired paid on a
            // fresh connection's SYN-ACK (Calico sets 0 too). Per link: a
            // namespace other than the first has no `neigh.default`.
            host::sysctl(
                &node.netns,
                &[&format!("net.ipv4.neigh.{veth}.proxy_delay=0")],
            )
            .await
        };
        match made.await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.remove_pod(node, netns).await;
                Err(e)
            }
        }
    }

    /// Removes a pod's namespace and its veth, killing what runs there.
    pub async fn remove_pod(&self, node: &NodeNetwork, netns: &str) {
        host::remove_netns(netns).await;
        // The veth goes with the namespace; this catches a half-made one.
        if let Ok(on_node) = Netlink::open(&node.netns).await {
            let _ = on_node.delete_link(&veth_name(netns)).await;
        }
    }

    /// Removes the whole network.
    pub async fn destroy(&self) {
        self.clean().await;
    }
}

fn failed(step: &str, e: std::io::Error) -> HostError {
    HostError::Failed {
        command: step.to_string(),
        stderr: e.to_string(),
    }
}

fn veth_name(netns: &str) -> String {
    format!("v{}", short_hash(netns, 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_limits_and_differ_per_member() {
        let config = SimConfig {
            cluster_name: "a-rather-long-cluster-name".into(),
            ..SimConfig::default()
        };
        let nodes: Vec<(String, usize)> = (0..3).map(|i| (config.node_name(i), i)).collect();
        let a = MemberNetwork::plan(&config, "/data/one", &nodes).unwrap();
        let b = MemberNetwork::plan(&config, "/data/two", &nodes).unwrap();
        assert_ne!(a.prefix, b.prefix);
        assert_eq!(a.nodes().len(), 3);
        assert_eq!(a.nodes()[1].pod_block.to_string(), "10.128.1.0/24");
        assert_eq!(
            a.node(&config.node_name(2)).unwrap().netns,
            format!("{}-n2", a.prefix)
        );
        let pod = a.pod_netns("0f1e2d3c-uid");
        assert!(pod.starts_with(&format!("{}-p", a.prefix)));
        assert!(veth_name(&pod).len() <= 15);
    }
}
