//! What exporters are told: each ServiceExport's conditions, and a
//! Karmada MultiClusterService's exports and Ready condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::info;

use super::api::{
    MANAGED_BY, MANAGED_BY_LABEL, MultiClusterService, ServiceExport, ServiceExportStatus,
};
use super::merge::{Merged, Port, ServiceFacts};
use crate::conditions;
use crate::error::Error;

use super::members::{Link, Member};
use super::{Mcs, api, delete, merge, pull};

/// A MultiClusterService's Ready condition: exported, or why not.
pub(super) async fn write_front_status(
    hub: &Client,
    front: &MultiClusterService,
    merged: &Merged,
) -> Result<(), Error> {
    let mut status = front.status.clone().unwrap_or_default();
    let (ready, reason, message) = if !front.cross_cluster() {
        (
            false,
            "UnsupportedType",
            "only type CrossCluster is implemented; LoadBalancer is accepted and inert".to_string(),
        )
    } else if let Some(i) = &merged.import {
        (
            true,
            "Exported",
            format!("exported from {}", i.clusters.join(", ")),
        )
    } else {
        (
            false,
            "NoProvider",
            "no provider cluster is Ready with a Service of this name".to_string(),
        )
    };
    if !conditions::set(&mut status.conditions, "Ready", ready, reason, &message) {
        return Ok(());
    }
    let ns = front.namespace().unwrap_or_default();
    Api::<MultiClusterService>::namespaced(hub.clone(), &ns)
        .patch_status(
            &front.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    Ok(())
}

pub(super) fn facts(s: &Service) -> ServiceFacts {
    let spec = s.spec.clone().unwrap_or_default();
    ServiceFacts {
        type_: spec.type_.clone().unwrap_or_else(|| "ClusterIP".into()),
        headless: spec.cluster_ip.as_deref() == Some("None"),
        ports: spec
            .ports
            .iter()
            .flatten()
            .map(|p| Port {
                name: p.name.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: p.port,
                app_protocol: p.app_protocol.clone(),
            })
            .collect(),
        session_affinity: spec
            .session_affinity
            .clone()
            .unwrap_or_else(|| "None".into()),
        session_affinity_config: spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok()),
        ip_families: spec.ip_families.clone().unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy.clone(),
        traffic_distribution: spec.traffic_distribution.clone(),
    }
}

pub(super) async fn write_export_status(
    hub: &Client,
    m: &Member,
    ns: &str,
    name: &str,
    wanted: &[merge::ExportCondition],
    imported: bool,
) -> Result<(), Error> {
    let Some(export) = m.exports.get(&ObjectRef::new(name).within(ns)) else {
        return Ok(());
    };
    let mut status: ServiceExportStatus = export.status.clone().unwrap_or_default();
    let mut changed = false;
    for c in wanted {
        changed |= conditions::set(
            &mut status.conditions,
            c.type_,
            c.status,
            &c.reason,
            &c.message,
        );
    }
    let valid = wanted.iter().any(|c| c.type_ == "Valid" && c.status);
    let (ready, reason, message) = match (valid, imported) {
        (true, true) => (
            true,
            "Exported",
            "The service is exported to the clusterset",
        ),
        (true, false) => (false, "Pending", "The service is being exported"),
        (false, _) => (false, "Failed", "The export is not valid"),
    };
    changed |= conditions::set(&mut status.conditions, "Ready", ready, reason, message);
    if !wanted.iter().any(|c| c.type_ == "Conflict") {
        let before = status.conditions.len();
        status
            .conditions
            .retain(|c: &Condition| c.type_ != "Conflict");
        changed |= status.conditions.len() != before;
    }
    if !changed {
        return Ok(());
    }
    let client = match &m.link {
        Link::Push(client) => client,
        Link::Pull => {
            return pull::write_report_status(hub, &m.name, ns, name, &status.conditions).await;
        }
    };
    Api::<ServiceExport>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    Ok(())
}

impl Mcs {
    /// A MultiClusterService's exports: a ServiceExport (marked as ours) in
    /// each provider, and ours removed from the others.
    pub(super) async fn sync_front_exports(
        &self,
        members: &[Arc<Member>],
        ns: &str,
        name: &str,
        front: Option<&MultiClusterService>,
    ) -> Result<(), Error> {
        for m in members {
            let have = m.exports.get(&ObjectRef::new(name).within(ns));
            let ours = have.as_ref().is_some_and(|e| {
                e.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            });
            let provides = front.is_some_and(|f| f.provides(&m.name));
            let mut export = ServiceExport::default();
            export.metadata.name = Some(name.to_string());
            export.metadata.namespace = Some(ns.to_string());
            export.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGED_BY.to_string(),
            )]));
            let client = match &m.link {
                Link::Push(client) => client,
                Link::Pull => {
                    let work = pull::work_name("front", ns, name);
                    if provides && (have.is_none() || ours) {
                        let mut manifest = serde_json::to_value(&export)?;
                        manifest["apiVersion"] = format!("{}/v1alpha1", api::GROUP).into();
                        manifest["kind"] = "ServiceExport".into();
                        self.write_pull_work(&m.name, work, &[manifest]).await?;
                    } else if !provides {
                        self.delete_pull_work(&m.name, &work).await?;
                    }
                    continue;
                }
            };
            let api: Api<ServiceExport> = Api::namespaced(client.clone(), ns);
            if provides && have.is_none() {
                flotilla_client::namespace::ensure(client, ns, &[]).await?;
                match api.create(&PostParams::default(), &export).await {
                    Ok(_) => {
                        info!(cluster = %m.name, service = %format!("{ns}/{name}"), "exported for a MultiClusterService")
                    }
                    Err(e) if crate::error::is_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if !provides && ours {
                delete(&api, name).await?;
            }
        }
        Ok(())
    }
}
