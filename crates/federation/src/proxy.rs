//! The hub's side of Karmada's cluster proxy
//! (`clusters/NAME/proxy/...`, served by the API server's
//! `cluster_proxy` seam): the request goes to the member with the
//! credentials `flotilla join` stored, the answer comes back as it is,
//! streamed (watches, `logs -f`); a WebSocket (exec, attach) is joined
//! end to end, frame by frame. Pull members cannot be reached from the
//! hub, so they are refused with a clear error.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::ws::{Message, WebSocket};
use axum::response::Response;
use flotilla_apiserver::cluster_proxy::{ClusterProxy, ProxyRequest};
use flotilla_apiserver::error::ApiError;
use futures::{SinkExt, StreamExt};
use http::header;
use kube::{Api, Client};
use tokio_tungstenite::tungstenite::Message as TMessage;

use crate::api::Cluster;
use crate::members::Members;

pub struct HubProxy {
    hub: Client,
    members: Members,
}

impl HubProxy {
    pub fn new(hub: Client) -> Arc<HubProxy> {
        Arc::new(HubProxy {
            members: Members::new(hub.clone()),
            hub,
        })
    }
}

/// Hop-by-hop headers and the hub's own credentials stay behind.
fn forwarded(name: &header::HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host"
            | "authorization"
            | "connection"
            | "upgrade"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "content-length"
            | "sec-websocket-key"
            | "sec-websocket-version"
            | "sec-websocket-protocol"
            | "sec-websocket-extensions"
    )
}

fn unavailable(cluster: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("cannot reach cluster {cluster}: {e}"))
}

#[async_trait]
impl ClusterProxy for HubProxy {
    async fn proxy(&self, cluster: &str, request: ProxyRequest) -> Result<Response, ApiError> {
        let clusters: Api<Cluster> = Api::all(self.hub.clone());
        let found = clusters
            .get_opt(cluster)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .ok_or_else(|| ApiError::not_found("cluster.karmada.io", "clusters", cluster))?;
        if found.spec.sync_mode == "Pull" {
            return Err(ApiError::bad_request(format!(
                "cluster {cluster} is in Pull mode: the control plane cannot reach its API"
            )));
        }
        let member = self
            .members
            .get(&found)
            .await
            .map_err(|e| unavailable(cluster, e))?;
        let mut builder = http::Request::builder()
            .method(request.method.clone())
            .uri(&request.path_and_query);
        for (name, value) in request.headers.iter().filter(|(n, _)| forwarded(n)) {
            builder = builder.header(name, value);
        }
        let outgoing = builder
            .body(request.body.to_vec())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some(upgrade) = request.upgrade {
            let connection = member
                .upgrades
                .connect(outgoing)
                .await
                .map_err(|e| match e {
                    kube::Error::Api(s) => ApiError::bad_request(s.message),
                    other => unavailable(cluster, other),
                })?;
            let protocol = if connection.supports_stream_close() {
                "v5.channel.k8s.io"
            } else {
                "v4.channel.k8s.io"
            };
            let member_side = connection.into_stream();
            return Ok(upgrade
                .protocols([protocol])
                .on_upgrade(move |client_side| join(client_side, member_side)));
        }
        let answer = member
            .client
            .send(outgoing.map(kube::client::Body::from))
            .await
            .map_err(|e| unavailable(cluster, e))?;
        let (parts, body) = answer.into_parts();
        let mut response = Response::new(axum::body::Body::new(body));
        *response.status_mut() = parts.status;
        for (name, value) in parts.headers.iter().filter(|(n, _)| forwarded(n)) {
            response.headers_mut().append(name, value.clone());
        }
        Ok(response)
    }
}

/// Carries frames both ways until either side closes.
async fn join<S>(client: WebSocket, member: tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_client, mut from_client) = client.split();
    let (mut to_member, mut from_member) = member.split();
    let up = async {
        while let Some(Ok(m)) = from_client.next().await {
            let out = match m {
                Message::Binary(b) => TMessage::Binary(b),
                Message::Text(t) => TMessage::text(t.as_str()),
                Message::Close(_) => break,
                _ => continue,
            };
            if to_member.send(out).await.is_err() {
                break;
            }
        }
        let _ = to_member.close().await;
    };
    let down = async {
        while let Some(Ok(m)) = from_member.next().await {
            let out = match m {
                TMessage::Binary(b) => Message::Binary(b),
                TMessage::Text(t) => Message::Text(t.as_str().into()),
                TMessage::Close(_) => break,
                _ => continue,
            };
            if to_client.send(out).await.is_err() {
                break;
            }
        }
        let _ = to_client
            .send(Message::Close(Some(axum::extract::ws::CloseFrame {
                code: axum::extract::ws::close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    };
    // The member's end (the process exited) ends the session.
    tokio::select! {
        _ = down => {}
        _ = up => {}
    }
}
