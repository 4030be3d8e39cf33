//! Submariner's API (`submariner.io/v1`), the contract of the fabric:
//! what a cluster tells the broker (`Cluster`, `Endpoint`), what its
//! gateways report in the member (`Gateway`) and Globalnet's allocations
//! (`ClusterGlobalEgressIP`, `GlobalIngressIP`). Field names are
//! Submariner's own, snake_case where its Go types say so, so `subctl`
//! habits and manifests carry over.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const GROUP: &str = "submariner.io";
pub const VERSION: &str = "v1";
/// Where clusters meet on the broker (the hub).
pub const BROKER_NAMESPACE: &str = "submariner-k8s-broker";
/// Where a member's fabric lives: gateways' state, keys, broker access.
pub const OPERATOR_NAMESPACE: &str = "submariner-operator";
/// Nodes that may run a gateway.
pub const GATEWAY_LABEL: &str = "submariner.io/gateway";
/// The Secret `flotilla join` writes into a member: how to reach the
/// broker, and the cluster's identity and global CIDR.
pub const BROKER_SECRET: &str = "submariner-broker-secret";
/// The Secret holding the cluster's WireGuard private key (never copied
/// out of the member).
pub const KEY_SECRET: &str = "submariner-wireguard-key";
/// The Lease the member's gateways elect their active one with.
pub const GATEWAY_LEASE: &str = "submariner-gateway-lock";
/// The one ClusterGlobalEgressIP a cluster has.
pub const CLUSTER_EGRESS: &str = "cluster-egress.submariner.io";
/// The cable driver this fabric speaks.
pub const BACKEND: &str = "wireguard";
/// The tunnel device (Submariner's WireGuard driver's name).
pub const INTERFACE: &str = "submariner";
/// WireGuard's UDP port on the underlay (Submariner's NAT-T port).
pub const UDP_PORT: u16 = 4500;
/// The backend_config key of a WireGuard endpoint's public key.
pub const PUBLIC_KEY: &str = "publicKey";
/// Globalnet's default range and the slice each cluster gets (/16).
pub const GLOBALNET_RANGE: &str = "242.0.0.0/8";
pub const GLOBALNET_CLUSTER_PREFIX: u8 = 16;
/// Cluster egress IPs by default.
pub const DEFAULT_EGRESS_IPS: u32 = 8;

/// Implements `kube::Resource` for a `submariner.io/v1` type written by
/// hand (Gateway has no spec, which the derive cannot express).
macro_rules! resource {
    ($ty:ident, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

type Namespaced = kube::core::NamespaceResourceScope;
type ClusterScoped = kube::core::ClusterResourceScope;

/// A cluster's networks, on the broker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Cluster {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterSpec,
}
resource!(Cluster, "Cluster", "clusters", Namespaced);

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterSpec {
    pub cluster_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub color_codes: Vec<String>,
    #[serde(default)]
    pub service_cidr: Vec<String>,
    #[serde(default)]
    pub cluster_cidr: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub global_cidr: Vec<String>,
}

/// A cluster's active gateway, on the broker: where to send its traffic
/// and how to encrypt it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Endpoint {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: EndpointSpec,
}
resource!(Endpoint, "Endpoint", "endpoints", Namespaced);

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct EndpointSpec {
    pub cluster_id: String,
    pub cable_name: String,
    #[serde(
        default,
        rename = "healthCheckIP",
        skip_serializing_if = "String::is_empty"
    )]
    pub health_check_ip: String,
    #[serde(default)]
    pub hostname: String,
    /// What this cluster routes through its gateway: its pod and service
    /// CIDRs, or its global CIDR under Globalnet.
    #[serde(default)]
    pub subnets: Vec<String>,
    #[serde(default)]
    pub private_ip: String,
    #[serde(default)]
    pub public_ip: String,
    #[serde(default)]
    pub nat_enabled: bool,
    #[serde(default)]
    pub backend: String,
    #[serde(default)]
    pub backend_config: BTreeMap<String, String>,
}

impl EndpointSpec {
    /// Submariner's Endpoint name: `<cluster>-<cable name>`, the cable
    /// named after the cluster and its private IP.
    pub fn cable_name(cluster_id: &str, private_ip: &str) -> String {
        format!(
            "submariner-cable-{cluster_id}-{}",
            private_ip.replace('.', "-")
        )
    }

    pub fn object_name(&self) -> String {
        format!("{}-{}", self.cluster_id, self.cable_name)
    }
}

/// A gateway's view of its connections, in the member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Gateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: GatewayStatus,
}
resource!(Gateway, "Gateway", "gateways", Namespaced);

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    #[serde(default)]
    pub version: String,
    /// `active` or `passive`.
    #[serde(default)]
    pub ha_status: String,
    #[serde(default)]
    pub local_endpoint: EndpointSpec,
    #[serde(default)]
    pub status_failure: String,
    #[serde(default)]
    pub connections: Vec<Connection>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// `connecting`, `connected` or `error`.
    pub status: String,
    #[serde(default)]
    pub status_message: String,
    pub endpoint: EndpointSpec,
    #[serde(default, rename = "usingIP", skip_serializing_if = "String::is_empty")]
    pub using_ip: String,
    #[serde(default, rename = "usingNAT")]
    pub using_nat: bool,
    #[serde(
        default,
        rename = "latencyRTT",
        skip_serializing_if = "Option::is_none"
    )]
    pub latency_rtt: Option<LatencyRtt>,
}

/// Round-trip times through the tunnel, as Go durations ("1.2ms").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LatencyRtt {
    pub last: String,
    pub min: String,
    pub average: String,
    pub max: String,
    pub std_dev: String,
}

pub const CONNECTED: &str = "connected";
pub const CONNECTING: &str = "connecting";
pub const ERROR: &str = "error";

/// The cluster's egress IPs under Globalnet: pods leaving the cluster
/// are SNATed to them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterGlobalEgressIp {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterGlobalEgressIpSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GlobalEgressIpStatus>,
}
resource!(
    ClusterGlobalEgressIp,
    "ClusterGlobalEgressIP",
    "clusterglobalegressips",
    ClusterScoped
);

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterGlobalEgressIpSpec {
    /// Submariner's name for it (GlobalEgressIP's is `numberOfIPs`).
    #[serde(
        default,
        rename = "numGlobalIPs",
        skip_serializing_if = "Option::is_none"
    )]
    pub number_of_ips: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalEgressIpStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, rename = "allocatedIPs")]
    pub allocated_ips: Vec<String>,
}

/// The global IP of an exported Service under Globalnet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GlobalIngressIp {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GlobalIngressIpSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GlobalIngressIpStatus>,
}
resource!(
    GlobalIngressIp,
    "GlobalIngressIP",
    "globalingressips",
    Namespaced
);

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalIngressIpSpec {
    /// `ClusterIPService` (the only target this fabric allocates for).
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ref: Option<LocalRef>,
    /// A headless Service's pod (target `HeadlessServicePod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ref: Option<LocalRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LocalRef {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GlobalIngressIpStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, rename = "allocatedIP")]
    pub allocated_ip: String,
}

pub const CLUSTER_IP_SERVICE: &str = "ClusterIPService";

fn kind(kind: &str, plural: &str, namespaced: bool, short: &[&str], columns: Vec<Value>) -> Value {
    use flotilla_core::crd::{Kind, age};
    let mut columns = columns;
    columns.push(age());
    let mut crd = Kind {
        group: GROUP,
        version: VERSION,
        kind: kind.into(),
        plural: plural.into(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
        categories: &[],
        columns,
        spec: flotilla_core::crd::open_schema(),
    }
    .crd();
    // Gateways and Globalnet's objects may have no spec at all.
    flotilla_core::crd::spec_optional(&mut crd);
    crd
}

/// The CRDs the broker (the hub) serves: clusters and endpoints.
pub fn broker_crds() -> Vec<Value> {
    use flotilla_core::crd::column;
    vec![
        kind(
            "Cluster",
            "clusters",
            true,
            &[],
            vec![column("Cluster ID", "string", ".spec.cluster_id")],
        ),
        kind(
            "Endpoint",
            "endpoints",
            true,
            &[],
            vec![
                column("Cluster ID", "string", ".spec.cluster_id"),
                column("Public IP", "string", ".spec.public_ip"),
                column("Backend", "string", ".spec.backend"),
            ],
        ),
    ]
}

/// The CRDs a member's fabric serves: its own copies of the broker's
/// kinds, gateways and Globalnet's allocations.
pub fn member_crds() -> Vec<Value> {
    use flotilla_core::crd::column;
    let mut crds = broker_crds();
    crds.extend([
        kind(
            "Gateway",
            "gateways",
            true,
            &[],
            vec![column("HA Status", "string", ".status.haStatus")],
        ),
        kind(
            "ClusterGlobalEgressIP",
            "clusterglobalegressips",
            false,
            &["cgeip"],
            vec![column("IPs", "string", ".status.allocatedIPs")],
        ),
        kind(
            "GlobalIngressIP",
            "globalingressips",
            true,
            &["giip"],
            vec![column("IP", "string", ".status.allocatedIP")],
        ),
    ]);
    crds
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_read_submariners_field_names() {
        let e: EndpointSpec = serde_json::from_value(json!({
            "cluster_id": "east", "cable_name": "submariner-cable-east-100-64-0-2",
            "healthCheckIP": "242.0.0.1", "hostname": "gw", "subnets": ["10.1.0.0/16"],
            "private_ip": "100.64.0.2", "public_ip": "100.64.0.2", "nat_enabled": false,
            "backend": "wireguard", "backend_config": {"publicKey": "abc"}
        }))
        .unwrap();
        assert_eq!(e.health_check_ip, "242.0.0.1");
        assert_eq!(e.backend_config["publicKey"], "abc");
        assert_eq!(e.object_name(), "east-submariner-cable-east-100-64-0-2");
        let g: Gateway = serde_json::from_value(json!({
            "metadata": {"name": "n0"},
            "status": {"haStatus": "active", "connections": [{
                "status": "connected", "endpoint": {"cluster_id": "west", "cable_name": "c"},
                "usingIP": "100.64.0.3", "latencyRTT": {"last": "1ms", "min": "1ms", "average": "1ms", "max": "1ms", "stdDev": "0s"}
            }]}
        }))
        .unwrap();
        assert_eq!(g.status.connections[0].using_ip, "100.64.0.3");
        assert_eq!(member_crds().len(), 5);
    }
}
