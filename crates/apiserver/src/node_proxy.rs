//! `nodes/NAME/proxy/...`: the kubelet's own HTTP API through the API
//! server, as kube-apiserver proxies it, authorised as the `nodes/proxy`
//! subresource. Of the kubelet's paths, its checkpoint API
//! (`POST checkpoint/{namespace}/{pod}/{container}`, KEP-2008) is served
//! through the runtime's kubelet; others answer 404, as a kubelet does for
//! a path it does not serve.

use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::kubelet::Target;
use crate::state::ApiServer;

/// The node and the kubelet path of `api/v1/nodes/NAME/proxy/...`.
pub fn parse<'a>(segments: &'a [&'a str]) -> Option<(&'a str, &'a [&'a str])> {
    match segments {
        ["api", "v1", "nodes", name, "proxy", rest @ ..] => Some((name, rest)),
        _ => None,
    }
}

/// Answers a kubelet path of `node` (the caller has authorised it).
pub async fn serve(
    api: &ApiServer,
    node: &str,
    path: &[&str],
    method: &Method,
) -> ApiResult<Response> {
    if read(api, "nodes", None, node).await?.is_none() {
        return Err(ApiError::not_found("", "nodes", node));
    }
    match (method, path) {
        (&Method::POST, ["checkpoint", namespace, pod, container]) => {
            let kubelet = api.kubelet.get().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "nodes \"{node}\" has no container runtime behind it: checkpoint is not available on this cluster (its pods are simulated)"
                ))
            })?;
            let target = pod_on(api, node, namespace, pod, container).await?;
            let archive = kubelet.checkpoint(&target).await?;
            Ok((
                StatusCode::OK,
                [(http::header::CONTENT_TYPE, "application/json")],
                json!({"items": [archive]}).to_string(),
            )
                .into_response())
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!(
                "the kubelet of node \"{node}\" does not serve {method} /{}",
                path.join("/")
            ),
        )),
    }
}

/// A core object as stored; None when there is none.
async fn read(
    api: &ApiServer,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Option<Value>> {
    let resource = api
        .registry
        .get("", "v1", plural)
        .ok_or_else(ApiError::path_not_found)?;
    match api.get_latest(&resource.key(namespace, name)).await? {
        Some(kv) => Ok(Some(crate::objects::decode(&resource, &kv)?)),
        None => Ok(None),
    }
}

/// The pod's container, when the pod runs on `node` (404 otherwise, as
/// the kubelet knows only its own pods).
async fn pod_on(
    api: &ApiServer,
    node: &str,
    namespace: &str,
    pod: &str,
    container: &str,
) -> ApiResult<Target> {
    let object = read(api, "pods", Some(namespace), pod).await?;
    let Some(object) = object.filter(|p| p["spec"]["nodeName"] == node) else {
        return Err(ApiError::not_found(
            "",
            "pods",
            &format!("{namespace}/{pod}"),
        ));
    };
    let known = object["spec"]["containers"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["name"] == container));
    if !known {
        return Err(ApiError::not_found(
            "",
            "containers",
            &format!("{namespace}/{pod}/{container}"),
        ));
    }
    Ok(Target {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        uid: object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        container: container.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_node_proxy_paths_are_taken() {
        let segs = [
            "api",
            "v1",
            "nodes",
            "n1",
            "proxy",
            "checkpoint",
            "ns",
            "p",
            "c",
        ];
        let (node, rest) = parse(&segs).unwrap();
        assert_eq!(node, "n1");
        assert_eq!(rest, ["checkpoint", "ns", "p", "c"]);
        assert!(parse(&["api", "v1", "nodes", "n1"]).is_none());
        assert!(parse(&["api", "v1", "namespaces", "n1", "proxy"]).is_none());
    }
}
