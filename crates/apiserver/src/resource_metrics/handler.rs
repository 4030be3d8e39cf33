//! The `metrics.k8s.io` requests: get and list of NodeMetrics and
//! PodMetrics, answered from the server's [`super::ResourceMetrics`].

use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::*;
use crate::error::{ApiError, ApiResult};
use crate::handlers::{Ctx, Filter, respond_list, respond_object};

/// GET of `nodes` or `pods` in the group, one or a list.
pub async fn serve(ctx: &Ctx, method: &Method) -> ApiResult<Response> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    if ctx.query.flag("watch") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource (watch)",
        ));
    }
    let source = ctx.api.resource_metrics.get().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the server is currently unable to handle the request".to_string(),
        )
    })?;
    let nodes = ctx.resource.plural == "nodes";
    let source = source.clone();
    let namespace = ctx.namespace.clone();
    // Measuring may read the host (`/proc`): off the async workers.
    let items: Vec<(String, Value)> = tokio::task::spawn_blocking(move || {
        if nodes {
            source
                .nodes()
                .iter()
                .map(|n| (n.name.clone(), node_json(n)))
                .collect()
        } else {
            source
                .pods(namespace.as_deref())
                .iter()
                .map(|p| (p.name.clone(), pod_json(p)))
                .collect()
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("measuring failed: {e}")))?;
    if let Some(name) = ctx.name.as_deref() {
        let (_, one) = items
            .into_iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| ApiError::not_found(GROUP, &ctx.resource.plural, name))?;
        return respond_object(ctx, StatusCode::OK, &one, &[]);
    }
    let filter = Filter::from_query(&ctx.resource, &ctx.query)?;
    let mut items: Vec<Value> = items
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| filter.matches(v))
        .collect();
    items.sort_by(|a, b| {
        let key = |v: &Value| {
            (
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                v["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    let output = crate::request::negotiate(&ctx.headers, ctx.query.get("includeObject"))?;
    respond_list(ctx, output, items, json!({}))
}
