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
    impersonating(api, token, agent, None)
}

/// A client acting for `user`: `token`'s holder impersonates them, so
/// each request is authorised as `user`'s and audited under both names.
pub fn in_process_as(
    api: &Arc<ApiServer>,
    token: &str,
    agent: &'static str,
    user: &crate::user::User,
) -> kube::Client {
    impersonating(api, token, agent, Some(user))
}

fn impersonating(
    api: &Arc<ApiServer>,
    token: &str,
    agent: &'static str,
    user: Option<&crate::user::User>,
) -> kube::Client {
    let impersonation: Vec<(&'static str, HeaderValue)> = user
        .map(|u| {
            let groups = u
                .groups
                .iter()
                // Given to everyone who signs in; upstream refuses to
                // impersonate it explicitly.
                .filter(|g| g.as_str() != "system:authenticated")
                .map(|g| (crate::impersonation::GROUP, g.as_str()));
            std::iter::once((crate::impersonation::USER, u.name.as_str()))
                .chain(groups)
                .filter_map(|(h, v)| HeaderValue::from_str(v).ok().map(|v| (h, v)))
                .collect()
        })
        .unwrap_or_default();
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).ok();
    let user_agent = HeaderValue::from_static(agent);
    let service = ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            if let Some(b) = &bearer {
                req.headers_mut().insert(header::AUTHORIZATION, b.clone());
            }
            req.headers_mut()
                .insert(header::USER_AGENT, user_agent.clone());
            for (name, value) in &impersonation {
                req.headers_mut().append(*name, value.clone());
            }
            req
        })
        .service(api.router());
    kube::Client::new(service, "default")
}
