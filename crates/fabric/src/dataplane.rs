//! What the active gateway changes in the member's network, and takes
//! back when it stops:
//!
//! - the tunnel device ([`INTERFACE`]) and the underlay socket, both in
//!   the gateway node's namespace;
//! - a route per remote subnet on the gateway node (into the tunnel)
//!   and on the member's router, where every node's traffic leaves by
//!   default (to the gateway node), so pods on any node reach remote
//!   clusters, and replies find their way back the same way;
//! - one nftables table (`ip flotilla-fabric`) on the gateway node: TCP
//!   MSS clamped to the tunnel's MTU both ways, and under Globalnet
//!   pods' traffic into the tunnel SNATed to the cluster's egress IPs.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use flotilla_host::{self as host, HostError};
use ipnet::Ipv4Net;
use tokio::net::UdpSocket;

use crate::api::INTERFACE;

/// WireGuard's overhead on an underlay of MTU 1500.
pub const TUNNEL_MTU: u16 = 1420;
pub const TABLE: &str = "flotilla-fabric";

/// Where the gateway runs.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The gateway node's namespace.
    pub node_netns: String,
    /// The gateway node's address on the member's bridge.
    pub node_ip: Ipv4Addr,
    /// The member's router namespace (every node's default gateway).
    pub router_netns: String,
}

/// Opens the tunnel device and the underlay socket in the node's
/// namespace.
pub async fn open(
    node_netns: &str,
    listen: SocketAddr,
) -> Result<(tun_rs::AsyncDevice, UdpSocket), HostError> {
    // A device left by a gateway that was killed goes first.
    let _ = host::ip(&["-n", node_netns, "link", "del", INTERFACE]).await;
    let (tun, udp) = host::in_netns(node_netns, move || {
        let tun = tun_rs::DeviceBuilder::new()
            .name(INTERFACE)
            .mtu(TUNNEL_MTU)
            // TCP sends arrive whole (up to 64 KiB) and leave coalesced:
            // a read or write per 64 KiB instead of per packet.
            .offload(true)
            .build_sync()?;
        let udp = std::net::UdpSocket::bind(listen)?;
        udp.set_nonblocking(true)?;
        Ok((tun, udp))
    })
    .await
    .map_err(|e| HostError::Missing(format!("cannot open the tunnel in {node_netns}: {e}")))?;
    host::ip(&["-n", node_netns, "link", "set", INTERFACE, "up"]).await?;
    let tun = tun_rs::AsyncDevice::new(tun)
        .map_err(|e| HostError::Missing(format!("cannot drive the tunnel device: {e}")))?;
    let udp = UdpSocket::from_std(udp)
        .map_err(|e| HostError::Missing(format!("cannot drive the underlay socket: {e}")))?;
    Ok((tun, udp))
}

/// Closes what [`open`] made that outlives the process's handles.
pub async fn close(node_netns: &str) {
    let _ = host::ip(&["-n", node_netns, "link", "del", INTERFACE]).await;
    let _ = host::nft(node_netns, &format!("delete table ip {TABLE}\n")).await;
}

/// The routes this gateway installed, so it changes only those.
#[derive(Default)]
pub struct Routes {
    installed: BTreeSet<Ipv4Net>,
}

impl Routes {
    /// Routes exactly `want` through the tunnel.
    pub async fn apply(
        &mut self,
        at: &Placement,
        want: &BTreeSet<Ipv4Net>,
    ) -> Result<(), HostError> {
        let mut node = Vec::new();
        let mut router = Vec::new();
        for gone in self.installed.difference(want) {
            node.push(format!("route del {gone} dev {INTERFACE}"));
            router.push(format!("route del {gone} via {}", at.node_ip));
        }
        // `replace` also takes a route over from a gateway that failed.
        for net in want {
            node.push(format!("route replace {net} dev {INTERFACE}"));
            router.push(format!("route replace {net} via {}", at.node_ip));
        }
        // `del` of a route already gone fails the batch: run the
        // removals one by one, quietly, and the rest as a batch.
        let (node_del, node_set): (Vec<_>, Vec<_>) =
            node.into_iter().partition(|l| l.starts_with("route del"));
        let (router_del, router_set): (Vec<_>, Vec<_>) =
            router.into_iter().partition(|l| l.starts_with("route del"));
        for l in node_del {
            let _ = host::ip_batch(&at.node_netns, &[l]).await;
        }
        for l in router_del {
            let _ = host::ip_batch(&at.router_netns, &[l]).await;
        }
        host::ip_batch(&at.node_netns, &node_set).await?;
        host::ip_batch(&at.router_netns, &router_set).await?;
        self.installed = want.clone();
        Ok(())
    }

    /// Takes every route back (those through this gateway only: another
    /// may have taken the router's over).
    pub async fn clear(&mut self, at: &Placement) {
        let _ = self.apply_removal(at).await;
    }

    async fn apply_removal(&mut self, at: &Placement) -> Result<(), HostError> {
        for net in std::mem::take(&mut self.installed) {
            let _ = host::ip_batch(
                &at.node_netns,
                &[format!("route del {net} dev {INTERFACE}")],
            )
            .await;
            let _ = host::ip_batch(
                &at.router_netns,
                &[format!("route del {net} via {}", at.node_ip)],
            )
            .await;
        }
        Ok(())
    }
}

/// The gateway node's nftables table.
pub fn render_table(local: &[Ipv4Net], egress: Option<(Ipv4Addr, Ipv4Addr)>) -> String {
    let mut s = format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\ntable ip {TABLE} {{\n");
    s.push_str(&format!(
        "  chain forward {{ type filter hook forward priority -150; policy accept; \
         oifname \"{INTERFACE}\" tcp flags syn tcp option maxseg size set rt mtu; \
         iifname \"{INTERFACE}\" tcp flags syn tcp option maxseg size set rt mtu; }}\n"
    ));
    if let Some((first, last)) = egress
        && !local.is_empty()
    {
        let sources = local
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "  chain postrouting {{ type nat hook postrouting priority 90; policy accept; \
             oifname \"{INTERFACE}\" ip saddr {{ {sources} }} snat ip to {first}-{last}; }}\n"
        ));
    }
    s.push_str("}\n");
    s
}

pub async fn apply_table(node_netns: &str, script: &str) -> Result<(), HostError> {
    host::nft(node_netns, script).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_clamps_mss_and_snats_only_under_globalnet() {
        let local: Vec<Ipv4Net> = vec!["10.128.0.0/16".parse().unwrap()];
        let plain = render_table(&local, None);
        assert!(plain.contains("maxseg size set rt mtu"));
        assert!(!plain.contains("snat"));
        let global = render_table(
            &local,
            Some((Ipv4Addr::new(242, 0, 0, 1), Ipv4Addr::new(242, 0, 0, 8))),
        );
        assert!(global.contains("ip saddr { 10.128.0.0/16 } snat ip to 242.0.0.1-242.0.0.8"));
    }
}
