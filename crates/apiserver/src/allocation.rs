//! Service addresses, assigned as kube-apiserver's service registry does:
//! a ClusterIP from the service CIDR unless the Service is headless or an
//! ExternalName, NodePorts from the node-port range for NodePort and
//! LoadBalancer Services, both kept across updates that leave them out and
//! immutable once set.
//!
//! What is in use is derived from the stored Services, so there is no
//! second source of truth to repair after a crash. Writers racing for one
//! address (in one replica, or in replicas sharing an etcd) are told apart
//! by a claim: before a Service is stored with a new address, a store key
//! for that address is created with compare-and-swap, naming the Service.
//! A claim only arbitrates the race: once its Service holds the address
//! (or is gone) and the claim has aged past [`CLAIM_GRACE`], anyone may
//! take it over, so claims of deleted Services need no clean-up.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use flotilla_store::{ListOptions, Store, StoreError};
use ipnet::Ipv4Net;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::objects::meta_str;

/// Where Service addresses come from.
#[derive(Clone, Debug)]
pub struct ServiceNetwork {
    pub cluster_ip_range: Ipv4Net,
    pub node_ports: RangeInclusive<u16>,
}

impl ServiceNetwork {
    /// The range's first host: the `kubernetes` Service's address, which
    /// no other Service is given (10.96.0.1 by default).
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cluster_ip_range.network()).saturating_add(1))
    }
}

impl Default for ServiceNetwork {
    fn default() -> Self {
        ServiceNetwork {
            cluster_ip_range: Ipv4Net::new(Ipv4Addr::new(10, 96, 0, 0), 12).unwrap_or_default(),
            node_ports: 30000..=32767,
        }
    }
}

/// The key prefix of every Service.
const SERVICES: &str = "/core/services/";
/// Where claims live: outside every resource's prefix (API groups of
/// custom resources hold a dot, built-in ones are fixed).
const CLAIMS: &str = "/flotilla-claims/";
/// How long a claim holds its address for a Service not yet stored: far
/// longer than a write takes.
const CLAIM_GRACE: Duration = Duration::from_secs(30);
/// Attempts at a set of addresses that other writers keep taking first.
const CLAIM_ATTEMPTS: usize = 16;

/// Addresses in use by Services other than `except` (namespace/name).
struct InUse {
    ips: HashSet<Ipv4Addr>,
    node_ports: HashSet<(u16, String)>,
}

fn in_use(store: &dyn Store, except: &str) -> ApiResult<InUse> {
    let list = store.list(SERVICES, &ListOptions::default())?;
    let mut used = InUse {
        ips: HashSet::new(),
        node_ports: HashSet::new(),
    };
    for kv in list.items {
        if kv.key.strip_prefix(SERVICES) == Some(except) {
            continue;
        }
        let Ok(svc) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        for ip in cluster_ips(&svc) {
            if let Ok(ip) = ip.parse() {
                used.ips.insert(ip);
            }
        }
        for (port, protocol) in node_ports(&svc) {
            used.node_ports.insert((port, protocol));
        }
    }
    Ok(used)
}

fn cluster_ips(svc: &Value) -> Vec<String> {
    let mut ips: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let single = svc
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    if ips.is_empty() && !single.is_empty() {
        ips.push(single.to_string());
    }
    ips
}

fn node_ports(svc: &Value) -> Vec<(u16, String)> {
    ports(svc)
        .iter()
        .filter_map(|p| {
            let port = p.get("nodePort").and_then(Value::as_u64)?;
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            Some((u16::try_from(port).ok()?, protocol.to_string()))
        })
        .collect()
}

fn ports(svc: &Value) -> Vec<Value> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn service_type(svc: &Value) -> &str {
    svc.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

fn invalid(svc: &Value, field: String, message: String) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        meta_str(svc, "name"),
        vec![Cause {
            reason: "FieldValueInvalid",
            field,
            message,
        }],
    )
}

/// Assigns `svc`'s addresses before it is stored; `old` is the stored
/// version on update. With `claim` (not a dry run), every address `svc`
/// gets that `old` did not have is claimed first.
pub async fn assign(
    network: &ServiceNetwork,
    store: &dyn Store,
    svc: &mut Value,
    old: Option<&Value>,
    claim: bool,
) -> ApiResult<()> {
    let kind = service_type(svc).to_string();
    let id = format!("{}/{}", meta_str(svc, "namespace"), meta_str(svc, "name"));
    // Services stored through other replicas count too.
    store.sync().await?;
    let mut used = in_use(store, &id)?;
    add_fresh_claims(store, &id, &mut used)?;
    for _ in 0..CLAIM_ATTEMPTS {
        let mut candidate = svc.clone();
        assign_cluster_ip(network, &used, &mut candidate, old, &kind)?;
        assign_node_ports(network, &used, &mut candidate, old, &kind)?;
        if !claim {
            *svc = candidate;
            return Ok(());
        }
        match claim_new(store, &id, &candidate, old).await? {
            // Taken by another writer meanwhile: choose again without it.
            Some(Address::Ip(ip)) => {
                used.ips.insert(ip);
            }
            Some(Address::NodePort(port, protocol)) => {
                used.node_ports.insert((port, protocol));
            }
            None => {
                *svc = candidate;
                return Ok(());
            }
        }
    }
    Err(ApiError::conflict("", "services", meta_str(svc, "name")))
}

/// One address a Service holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Address {
    Ip(Ipv4Addr),
    NodePort(u16, String),
}

impl Address {
    fn key(&self) -> String {
        match self {
            Address::Ip(ip) => format!("{CLAIMS}serviceips/{ip}"),
            Address::NodePort(port, protocol) => format!("{CLAIMS}nodeports/{protocol}/{port}"),
        }
    }

    fn held_by(&self, svc: &Value) -> bool {
        match self {
            Address::Ip(ip) => cluster_ips(svc).iter().any(|i| i == &ip.to_string()),
            Address::NodePort(port, protocol) => node_ports(svc)
                .iter()
                .any(|(p, proto)| p == port && proto == protocol),
        }
    }

    fn of(svc: &Value) -> Vec<Address> {
        let ips = cluster_ips(svc)
            .into_iter()
            .filter_map(|ip| ip.parse().ok())
            .map(Address::Ip);
        let ports = node_ports(svc)
            .into_iter()
            .map(|(port, protocol)| Address::NodePort(port, protocol));
        ips.chain(ports).collect()
    }
}

/// A claim's value: who claimed, and when (seconds since the epoch).
#[derive(serde::Serialize, serde::Deserialize)]
struct Claim {
    service: String,
    #[serde(rename = "claimedAt")]
    claimed_at: u64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Claim {
    fn fresh(&self) -> bool {
        now_secs().saturating_sub(self.claimed_at) < CLAIM_GRACE.as_secs()
    }
}

/// Addresses claimed by other Services within the grace: they may be
/// stored any moment.
fn add_fresh_claims(store: &dyn Store, id: &str, used: &mut InUse) -> ApiResult<()> {
    let claims = store.list(CLAIMS, &ListOptions::default())?;
    for kv in claims.items {
        let Ok(claim) = serde_json::from_slice::<Claim>(&kv.value) else {
            continue;
        };
        if claim.service == id || !claim.fresh() {
            continue;
        }
        let Some(address) = kv.key.strip_prefix(CLAIMS) else {
            continue;
        };
        let parts: Vec<&str> = address.split('/').collect();
        match parts.as_slice() {
            ["serviceips", ip] => {
                if let Ok(ip) = ip.parse() {
                    used.ips.insert(ip);
                }
            }
            ["nodeports", protocol, port] => {
                if let Ok(port) = port.parse() {
                    used.node_ports.insert((port, protocol.to_string()));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Claims every address `svc` holds that `old` did not; the first one
/// another writer holds, if any.
async fn claim_new(
    store: &dyn Store,
    id: &str,
    svc: &Value,
    old: Option<&Value>,
) -> ApiResult<Option<Address>> {
    for address in Address::of(svc) {
        if old.is_some_and(|o| address.held_by(o)) {
            continue;
        }
        if !take(store, id, &address).await? {
            return Ok(Some(address));
        }
    }
    Ok(None)
}

/// Claims `address` for Service `id`: true when it is now ours.
async fn take(store: &dyn Store, id: &str, address: &Address) -> ApiResult<bool> {
    let key = address.key();
    let mine = Claim {
        service: id.to_string(),
        claimed_at: now_secs(),
    };
    let value =
        Bytes::from(serde_json::to_vec(&mine).map_err(|e| ApiError::internal(e.to_string()))?);
    match store.create(&key, value.clone()).await {
        Ok(_) => return Ok(true),
        Err(StoreError::AlreadyExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let Some(current) = store.get(&key)? else {
        return Ok(false);
    };
    let Ok(theirs) = serde_json::from_slice::<Claim>(&current.value) else {
        return Ok(false);
    };
    let holder_keeps_it = store
        .get(&format!("{SERVICES}{}", theirs.service))?
        .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .is_some_and(|holder| address.held_by(&holder));
    let reclaimable = theirs.service == id || (!theirs.fresh() && !holder_keeps_it);
    if !reclaimable {
        return Ok(false);
    }
    match store.update_from(&current, value).await {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn assign_cluster_ip(
    network: &ServiceNetwork,
    used: &InUse,
    svc: &mut Value,
    old: Option<&Value>,
    kind: &str,
) -> ApiResult<()> {
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if kind == "ExternalName" {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
        return Ok(());
    }
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let previous = old
        .filter(|o| service_type(o) != "ExternalName")
        .map(cluster_ips)
        .and_then(|ips| ips.into_iter().next());
    let ip = match (requested.as_str(), previous) {
        // Left out on update: keep what was assigned, as upstream does.
        ("", Some(prev)) => prev,
        (req, Some(prev)) if req != prev => {
            return Err(invalid_value(
                svc,
                "spec.clusterIPs[0]",
                req,
                "field is immutable".into(),
            ));
        }
        (_, Some(prev)) => prev,
        ("None", None) => "None".into(),
        ("", None) => next_free_ip(network, used)
            .ok_or_else(|| {
                ApiError::internal(format!(
                    "failed to allocate a serviceIP: range {} is full",
                    network.cluster_ip_range
                ))
            })?
            .to_string(),
        (req, None) => {
            let addr: Ipv4Addr = req.parse().map_err(|_| {
                invalid_value(
                    svc,
                    "spec.clusterIPs[0]",
                    req,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into(),
                )
            })?;
            if !network.cluster_ip_range.contains(&addr) {
                return Err(invalid_value(
                    svc,
                    "spec.clusterIPs",
                    req,
                    format!(
                        "failed to allocate IP {req}: the provided IP ({req}) is not in the valid range. The range of valid IPs is {}",
                        network.cluster_ip_range
                    ),
                ));
            }
            if used.ips.contains(&addr) {
                return Err(invalid_value(
                    svc,
                    "spec.clusterIPs",
                    req,
                    format!("failed to allocate IP {req}: provided IP is already allocated"),
                ));
            }
            req.to_string()
        }
    };
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
        spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    }
    Ok(())
}

fn invalid_value(svc: &Value, field: &str, value: &str, why: String) -> ApiError {
    invalid(
        svc,
        field.to_string(),
        format!("Invalid value: \"{value}\": {why}"),
    )
}

/// The lowest free address of the range, past the network address and the
/// first host (upstream reserves it for the `kubernetes` Service).
/// The first item `free` accepts of `len` items (`nth` makes the i-th),
/// scanning from a random place and around, as kube-apiserver's
/// allocators do: writers allocating at once mostly pick different
/// addresses instead of all racing for the lowest free one. The first
/// `reserved` items are the static band (KEP-3070, KEP-3668): taken only
/// once the rest is full, so addresses users ask for (cluster DNS's
/// tenth address) stay free.
fn random_free<T>(
    len: u32,
    reserved: u32,
    nth: impl Fn(u32) -> T,
    free: impl Fn(&T) -> bool,
) -> Option<T> {
    let scan = |from: u32, to: u32| {
        let n = to.saturating_sub(from);
        if n == 0 {
            return None;
        }
        let start = rand::random_range(0..n);
        (0..n).map(|i| nth(from + (start + i) % n)).find(&free)
    };
    let reserved = if reserved < len { reserved } else { 0 };
    scan(reserved, len).or_else(|| scan(0, reserved))
}

/// The static band of a range of `len` addresses: upstream's
/// min(max(16, len / divisor), cap), none when that is the whole range.
fn static_band(len: u32, divisor: u32, cap: u32) -> u32 {
    (len / divisor).clamp(16, cap)
}

fn next_free_ip(network: &ServiceNetwork, used: &InUse) -> Option<Ipv4Addr> {
    let range = &network.cluster_ip_range;
    // Hosts past the first, which is the `kubernetes` Service's.
    let first = u32::from(range.network()).saturating_add(2);
    let last = u32::from(range.broadcast()).saturating_sub(1);
    let len = last.saturating_add(1).saturating_sub(first);
    random_free(
        len,
        static_band(len, 16, 256),
        |i| Ipv4Addr::from(first + i),
        |ip| !used.ips.contains(ip),
    )
}

fn assign_node_ports(
    network: &ServiceNetwork,
    used: &InUse,
    svc: &mut Value,
    old: Option<&Value>,
    kind: &str,
) -> ApiResult<()> {
    let wants = matches!(kind, "NodePort" | "LoadBalancer");
    let old_ports: Vec<Value> = old.map(ports).unwrap_or_default();
    let mut taken = used.node_ports.clone();
    let mut list = ports(svc);
    for (i, p) in list.iter_mut().enumerate() {
        let Some(p) = p.as_object_mut() else {
            continue;
        };
        if !wants {
            p.remove("nodePort");
            continue;
        }
        let protocol = p
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            .to_string();
        let requested = p.get("nodePort").and_then(Value::as_u64).unwrap_or(0);
        let kept = old_ports
            .iter()
            .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"))
            .and_then(|o| o.get("nodePort").and_then(Value::as_u64))
            .unwrap_or(0);
        let port = if requested == 0 && kept != 0 {
            kept
        } else if requested == 0 {
            let (low, high) = (*network.node_ports.start(), *network.node_ports.end());
            let len = (u32::from(high) + 1).saturating_sub(u32::from(low));
            let free = random_free(
                len,
                static_band(len, 32, 128),
                |i| low.saturating_add(i as u16),
                |n| !taken.contains(&(*n, protocol.clone())),
            );
            u64::from(free.ok_or_else(|| {
                ApiError::internal(format!(
                    "failed to allocate a nodePort: range {}-{} is full",
                    network.node_ports.start(),
                    network.node_ports.end()
                ))
            })?)
        } else {
            let field = format!("spec.ports[{i}].nodePort");
            let n = u16::try_from(requested)
                .ok()
                .filter(|n| network.node_ports.contains(n));
            let Some(n) = n else {
                return Err(invalid(
                    svc,
                    field,
                    format!(
                        "Invalid value: {requested}: provided port is not in the valid range. The range of valid ports is {}-{}",
                        network.node_ports.start(),
                        network.node_ports.end()
                    ),
                ));
            };
            if requested != kept && taken.contains(&(n, protocol.clone())) {
                return Err(invalid(
                    svc,
                    field,
                    format!("Invalid value: {requested}: provided port is already allocated"),
                ));
            }
            requested
        };
        if let Ok(n) = u16::try_from(port) {
            taken.insert((n, protocol));
        }
        p.insert("nodePort".into(), json!(port));
    }
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut)
        && spec.contains_key("ports")
    {
        spec.insert("ports".into(), Value::Array(list));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> InUse {
        InUse {
            ips: HashSet::new(),
            node_ports: HashSet::new(),
        }
    }

    #[test]
    fn ips_are_chosen_anywhere_in_the_range_but_the_kubernetes_service_address() {
        let net = ServiceNetwork {
            cluster_ip_range: "10.96.0.0/29".parse().unwrap(),
            node_ports: 30000..=30002,
        };
        let mut used = empty();
        let mut seen = HashSet::new();
        for _ in 0..200 {
            let ip = next_free_ip(&net, &used).unwrap();
            assert!((2..=6).contains(&ip.octets()[3]), "{ip}");
            seen.insert(ip);
        }
        // Random, not always the lowest: concurrent writers spread out.
        assert!(seen.len() > 1);
        // In a range of the default size, the static band (cluster DNS's
        // tenth address among it) is left to the addresses users ask for.
        let wide = ServiceNetwork::default();
        for _ in 0..200 {
            let ip = next_free_ip(&wide, &empty()).unwrap();
            assert!(ip >= Ipv4Addr::new(10, 96, 1, 2), "{ip}");
        }
        for last in 2..=6 {
            used.ips.insert(Ipv4Addr::new(10, 96, 0, last));
        }
        assert_eq!(next_free_ip(&net, &used), None);
        used.ips.remove(&Ipv4Addr::new(10, 96, 0, 4));
        assert_eq!(next_free_ip(&net, &used), Some(Ipv4Addr::new(10, 96, 0, 4)));
    }

    #[test]
    fn cluster_ip_is_kept_and_immutable() {
        let net = ServiceNetwork::default();
        let old = json!({"metadata": {"name": "a"}, "spec": {"clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.7"]}});
        let mut kept = json!({"metadata": {"name": "a"}, "spec": {}});
        assign_cluster_ip(&net, &empty(), &mut kept, Some(&old), "ClusterIP").unwrap();
        assert_eq!(kept["spec"]["clusterIP"], "10.96.0.7");
        let mut changed = json!({"metadata": {"name": "a"}, "spec": {"clusterIP": "10.96.0.8"}});
        let err =
            assign_cluster_ip(&net, &empty(), &mut changed, Some(&old), "ClusterIP").unwrap_err();
        assert_eq!(err.code.as_u16(), 422);
    }

    #[test]
    fn node_ports_avoid_taken_ones() {
        let net = ServiceNetwork::default();
        let mut used = empty();
        used.node_ports.insert((30000, "TCP".into()));
        for _ in 0..100 {
            let mut svc = json!({"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}});
            assign_node_ports(&net, &used, &mut svc, None, "NodePort").unwrap();
            let port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
            assert!((30001..=32767).contains(&port), "{port}");
        }
        let mut clash = json!({"metadata": {"name": "b"}, "spec": {"ports": [{"port": 80, "protocol": "TCP", "nodePort": 30000}]}});
        assert!(assign_node_ports(&net, &used, &mut clash, None, "NodePort").is_err());
    }
}
