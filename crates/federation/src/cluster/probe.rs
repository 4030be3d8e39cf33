//! What one look at a member says about it: health (`/readyz`, falling
//! back to `/healthz`), version, served APIs, nodes and the resources its
//! pods hold.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2;
use kube::discovery::Discovery;
use kube::{Api, Client, Resource};
use serde::Deserialize;

use crate::api::{ApiEnablement, ApiEnablementResource, NodeSummary, ResourceSummary};
use flotilla_core::quantity;

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

/// The body of a GET of `path`, asking for `accept` where given.
async fn get(client: &Client, path: &str, accept: Option<&str>) -> Result<String, kube::Error> {
    let mut request = http::Request::get(path);
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    let request = request.body(Vec::new()).map_err(kube::Error::HttpError)?;
    client.request_text(request).await
}

/// `/readyz`, or `/healthz` where `/readyz` is not served.
pub async fn health(client: &Client) -> Result<(), Unhealthy> {
    let unreachable = |e: &dyn std::fmt::Display| Unhealthy {
        reason: "ClusterNotReachable",
        message: format!("cluster is not reachable: {e}"),
    };
    let ask = |path: &'static str| async move {
        tokio::time::timeout(PROBE_TIMEOUT, get(client, path, None)).await
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
    let enablements = match tokio::time::timeout(PROBE_TIMEOUT, served_apis(client)).await {
        Ok(Ok(e)) => Some(e),
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

/// What the member serves, from aggregated discovery (two requests, as
/// client-go asks a 1.26+ server) where the member answers it, else from
/// `/api`, `/apis` and one request per group version. A probe of every
/// member every 10 s made the per-group form most of a 1,000-member hub's
/// idle work.
async fn served_apis(client: &Client) -> Result<Vec<ApiEnablement>, kube::Error> {
    // A member that answers `/api` in the older form answers `/apis` so
    // too: it is not asked twice.
    if let Some(core) = aggregated(client, "/api").await?
        && let Some(groups) = aggregated(client, "/apis").await?
    {
        return Ok(aggregated_enablements(
            core.items.into_iter().chain(groups.items),
        ));
    }
    let discovery = Discovery::new(client.clone()).run().await?;
    Ok(enablements(&discovery))
}

/// One aggregated discovery document, or `None` where the server answered
/// the older form (an `APIVersions` or `APIGroupList`): it may ignore the
/// aggregated media type and send what `application/json` asks for.
async fn aggregated(client: &Client, path: &str) -> Result<Option<DiscoveryDocument>, kube::Error> {
    let body = get(client, path, Some(ACCEPT_AGGREGATED_DISCOVERY_V2)).await?;
    Ok(aggregated_document(&body))
}

fn aggregated_document(body: &str) -> Option<DiscoveryDocument> {
    serde_json::from_str::<DiscoveryDocument>(body)
        .ok()
        .filter(|d| d.kind == "APIGroupDiscoveryList")
}

/// What the enablements need of an aggregated discovery document
/// (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`), read in one pass:
/// the document also lists every resource's verbs, short names and
/// subresources, which are skipped unread.
#[derive(Debug, Default, Deserialize)]
struct DiscoveryDocument {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    items: Vec<DiscoveredGroup>,
}

#[derive(Debug, Default, Deserialize)]
struct DiscoveredGroup {
    #[serde(default)]
    metadata: DiscoveredGroupMeta,
    #[serde(default)]
    versions: Vec<DiscoveredVersion>,
}

#[derive(Debug, Default, Deserialize)]
struct DiscoveredGroupMeta {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Default, Deserialize)]
struct DiscoveredVersion {
    #[serde(default)]
    version: String,
    #[serde(default)]
    resources: Vec<DiscoveredResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveredResource {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    response_kind: DiscoveredKind,
}

#[derive(Debug, Default, Deserialize)]
struct DiscoveredKind {
    #[serde(default)]
    kind: String,
}

fn aggregated_enablements(groups: impl Iterator<Item = DiscoveredGroup>) -> Vec<ApiEnablement> {
    let mut out = Vec::new();
    for group in groups {
        for version in group.versions.into_iter().filter(|v| !v.version.is_empty()) {
            let resources = version
                .resources
                .into_iter()
                .filter(|r| !r.resource.is_empty() && !r.response_kind.kind.is_empty())
                .map(|r| ApiEnablementResource {
                    name: r.resource,
                    kind: r.response_kind.kind,
                })
                .collect();
            out.push(enablement(
                &group.metadata.name,
                &version.version,
                resources,
            ));
        }
    }
    in_order(out)
}

fn enablements(d: &Discovery) -> Vec<ApiEnablement> {
    let mut out = Vec::new();
    for group in d.groups() {
        for version in group.versions() {
            let resources = group
                .versioned_resources(version)
                .into_iter()
                .filter(|(ar, _)| !ar.plural.contains('/'))
                .map(|(ar, _)| ApiEnablementResource {
                    name: ar.plural,
                    kind: ar.kind,
                })
                .collect();
            out.push(enablement(group.name(), version, resources));
        }
    }
    in_order(out)
}

/// One group version's entry, its resources by name, whichever form of
/// discovery it came from.
fn enablement(
    group: &str,
    version: &str,
    mut resources: Vec<ApiEnablementResource>,
) -> ApiEnablement {
    resources.sort_by(|a, b| a.name.cmp(&b.name));
    ApiEnablement {
        group_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        resources,
    }
}

fn in_order(mut enablements: Vec<ApiEnablement>) -> Vec<ApiEnablement> {
    enablements.sort_by(|a, b| a.group_version.cmp(&b.group_version));
    enablements
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

/// Only what the summaries need of a node: a fleet of a thousand members
/// has each one's nodes read every 10 s, and a whole `Node` (images,
/// addresses, daemon endpoints) costs several times more to decode.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "k8s_openapi::api::core::v1::Node")]
struct NodeUsage {
    metadata: ObjectMeta,
    status: Option<NodeUsageStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeUsageStatus {
    #[serde(default)]
    allocatable: BTreeMap<String, Quantity>,
    #[serde(default)]
    conditions: Vec<NodeCondition>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

async fn nodes(client: &Client) -> Result<(NodeSummary, Amounts), kube::Error> {
    let api: Api<NodeUsage> = Api::all(client.clone());
    let mut summary = NodeSummary::default();
    let mut allocatable = Amounts::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        for n in &page.items {
            summary.total_num += 1;
            let status = n.status.as_ref();
            let ready = status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if !ready {
                continue;
            }
            summary.ready_num += 1;
            for (k, q) in status.into_iter().flat_map(|s| &s.allocatable) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_apiserver::{ApiServer, Config, loopback};
    use tower::ServiceBuilder;

    async fn server() -> (tempfile::TempDir, std::sync::Arc<ApiServer>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store =
            flotilla_store::SqliteStore::open(dir.path(), Default::default()).expect("a store");
        let api = ApiServer::new(store, Config::default())
            .await
            .unwrap_or_else(|e| panic!("cannot start the API server: {}", e.message));
        (dir, api)
    }

    /// A client of a server that does not know aggregated discovery: it
    /// never sees the aggregated media type and answers the older form.
    fn without_aggregated_discovery(api: &std::sync::Arc<ApiServer>) -> Client {
        let service = ServiceBuilder::new()
            .map_request(|mut req: http::Request<kube::client::Body>| {
                req.headers_mut().insert(
                    http::header::ACCEPT,
                    http::HeaderValue::from_static("application/json"),
                );
                req
            })
            .service(api.router());
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn served_apis_read_from_aggregated_discovery_match_the_per_group_documents() {
        let (_dir, api) = server().await;
        let client = loopback::in_process(&api, "", "probe-test");
        let per_group = enablements(
            &Discovery::new(client.clone())
                .run()
                .await
                .expect("discovery"),
        );
        assert!(aggregated(&client, "/apis").await.expect("/apis").is_some());
        let aggregated = served_apis(&client).await.expect("served APIs");
        assert!(
            aggregated.iter().any(|e| e.group_version == "apps/v1"
                && e.resources
                    .iter()
                    .any(|r| r.name == "deployments" && r.kind == "Deployment")),
            "{aggregated:?}"
        );
        assert!(
            aggregated
                .iter()
                .any(|e| e.group_version == "v1"
                    && e.resources.iter().any(|r| r.name == "configmaps"))
        );
        assert_eq!(aggregated, per_group);
    }

    #[tokio::test]
    async fn a_server_without_aggregated_discovery_is_asked_per_group() {
        let (_dir, api) = server().await;
        let aggregated = served_apis(&loopback::in_process(&api, "", "probe-test"))
            .await
            .expect("served APIs");
        let older = served_apis(&without_aggregated_discovery(&api))
            .await
            .expect("served APIs");
        assert!(
            older.iter().any(|e| e.group_version == "batch/v1"),
            "{older:?}"
        );
        assert_eq!(older, aggregated);
    }

    #[test]
    fn only_an_aggregated_document_is_read_as_one() {
        assert!(aggregated_document(r#"{"kind":"APIGroupList","groups":[]}"#).is_none());
        assert!(aggregated_document(r#"{"kind":"APIVersions","versions":["v1"]}"#).is_none());
        assert!(aggregated_document("not json").is_none());
        let doc = aggregated_document(
            r#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","items":[
                {"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[
                    {"resource":"deployments","responseKind":{"group":"apps","version":"v1","kind":"Deployment"},
                     "scope":"Namespaced","verbs":["get"],
                     "subresources":[{"subresource":"scale","responseKind":{"group":"autoscaling","version":"v1","kind":"Scale"},"verbs":["get"]}]}]}]}]}"#,
        )
        .expect("an aggregated document");
        let e = aggregated_enablements(doc.items.into_iter());
        assert_eq!(
            e,
            vec![ApiEnablement {
                group_version: "apps/v1".into(),
                resources: vec![ApiEnablementResource {
                    name: "deployments".into(),
                    kind: "Deployment".into()
                }],
            }]
        );
    }
}
