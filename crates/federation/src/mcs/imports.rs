//! What a consumer gets: the ServiceImport with its ClusterSetIPs, and
//! its EndpointSlices from each exporting cluster; withdrawn when no
//! export stands.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use super::api::{
    ImportCluster, ImportPort, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL, ServiceExport, ServiceImport, ServiceImportSpec,
};
use crate::conditions;
use crate::error::Error;

use super::members::{Link, Member};
use super::{MANAGER, Mcs, delete, merge, pull, slices};

/// The exported labels, and ours.
pub(super) fn import_labels(import: &merge::Import) -> BTreeMap<String, String> {
    let mut labels = import.labels.clone();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels
}

/// The ServiceImport as the controller writes it, without status.
pub(super) fn import_manifest(
    ns: &str,
    name: &str,
    spec: &ServiceImportSpec,
    import: &merge::Import,
) -> serde_json::Value {
    let mut metadata = json!({"name": name, "namespace": ns, "labels": import_labels(import)});
    if !import.annotations.is_empty() {
        metadata["annotations"] = json!(import.annotations);
    }
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceImport",
        "metadata": metadata,
        "spec": spec,
    })
}

/// Server-side applies the import and its status; returns it as stored.
pub(super) async fn apply_import(
    client: &Client,
    cached: Option<Arc<ServiceImport>>,
    ns: &str,
    name: &str,
    spec: &ServiceImportSpec,
    import: &merge::Import,
) -> Result<ServiceImport, Error> {
    let want: Vec<ImportCluster> = import
        .clusters
        .iter()
        .map(|c| ImportCluster { cluster: c.clone() })
        .collect();
    // Most reconciles change nothing: the watch's copy says so without a
    // round trip.
    if let Some(have) = cached
        && have.spec == *spec
        && *have.labels() == import_labels(import)
        && *have.annotations() == import.annotations
        && have.status.as_ref().map(|s| &s.clusters) == Some(&want)
    {
        return Ok((*have).clone());
    }
    flotilla_client::namespace::ensure(client, ns, &[]).await?;
    let api: Api<ServiceImport> = Api::namespaced(client.clone(), ns);
    let body = import_manifest(ns, name, spec, import);
    let params = PatchParams::apply(MANAGER).force();
    let stored = api.patch(name, &params, &Patch::Apply(&body)).await?;
    if stored.status.as_ref().map(|s| &s.clusters) != Some(&want) {
        let status = json!({"status": {"clusters": want}});
        return Ok(api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?);
    }
    Ok(stored)
}

/// Brings the import's slices in one cluster (a member or the hub) to
/// [`wanted_slices`].
pub(super) async fn sync_slices(
    client: &Client,
    have: &Store<EndpointSlice>,
    ns: &str,
    name: &str,
    sources: &BTreeMap<&str, &Member>,
    consumer: Option<&str>,
    owner: Option<OwnerReference>,
) -> Result<(), Error> {
    let want = wanted_slices(ns, name, sources, consumer, owner);
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let existing: Vec<Arc<EndpointSlice>> = have
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
                && s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        })
        .collect();
    for w in &want {
        let wname = w.metadata.name.clone().unwrap_or_default();
        if existing
            .iter()
            .any(|e| e.metadata.name.as_deref() == Some(wname.as_str()) && slices::same(e, w))
        {
            continue;
        }
        let mut body = serde_json::to_value(w)?;
        body["apiVersion"] = "discovery.k8s.io/v1".into();
        body["kind"] = "EndpointSlice".into();
        api.patch(
            &wname,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    }
    for e in existing {
        let ename = e.name_any();
        let source = e
            .labels()
            .get(SOURCE_CLUSTER_LABEL)
            .cloned()
            .unwrap_or_default();
        if !want
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(ename.as_str()))
        {
            debug!(slice = %ename, %source, "stale import slice removed");
            delete(&api, &ename).await?;
        }
    }
    Ok(())
}

/// One slice per source cluster, from the sources' own slices of the
/// Service, for the cluster `consumer` (None: the hub).
pub(super) fn wanted_slices(
    ns: &str,
    name: &str,
    sources: &BTreeMap<&str, &Member>,
    consumer: Option<&str>,
    owner: Option<OwnerReference>,
) -> Vec<EndpointSlice> {
    let mut want: Vec<EndpointSlice> = Vec::new();
    for (id, m) in sources {
        let own = own_slices(&m.slices, ns, name);
        let own: Vec<&EndpointSlice> = own.iter().map(|s| &**s).collect();
        let key = ObjectRef::new(name).within(ns);
        // A Globalnet cluster's gateway annotates the export with the
        // Service's global IP: that, not its pod IPs, is what others reach.
        // A cluster reaches its own endpoints directly.
        let global_ip = (consumer != Some(*id))
            .then(|| m.exports.get(&key))
            .flatten()
            .and_then(|e| {
                e.metadata
                    .annotations
                    .as_ref()?
                    .get(GLOBAL_IP_ANNOTATION)
                    .cloned()
            });
        match global_ip {
            Some(ip) => {
                let ports = m
                    .services
                    .get(&ObjectRef::new(name).within(ns))
                    .and_then(|s| s.spec.clone())
                    .and_then(|s| s.ports)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| k8s_openapi::api::discovery::v1::EndpointPort {
                        name: p.name,
                        port: Some(p.port),
                        protocol: p.protocol,
                        app_protocol: p.app_protocol,
                    })
                    .collect();
                want.push(slices::global(
                    ns,
                    name,
                    id,
                    &ip,
                    &own,
                    ports,
                    owner.clone(),
                ));
            }
            None => {
                let mut from = slices::from_source(ns, name, id, &own, owner.clone());
                // A headless Service's pods each have a global IP there.
                if let Some(map) = global_pod_ips(m, &key, consumer, id) {
                    for slice in &mut from {
                        slice.endpoints.retain_mut(|e| {
                            e.addresses = e
                                .addresses
                                .iter()
                                .filter_map(|a| map.get(a).cloned())
                                .collect();
                            !e.addresses.is_empty()
                        });
                    }
                }
                want.extend(from)
            }
        }
    }
    want
}

/// A Globalnet cluster's map of its headless Service's pod IPs to their
/// global IPs, for any consumer but itself.
pub(super) fn global_pod_ips(
    m: &Member,
    key: &ObjectRef<ServiceExport>,
    consumer: Option<&str>,
    id: &str,
) -> Option<BTreeMap<String, String>> {
    if consumer == Some(id) {
        return None;
    }
    let raw = m
        .exports
        .get(key)?
        .metadata
        .annotations
        .as_ref()?
        .get(GLOBAL_POD_IPS_ANNOTATION)?
        .clone();
    serde_json::from_str(&raw).ok()
}

/// The ServiceExport annotation of a Globalnet cluster's gateway
/// (Submariner's `submariner.io/globalIp`).
pub(super) const GLOBAL_IP_ANNOTATION: &str = "submariner.io/globalIp";

/// A Globalnet cluster's headless export: its pods' global IPs (JSON,
/// pod IP to global IP).
pub(super) const GLOBAL_POD_IPS_ANNOTATION: &str = "flotilla.io/global-pod-ips";

/// A cluster's own EndpointSlices of Service `ns/name` (not the slices
/// of an import of it).
pub(super) fn own_slices(
    slices: &Store<EndpointSlice>,
    ns: &str,
    name: &str,
) -> Vec<Arc<EndpointSlice>> {
    slices
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(name)
                && !s.labels().contains_key(SERVICE_NAME_LABEL)
        })
        .collect()
}

impl Mcs {
    pub(super) fn import_spec(
        &self,
        ns: &str,
        name: &str,
        import: &merge::Import,
    ) -> Result<ServiceImportSpec, Error> {
        // One ClusterSetIP per family the Service asks for and a range
        // is configured for.
        let ranges: Vec<ipnet::IpNet> = self
            .ctx
            .options
            .clusterset_ip_ranges
            .iter()
            .filter(|r| {
                let family = if matches!(r, ipnet::IpNet::V4(_)) {
                    "IPv4"
                } else {
                    "IPv6"
                };
                import.ip_families.iter().any(|f| f == family)
            })
            .copied()
            .collect();
        let ips = if import.type_ == "ClusterSetIP" {
            // The pick and its record under one lock, the cache read
            // under it too: reconciles of other services run at once.
            let mut given = self.given.lock();
            let cached = self
                .hub_imports
                .get(&ObjectRef::new(name).within(ns))
                .map(|i| i.spec.ips.clone());
            let others: Vec<IpAddr> = self
                .hub_imports
                .state()
                .iter()
                .filter(|i| !(i.name_any() == name && i.namespace().as_deref() == Some(ns)))
                .flat_map(|i| i.spec.ips.clone())
                .filter_map(|s| s.parse().ok())
                .collect();
            given
                .assign(&format!("{ns}/{name}"), &ranges, cached.as_deref(), others)
                .map_err(Error::Mcs)?
        } else {
            self.given.lock().forget(&format!("{ns}/{name}"));
            Vec::new()
        };
        Ok(ServiceImportSpec {
            ports: import
                .ports
                .iter()
                .map(|p| ImportPort {
                    name: p.name.clone(),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                    port: p.port,
                })
                .collect(),
            ips,
            type_: import.type_.to_string(),
            session_affinity: Some(import.session_affinity.clone()),
            session_affinity_config: import.session_affinity_config.clone(),
            ip_families: import.ip_families.clone(),
            internal_traffic_policy: import.internal_traffic_policy.clone(),
            traffic_distribution: import.traffic_distribution.clone(),
        })
    }

    /// The imports of `members` (and, with `hub`, the hub's) and their
    /// slices go: no export is valid any more, or they are not consumers.
    /// An import someone made by hand says why it serves nothing.
    pub(super) async fn withdraw(
        &self,
        members: &[Arc<Member>],
        hub: bool,
        ns: &str,
        name: &str,
    ) -> Result<(), Error> {
        let hub_import = hub.then(|| {
            (
                self.ctx.hub.clone(),
                self.hub_imports.get(&ObjectRef::new(name).within(ns)),
            )
        });
        let mut targets: Vec<(Client, Option<Arc<ServiceImport>>)> =
            hub_import.into_iter().collect();
        for m in members {
            match &m.link {
                Link::Push(client) => targets.push((
                    client.clone(),
                    m.imports.get(&ObjectRef::new(name).within(ns)),
                )),
                Link::Pull => {
                    self.delete_pull_work(&m.name, &pull::work_name("import", ns, name))
                        .await?
                }
            }
        }
        for (client, import) in targets {
            let Some(import) = import else { continue };
            let ours =
                import.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY);
            let imports: Api<ServiceImport> = Api::namespaced(client.clone(), ns);
            if ours {
                delete(&imports, name).await?;
                let slices: Api<EndpointSlice> = Api::namespaced(client, ns);
                let lp = ListParams::default().labels(&format!(
                    "{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}"
                ));
                for s in slices.list(&lp).await?.items {
                    delete(&slices, &s.name_any()).await?;
                }
                info!(service = %format!("{ns}/{name}"), "no valid export left: import withdrawn");
            } else {
                let mut status = import.status.clone().unwrap_or_default();
                if conditions::set(
                    &mut status.conditions,
                    "Ready",
                    false,
                    "NoServiceExport",
                    &format!(
                        "no cluster of the clusterset exports {ns}/{name}: ServiceImports are made by the MCS controller from ServiceExports, not by hand"
                    ),
                ) {
                    imports
                        .patch_status(
                            name,
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"status": status})),
                        )
                        .await?;
                }
            }
        }
        Ok(())
    }
}
