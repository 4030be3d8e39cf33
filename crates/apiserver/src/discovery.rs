//! API discovery in both forms: aggregated (apidiscovery.k8s.io/v2) and
//! legacy (APIVersions, APIGroupList, APIResourceList).

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::kinds::Discovered;
use crate::resources::{Registry, ResourceInfo};

pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// The subresources a kind of its own serves that discovery lists.
fn discovered(r: &ResourceInfo) -> impl Iterator<Item = (&'static str, &'static Discovered)> {
    crate::kinds::strategy(r)
        .subresources()
        .iter()
        .filter_map(|s| Some((s.name, s.discovered.as_ref()?)))
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let mut subresources = Vec::new();
    if r.status_subresource {
        subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    if r.scale.is_some() {
        subresources.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}));
    }
    for (name, d) in discovered(r) {
        let response = match d.response {
            Some((group, version, kind)) => {
                json!({"group": group, "version": version, "kind": kind})
            }
            None => kind.clone(),
        };
        subresources.push(json!({"subresource": name, "responseKind": response, "verbs": d.verbs}));
    }
    for a in &r.added_subresources {
        let (group, version, kind) = &a.response;
        subresources.push(json!({"subresource": a.name,
            "responseKind": {"group": group, "version": version, "kind": kind}, "verbs": a.verbs}));
    }
    let mut v = json!({
        "resource": r.plural,
        "singularResource": r.singular,
        "responseKind": kind,
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        v["subresources"] = json!(subresources);
    }
    v
}

/// `/api` (core only) or `/apis` (named groups) as an APIGroupDiscoveryList.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = registry
                        .resources_in(&group, v)
                        .iter()
                        .map(|r| aggregated_resource(r))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let metadata = if group.is_empty() {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": group, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// An aggregated discovery document as served: its bytes and ETag.
#[derive(Clone, Debug)]
pub struct Document {
    pub body: Bytes,
    pub etag: String,
}

/// The aggregated documents, built once per registry generation: clients
/// (a hub probing each member every 10 s, kubectl on every call) ask far
/// more often than CRDs change. Like kube-apiserver, each carries an ETag
/// so a client holding it may be answered 304.
#[derive(Default)]
pub struct AggregatedCache {
    built: Mutex<Option<Built>>,
}

struct Built {
    generation: u64,
    core: Document,
    groups: Document,
}

impl AggregatedCache {
    /// `/api` (`core`) or `/apis` for the registry as it is now.
    pub fn document(&self, registry: &Registry, core: bool) -> Document {
        let generation = registry.generation();
        let mut built = self.built.lock();
        let current = match built.take() {
            Some(b) if b.generation == generation => b,
            _ => Built {
                generation,
                core: document(registry, true),
                groups: document(registry, false),
            },
        };
        let doc = if core { &current.core } else { &current.groups }.clone();
        *built = Some(current);
        doc
    }
}

fn document(registry: &Registry, core: bool) -> Document {
    let body = serde_json::to_vec(&aggregated(registry, core)).unwrap_or_default();
    let etag = format!("\"{}\"", crate::openapi::hex(&Sha256::digest(&body)));
    Document {
        body: Bytes::from(body),
        etag,
    }
}

pub fn api_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": gv(group, v), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| api_group(&g, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if served.
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    registry
        .groups()
        .into_iter()
        .find(|(g, _)| g == name && !g.is_empty())
        .map(|(g, versions)| {
            let mut v = api_group(&g, &versions);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        })
}

/// `/api/v1` or `/apis/<g>/<v>` as an APIResourceList, if served.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources = registry.resources_in(group, version);
    if resources.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in &resources {
        let mut v = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            v["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            v["categories"] = json!(r.categories);
        }
        list.push(v);
        if r.status_subresource {
            list.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                             "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if r.scale.is_some() {
            list.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                             "group": "autoscaling", "version": "v1", "kind": "Scale",
                             "verbs": ["get", "patch", "update"]}));
        }
        for (name, d) in discovered(r) {
            let mut v = json!({"name": format!("{}/{name}", r.plural), "singularName": "",
                               "namespaced": r.namespaced, "verbs": d.verbs});
            match d.response {
                Some((group, version, kind)) => {
                    v["group"] = json!(group);
                    v["version"] = json!(version);
                    v["kind"] = json!(kind);
                }
                None => v["kind"] = json!(r.kind),
            }
            list.push(v);
        }
        for a in &r.added_subresources {
            let (group, version, kind) = &a.response;
            list.push(
                json!({"name": format!("{}/{}", r.plural, a.name), "singularName": "",
                             "namespaced": r.namespaced, "group": group, "version": version,
                             "kind": kind, "verbs": a.verbs}),
            );
        }
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv(group, version), "resources": list}),
    )
}
