//! Globalnet, for clusters whose CIDRs overlap: the cluster owns a global
//! CIDR (a /16 of 242.0.0.0/8 by default) and
//! - its pods leave through the tunnel SNATed to the cluster's egress
//!   IPs (the `ClusterGlobalEgressIP` `cluster-egress.submariner.io`,
//!   the CIDR's first addresses; the gateway's nftables table does it);
//! - every exported ClusterIP Service gets a global ingress IP (a
//!   `GlobalIngressIP` named after it), which the member's proxy DNATs
//!   to the Service's endpoints. The ServiceExport is annotated with it,
//!   so the fleet's ServiceImports list that address for this cluster;
//! - a headless Service's ready pods get one each (`pod-<name>`, target
//!   `HeadlessServicePod`), which the proxy DNATs to the pod; the export
//!   carries the pod-IP-to-global-IP map for the hub's import slices.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
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
/// The annotation on a headless Service's ServiceExport mapping its pods'
/// addresses to their global IPs (JSON).
pub const GLOBAL_POD_IPS_ANNOTATION: &str = "flotilla.io/global-pod-ips";
/// Where a headless Service's pod's GlobalIngressIP says the pod is.
pub const HEADLESS_POD_IP_ANNOTATION: &str = "submariner.io/headless-svc-pod-ip";
const HEADLESS_SERVICE_POD: &str = "HeadlessServicePod";
/// Marks the GlobalIngressIPs this controller made.
const MADE_BY: &str = "submariner.io/serviceRef";
/// Egress IPs the API allows at most; the ingress IPs start after them.
const MAX_EGRESS: u32 = 20;

pub struct Globalnet {
    member: Client,
    cidr: Ipv4Net,
}

/// One GlobalIngressIP to have.
struct Want {
    name: String,
    target: &'static str,
    service: String,
    /// A headless Service's pod: its name and address.
    pod: Option<(String, Ipv4Addr)>,
}

/// A pass's bookkeeping: what exists, which IPs are taken, what stays.
struct Book {
    existing: Vec<GlobalIngressIp>,
    used: BTreeSet<Ipv4Addr>,
    wanted: BTreeSet<(String, String)>,
}

/// Submariner's name of a headless Service's pod's GlobalIngressIP.
fn pod_object_name(pod: &str) -> String {
    format!("pod-{}", pod.chars().take(59).collect::<String>())
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
        let mut book = Book {
            used: existing
                .iter()
                .filter_map(|g| g.status.as_ref()?.allocated_ip.parse().ok())
                .collect(),
            existing,
            wanted: BTreeSet::new(),
        };
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
            let (key, value) = if headless {
                // One global IP per pod, as Submariner gives them.
                let mut ips = BTreeMap::new();
                for (pod, pod_ip) in self.pods_of(&ns, &name).await? {
                    let want = Want {
                        name: pod_object_name(&pod),
                        target: HEADLESS_SERVICE_POD,
                        service: name.clone(),
                        pod: Some((pod, pod_ip)),
                    };
                    if let Some(ip) = self.ensure(&ns, &want, &mut book).await? {
                        ips.insert(pod_ip.to_string(), ip.to_string());
                    }
                }
                let value = serde_json::to_string(&ips).unwrap_or_default();
                (GLOBAL_POD_IPS_ANNOTATION, value)
            } else {
                let want = Want {
                    name: name.clone(),
                    target: CLUSTER_IP_SERVICE,
                    service: name.clone(),
                    pod: None,
                };
                let Some(ip) = self.ensure(&ns, &want, &mut book).await? else {
                    continue;
                };
                (GLOBAL_IP_ANNOTATION, ip.to_string())
            };
            if export.annotations().get(key) != Some(&value) {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.member.clone(), &ns, &export_resource());
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
        }
        // GlobalIngressIPs others made (a peering's pods): allocated like
        // ours, left to their makers to delete.
        let requested: Vec<(String, String)> = book
            .existing
            .iter()
            .filter(|g| !g.labels().contains_key(MADE_BY))
            .filter(|g| {
                g.status
                    .as_ref()
                    .and_then(|s| s.allocated_ip.parse::<Ipv4Addr>().ok())
                    .is_none_or(|ip| !self.cidr.contains(&ip))
            })
            .map(|g| (g.namespace().unwrap_or_default(), g.name_any()))
            .collect();
        for (ns, name) in requested {
            self.allocate(&ns, &name, &mut book).await?;
        }
        for g in &book.existing {
            let key = (g.namespace().unwrap_or_default(), g.name_any());
            let ours = g.labels().contains_key(MADE_BY);
            if ours && !book.wanted.contains(&key) {
                let api: Api<GlobalIngressIp> = Api::namespaced(self.member.clone(), &key.0);
                let _ = api.delete(&key.1, &DeleteParams::default()).await;
            }
        }
        Ok(())
    }

    /// The ready pods behind headless Service `ns/name`, with their IPs.
    async fn pods_of(&self, ns: &str, name: &str) -> Result<Vec<(String, Ipv4Addr)>, String> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.member.clone(), ns);
        let list = slices
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
            .await
            .map_err(|e| e.to_string())?;
        let mut pods = Vec::new();
        for s in list.items {
            for e in s.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                let pod = e
                    .target_ref
                    .as_ref()
                    .filter(|r| r.kind.as_deref() == Some("Pod"))
                    .and_then(|r| r.name.clone());
                let ip = e.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok());
                if let (true, Some(pod), Some(ip)) = (ready, pod, ip) {
                    pods.push((pod, ip));
                }
            }
        }
        pods.sort();
        pods.dedup();
        Ok(pods)
    }

    /// Makes the GlobalIngressIP `want` describes and allocates its IP;
    /// the IP, or None when the CIDR is exhausted.
    async fn ensure(
        &self,
        ns: &str,
        want: &Want,
        book: &mut Book,
    ) -> Result<Option<Ipv4Addr>, String> {
        book.wanted.insert((ns.to_string(), want.name.clone()));
        let api: Api<GlobalIngressIp> = Api::namespaced(self.member.clone(), ns);
        let have = book
            .existing
            .iter()
            .find(|g| g.namespace().as_deref() == Some(ns) && g.name_any() == want.name);
        let pod_ip = want.pod.as_ref().map(|(_, ip)| ip.to_string());
        let annotations: BTreeMap<String, String> = pod_ip
            .iter()
            .map(|ip| (HEADLESS_POD_IP_ANNOTATION.to_string(), ip.clone()))
            .collect();
        match have {
            None => {
                let giip = GlobalIngressIp {
                    metadata: ObjectMeta {
                        name: Some(want.name.clone()),
                        namespace: Some(ns.to_string()),
                        labels: Some([(MADE_BY.to_string(), want.service.clone())].into()),
                        annotations: Some(annotations),
                        ..Default::default()
                    },
                    spec: GlobalIngressIpSpec {
                        target: want.target.into(),
                        service_ref: Some(LocalRef {
                            name: want.service.clone(),
                        }),
                        pod_ref: want
                            .pod
                            .as_ref()
                            .map(|(pod, _)| LocalRef { name: pod.clone() }),
                    },
                    status: None,
                };
                match api.create(&PostParams::default(), &giip).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            // A pod recreated under the same name has a new address.
            Some(g)
                if pod_ip.is_some()
                    && g.annotations().get(HEADLESS_POD_IP_ANNOTATION) != pod_ip.as_ref() =>
            {
                api.patch(
                    &want.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Some(_) => {}
        }
        let allocated = have
            .and_then(|g| g.status.as_ref())
            .and_then(|s| s.allocated_ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| self.cidr.contains(ip));
        if let Some(ip) = allocated {
            return Ok(Some(ip));
        }
        self.allocate(ns, &want.name, book).await
    }

    /// Allocates a free global IP to GlobalIngressIP `ns/name`.
    async fn allocate(
        &self,
        ns: &str,
        name: &str,
        book: &mut Book,
    ) -> Result<Option<Ipv4Addr>, String> {
        let api: Api<GlobalIngressIp> = Api::namespaced(self.member.clone(), ns);
        let free = (MAX_EGRESS + 1..)
            .map_while(|i| nth(self.cidr, i))
            .find(|ip| !book.used.contains(ip));
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
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .map_err(|e| e.to_string())?;
        if let Some(ip) = free {
            info!(object = %format!("{ns}/{name}"), %ip, "global ingress IP allocated");
            book.used.insert(ip);
        }
        Ok(free)
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
