//! Services (upstream's defaults: type, session affinity, IP families,
//! target ports, ...; answered with themselves on deletion; their
//! ClusterIPs and NodePorts are `allocation.rs`'s), the Endpoints and
//! EndpointSlices behind them and the Ingresses in front of them, with
//! `kubectl get`'s columns.

use serde_json::Value;

use super::Strategy;
use crate::table::prelude::*;

pub struct Services;

impl Strategy for Services {
    fn default(&self, obj: &mut Value) {
        crate::defaults::service(obj);
    }

    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"loadBalancer": {}}))
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Type", "string", 0),
            col("Cluster-IP", "string", 0),
            col("External-IP", "string", 0),
            col("Port(s)", "string", 0),
            AGE,
            col("Selector", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let external: Vec<String> = arr(o, "/status/loadBalancer/ingress")
            .iter()
            .map(|i| s(i, "/ip").to_string())
            .chain(
                arr(o, "/spec/externalIPs")
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from)),
            )
            .collect();
        let t = match s(o, "/spec/type") {
            "" => "ClusterIP",
            t => t,
        };
        let external = if external.is_empty() {
            if t == "LoadBalancer" {
                "<pending>".to_string()
            } else {
                "<none>".to_string()
            }
        } else {
            external.join(",")
        };
        vec![
            name,
            json!(t),
            json!(or_none(s(o, "/spec/clusterIP").to_string())),
            json!(external),
            json!(ports_string(o)),
            json!(created),
            json!(map_selector(o, "/spec/selector")),
        ]
    }
}

pub struct Endpoints;

impl Strategy for Endpoints {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Endpoints", "string", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let mut eps = Vec::new();
        for subset in arr(o, "/subsets") {
            for a in arr(subset, "/addresses") {
                for p in arr(subset, "/ports") {
                    eps.push(format!("{}:{}", s(a, "/ip"), i(p, "/port")));
                }
            }
        }
        vec![name, json!(or_none(eps.join(","))), json!(created)]
    }
}

pub struct EndpointSlices;

impl Strategy for EndpointSlices {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("AddressType", "string", 0),
            col("Ports", "string", 0),
            col("Endpoints", "string", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let ports: Vec<String> = arr(o, "/ports")
            .iter()
            .map(|p| i(p, "/port").to_string())
            .collect();
        let addrs: Vec<String> = arr(o, "/endpoints")
            .iter()
            .flat_map(|e| arr(e, "/addresses").iter())
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        vec![
            name,
            json!(s(o, "/addressType")),
            json!(or_none(ports.join(","))),
            json!(or_none(addrs.join(","))),
            json!(created),
        ]
    }
}

pub struct Ingresses;

impl Strategy for Ingresses {
    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        Some(json!({"loadBalancer": {}}))
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Class", "string", 0),
            col("Hosts", "string", 0),
            col("Address", "string", 0),
            col("Ports", "string", 0),
            AGE,
        ])
    }

    /// As upstream's printer: `*` for rules without hosts, three hosts
    /// and a count of the rest, 443 beside 80 when TLS is set.
    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let hosts: Vec<&str> = arr(o, "/spec/rules")
            .iter()
            .filter_map(|r| r.get("host").and_then(Value::as_str))
            .filter(|h| !h.is_empty())
            .collect();
        let hosts = match hosts.len() {
            0 => "*".to_string(),
            n if n > 3 => format!("{} + {} more...", hosts[..3].join(","), n - 3),
            _ => hosts.join(","),
        };
        let address: Vec<&str> = arr(o, "/status/loadBalancer/ingress")
            .iter()
            .filter_map(|i| {
                i.get("ip")
                    .or_else(|| i.get("hostname"))
                    .and_then(Value::as_str)
            })
            .collect();
        let ports = if arr(o, "/spec/tls").is_empty() {
            "80"
        } else {
            "80, 443"
        };
        vec![
            name,
            json!(or_none(s(o, "/spec/ingressClassName").to_string())),
            json!(hosts),
            json!(address.join(",")),
            json!(ports),
            json!(created),
        ]
    }
}
