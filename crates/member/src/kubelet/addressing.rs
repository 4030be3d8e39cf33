//! Pod addresses: each node's pods get IPs from the node's block of the
//! member's pod CIDR (`.1` is the node's gateway). Addresses already in
//! pods' status are learnt from the informer, so a restarted member hands
//! out no address twice.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use parking_lot::Mutex;

/// Pod IPs handed out per node (node → pod key → IP).
#[derive(Default)]
pub struct PodAddresses {
    by_node: Mutex<HashMap<String, HashMap<String, Ipv4Addr>>>,
}

impl PodAddresses {
    /// Records an address a pod already has.
    pub fn observe(&self, node: &str, pod: &str, ip: Ipv4Addr) {
        self.by_node
            .lock()
            .entry(node.to_string())
            .or_default()
            .insert(pod.to_string(), ip);
    }

    /// Gives the pod's address back.
    pub fn release(&self, node: &str, pod: &str) {
        if let Some(m) = self.by_node.lock().get_mut(node) {
            m.remove(pod);
        }
    }

    /// The pod's address on `node` from `block`, the same one every time.
    pub fn allocate(&self, node: &str, pod: &str, block: Ipv4Net) -> Option<Ipv4Addr> {
        let mut by_node = self.by_node.lock();
        let used = by_node.entry(node.to_string()).or_default();
        if let Some(ip) = used.get(pod) {
            return Some(*ip);
        }
        let taken: HashSet<Ipv4Addr> = used.values().copied().collect();
        let ip = block.hosts().skip(1).find(|ip| !taken.contains(ip))?;
        used.insert(pod.to_string(), ip);
        Some(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_stable_unique_and_reused_after_release() {
        let a = PodAddresses::default();
        let block: Ipv4Net = "10.1.0.0/29".parse().unwrap();
        let p1 = a.allocate("n1", "ns/p1", block).unwrap();
        assert_eq!(p1.to_string(), "10.1.0.2", ".1 is the gateway");
        assert_eq!(a.allocate("n1", "ns/p1", block), Some(p1));
        a.observe("n1", "ns/old", "10.1.0.3".parse().unwrap());
        assert_eq!(
            a.allocate("n1", "ns/p2", block).unwrap().to_string(),
            "10.1.0.4"
        );
        a.release("n1", "ns/p1");
        assert_eq!(a.allocate("n1", "ns/p3", block), Some(p1));
    }
}
