//! Admiralty's model on the same members (`multicluster.admiralty.io`):
//! a pod annotated `multicluster.admiralty.io/elect` in a namespace
//! labelled `multicluster-scheduler=enabled` becomes a proxy pod (the
//! admission below); the proxy scheduler binds it to the virtual node of
//! a `Target`/`ClusterTarget`; a `PodChaperon` in the target cluster's
//! namespace of the same name becomes the delegate pod there, and the
//! delegate's status comes back to the proxy pod.
//!
//! The source side runs in the cluster with the Targets, the target side
//! (chaperons to pods) in every cluster; both reach only their own API,
//! and the source the target's with the kubeconfig its Target names.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_apiserver::admission::{Mutating, Request, View};

use crate::admission::{created_pod_namespace, namespace_label};
use flotilla_apiserver::error::ApiResult;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::config::Kubeconfig;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::Digest;
use tracing::{debug, info};

use crate::identity;
use crate::remote;

pub const GROUP: &str = "multicluster.admiralty.io";
pub const VERSION: &str = "v1alpha1";
pub const ENABLED_LABEL: &str = "multicluster-scheduler";
pub const ELECT: &str = "multicluster.admiralty.io/elect";
pub const SOURCE_MANIFEST: &str = "multicluster.admiralty.io/sourcepod-manifest";
pub const PROXY_SCHEDULER: &str = "admiralty-proxy";
pub const PROVIDER_LABEL: &str = "virtual-kubelet.io/provider";
pub const PARENT_UID: &str = "multicluster.admiralty.io/parent-uid";
pub const PARENT_CLUSTER: &str = "multicluster.admiralty.io/parent-cluster-name";
pub const PARENT_NAME: &str = "multicluster.admiralty.io/parent-name";
pub const PARENT_NAMESPACE: &str = "multicluster.admiralty.io/parent-namespace";
const CLUSTER_TARGET_LABEL: &str = "multicluster.admiralty.io/cluster-target-name";
const TARGET_NAMESPACE_LABEL: &str = "multicluster.admiralty.io/target-namespace";
const TARGET_NAME_LABEL: &str = "multicluster.admiralty.io/target-name";
const PERIOD: Duration = Duration::from_millis(500);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// Admiralty's CRDs.
pub fn crds() -> Vec<Value> {
    use flotilla_core::crd::{Kind, age};
    let kind = |k: &str, plural: &str, namespaced: bool| {
        let mut crd = Kind {
            group: GROUP,
            version: VERSION,
            kind: k.into(),
            plural: plural.into(),
            short_names: Vec::new(),
            namespaced,
            categories: &[],
            columns: vec![age()],
            spec: flotilla_core::crd::open_schema(),
        }
        .crd();
        flotilla_core::crd::spec_optional(&mut crd);
        crd
    };
    vec![
        kind("Target", "targets", true),
        kind("ClusterTarget", "clustertargets", false),
        kind("Source", "sources", true),
        kind("ClusterSource", "clustersources", false),
        kind("PodChaperon", "podchaperons", true),
    ]
}

/// Admiralty's name of a target's virtual node: `admiralty-<name>`, or
/// `admiralty-<namespace>-<name>` for a namespaced Target, with a hash
/// when the parts themselves have dashes (so names cannot collide).
pub fn node_name(namespace: Option<&str>, name: &str) -> String {
    let parts: Vec<&str> = namespace.into_iter().chain([name]).collect();
    let mut out = format!("admiralty-{}", parts.join("-"));
    if parts.iter().any(|p| p.contains('-')) || out.len() > 63 {
        let digest = sha2::Sha256::digest(format!("admiralty/{}/{name}", namespace.unwrap_or("")));
        let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
        out.truncate(52);
        out = format!("{out}-{hex}");
    }
    out
}

/// The proxy pod admission: Admiralty's webhook, in the source's API
/// server.
pub struct ProxyPods;

impl Mutating for ProxyPods {
    fn admit(&self, view: &View, request: &Request, object: &mut Value) -> ApiResult<()> {
        let Some(ns) = created_pod_namespace(request) else {
            return Ok(());
        };
        let elected = object
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(ELECT));
        if elected && namespace_label(view, ns, ENABLED_LABEL).as_deref() == Some("enabled") {
            proxy(object);
        }
        Ok(())
    }
}

/// Turns a pod into Admiralty's proxy pod.
pub fn proxy(pod: &mut Value) {
    let manifest = serde_yaml::to_string(pod).unwrap_or_default();
    let annotations = &mut pod["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if annotations.get(SOURCE_MANIFEST).is_none() {
        annotations[SOURCE_MANIFEST] = json!(manifest);
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.insert("nodeSelector".into(), json!({PROVIDER_LABEL: "admiralty"}));
    spec.remove("affinity");
    spec.remove("topologySpreadConstraints");
    spec.insert("schedulerName".into(), json!(PROXY_SCHEDULER));
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        list.push(json!({"key": PROVIDER_LABEL, "value": "admiralty"}));
        list.push(json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists"}));
    }
}

/// A target: its virtual node and its client.
struct Target {
    node: String,
    /// A namespaced Target serves only its namespace.
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    client: Client,
}

async fn targets(local: &Client, caches: &Caches) -> Vec<Target> {
    let mut out = Vec::new();
    for (cluster, list) in [
        (true, caches.cluster_targets.state()),
        (false, caches.targets.state()),
    ] {
        for t in list {
            let spec = t.data.get("spec").cloned().unwrap_or_default();
            let Some(secret) = spec.get("kubeconfigSecret") else {
                continue;
            };
            let secret_ns = if cluster {
                secret
                    .get("namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            } else {
                t.namespace()
            };
            let (Some(secret_ns), Some(secret_name)) =
                (secret_ns, secret.get("name").and_then(Value::as_str))
            else {
                continue;
            };
            let key = secret
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("config");
            let Ok(Some(s)) = Api::<Secret>::namespaced(local.clone(), &secret_ns)
                .get_opt(secret_name)
                .await
            else {
                continue;
            };
            let Some(ByteString(raw)) = s.data.as_ref().and_then(|d| d.get(key)).cloned() else {
                continue;
            };
            let Ok(config) = Kubeconfig::from_yaml(&String::from_utf8_lossy(&raw)) else {
                continue;
            };
            let Ok(client) = remote::client(config).await else {
                continue;
            };
            let name = t.name_any();
            let (node, namespace, labels) = if cluster {
                (
                    node_name(None, &name),
                    None,
                    BTreeMap::from([(CLUSTER_TARGET_LABEL.to_string(), name.clone())]),
                )
            } else {
                let ns = t.namespace().unwrap_or_default();
                (
                    node_name(Some(&ns), &name),
                    Some(ns.clone()),
                    BTreeMap::from([
                        (TARGET_NAMESPACE_LABEL.to_string(), ns),
                        (TARGET_NAME_LABEL.to_string(), name.clone()),
                    ]),
                )
            };
            out.push(Target {
                node,
                namespace,
                labels,
                client,
            });
        }
    }
    out
}

/// What the passes read, kept by watches: a pass lists nothing of its own
/// cluster, so a cluster that uses no Admiralty object pays nothing for
/// it however many pods it runs.
struct Caches {
    /// Pods the proxy scheduler owns (a field-selected watch).
    proxies: Store<Pod>,
    cluster_targets: Store<DynamicObject>,
    targets: Store<DynamicObject>,
    chaperons: Store<DynamicObject>,
}

/// Keeps `writer`'s store in step with `api`, for as long as it runs.
fn follow<K>(api: Api<K>, config: watcher::Config, writer: Writer<K>) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    let store = writer.as_reader();
    tokio::spawn(
        reflector::reflector(writer, watcher(api, config))
            .default_backoff()
            .for_each(|_| futures::future::ready(())),
    );
    store
}

fn follow_kind(local: &Client, kind: &str, plural: &str) -> Store<DynamicObject> {
    let r = resource(kind, plural);
    let api: Api<DynamicObject> = Api::all_with(local.clone(), &r);
    follow(api, watcher::Config::default(), Writer::new(r))
}

/// Runs both of Admiralty's sides for the cluster `local` reaches.
pub async fn run(local: Client) {
    if let Err(error) = flotilla_client::crd::install(&local, crds()).await {
        debug!(%error, "cannot install Admiralty's CRDs");
    }
    let caches = Caches {
        proxies: follow(
            Api::all(local.clone()),
            watcher::Config::default().fields(&format!("spec.schedulerName={PROXY_SCHEDULER}")),
            Writer::default(),
        ),
        cluster_targets: follow_kind(&local, "ClusterTarget", "clustertargets"),
        targets: follow_kind(&local, "Target", "targets"),
        chaperons: follow_kind(&local, "PodChaperon", "podchaperons"),
    };
    // Nothing is decided on a cache that has not listed: an empty proxy
    // cache would have the sweep delete every delegate.
    let _ = tokio::join!(
        caches.proxies.wait_until_ready(),
        caches.cluster_targets.wait_until_ready(),
        caches.targets.wait_until_ready(),
        caches.chaperons.wait_until_ready(),
    );
    let mut every = tokio::time::interval(PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        // Targets' virtual nodes, their capacity and the delegates' status
        // live in other clusters: those are read each pass, while there
        // is a target.
        if !caches.cluster_targets.is_empty() || !caches.targets.is_empty() {
            let id = identity::cluster_id(&local)
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
            let ts = targets(&local, &caches).await;
            if let Err(error) = source_pass(&local, &id, &ts, &caches.proxies).await {
                debug!(%error, "admiralty source pass failed");
            }
            if !ts.is_empty() {
                sweep(&id, &ts, &caches.proxies).await;
            }
        }
        if !caches.chaperons.is_empty()
            && let Err(error) = chaperon_pass(&local, &caches.chaperons).await
        {
            debug!(%error, "admiralty chaperon pass failed");
        }
    }
}

async fn source_pass(
    local: &Client,
    id: &str,
    targets: &[Target],
    proxies: &Store<Pod>,
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(local.clone());
    let mut ready = Vec::new();
    for t in targets {
        let capacity = capacity_of(&t.client).await;
        let up = capacity.is_some();
        let mut labels = t.labels.clone();
        labels.extend([
            ("type".to_string(), "virtual-kubelet".to_string()),
            (PROVIDER_LABEL.to_string(), "admiralty".to_string()),
            ("kubernetes.io/role".to_string(), "cluster".to_string()),
            (
                "node.kubernetes.io/exclude-from-external-load-balancers".to_string(),
                "true".to_string(),
            ),
        ]);
        let body = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": t.node, "labels": labels},
            "spec": {"taints": [{"key": PROVIDER_LABEL, "value": "admiralty", "effect": "NoSchedule"}]}});
        nodes
            .patch(
                &t.node,
                &PatchParams::apply("admiralty").force(),
                &Patch::Apply(&body),
            )
            .await?;
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {
            "capacity": capacity.clone().unwrap_or_default(),
            "allocatable": capacity.unwrap_or_default(),
            "conditions": [{"type": "Ready", "status": if up {"True"} else {"False"},
                "reason": if up {"TargetReady"} else {"TargetUnreachable"},
                "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
        nodes
            .patch_status(&t.node, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        if up {
            ready.push(t);
        }
    }
    for pod in proxies.state() {
        let spec = pod.spec.clone().unwrap_or_default();
        if spec.scheduler_name.as_deref() != Some(PROXY_SCHEDULER) {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        let node = spec.node_name.clone().filter(|n| !n.is_empty());
        match node {
            None => {
                // The proxy scheduler: the first ready target serving the
                // namespace.
                if let Some(t) = ready
                    .iter()
                    .find(|t| t.namespace.as_deref().is_none_or(|n| n == ns))
                {
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": pod.name_any()},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": t.node}});
                    let api: Api<Pod> = Api::namespaced(local.clone(), &ns);
                    let _: Result<Value, _> = api
                        .create_subresource(
                            "binding",
                            &pod.name_any(),
                            &PostParams::default(),
                            &binding,
                        )
                        .await;
                }
            }
            Some(node) => {
                if let Some(t) = targets.iter().find(|t| t.node == node) {
                    delegate(local, id, t, &pod).await?;
                }
            }
        }
    }
    Ok(())
}

/// The target's nodes' allocatable summed; None when it does not answer.
async fn capacity_of(target: &Client) -> Option<BTreeMap<String, String>> {
    let list = tokio::time::timeout(
        Duration::from_secs(4),
        Api::<Node>::all(target.clone()).list(&ListParams::default()),
    )
    .await
    .ok()?
    .ok()?;
    let mut total: BTreeMap<&str, f64> = BTreeMap::new();
    for n in list.items {
        if n.labels().get(PROVIDER_LABEL).is_some()
            || n.labels().contains_key(crate::api::TYPE_LABEL)
        {
            continue;
        }
        for (k, q) in n.status.and_then(|s| s.allocatable).unwrap_or_default() {
            if let Some(key) = ["cpu", "memory", "pods"].into_iter().find(|x| *x == k) {
                *total.entry(key).or_default() += crate::quantity::parse(&q.0).unwrap_or(0.0);
            }
        }
    }
    Some(
        total
            .into_iter()
            .map(|(k, v)| (k.to_string(), crate::quantity::format(k, v).0))
            .collect(),
    )
}

/// The proxy pod's delegate: its PodChaperon in the target, and the
/// delegate's status back on the proxy.
async fn delegate(
    local: &Client,
    id: &str,
    target: &Target,
    proxy: &Pod,
) -> Result<(), kube::Error> {
    let ns = proxy.namespace().unwrap_or_default();
    let chaperons: Api<DynamicObject> = Api::namespaced_with(
        target.client.clone(),
        &ns,
        &resource("PodChaperon", "podchaperons"),
    );
    let uid = proxy.uid().unwrap_or_default();
    let mine = ListParams::default().labels(&format!("{PARENT_UID}={uid}"));
    let existing = chaperons.list(&mine).await?.items;
    let local_api: Api<Pod> = Api::namespaced(local.clone(), &ns);
    if proxy.metadata.deletion_timestamp.is_some() {
        for c in &existing {
            let _ = chaperons
                .delete(&c.name_any(), &DeleteParams::default())
                .await;
        }
        return Ok(());
    }
    let Some(chaperon) = existing.first() else {
        let source: Pod = proxy
            .annotations()
            .get(SOURCE_MANIFEST)
            .and_then(|m| serde_yaml::from_str(m).ok())
            .unwrap_or_else(|| proxy.clone());
        let mut spec: PodSpec = source.spec.unwrap_or_default();
        spec.node_name = None;
        spec.priority = None;
        let is_token = |n: &str| n.starts_with("kube-api-access-");
        if let Some(v) = spec.volumes.as_mut() {
            v.retain(|v| !is_token(&v.name));
        }
        for c in spec.containers.iter_mut() {
            if let Some(m) = c.volume_mounts.as_mut() {
                m.retain(|m| !is_token(&m.name));
            }
        }
        let mut labels: BTreeMap<String, String> = proxy
            .labels()
            .iter()
            .map(|(k, v)| {
                let last = k.rsplit('/').next().unwrap_or(k);
                (format!("{GROUP}/{last}"), v.clone())
            })
            .collect();
        labels.insert(PARENT_UID.into(), uid.clone());
        labels.insert(PARENT_CLUSTER.into(), id.to_string());
        let mut annotations: BTreeMap<String, String> = proxy
            .annotations()
            .iter()
            .filter(|(k, _)| !k.starts_with("multicluster.admiralty.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.insert(PARENT_NAME.into(), proxy.name_any());
        annotations.insert(PARENT_NAMESPACE.into(), ns.clone());
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "PodChaperon",
            "metadata": {"generateName": format!("{}-", proxy.name_any()), "namespace": ns,
                         "labels": labels, "annotations": annotations},
            "spec": spec}))
        .map_err(kube::Error::SerdeError)?;
        match chaperons.create(&PostParams::default(), &body).await {
            Ok(c) => {
                info!(pod = %proxy.name_any(), namespace = %ns, delegate = %c.name_any(), target = %target.node, "delegate pod requested")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let message = format!(
                    "namespace {ns} does not exist in the target of {}",
                    target.node
                );
                let _ = local_api
                    .patch_status(&proxy.name_any(), &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"phase": "Pending", "reason": "TargetNamespaceMissing", "message": message}})))
                    .await;
            }
            Err(e) => return Err(e),
        }
        return Ok(());
    };
    // The delegate's status, on the proxy.
    if let Some(status) = chaperon.data.get("status").filter(|s| s.is_object()) {
        let mut status = status.clone();
        if let Some(o) = status.as_object_mut() {
            o.remove("hostIP");
            o.remove("hostIPs");
        }
        let current = proxy
            .status
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap_or_default());
        let mut current_cmp = current.unwrap_or(Value::Null);
        if let Some(o) = current_cmp.as_object_mut() {
            o.remove("hostIP");
            o.remove("hostIPs");
        }
        if current_cmp != status {
            let _ = local_api
                .patch_status(
                    &proxy.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await;
        }
    }
    Ok(())
}

/// The target side: each PodChaperon becomes a pod of its name, owned
/// by it; the pod's status goes back on the chaperon. Chaperons whose
/// proxy pod is gone are removed by the source (below, by the source's
/// own pass over its targets).
async fn chaperon_pass(
    local: &Client,
    chaperons: &Store<DynamicObject>,
) -> Result<(), kube::Error> {
    for c in chaperons.state() {
        let ns = c.namespace().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(local.clone(), &ns);
        let pod = pods.get_opt(&c.name_any()).await?;
        let status = match pod {
            None => {
                let spec: PodSpec =
                    serde_json::from_value(c.data.get("spec").cloned().unwrap_or_default())
                        .unwrap_or_default();
                let mut p = Pod {
                    spec: Some(spec),
                    ..Default::default()
                };
                p.metadata.name = Some(c.name_any());
                p.metadata.namespace = Some(ns.clone());
                p.metadata.labels = Some(c.labels().clone());
                p.metadata.annotations = Some(c.annotations().clone());
                let owner = c.controller_owner_ref(&resource("PodChaperon", "podchaperons"));
                p.metadata.owner_references = owner.map(|o| vec![o]);
                match pods.create(&PostParams::default(), &p).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            Some(p) => p
                .status
                .map(|s| serde_json::to_value(s).unwrap_or_default()),
        };
        if let Some(status) = status
            && c.data.get("status") != Some(&status)
        {
            let chaperons: Api<DynamicObject> =
                Api::namespaced_with(local.clone(), &ns, &resource("PodChaperon", "podchaperons"));
            let _ = chaperons
                .patch_status(
                    &c.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await;
        }
    }
    Ok(())
}

/// Removes the delegates of proxy pods that are gone.
async fn sweep(id: &str, ts: &[Target], proxies: &Store<Pod>) {
    // Delegates' parents are proxy pods: the watch of those holds them all.
    let uids: std::collections::HashSet<String> =
        proxies.state().iter().filter_map(|p| p.uid()).collect();
    for t in ts {
        let api: Api<DynamicObject> =
            Api::all_with(t.client.clone(), &resource("PodChaperon", "podchaperons"));
        let mine = ListParams::default().labels(&format!("{PARENT_CLUSTER}={id}"));
        let Ok(cs) = api.list(&mine).await else {
            continue;
        };
        for c in cs.items {
            let parent = c.labels().get(PARENT_UID).cloned().unwrap_or_default();
            if !uids.contains(&parent) {
                let ns_api: Api<DynamicObject> = Api::namespaced_with(
                    t.client.clone(),
                    &c.namespace().unwrap_or_default(),
                    &resource("PodChaperon", "podchaperons"),
                );
                let _ = ns_api.delete(&c.name_any(), &DeleteParams::default()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_admiralty() {
        assert_eq!(node_name(None, "c1"), "admiralty-c1");
        assert_eq!(node_name(Some("ns"), "c1"), "admiralty-ns-c1");
        let hashed = node_name(Some("my-ns"), "c1");
        assert!(
            hashed.starts_with("admiralty-my-ns-c1-")
                && hashed.len() == "admiralty-my-ns-c1-".len() + 10,
            "{hashed}"
        );
    }

    #[test]
    fn a_proxy_pod_keeps_its_source_and_goes_to_admiralty_nodes() {
        let mut pod = json!({"metadata": {"name": "p", "annotations": {ELECT: ""}},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "affinity": {"nodeAffinity": {}}}});
        proxy(&mut pod);
        assert_eq!(pod["spec"]["schedulerName"], PROXY_SCHEDULER);
        assert_eq!(pod["spec"]["nodeSelector"][PROVIDER_LABEL], "admiralty");
        assert!(pod["spec"].get("affinity").is_none());
        let source: Value = serde_yaml::from_str(
            pod["metadata"]["annotations"][SOURCE_MANIFEST]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(
            source["spec"].get("affinity").is_some(),
            "the source as written"
        );
    }
}
