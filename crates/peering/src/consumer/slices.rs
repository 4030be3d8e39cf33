//! ResourceSlices: the consumer's copy (in the provider's tenant
//! namespace here) is mirrored into its tenant namespace in the provider,
//! whose controller grants it; the grant is copied back, and a granted
//! slice gets a VirtualNode of the granted size (Liqo's CRD replicator and
//! virtual node creator).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use super::{Peers, Provider};
use crate::api::{
    LocalRef, REMOTE_CLUSTER_ID, ResourceQuotaSpec, ResourceSlice, VirtualNode, VirtualNodeSpec,
};
use crate::peer::CREATE_VIRTUAL_NODE;
use crate::provider::grant::{GRANTED_FOR, request_digest};
use crate::remote;

const MANAGER: &str = "liqo-crd-replicator";
const PERIOD: Duration = Duration::from_millis(500);

pub async fn run(peers: Arc<Peers>) {
    // A slice asked for here, a peering made, or a provider's grant wakes
    // the loop at once; the period is a fallback.
    let wake = Arc::new(tokio::sync::Notify::new());
    crate::wake::on_changes(Api::<ResourceSlice>::all(peers.local.clone()), wake.clone());
    peers.wake_on_changes(&wake);
    let mut remote = crate::wake::RemoteWatches::new(wake.clone());
    loop {
        for provider in peers.providers().await {
            remote.keep(
                provider.id.clone(),
                Api::<ResourceSlice>::namespaced(provider.client.clone(), &provider.remote_tenant),
                kube::runtime::watcher::Config::default(),
            );
            if let Err(error) = sync(&peers, &provider).await {
                debug!(%error, provider = %provider.id, "resource slices not synced");
            }
        }
        remote.end_pass();
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn sync(peers: &Peers, provider: &Provider) -> Result<(), kube::Error> {
    let local: Api<ResourceSlice> = Api::namespaced(peers.local.clone(), &provider.local_tenant);
    let remote: Api<ResourceSlice> =
        Api::namespaced(provider.client.clone(), &provider.remote_tenant);
    // A tenant namespace serves both directions of a bidirectional
    // peering: only this cluster's requests to this provider, and their
    // copies there, are this loop's.
    let slices: Vec<ResourceSlice> = local
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.provider_cluster_id.as_deref() == Some(provider.id.as_str()))
        .collect();
    let theirs: Vec<ResourceSlice> = remote
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.consumer_cluster_id.as_deref() == Some(peers.cluster_id.as_str()))
        .collect();
    for slice in &slices {
        let name = slice.name_any();
        let copy = theirs.iter().find(|r| r.name_any() == name);
        if copy.is_none_or(|c| c.spec != slice.spec) {
            let body = json!({
                "apiVersion": "authentication.liqo.io/v1beta1", "kind": "ResourceSlice",
                "metadata": {"name": name, "labels": {REMOTE_CLUSTER_ID: peers.cluster_id}},
                "spec": slice.spec,
            });
            remote
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await?;
        }
        // Only a grant of the request as it is now (the provider notes
        // which request it answered).
        let granted = copy
            .filter(|c| c.annotations().get(GRANTED_FOR) == Some(&request_digest(slice)))
            .and_then(|c| c.status.clone());
        if let Some(status) = &granted
            && slice.status.as_ref() != Some(status)
        {
            local
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await?;
        }
        let accepted = granted.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Resources" && c.status == "Accepted")
        });
        let wanted = slice
            .annotations()
            .get(CREATE_VIRTUAL_NODE)
            .is_none_or(|v| v != "false");
        if accepted && wanted {
            let hard = granted.map(|s| s.resources).unwrap_or_default();
            ensure_virtual_node(peers, provider, &name, hard).await?;
        }
    }
    // A VirtualNode whose slice is gone goes too (its Node with it).
    let vns: Api<VirtualNode> = Api::namespaced(peers.local.clone(), &provider.local_tenant);
    for vn in vns.list(&ListParams::default()).await?.items {
        if vn.spec.cluster_id == provider.id
            && !slices.iter().any(|s| s.name_any() == vn.name_any())
        {
            vns.delete(&vn.name_any(), &DeleteParams::default()).await?;
        }
    }
    // A slice the consumer removed leaves the provider too.
    for copy in &theirs {
        if !slices.iter().any(|s| s.name_any() == copy.name_any()) {
            remote
                .delete(&copy.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}

async fn ensure_virtual_node(
    peers: &Peers,
    provider: &Provider,
    name: &str,
    hard: std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
) -> Result<(), kube::Error> {
    let api: Api<VirtualNode> = Api::namespaced(peers.local.clone(), &provider.local_tenant);
    let existing = api.get_opt(name).await?;
    let spec = VirtualNodeSpec {
        cluster_id: provider.id.clone(),
        create_node: Some(true),
        kubeconfig_secret_ref: Some(LocalRef {
            name: remote::kubeconfig_secret_name(&provider.id),
        }),
        resource_quota: ResourceQuotaSpec { hard },
        labels: [(REMOTE_CLUSTER_ID.to_string(), provider.id.clone())].into(),
        taints: Vec::new(),
    };
    match existing {
        // The operator may have changed other fields: only the quota
        // follows the grant.
        Some(vn) if vn.spec.resource_quota == spec.resource_quota => Ok(()),
        Some(_) => {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"resourceQuota": spec.resource_quota}})),
            )
            .await?;
            Ok(())
        }
        None => {
            let body = json!({
                "apiVersion": "offloading.liqo.io/v1beta1", "kind": "VirtualNode",
                "metadata": {"name": name, "labels": {REMOTE_CLUSTER_ID: provider.id}},
                "spec": spec,
            });
            api.patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
            info!(provider = %provider.id, "virtual node created");
            Ok(())
        }
    }
}
