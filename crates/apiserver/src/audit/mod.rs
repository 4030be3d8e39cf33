//! The audit log, as kube-apiserver writes it: for each request the
//! policy ([`policy`]) gives a level, and events ([`event`]) are written
//! at its stages, one JSON line each, by a writer thread ([`backend`]).
//!
//! A request's record lives in a task-local while `server::route` runs:
//! route notes who asked ([`authenticated`], [`impersonated`]), what
//! about ([`resource_request`]), the authorizer's answer ([`decided`]) and
//! the body ([`request_body`]); `server::dispatch` writes the events once
//! the response is known ([`Audited`]). Stages, as upstream:
//! `RequestReceived`, then `ResponseComplete`, with `ResponseStarted`
//! between them for long-running requests (watches, `log`, `exec`,
//! `attach`, `portforward`, `proxy`), whose `ResponseComplete` is written
//! when the response's body ends; `Panic` when a handler panics. A
//! request whose credentials are refused (401) gets upstream's single
//! `ResponseStarted` event with user `{}`. Every response carries the
//! request's audit ID in `Audit-ID` (the client's own, if it sent one).

pub mod backend;
pub mod event;
pub mod policy;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use parking_lot::Mutex;
use serde_json::Value;
use tracing::warn;

pub use backend::{Rotation, Sink};
pub use event::{ObjectReference, UserInfo};
pub use policy::{Evaluated, Level, Policy, PolicyError, Stage};

use crate::authz::Decision;
use crate::error::{ApiError, ApiResult};
use crate::request::ResourcePath;
use crate::user::User;

/// The response header that carries the audit ID.
pub const AUDIT_ID: &str = "audit-id";

/// Longest user agent recorded (upstream's limit).
const MAX_USER_AGENT: usize = 1024;

/// What `--audit-*` configure.
#[derive(Clone, Debug)]
pub struct Options {
    pub policy_file: PathBuf,
    /// `-` for stdout.
    pub log_path: String,
    /// Megabytes before rotation; 0 never rotates.
    pub max_size_mb: u64,
    /// Rotated files kept; 0 keeps all.
    pub max_backups: usize,
    /// Days rotated files are kept; 0 keeps them.
    pub max_age_days: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot read the audit policy file {}: {source}", path.display())]
    ReadPolicy {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the audit policy file {} is not a valid audit.k8s.io/v1 Policy: {source}", path.display())]
    Policy {
        path: PathBuf,
        #[source]
        source: PolicyError,
    },
    #[error("cannot open the audit log {path}: {source}")]
    OpenLog {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The policy and the writer of one server's audit log.
pub struct Auditor {
    policy: Policy,
    writer: backend::Writer,
}

impl Auditor {
    /// Reads the policy and opens the log (creating it, 0600) as `options` say.
    pub fn start(options: &Options) -> Result<Arc<Auditor>, AuditError> {
        let policy = load_policy(&options.policy_file)?;
        let open_error = |source| AuditError::OpenLog {
            path: options.log_path.clone(),
            source,
        };
        let sink = if options.log_path == "-" {
            Sink::Stdout
        } else {
            let rotation = Rotation {
                max_size: options.max_size_mb.saturating_mul(1024 * 1024),
                max_backups: options.max_backups,
                max_age: (options.max_age_days > 0)
                    .then(|| Duration::from_secs(options.max_age_days.saturating_mul(86_400))),
            };
            Sink::File(
                backend::RotatingFile::open(std::path::Path::new(&options.log_path), rotation)
                    .map_err(open_error)?,
            )
        };
        Auditor::with_sink(policy, sink).map_err(open_error)
    }

    /// An auditor writing to `sink`.
    pub fn with_sink(policy: Policy, sink: Sink) -> std::io::Result<Arc<Auditor>> {
        record_panics();
        Ok(Arc::new(Auditor {
            policy,
            writer: backend::Writer::start(sink, backend::QUEUE)?,
        }))
    }

    /// Waits until every event so far is written out (on shutdown).
    pub async fn flush(&self) {
        self.writer.flush().await;
    }

    /// Events queued for the log, dropped (queue full) and not written (sink errors).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.writer.written.load(Ordering::Relaxed),
            self.writer.dropped.load(Ordering::Relaxed),
            self.writer.errors.load(Ordering::Relaxed),
        )
    }

    /// The counters in Prometheus' text format, named as upstream's.
    pub fn metrics(&self) -> String {
        let (written, dropped, errors) = self.counts();
        format!(
            "# HELP apiserver_audit_event_total Counter of audit events generated and sent to the audit backend.\n\
             # TYPE apiserver_audit_event_total counter\n\
             apiserver_audit_event_total {written}\n\
             # HELP apiserver_audit_error_total Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.\n\
             # TYPE apiserver_audit_error_total counter\n\
             apiserver_audit_error_total{{plugin=\"buffered\"}} {dropped}\n\
             apiserver_audit_error_total{{plugin=\"log\"}} {errors}\n"
        )
    }
}

/// Reads and validates a policy file.
pub fn load_policy(path: &std::path::Path) -> Result<Policy, AuditError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditError::ReadPolicy {
        path: path.to_path_buf(),
        source,
    })?;
    Policy::parse(&text).map_err(|source| AuditError::Policy {
        path: path.to_path_buf(),
        source,
    })
}

tokio::task_local! {
    static CURRENT: Arc<Record>;
}

/// How long the panic hook waits for the `Panic` stage to be written.
const PANIC_FLUSH: Duration = Duration::from_secs(1);

/// Makes a panic in a request's handler write that request's `Panic`
/// stage (a 500 `APIServer panic'd: <message>`), as upstream's panic
/// recovery does. From the panic hook, not by catching the unwind: the
/// release binary aborts on a panic (`panic = "abort"`, which takes a
/// third off its size, docs/benchmarks.md "Build"), so this is the one
/// moment the request is still in reach; a build that unwinds (the
/// tests') goes on panicking as before. Installed once, before the
/// hook that was there (the default prints the message) runs.
pub fn record_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let _ = CURRENT.try_with(|record| record.panicked(&what));
            previous(info);
        }));
    });
}

/// One request's audit record.
struct Record {
    auditor: Arc<Auditor>,
    id: String,
    uri: String,
    /// The lowercase method: a non-resource request's verb.
    method: String,
    path: String,
    user_agent: String,
    source_ips: Vec<String>,
    received: String,
    /// Upstream's message for a 401.
    auth_methods: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Who authenticated (policy is evaluated on them, as upstream).
    user: Option<UserInfo>,
    impersonated: Option<UserInfo>,
    resource: Option<ResourceRequest>,
    /// `authorization.k8s.io/decision` and `/reason`.
    decision: Option<(&'static str, String)>,
    request_object: Option<Value>,
    response_object: Option<Value>,
    /// The `Status` of a failed request.
    failure: Option<Value>,
}

struct ResourceRequest {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    /// A create's name, from its body.
    body_name: String,
}

/// Records that `user` authenticated the request.
pub(crate) fn authenticated(user: &User) {
    let _ = CURRENT.try_with(|r| {
        r.state.lock().user = Some(UserInfo {
            username: user.name.clone(),
            groups: user.groups.clone(),
        })
    });
}

/// Records whom the request acts as, when it impersonates.
pub(crate) fn impersonated(headers: &HeaderMap, user: &User) {
    if !crate::impersonation::requested(headers) {
        return;
    }
    let _ = CURRENT.try_with(|r| {
        r.state.lock().impersonated = Some(UserInfo {
            username: user.name.clone(),
            groups: user.groups.clone(),
        })
    });
}

/// The verb upstream's request info gives a resource request.
pub fn rest_verb(method: &Method, named: bool, watch: bool) -> String {
    match *method {
        Method::GET | Method::HEAD if named => "get".into(),
        Method::GET | Method::HEAD if watch => "watch".into(),
        Method::GET | Method::HEAD => "list".into(),
        Method::POST => "create".into(),
        Method::PUT => "update".into(),
        Method::PATCH => "patch".into(),
        Method::DELETE if named => "delete".into(),
        Method::DELETE => "deletecollection".into(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

/// Records what a resource request is about.
pub(crate) fn resource_request(method: &Method, watch: bool, rp: &ResourcePath) {
    resource(
        &rest_verb(method, rp.name.is_some(), watch),
        &rp.group,
        &rp.version,
        &rp.plural,
        rp.subresource.as_deref(),
        rp.namespace.as_deref(),
        rp.name.as_deref(),
    );
}

/// Records a resource request's attributes.
pub(crate) fn resource(
    verb: &str,
    group: &str,
    version: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: Option<&str>,
) {
    let _ = CURRENT.try_with(|r| {
        // A namespace's own path is in that namespace (upstream's request info).
        let namespace = match (group, resource) {
            ("", "namespaces") => name,
            _ => namespace,
        };
        r.state.lock().resource = Some(ResourceRequest {
            verb: verb.into(),
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            subresource: subresource.unwrap_or_default().into(),
            namespace: namespace.unwrap_or_default().into(),
            name: name.unwrap_or_default().into(),
            body_name: String::new(),
        })
    });
}

/// Records the authorizer's decision on the request; returns it.
pub(crate) fn decided(decision: Decision) -> Decision {
    let _ = CURRENT.try_with(|r| {
        let (what, reason) = match &decision {
            Decision::Allow => ("allow", ""),
            Decision::Deny(reason) => ("forbid", reason.as_str()),
            Decision::NoOpinion => ("forbid", ""),
        };
        r.state.lock().decision = Some((what, reason.to_string()));
    });
    decision
}

/// Records the request's body, kept only at `Request` level and above
/// (a create's name is taken from it at any level).
pub(crate) fn request_body(body: &[u8]) {
    if body.is_empty() {
        return;
    }
    let _ = CURRENT.try_with(|r| r.note_body(body));
}

fn parse_object(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body)
        .ok()
        .or_else(|| serde_yaml::from_slice(body).ok())
}

impl Record {
    fn new(auditor: Arc<Auditor>, id: String, req: &Request) -> Record {
        let headers = req.headers();
        let mut user_agent = headers
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        if user_agent.len() > MAX_USER_AGENT {
            let mut end = MAX_USER_AGENT;
            while !user_agent.is_char_boundary(end) {
                end -= 1;
            }
            user_agent.truncate(end);
            user_agent.push_str("...TRUNCATED");
        }
        let remote = req
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        Record {
            auditor,
            id,
            uri: req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into()),
            method: req.method().as_str().to_ascii_lowercase(),
            path: req.uri().path().to_string(),
            user_agent,
            source_ips: source_ips(headers, remote),
            received: event::micro_time(jiff::Timestamp::now()),
            auth_methods: auth_methods(req),
            state: Mutex::new(State::default()),
        }
    }

    fn evaluate(&self, st: &State) -> Evaluated {
        let resource = st.resource.as_ref().map(|r| policy::ResourceAttributes {
            group: &r.group,
            resource: &r.resource,
            subresource: &r.subresource,
            namespace: &r.namespace,
            name: &r.name,
        });
        self.auditor.policy.evaluate(&policy::Attributes {
            user: st
                .user
                .as_ref()
                .map(|u| (u.username.as_str(), u.groups.as_slice())),
            verb: st
                .resource
                .as_ref()
                .map(|r| r.verb.as_str())
                .unwrap_or(&self.method),
            resource,
            path: &self.path,
        })
    }

    /// Upstream's long-running requests: watches and the streaming subresources.
    fn long_running(st: &State) -> bool {
        st.resource.as_ref().is_some_and(|r| {
            r.verb == "watch"
                || matches!(
                    r.subresource.as_str(),
                    "attach" | "exec" | "proxy" | "log" | "portforward"
                )
        })
    }

    fn note_body(&self, body: &[u8]) {
        let mut st = self.state.lock();
        let eval = self.evaluate(&st);
        if eval.level == Level::None {
            return;
        }
        let names_itself = st
            .resource
            .as_ref()
            .is_some_and(|r| r.verb == "create" && r.name.is_empty());
        if eval.level < Level::Request && !names_itself {
            return;
        }
        let Some(mut object) = parse_object(body) else {
            return;
        };
        if names_itself
            && let Some(r) = st.resource.as_mut()
            && let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str)
        {
            r.body_name = name.to_string();
        }
        if eval.level >= Level::Request {
            if eval.omit_managed_fields {
                event::omit_managed_fields(&mut object);
            }
            st.request_object = Some(object);
        }
    }

    fn failed(&self, error: &ApiError) {
        let mut st = self.state.lock();
        let status = error.to_status();
        if self.evaluate(&st).level == Level::RequestResponse && !Self::long_running(&st) {
            st.response_object = Some(status.clone());
        }
        st.failure = Some(status);
    }

    /// Keeps a copy of the response's JSON body at `RequestResponse`.
    async fn capture(&self, response: Response) -> ApiResult<Response> {
        let (eval, long) = {
            let st = self.state.lock();
            (self.evaluate(&st), Self::long_running(&st))
        };
        let json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if eval.level < Level::RequestResponse
            || long
            || !json
            || response.status() == StatusCode::SWITCHING_PROTOCOLS
        {
            return Ok(response);
        }
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| ApiError::internal(format!("cannot read the response: {e}")))?;
        if let Ok(mut object) = serde_json::from_slice::<Value>(&bytes) {
            if eval.omit_managed_fields {
                event::omit_managed_fields(&mut object);
            }
            self.state.lock().response_object = Some(object);
        }
        Ok(Response::from_parts(parts, Body::from(bytes)))
    }

    /// Writes the `Panic` stage, and waits (a second at most) for it to
    /// be written out: the process aborts next.
    fn panicked(&self, what: &str) {
        // Not if the panic came while the record was held.
        let Some(st) = self.state.try_lock() else {
            return;
        };
        let eval = self.evaluate(&st);
        if eval.level == Level::None {
            return;
        }
        let status = serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("APIServer panic'd: {what}"),
            "reason": "InternalError",
            "code": 500,
        });
        self.emit(&st, &eval, Stage::RequestReceived, None);
        self.emit(&st, &eval, Stage::Panic, Some(&status));
        drop(st);
        self.auditor.writer.flush_blocking(PANIC_FLUSH);
    }

    /// Writes the events of a request answered with `response`.
    fn complete(self: Arc<Self>, response: Response) -> Response {
        let code = response.status().as_u16();
        let st = self.state.lock();
        let eval = self.evaluate(&st);
        if eval.level == Level::None {
            return response;
        }
        if st.user.is_none() && code == 401 {
            // Upstream's failed-authentication event: ResponseStarted only.
            let status = serde_json::json!({
                "metadata": {},
                "message": self.auth_methods,
                "code": 401,
            });
            self.emit(&st, &eval, Stage::ResponseStarted, Some(&status));
            return response;
        }
        let status = event::response_status(code, st.failure.as_ref());
        self.emit(&st, &eval, Stage::RequestReceived, None);
        if !Self::long_running(&st) {
            self.emit(&st, &eval, Stage::ResponseComplete, Some(&status));
            return response;
        }
        self.emit(&st, &eval, Stage::ResponseStarted, Some(&status));
        if code == 101 {
            // Upgraded: what follows is no longer HTTP.
            self.emit(&st, &eval, Stage::ResponseComplete, Some(&status));
            return response;
        }
        drop(st);
        let (parts, body) = response.into_parts();
        let guarded = Guarded {
            inner: body.into_data_stream(),
            _complete: CompleteOnDrop {
                record: self,
                eval,
                status,
            },
        };
        Response::from_parts(parts, Body::from_stream(guarded))
    }

    fn emit(&self, st: &State, eval: &Evaluated, stage: Stage, status: Option<&Value>) {
        if eval.omit_stages.contains(&stage) {
            return;
        }
        // Before the handler runs upstream: nothing it learns is known yet.
        let received = stage == Stage::RequestReceived;
        let object_ref = st.resource.as_ref().map(|r| ObjectReference {
            resource: r.resource.clone(),
            namespace: r.namespace.clone(),
            // A create's name is read from its body, after RequestReceived.
            name: if r.name.is_empty() && !received {
                r.body_name.clone()
            } else {
                r.name.clone()
            },
            api_group: r.group.clone(),
            api_version: r.version.clone(),
            subresource: r.subresource.clone(),
        });
        let mut annotations = BTreeMap::new();
        if let (false, Some((decision, reason))) = (received, &st.decision) {
            annotations.insert("authorization.k8s.io/decision".into(), decision.to_string());
            annotations.insert("authorization.k8s.io/reason".into(), reason.clone());
        }
        let anonymous = UserInfo::default();
        let stage_timestamp = if received {
            self.received.clone()
        } else {
            event::micro_time(jiff::Timestamp::now())
        };
        let event = event::Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: eval.level,
            audit_id: &self.id,
            stage,
            request_uri: &self.uri,
            verb: st
                .resource
                .as_ref()
                .map(|r| r.verb.as_str())
                .unwrap_or(&self.method),
            user: st.user.as_ref().unwrap_or(&anonymous),
            impersonated_user: st.impersonated.as_ref().filter(|_| !received),
            source_ips: &self.source_ips,
            user_agent: &self.user_agent,
            object_ref: object_ref.as_ref(),
            response_status: status,
            request_object: st
                .request_object
                .as_ref()
                .filter(|_| !received && eval.level >= Level::Request),
            response_object: st.response_object.as_ref().filter(|_| {
                stage == Stage::ResponseComplete && eval.level >= Level::RequestResponse
            }),
            request_received_timestamp: &self.received,
            stage_timestamp: &stage_timestamp,
            annotations: &annotations,
        };
        match event.to_line() {
            Ok(line) => self.auditor.writer.send(line),
            Err(error) => warn!(%error, audit_id = %self.id, "cannot encode an audit event"),
        }
    }
}

/// The addresses a request came from: `X-Forwarded-For` (or
/// `X-Real-Ip`), then the peer, as upstream lists them.
fn source_ips(headers: &HeaderMap, remote: Option<IpAddr>) -> Vec<String> {
    let mut ips: Vec<IpAddr> = headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .filter_map(|ip| ip.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if ips.is_empty()
        && let Some(ip) = headers
            .get("x-real-ip")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
    {
        ips.push(ip);
    }
    if let Some(remote) = remote
        && ips.last() != Some(&remote)
    {
        ips.push(remote);
    }
    ips.iter().map(IpAddr::to_string).collect()
}

/// Upstream's message for a request whose credentials were refused.
fn auth_methods(req: &Request) -> String {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let scheme = authorization.split_once(' ').map(|(s, _)| s);
    let mut attempted = Vec::new();
    if scheme == Some("basic") {
        attempted.push("basic");
    }
    if scheme == Some("bearer") {
        attempted.push("bearer");
    }
    if crate::request::Query::parse(req.uri().query())
        .get("access_token")
        .is_some_and(|t| !t.is_empty())
    {
        attempted.push("access_token");
    }
    if req
        .extensions()
        .get::<Arc<crate::client_cert::ClientCertificate>>()
        .is_some()
    {
        attempted.push("x509");
    }
    if attempted.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", attempted.join(", "))
    }
}

/// A request's audit ID and, when auditing, its record.
pub(crate) struct Audited {
    id: String,
    record: Option<Arc<Record>>,
}

impl Audited {
    /// The request's audit ID (its `Audit-ID` header or a new UUID) and,
    /// with an auditor, its record.
    pub(crate) fn begin(auditor: Option<&Arc<Auditor>>, req: &Request) -> Audited {
        let id = req
            .headers()
            .get(AUDIT_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let record = auditor.map(|a| Arc::new(Record::new(a.clone(), id.clone(), req)));
        Audited { id, record }
    }

    /// The request's audit ID, as answered in its `Audit-ID` header.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Runs `route` with the record in reach of its notes (and of the
    /// panic hook, [`record_panics`], which writes the `Panic` stage if
    /// it panics).
    pub(crate) async fn route(
        &self,
        route: impl Future<Output = ApiResult<Response>>,
    ) -> ApiResult<Response> {
        let Some(record) = &self.record else {
            return route.await;
        };
        match CURRENT.scope(record.clone(), route).await {
            Err(error) => {
                record.failed(&error);
                Err(error)
            }
            Ok(response) => record.capture(response).await,
        }
    }

    /// Sets `Audit-ID` and writes the request's events (a long-running
    /// one's last when its body ends).
    pub(crate) fn finish(&self, mut response: Response) -> Response {
        if !response.headers().contains_key(AUDIT_ID)
            && let Ok(id) = HeaderValue::from_str(&self.id)
        {
            response.headers_mut().insert(AUDIT_ID, id);
        }
        match &self.record {
            Some(record) => record.clone().complete(response),
            None => response,
        }
    }
}

/// Writes `ResponseComplete` when a long-running response's body is done
/// (sent, or dropped with its connection).
struct CompleteOnDrop {
    record: Arc<Record>,
    eval: Evaluated,
    status: Value,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        let st = self.record.state.lock();
        self.record
            .emit(&st, &self.eval, Stage::ResponseComplete, Some(&self.status));
    }
}

struct Guarded {
    inner: axum::body::BodyDataStream,
    _complete: CompleteOnDrop,
}

impl futures::Stream for Guarded {
    type Item = Result<bytes::Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ips_as_upstream_lists_them() {
        let mut headers = HeaderMap::new();
        let peer: IpAddr = [10, 0, 0, 9].into();
        assert_eq!(source_ips(&headers, Some(peer)), vec!["10.0.0.9"]);
        headers.insert("x-real-ip", HeaderValue::from_static("192.0.2.1"));
        assert_eq!(
            source_ips(&headers, Some(peer)),
            vec!["192.0.2.1", "10.0.0.9"]
        );
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.5, 10.0.0.9"),
        );
        assert_eq!(
            source_ips(&headers, Some(peer)),
            vec!["203.0.113.5", "10.0.0.9"]
        );
    }

    const EVERYTHING: &str =
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: RequestResponse}]\n";

    fn auditor(policy: &str) -> (Arc<Auditor>, Arc<Mutex<Vec<u8>>>) {
        let memory = Arc::new(Mutex::new(Vec::new()));
        let policy = Policy::parse(policy).expect("policy");
        let auditor = Auditor::with_sink(policy, Sink::Memory(memory.clone())).expect("auditor");
        (auditor, memory)
    }

    async fn written(auditor: &Auditor, memory: &Mutex<Vec<u8>>) -> Vec<Value> {
        auditor.flush().await;
        String::from_utf8_lossy(&memory.lock())
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect()
    }

    fn stages(events: &[Value]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e["stage"].as_str().unwrap_or_default())
            .collect()
    }

    fn request(method: Method, uri: &str) -> Request {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::USER_AGENT, "test")
            .body(Body::empty())
            .expect("request")
    }

    fn admin() -> User {
        User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        }
    }

    #[tokio::test]
    async fn a_long_running_response_completes_when_its_body_ends() {
        let (auditor, memory) = auditor(EVERYTHING);
        let req = request(Method::GET, "/api/v1/namespaces/a/pods?watch=true");
        let audited = Audited::begin(Some(&auditor), &req);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<bytes::Bytes, std::io::Error>>();
        let response = audited
            .route(async move {
                authenticated(&admin());
                resource("watch", "", "v1", "pods", None, Some("a"), None);
                decided(Decision::Allow);
                Ok(Response::new(Body::from_stream(rx)))
            })
            .await
            .expect("answered");
        let response = audited.finish(response);
        let events = written(&auditor, &memory).await;
        assert_eq!(stages(&events), ["RequestReceived", "ResponseStarted"]);
        assert_eq!(
            response
                .headers()
                .get(AUDIT_ID)
                .and_then(|v| v.to_str().ok()),
            events[0]["auditID"].as_str()
        );
        let _ = tx.unbounded_send(Ok(bytes::Bytes::from_static(b"{}\n")));
        drop(tx);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        assert_eq!(&body[..], b"{}\n");
        let events = written(&auditor, &memory).await;
        assert_eq!(
            stages(&events),
            ["RequestReceived", "ResponseStarted", "ResponseComplete"]
        );
        let done = &events[2];
        assert_eq!(done["verb"], "watch");
        assert_eq!(done["responseStatus"]["code"], 200);
        assert!(done.get("responseObject").is_none(), "{done}");
        assert_eq!(
            done["annotations"]["authorization.k8s.io/decision"],
            "allow"
        );
    }

    fn boom() -> ApiResult<Response> {
        panic!("boom")
    }

    /// The panic hook writes the stage; the test build unwinds, so the
    /// panic goes on to the caller (the release binary aborts instead).
    #[tokio::test]
    async fn a_panic_is_recorded_and_goes_on() {
        use futures::FutureExt;
        let (auditor, memory) = auditor(EVERYTHING);
        let req = request(Method::GET, "/api/v1/namespaces/a/configmaps/x");
        let audited = Audited::begin(Some(&auditor), &req);
        let outcome = std::panic::AssertUnwindSafe(audited.route(async {
            authenticated(&admin());
            resource("get", "", "v1", "configmaps", None, Some("a"), Some("x"));
            boom()
        }))
        .catch_unwind()
        .await;
        assert!(outcome.is_err(), "the panic goes on");
        let events = written(&auditor, &memory).await;
        assert_eq!(stages(&events), ["RequestReceived", "Panic"]);
        assert_eq!(events[1]["responseStatus"]["code"], 500);
        assert_eq!(
            events[1]["responseStatus"]["message"],
            "APIServer panic'd: boom"
        );
    }

    #[tokio::test]
    async fn refused_credentials_get_one_response_started_event_without_a_user() {
        let (auditor, memory) = auditor(EVERYTHING);
        let mut req = request(Method::GET, "/api/v1/pods");
        req.headers_mut().insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer nope"),
        );
        let audited = Audited::begin(Some(&auditor), &req);
        let unauthorized = ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
        let error = audited
            .route(async { Err(unauthorized) })
            .await
            .expect_err("refused");
        audited.finish(axum::response::IntoResponse::into_response(error));
        let events = written(&auditor, &memory).await;
        assert_eq!(stages(&events), ["ResponseStarted"]);
        assert_eq!(events[0]["user"], serde_json::json!({}));
        assert_eq!(
            events[0]["responseStatus"],
            serde_json::json!({"metadata": {}, "message": "Authentication failed, attempted: bearer", "code": 401})
        );
    }

    #[tokio::test]
    async fn secret_bodies_stay_out_and_managed_fields_go() {
        let (auditor, memory) = auditor(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitManagedFields: true\nrules: [{level: RequestResponse}]\n",
        );
        for (resource, body) in [
            (
                "secrets",
                r#"{"metadata":{"name":"s"},"data":{"p":"c2VjcmV0LXZhbHVl"}}"#,
            ),
            (
                "configmaps",
                r#"{"metadata":{"name":"c","managedFields":[{"manager":"m"}]},"data":{"k":"v"}}"#,
            ),
        ] {
            let req = request(Method::POST, &format!("/api/v1/namespaces/a/{resource}"));
            let audited = Audited::begin(Some(&auditor), &req);
            let response = audited
                .route(async {
                    authenticated(&admin());
                    resource_request(
                        &Method::POST,
                        false,
                        &ResourcePath {
                            group: String::new(),
                            version: "v1".into(),
                            namespace: Some("a".into()),
                            plural: resource.into(),
                            name: None,
                            subresource: None,
                        },
                    );
                    request_body(body.as_bytes());
                    Ok(axum::response::IntoResponse::into_response((
                        StatusCode::CREATED,
                        [(header::CONTENT_TYPE, "application/json")],
                        body.to_string(),
                    )))
                })
                .await
                .expect("answered");
            audited.finish(response);
        }
        let events = written(&auditor, &memory).await;
        let text = serde_json::to_string(&events).unwrap_or_default();
        assert!(!text.contains("c2VjcmV0LXZhbHVl"), "{text}");
        assert!(!text.contains("managedFields"), "{text}");
        assert_eq!(events.len(), 4);
        assert_eq!(events[1]["level"], "Metadata");
        assert_eq!(events[1]["objectRef"]["name"], "s");
        assert_eq!(events[3]["level"], "RequestResponse");
        assert_eq!(events[3]["requestObject"]["data"]["k"], "v");
        assert_eq!(events[3]["responseObject"]["metadata"]["name"], "c");
    }

    #[test]
    fn without_an_auditor_the_audit_id_is_still_answered() {
        let mut req = request(Method::GET, "/version");
        let audited = Audited::begin(None, &req);
        let response = audited.finish(Response::new(Body::empty()));
        let id = response.headers().get(AUDIT_ID).expect("Audit-ID");
        assert!(uuid::Uuid::parse_str(id.to_str().unwrap_or_default()).is_ok());
        req.headers_mut()
            .insert(AUDIT_ID, HeaderValue::from_static("mine"));
        let response = Audited::begin(None, &req).finish(Response::new(Body::empty()));
        assert_eq!(
            response.headers().get(AUDIT_ID),
            Some(&HeaderValue::from_static("mine"))
        );
    }

    #[test]
    fn rest_verbs() {
        assert_eq!(rest_verb(&Method::GET, false, true), "watch");
        assert_eq!(rest_verb(&Method::GET, true, false), "get");
        assert_eq!(rest_verb(&Method::GET, false, false), "list");
        assert_eq!(rest_verb(&Method::DELETE, false, false), "deletecollection");
        assert_eq!(rest_verb(&Method::OPTIONS, false, false), "options");
    }
}
