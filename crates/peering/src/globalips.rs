//! Pods' global IPs, for peers whose pod CIDRs overlap: both clusters
//! use Globalnet (a global CIDR each, from the provider's broker), and
//! the pods the other side must reach get a GlobalIngressIP each (named
//! `pod-<name>`, target `HeadlessServicePod`, as Globalnet names a
//! headless Service's pods). The fabric allocates the address and the
//! member's proxy DNATs it to the pod; the other side sees the pod at
//! that address (Liqo's remapping, done with Globalnet's objects).
//!
//! - the provider gives one to each pod it runs for a consumer;
//! - the consumer gives one to each of its own pods in an offloaded
//!   namespace, so the provider's copies of its Services reach them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_fabric::api::{GlobalIngressIp, GlobalIngressIpSpec, LocalRef};
use flotilla_fabric::globalnet::HEADLESS_POD_IP_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::debug;

use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_SHADOWPOD};

/// Marks the GlobalIngressIPs peering asks for.
pub const FOR_PEERING: &str = "offloading.liqo.io/pod-global-ip";
const PERIOD: Duration = Duration::from_millis(500);

/// The GlobalIngressIP name of pod `pod`.
pub fn object_name(pod: &str) -> String {
    format!("pod-{}", pod.chars().take(59).collect::<String>())
}

/// Whether this cluster's fabric uses Globalnet.
pub async fn enabled(local: &Client) -> bool {
    flotilla_fabric::broker::read(local)
        .await
        .ok()
        .flatten()
        .is_some_and(|a| a.global_cidr.is_some())
}

/// The allocated global IPs peering asked for in namespace `ns`, keyed
/// by what `key` reads off each GlobalIngressIP.
async fn allocated_by(
    client: &Client,
    ns: &str,
    key: fn(&GlobalIngressIp) -> Option<String>,
) -> BTreeMap<String, String> {
    let api: Api<GlobalIngressIp> = Api::namespaced(client.clone(), ns);
    let Ok(list) = api.list(&ListParams::default().labels(FOR_PEERING)).await else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|g| {
            let ip = g.status.as_ref()?.allocated_ip.clone();
            (!ip.is_empty()).then_some((key(&g)?, ip))
        })
        .collect()
}

/// Allocated global IPs of namespace `ns`'s pods: pod name → address.
pub async fn allocated(client: &Client, ns: &str) -> BTreeMap<String, String> {
    allocated_by(client, ns, |g| Some(g.spec.pod_ref.as_ref()?.name.clone())).await
}

/// Pod IP → global IP of namespace `ns`'s pods with one.
pub async fn by_pod_ip(client: &Client, ns: &str) -> BTreeMap<String, String> {
    allocated_by(client, ns, |g| {
        g.annotations().get(HEADLESS_POD_IP_ANNOTATION).cloned()
    })
    .await
}

/// Keeps a GlobalIngressIP for each pod `wanted` selects, and none for
/// others; runs while this cluster uses Globalnet.
pub async fn run(local: Client, wanted: fn(&Pod) -> bool) {
    loop {
        if enabled(&local).await
            && let Err(error) = pass(&local, wanted).await
        {
            debug!(%error, "pod global IPs not synced");
        }
        tokio::time::sleep(PERIOD).await;
    }
}

async fn pass(local: &Client, wanted: fn(&Pod) -> bool) -> Result<(), kube::Error> {
    let pods = Api::<Pod>::all(local.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let existing = Api::<GlobalIngressIp>::all(local.clone())
        .list(&ListParams::default().labels(FOR_PEERING))
        .await?
        .items;
    let mut keep = BTreeSet::new();
    for pod in pods.iter().filter(|p| wanted(p)) {
        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let ns = pod.namespace().unwrap_or_default();
        let name = object_name(&pod.name_any());
        keep.insert((ns.clone(), name.clone()));
        let api: Api<GlobalIngressIp> = Api::namespaced(local.clone(), &ns);
        match existing
            .iter()
            .find(|g| g.namespace().as_deref() == Some(ns.as_str()) && g.name_any() == name)
        {
            Some(g) if g.annotations().get(HEADLESS_POD_IP_ANNOTATION) == Some(&ip) => {}
            Some(_) => {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {HEADLESS_POD_IP_ANNOTATION: ip}}}),
                    ),
                )
                .await?;
            }
            None => {
                let g = GlobalIngressIp {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some([(FOR_PEERING.to_string(), "true".to_string())].into()),
                        annotations: Some(
                            [(HEADLESS_POD_IP_ANNOTATION.to_string(), ip.clone())].into(),
                        ),
                        ..Default::default()
                    },
                    spec: GlobalIngressIpSpec {
                        target: "HeadlessServicePod".into(),
                        service_ref: None,
                        pod_ref: Some(LocalRef {
                            name: pod.name_any(),
                        }),
                    },
                    status: None,
                };
                match api.create(&PostParams::default(), &g).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    for g in existing {
        let key = (g.namespace().unwrap_or_default(), g.name_any());
        if !keep.contains(&key) {
            let api: Api<GlobalIngressIp> = Api::namespaced(local.clone(), &key.0);
            let _ = api.delete(&key.1, &DeleteParams::default()).await;
        }
    }
    Ok(())
}

/// The pods a peer reaches: those this cluster runs for a consumer, and
/// its own in namespaces it offloads.
pub fn reached_by_a_peer(pod: &Pod) -> bool {
    offloaded_here(pod) || local_in_offloaded_namespace(pod)
}

/// The provider's pods made from ShadowPods.
pub fn offloaded_here(pod: &Pod) -> bool {
    pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_SHADOWPOD)
        && pod.metadata.deletion_timestamp.is_none()
}

/// The consumer's own pods in namespaces it offloads (its Services'
/// endpoints that the provider's copies must reach).
pub fn local_in_offloaded_namespace(pod: &Pod) -> bool {
    // The namespace label is not on the pod: the admission's toleration
    // is, on every pod created in an offloaded namespace.
    let tolerates = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key.as_deref() == Some(crate::api::NOT_ALLOWED_TAINT))
        });
    let on_virtual_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| n.starts_with("liqo-"));
    tolerates && !on_virtual_node && pod.metadata.deletion_timestamp.is_none()
}
