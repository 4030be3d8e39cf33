//! The `clusterset.local` zone of the MCS DNS specification (version
//! 1.0.0), computed from the hub's ServiceImports and their EndpointSlices
//! at each query, without I/O:
//!
//! - `dns-version.clusterset.local` TXT `1.0.0`;
//! - `<svc>.<ns>.svc.clusterset.local`: A/AAAA to the ClusterSetIPs, or for
//!   a Headless import one record per ready endpoint (NXDOMAIN when none is
//!   ready);
//! - `_<port>._<proto>.<svc>.<ns>.svc.clusterset.local` SRV per named port
//!   (per ready endpoint and port for Headless);
//! - PTR from a ClusterSetIP's reverse name to its service;
//! - `<hostname>.<clusterid>.<svc>.<ns>.svc.clusterset.local` A/AAAA for a
//!   Headless import's endpoint (its hostname, or its address with dashes);
//!   no per-cluster names for ClusterSetIP imports, as the specification
//!   forbids.

use std::net::IpAddr;
use std::sync::Arc;

use flotilla_core::mcs::{SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, ServiceImport};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

pub const ZONE: &str = "clusterset.local.";
/// Answers change as endpoints do: resolvers keep them briefly.
pub const TTL: u32 = 5;
pub const DNS_VERSION: &str = "1.0.0";

/// What the zone holds at the moment of a query.
pub struct Snapshot {
    pub imports: Vec<Arc<ServiceImport>>,
    pub slices: Vec<Arc<EndpointSlice>>,
}

/// An answer: the response code, the answer records, and the authority
/// records (the SOA, for negative answers).
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub code: ResponseCode,
    pub records: Vec<Record>,
    pub authority: Vec<Record>,
}

fn zone() -> Name {
    Name::from_ascii(ZONE).unwrap_or_else(|_| Name::root())
}

fn soa() -> Record {
    let zone = zone();
    let ns = Name::from_ascii("ns.dns.clusterset.local.").unwrap_or_else(|_| zone.clone());
    let admin = Name::from_ascii("hostmaster.clusterset.local.").unwrap_or_else(|_| zone.clone());
    Record::from_rdata(
        zone,
        TTL,
        RData::SOA(SOA::new(ns, admin, 1, 7200, 1800, 86400, TTL)),
    )
}

/// A dashed address names an endpoint without a hostname: `10-0-0-1`.
fn dashed(ip: &str) -> String {
    ip.replace(['.', ':'], "-")
}

/// One ready endpoint address of an import: its source cluster and name.
struct Endpoint {
    cluster: String,
    host: String,
    ip: IpAddr,
}

fn ready_endpoints(snapshot: &Snapshot, ns: &str, svc: &str) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for s in &snapshot.slices {
        if s.namespace().as_deref() != Some(ns)
            || s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) != Some(svc)
        {
            continue;
        }
        let cluster = s
            .labels()
            .get(SOURCE_CLUSTER_LABEL)
            .cloned()
            .unwrap_or_default();
        for e in &s.endpoints {
            // An unset ready condition counts as ready, as upstream's.
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                let Ok(ip) = a.parse::<IpAddr>() else {
                    continue;
                };
                out.push(Endpoint {
                    cluster: cluster.clone(),
                    host: e.hostname.clone().unwrap_or_else(|| dashed(a)),
                    ip,
                });
            }
        }
    }
    out.sort_by_key(|e| e.ip);
    out
}

fn address(name: &Name, ip: IpAddr) -> Record {
    let rdata = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(name.clone(), TTL, rdata)
}

fn wants(qtype: RecordType, ip: &IpAddr) -> bool {
    match qtype {
        RecordType::A => ip.is_ipv4(),
        RecordType::AAAA => ip.is_ipv6(),
        RecordType::ANY => true,
        _ => false,
    }
}

fn nxdomain() -> Answer {
    Answer {
        code: ResponseCode::NXDomain,
        records: Vec::new(),
        authority: vec![soa()],
    }
}

/// The name exists, with these records of the type asked (none: NODATA).
fn found(records: Vec<Record>) -> Answer {
    let authority = if records.is_empty() {
        vec![soa()]
    } else {
        Vec::new()
    };
    Answer {
        code: ResponseCode::NoError,
        records,
        authority,
    }
}

/// The PTR of a ClusterSetIP: `<ip>.in-addr.arpa` (or `ip6.arpa`) to its
/// service's name. Other reverse names are not this server's.
fn reverse(snapshot: &Snapshot, qname: &Name, qtype: RecordType) -> Option<Answer> {
    let net = qname.parse_arpa_name().ok()?;
    if net.prefix_len() != net.max_prefix_len() {
        return None;
    }
    let ip = net.addr();
    let import = snapshot.imports.iter().find(|i| {
        i.spec.type_ == "ClusterSetIP"
            && i.spec
                .ips
                .iter()
                .any(|s| s.parse::<IpAddr>().ok() == Some(ip))
    })?;
    let target = Name::from_ascii(format!(
        "{}.{}.svc.{ZONE}",
        import.name_any(),
        import.namespace().unwrap_or_default()
    ))
    .ok()?;
    Some(found(
        if matches!(qtype, RecordType::PTR | RecordType::ANY) {
            vec![Record::from_rdata(
                qname.clone(),
                TTL,
                RData::PTR(PTR(target)),
            )]
        } else {
            Vec::new()
        },
    ))
}

/// Answers one question; None when the name is outside the zone.
pub fn answer(snapshot: &Snapshot, qname: &Name, qtype: RecordType) -> Option<Answer> {
    let zone = zone();
    let qname = qname.to_lowercase();
    if !zone.zone_of(&qname) {
        return reverse(snapshot, &qname, qtype);
    }
    let labels: Vec<String> = qname
        .iter()
        .take(qname.num_labels() as usize - zone.num_labels() as usize)
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let import = |svc: &str, ns: &str| {
        snapshot
            .imports
            .iter()
            .find(|i| i.name_any() == svc && i.namespace().as_deref() == Some(ns))
            .cloned()
    };
    match labels.as_slice() {
        [] => Some(found(
            if matches!(qtype, RecordType::SOA | RecordType::ANY) {
                vec![soa()]
            } else {
                Vec::new()
            },
        )),
        ["dns-version"] => Some(found(
            if matches!(qtype, RecordType::TXT | RecordType::ANY) {
                vec![Record::from_rdata(
                    qname.clone(),
                    TTL,
                    RData::TXT(TXT::new(vec![DNS_VERSION.to_string()])),
                )]
            } else {
                Vec::new()
            },
        )),
        // Names between the zone and the services exist, empty.
        ["svc"] | [_, "svc"] => Some(found(Vec::new())),
        [svc, ns, "svc"] => Some(match import(svc, ns) {
            Some(i) => service(snapshot, &i, &qname, qtype),
            None => nxdomain(),
        }),
        [port, proto, svc, ns, "svc"] if port.starts_with('_') && proto.starts_with('_') => {
            Some(match import(svc, ns) {
                Some(i) => srv(snapshot, &i, &port[1..], &proto[1..], qtype),
                None => nxdomain(),
            })
        }
        [host, cluster, svc, ns, "svc"] => {
            let Some(i) = import(svc, ns) else {
                return Some(nxdomain());
            };
            if i.spec.type_ != "Headless" {
                return Some(nxdomain());
            }
            let named: Vec<Endpoint> = ready_endpoints(snapshot, ns, svc)
                .into_iter()
                .filter(|e| e.cluster == *cluster && e.host == *host)
                .collect();
            if named.is_empty() {
                return Some(nxdomain());
            }
            Some(found(
                named
                    .iter()
                    .filter(|e| wants(qtype, &e.ip))
                    .map(|e| address(&qname, e.ip))
                    .collect(),
            ))
        }
        _ => Some(nxdomain()),
    }
}

fn service(snapshot: &Snapshot, i: &ServiceImport, qname: &Name, qtype: RecordType) -> Answer {
    let ns = i.namespace().unwrap_or_default();
    if i.spec.type_ == "Headless" {
        let ready = ready_endpoints(snapshot, &ns, &i.name_any());
        if ready.is_empty() {
            return nxdomain();
        }
        return found(
            ready
                .iter()
                .filter(|e| wants(qtype, &e.ip))
                .map(|e| address(qname, e.ip))
                .collect(),
        );
    }
    found(
        i.spec
            .ips
            .iter()
            .filter_map(|s| s.parse::<IpAddr>().ok())
            .filter(|ip| wants(qtype, ip))
            .map(|ip| address(qname, ip))
            .collect(),
    )
}

fn srv(
    snapshot: &Snapshot,
    i: &ServiceImport,
    port: &str,
    proto: &str,
    qtype: RecordType,
) -> Answer {
    let Some(p) =
        i.spec.ports.iter().find(|p| {
            !p.name.is_empty() && p.name == port && p.protocol.eq_ignore_ascii_case(proto)
        })
    else {
        return nxdomain();
    };
    let ns = i.namespace().unwrap_or_default();
    let svc = i.name_any();
    let qname = Name::from_ascii(format!("_{port}._{proto}.{svc}.{ns}.svc.{ZONE}"))
        .unwrap_or_else(|_| zone());
    if !matches!(qtype, RecordType::SRV | RecordType::ANY) {
        return found(Vec::new());
    }
    let port = u16::try_from(p.port).unwrap_or(0);
    let targets: Vec<String> = if i.spec.type_ == "Headless" {
        let ready = ready_endpoints(snapshot, &ns, &svc);
        if ready.is_empty() {
            return nxdomain();
        }
        ready
            .iter()
            .map(|e| format!("{}.{}.{svc}.{ns}.svc.{ZONE}", e.host, e.cluster))
            .collect()
    } else {
        vec![format!("{svc}.{ns}.svc.{ZONE}")]
    };
    let weight = u16::try_from(100 / targets.len().max(1)).unwrap_or(1);
    found(
        targets
            .into_iter()
            .filter_map(|t| Name::from_ascii(t).ok())
            .map(|target| {
                Record::from_rdata(
                    qname.clone(),
                    TTL,
                    RData::SRV(SRV::new(0, weight, port, target)),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::mcs::ServiceImportSpec;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

    fn import(name: &str, type_: &str, ips: &[&str]) -> Arc<ServiceImport> {
        let mut i = ServiceImport::new(
            name,
            ServiceImportSpec {
                type_: type_.into(),
                ips: ips.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        );
        i.metadata.namespace = Some("shop".into());
        Arc::new(i)
    }

    fn slice(svc: &str, cluster: &str, endpoints: &[(&str, bool)]) -> Arc<EndpointSlice> {
        let mut s = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(ip, ready)| Endpoint {
                    addresses: vec![ip.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        s.metadata.namespace = Some("shop".into());
        s.metadata.labels = Some(
            [
                (SERVICE_NAME_LABEL.to_string(), svc.to_string()),
                (SOURCE_CLUSTER_LABEL.to_string(), cluster.to_string()),
            ]
            .into(),
        );
        Arc::new(s)
    }

    fn ask(s: &Snapshot, name: &str, t: RecordType) -> Option<Answer> {
        answer(s, &Name::from_ascii(name).unwrap(), t)
    }

    fn data(a: &Answer) -> Vec<String> {
        a.records.iter().map(|r| r.data.to_string()).collect()
    }

    #[test]
    fn records_follow_the_specification() {
        let s = Snapshot {
            imports: vec![
                import("web", "ClusterSetIP", &["242.0.0.1"]),
                import("db", "Headless", &[]),
            ],
            slices: vec![
                slice(
                    "db",
                    "member1",
                    &[("10.10.0.2", true), ("10.10.0.3", false)],
                ),
                slice("db", "member2", &[("10.11.0.2", true)]),
            ],
        };
        let web = ask(&s, "web.shop.svc.clusterset.local.", RecordType::A).unwrap();
        assert_eq!(data(&web), ["242.0.0.1"]);
        // NODATA for AAAA, with the SOA for negative caching.
        let v6 = ask(&s, "WEB.shop.svc.clusterset.local.", RecordType::AAAA).unwrap();
        assert_eq!(
            (v6.code, v6.records.len(), v6.authority.len()),
            (ResponseCode::NoError, 0, 1)
        );
        let db = ask(&s, "db.shop.svc.clusterset.local.", RecordType::A).unwrap();
        assert_eq!(
            data(&db),
            ["10.10.0.2", "10.11.0.2"],
            "ready endpoints only"
        );
        let one = ask(
            &s,
            "10-11-0-2.member2.db.shop.svc.clusterset.local.",
            RecordType::A,
        )
        .unwrap();
        assert_eq!(data(&one), ["10.11.0.2"]);
        let not_ready = ask(
            &s,
            "10-10-0-3.member1.db.shop.svc.clusterset.local.",
            RecordType::A,
        )
        .unwrap();
        assert_eq!(not_ready.code, ResponseCode::NXDomain);
        let per_cluster = ask(&s, "member1.web.shop.svc.clusterset.local.", RecordType::A).unwrap();
        assert_eq!(per_cluster.code, ResponseCode::NXDomain);
        let version = ask(&s, "dns-version.clusterset.local.", RecordType::TXT).unwrap();
        assert_eq!(data(&version), ["1.0.0"]);
        assert!(
            ask(&s, "example.com.", RecordType::A).is_none(),
            "not our zone"
        );
        let ptr = ask(&s, "1.0.0.242.in-addr.arpa.", RecordType::PTR).unwrap();
        assert_eq!(data(&ptr), ["web.shop.svc.clusterset.local."]);
        assert!(
            ask(&s, "2.0.0.242.in-addr.arpa.", RecordType::PTR).is_none(),
            "not a ClusterSetIP"
        );
        let empty = Snapshot {
            imports: vec![import("db", "Headless", &[])],
            slices: vec![slice("db", "member1", &[("10.10.0.3", false)])],
        };
        let none_ready = ask(&empty, "db.shop.svc.clusterset.local.", RecordType::A).unwrap();
        assert_eq!(none_ready.code, ResponseCode::NXDomain);
    }
}
