//! The underlay: the network gateways meet on, standing in for the
//! internet between clusters. It is a network namespace holding one
//! bridge (`ul0`, with the range's first address); a gateway joins it
//! with a veth whose underlay end is named after the gateway's address,
//! so two gateways can never take the same one (the kernel refuses the
//! second name).

use std::net::Ipv4Addr;

use flotilla_host::{self as host, HostError};
use ipnet::Ipv4Net;

pub const BRIDGE: &str = "ul0";
/// The gateway's end of its underlay link, in its node's namespace.
pub const UPLINK: &str = "ul0";

/// Makes the underlay `name` over `cidr`; an existing one is kept. A
/// process that owns it (rather than an administrator's command) records
/// it first with [`own`].
pub async fn create(name: &str, cidr: Ipv4Net) -> Result<(), HostError> {
    if host::netns_path(name).exists() {
        return Ok(());
    }
    let made = async {
        host::ip(&["netns", "add", name]).await?;
        let first = Ipv4Addr::from(u32::from(cidr.network()).saturating_add(1));
        host::ip_batch(
            name,
            &[
                "link set lo up".into(),
                format!("link add {BRIDGE} type bridge"),
                format!("addr add {first}/{} dev {BRIDGE}", cidr.prefix_len()),
                format!("link set {BRIDGE} up"),
            ],
        )
        .await
    };
    match made.await {
        Ok(()) => Ok(()),
        Err(e) => {
            host::remove_netns(name).await;
            Err(e)
        }
    }
}

/// Records this process as the owner of underlay `name` in the host's
/// record, before it is made: once this process is gone without
/// [`delete`], the next `flotilla up`, netns member or `flotilla cleanup`
/// removes it.
pub fn own(name: &str, data_dir: &str) -> Result<(), HostError> {
    host::record::claim(name, "underlay", data_dir).map_err(|e| {
        HostError::Missing(format!(
            "cannot record the underlay {name} in {}: {e}",
            host::record::dir().display()
        ))
    })
}

/// Removes the underlay (every gateway's link to it goes with it) and its
/// entry in the host's record.
pub async fn delete(name: &str) {
    if host::netns_path(name).exists() {
        host::remove_netns(name).await;
    }
    host::record::release(name);
}

/// Cuts (`false`) or restores (`true`) the underlay: its bridge stops or
/// resumes forwarding, as a failed WAN link would.
pub async fn set_up(name: &str, up: bool) -> Result<(), HostError> {
    let state = if up { "up" } else { "down" };
    host::ip(&["-n", name, "link", "set", BRIDGE, state])
        .await
        .map(|_| ())
}

/// The underlay's range, read from its bridge.
pub async fn cidr(name: &str) -> Result<Ipv4Net, HostError> {
    if !host::netns_path(name).exists() {
        return Err(HostError::Missing(format!(
            "there is no underlay {name:?} (make it with `flotilla underlay create {name}`)"
        )));
    }
    let out = host::ip(&["-n", name, "-4", "-o", "addr", "show", "dev", BRIDGE]).await?;
    first_net(&out).ok_or_else(|| {
        HostError::Missing(format!("the underlay {name:?} has no address on {BRIDGE}"))
    })
}

/// The first `inet A/N` of `ip -o addr` output, as the network it is in
/// (`with_addr` keeps the address).
fn first_inet(out: &str) -> Option<Ipv4Net> {
    let mut words = out.split_whitespace();
    while let Some(w) = words.next() {
        if w == "inet" {
            return words.next()?.parse().ok();
        }
    }
    None
}

fn first_net(out: &str) -> Option<Ipv4Net> {
    first_inet(out).map(|n| n.trunc())
}

/// The veth name of an address on the underlay (15 characters at most).
fn port_name(ip: Ipv4Addr) -> String {
    format!("u{:08x}", u32::from(ip))
}

/// Joins `node_netns` to the underlay and returns its address there: the
/// one it already has, or a free one picked from `seed`.
pub async fn attach(underlay: &str, node_netns: &str, seed: &str) -> Result<Ipv4Net, HostError> {
    let cidr = cidr(underlay).await?;
    if let Ok(out) = host::ip(&["-n", node_netns, "-4", "-o", "addr", "show", "dev", UPLINK]).await
        && let Some(have) = first_inet(&out)
    {
        return Ok(have);
    }
    // A half-made uplink from an earlier try goes first.
    let _ = host::ip(&["-n", node_netns, "link", "del", UPLINK]).await;
    let hosts = (1u32 << (32 - cidr.prefix_len())).saturating_sub(3).max(1);
    let start = seed.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let mut last = None;
    for attempt in 0..16u32 {
        let offset = 2 + (start.wrapping_add(attempt) % hosts);
        let ip = Ipv4Addr::from(u32::from(cidr.network()) + offset);
        let port = port_name(ip);
        let made = host::ip(&[
            "-n", node_netns, "link", "add", UPLINK, "type", "veth", "peer", "name", &port,
            "netns", underlay,
        ])
        .await;
        match made {
            Ok(_) => {}
            Err(e) => {
                // Taken by another gateway: the next address.
                last = Some(e);
                continue;
            }
        }
        let len = cidr.prefix_len();
        let wired = async {
            host::ip(&["-n", underlay, "link", "set", &port, "master", BRIDGE, "up"]).await?;
            host::ip_batch(
                node_netns,
                &[
                    format!("addr add {ip}/{len} dev {UPLINK}"),
                    format!("link set {UPLINK} up"),
                ],
            )
            .await
        };
        if let Err(e) = wired.await {
            let _ = host::ip(&["-n", node_netns, "link", "del", UPLINK]).await;
            return Err(e);
        }
        return Ok(Ipv4Net::new(ip, len).unwrap_or(cidr));
    }
    Err(last.unwrap_or_else(|| {
        HostError::Missing(format!("no free address on the underlay {underlay:?}"))
    }))
}

/// Leaves the underlay.
pub async fn detach(node_netns: &str) {
    let _ = host::ip(&["-n", node_netns, "link", "del", UPLINK]).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ip_addr_output() {
        let out = "5: ul0    inet 100.64.0.7/16 brd 100.64.255.255 scope global ul0\\       valid_lft forever";
        assert_eq!(first_inet(out).unwrap().to_string(), "100.64.0.7/16");
        assert_eq!(first_net(out).unwrap().to_string(), "100.64.0.0/16");
        assert_eq!(first_inet(""), None);
        assert_eq!(port_name(Ipv4Addr::new(100, 64, 0, 7)), "u64400007");
    }
}
