//! Loopback clients: kube-rs clients whose transport is the API server's
//! router, in process, the way kube-apiserver's loopback client serves the
//! controllers that run beside it (the member simulator's, the control
//! plane's). Requests still go through authentication and every handler;
//! only TCP and TLS are skipped, so a member's controllers keep working
//! while it plays unreachable.

use std::sync::Arc;

use crate::ApiServer;
use http::{HeaderValue, header};
use tower::ServiceBuilder;

/// A client acting as `agent` (the field manager of its writes).
pub fn in_process(api: &Arc<ApiServer>, token: &str, agent: &'static str) -> kube::Client {
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).ok();
    let user_agent = HeaderValue::from_static(agent);
    let service = ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            if let Some(b) = &bearer {
                req.headers_mut().insert(header::AUTHORIZATION, b.clone());
            }
            req.headers_mut()
                .insert(header::USER_AGENT, user_agent.clone());
            req
        })
        .service(api.router());
    kube::Client::new(service, "default")
}
