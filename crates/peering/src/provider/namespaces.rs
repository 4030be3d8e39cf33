//! Twin namespaces: a consumer's NamespaceMap (in its tenant namespace
//! here) names the namespaces it wants; this controller makes them,
//! labelled with the consumer's ID, binds the consumer's identity in each
//! to its offloading ClusterRole, and removes those no longer wanted. A
//! namespace that exists and was not made for this consumer is never
//! taken over: the map says so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{Instrument, debug, info, info_span};

use crate::api::{
    NamespaceMap, REMOTE_CLUSTER_ID, RemoteNamespaceStatus, TENANT_NAMESPACE_LABEL,
    tenant_namespace,
};
use crate::peer::{identity_name, twin_binding};

const MANAGER: &str = "liqo-namespace-map";
const PERIOD: Duration = Duration::from_millis(500);

pub async fn run(local: Client) {
    // A consumer's new map is acted on at once.
    let wake = Arc::new(Notify::new());
    crate::wake::on_changes(Api::<NamespaceMap>::all(local.clone()), wake.clone());
    loop {
        if let Err(error) = pass(&local)
            .instrument(info_span!("reconcile", controller = MANAGER))
            .await
        {
            debug!(%error, "namespace maps not synced");
        }
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn pass(local: &Client) -> Result<(), kube::Error> {
    let maps = match Api::<NamespaceMap>::all(local.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(_) => return Ok(()),
    };
    for map in maps {
        // The map a consumer wrote in its own tenant namespace here.
        let consumer = map.name_any();
        if map.namespace() != Some(tenant_namespace(&consumer)) {
            continue;
        }
        let status = sync(local, &consumer, &map.spec.desired_mapping).await?;
        if map.status.as_ref().map(|s| &s.current_mapping) != Some(&status) {
            Api::<NamespaceMap>::namespaced(local.clone(), &tenant_namespace(&consumer))
                .patch_status(
                    &consumer,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"currentMapping": status}})),
                )
                .await?;
        }
    }
    Ok(())
}

async fn sync(
    local: &Client,
    consumer: &str,
    desired: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, RemoteNamespaceStatus>, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(local.clone());
    let mut out = BTreeMap::new();
    for (theirs, ours) in desired {
        let existing = namespaces.get_opt(ours).await?;
        let made_for = existing
            .as_ref()
            .map(|n| n.labels().get(REMOTE_CLUSTER_ID).cloned());
        let is_tenant = existing
            .as_ref()
            .is_some_and(|n| n.labels().contains_key(TENANT_NAMESPACE_LABEL));
        let terminating = existing
            .as_ref()
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        let (phase, message) = match made_for {
            // The twin of an earlier namespace of the same name, still
            // going: nothing can be written in it, so it is made anew
            // once it is gone.
            Some(Some(id)) if id == consumer && !is_tenant && terminating => (
                "Terminating",
                format!(
                    "namespace {ours} is being deleted in the provider; it is created again once it is gone"
                ),
            ),
            Some(Some(id)) if id == consumer && !is_tenant => ("Accepted", String::new()),
            Some(_) => (
                "CreationLoopBackOff",
                format!(
                    "namespace {ours} already exists in the provider and was not created for cluster {consumer}; \
                     choose another name (namespaceMappingStrategy DefaultName, or SelectedName with remoteNamespaceName)"
                ),
            ),
            None => {
                flotilla_client::namespace::ensure(local, ours, &[(REMOTE_CLUSTER_ID, consumer)])
                    .await?;
                info!(namespace = %ours, %consumer, "twin namespace created");
                ("Accepted", String::new())
            }
        };
        if phase == "Accepted" {
            let binding = twin_binding(consumer, ours);
            Api::<RoleBinding>::namespaced(local.clone(), ours)
                .patch(
                    &identity_name(consumer),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&binding),
                )
                .await?;
        }
        out.insert(
            theirs.clone(),
            RemoteNamespaceStatus {
                remote_namespace: ours.clone(),
                phase: phase.into(),
                message,
            },
        );
    }
    // Twins no longer wanted.
    let made = namespaces
        .list(&ListParams::default().labels(&format!("{REMOTE_CLUSTER_ID}={consumer}")))
        .await?;
    for ns in made.items {
        let name = ns.name_any();
        let tenant = ns.labels().contains_key(TENANT_NAMESPACE_LABEL);
        if !tenant
            && !desired.values().any(|v| *v == name)
            && ns.metadata.deletion_timestamp.is_none()
        {
            info!(namespace = %name, %consumer, "twin namespace no longer wanted; deleting");
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
        }
    }
    Ok(out)
}
