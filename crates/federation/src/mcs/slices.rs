//! The EndpointSlices of an import: one per source cluster (and address
//! type), made from that cluster's own slices of the Service, labelled as
//! the MCS API asks and owned by the ServiceImport they serve.

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::api::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL};
use crate::names::fnv32a;

/// A slice name within the 63 characters of a label value.
fn slice_name(service: &str, cluster: &str, address_type: &str) -> String {
    let suffix = if address_type == "IPv4" {
        String::new()
    } else {
        format!("-{}", address_type.to_lowercase())
    };
    let name = format!("{service}-{cluster}{suffix}");
    if name.len() <= 63 {
        return name;
    }
    let hash = format!("{:08x}", fnv32a(name.as_bytes()));
    format!("{}-{hash}", &name[..63 - hash.len() - 1])
}

/// The slices of `service` from `cluster`'s own slices of it.
pub fn from_source(
    namespace: &str,
    service: &str,
    cluster: &str,
    source: &[&EndpointSlice],
    owner: Option<OwnerReference>,
) -> Vec<EndpointSlice> {
    let mut by_type: BTreeMap<String, (Vec<Endpoint>, Vec<EndpointPort>)> = BTreeMap::new();
    for s in source {
        let (endpoints, ports) = by_type.entry(s.address_type.clone()).or_default();
        for e in &s.endpoints {
            endpoints.push(Endpoint {
                addresses: e.addresses.clone(),
                conditions: e.conditions.clone(),
                hostname: e.hostname.clone(),
                zone: e.zone.clone(),
                ..Default::default()
            });
        }
        for p in s.ports.iter().flatten() {
            if !ports.contains(p) {
                ports.push(p.clone());
            }
        }
    }
    by_type
        .into_iter()
        .map(|(address_type, (mut endpoints, ports))| {
            endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
            EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name(service, cluster, &address_type)),
                    namespace: Some(namespace.to_string()),
                    labels: Some(BTreeMap::from([
                        (SERVICE_NAME_LABEL.to_string(), service.to_string()),
                        (SOURCE_CLUSTER_LABEL.to_string(), cluster.to_string()),
                        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                    ])),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..Default::default()
                },
                address_type,
                endpoints,
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

/// The slice of `service` from a cluster that uses Globalnet: one
/// endpoint, the Service's global ingress IP (ready while any of its own
/// endpoints is), on the Service's ports, as Submariner's Lighthouse
/// publishes it. The cluster's pod IPs are not routable from elsewhere.
pub fn global(
    namespace: &str,
    service: &str,
    cluster: &str,
    ip: &str,
    source: &[&EndpointSlice],
    ports: Vec<EndpointPort>,
    owner: Option<OwnerReference>,
) -> EndpointSlice {
    let ready = source
        .iter()
        .flat_map(|s| &s.endpoints)
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(service, cluster, "IPv4")),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_string(), service.to_string()),
                (SOURCE_CLUSTER_LABEL.to_string(), cluster.to_string()),
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
            ])),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(k8s_openapi::api::discovery::v1::EndpointConditions {
                ready: Some(ready),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ports: (!ports.is_empty()).then_some(ports),
    }
}

/// Whether a slice already holds what `want` says (ignoring what the
/// server adds).
pub fn same(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    have.address_type == want.address_type
        && have.endpoints == want.endpoints
        && have.ports == want.ports
        && have.metadata.labels == want.metadata.labels
        && have.metadata.owner_references == want.metadata.owner_references
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointConditions;

    #[test]
    fn one_labelled_slice_per_source_cluster_and_address_type() {
        let endpoint = |ip: &str, ready: bool| Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                ..Default::default()
            }),
            node_name: Some("node-0".into()),
            ..Default::default()
        };
        let source = |eps: Vec<Endpoint>| EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: eps,
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            metadata: Default::default(),
        };
        let (a, b) = (
            source(vec![endpoint("10.0.0.2", true)]),
            source(vec![endpoint("10.0.0.1", false)]),
        );
        let slices = from_source("shop", "web", "member1", &[&a, &b], None);
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(s.metadata.name.as_deref(), Some("web-member1"));
        let labels = s.metadata.labels.clone().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(labels[SOURCE_CLUSTER_LABEL], "member1");
        let ips: Vec<&str> = s
            .endpoints
            .iter()
            .map(|e| e.addresses[0].as_str())
            .collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            s.endpoints[0].node_name, None,
            "node names stay in their cluster"
        );
        assert_eq!(s.ports.as_ref().unwrap().len(), 1);
        let long = slice_name(&"s".repeat(60), "member1", "IPv6");
        assert_eq!(long.len(), 63);
    }
}
