//! The member's admin endpoint: fault injection for tests of failover, on
//! its own loopback listener so it keeps answering while the API plays
//! unreachable. Plain HTTP, bearer admin token. `flotilla member fault`
//! is its client; the routes are documented in docs/member.md.
//!
//! - `GET    /faults`                      the faults in force
//! - `PUT    /faults/unreachable`          `{"mode": "refuse" | "hang"}`
//! - `DELETE /faults/unreachable`
//! - `PUT    /faults/nodes/{node}/not-ready`
//! - `DELETE /faults/nodes/{node}/not-ready`
//! - `PUT    /faults/unready-pods`         `{"namespace": "...", "selector": "app=web"}`
//! - `DELETE /faults/unready-pods`         same body; without one, all
//! - `GET    /nodes`                       the roster
//! - `PUT    /nodes/{node}`                `{"labels": {..}, "taints": [..], "providerID": "..",
//!                                         "kubeletVersion": ".."}`: a node joins (201) or changes (200)
//! - `DELETE /nodes/{node}`                the node leaves; its Node and pods are deleted

pub mod client;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::config::SimConfig;
use crate::faults::{Faults, Unreachable};
use crate::roster::{NodeSpec, Roster, RosterError};

#[derive(Clone)]
struct Admin {
    faults: Faults,
    config: Arc<SimConfig>,
    roster: Arc<Roster>,
    token: Arc<str>,
}

pub fn router(faults: Faults, config: SimConfig, roster: Arc<Roster>, token: &str) -> axum::Router {
    let state = Admin {
        faults,
        config: Arc::new(config),
        roster,
        token: token.into(),
    };
    axum::Router::new()
        .route("/faults", get(list))
        .route(
            "/faults/unreachable",
            put(set_unreachable).delete(clear_unreachable),
        )
        .route(
            "/faults/nodes/{node}/not-ready",
            put(node_not_ready).delete(node_ready),
        )
        .route("/faults/unready-pods", put(pods_unready).delete(pods_ready))
        .route("/nodes", get(list_nodes))
        .route("/nodes/{node}", put(put_node).delete(delete_node))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({"error": message.into()}))).into_response()
}

async fn authenticate(State(admin): State<Admin>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if given.as_bytes().ct_eq(admin.token.as_bytes()).into() {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token (see <data dir>/admin-token)",
        )
    }
}

async fn list(State(admin): State<Admin>) -> Response {
    Json(admin.faults.get()).into_response()
}

#[derive(Deserialize)]
struct UnreachableBody {
    mode: Unreachable,
}

async fn set_unreachable(
    State(admin): State<Admin>,
    body: Result<Json<UnreachableBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "body must be {\"mode\": \"refuse\"} or {\"mode\": \"hang\"}",
        );
    };
    Json(admin.faults.update(|f| f.unreachable = Some(body.mode))).into_response()
}

async fn clear_unreachable(State(admin): State<Admin>) -> Response {
    Json(admin.faults.update(|f| f.unreachable = None)).into_response()
}

fn known_node(admin: &Admin, node: &str) -> Result<(), Box<Response>> {
    if admin.roster.index(node).is_some() {
        Ok(())
    } else {
        let names: Vec<String> = admin
            .roster
            .entries()
            .into_iter()
            .take(5)
            .map(|e| e.name)
            .collect();
        Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!(
                "node {node:?} is not one of this member's nodes (e.g. {})",
                names.join(", ")
            ),
        )))
    }
}

async fn node_not_ready(State(admin): State<Admin>, Path(node): Path<String>) -> Response {
    if let Err(r) = known_node(&admin, &node) {
        return *r;
    }
    Json(admin.faults.update(|f| {
        f.not_ready_nodes.insert(node);
    }))
    .into_response()
}

async fn node_ready(State(admin): State<Admin>, Path(node): Path<String>) -> Response {
    if let Err(r) = known_node(&admin, &node) {
        return *r;
    }
    Json(admin.faults.update(|f| {
        f.not_ready_nodes.remove(&node);
    }))
    .into_response()
}

async fn list_nodes(State(admin): State<Admin>) -> Response {
    Json(admin.roster.entries()).into_response()
}

fn roster_error(e: RosterError) -> Response {
    let code = match e {
        RosterError::InvalidName(..) => StatusCode::UNPROCESSABLE_ENTITY,
        RosterError::Full | RosterError::Fixed(_) => StatusCode::CONFLICT,
        RosterError::Persist { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(code, e.to_string())
}

async fn put_node(
    State(admin): State<Admin>,
    Path(node): Path<String>,
    body: Option<Json<NodeSpec>>,
) -> Response {
    let spec = body.map(|Json(s)| s).unwrap_or_default();
    match admin.roster.put(&admin.config, &node, spec) {
        Ok(created) => {
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            (code, Json(admin.roster.get(&node))).into_response()
        }
        Err(e) => roster_error(e),
    }
}

async fn delete_node(State(admin): State<Admin>, Path(node): Path<String>) -> Response {
    match admin.roster.remove(&node) {
        Ok(true) => {
            admin.faults.update(|f| {
                f.not_ready_nodes.remove(&node);
            });
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            format!("node {node:?} is not one of this member's nodes"),
        ),
        Err(e) => roster_error(e),
    }
}

#[derive(Deserialize)]
struct PodsBody {
    namespace: String,
    selector: String,
}

fn pods_body(body: Option<Json<PodsBody>>) -> Result<Option<PodsBody>, Box<Response>> {
    let Some(Json(b)) = body else {
        return Ok(None);
    };
    if b.namespace.is_empty() {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "namespace is required",
        )));
    }
    if let Err(e) = flotilla_core::selector::LabelSelector::parse(&b.selector) {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("selector {:?}: {e}", b.selector),
        )));
    }
    Ok(Some(b))
}

async fn pods_unready(State(admin): State<Admin>, body: Option<Json<PodsBody>>) -> Response {
    match pods_body(body) {
        Err(r) => *r,
        Ok(None) => error(
            StatusCode::BAD_REQUEST,
            "body must be {\"namespace\": \"...\", \"selector\": \"app=web\"}",
        ),
        Ok(Some(b)) => Json(admin.faults.update(|f| {
            let list = f.unready_pods.entry(b.namespace).or_default();
            if !list.contains(&b.selector) {
                list.push(b.selector);
            }
        }))
        .into_response(),
    }
}

async fn pods_ready(State(admin): State<Admin>, body: Option<Json<PodsBody>>) -> Response {
    match pods_body(body) {
        Err(r) => *r,
        Ok(None) => Json(admin.faults.update(|f| f.unready_pods.clear())).into_response(),
        Ok(Some(b)) => Json(admin.faults.update(|f| {
            if let Some(list) = f.unready_pods.get_mut(&b.namespace) {
                list.retain(|s| s != &b.selector);
                if list.is_empty() {
                    f.unready_pods.remove(&b.namespace);
                }
            }
        }))
        .into_response(),
    }
}
