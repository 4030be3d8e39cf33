//! ShadowPods: each becomes a pod of the same name, owned by it (so
//! deleting the ShadowPod deletes the pod), labelled
//! `liqo.io/managed-by=shadowpod`; a pod that disappears while its
//! ShadowPod remains is made again. The pod's phase goes back on the
//! ShadowPod. Nothing here needs the consumer.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_SHADOWPOD, ShadowPod};

const PERIOD: Duration = Duration::from_millis(500);
/// ShadowPods synced at once within a pass.
const CONCURRENCY: usize = 16;

pub async fn run(local: Client) {
    let wake = Arc::new(Notify::new());
    let w = wake.clone();
    let c = local.clone();
    tokio::spawn(async move {
        // The CRD may not exist until the first peering: retry the watch.
        loop {
            let api: Api<ShadowPod> = Api::all(c.clone());
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(e) = events.next().await {
                match e {
                    Ok(_) => w.notify_one(),
                    Err(_) => break,
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    loop {
        if let Err(error) = pass(&local).await {
            debug!(%error, "shadow pods not synced");
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(PERIOD) => {}
        }
    }
}

async fn pass(local: &Client) -> Result<(), kube::Error> {
    let shadows = match Api::<ShadowPod>::all(local.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(_) => return Ok(()),
    };
    if shadows.is_empty() {
        return Ok(());
    }
    let pods = Api::<Pod>::all(local.clone())
        .list(&ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_SHADOWPOD}")))
        .await?
        .items;
    let syncs: Vec<_> = shadows
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|shadow| sync_one(local, shadow, &pods))
        .collect();
    crate::concurrent::all(syncs, CONCURRENCY).await
}

/// One ShadowPod: its pod made if missing, its phase reported.
async fn sync_one(local: &Client, shadow: &ShadowPod, pods: &[Pod]) -> Result<(), kube::Error> {
    let ns = shadow.namespace().unwrap_or_default();
    let name = shadow.name_any();
    let pod = pods
        .iter()
        .find(|p| p.namespace().as_deref() == Some(&ns) && p.name_any() == name);
    let api: Api<Pod> = Api::namespaced(local.clone(), &ns);
    let phase = match pod {
        Some(p) => p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into()),
        None => {
            match api.create(&PostParams::default(), &pod_of(shadow)).await {
                Ok(_) => info!(pod = %name, namespace = %ns, "pod created for shadow pod"),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    warn!(pod = %name, namespace = %ns, "a pod of that name exists and is not this shadow pod's");
                }
                Err(e) => return Err(e),
            }
            "Pending".into()
        }
    };
    if shadow.status.as_ref().map(|s| s.phase.as_str()) != Some(phase.as_str()) {
        let shadows: Api<ShadowPod> = Api::namespaced(local.clone(), &ns);
        let _ = shadows
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await;
    }
    Ok(())
}

fn pod_of(shadow: &ShadowPod) -> Pod {
    let mut labels = shadow.labels().clone();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_SHADOWPOD.into());
    let mut pod = Pod {
        spec: Some(shadow.spec.pod.clone()),
        ..Default::default()
    };
    pod.metadata.name = Some(shadow.name_any());
    pod.metadata.namespace = shadow.namespace();
    pod.metadata.labels = Some(labels);
    pod.metadata.annotations = Some(shadow.annotations().clone());
    pod.metadata.owner_references = shadow.controller_owner_ref(&()).map(|r| vec![r]);
    pod
}
