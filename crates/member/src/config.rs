//! The shape of a simulated member cluster.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use ipnet::Ipv4Net;

/// Everything the simulator needs to know about the cluster it plays.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The cluster's name; nodes are called `<name>-node-<i>`.
    pub cluster_name: String,
    pub nodes: usize,
    /// Node capacity, as Kubernetes quantities.
    pub node_cpu: String,
    pub node_memory: String,
    pub node_pods: u32,
    pub region: String,
    /// Zones the nodes are spread over, round robin.
    pub zones: Vec<String>,
    /// Cloud provider, used in `spec.providerID`.
    pub provider: String,
    pub instance_type: String,
    /// Extra labels on every node.
    pub node_labels: BTreeMap<String, String>,
    /// How long a bound pod takes to be Running and Ready.
    pub pod_startup: Duration,
    /// How long a pod that runs to completion (restartPolicy Never or
    /// OnFailure) runs, unless its `run-duration` annotation says otherwise.
    pub job_duration: Duration,
    /// How often each node renews its Lease in kube-node-lease.
    pub heartbeat: Duration,
    /// Pod addresses; each node gets a block of it.
    pub pod_cidr: Ipv4Net,
    /// Node InternalIPs.
    pub node_cidr: Ipv4Net,
    /// Where the local provisioner keeps the directories of the volumes
    /// it makes.
    pub volumes_dir: std::path::PathBuf,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            cluster_name: "member".into(),
            nodes: 3,
            node_cpu: "4".into(),
            node_memory: "16Gi".into(),
            node_pods: 110,
            region: "region-1".into(),
            zones: vec!["zone-a".into()],
            provider: "flotilla".into(),
            instance_type: "sim.standard-4".into(),
            node_labels: BTreeMap::new(),
            pod_startup: Duration::from_secs(2),
            job_duration: Duration::from_secs(5),
            heartbeat: Duration::from_secs(10),
            pod_cidr: Ipv4Net::new(Ipv4Addr::new(10, 128, 0, 0), 9).unwrap_or_default(),
            node_cidr: Ipv4Net::new(Ipv4Addr::new(172, 18, 0, 0), 16).unwrap_or_default(),
            volumes_dir: std::env::temp_dir().join("flotilla-volumes"),
        }
    }
}

/// The addresses each node's pod block has for `node_pods` pods: a power
/// of two with room for every pod, at least a /24.
pub fn pod_block_size(node_pods: u32) -> u32 {
    (node_pods.saturating_add(2)).next_power_of_two().max(256)
}

impl SimConfig {
    pub fn node_name(&self, i: usize) -> String {
        format!("{}-node-{i}", self.cluster_name)
    }

    /// The index of one of this cluster's nodes, from its name.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        let i: usize = name
            .strip_prefix(self.cluster_name.as_str())?
            .strip_prefix("-node-")?
            .parse()
            .ok()?;
        (i < self.nodes && self.node_name(i) == name).then_some(i)
    }

    pub fn zone_of(&self, i: usize) -> &str {
        if self.zones.is_empty() {
            ""
        } else {
            &self.zones[i % self.zones.len()]
        }
    }

    /// Addresses per node: a power of two with room for every pod.
    fn block_size(&self) -> u32 {
        pod_block_size(self.node_pods)
    }

    /// Node `i`'s pod CIDR.
    pub fn node_pod_cidr(&self, i: usize) -> Option<Ipv4Net> {
        let block = self.block_size();
        let base = u32::from(self.pod_cidr.network()).checked_add(block.checked_mul(i as u32)?)?;
        let addr = Ipv4Addr::from(base);
        if !self.pod_cidr.contains(&addr) {
            return None;
        }
        Ipv4Net::new(addr, 32 - block.trailing_zeros() as u8).ok()
    }

    /// Node `i`'s InternalIP.
    pub fn node_ip(&self, i: usize) -> Option<Ipv4Addr> {
        let base = u32::from(self.node_cidr.network()).checked_add(i as u32 + 2)?;
        let addr = Ipv4Addr::from(base);
        self.node_cidr.contains(&addr).then_some(addr)
    }

    /// Checks the shape is one the simulator can build.
    pub fn validate(&self) -> Result<(), String> {
        if crate::quantity::millicores(&self.node_cpu).is_none_or(|m| m <= 0) {
            return Err(format!(
                "--node-cpu {:?} is not a CPU quantity (try 4 or 3500m)",
                self.node_cpu
            ));
        }
        if crate::quantity::units(&self.node_memory).is_none_or(|b| b <= 0) {
            return Err(format!(
                "--node-memory {:?} is not a memory quantity (try 16Gi)",
                self.node_memory
            ));
        }
        if self.node_pods == 0 {
            return Err("--node-pods must be at least 1".into());
        }
        if self.nodes > 0 && self.node_pod_cidr(self.nodes - 1).is_none() {
            return Err(format!(
                "--pod-cidr {} is too small for {} nodes of {} pods",
                self.pod_cidr, self.nodes, self.node_pods
            ));
        }
        if self.nodes > 0 && self.node_ip(self.nodes - 1).is_none() {
            return Err(format!(
                "--node-cidr {} is too small for {} nodes",
                self.node_cidr, self.nodes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_blocks_do_not_overlap() {
        let c = SimConfig::default();
        assert_eq!(
            c.node_pod_cidr(0).map(|n| n.to_string()),
            Some("10.128.0.0/24".into())
        );
        assert_eq!(
            c.node_pod_cidr(1).map(|n| n.to_string()),
            Some("10.128.1.0/24".into())
        );
        let big = SimConfig {
            node_pods: 500,
            ..SimConfig::default()
        };
        assert_eq!(
            big.node_pod_cidr(1).map(|n| n.to_string()),
            Some("10.128.2.0/23".into())
        );
        assert!(c.validate().is_ok());
        assert_eq!(c.node_index("member-node-2"), Some(2));
        assert_eq!(c.node_index("member-node-3"), None);
        assert_eq!(c.node_index("member-node-02"), None);
        assert_eq!(c.node_index("other-node-1"), None);
        let too_many = SimConfig {
            nodes: 100_000,
            ..SimConfig::default()
        };
        assert!(too_many.validate().is_err());
    }
}
