//! `/debug/failpoints`: arming a failpoint (`flotilla-failpoint`) at run
//! time, as TiKV's status server does, for tests of recovery and
//! `flotilla chaos`. Served only by a process started with
//! `FLOTILLA_FAILPOINTS` set (even empty), and authorized as a
//! non-resource path (`system:masters` may; RBAC grants it as
//! `nonResourceURLs: ["/debug/failpoints/*"]`).
//!
//! - `GET /debug/failpoints`: the armed points, `name=actions` a line;
//! - `PUT /debug/failpoints/NAME` with the actions as the body
//!   (`return(crash)`, `sleep(500)`, `2*off->return(crash)`): arms it;
//! - `DELETE /debug/failpoints/NAME`: disarms it.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode, header};

use crate::error::{ApiError, ApiResult};

/// Answers a request under `/debug/failpoints` (`rest`: the segments
/// after it) in a process that serves them
/// ([`flotilla_failpoint::runtime_control_enabled`]).
pub async fn answer(method: &Method, rest: &[&str], body: Body) -> ApiResult<Response> {
    match (method, rest) {
        (&Method::GET, []) => {
            let mut listed = flotilla_failpoint::list().join("\n");
            listed.push('\n');
            Ok(plain(StatusCode::OK, listed))
        }
        (&Method::PUT, [name]) => {
            let bytes = crate::request::read_body(body).await?;
            let actions = std::str::from_utf8(&bytes)
                .map_err(|_| ApiError::bad_request("the failpoint's actions are not UTF-8 text"))?
                .trim();
            flotilla_failpoint::set(name, actions).map_err(ApiError::bad_request)?;
            tracing::warn!(failpoint = %name, %actions, "failpoint armed");
            Ok(plain(StatusCode::OK, format!("{name}={actions}\n")))
        }
        (&Method::DELETE, [name]) => {
            flotilla_failpoint::remove(name);
            Ok(plain(StatusCode::OK, format!("{name} disarmed\n")))
        }
        (_, [] | [_]) => Err(ApiError::method_not_allowed(
            "/debug/failpoints takes GET, and PUT or DELETE of /debug/failpoints/NAME",
        )),
        _ => Err(ApiError::path_not_found()),
    }
}

fn plain(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}
