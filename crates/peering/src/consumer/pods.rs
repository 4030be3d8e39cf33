//! The virtual kubelet's pods: a pod the scheduler bound to a virtual
//! node becomes a ShadowPod in its namespace's twin in the provider; the
//! status of the pod the provider makes from it comes back to the local
//! pod; a local pod being deleted takes its ShadowPod (and so the remote
//! pod) with it, and is then deleted for good, as a kubelet does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tracing::{Instrument, debug, info, info_span};

use super::offloading::{self, Entry};
use super::{Peers, Provider};
use crate::api::{
    DESTINATION_LABEL, MANAGED_BY_LABEL, NODENAME_LABEL, NOT_ALLOWED_TAINT, ORIGIN_LABEL,
    SHADOW_POD_LABEL, ShadowPod, ShadowPodSpec, virtual_node_name,
};

const PERIOD: Duration = Duration::from_millis(500);
/// Pods of one twin namespace synced at once within a pass.
const POD_CONCURRENCY: usize = 16;

pub async fn run(peers: Arc<Peers>) {
    // Local pod changes wake the loop at once; the period catches the
    // provider's changes.
    let wake = Arc::new(Notify::new());
    crate::wake::on_changes(Api::<Pod>::all(peers.local.clone()), wake.clone());
    // A twin turning ready lets waiting pods go.
    peers.wake_on_changes(&wake);
    // The provider's pods changing (Running, Ready) too.
    let mut remote = crate::wake::RemoteWatches::new(wake.clone());
    loop {
        if let Err(error) = pass(&peers, &mut remote)
            .instrument(info_span!(
                "reconcile",
                controller = "liqo-virtual-kubelet-pods"
            ))
            .await
        {
            debug!(%error, "offloaded pods not synced");
        }
        remote.end_pass();
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn pass(peers: &Peers, remote: &mut crate::wake::RemoteWatches) -> Result<(), kube::Error> {
    let providers = peers.providers().await;
    if providers.is_empty() {
        return Ok(());
    }
    let entries = peers.offloadings().await;
    let origin = format!("{ORIGIN_LABEL}={}", peers.cluster_id);
    for provider in &providers {
        for e in &entries {
            if let Some(ns) = e.object.namespace()
                && let Some(twin) = offloading::twin_in(&entries, &ns, &provider.id)
            {
                remote.keep(
                    format!("{}/{twin}", provider.id),
                    Api::<Pod>::namespaced(provider.client.clone(), &twin),
                    kube::runtime::watcher::Config::default().labels(&origin),
                );
            }
        }
    }
    let pods: Api<Pod> = Api::all(peers.local.clone());
    for provider in &providers {
        let node = virtual_node_name(&provider.id);
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?
            .items;
        let mut by_ns: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
        for p in on_node {
            by_ns
                .entry(p.namespace().unwrap_or_default())
                .or_default()
                .push(p);
        }
        // Namespaces offloaded there hold ShadowPods to clean up too.
        let offloaded: BTreeSet<String> = entries
            .iter()
            .filter_map(|e| e.object.namespace())
            .collect();
        for ns in offloaded {
            by_ns.entry(ns).or_default();
        }
        for (ns, local) in by_ns {
            if let Err(error) = sync_namespace(peers, provider, &entries, &ns, &local).await {
                debug!(%error, namespace = %ns, provider = %provider.id, "offloaded pods not synced");
            }
        }
    }
    Ok(())
}

async fn sync_namespace(
    peers: &Peers,
    provider: &Provider,
    entries: &[Entry],
    ns: &str,
    local: &[Pod],
) -> Result<(), kube::Error> {
    let local_api: Api<Pod> = Api::namespaced(peers.local.clone(), ns);
    let Some(remote_ns) = offloading::twin_in(entries, ns, &provider.id) else {
        for pod in local {
            if pod.metadata.deletion_timestamp.is_some() {
                // Nothing of it can run remotely: it goes at once.
                force_delete(&local_api, pod).await;
            } else {
                back_off(
                    &local_api,
                    pod,
                    &format!(
                        "namespace {ns} is not offloaded to cluster {} (no NamespaceOffloading selects it, or its twin namespace is not ready)",
                        provider.id
                    ),
                )
                .await;
            }
        }
        return Ok(());
    };
    let shadows: Api<ShadowPod> = Api::namespaced(provider.client.clone(), &remote_ns);
    let remote_pods: Api<Pod> = Api::namespaced(provider.client.clone(), &remote_ns);
    let ours = ListParams::default().labels(&format!("{ORIGIN_LABEL}={}", peers.cluster_id));
    let existing = shadows.list(&ours).await?.items;
    let running = remote_pods.list(&ours).await?.items;
    let secrets: Api<Secret> = Api::namespaced(provider.client.clone(), &remote_ns);
    let token_secrets = secrets
        .list(&ListParams::default().labels(&format!(
            "{ORIGIN_LABEL}={},{}",
            peers.cluster_id,
            super::tokens::TOKEN_FOR
        )))
        .await?
        .items;
    // Overlapping peers: the provider's pods are reached at their global
    // IPs.
    let global = if crate::globalips::enabled(&peers.local).await {
        Some(crate::globalips::allocated(&provider.client, &remote_ns).await)
    } else {
        None
    };
    let twin = Twin {
        peers,
        provider,
        ns,
        remote_ns: &remote_ns,
        local_api: &local_api,
        shadows: &shadows,
        secrets: &secrets,
        existing: &existing,
        running: &running,
        token_secrets: &token_secrets,
        global: global.as_ref(),
    };
    // The futures are made before the stream (a closure kept in a
    // spawned task's stream trips the compiler's lifetime inference).
    let syncs: Vec<_> = local.iter().map(|pod| twin.sync_pod(pod)).collect();
    crate::concurrent::all(syncs, POD_CONCURRENCY).await?;
    // Tokens of pods that are gone.
    for s in &token_secrets {
        let pod = s.labels().get(super::tokens::TOKEN_FOR);
        if !local.iter().any(|p| Some(&p.name_any()) == pod) {
            let _ = secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
    }
    // ShadowPods whose local pod is gone.
    for s in &existing {
        if !local.iter().any(|p| p.name_any() == s.name_any()) {
            let _ = shadows
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
    }
    Ok(())
}

/// What a pass knows of one namespace's twin in a provider.
struct Twin<'a> {
    peers: &'a Peers,
    provider: &'a Provider,
    ns: &'a str,
    remote_ns: &'a str,
    local_api: &'a Api<Pod>,
    shadows: &'a Api<ShadowPod>,
    secrets: &'a Api<Secret>,
    existing: &'a [ShadowPod],
    running: &'a [Pod],
    token_secrets: &'a [Secret],
    global: Option<&'a BTreeMap<String, String>>,
}

impl Twin<'_> {
    /// One local pod: its ShadowPod (and token) in the twin, or gone with
    /// it; the remote pod's status on it.
    async fn sync_pod(&self, pod: &Pod) -> Result<(), kube::Error> {
        let (peers, provider, ns, remote_ns) = (self.peers, self.provider, self.ns, self.remote_ns);
        let (local_api, shadows, secrets) = (self.local_api, self.shadows, self.secrets);
        let name = pod.name_any();
        let shadow = self.existing.iter().find(|s| s.name_any() == name);
        let remote = self.running.iter().find(|p| p.name_any() == name);
        let token_name = super::tokens::secret_name(&name);
        let token = self
            .token_secrets
            .iter()
            .find(|s| s.name_any() == token_name);
        if pod.metadata.deletion_timestamp.is_some() {
            if shadow.is_some() {
                let _ = shadows.delete(&name, &DeleteParams::default()).await;
            }
            if token.is_some() {
                let _ = secrets.delete(&token_name, &DeleteParams::default()).await;
            }
            if remote.is_none() || shadow.is_none() {
                force_delete(local_api, pod).await;
            }
            return Ok(());
        }
        if super::tokens::wanted(pod) {
            super::tokens::ensure(peers, provider, pod, remote_ns, token).await?;
        }
        if shadow.is_none() {
            let s = shadow_pod(peers, provider, pod);
            match shadows.create(&PostParams::default(), &s).await {
                Ok(_) => {
                    info!(pod = %name, namespace = %ns, provider = %provider.id, remote_namespace = %remote_ns, "pod offloaded");
                    // Tests of recovery stop here: the ShadowPod made, the
                    // local pod not marked nor its status reflected.
                    flotilla_failpoint::hit("peering-after-shadowpod-create");
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    back_off(
                        local_api,
                        pod,
                        &format!(
                            "a pod named {name} already exists in namespace {remote_ns} of cluster {} and was not offloaded from here",
                            provider.id
                        ),
                    )
                    .await;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        if !pod.labels().contains_key(SHADOW_POD_LABEL) {
            let _ = local_api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {SHADOW_POD_LABEL: "true"}}})),
                )
                .await;
        }
        let address = self.global.map(|g| g.get(&name).cloned());
        reflect_status(local_api, pod, remote, address).await;
        Ok(())
    }
}

/// The ShadowPod of local pod `pod`, as Liqo forges it: the pod's spec
/// without what chose among this cluster's nodes, and the reflection
/// labels.
pub fn shadow_pod(peers: &Peers, provider: &Provider, pod: &Pod) -> ShadowPod {
    let mut spec: PodSpec = pod.spec.clone().unwrap_or_default();
    spec.node_name = None;
    spec.node_selector = None;
    if let Some(a) = spec.affinity.as_mut() {
        a.node_affinity = None;
    }
    if let Some(t) = spec.tolerations.as_mut() {
        t.retain(|t| t.key.as_deref() != Some(NOT_ALLOWED_TAINT));
    }
    // The provider's own ServiceAccount token would mean nothing: the
    // pod gets its token from this cluster (`tokens`), where its own
    // projected token would be.
    spec.automount_service_account_token = Some(false);
    if super::tokens::wanted(pod) {
        let volume = "liqo-serviceaccount-token";
        spec.volumes.get_or_insert_with(Vec::new).push(
            serde_json::from_value(json!({"name": volume,
                "secret": {"secretName": super::tokens::secret_name(&pod.name_any())}}))
            .unwrap_or_default(),
        );
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts
                .iter()
                .any(|m| m.mount_path == super::tokens::MOUNT_PATH)
            {
                mounts.push(
                    serde_json::from_value(json!({"name": volume,
                        "mountPath": super::tokens::MOUNT_PATH, "readOnly": true}))
                    .unwrap_or_default(),
                );
            }
        }
    }
    let is_token = |n: &str| n.starts_with("kube-api-access-");
    if let Some(vols) = spec.volumes.as_mut() {
        vols.retain(|v| !is_token(&v.name));
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(m) = c.volume_mounts.as_mut() {
            m.retain(|m| !is_token(&m.name));
        }
    }
    let mut labels = pod.labels().clone();
    labels.remove(SHADOW_POD_LABEL);
    labels.insert(ORIGIN_LABEL.into(), peers.cluster_id.clone());
    labels.insert(DESTINATION_LABEL.into(), provider.id.clone());
    labels.insert(NODENAME_LABEL.into(), virtual_node_name(&provider.id));
    labels.remove(MANAGED_BY_LABEL);
    let mut s = ShadowPod::new(&pod.name_any(), ShadowPodSpec { pod: spec });
    s.metadata.labels = Some(labels);
    s.metadata.annotations = Some(pod.annotations().clone());
    s
}

/// The remote pod's status on the local pod.
async fn reflect_status(
    api: &Api<Pod>,
    pod: &Pod,
    remote: Option<&Pod>,
    global: Option<Option<String>>,
) {
    let status = match remote.and_then(|r| r.status.as_ref()) {
        Some(s) => {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                // The pod runs on the virtual node, not on a provider's.
                o.remove("hostIP");
                o.remove("hostIPs");
                o.remove("nominatedNodeName");
                // Under Globalnet its address here is its global IP (none
                // until allocated: its pod IP means something else here).
                if let Some(global) = global {
                    o.remove("podIPs");
                    match global {
                        Some(ip) => {
                            o.insert("podIP".into(), json!(ip));
                            o.insert("podIPs".into(), json!([{"ip": ip}]));
                        }
                        None => {
                            o.remove("podIP");
                        }
                    }
                }
            }
            v
        }
        None => json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"}]}),
    };
    let current = pod
        .status
        .as_ref()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("hostIP");
                o.remove("hostIPs");
            }
            v
        })
        .unwrap_or(Value::Null);
    if same_status(&current, &status) {
        return;
    }
    // A merge patch that also clears what the remote status lacks.
    let mut patch = status.clone();
    if let (Some(p), Some(c)) = (patch.as_object_mut(), current.as_object()) {
        for k in c.keys() {
            if !p.contains_key(k) && k != "hostIP" && k != "hostIPs" {
                p.insert(k.clone(), Value::Null);
            }
        }
    }
    let _ = api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": patch})),
        )
        .await;
}

/// Whether two statuses are the same but for times the conditions carry.
fn same_status(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(cs) = v.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastProbeTime");
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}

async fn back_off(api: &Api<Pod>, pod: &Pod, message: &str) {
    let status = pod.status.as_ref();
    if status.and_then(|s| s.message.as_deref()) == Some(message) {
        return;
    }
    let _ = api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Pending",
                "reason": "OffloadingBackOff", "message": message}})),
        )
        .await;
}

async fn force_delete(api: &Api<Pod>, pod: &Pod) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => debug!(pod = %pod.name_any(), "offloaded pod deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(error) => debug!(%error, pod = %pod.name_any(), "offloaded pod not deleted"),
    }
}
