//! Reflection: what offloaded pods need from their namespace follows them
//! to the twin namespace in each provider (ConfigMaps, Secrets, Services,
//! Ingresses, and the EndpointSlices of endpoints outside that provider),
//! and Events about offloaded pods come back. Which kinds are reflected
//! is set in the ConfigMap `liqo/liqo-reflection` (a key per resource:
//! `DenyList`, the default, skips objects annotated
//! `liqo.io/skip-reflection`; `AllowList` reflects only objects annotated
//! `liqo.io/allow-reflection`; `Disabled`); `<resource>.direction` may
//! be `RemoteToLocal`. An object already in the twin namespace that
//! reflection did not make is never overwritten: a Warning Event
//! `FailedReflection` on the source object says so.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tracing::{Instrument, debug, info, info_span};

use super::offloading;
use super::{Peers, Provider};
use crate::api::{DESTINATION_LABEL, LIQO_NAMESPACE, ORIGIN_LABEL, virtual_node_name};

const MANAGER: &str = "liqo-reflection";
const PERIOD: Duration = Duration::from_secs(1);
/// The ConfigMap saying which kinds are reflected, and how.
pub const CONFIG: &str = "liqo-reflection";
pub const SKIP: &str = "liqo.io/skip-reflection";
pub const ALLOW: &str = "liqo.io/allow-reflection";
/// Marks EndpointSlices reflection made.
const SLICE_MANAGER: &str = "endpointslice.reflection.liqo.io";

/// One reflected kind.
#[derive(Clone, Copy)]
struct Kind {
    key: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    /// Events come back from the provider by default.
    remote_to_local: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        key: "configmaps",
        group: "",
        version: "v1",
        kind: "ConfigMap",
        remote_to_local: false,
    },
    Kind {
        key: "secrets",
        group: "",
        version: "v1",
        kind: "Secret",
        remote_to_local: false,
    },
    Kind {
        key: "services",
        group: "",
        version: "v1",
        kind: "Service",
        remote_to_local: false,
    },
    Kind {
        key: "ingresses",
        group: "networking.k8s.io",
        version: "v1",
        kind: "Ingress",
        remote_to_local: false,
    },
    Kind {
        key: "endpointslices",
        group: "discovery.k8s.io",
        version: "v1",
        kind: "EndpointSlice",
        remote_to_local: false,
    },
    Kind {
        key: "events",
        group: "",
        version: "v1",
        kind: "Event",
        remote_to_local: true,
    },
];

impl Kind {
    fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.key,
        )
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Policy {
    DenyList,
    AllowList,
    Disabled,
}

/// The reflection settings: per kind, a policy and a direction.
async fn settings(local: &Client) -> BTreeMap<&'static str, (Policy, bool)> {
    let data = Api::<ConfigMap>::namespaced(local.clone(), LIQO_NAMESPACE)
        .get_opt(CONFIG)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .unwrap_or_default();
    KINDS
        .iter()
        .map(|k| {
            let policy = match data.get(k.key).map(String::as_str) {
                Some("AllowList") => Policy::AllowList,
                Some("Disabled") | Some("None") => Policy::Disabled,
                _ => Policy::DenyList,
            };
            let reverse = match data
                .get(&format!("{}.direction", k.key))
                .map(String::as_str)
            {
                Some("RemoteToLocal") => true,
                Some("LocalToRemote") => false,
                _ => k.remote_to_local,
            };
            (k.key, (policy, reverse))
        })
        .collect()
}

pub async fn run(peers: Arc<Peers>) {
    let reported: Mutex<HashSet<String>> = Mutex::default();
    // A twin turning ready is reflected into at once.
    let wake = Arc::new(Notify::new());
    peers.wake_on_changes(&wake);
    loop {
        if let Err(error) = pass(&peers, &reported)
            .instrument(info_span!("reconcile", controller = MANAGER))
            .await
        {
            debug!(%error, "reflection pass failed");
        }
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn pass(peers: &Peers, reported: &Mutex<HashSet<String>>) -> Result<(), kube::Error> {
    let providers = peers.providers().await;
    if providers.is_empty() {
        return Ok(());
    }
    let entries = peers.offloadings().await;
    let settings = settings(&peers.local).await;
    for provider in &providers {
        for entry in &entries {
            let Some(ns) = entry.object.namespace() else {
                continue;
            };
            let Some(twin) = offloading::twin_in(&entries, &ns, &provider.id) else {
                continue;
            };
            for kind in KINDS {
                let (policy, reverse) = settings
                    .get(kind.key)
                    .copied()
                    .unwrap_or((Policy::DenyList, false));
                if policy == Policy::Disabled {
                    continue;
                }
                let global = if kind.key == "endpointslices"
                    && crate::globalips::enabled(&peers.local).await
                {
                    Some(crate::globalips::by_pod_ip(&peers.local, &ns).await)
                } else {
                    None
                };
                let r = Reflect {
                    peers,
                    provider,
                    kind,
                    policy,
                    reverse,
                    ns: &ns,
                    twin: &twin,
                    global,
                };
                if let Err(error) = r.sync(reported).await {
                    debug!(%error, kind = kind.kind, namespace = %ns, provider = %provider.id, "not reflected");
                }
            }
        }
    }
    Ok(())
}

/// One kind of one namespace toward one provider.
struct Reflect<'a> {
    peers: &'a Peers,
    provider: &'a Provider,
    kind: &'a Kind,
    policy: Policy,
    /// From the provider's twin to this cluster.
    reverse: bool,
    ns: &'a str,
    twin: &'a str,
    /// Under Globalnet: local pod IP → global IP, for endpoints.
    global: Option<BTreeMap<String, String>>,
}

impl Reflect<'_> {
    fn apis(&self) -> (Api<DynamicObject>, Api<DynamicObject>) {
        let r = self.kind.resource();
        let local = Api::namespaced_with(self.peers.local.clone(), self.ns, &r);
        let remote = Api::namespaced_with(self.provider.client.clone(), self.twin, &r);
        if self.reverse {
            (remote, local)
        } else {
            (local, remote)
        }
    }

    fn skipped(&self, o: &DynamicObject) -> bool {
        let a = o.annotations();
        let set = |k: &str| a.get(k).is_some_and(|v| v != "false");
        let name = o.name_any();
        // The server's own objects of every namespace.
        if name == "kube-root-ca.crt"
            || o.data.get("type").and_then(Value::as_str)
                == Some("kubernetes.io/service-account-token")
        {
            return true;
        }
        // Reflected objects are not reflected back.
        if o.labels().contains_key(ORIGIN_LABEL) {
            return true;
        }
        if self.kind.key == "endpointslices" {
            // Only slices of Services, made by the cluster's controller.
            let managed = o.labels().get("endpointslice.kubernetes.io/managed-by");
            if managed.is_some_and(|m| m == SLICE_MANAGER)
                || !o.labels().contains_key("kubernetes.io/service-name")
            {
                return true;
            }
        }
        if self.kind.key == "events" {
            // Only events about pods.
            return o
                .data
                .pointer("/involvedObject/kind")
                .and_then(Value::as_str)
                != Some("Pod");
        }
        match self.policy {
            Policy::AllowList => !set(ALLOW),
            _ => set(SKIP),
        }
    }

    async fn sync(&self, reported: &Mutex<HashSet<String>>) -> Result<(), kube::Error> {
        let (source, dest) = self.apis();
        let sources = source.list(&ListParams::default()).await?.items;
        let existing = dest.list(&ListParams::default()).await?.items;
        let (origin, destination) = if self.reverse {
            (self.provider.id.as_str(), self.peers.cluster_id.as_str())
        } else {
            (self.peers.cluster_id.as_str(), self.provider.id.as_str())
        };
        let mut wanted = HashSet::new();
        for o in sources.iter().filter(|o| !self.skipped(o)) {
            let Some(body) = self.forge(o, origin, destination) else {
                continue;
            };
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            wanted.insert(name.clone());
            let current = existing.iter().find(|e| e.name_any() == name);
            if let Some(c) = current {
                if c.labels().get(ORIGIN_LABEL).map(String::as_str) != Some(origin) {
                    self.conflict(o, reported).await;
                    continue;
                }
                if same(c, &body) {
                    continue;
                }
            }
            if self.kind.key == "events" {
                // Events are written once.
                if current.is_none() {
                    let obj: DynamicObject =
                        serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
                    match dest.create(&PostParams::default(), &obj).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            dest.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
            if current.is_none() {
                debug!(kind = self.kind.kind, object = %name, namespace = %self.ns, provider = %self.provider.id, "reflected");
            }
        }
        // What reflection made whose source is gone.
        for e in &existing {
            let ours = e.labels().get(ORIGIN_LABEL).map(String::as_str) == Some(origin)
                && e.labels().get(DESTINATION_LABEL).map(String::as_str) == Some(destination);
            let token = e.labels().contains_key(super::tokens::TOKEN_FOR);
            if ours && !token && !wanted.contains(&e.name_any()) && self.kind.key != "events" {
                let _ = dest.delete(&e.name_any(), &DeleteParams::default()).await;
            }
        }
        Ok(())
    }

    /// The object to write in the destination; None when there is
    /// nothing to reflect (a slice with no endpoints outside the provider).
    fn forge(&self, o: &DynamicObject, origin: &str, destination: &str) -> Option<Value> {
        let mut labels = o.labels().clone();
        labels.insert(ORIGIN_LABEL.into(), origin.into());
        labels.insert(DESTINATION_LABEL.into(), destination.into());
        let mut annotations = o.annotations().clone();
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        let dest_ns = if self.reverse { self.ns } else { self.twin };
        let mut data = o.data.clone();
        let api_version = if self.kind.group.is_empty() {
            self.kind.version.to_string()
        } else {
            format!("{}/{}", self.kind.group, self.kind.version)
        };
        match self.kind.key {
            "services" => {
                if let Some(spec) = data.get_mut("spec").and_then(Value::as_object_mut) {
                    for k in [
                        "clusterIP",
                        "clusterIPs",
                        "healthCheckNodePort",
                        "ipFamilies",
                        "ipFamilyPolicy",
                    ] {
                        spec.remove(k);
                    }
                    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                        for p in ports {
                            if let Some(p) = p.as_object_mut() {
                                p.remove("nodePort");
                            }
                        }
                    }
                }
                data.as_object_mut()?.remove("status");
            }
            "endpointslices" => {
                // Only the endpoints the provider does not have itself.
                let vnode = virtual_node_name(&self.provider.id);
                let endpoints: Vec<Value> = data
                    .get("endpoints")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|e| e.get("nodeName").and_then(Value::as_str) != Some(vnode.as_str()))
                    .filter_map(|e| {
                        let mut e = e.clone();
                        if let Some(o) = e.as_object_mut() {
                            o.remove("nodeName");
                            o.remove("targetRef");
                        }
                        if let Some(map) = &self.global {
                            let addrs: Vec<Value> = e
                                .get("addresses")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                                .filter_map(|a| map.get(a.as_str()?).map(|g| json!(g)))
                                .collect();
                            if addrs.is_empty() {
                                return None;
                            }
                            e["addresses"] = json!(addrs);
                        }
                        Some(e)
                    })
                    .collect();
                if endpoints.is_empty() {
                    return None;
                }
                data["endpoints"] = json!(endpoints);
                labels.insert(
                    "endpointslice.kubernetes.io/managed-by".into(),
                    SLICE_MANAGER.into(),
                );
            }
            "events" => {
                // About the pod of the same name on this side.
                if let Some(io) = data
                    .get_mut("involvedObject")
                    .and_then(Value::as_object_mut)
                {
                    io.insert("namespace".into(), json!(dest_ns));
                    io.remove("uid");
                    io.remove("resourceVersion");
                }
                data["source"] = json!({"component": "liqo-virtual-kubelet", "host": virtual_node_name(&self.provider.id)});
                data.as_object_mut()?.remove("metadata");
            }
            _ => {
                data.as_object_mut()?.remove("status");
            }
        }
        let obj = data.as_object_mut()?;
        obj.remove("metadata");
        obj.insert("apiVersion".into(), json!(api_version));
        obj.insert("kind".into(), json!(self.kind.kind));
        obj.insert(
            "metadata".into(),
            json!({"name": o.name_any(), "namespace": dest_ns, "labels": labels, "annotations": annotations}),
        );
        Some(data)
    }

    /// Says once, on the source object, that its twin was not made here.
    async fn conflict(&self, o: &DynamicObject, reported: &Mutex<HashSet<String>>) {
        let key = format!(
            "{}/{}/{}/{}",
            self.provider.id,
            self.kind.key,
            self.ns,
            o.name_any()
        );
        if !reported.lock().insert(key) {
            return;
        }
        let cluster = if self.reverse {
            &self.peers.cluster_id
        } else {
            &self.provider.id
        };
        let message = format!(
            "Error reflecting object to cluster \"{cluster}\": remote object already exists"
        );
        info!(kind = self.kind.kind, object = %o.name_any(), namespace = %self.ns, %message, "reflection conflict");
        let source_ns = if self.reverse { self.twin } else { self.ns };
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(
            if self.reverse {
                self.provider.client.clone()
            } else {
                self.peers.local.clone()
            },
            source_ns,
        );
        let now = jiff::Timestamp::now().to_string();
        let event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{}.", o.name_any())},
            "involvedObject": {"apiVersion": o.types.as_ref().map(|t| t.api_version.clone()),
                "kind": self.kind.kind, "name": o.name_any(), "namespace": source_ns, "uid": o.uid()},
            "reason": "FailedReflection", "message": message, "type": "Warning",
            "source": {"component": "liqo-reflection"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1});
        if let Ok(e) = serde_json::from_value(event) {
            let _ = events.create(&PostParams::default(), &e).await;
        }
    }
}

/// Whether `current` already has what `body` would write.
fn same(current: &DynamicObject, body: &Value) -> bool {
    let cur = serde_json::to_value(current).unwrap_or_default();
    for (k, v) in body.as_object().into_iter().flatten() {
        if k == "metadata" {
            for part in ["labels", "annotations"] {
                if cur["metadata"][part] != v[part]
                    && !(v[part].as_object().is_some_and(|m| m.is_empty())
                        && cur["metadata"][part].is_null())
                {
                    return false;
                }
            }
            continue;
        }
        if k == "spec" {
            // The destination's server fills defaults (clusterIP, ...).
            if let (Some(want), Some(have)) = (v.as_object(), cur[k].as_object()) {
                if want.iter().any(|(f, x)| have.get(f) != Some(x)) {
                    return false;
                }
                continue;
            }
        }
        if cur.get(k) != Some(v) {
            return false;
        }
    }
    true
}
