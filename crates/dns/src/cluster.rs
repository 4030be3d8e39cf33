//! A cluster's own `cluster.local` zone, as CoreDNS's kubernetes plugin
//! serves it (the Kubernetes DNS-based service discovery specification),
//! computed per query from the cluster's Services and EndpointSlices:
//!
//! - `<svc>.<ns>.svc.cluster.local`: A to the ClusterIP; for a headless
//!   Service one A per ready endpoint (NXDOMAIN when none is ready); for
//!   an ExternalName Service a CNAME;
//! - `<hostname>.<svc>.<ns>.svc.cluster.local`: A for a headless
//!   Service's endpoint with a hostname (StatefulSet pods);
//! - `_<port>._<proto>.<svc>.<ns>.svc.cluster.local`: SRV per named port;
//! - `<a-b-c-d>.<ns>.pod.cluster.local`: A to the dashed address;
//! - PTR for ClusterIPs.
//!
//! Names outside the zone are refused: the member has no upstream.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use futures::StreamExt;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, CNAME, PTR, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::server::Zone;
use crate::zone::Answer;

pub const DOMAIN: &str = "cluster.local.";
const TTL: u32 = 5;

/// What the zone holds at the moment of a query.
#[derive(Default)]
pub struct ClusterSnapshot {
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
}

/// A cluster's Services and EndpointSlices, followed.
#[derive(Clone)]
pub struct ClusterZone {
    services: Store<Service>,
    slices: Store<EndpointSlice>,
}

impl ClusterZone {
    /// Starts the watches; resolves once both have listed.
    pub async fn follow(client: Client) -> ClusterZone {
        let (services, sw) = reflector::store();
        let (slices, ew) = reflector::store();
        let s = reflector::reflector(
            sw,
            watcher(Api::<Service>::all(client.clone()), Default::default()),
        )
        .default_backoff()
        .for_each(|_| async {});
        let e = reflector::reflector(
            ew,
            watcher(Api::<EndpointSlice>::all(client), Default::default()),
        )
        .default_backoff()
        .for_each(|_| async {});
        tokio::spawn(s);
        tokio::spawn(e);
        let zone = ClusterZone { services, slices };
        let _ = zone.services.wait_until_ready().await;
        let _ = zone.slices.wait_until_ready().await;
        zone
    }
}

impl Zone for ClusterZone {
    fn answer(&self, qname: &Name, qtype: RecordType) -> Option<Answer> {
        let snapshot = ClusterSnapshot {
            services: self.services.state(),
            slices: self.slices.state(),
        };
        answer(&snapshot, qname, qtype)
    }
}

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap_or_else(|_| Name::root())
}

fn soa() -> Record {
    Record::from_rdata(
        name(DOMAIN),
        TTL,
        RData::SOA(SOA::new(
            name("ns.dns.cluster.local."),
            name("hostmaster.cluster.local."),
            1,
            7200,
            1800,
            86400,
            TTL,
        )),
    )
}

fn nxdomain() -> Answer {
    Answer {
        code: ResponseCode::NXDomain,
        records: Vec::new(),
        authority: vec![soa()],
    }
}

/// The name exists, with nothing of the type asked.
fn nodata() -> Answer {
    Answer {
        code: ResponseCode::NoError,
        records: Vec::new(),
        authority: vec![soa()],
    }
}

fn found(records: Vec<Record>) -> Answer {
    if records.is_empty() {
        return nodata();
    }
    Answer {
        code: ResponseCode::NoError,
        records,
        authority: Vec::new(),
    }
}

fn a(name: &Name, ip: Ipv4Addr) -> Record {
    Record::from_rdata(name.clone(), TTL, RData::A(A(ip)))
}

struct Endpoint {
    host: Option<String>,
    ip: Ipv4Addr,
    ports: Vec<(String, String, u16)>,
}

fn ready_endpoints(s: &ClusterSnapshot, ns: &str, svc: &str) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for slice in &s.slices {
        if slice.namespace().as_deref() != Some(ns)
            || slice
                .labels()
                .get("kubernetes.io/service-name")
                .map(String::as_str)
                != Some(svc)
        {
            continue;
        }
        let ports: Vec<(String, String, u16)> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.name.clone().unwrap_or_default(),
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    u16::try_from(p.port?).ok()?,
                ))
            })
            .collect();
        for e in &slice.endpoints {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for addr in &e.addresses {
                if let Ok(ip) = addr.parse() {
                    out.push(Endpoint {
                        host: e.hostname.clone(),
                        ip,
                        ports: ports.clone(),
                    });
                }
            }
        }
    }
    out.sort_by_key(|e| e.ip);
    out
}

fn find<'a>(s: &'a ClusterSnapshot, ns: &str, svc: &str) -> Option<&'a Service> {
    s.services
        .iter()
        .find(|x| x.namespace().as_deref() == Some(ns) && x.name_any() == svc)
        .map(Arc::as_ref)
}

fn cluster_ip(svc: &Service) -> Option<Ipv4Addr> {
    svc.spec
        .as_ref()?
        .cluster_ip
        .as_deref()
        .filter(|ip| *ip != "None")?
        .parse()
        .ok()
}

fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

fn external_name(svc: &Service) -> Option<&str> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        spec.external_name.as_deref()
    } else {
        None
    }
}

/// The answer for one question; `None` when the name is not in the zone.
pub fn answer(s: &ClusterSnapshot, qname: &Name, qtype: RecordType) -> Option<Answer> {
    let lower = qname.to_lowercase().to_ascii();
    let fqdn = if lower.ends_with('.') {
        lower.clone()
    } else {
        format!("{lower}.")
    };
    if qtype == RecordType::PTR {
        return reverse(s, qname, &fqdn);
    }
    let rest = fqdn.strip_suffix(DOMAIN)?;
    let labels: Vec<&str> = rest.trim_end_matches('.').split('.').collect();
    match labels.as_slice() {
        [""] => Some(match qtype {
            RecordType::SOA => found(vec![soa()]),
            _ => nodata(),
        }),
        [svc, ns, "svc"] => Some(service(s, qname, ns, svc, qtype)),
        [host, svc, ns, "svc"] if !host.starts_with('_') => {
            let Some(service) = find(s, ns, svc).filter(|x| is_headless(x)) else {
                return Some(nxdomain());
            };
            let _ = service;
            let ips: Vec<Ipv4Addr> = ready_endpoints(s, ns, svc)
                .into_iter()
                .filter(|e| {
                    e.host.as_deref() == Some(*host) || e.ip.to_string().replace('.', "-") == *host
                })
                .map(|e| e.ip)
                .collect();
            if ips.is_empty() {
                return Some(nxdomain());
            }
            Some(match qtype {
                RecordType::A | RecordType::ANY => {
                    found(ips.iter().map(|ip| a(qname, *ip)).collect())
                }
                _ => nodata(),
            })
        }
        [port, proto, svc, ns, "svc"] => Some(srv(s, qname, port, proto, ns, svc, qtype)),
        [dashed, _ns, "pod"] => {
            let ip: Option<Ipv4Addr> = dashed.replace('-', ".").parse().ok();
            Some(match (ip, qtype) {
                (Some(ip), RecordType::A | RecordType::ANY) => found(vec![a(qname, ip)]),
                (Some(_), _) => nodata(),
                (None, _) => nxdomain(),
            })
        }
        [_, "svc" | "pod"] | ["svc" | "pod"] => Some(nodata()),
        _ => Some(nxdomain()),
    }
}

fn service(s: &ClusterSnapshot, qname: &Name, ns: &str, svc: &str, qtype: RecordType) -> Answer {
    let Some(service) = find(s, ns, svc) else {
        return nxdomain();
    };
    if let Some(target) = external_name(service) {
        let target = name(&format!("{}.", target.trim_end_matches('.')));
        return found(vec![Record::from_rdata(
            qname.clone(),
            TTL,
            RData::CNAME(CNAME(target)),
        )]);
    }
    let wants_a = matches!(qtype, RecordType::A | RecordType::ANY);
    if is_headless(service) {
        let eps = ready_endpoints(s, ns, svc);
        if eps.is_empty() {
            return nxdomain();
        }
        return match wants_a {
            true => found(eps.iter().map(|e| a(qname, e.ip)).collect()),
            false => nodata(),
        };
    }
    match (cluster_ip(service), wants_a) {
        (Some(ip), true) => found(vec![a(qname, ip)]),
        _ => nodata(),
    }
}

#[allow(clippy::too_many_arguments)]
fn srv(
    s: &ClusterSnapshot,
    qname: &Name,
    port: &str,
    proto: &str,
    ns: &str,
    svc: &str,
    qtype: RecordType,
) -> Answer {
    let (Some(port), Some(proto)) = (port.strip_prefix('_'), proto.strip_prefix('_')) else {
        return nxdomain();
    };
    let Some(service) = find(s, ns, svc) else {
        return nxdomain();
    };
    let svc_name = format!("{svc}.{ns}.svc.{DOMAIN}");
    let mut records = Vec::new();
    if is_headless(service) {
        for e in ready_endpoints(s, ns, svc) {
            let host = e
                .host
                .clone()
                .unwrap_or_else(|| e.ip.to_string().replace('.', "-"));
            for (pname, pproto, number) in &e.ports {
                if pname == port && pproto.eq_ignore_ascii_case(proto) {
                    let target = name(&format!("{host}.{svc_name}"));
                    records.push(Record::from_rdata(
                        qname.clone(),
                        TTL,
                        RData::SRV(SRV::new(0, 100, *number, target)),
                    ));
                }
            }
        }
    } else {
        for p in service.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
            let pproto = p.protocol.as_deref().unwrap_or("TCP");
            if p.name.as_deref() == Some(port) && pproto.eq_ignore_ascii_case(proto) {
                let Ok(number) = u16::try_from(p.port) else {
                    continue;
                };
                records.push(Record::from_rdata(
                    qname.clone(),
                    TTL,
                    RData::SRV(SRV::new(0, 100, number, name(&svc_name))),
                ));
            }
        }
    }
    if records.is_empty() {
        return nxdomain();
    }
    match qtype {
        RecordType::SRV | RecordType::ANY => found(records),
        _ => nodata(),
    }
}

/// PTR from a ClusterIP's reverse name to its Service.
fn reverse(s: &ClusterSnapshot, qname: &Name, fqdn: &str) -> Option<Answer> {
    let rest = fqdn.strip_suffix(".in-addr.arpa.")?;
    let octets: Vec<u8> = rest.split('.').filter_map(|o| o.parse().ok()).collect();
    let [d, c, b, first] = octets.as_slice() else {
        return None;
    };
    let ip = IpAddr::V4(Ipv4Addr::new(*first, *b, *c, *d));
    let service = s
        .services
        .iter()
        .find(|x| cluster_ip(x).map(IpAddr::V4) == Some(ip))?;
    let target = format!(
        "{}.{}.svc.{DOMAIN}",
        service.name_any(),
        service.namespace().unwrap_or_default()
    );
    Some(found(vec![Record::from_rdata(
        qname.clone(),
        TTL,
        RData::PTR(PTR(name(&target))),
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot() -> ClusterSnapshot {
        let svc = |v: serde_json::Value| Arc::new(serde_json::from_value::<Service>(v).unwrap());
        let slice =
            |v: serde_json::Value| Arc::new(serde_json::from_value::<EndpointSlice>(v).unwrap());
        ClusterSnapshot {
            services: vec![
                svc(json!({"metadata": {"name": "web", "namespace": "shop"},
                    "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}})),
                svc(json!({"metadata": {"name": "db", "namespace": "shop"},
                    "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}})),
                svc(json!({"metadata": {"name": "ext", "namespace": "shop"},
                    "spec": {"type": "ExternalName", "externalName": "example.com"}})),
            ],
            slices: vec![slice(json!({
                "metadata": {"name": "db-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.1.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                    {"addresses": ["10.1.0.6"], "hostname": "db-1", "conditions": {"ready": false}},
                ],
            }))],
        }
    }

    fn ask(q: &str, t: RecordType) -> Answer {
        answer(&snapshot(), &name(q), t).expect("in the zone")
    }

    fn rdata(a: &Answer) -> Vec<String> {
        a.records.iter().map(|r| r.data.to_string()).collect()
    }

    #[test]
    fn services_endpoints_and_pods_resolve_as_coredns_answers() {
        assert_eq!(
            rdata(&ask("web.shop.svc.cluster.local.", RecordType::A)),
            ["10.96.0.20"]
        );
        // Headless: ready endpoints only, and per-hostname names.
        assert_eq!(
            rdata(&ask("db.shop.svc.cluster.local.", RecordType::A)),
            ["10.1.0.5"]
        );
        assert_eq!(
            rdata(&ask("db-0.db.shop.svc.cluster.local.", RecordType::A)),
            ["10.1.0.5"]
        );
        assert_eq!(
            ask("db-1.db.shop.svc.cluster.local.", RecordType::A).code,
            ResponseCode::NXDomain
        );
        assert_eq!(
            rdata(&ask("_pg._tcp.db.shop.svc.cluster.local.", RecordType::SRV)),
            ["0 100 5432 db-0.db.shop.svc.cluster.local."]
        );
        assert_eq!(
            rdata(&ask(
                "_http._tcp.web.shop.svc.cluster.local.",
                RecordType::SRV
            )),
            ["0 100 80 web.shop.svc.cluster.local."]
        );
        assert_eq!(
            rdata(&ask("ext.shop.svc.cluster.local.", RecordType::A)),
            ["example.com."]
        );
        assert_eq!(
            rdata(&ask("10-1-0-9.shop.pod.cluster.local.", RecordType::A)),
            ["10.1.0.9"]
        );
        assert_eq!(
            ask("nope.shop.svc.cluster.local.", RecordType::A).code,
            ResponseCode::NXDomain
        );
        // Exists, no AAAA.
        let none = ask("web.shop.svc.cluster.local.", RecordType::AAAA);
        assert_eq!((none.code, none.records.len()), (ResponseCode::NoError, 0));
        assert_eq!(
            rdata(&ask("20.0.96.10.in-addr.arpa.", RecordType::PTR)),
            ["web.shop.svc.cluster.local."]
        );
        assert!(answer(&snapshot(), &name("example.com."), RecordType::A).is_none());
    }
}
