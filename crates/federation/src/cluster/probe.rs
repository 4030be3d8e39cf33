//! What one look at a member says about it: health (`/readyz`, falling
//! back to `/healthz`), version, served APIs, nodes and the resources its
//! pods hold.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::discovery::Discovery;
use kube::{Api, Client, Resource};
use serde::Deserialize;

use crate::api::{ApiEnablement, ApiEnablementResource, NodeSummary, ResourceSummary};
use flotilla_apiserver::quantity;

const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
const PAGE: u32 = 500;

/// Why a member is not Ready: the condition's reason and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Unhealthy {
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub kubernetes_version: Option<String>,
    pub api_enablements: Option<Vec<ApiEnablement>>,
    pub node_summary: Option<NodeSummary>,
    pub resource_summary: Option<ResourceSummary>,
}

async fn get(client: &Client, path: &str) -> Result<String, kube::Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await
}

/// `/readyz`, or `/healthz` where `/readyz` is not served.
pub async fn health(client: &Client) -> Result<(), Unhealthy> {
    let unreachable = |e: &dyn std::fmt::Display| Unhealthy {
        reason: "ClusterNotReachable",
        message: format!("cluster is not reachable: {e}"),
    };
    let ask = |path: &'static str| async move {
        tokio::time::timeout(PROBE_TIMEOUT, get(client, path)).await
    };
    let answer = match ask("/readyz").await {
        Err(elapsed) => return Err(unreachable(&elapsed)),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => match ask("/healthz").await {
            Err(elapsed) => return Err(unreachable(&elapsed)),
            Ok(r) => r,
        },
        Ok(r) => r,
    };
    match answer {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(Unhealthy {
            reason: "ClusterNotReady",
            message: format!("cluster is not healthy: {}", body.trim()),
        }),
        Err(kube::Error::Api(s)) => Err(Unhealthy {
            reason: "ClusterNotReady",
            message: format!("cluster is not healthy: {} {}", s.code, s.message),
        }),
        Err(e) => Err(unreachable(&e)),
    }
}

/// Everything but health; each part is `None` when it could not be read,
/// so the last good value stays.
pub async fn observe(client: &Client) -> Observation {
    let version = tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|v| v.git_version);
    let enablements =
        match tokio::time::timeout(PROBE_TIMEOUT, Discovery::new(client.clone()).run()).await {
            Ok(Ok(d)) => Some(enablements(&d)),
            _ => None,
        };
    let (node_summary, allocatable) = match nodes(client).await {
        Ok((s, a)) => (Some(s), Some(a)),
        Err(_) => (None, None),
    };
    let resource_summary = match (allocatable, pods(client).await) {
        (Some(allocatable), Ok((allocated, allocating))) => Some(ResourceSummary {
            allocatable: quantities(&allocatable),
            allocated: quantities(&allocated),
            allocating: quantities(&allocating),
        }),
        _ => None,
    };
    Observation {
        kubernetes_version: version,
        api_enablements: enablements,
        node_summary,
        resource_summary,
    }
}

fn enablements(d: &Discovery) -> Vec<ApiEnablement> {
    let mut out = Vec::new();
    for group in d.groups() {
        for version in group.versions() {
            let mut resources: Vec<ApiEnablementResource> = group
                .versioned_resources(version)
                .into_iter()
                .filter(|(ar, _)| !ar.plural.contains('/'))
                .map(|(ar, _)| ApiEnablementResource {
                    name: ar.plural,
                    kind: ar.kind,
                })
                .collect();
            resources.sort_by(|a, b| a.name.cmp(&b.name));
            let group_version = if group.name().is_empty() {
                version.to_string()
            } else {
                format!("{}/{version}", group.name())
            };
            out.push(ApiEnablement {
                group_version,
                resources,
            });
        }
    }
    out.sort_by(|a, b| a.group_version.cmp(&b.group_version));
    out
}

/// Amounts in base units (CPU in millicores).
type Amounts = BTreeMap<String, i64>;

fn amount(resource: &str, q: &Quantity) -> i64 {
    if resource == "cpu" {
        quantity::millicores(&q.0).unwrap_or(0)
    } else {
        quantity::units(&q.0).unwrap_or(0)
    }
}

fn quantities(a: &Amounts) -> BTreeMap<String, Quantity> {
    a.iter()
        .map(|(k, v)| {
            let q = if k == "cpu" {
                quantity::format_millicores(*v)
            } else if k == "memory" || k.ends_with("storage") {
                quantity::format_bytes(*v)
            } else {
                v.to_string()
            };
            (k.clone(), Quantity(q))
        })
        .collect()
}

async fn nodes(client: &Client) -> Result<(NodeSummary, Amounts), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut summary = NodeSummary::default();
    let mut allocatable = Amounts::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        for n in &page.items {
            summary.total_num += 1;
            let status = n.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready {
                continue;
            }
            summary.ready_num += 1;
            for (k, q) in status
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten()
            {
                *allocatable.entry(k.clone()).or_default() += amount(k, q);
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => return Ok((summary, allocatable)),
        }
    }
}

/// Only what resource accounting needs of a pod.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "k8s_openapi::api::core::v1::Pod")]
struct PodUsage {
    metadata: ObjectMeta,
    spec: Option<PodUsageSpec>,
    status: Option<PodUsageStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodUsageSpec {
    #[serde(default)]
    containers: Vec<ContainerUsage>,
    #[serde(default)]
    init_containers: Vec<ContainerUsage>,
    node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ContainerUsage {
    #[serde(default)]
    resources: ContainerResources,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ContainerResources {
    #[serde(default)]
    requests: BTreeMap<String, Quantity>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct PodUsageStatus {
    phase: Option<String>,
}

/// Requests of running pods (allocated) and of pods not yet on a node
/// (allocating), with one "pods" each.
async fn pods(client: &Client) -> Result<(Amounts, Amounts), kube::Error> {
    let api: Api<PodUsage> = Api::all(client.clone());
    let (mut allocated, mut allocating) = (Amounts::new(), Amounts::new());
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        for p in &page.items {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let Some(spec) = &p.spec else { continue };
            let into = if spec.node_name.is_some() {
                &mut allocated
            } else {
                &mut allocating
            };
            let mut pod = Amounts::new();
            for c in &spec.containers {
                for (k, q) in &c.resources.requests {
                    *pod.entry(k.clone()).or_default() += amount(k, q);
                }
            }
            for c in &spec.init_containers {
                for (k, q) in &c.resources.requests {
                    let v = pod.entry(k.clone()).or_default();
                    *v = (*v).max(amount(k, q));
                }
            }
            *pod.entry("pods".into()).or_default() += 1;
            for (k, v) in pod {
                *into.entry(k).or_default() += v;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => return Ok((allocated, allocating)),
        }
    }
}
