//! The HTTP front: routing of non-resource paths (health, version,
//! discovery, OpenAPI) and dispatch of resource requests to the handlers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use flotilla_store::Store;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use parking_lot::RwLock;
use serde_json::Value;
use tracing::{Instrument, debug, info};

use crate::auth::Authenticator;
use crate::authz::Decision;
use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::handlers::{self, Ctx};
use crate::kinds::ServedBy;
use crate::openapi::OpenApi;
use crate::request::{self, Query};
use crate::resources::Registry;
use crate::version;

pub use crate::config::{Config, MetricsSource};
pub use crate::state::ApiServer;
pub use crate::storage::Storage;

/// How long in-flight requests (watches included) get to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl ApiServer {
    /// Serves `clusters/NAME/proxy/...` through `proxy` (once).
    pub fn set_cluster_proxy(&self, proxy: Arc<dyn crate::cluster_proxy::ClusterProxy>) {
        let _ = self.cluster_proxy.set(proxy);
    }

    /// Serves a review kind the embedding process answers: a POST of it
    /// is authorised as `create` on its resource and answered by
    /// `review`, and nothing is stored.
    pub fn add_review(&self, review: Arc<dyn crate::embedded_review::EmbeddedReview>) {
        let resource = crate::embedded_review::resource_of(review.as_ref());
        self.embedded_reviews
            .write()
            .insert(resource.plural.clone(), review);
        self.registry.add_computed(resource);
    }

    /// Serves `metrics.k8s.io` from `source` (once), as metrics-server
    /// would behind the aggregator.
    pub fn set_resource_metrics(&self, source: Arc<dyn crate::resource_metrics::ResourceMetrics>) {
        if self.resource_metrics.set(source).is_ok() {
            for r in crate::resource_metrics::resources() {
                self.registry.add_computed(r);
            }
        }
    }

    /// Creates the server over `store`: ensures the system namespaces and
    /// serves the CRDs already stored.
    pub async fn new(store: Arc<dyn Store>, config: Config) -> Result<Arc<Self>, ApiError> {
        let key = config.token_key.unwrap_or_else(rand::random);
        let tokens = Arc::new(crate::tokens::Signer::new(&key));
        let storage = Arc::new(Storage {
            store,
            registry: Arc::new(Registry::new()),
            tokens: tokens.clone(),
            service_allocation: tokio::sync::Mutex::new(()),
            namespaces: Default::default(),
            kubelet: Default::default(),
            kubelet_connect_only: Default::default(),
            mutating_admission: Default::default(),
            extensions: Default::default(),
            rbac: Default::default(),
            quotas: Default::default(),
            config,
        });
        let config = &storage.config;
        let api = Arc::new(ApiServer {
            storage: storage.clone(),
            openapi: OpenApi::default(),
            discovery: discovery::AggregatedCache::default(),
            authenticator: config.admin_token.as_deref().map(|admin| {
                Authenticator::new(
                    admin,
                    &config.component_identities,
                    config.static_tokens.clone(),
                    tokens.clone(),
                )
            }),
            address: RwLock::new(String::new()),
            keeps_kubernetes_service: Default::default(),
            stopping: tokio::sync::watch::channel(false).0,
            resource_metrics: Default::default(),
            cluster_proxy: Default::default(),
            embedded_reviews: Default::default(),
        });
        crate::crd::restore(&api)?;
        crate::crd::spawn_follower(storage.clone());
        crate::bootstrap::system_objects(&api).await?;
        crate::rbac::index::load(&api.rbac, api.store.as_ref())?;
        tokio::spawn(crate::rbac::index::follow(
            api.rbac.clone(),
            api.store.clone(),
        ));
        crate::rbac::aggregation::spawn(storage.clone());
        crate::rbac::bootstrap::reconcile(&storage).await?;
        crate::namespace::resume_terminating(&storage);
        crate::namespace::active::spawn_follower(storage.clone());
        crate::gc::spawn(storage.clone());
        crate::serviceaccounts::spawn(storage.clone());
        crate::token_secrets::spawn(storage.clone());
        crate::apiservices::spawn(storage.clone());
        crate::admission::spawn_quota_index(
            api.store.clone(),
            api.registry.clone(),
            api.quotas.clone(),
        );
        crate::admission::spawn_status(api.store.clone(), api.registry.clone());
        crate::eviction::spawn_status(storage.clone());
        crate::csr::spawn_signer(storage.clone());
        Ok(api)
    }

    /// The request allowed, or upstream's 403.
    pub fn check(&self, user: &crate::user::User, a: &crate::authz::Attributes) -> ApiResult<()> {
        match crate::audit::decided(self.authorize(user, a)) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(a.forbidden(user, &reason)),
            Decision::NoOpinion => Err(a.forbidden(user, "")),
        }
    }

    /// [`ApiServer::check`] for a non-resource path.
    pub fn check_path(&self, user: &crate::user::User, verb: &str, path: &str) -> ApiResult<()> {
        match crate::audit::decided(self.authorize_path(user, verb, path)) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(crate::authz::forbidden_path(user, verb, path, &reason)),
            Decision::NoOpinion => Err(crate::authz::forbidden_path(user, verb, path, "")),
        }
    }

    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .fallback(dispatch)
            .with_state(self.clone())
    }

    /// Ends every watch it serves, now and from now on (the server is
    /// stopping).
    pub fn end_watches(&self) {
        self.stopping.send_replace(true);
    }

    /// Serves on `listener` until `shutdown` resolves: HTTPS when `tls` is
    /// given, plain HTTP otherwise.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let handle = axum_server::Handle::new();
        let on_shutdown = handle.clone();
        let api = self.clone();
        tokio::spawn(async move {
            shutdown.await;
            api.end_watches();
            on_shutdown.graceful_shutdown(Some(SHUTDOWN_GRACE));
        });
        self.serve_with_handle(listener, tls, handle).await
    }

    /// Serves on `listener` until `handle` shuts the server down; callers
    /// that must drop every connection at once (fault injection) use this.
    pub async fn serve_with_handle(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        handle: axum_server::Handle<SocketAddr>,
    ) -> std::io::Result<()> {
        let addr: SocketAddr = listener.local_addr()?;
        *self.address.write() = addr.to_string();
        if !self
            .keeps_kubernetes_service
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            crate::bootstrap::spawn_kubernetes_service(self.clone(), addr.port());
        }
        let listener = listener.into_std()?;
        let app = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        let audit = self.config.audit.clone();
        let served = match tls {
            Some(config) => {
                info!(%addr, "API server listening (https)");
                // Reads the client certificate each handshake verified.
                let acceptor = crate::client_cert::ClientCertAcceptor::new(config);
                axum_server::from_tcp(listener)?
                    .acceptor(acceptor)
                    .handle(handle)
                    .serve(app)
                    .await
            }
            None => {
                info!(%addr, "API server listening (http)");
                axum_server::from_tcp(listener)?
                    .acceptor(axum_server::accept::NoDelayAcceptor::new())
                    .handle(handle)
                    .serve(app)
                    .await
            }
        };
        if let Some(audit) = audit {
            audit.flush().await;
        }
        served
    }
}

async fn dispatch(State(api): State<Arc<ApiServer>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let audit = crate::audit::Audited::begin(api.config.audit.as_ref(), &req);
    // What a request is, for everything logged while it is served; route
    // fills in who asks and what once it knows.
    let span = tracing::info_span!(
        "request",
        %method,
        %path,
        audit_id = %audit.id(),
        user = tracing::field::Empty,
        verb = tracing::field::Empty,
        resource = tracing::field::Empty,
        namespace = tracing::field::Empty,
    );
    let served = async {
        match crate::codec::incoming(req).await {
            Ok((req, protobuf)) => {
                let response = audit
                    .route(route(api, req))
                    .await
                    .unwrap_or_else(|e| e.into_response());
                match protobuf {
                    Some(how) => crate::codec::outgoing(response, how).await,
                    None => response,
                }
            }
            Err(e) => e.into_response(),
        }
    };
    let response = audit.finish(served.instrument(span.clone()).await);
    span.in_scope(|| {
        debug!(
            status = response.status().as_u16(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "request"
        );
    });
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A public page, with its own headers, or a redirect.
fn public_answer(answer: crate::config::PublicAnswer) -> Response {
    match answer {
        crate::config::PublicAnswer::Page {
            content_type,
            body,
            headers,
        } => {
            let mut response =
                (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response();
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        crate::config::PublicAnswer::Redirect(to) => {
            (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, to)]).into_response()
        }
    }
}

fn text(body: &'static str) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The verb a proxied request is authorised as: its method's.
fn proxy_verb(method: &Method) -> crate::authz::Verb {
    use crate::authz::Verb;
    match *method {
        Method::GET | Method::HEAD => Verb::Get,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => Verb::Delete,
        ref other => Verb::Other(other.as_str().to_ascii_lowercase()),
    }
}

/// `nodes/NAME/proxy/...` as kube-apiserver authorises it: the verb of
/// the method on the `nodes/proxy` subresource.
fn authorize_node_proxy(
    api: &ApiServer,
    user: &crate::user::User,
    node: &str,
    method: &Method,
) -> ApiResult<()> {
    let verb = proxy_verb(method);
    crate::audit::resource(
        verb.as_str(),
        "",
        "v1",
        "nodes",
        Some("proxy"),
        None,
        Some(node),
    );
    api.check(
        user,
        &crate::authz::Attributes {
            verb,
            group: "",
            resource: "nodes",
            subresource: Some("proxy"),
            namespace: None,
            path_name: Some(node),
            field_selector: None,
            body: &[],
        },
    )
}

/// `clusters/NAME/proxy/...`: authorised as that subresource, then handed
/// to the control plane's proxy.
async fn proxy_to_member(
    api: &Arc<ApiServer>,
    proxy: Arc<dyn crate::cluster_proxy::ClusterProxy>,
    user: Option<&crate::user::User>,
    cluster: &str,
    member_path: String,
    mut parts: http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    let upgrading = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let body = if upgrading {
        drop(body);
        bytes::Bytes::new()
    } else {
        request::read_body(body).await?
    };
    if let Some(user) = user {
        let verb = proxy_verb(&parts.method);
        crate::audit::resource(
            verb.as_str(),
            "cluster.karmada.io",
            "v1alpha1",
            "clusters",
            Some("proxy"),
            None,
            Some(cluster),
        );
        api.check(
            user,
            &crate::authz::Attributes {
                verb,
                group: "cluster.karmada.io",
                resource: "clusters",
                subresource: Some("proxy"),
                namespace: None,
                path_name: Some(cluster),
                field_selector: None,
                body: &body,
            },
        )?;
    }
    let upgrade = if upgrading {
        use axum::extract::FromRequestParts;
        axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &())
            .await
            .ok()
    } else {
        None
    };
    let path_and_query = match parts.uri.query() {
        Some(q) => format!("{member_path}?{q}"),
        None => member_path,
    };
    proxy
        .proxy(
            cluster,
            crate::cluster_proxy::ProxyRequest {
                method: parts.method,
                path_and_query,
                headers: parts.headers,
                body,
                upgrade,
            },
        )
        .await
}

/// The verb a resource request is authorized and logged as, as
/// upstream's request info names it.
fn request_verb(method: &Method, rp: &request::ResourcePath, watch: bool) -> crate::authz::Verb {
    use crate::authz::Verb;
    // Running something in a pod is creating, whichever the method.
    if let Some("exec" | "attach" | "portforward") = rp.subresource.as_deref() {
        return Verb::Create;
    }
    match (method, rp.name.is_some()) {
        (&Method::GET | &Method::HEAD, false) if watch => Verb::Watch,
        (&Method::GET | &Method::HEAD, false) => Verb::List,
        (&Method::GET | &Method::HEAD, true) => Verb::Get,
        (&Method::POST, _) => Verb::Create,
        (&Method::PUT, _) => Verb::Update,
        (&Method::PATCH, _) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        (other, _) => Verb::Other(other.as_str().to_ascii_lowercase()),
    }
}

/// The authentication filters: who sent the request (anonymous when no
/// credential is given), recorded in the audit event and the span, then
/// whom it acts as when it impersonates (403 when it may not). None
/// where the server runs without authentication (the library's tests).
fn authenticate(
    api: &ApiServer,
    parts: &http::request::Parts,
) -> ApiResult<Option<crate::user::User>> {
    let Some(authenticator) = &api.authenticator else {
        return Ok(None);
    };
    let requester = authenticator
        .authenticate(api.store.as_ref(), &parts.headers, &parts.extensions)?
        .unwrap_or_else(crate::user::User::anonymous);
    crate::audit::authenticated(&requester);
    let user = crate::impersonation::resolve(&|u, a| api.check(u, a), requester, &parts.headers)?;
    crate::audit::impersonated(&parts.headers, &user);
    tracing::Span::current().record("user", tracing::field::display(&user.name));
    Ok(Some(user))
}

/// The authorization filter for a non-resource path: its verb is the
/// method's, GET and HEAD being `get`.
fn authorize_path(
    api: &ApiServer,
    user: &crate::user::User,
    parts: &http::request::Parts,
) -> ApiResult<()> {
    let verb = match parts.method {
        Method::GET | Method::HEAD => "get".to_string(),
        ref other => other.as_str().to_ascii_lowercase(),
    };
    let shown = if parts.uri.path().is_empty() {
        "/"
    } else {
        parts.uri.path()
    };
    api.check_path(user, &verb, shown)
}

/// The non-resource paths the server answers itself: version, metrics,
/// discovery and OpenAPI; None for any other path.
fn non_resource(
    api: &ApiServer,
    segs: &[&str],
    headers: &HeaderMap,
    query: &Query,
    is_get: bool,
) -> Option<ApiResult<Response>> {
    match segs {
        ["version"] if is_get => Some(Ok(json_response(StatusCode::OK, &version::info()))),
        ["metrics"] if is_get && api.config.metrics.is_some() => {
            let mut body = api.config.metrics.as_ref().map(|m| m()).unwrap_or_default();
            if let Some(stats) = api.store.writer_stats() {
                body = crate::storage_metrics::append(body, &stats);
            }
            Some(Ok((
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                body,
            )
                .into_response()))
        }
        ["api"] if is_get => Some(Ok(if request::wants_aggregated_discovery(headers) {
            aggregated(headers, api.discovery.document(&api.registry, true))
        } else {
            json_response(
                StatusCode::OK,
                &discovery::api_versions(&api.address.read()),
            )
        })),
        ["apis"] if is_get => Some(Ok(if request::wants_aggregated_discovery(headers) {
            aggregated(headers, api.discovery.document(&api.registry, false))
        } else {
            json_response(StatusCode::OK, &discovery::api_group_list(&api.registry))
        })),
        ["api", version] if is_get => Some(
            discovery::resource_list(&api.registry, "", version)
                .map(|v| json_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["apis", group] if is_get => Some(
            discovery::group(&api.registry, group)
                .map(|v| json_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["apis", group, version] if is_get => Some(
            discovery::resource_list(&api.registry, group, version)
                .map(|v| json_response(StatusCode::OK, &v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["openapi", "v2"] if is_get => {
            let crate::openapi::V2 { json, protobuf } = api.openapi.v2(&api.registry);
            let accept = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let (content_type, body) = if accept.contains(flotilla_protobuf::OPENAPI_V2_MEDIA_TYPE)
                || accept.contains(flotilla_protobuf::OPENAPI_V2_CONTENT_TYPE)
            {
                (flotilla_protobuf::OPENAPI_V2_CONTENT_TYPE, protobuf)
            } else {
                ("application/json", json)
            };
            Some(Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, content_type)],
                (*body).clone(),
            )
                .into_response()))
        }
        ["openapi", "v3"] if is_get => {
            let index = api.openapi.index(&api.registry);
            Some(Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                (*index).clone(),
            )
                .into_response()))
        }
        ["openapi", "v3", rest @ ..] if is_get => {
            let doc_path = rest.join("/");
            let found = api
                .openapi
                .document(&api.registry, &doc_path)
                .ok_or_else(ApiError::path_not_found);
            let (hash, doc) = match found {
                Ok(found) => found,
                Err(error) => return Some(Err(error)),
            };
            let cache = if query.get("hash") == Some(hash.as_str()) {
                "public, immutable, max-age=31536000"
            } else {
                "no-cache, private"
            };
            let mut resp = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                (*doc).clone(),
            )
                .into_response();
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
            if let Ok(etag) = HeaderValue::from_str(&format!("\"{hash}\"")) {
                resp.headers_mut().insert(header::ETAG, etag);
            }
            Some(Ok(resp))
        }
        _ => None,
    }
}

/// Every request, in the order of upstream's handler chain:
/// authentication (with impersonation and its audit), the answers by
/// path (health, the cluster proxy, discovery, OpenAPI) authorized by
/// path, then a resource request resolved against the registry, its body
/// read, authorized and dispatched.
async fn route(api: Arc<ApiServer>, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let query = Query::parse(parts.uri.query());
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let is_get = parts.method == Method::GET || parts.method == Method::HEAD;

    if is_get
        && let Some(answer) = api
            .config
            .public_pages
            .as_ref()
            .and_then(|p| p(parts.uri.path()))
    {
        return Ok(public_answer(answer));
    }
    let user = authenticate(&api, &parts)?;
    // Discovery, health, version, metrics, OpenAPI: authorized by path.
    let resource_path = matches!(segs.as_slice(), ["api", _, _, ..] | ["apis", _, _, _, ..]);
    if let Some(user) = user.as_ref().filter(|_| !resource_path) {
        authorize_path(&api, user, &parts)?;
    }
    if let ["healthz" | "livez" | "readyz", ..] = segs.as_slice()
        && is_get
    {
        return Ok(text("ok"));
    }
    if let (Some(proxy), Some((cluster, member_path))) =
        (api.cluster_proxy.get(), crate::cluster_proxy::parse(&segs))
    {
        return proxy_to_member(
            &api,
            proxy.clone(),
            user.as_ref(),
            cluster,
            member_path,
            parts,
            body,
        )
        .await;
    }
    if let Some((node, kubelet_path)) = crate::node_proxy::parse(&segs) {
        if let Some(user) = &user {
            authorize_node_proxy(&api, user, node, &parts.method)?;
        }
        return crate::node_proxy::serve(&api, node, kubelet_path, &parts.method).await;
    }
    if let Some(answer) = non_resource(&api, &segs, &parts.headers, &query, is_get) {
        return answer;
    }
    if let ["debug", "failpoints", rest @ ..] = segs.as_slice()
        && flotilla_failpoint::runtime_control_enabled()
    {
        return crate::failpoints::answer(&parts.method, rest, body).await;
    }

    let target = resolve(&api, &segs, &parts.method, query.flag("watch"))?;
    let body = read_body(&parts.method, body).await?;
    if let Some(user) = &user {
        authorize(&api, user, &target, &query, &body)?;
    }
    serve_resource(api, target, parts, query, user, body).await
}

/// A resource request resolved against the registry.
struct Target {
    resource: Arc<crate::resources::ResourceInfo>,
    path: request::ResourcePath,
    verb: crate::authz::Verb,
    /// Which part of the server answers a kind's own subresource.
    served_by: Option<ServedBy>,
}

/// Resolves `/api/...` or `/apis/...` to a served resource (404 for any
/// other), records it in the audit event and the request's span, and
/// finds which part of the server answers its subresource.
fn resolve(api: &ApiServer, segs: &[&str], method: &Method, watch: bool) -> ApiResult<Target> {
    let (group, version, rest) = match segs {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::path_not_found()),
    };
    if !api.registry.has_group_version(group, version) {
        return Err(ApiError::path_not_found());
    }
    let registry = &api.registry;
    let rp = request::parse_resource_path(group, version, rest, &|plural| {
        registry
            .get(group, version, plural)
            .is_some_and(|r| r.namespaced)
    })
    .ok_or_else(ApiError::path_not_found)?;
    crate::audit::resource_request(method, watch, &rp);
    let verb = request_verb(method, &rp, watch);
    let span = tracing::Span::current();
    span.record("verb", tracing::field::display(verb.as_str()));
    span.record(
        "resource",
        tracing::field::display(match &rp.subresource {
            Some(sub) => format!("{}/{sub}", rp.plural),
            None => rp.plural.clone(),
        }),
    );
    if let Some(ns) = &rp.namespace {
        span.record("namespace", tracing::field::display(ns));
    }
    let resource = api
        .registry
        .get(group, version, &rp.plural)
        .ok_or_else(ApiError::path_not_found)?;
    if rp.namespace.is_some() && !resource.namespaced {
        return Err(ApiError::path_not_found());
    }
    if let Some(ns) = &rp.namespace
        && rp.name.is_none()
        && ns.is_empty()
    {
        return Err(ApiError::path_not_found());
    }
    // Which part of the server answers a kind's own subresource.
    let mut served_by = None;
    match rp.subresource.as_deref() {
        None => {}
        Some("status") if resource.status_subresource => {}
        Some("finalize") if resource.is_namespace() && method == Method::PUT => {}
        Some("scale") if resource.scale.is_some() => {}
        Some(sub)
            if method == Method::POST && api.extensions.subresource(&resource, sub).is_some() =>
        {
            served_by = Some(ServedBy::Extension);
        }
        Some(sub) => {
            let own = crate::kinds::strategy(&resource)
                .subresources()
                .iter()
                .find(|s| s.name == sub && s.methods.allow(method))
                .ok_or_else(ApiError::path_not_found)?;
            if own.served_by == ServedBy::Kubelet && api.kubelet.get().is_none() {
                // No kubelet runs containers behind this API: say so plainly.
                let name = rp.name.as_deref().unwrap_or_default();
                return Err(ApiError::bad_request(format!(
                    "{} \"{name}\" has no container runtime behind it: {sub} is not available on this cluster (Flotilla serves the Kubernetes API; look at the pod's status and events instead)",
                    resource.plural
                )));
            }
            served_by = Some(own.served_by);
        }
    }

    Ok(Target {
        resource,
        path: rp,
        verb,
        served_by,
    })
}

/// A write's body (recorded in the audit event); reads have none.
async fn read_body(method: &Method, body: Body) -> ApiResult<Vec<u8>> {
    if matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        let bytes = request::read_body(body).await?;
        crate::audit::request_body(&bytes);
        Ok(bytes.to_vec())
    } else {
        Ok(Vec::new())
    }
}

/// The authorization filter for a resource request.
fn authorize(
    api: &ApiServer,
    user: &crate::user::User,
    target: &Target,
    query: &Query,
    body: &[u8],
) -> ApiResult<()> {
    let (resource, rp) = (&target.resource, &target.path);
    api.check(
        user,
        &crate::authz::Attributes {
            verb: target.verb.clone(),
            group: &resource.group,
            resource: &resource.plural,
            subresource: rp.subresource.as_deref(),
            // A namespace's own path is in that namespace, as upstream's
            // request info has it: a namespace admin may read it.
            namespace: if resource.is_namespace() {
                rp.name.as_deref()
            } else {
                rp.namespace.as_deref()
            },
            path_name: rp.name.as_deref(),
            field_selector: query.get("fieldSelector"),
            body,
        },
    )
}

/// Hands a resolved, authorized request to what serves it: a computed
/// resource, the kubelet's connect subresources, a kind's own
/// subresource, or the generic handlers.
async fn serve_resource(
    api: Arc<ApiServer>,
    target: Target,
    mut parts: http::request::Parts,
    query: Query,
    user: Option<crate::user::User>,
    body: Vec<u8>,
) -> ApiResult<Response> {
    let Target {
        resource,
        path: rp,
        served_by,
        ..
    } = target;
    let connect = match (served_by, api.kubelet.get()) {
        (Some(ServedBy::Kubelet), Some(k)) => Some(k.clone()),
        _ => None,
    };
    // The connect subresources upgrade: to a WebSocket, or (kubectl's
    // port-forward) to SPDY/3.1 on the raw connection.
    let spdy_requested = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("spdy/"));
    let spdy = if connect.is_some() && spdy_requested {
        parts.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let upgrade = if connect.is_some() && !spdy_requested {
        use axum::extract::FromRequestParts;
        axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &())
            .await
            .ok()
    } else {
        None
    };
    let ctx = Ctx {
        api: api.clone(),
        resource,
        namespace: rp.namespace,
        name: rp.name,
        subresource: rp.subresource,
        query,
        headers: parts.headers,
        user,
    };
    if let Some(computed) = ctx.resource.computed {
        use crate::resources::Computed;
        let not_allowed = || {
            ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )
        };
        return match (computed, &parts.method, ctx.name.is_some()) {
            (Computed::Review, &Method::POST, false) => crate::reviews::create(&ctx, &body).await,
            (Computed::Binding, &Method::POST, false) => {
                // `POST namespaces/NS/bindings` names its pod in the body.
                let binding = request::parse_body(&ctx.headers, &body)?;
                let pod = crate::objects::meta_str(&binding, "name").to_string();
                let pods = api
                    .registry
                    .get("", "v1", "pods")
                    .ok_or_else(ApiError::path_not_found)?;
                let ctx = Ctx {
                    resource: pods,
                    name: Some(pod),
                    subresource: Some("binding".into()),
                    ..ctx
                };
                handlers::bind(&ctx, &body).await
            }
            (Computed::ComponentStatus, &Method::GET, _) => crate::componentstatus::get(&ctx).await,
            (Computed::Metrics, method, _) => {
                crate::resource_metrics::handler::serve(&ctx, method).await
            }
            _ => Err(not_allowed()),
        };
    }
    if let Some(kubelet) = connect {
        return crate::connect::serve(&ctx, kubelet, parts.uri.query(), upgrade, spdy).await;
    }
    match served_by {
        Some(ServedBy::Token) => return crate::reviews::token_request(&ctx, &body).await,
        Some(ServedBy::Eviction) => return crate::eviction::evict(&ctx, &body).await,
        Some(ServedBy::Binding) => return handlers::bind(&ctx, &body).await,
        Some(ServedBy::Extension) => return handlers::serve_extension(&ctx, &body).await,
        _ => {}
    }
    match (&parts.method, ctx.name.is_some()) {
        (&Method::GET, false) => {
            if ctx.query.flag("watch") {
                crate::watch::serve(ctx).await
            } else {
                handlers::list(&ctx).await
            }
        }
        (&Method::POST, false) => handlers::create(&ctx, &body).await,
        (&Method::DELETE, false) => handlers::delete_collection(&ctx, &body).await,
        (&Method::GET, true) => handlers::get(&ctx).await,
        (&Method::PUT, true) => handlers::update(&ctx, &body).await,
        (&Method::PATCH, true) => handlers::patch(&ctx, &body).await,
        (&Method::DELETE, true) => handlers::delete(&ctx, &body).await,
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource: {m}"
        ))),
    }
}

/// An aggregated discovery document, or 304 to a client that holds it.
fn aggregated(headers: &HeaderMap, doc: discovery::Document) -> Response {
    let etag = HeaderValue::from_str(&doc.etag).ok();
    let held = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == doc.etag.as_bytes());
    let mut resp = if held {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, discovery::AGGREGATED_CONTENT_TYPE)],
            Body::from(doc.body),
        )
            .into_response()
    };
    if let Some(etag) = etag {
        resp.headers_mut().insert(header::ETAG, etag);
    }
    resp
}
