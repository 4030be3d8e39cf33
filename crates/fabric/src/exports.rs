//! Whether what a member exports answers: the active gateway connects,
//! from its node, to the ready endpoints of every exported Service on
//! each TCP port, and sets the ServiceExport's `Reachable` condition. An
//! export whose pods do not serve a port it names is otherwise silent
//! until a remote client times out.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use flotilla_host as host;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

pub const CONDITION: &str = "Reachable";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub fn export_resource() -> ApiResource {
    ApiResource {
        group: "multicluster.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "multicluster.x-k8s.io/v1alpha1".into(),
        kind: "ServiceExport".into(),
        plural: "serviceexports".into(),
    }
}

/// One port of a Service and where its endpoints serve it.
#[derive(Debug, PartialEq)]
pub struct PortTargets {
    pub label: String,
    pub targets: Vec<SocketAddr>,
}

/// The ready endpoints of each TCP port of `service`, from its slices.
pub fn targets(service: &Service, slices: &[EndpointSlice]) -> Vec<PortTargets> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    ports
        .iter()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .map(|p| {
            let name = p.name.clone().unwrap_or_default();
            let mut targets = Vec::new();
            for s in slices {
                let port = s
                    .ports
                    .iter()
                    .flatten()
                    .find(|sp| sp.name.clone().unwrap_or_default() == name)
                    .and_then(|sp| sp.port)
                    .or(match &p.target_port {
                        Some(IntOrString::Int(n)) => Some(*n),
                        _ => None,
                    });
                let Some(port) = port.and_then(|n| u16::try_from(n).ok()) else {
                    continue;
                };
                for e in &s.endpoints {
                    let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                    if !ready {
                        continue;
                    }
                    for a in &e.addresses {
                        if let Ok(ip) = a.parse::<IpAddr>() {
                            targets.push(SocketAddr::new(ip, port));
                        }
                    }
                }
            }
            let label = if name.is_empty() {
                format!("{}/TCP", p.port)
            } else {
                format!("{name} ({}/TCP)", p.port)
            };
            PortTargets { label, targets }
        })
        .collect()
}

/// Checks every export of the member; sets conditions that changed.
pub async fn check(member: &Client, node_netns: &str) -> Result<(), String> {
    let all: Api<DynamicObject> = Api::all_with(member.clone(), &export_resource());
    let exports = match all.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    for export in exports {
        let (Some(ns), name) = (export.namespace(), export.name_any()) else {
            continue;
        };
        let Some(service) = Api::<Service>::namespaced(member.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        if service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            continue;
        }
        let slices = Api::<EndpointSlice>::namespaced(member.clone(), &ns)
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .map_err(|e| e.to_string())?
            .items;
        let mut dead = Vec::new();
        let mut any = false;
        for port in targets(&service, &slices) {
            if port.targets.is_empty() {
                continue;
            }
            any = true;
            let mut answered = false;
            for t in port.targets.iter().take(3) {
                if host::connect_in(node_netns, *t, CONNECT_TIMEOUT)
                    .await
                    .is_ok()
                {
                    answered = true;
                    break;
                }
            }
            if !answered {
                dead.push(port.label);
            }
        }
        if !any {
            // No ready endpoints: the MCS conditions already say so.
            continue;
        }
        let (status, reason, message) = if dead.is_empty() {
            (
                "True",
                "PortsAnswer",
                "Every exported port accepts connections on a ready endpoint".to_string(),
            )
        } else {
            (
                "False",
                "PortNotServed",
                format!(
                    "no ready endpoint accepts connections on port {}: its pods do not serve what the Service exports",
                    dead.join(", ")
                ),
            )
        };
        set_condition(member, &export, status, reason, &message).await?;
    }
    Ok(())
}

async fn set_condition(
    member: &Client,
    export: &DynamicObject,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), String> {
    let mut conditions: Vec<Condition> = export
        .data
        .pointer("/status/conditions")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    if let Some(c) = conditions.iter().find(|c| c.type_ == CONDITION)
        && c.status == status
        && c.reason == reason
        && c.message == message
    {
        return Ok(());
    }
    conditions.retain(|c| c.type_ != CONDITION);
    conditions.push(Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: export.metadata.generation,
    });
    let ns = export.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(member.clone(), &ns, &export_resource());
    api.patch_status(
        &export.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": conditions}})),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_follow_port_names_and_readiness() {
        let service: Service = serde_json::from_value(json!({
            "spec": {"ports": [
                {"name": "http", "port": 80, "targetPort": "web"},
                {"name": "dns", "port": 53, "protocol": "UDP"}
            ]}
        }))
        .unwrap();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.1.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.1.0.3"], "conditions": {"ready": false}}
            ]
        }))
        .unwrap();
        let t = targets(&service, &[slice]);
        assert_eq!(t.len(), 1, "UDP ports are not probed");
        assert_eq!(t[0].label, "http (80/TCP)");
        assert_eq!(t[0].targets, vec!["10.1.0.2:8080".parse().unwrap()]);
    }
}
