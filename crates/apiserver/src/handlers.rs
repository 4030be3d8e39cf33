//! The resource verbs: get, list, create, update, patch, delete, deletecollection.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use base64::Engine;
use flotilla_store::{KeyValue, ListOptions, Revision};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::managed;
use crate::merge_meta::SchemaAt;
use crate::meta;
use crate::objects::{self, FieldValidation, TypeErrors, WriteScope, meta_str};
use crate::patch;
use crate::registry::{self, DeleteOptions, Next, Request, Written};
use crate::request::{self, Output, Query};
use crate::resources::ResourceInfo;
use crate::scale;
use crate::state::ApiServer;
use crate::table;
use flotilla_core::selector::{FieldSelector, LabelSelector};

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
    pub user: Option<crate::user::User>,
}

impl Ctx {
    /// The store-layer request this one makes.
    pub(crate) fn request(&self) -> ApiResult<Request> {
        Ok(Request {
            storage: self.api.storage.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            subresource: self.subresource.clone(),
            user: self.user.clone(),
            dry_run: self.dry_run()?,
        })
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

    /// The object the request names, as stored (404 when absent).
    pub(crate) fn stored_object(&self) -> ApiResult<Value> {
        let kv = self
            .api
            .store
            .get(&self.key(self.name()))?
            .ok_or_else(|| self.not_found(self.name()))?;
        objects::decode(&self.resource, &kv)
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
    body: &impl Serialize,
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
            let convertor = ctx.api.extensions.table(&ctx.resource);
            let table = table::table(
                &ctx.resource,
                convertor.as_deref(),
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

pub fn partial_metadata(obj: &Value) -> PartialMetadata<'_> {
    PartialMetadata {
        metadata: obj.get("metadata"),
    }
}

/// An object as `PartialObjectMetadata`: its metadata, serialized where it
/// lies (a Work's metadata is mostly managedFields: no copy of them).
pub struct PartialMetadata<'a> {
    metadata: Option<&'a Value>,
}

impl Serialize for PartialMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("kind", "PartialObjectMetadata")?;
        m.serialize_entry("apiVersion", "meta.k8s.io/v1")?;
        match self.metadata {
            Some(meta) => m.serialize_entry("metadata", meta)?,
            None => m.serialize_entry("metadata", &Map::new())?,
        }
        m.end()
    }
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

/// Fields a fieldSelector may use for `r` (`kinds::Strategy`).
pub fn field_supported(r: &ResourceInfo, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || crate::kinds::strategy(r)
            .selectable_fields()
            .contains(&field)
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

    /// Whether labels alone decide what matches: no field selector.
    pub fn reads_labels_only(&self) -> bool {
        self.fields.is_empty()
    }

    /// Whether the stored object `kv` of `r` matches, read from its labels
    /// alone without decoding the rest (a label-selected watch of a busy
    /// kind sees every event of it); None when that cannot tell: a field
    /// selector, a kind converted when served (matched as served), or
    /// bytes whose metadata does not read as an object.
    pub fn matches_stored(&self, r: &ResourceInfo, kv: &KeyValue) -> Option<bool> {
        #[derive(serde::Deserialize)]
        struct Top {
            metadata: Option<Meta>,
        }
        #[derive(serde::Deserialize)]
        struct Meta {
            labels: Option<serde_json::Map<String, Value>>,
        }
        if !self.reads_labels_only() || r.conversion.is_some() {
            return None;
        }
        let top: Top = serde_json::from_slice(&kv.value).ok()?;
        let labels = top.metadata.and_then(|m| m.labels);
        Some(self.labels.matches(labels.as_ref()))
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
    // A JSON list is made of the stored bytes, undecoded, when no more than
    // their labels decide which are in it.
    let raw = output == Output::Json
        && (filter.is_empty() || (filter.reads_labels_only() && r.conversion.is_none()));
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
                let matched = filter.is_empty()
                    || match filter.matches_stored(r, kv) {
                        Some(matched) => matched,
                        None => filter.matches(&objects::decode(r, kv)?),
                    };
                if matched {
                    if count > 0 {
                        raw_items.push(b',');
                    }
                    crate::raw::write_served(&mut raw_items, r, kv)?;
                }
                matched
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

pub(crate) fn respond_list(
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
            &table::table(
                r,
                ctx.api.extensions.table(r).as_deref(),
                &items,
                list_meta,
                include,
                true,
            ),
            TABLE,
            false,
            &[],
        ),
        Output::PartialMetadata => {
            let items: Vec<PartialMetadata<'_>> = items.iter().map(partial_metadata).collect();
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
    let manager = ctx.manager();
    let written = registry::update(&ctx.request()?, |old| {
        let mut obj = old.clone();
        scale::write_back(&r, &mut obj, &scale_body)?;
        // The writer owns the replicas now (`kubectl scale`, an HPA), so
        // an applier that leaves them out does not reset them.
        managed::track_update(&r, Some(old), &mut obj, &manager, WriteScope::Scale);
        Ok((obj, Vec::new()))
    })
    .await?;
    respond_scale(ctx, written).await
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
    let scope = WriteScope::of(ctx.subresource.as_deref());
    let warnings = objects::apply_schema(r, obj, validation, type_errors, scope)?;
    crate::crd::validate(r, obj)?;
    Ok(warnings)
}

/// [`validate`] for an object whose managedFields the server computed
/// (an apply, where the request may carry none): they are left out of
/// the schema walk and the type check, which would read about as much
/// again as the rest of a small object, and put back as they were.
fn validate_computed(
    ctx: &Ctx,
    obj: &mut Value,
    validation: FieldValidation,
    type_errors: TypeErrors,
) -> ApiResult<Vec<String>> {
    let computed = managed::take_entries(obj);
    let result = validate(ctx, obj, validation, type_errors);
    if let Some(entries) = computed {
        objects::meta_mut(obj).insert("managedFields".into(), Value::Array(entries));
    }
    result
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
    let written = registry::create(&ctx.request()?, obj, warnings, |obj| {
        managed::track_update(&r, None, obj, &manager, WriteScope::Main)
    })
    .await?;
    respond_object(ctx, StatusCode::CREATED, &written.obj, &written.warnings)
}

/// Reads, transforms and writes one object with compare-and-swap, retrying
/// on races unless the caller pinned a resourceVersion; answers the client.
async fn guaranteed_update<F>(ctx: &Ctx, transform: F) -> ApiResult<Response>
where
    F: FnMut(&Value) -> ApiResult<Next>,
{
    let w = registry::update(&ctx.request()?, transform).await?;
    respond_object(ctx, StatusCode::OK, &w.obj, &w.warnings)
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
    registry::update(&ctx.request()?, |old| {
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
    registry::check_namespace(&ctx.request()?, false).await?;
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
    registry::check_namespace(&ctx.request()?, false).await?;
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
        let written = registry::update(&ctx.request()?, |old| {
            let mut view = scale::view(&r, old)?;
            apply(&mut view, true)?;
            let mut obj = old.clone();
            scale::write_back(&r, &mut obj, &view)?;
            managed::track_update(&r, Some(old), &mut obj, &manager, WriteScope::Scale);
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
    let mut applied: Value = crate::request::yaml_or_json(body)
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
    registry::check_namespace(&ctx.request()?, false).await?;
    let scope = WriteScope::of(ctx.subresource.as_deref());
    if ctx.api.store.get(&ctx.key(ctx.name()))?.is_none() && scope == WriteScope::Main {
        let mut obj = managed::apply(&r, None, &applied, &manager, force, scope)?;
        let warnings = validate_computed(ctx, &mut obj, validation, TypeErrors::Invalid)?;
        // The entry apply computed stays; creation adds no Update entry.
        match registry::create(&ctx.request()?, obj, warnings, |_| {}).await {
            Ok(w) => return respond_object(ctx, StatusCode::CREATED, &w.obj, &w.warnings),
            // Created meanwhile by someone else: apply onto theirs.
            Err(e) if e.code == StatusCode::CONFLICT => {}
            Err(e) => return Err(e),
        }
    }
    guaranteed_update(ctx, |old| {
        let mut obj = managed::apply(&r, Some(old), &applied, &manager, force, scope)?;
        objects::check_type(&r, &mut obj)?;
        let warnings = validate_computed(ctx, &mut obj, validation, TypeErrors::Invalid)?;
        Ok((obj, warnings))
    })
    .await
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

pub async fn delete(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    if ctx.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "delete is not supported on subresources",
        ));
    }
    let opts = delete_options(ctx, body)?;
    let name = ctx.name().to_string();
    let (obj, gone) = registry::delete(&ctx.request()?, &name, &opts).await?;
    let r = &ctx.resource;
    if gone && !crate::kinds::strategy(r).returns_deleted_object() {
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
        let mut one = ctx.request()?;
        one.namespace = Some(ns).filter(|ns| !ns.is_empty());
        one.name = None;
        match registry::delete(&one, meta_str(&obj, "name"), &opts).await {
            Ok((o, _)) => deleted.push(o),
            Err(e) if e.code == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    let list_meta = json!({"resourceVersion": ctx.api.store.current_revision().to_string()});
    let output = request::negotiate(&ctx.headers, ctx.query.get("includeObject"))?;
    respond_list(ctx, output, deleted, list_meta)
}

/// Serves a POST to an added subresource of the object `ctx` names.
pub(crate) async fn serve_extension(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let sub = ctx.subresource.as_deref().unwrap_or_default();
    let handler = ctx
        .api
        .extensions
        .subresource(&ctx.resource, sub)
        .ok_or_else(ApiError::path_not_found)?;
    let parent = ctx.stored_object()?;
    let body = if body.is_empty() {
        Value::Object(Default::default())
    } else {
        crate::request::parse_body(&ctx.headers, body)?
    };
    let answer = handler
        .create(crate::extension::SubresourceCall {
            parent,
            body,
            user: ctx.user.clone(),
        })
        .await?;
    respond_object(ctx, StatusCode::CREATED, &answer, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Query;

    fn filter(query: &str) -> Filter {
        let r = crate::builtin::resource("", "configmaps");
        Filter::from_query(&r, &Query::parse(Some(query))).expect("a valid selector")
    }

    fn stored(value: &str) -> KeyValue {
        KeyValue {
            key: "/registry/configmaps/default/a".into(),
            mod_revision: 2,
            create_revision: 1,
            value: bytes::Bytes::copy_from_slice(value.as_bytes()),
        }
    }

    /// What the labels of the stored bytes say is what decoding the object
    /// says, for every selector form and for objects with odd metadata;
    /// what the labels cannot tell is left to decoding.
    #[test]
    fn a_label_match_on_stored_bytes_agrees_with_the_decoded_object() {
        let r = crate::builtin::resource("", "configmaps");
        let objects = [
            r#"{"metadata":{"name":"a","labels":{"tier":"web","env":"prod"}},"data":{"k":"v"}}"#,
            r#"{"metadata":{"name":"a","labels":{"tier":"db"}}}"#,
            r#"{"metadata":{"name":"a","labels":null}}"#,
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"metadata":null}"#,
            r#"{"data":{"metadata":{"labels":{"tier":"web"}}}}"#,
            r#"{}"#,
        ];
        let selectors = [
            "labelSelector=tier%3Dweb",
            "labelSelector=tier%21%3Dweb",
            "labelSelector=tier+in+(web,db)",
            "labelSelector=%21tier",
            "labelSelector=tier,env%3Dprod",
        ];
        for query in selectors {
            let f = filter(query);
            for text in objects {
                let kv = stored(text);
                let decoded = objects::decode(&r, &kv).expect("an object");
                assert_eq!(
                    f.matches_stored(&r, &kv),
                    Some(f.matches(&decoded)),
                    "{query} on {text}"
                );
            }
        }
        // Labels that are not a map, metadata that is not an object, and
        // bytes that are not an object: decoding decides.
        let f = filter("labelSelector=tier%3Dweb");
        for text in [
            r#"{"metadata":{"labels":"tier=web"}}"#,
            r#"{"metadata":[1]}"#,
            r#"[1,2]"#,
            r#"{"metadata":{"labels":{"tier":"web"}}"#,
        ] {
            assert_eq!(f.matches_stored(&r, &stored(text)), None, "{text}");
        }
        // A kind converted when served is matched as served: decoding
        // decides.
        let kv = stored(objects[0]);
        let events = crate::builtin::resource("events.k8s.io", "events");
        assert!(events.conversion.is_some());
        assert_eq!(f.matches_stored(&events, &kv), None);
        // A field selector, with or without labels: decoding decides.
        assert_eq!(
            filter("fieldSelector=metadata.name%3Da").matches_stored(&r, &kv),
            None
        );
        assert_eq!(
            filter("labelSelector=tier%3Dweb&fieldSelector=metadata.name%3Da")
                .matches_stored(&r, &kv),
            None
        );
    }
}
