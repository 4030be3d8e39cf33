//! The resource verbs: get, list, create, update, patch, delete, deletecollection.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use base64::Engine;
use flotilla_store::{DeletePrecondition, ListOptions, Revision, StoreError};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::managed;
use crate::merge_meta::SchemaAt;
use crate::meta;
use crate::objects::{self, FieldValidation, TypeErrors, WriteScope, meta_str};
use crate::patch;
use crate::request::{self, Output, Query};
use crate::resources::ResourceInfo;
use crate::scale;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::ApiServer;
use crate::table;

/// One resource request, parsed.
pub struct Ctx {
    pub api: Arc<ApiServer>,
    pub resource: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub query: Query,
    pub headers: HeaderMap,
    /// Who asked; None for the server's own requests (and when serving
    /// without authentication).
    pub user: Option<crate::auth::User>,
}

impl Ctx {
    /// A request the server makes of itself (garbage collector, namespace
    /// controller): no headers, no query, on one namespace or cluster-wide.
    pub(crate) fn internal(
        api: Arc<ApiServer>,
        resource: Arc<ResourceInfo>,
        namespace: Option<String>,
        name: Option<String>,
    ) -> Ctx {
        Ctx {
            api,
            resource,
            namespace: namespace.filter(|ns| !ns.is_empty()),
            name,
            subresource: None,
            query: Query::default(),
            headers: HeaderMap::new(),
            user: None,
        }
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// Who managedFields credit for a non-apply write.
    fn manager(&self) -> String {
        let user_agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        managed::manager_of(self.query.get("fieldManager"), user_agent)
    }

    fn key(&self, name: &str) -> String {
        self.resource.key(self.namespace.as_deref(), name)
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.resource.group, &self.resource.plural, name)
    }

    fn dry_run(&self) -> ApiResult<bool> {
        match self.query.get("dryRun") {
            None => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::invalid(
                "",
                "DryRun",
                "",
                vec![Cause {
                    reason: "FieldValueNotSupported",
                    field: "dryRun".into(),
                    message: format!("Unsupported value: \"{other}\": supported values: \"All\""),
                }],
            )),
        }
    }
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Serializes a response body as YAML or JSON (with `content_type`).
fn render(
    status: StatusCode,
    body: &Value,
    content_type: &'static str,
    yaml: bool,
    warnings: &[String],
) -> ApiResult<Response> {
    let internal = |e: &dyn std::fmt::Display| ApiError::internal(e.to_string());
    let response = if yaml {
        let text = serde_yaml::to_string(body).map_err(|e| internal(&e))?;
        (status, [(header::CONTENT_TYPE, "application/yaml")], text).into_response()
    } else {
        let bytes = serde_json::to_vec(body).map_err(|e| internal(&e))?;
        json_bytes(status, content_type, bytes)
    };
    Ok(with_warnings(response, warnings))
}

/// A response of JSON already serialized.
fn json_bytes(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Renders one object per the negotiated output.
pub fn respond_object(
    ctx: &Ctx,
    status: StatusCode,
    obj: &Value,
    warnings: &[String],
) -> ApiResult<Response> {
    match request::negotiate(&ctx.headers, ctx.query.get("includeObject"))? {
        Output::Json => render(status, obj, "application/json", false, warnings),
        Output::Yaml => render(status, obj, "application/json", true, warnings),
        Output::Table(include) => {
            let list_meta = json!({"resourceVersion": meta_str(obj, "resourceVersion")});
            let table = table::table(
                &ctx.resource,
                std::slice::from_ref(obj),
                list_meta,
                include,
                true,
            );
            render(status, &table, TABLE, false, warnings)
        }
        Output::PartialMetadata => render(
            status,
            &partial_metadata(obj),
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
            false,
            warnings,
        ),
    }
}

pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// Fields a fieldSelector may use for `r`, beyond metadata.name/namespace.
pub fn field_supported(r: &ResourceInfo, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "events") => matches!(
            field,
            "involvedObject.kind"
                | "involvedObject.namespace"
                | "involvedObject.name"
                | "involvedObject.uid"
                | "involvedObject.apiVersion"
                | "involvedObject.resourceVersion"
                | "involvedObject.fieldPath"
                | "reason"
                | "reportingComponent"
                | "source"
                | "type"
        ),
        ("", "pods") => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        ("", "secrets") => field == "type",
        ("", "namespaces") => field == "status.phase",
        ("", "nodes") => field == "spec.unschedulable",
        ("apps", "replicasets") => field == "status.replicas",
        ("batch", "jobs") => field == "status.successful",
        _ => false,
    }
}

/// Label and field selectors of a list or watch.
pub struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    pub fn from_query(r: &ResourceInfo, q: &Query) -> ApiResult<Self> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let supported = |f: &str| field_supported(r, f) || custom_selectable(r, f);
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), &supported)
            .map_err(ApiError::bad_request)?;
        Ok(Filter { labels, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = objects::meta(obj)
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        self.labels.matches(labels) && self.fields.matches(obj)
    }
}

fn custom_selectable(r: &ResourceInfo, field: &str) -> bool {
    r.selectable_fields.iter().any(|f| f == field)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: Revision,
    start: String,
}

fn encode_continue(rv: Revision, start: &str) -> String {
    let json = serde_json::to_vec(&ContinueToken {
        rv,
        start: start.to_string(),
    })
    .unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_continue(token: &str) -> ApiResult<ContinueToken> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| ApiError::bad_request("continue key is not valid: illegal base64 data"))
}

/// 422 for list or watch options upstream forbids.
pub(crate) fn invalid_list_options(field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "",
        "ListOptions",
        "",
        vec![Cause {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: message.into(),
        }],
    )
}

pub fn parse_rv(v: &str) -> ApiResult<Revision> {
    v.parse::<Revision>().map_err(|_| {
        ApiError::bad_request(format!("invalid resource version: {v:?} is not a number"))
    })
}

/// Brings this replica's reads up to what a request's resourceVersion
/// asks for, as kube-apiserver's consistent reads do: the latest state when
/// none is given, at least `v` when `v` is newer than anything this replica
/// has seen (another replica on the same store served it); "0" takes any.
pub(crate) async fn read_fresh(api: &ApiServer, rv: Option<&str>) -> ApiResult<()> {
    let needed = match rv {
        None | Some("") => true,
        Some("0") => false,
        Some(v) => v
            .parse::<Revision>()
            .is_ok_and(|v| v > api.store.current_revision()),
    };
    if needed {
        api.store.sync().await?;
    }
    Ok(())
}

pub async fn list(ctx: &Ctx) -> ApiResult<Response> {
    let r = &ctx.resource;
    let q = &ctx.query;
    if q.get("sendInitialEvents").is_some() {
        return Err(invalid_list_options(
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for list",
        ));
    }
    let filter = Filter::from_query(r, q)?;
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let rv = q.get("resourceVersion");
    let rv_match = q.get("resourceVersionMatch");
    let store = &ctx.api.store;

    if q.get("continue").is_none() {
        read_fresh(&ctx.api, rv).await?;
    }
    let (mut revision, mut start_after) = match q.get("continue") {
        Some(token) => {
            let t = decode_continue(token)?;
            if t.rv < store.compacted_revision() {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
            (Some(t.rv), Some(t.start))
        }
        None => {
            let revision = match (rv, rv_match) {
                (None, Some(_)) => {
                    return Err(invalid_list_options(
                        "resourceVersionMatch",
                        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                (Some("0"), Some("Exact")) => {
                    return Err(invalid_list_options(
                        "resourceVersionMatch",
                        "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                (Some(v), Some("Exact")) => Some(parse_rv(v)?),
                (Some(v), None) if limit.is_some() && v != "0" => Some(parse_rv(v)?),
                (Some(v), _) => {
                    // NotOlderThan: the current state always is.
                    parse_rv(v)?;
                    None
                }
                (None, None) => None,
            };
            if let Some(m) = rv_match
                && !matches!(m, "Exact" | "NotOlderThan")
            {
                return Err(invalid_list_options(
                    "resourceVersionMatch",
                    &format!(
                        "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
                    ),
                ));
            }
            (revision, None)
        }
    };
    if let Some(rv) = revision
        && rv > store.current_revision()
    {
        return Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!(
                "Too large resource version: {rv}, current: {}",
                store.current_revision()
            ),
        ));
    }

    let prefix = r.collection_prefix(ctx.namespace.as_deref());
    let output = request::negotiate(&ctx.headers, ctx.query.get("includeObject"))?;
    // Without a filter, a JSON list is made of the stored bytes, undecoded.
    let raw = filter.is_empty() && output == Output::Json;
    let mut items = Vec::new();
    let mut raw_items: Vec<u8> = Vec::new();
    let mut count = 0;
    let mut next_token = None;
    // Fill the page with matching objects, scanning in chunks at one revision.
    loop {
        let want = limit.map(|l| (l - count).max(if filter.is_empty() { 1 } else { 100 }));
        let page = store.list(
            &prefix,
            &ListOptions {
                revision,
                start_after: start_after.clone(),
                limit: want,
            },
        )?;
        revision = Some(page.revision);
        let last_key = page.items.last().map(|kv| kv.key.to_string());
        let mut consumed_all = true;
        for (i, kv) in page.items.iter().enumerate() {
            let matched = if raw {
                if count > 0 {
                    raw_items.push(b',');
                }
                crate::raw::write_served(&mut raw_items, r, kv)?;
                true
            } else {
                let obj = objects::decode(r, kv)?;
                let matched = filter.matches(&obj);
                if matched {
                    items.push(obj);
                }
                matched
            };
            if matched {
                count += 1;
                if limit.is_some_and(|l| count >= l) {
                    let more_here = i + 1 < page.items.len();
                    if more_here || page.more {
                        next_token = Some(encode_continue(page.revision, &kv.key));
                    }
                    consumed_all = false;
                    break;
                }
            }
        }
        if !consumed_all || !page.more {
            break;
        }
        start_after = last_key;
    }
    let revision = revision.unwrap_or_else(|| store.current_revision());
    let mut list_meta = json!({"resourceVersion": revision.to_string()});
    if let Some(t) = &next_token {
        list_meta["continue"] = json!(t);
    }
    if raw {
        return respond_raw_list(r, &list_meta, &raw_items);
    }
    respond_list(ctx, output, items, list_meta)
}

/// A JSON list of items already rendered (comma-separated), in the key
/// order `respond_list` writes.
fn respond_raw_list(r: &ResourceInfo, list_meta: &Value, items: &[u8]) -> ApiResult<Response> {
    let head = json!({"kind": r.list_kind, "apiVersion": r.api_version(), "metadata": list_meta});
    let mut body = serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
    // Reopen the head object to append the items.
    body.pop();
    body.extend_from_slice(b",\"items\":[");
    body.extend_from_slice(items);
    body.extend_from_slice(b"]}");
    Ok(json_bytes(StatusCode::OK, "application/json", body))
}

fn respond_list(
    ctx: &Ctx,
    output: Output,
    items: Vec<Value>,
    list_meta: Value,
) -> ApiResult<Response> {
    let r = &ctx.resource;
    let ok = StatusCode::OK;
    match output {
        Output::Table(include) => render(
            ok,
            &table::table(r, &items, list_meta, include, true),
            TABLE,
            false,
            &[],
        ),
        Output::PartialMetadata => {
            let items: Vec<Value> = items.iter().map(partial_metadata).collect();
            let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                              "metadata": list_meta, "items": items});
            render(
                ok,
                &list,
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                false,
                &[],
            )
        }
        output @ (Output::Json | Output::Yaml) => {
            let list = json!({"kind": r.list_kind, "apiVersion": r.api_version(), "metadata": list_meta, "items": items});
            render(ok, &list, "application/json", output == Output::Yaml, &[])
        }
    }
}

pub async fn get(ctx: &Ctx) -> ApiResult<Response> {
    read_fresh(&ctx.api, ctx.query.get("resourceVersion")).await?;
    let kv = ctx
        .api
        .store
        .get(&ctx.key(ctx.name()))?
        .ok_or_else(|| ctx.not_found(ctx.name()))?;
    let scale = ctx.subresource.as_deref() == Some("scale");
    if !scale && request::negotiate(&ctx.headers, ctx.query.get("includeObject"))? == Output::Json {
        let body = crate::raw::served(&ctx.resource, &kv)?;
        return Ok(json_bytes(StatusCode::OK, "application/json", body));
    }
    let obj = objects::decode(&ctx.resource, &kv)?;
    if scale {
        return respond_object(ctx, StatusCode::OK, &scale::view(&ctx.resource, &obj)?, &[]);
    }
    respond_object(ctx, StatusCode::OK, &obj, &[])
}

/// Answers a write through `/scale` with the Scale of the result.
async fn respond_scale(ctx: &Ctx, written: Written) -> ApiResult<Response> {
    let view = scale::view(&ctx.resource, &written.obj)?;
    respond_object(ctx, StatusCode::OK, &view, &written.warnings)
}

async fn update_scale(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let scale_body = request::parse_body(&ctx.headers, body)?;
    let kind = scale_body
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Scale");
    if kind != "Scale" {
        return Err(ApiError::bad_request(format!(
            "the body of a /scale request must be an autoscaling/v1 Scale, not {kind}"
        )));
    }
    check_name_matches(ctx, &scale_body)?;
    let r = ctx.resource.clone();
    let written = update_object(ctx, |old| {
        let mut obj = old.clone();
        scale::write_back(&r, &mut obj, &scale_body)?;
        Ok((obj, Vec::new()))
    })
    .await?;
    respond_scale(ctx, written).await
}

/// A namespaced write needs its namespace to exist and not be terminating.
async fn check_namespace(ctx: &Ctx, creating: bool) -> ApiResult<()> {
    let Some(ns) = ctx.namespace.as_deref().filter(|_| ctx.resource.namespaced) else {
        return Ok(());
    };
    if ctx.api.namespaces.is_active(ns) {
        return Ok(());
    }
    let key = format!("/core/namespaces/{ns}");
    let kv = ctx
        .api
        .get_latest(&key)
        .await?
        .ok_or_else(|| ApiError::not_found("", "namespaces", ns))?;
    if creating {
        let obj: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
        if objects::is_deleting(&obj) {
            let mut e = ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                ctx.resource.plural,
                meta_str(&obj, "name")
            ));
            e.details = Some(Box::new(crate::error::Details {
                name: ns.to_string(),
                group: String::new(),
                kind: "namespaces".into(),
                causes: vec![Cause {
                    reason: "NamespaceTerminating",
                    field: "metadata.namespace".into(),
                    message: format!("namespace {ns} is being terminated"),
                }],
            }));
            return Err(e);
        }
    }
    Ok(())
}

/// Checks the body's namespace against the URL and sets it.
fn bind_namespace(ctx: &Ctx, obj: &mut Value) -> ApiResult<()> {
    let r = &ctx.resource;
    let m = objects::meta_mut(obj);
    let body_ns = m
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if r.namespaced {
        let url_ns = ctx.namespace.as_deref().unwrap_or("");
        if url_ns.is_empty() {
            return Err(ApiError::bad_request(
                "the namespace of the object must be given in the request path",
            ));
        }
        if !body_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        m.insert("namespace".into(), json!(url_ns));
    } else {
        m.remove("namespace");
    }
    Ok(())
}

fn check_name_matches(ctx: &Ctx, obj: &Value) -> ApiResult<()> {
    let body = meta_str(obj, "name");
    let url = ctx.name();
    if !body.is_empty() && body != url {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body}) does not match the name on the URL ({url})"
        )));
    }
    Ok(())
}

fn validate(
    ctx: &Ctx,
    obj: &mut Value,
    validation: FieldValidation,
    type_errors: TypeErrors,
) -> ApiResult<Vec<String>> {
    let r = &ctx.resource;
    let causes = objects::validate_meta(r, obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &r.group,
            &r.kind,
            meta_str(obj, "name"),
            causes,
        ));
    }
    let warnings = objects::apply_schema(r, obj, validation, type_errors)?;
    crate::crd::validate(r, obj)?;
    Ok(warnings)
}

pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let r = ctx.resource.clone();
    if ctx.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "create is not supported on subresources",
        ));
    }
    let mut obj = request::parse_body(&ctx.headers, body)?;
    objects::check_type(&r, &mut obj)?;
    let validation = FieldValidation::parse(ctx.query.get("fieldValidation"))?;
    bind_namespace(ctx, &mut obj)?;
    {
        let m = objects::meta_mut(&mut obj);
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        let generate = m
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() && !generate.is_empty() {
            m.insert("name".into(), json!(meta::generate_name(&generate)));
        }
    }
    let warnings = validate(ctx, &mut obj, validation, TypeErrors::BadRequest)?;
    let manager = ctx.manager();
    let written = create_object(ctx, obj, warnings, |obj| {
        managed::track_update(&r, None, obj, &manager, WriteScope::Main)
    })
    .await?;
    respond_object(ctx, StatusCode::CREATED, &written.obj, &written.warnings)
}

/// Stores a validated new object; `track` records its managedFields.
async fn create_object(
    ctx: &Ctx,
    mut obj: Value,
    warnings: Vec<String>,
    track: impl FnOnce(&mut Value),
) -> ApiResult<Written> {
    let r = ctx.resource.clone();
    check_namespace(ctx, true).await?;
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Create,
        resource: &r,
        namespace: ctx.namespace.as_deref().filter(|_| r.namespaced),
        old: None,
    };
    crate::admission::mutate(&ctx.api, &admission, &mut obj)?;
    objects::prepare_create(&r, &mut obj);
    crate::crd::refresh_status(&r, &mut obj);
    crate::admission::validate(&ctx.api, &admission, &obj)?;
    let _allocating = if r.is_service() {
        let guard = ctx.api.service_allocation.lock().await;
        let network = &ctx.api.config.service_network;
        let claim = !ctx.dry_run()?;
        crate::allocation::assign(network, ctx.api.store.as_ref(), &mut obj, None, claim).await?;
        Some(guard)
    } else {
        None
    };
    track(&mut obj);
    let name = meta_str(&obj, "name").to_string();
    if ctx.dry_run()? {
        return Ok(Written { obj, warnings });
    }
    let key = ctx.key(&name);
    let kv = match ctx
        .api
        .store
        .create(&key, objects::encode_as_stored(&r, &mut obj)?)
        .await
    {
        Ok(kv) => kv,
        Err(StoreError::AlreadyExists(_)) => {
            return Err(ApiError::already_exists(&r.group, &r.plural, &name));
        }
        Err(e) => return Err(e.into()),
    };
    let stored = objects::stamp(&r, obj, kv.mod_revision);
    crate::crd::after_write(&ctx.api, &r, &stored).await;
    Ok(Written {
        obj: stored,
        warnings,
    })
}

/// An update computed from the current object, with its warnings.
type Next = (Value, Vec<String>);

/// Maps a failed store write to the client's error, or `None` when the
/// write lost a race and `retry` allows trying again on fresh state.
fn retry_or_fail(ctx: &Ctx, name: &str, e: StoreError, retry: bool) -> Option<ApiError> {
    let r = &ctx.resource;
    match e {
        StoreError::Conflict { .. } if retry => None,
        StoreError::Conflict { .. } => Some(ApiError::conflict(&r.group, &r.plural, name)),
        StoreError::NotFound(_) => Some(ctx.not_found(name)),
        e => Some(e.into()),
    }
}

/// Removes `key` if it is still at `revision`; returns `obj` stamped with
/// the deletion's revision, as watchers see it.
async fn remove(
    ctx: &Ctx,
    key: &str,
    revision: Revision,
    mut obj: Value,
) -> Result<Value, StoreError> {
    let precondition = DeletePrecondition {
        mod_revision: Some(revision),
    };
    let kv = ctx.api.store.delete(key, precondition).await?;
    objects::meta_mut(&mut obj)
        .insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
    crate::crd::after_delete(&ctx.api, &ctx.resource, &obj).await;
    Ok(obj)
}

/// The outcome of a write: the object as stored (or as it would be, for a
/// dry run) and the warnings for the client.
pub(crate) struct Written {
    pub obj: Value,
    pub warnings: Vec<String>,
}

/// Reads, transforms and writes one object with compare-and-swap, retrying
/// on races unless the caller pinned a resourceVersion; answers the client.
async fn guaranteed_update<F>(ctx: &Ctx, transform: F) -> ApiResult<Response>
where
    F: FnMut(&Value) -> ApiResult<Next>,
{
    let w = update_object(ctx, transform).await?;
    respond_object(ctx, StatusCode::OK, &w.obj, &w.warnings)
}

/// The write behind every update, patch and controller change of one object.
pub(crate) async fn update_object<F>(ctx: &Ctx, mut transform: F) -> ApiResult<Written>
where
    F: FnMut(&Value) -> ApiResult<Next>,
{
    let r = ctx.resource.clone();
    let name = ctx.name().to_string();
    let key = ctx.key(&name);
    let store = &ctx.api.store;
    let _allocating = if r.is_service() {
        Some(ctx.api.service_allocation.lock().await)
    } else {
        None
    };
    let mut synced = false;
    for _ in 0..32 {
        let current = ctx
            .api
            .get_latest(&key)
            .await?
            .ok_or_else(|| ctx.not_found(&name))?;
        let old = objects::decode(&r, &current)?;
        let (mut obj, warnings) = transform(&old)?;
        let pinned = meta_str(&obj, "resourceVersion").to_string();
        if !pinned.is_empty() && pinned != current.mod_revision.to_string() {
            // The client saw a newer version, through another replica.
            if !synced
                && pinned
                    .parse::<Revision>()
                    .is_ok_and(|p| p > current.mod_revision)
            {
                store.sync().await?;
                synced = true;
                continue;
            }
            return Err(ApiError::conflict(&r.group, &r.plural, &name));
        }
        if objects::adds_finalizer_while_deleting(&obj, &old) {
            return Err(ApiError::invalid(
                &r.group,
                &r.kind,
                &name,
                vec![Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message:
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                }],
            ));
        }
        let scope = WriteScope::of(ctx.subresource.as_deref());
        let admission = crate::admission::Request {
            operation: crate::admission::Operation::Update,
            resource: &r,
            namespace: ctx.namespace.as_deref().filter(|_| r.namespaced),
            old: Some(&old),
        };
        crate::admission::mutate(&ctx.api, &admission, &mut obj)?;
        objects::prepare_update(&r, &mut obj, &old, scope);
        crate::crd::refresh_status(&r, &mut obj);
        crate::admission::validate(&ctx.api, &admission, &obj)?;
        if r.is_service() {
            let network = &ctx.api.config.service_network;
            let claim = !ctx.dry_run()?;
            crate::allocation::assign(network, store.as_ref(), &mut obj, Some(&old), claim).await?;
        }
        if ctx.dry_run()? {
            return Ok(Written { obj, warnings });
        }
        // Removing the last finalizer of an object being deleted completes the deletion.
        if objects::is_deleting(&obj) && !objects::has_finalizers(&obj) {
            match remove(ctx, &key, current.mod_revision, obj).await {
                Ok(gone) => {
                    return Ok(Written {
                        obj: gone,
                        warnings,
                    });
                }
                Err(e) => match retry_or_fail(ctx, &name, e, pinned.is_empty()) {
                    Some(err) => return Err(err),
                    None => continue,
                },
            }
        }
        if objects::equal_except_resource_version(&obj, &old) {
            // A no-op write does not create a revision, as upstream.
            return Ok(Written { obj: old, warnings });
        }
        match store
            .update(
                &key,
                objects::encode_as_stored(&r, &mut obj)?,
                current.mod_revision,
            )
            .await
        {
            Ok(kv) => {
                let stored = objects::stamp(&r, obj, kv.mod_revision);
                crate::crd::after_write(&ctx.api, &r, &stored).await;
                return Ok(Written {
                    obj: stored,
                    warnings,
                });
            }
            Err(e) => {
                if let Some(err) = retry_or_fail(ctx, &name, e, pinned.is_empty()) {
                    return Err(err);
                }
            }
        }
    }
    Err(ApiError::conflict(&r.group, &r.plural, &name))
}

/// `POST pods/NAME/binding`: what the scheduler does to place a pod. Sets
/// `spec.nodeName` once and records PodScheduled=True; a pod already bound
/// answers 409, as upstream.
pub async fn bind(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let binding = request::parse_body(&ctx.headers, body)?;
    let kind = binding
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Binding");
    if kind != "Binding" {
        return Err(ApiError::bad_request(format!(
            "the body of a /binding request must be a v1 Binding, not {kind}"
        )));
    }
    check_name_matches(ctx, &binding)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = ctx.name().to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            &name,
            vec![Cause {
                reason: "FieldValueRequired",
                field: "target.name".into(),
                message: "Required value".into(),
            }],
        ));
    }
    let manager = ctx.manager();
    let r = ctx.resource.clone();
    update_object(ctx, |old| {
        let assigned = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !assigned.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{assigned}\""
                ),
            ));
        }
        let mut pod = old.clone();
        if objects::is_deleting(&pod) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        pod["spec"]["nodeName"] = json!(node);
        set_pod_condition(&mut pod, "PodScheduled", "True", "", "");
        managed::track_update(&r, Some(old), &mut pod, &manager, WriteScope::Main);
        Ok((pod, Vec::new()))
    })
    .await?;
    respond_object(
        ctx,
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        &[],
    )
}

/// Sets one of a pod's status conditions, keeping its transition time when
/// the status does not change.
fn set_pod_condition(pod: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conditions = pod["status"]
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    let Some(list) = conditions.and_then(Value::as_array_mut) else {
        return;
    };
    let now = meta::now();
    let mut condition =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
        condition["message"] = json!(message);
    }
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        Some(existing) => {
            if existing.get("status").and_then(Value::as_str) == Some(status) {
                condition["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = condition;
        }
        None => list.push(condition),
    }
}

pub async fn update(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    if ctx.subresource.as_deref() == Some("scale") {
        return update_scale(ctx, body).await;
    }
    let r = ctx.resource.clone();
    let mut obj = request::parse_body(&ctx.headers, body)?;
    objects::check_type(&r, &mut obj)?;
    check_name_matches(ctx, &obj)?;
    bind_namespace(ctx, &mut obj)?;
    objects::meta_mut(&mut obj).insert("name".into(), json!(ctx.name()));
    let validation = FieldValidation::parse(ctx.query.get("fieldValidation"))?;
    let warnings = validate(ctx, &mut obj, validation, TypeErrors::BadRequest)?;
    check_namespace(ctx, false).await?;
    let manager = ctx.manager();
    let scope = WriteScope::of(ctx.subresource.as_deref());
    guaranteed_update(ctx, |old| {
        let mut next = obj.clone();
        managed::track_update(&r, Some(old), &mut next, &manager, scope);
        Ok((next, warnings.clone()))
    })
    .await
}

pub async fn patch(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let r = ctx.resource.clone();
    let content_type = request::content_type(&ctx.headers).unwrap_or_default();
    let validation = FieldValidation::parse(ctx.query.get("fieldValidation"))?;
    #[derive(Clone, Copy)]
    enum Kind {
        Json,
        Merge,
        Strategic,
    }
    if ctx.query.get("force").is_some() && content_type != "application/apply-patch+yaml" {
        return Err(ApiError::bad_request(
            "force is only supported for apply patches (application/apply-patch+yaml)",
        ));
    }
    let kind = match content_type.as_str() {
        "application/apply-patch+yaml" => return apply_patch(ctx, body).await,
        "application/json-patch+json" => Kind::Json,
        "application/merge-patch+json" => Kind::Merge,
        "application/strategic-merge-patch+json" if !r.custom => Kind::Strategic,
        other => {
            let mut accepted = vec![
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ];
            if !r.custom {
                accepted.push("application/strategic-merge-patch+json");
            }
            return Err(ApiError::unsupported_media_type(other, &accepted));
        }
    };
    let patch_doc = request::parse_json(body)?;
    check_namespace(ctx, false).await?;
    let name = ctx.name().to_string();
    let manager = ctx.manager();
    let scope = WriteScope::of(ctx.subresource.as_deref());
    let patch_one = |target: &mut Value, scale_view: bool| -> ApiResult<()> {
        let invalid = |field: String, message: String| {
            ApiError::invalid(
                &r.group,
                &r.kind,
                &name,
                vec![Cause {
                    reason: "FieldValueInvalid",
                    field,
                    message,
                }],
            )
        };
        match kind {
            Kind::Json => patch::apply_json_patch(target, &patch_doc).map_err(|e| {
                invalid(
                    String::new(),
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            }),
            Kind::Merge => {
                patch::apply_merge_patch(target, &patch_doc).map_err(ApiError::bad_request)
            }
            Kind::Strategic => {
                // The Scale view has no lists: its schema is not needed.
                let root = if scale_view {
                    SchemaAt::new(None)
                } else {
                    crate::merge_meta::root_of(&r)
                };
                crate::strategic::apply(target, &patch_doc, root)
                    .map_err(|e| invalid(e.field.clone(), e.to_string()))
            }
        }
    };
    let apply = |target: &mut Value, scale_view: bool| -> ApiResult<()> {
        let stored_rv = meta_str(target, "resourceVersion").to_string();
        let result = patch_one(target, scale_view);
        // The patch, not the stored state, decides whether a resourceVersion
        // precondition applies: one it left alone is none.
        if meta_str(target, "resourceVersion") == stored_rv {
            objects::meta_mut(target).remove("resourceVersion");
        }
        result
    };
    if ctx.subresource.as_deref() == Some("scale") {
        let written = update_object(ctx, |old| {
            let mut view = scale::view(&r, old)?;
            apply(&mut view, true)?;
            let mut obj = old.clone();
            scale::write_back(&r, &mut obj, &view)?;
            Ok((obj, Vec::new()))
        })
        .await?;
        return respond_scale(ctx, written).await;
    }
    guaranteed_update(ctx, |old| {
        let mut obj = old.clone();
        apply(&mut obj, false)?;
        objects::check_type(&r, &mut obj)?;
        if meta_str(&obj, "name") != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&obj, "name")
            )));
        }
        bind_namespace(ctx, &mut obj)?;
        let warnings = validate(ctx, &mut obj, validation, TypeErrors::Invalid)?;
        managed::track_update(&r, Some(old), &mut obj, &manager, scope);
        Ok((obj, warnings))
    })
    .await
}

/// Server-side apply: creates the object if absent, otherwise merges the
/// configuration in, with ownership tracked per manager.
async fn apply_patch(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let r = ctx.resource.clone();
    let Some(manager) = ctx.query.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: "FieldValueRequired",
                field: "fieldManager".into(),
                message: "Required value: is required for apply patch".into(),
            }],
        ));
    };
    let manager = manager.to_string();
    let force = ctx.query.flag("force");
    let validation = FieldValidation::parse(ctx.query.get("fieldValidation"))?;
    let mut applied: Value = serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request(
            "an apply patch must be an object with apiVersion, kind and metadata.name",
        ));
    }
    if objects::meta(&applied).is_some_and(|m| m.contains_key("managedFields")) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    objects::check_type(&r, &mut applied)?;
    check_name_matches(ctx, &applied)?;
    bind_namespace(ctx, &mut applied)?;
    objects::meta_mut(&mut applied).insert("name".into(), json!(ctx.name()));
    check_namespace(ctx, false).await?;
    let scope = WriteScope::of(ctx.subresource.as_deref());
    if ctx.api.store.get(&ctx.key(ctx.name()))?.is_none() && scope == WriteScope::Main {
        let mut obj = managed::apply(&r, None, &applied, &manager, force, scope)?;
        let warnings = validate(ctx, &mut obj, validation, TypeErrors::Invalid)?;
        // The entry apply computed stays; creation adds no Update entry.
        match create_object(ctx, obj, warnings, |_| {}).await {
            Ok(w) => return respond_object(ctx, StatusCode::CREATED, &w.obj, &w.warnings),
            // Created meanwhile by someone else: apply onto theirs.
            Err(e) if e.code == StatusCode::CONFLICT => {}
            Err(e) => return Err(e),
        }
    }
    guaranteed_update(ctx, |old| {
        let mut obj = managed::apply(&r, Some(old), &applied, &manager, force, scope)?;
        objects::check_type(&r, &mut obj)?;
        let warnings = validate(ctx, &mut obj, validation, TypeErrors::Invalid)?;
        Ok((obj, warnings))
    })
    .await
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteOptions {
    propagation_policy: Option<String>,
    /// Deprecated for propagationPolicy; true is Orphan. false also asks
    /// for 202 while the deletion waits (upstream's rule).
    orphan_dependents: Option<bool>,
    /// Parsed for validation only: no kubelet waits on a grace period here,
    /// so deletions complete at once (deletionGracePeriodSeconds 0).
    #[allow(dead_code)]
    grace_period_seconds: Option<i64>,
    preconditions: Option<Preconditions>,
    #[serde(default)]
    dry_run: Vec<String>,
}

impl DeleteOptions {
    pub(crate) fn with_policy(policy: &str) -> Self {
        DeleteOptions {
            propagation_policy: Some(policy.to_string()),
            ..DeleteOptions::default()
        }
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

pub(crate) fn delete_options(ctx: &Ctx, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut opts: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    if let Some(p) = ctx.query.get("propagationPolicy") {
        opts.propagation_policy = Some(p.to_string());
    }
    if let Some(o) = ctx.query.get("orphanDependents") {
        opts.orphan_dependents = Some(o == "true");
    }
    if opts.propagation_policy.is_none() && opts.orphan_dependents == Some(true) {
        opts.propagation_policy = Some("Orphan".into());
    }
    if let Some(g) = ctx.query.int("gracePeriodSeconds")? {
        opts.grace_period_seconds = Some(g);
    }
    if ctx.query.get("dryRun").is_some() {
        opts.dry_run = vec![ctx.query.get("dryRun").unwrap_or_default().to_string()];
    }
    if let Some(p) = &opts.propagation_policy
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(
            "",
            "DeleteOptions",
            "",
            vec![Cause {
                reason: "FieldValueNotSupported",
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            }],
        ));
    }
    Ok(opts)
}

/// Deletes one object; returns what to send back.
pub(crate) async fn delete_one(
    ctx: &Ctx,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<(Value, bool)> {
    let r = ctx.resource.clone();
    let key = ctx.key(name);
    let store = &ctx.api.store;
    let dry_run = opts.dry_run.iter().any(|d| d == "All");
    for _ in 0..32 {
        let current = ctx
            .api
            .get_latest(&key)
            .await?
            .ok_or_else(|| ctx.not_found(name))?;
        let mut obj = objects::decode(&r, &current)?;
        if let Some(p) = &opts.preconditions {
            if let Some(uid) = &p.uid
                && uid != meta_str(&obj, "uid")
            {
                return Err(ApiError::conflict(&r.group, &r.plural, name));
            }
            if let Some(rv) = &p.resource_version
                && *rv != current.mod_revision.to_string()
            {
                return Err(ApiError::conflict(&r.group, &r.plural, name));
            }
        }
        let policy = opts.propagation_policy.as_deref().unwrap_or("Background");
        // Foreground and Orphan hand the object to the garbage collector
        // through a finalizer it removes when the dependents are dealt with.
        let gc_finalizer = match policy {
            "Foreground" => Some(objects::FOREGROUND_FINALIZER),
            "Orphan" if !r.is_namespace() => Some(objects::ORPHAN_FINALIZER),
            _ => None,
        };
        if objects::has_finalizers(&obj) || gc_finalizer.is_some() {
            // Graceful: mark for deletion; finalizers (or the namespace
            // controller) remove the object later.
            let already = objects::is_deleting(&obj);
            let switched = gc_finalizer.is_some_and(|f| objects::set_gc_finalizer(&mut obj, f));
            if already && !switched {
                return Ok((obj, false));
            }
            let m = objects::meta_mut(&mut obj);
            if !already {
                m.insert("deletionTimestamp".into(), json!(meta::now()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            let namespace = r.is_namespace();
            if namespace {
                obj["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok((obj, false));
            }
            match store
                .update(
                    &key,
                    objects::encode_as_stored(&r, &mut obj)?,
                    current.mod_revision,
                )
                .await
            {
                Ok(kv) => {
                    let stored = objects::stamp(&r, obj, kv.mod_revision);
                    if namespace {
                        ctx.api.namespaces.terminated(name, kv.mod_revision);
                    }
                    if namespace && !already {
                        crate::namespace::spawn_finalizer(ctx.api.clone(), name.to_string());
                    }
                    return Ok((stored, false));
                }
                Err(e) => match retry_or_fail(ctx, name, e, true) {
                    Some(err) => return Err(err),
                    None => continue,
                },
            }
        }
        if dry_run {
            return Ok((obj, true));
        }
        match remove(ctx, &key, current.mod_revision, obj).await {
            Ok(gone) => return Ok((gone, true)),
            Err(e) => {
                if let Some(err) = retry_or_fail(ctx, name, e, true) {
                    return Err(err);
                }
            }
        }
    }
    Err(ApiError::conflict(&r.group, &r.plural, name))
}

pub async fn delete(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    if ctx.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not supported on subresources",
        ));
    }
    let opts = delete_options(ctx, body)?;
    let name = ctx.name().to_string();
    let (obj, gone) = delete_one(ctx, &name, &opts).await?;
    let r = &ctx.resource;
    if gone && !returns_deleted_object(r) {
        // Most built-ins answer an immediate deletion with a Success Status.
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": r.group, "kind": r.plural, "uid": meta_str(&obj, "uid")},
        });
        let bytes = serde_json::to_vec(&status).map_err(|e| ApiError::internal(e.to_string()))?;
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response());
    }
    // Still held (finalizers): 202 only when the client set
    // orphanDependents=false, as upstream keeps it for old clients.
    let status = if !gone && opts.orphan_dependents == Some(false) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    respond_object(ctx, status, &obj, &[])
}

/// Kinds whose immediate deletion answers the deleted object, as
/// upstream's stores with `ReturnDeletedObject` (custom resources, pods,
/// services, ...); the others answer a Success Status naming it.
fn returns_deleted_object(r: &ResourceInfo) -> bool {
    r.custom
        || (r.group.is_empty()
            && matches!(
                r.plural.as_str(),
                "pods"
                    | "services"
                    | "serviceaccounts"
                    | "namespaces"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "podtemplates"
            ))
}

pub async fn delete_collection(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let r = ctx.resource.clone();
    let opts = delete_options(ctx, body)?;
    let filter = Filter::from_query(&r, &ctx.query)?;
    let page = ctx.api.store.list(
        &r.collection_prefix(ctx.namespace.as_deref()),
        &ListOptions::default(),
    )?;
    let mut deleted = Vec::new();
    for kv in &page.items {
        let obj = objects::decode(&r, kv)?;
        if !filter.matches(&obj) {
            continue;
        }
        let ns = meta_str(&obj, "namespace").to_string();
        let one = Ctx::internal(ctx.api.clone(), r.clone(), Some(ns), None);
        match delete_one(&one, meta_str(&obj, "name"), &opts).await {
            Ok((o, _)) => deleted.push(o),
            Err(e) if e.code == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    let list_meta = json!({"resourceVersion": ctx.api.store.current_revision().to_string()});
    let output = request::negotiate(&ctx.headers, ctx.query.get("includeObject"))?;
    respond_list(ctx, output, deleted, list_meta)
}
