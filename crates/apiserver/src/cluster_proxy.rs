//! Karmada's cluster proxy: `/apis/cluster.karmada.io/v1alpha1/clusters/
//! NAME/proxy/...` reaches the member cluster NAME's API as the hub's
//! credentials for it allow, for any request (reads, watches, pods' logs,
//! and `exec`/`attach` over WebSocket), so a kubeconfig whose server is
//! that URL drives the member through the hub. Authorised like any other
//! request, as `clusters/proxy` with the method's verb. The control plane
//! implements [`ClusterProxy`] (it holds the members' credentials).

use async_trait::async_trait;
use axum::extract::ws::WebSocketUpgrade;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::error::ApiError;

/// A request for a member, as it came to the hub.
pub struct ProxyRequest {
    pub method: Method,
    /// The member's path, from `/`, with the query.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Set when the client asked for a WebSocket (exec, attach).
    pub upgrade: Option<WebSocketUpgrade>,
}

#[async_trait]
pub trait ClusterProxy: Send + Sync {
    async fn proxy(&self, cluster: &str, request: ProxyRequest) -> Result<Response, ApiError>;
}

/// The cluster and the member's path, when `segments` are a proxy path.
pub fn parse<'a>(segments: &'a [&'a str]) -> Option<(&'a str, String)> {
    match segments {
        [
            "apis",
            "cluster.karmada.io",
            "v1alpha1",
            "clusters",
            name,
            "proxy",
            rest @ ..,
        ] => Some((name, format!("/{}", rest.join("/")))),
        _ => None,
    }
}
