//! `componentstatuses` (`kubectl get cs`, deprecated upstream but served
//! by 1.32): the health of the control plane's parts, computed when asked.
//! Flotilla's API server, scheduler and controllers are one process, so
//! `scheduler` and `controller-manager` are as healthy as the server that
//! answers; `etcd-0` is the store, asked for its current revision.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::handlers::{Ctx, respond_object};

fn component(name: &str, healthy: bool, message: &str) -> Value {
    json!({"kind": "ComponentStatus", "apiVersion": "v1",
           "metadata": {"name": name, "creationTimestamp": null},
           "conditions": [{"type": "Healthy", "status": if healthy { "True" } else { "False" },
                           "message": message}]})
}

fn components(ctx: &Ctx) -> Vec<Value> {
    let store = match ctx.api.store.get("/core/namespaces/default") {
        Ok(_) => component("etcd-0", true, "ok"),
        Err(e) => component("etcd-0", false, &e.to_string()),
    };
    vec![
        component("controller-manager", true, "ok"),
        component("scheduler", true, "ok"),
        store,
    ]
}

pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    let all = components(ctx);
    match ctx.name.as_deref() {
        Some(name) => {
            let one = all
                .into_iter()
                .find(|c| c["metadata"]["name"] == name)
                .ok_or_else(|| ApiError::not_found("", "componentstatuses", name))?;
            respond_object(ctx, StatusCode::OK, &one, &[])
        }
        None => {
            let output = crate::request::negotiate(&ctx.headers, ctx.query.get("includeObject"))?;
            crate::handlers::respond_list(ctx, output, all, json!({}))
        }
    }
}
