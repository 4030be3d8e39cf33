//! Globalnet, for clusters whose CIDRs overlap: the cluster owns a global
//! CIDR (a /16 of 242.0.0.0/8 by default) and
//! - its pods leave through the tunnel SNATed to the cluster's egress
//!   IPs (the `ClusterGlobalEgressIP` `cluster-egress.submariner.io`,
//!   the CIDR's first addresses; the gateway's nftables table does it);
//! - every exported ClusterIP Service gets a global ingress IP (a
//!   `GlobalIngressIP` named after it), which the member's proxy DNATs
//!   to the Service's endpoints. The ServiceExport is annotated with it,
//!   so the fleet's ServiceImports list that address for this cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{
    DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{
    CLUSTER_EGRESS, CLUSTER_IP_SERVICE, ClusterGlobalEgressIp, ClusterGlobalEgressIpSpec,
    DEFAULT_EGRESS_IPS, GlobalEgressIpStatus, GlobalIngressIp, GlobalIngressIpSpec,
    GlobalIngressIpStatus, LocalRef,
};
use crate::exports::export_resource;

/// The annotation on a ServiceExport carrying its Service's global IP.
pub const GLOBAL_IP_ANNOTATION: &str = "submariner.io/globalIp";
/// Marks the GlobalIngressIPs this controller made.
const MADE_BY: &str = "submariner.io/serviceRef";
/// Egress IPs the API allows at most; the ingress IPs start after them.
const MAX_EGRESS: u32 = 20;

pub struct Globalnet {
    member: Client,
    cidr: Ipv4Net,
}

fn nth(cidr: Ipv4Net, n: u32) -> Option<Ipv4Addr> {
    let ip = Ipv4Addr::from(u32::from(cidr.network()).checked_add(n)?);
    (cidr.contains(&ip) && ip != cidr.broadcast()).then_some(ip)
}

fn condition(ok: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Allocated".into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: None,
    }
}

impl Globalnet {
    pub fn new(member: Client, cidr: Ipv4Net) -> Globalnet {
        Globalnet { member, cidr }
    }

    /// One pass; returns the egress range for the gateway's SNAT.
    pub async fn reconcile(&mut self) -> Result<(Ipv4Addr, Ipv4Addr), String> {
        let egress = self.egress().await?;
        if let Err(e) = self.ingress().await {
            warn!(error = %e, "cannot allocate global ingress IPs");
        }
        Ok(egress)
    }

    async fn egress(&self) -> Result<(Ipv4Addr, Ipv4Addr), String> {
        let api: Api<ClusterGlobalEgressIp> = Api::all(self.member.clone());
        let have = match api
            .get_opt(CLUSTER_EGRESS)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(h) => h,
            None => {
                let fresh = ClusterGlobalEgressIp {
                    metadata: ObjectMeta {
                        name: Some(CLUSTER_EGRESS.into()),
                        ..Default::default()
                    },
                    spec: ClusterGlobalEgressIpSpec {
                        number_of_ips: Some(DEFAULT_EGRESS_IPS),
                    },
                    status: None,
                };
                api.create(&PostParams::default(), &fresh)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        let wanted = have.spec.number_of_ips.unwrap_or(1);
        let n = wanted.clamp(1, MAX_EGRESS);
        let first = nth(self.cidr, 1).ok_or("the global CIDR is too small")?;
        let last = nth(self.cidr, n).ok_or("the global CIDR is too small")?;
        let ips: Vec<String> = (1..=n)
            .filter_map(|i| nth(self.cidr, i))
            .map(|i| i.to_string())
            .collect();
        let (ok, reason, message) = if wanted == 0 || wanted > MAX_EGRESS {
            (
                false,
                "InvalidInput",
                format!("numGlobalIPs must be 1 to {MAX_EGRESS}; {n} allocated"),
            )
        } else {
            (true, "Success", format!("Allocated {n} global IP(s)"))
        };
        let current = have.status.clone().unwrap_or_default();
        if current.allocated_ips != ips
            || current.conditions.first().map(|c| c.reason.as_str()) != Some(reason)
        {
            let status = GlobalEgressIpStatus {
                conditions: vec![condition(ok, reason, &message)],
                allocated_ips: ips,
            };
            api.patch_status(
                CLUSTER_EGRESS,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        Ok((first, last))
    }

    async fn ingress(&self) -> Result<(), String> {
        let exports_api: Api<DynamicObject> =
            Api::all_with(self.member.clone(), &export_resource());
        let exports = match exports_api.list(&ListParams::default()).await {
            Ok(l) => l.items,
            // The MCS API is installed when the hub first sees the member.
            Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        let giips: Api<GlobalIngressIp> = Api::all(self.member.clone());
        let existing = giips
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let mut used: BTreeSet<Ipv4Addr> = existing
            .iter()
            .filter_map(|g| g.status.as_ref()?.allocated_ip.parse().ok())
            .collect();
        let mut wanted: BTreeMap<(String, String), ()> = BTreeMap::new();
        for export in &exports {
            let (Some(ns), name) = (export.namespace(), export.name_any()) else {
                continue;
            };
            let services: Api<Service> = Api::namespaced(self.member.clone(), &ns);
            let Some(service) = services.get_opt(&name).await.map_err(|e| e.to_string())? else {
                continue;
            };
            let headless = service
                .spec
                .as_ref()
                .and_then(|s| s.cluster_ip.as_deref())
                .is_none_or(|ip| ip == "None" || ip.is_empty());
            if headless {
                continue;
            }
            wanted.insert((ns.clone(), name.clone()), ());
            let api: Api<GlobalIngressIp> = Api::namespaced(self.member.clone(), &ns);
            let have = existing
                .iter()
                .find(|g| g.namespace().as_deref() == Some(&ns) && g.name_any() == name);
            let allocated = have
                .and_then(|g| g.status.as_ref())
                .and_then(|s| s.allocated_ip.parse::<Ipv4Addr>().ok())
                .filter(|ip| self.cidr.contains(ip));
            let ip = match allocated {
                Some(ip) => ip,
                None => {
                    if have.is_none() {
                        let giip = GlobalIngressIp {
                            metadata: ObjectMeta {
                                name: Some(name.clone()),
                                namespace: Some(ns.clone()),
                                labels: Some([(MADE_BY.to_string(), name.clone())].into()),
                                ..Default::default()
                            },
                            spec: GlobalIngressIpSpec {
                                target: CLUSTER_IP_SERVICE.into(),
                                service_ref: Some(LocalRef { name: name.clone() }),
                            },
                            status: None,
                        };
                        match api.create(&PostParams::default(), &giip).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(e)) if e.code == 409 => {}
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                    let free = (MAX_EGRESS + 1..)
                        .map_while(|i| nth(self.cidr, i))
                        .find(|ip| !used.contains(ip));
                    let status = match free {
                        Some(ip) => GlobalIngressIpStatus {
                            conditions: vec![condition(true, "Success", "Allocated global IP")],
                            allocated_ip: ip.to_string(),
                        },
                        None => GlobalIngressIpStatus {
                            conditions: vec![condition(
                                false,
                                "IPPoolAllocationFailed",
                                "the global CIDR is exhausted",
                            )],
                            allocated_ip: String::new(),
                        },
                    };
                    api.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": status})),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                    let Some(ip) = free else { continue };
                    info!(service = %format!("{ns}/{name}"), %ip, "global ingress IP allocated");
                    used.insert(ip);
                    ip
                }
            };
            if export.annotations().get(GLOBAL_IP_ANNOTATION) != Some(&ip.to_string()) {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.member.clone(), &ns, &export_resource());
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {GLOBAL_IP_ANNOTATION: ip.to_string()}}})),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
        }
        for g in existing {
            let key = (g.namespace().unwrap_or_default(), g.name_any());
            let ours = g.labels().contains_key(MADE_BY);
            if ours && !wanted.contains_key(&key) {
                let api: Api<GlobalIngressIp> = Api::namespaced(self.member.clone(), &key.0);
                let _ = api.delete(&key.1, &DeleteParams::default()).await;
            }
        }
        Ok(())
    }

    /// Removes the allocations (the cluster left the fleet).
    pub async fn clear(&mut self) {
        let giips: Api<GlobalIngressIp> = Api::all(self.member.clone());
        if let Ok(list) = giips.list(&ListParams::default().labels(MADE_BY)).await {
            for g in list {
                let api: Api<GlobalIngressIp> =
                    Api::namespaced(self.member.clone(), &g.namespace().unwrap_or_default());
                let _ = api.delete(&g.name_any(), &DeleteParams::default()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_inside_the_cidr() {
        let cidr: Ipv4Net = "242.1.0.0/16".parse().unwrap();
        assert_eq!(nth(cidr, 1), Some(Ipv4Addr::new(242, 1, 0, 1)));
        assert_eq!(nth(cidr, 65535), None, "the broadcast address");
        assert_eq!(nth(cidr, 70000), None);
    }
}
