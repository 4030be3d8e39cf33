//! Objects as stored and as served: encoding, resourceVersion injection, and
//! the admission steps every write goes through (metadata rules, schema
//! pruning and validation, generation, server-owned fields).

use base64::Engine;
use bytes::Bytes;
use flotilla_store::{KeyValue, Revision};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::openapi;
use crate::resources::{ResourceInfo, Schema};
use crate::schema::Walker;
use crate::value::strings_at;

/// Decodes a stored object and stamps the revision as its resourceVersion.
pub fn decode(r: &ResourceInfo, kv: &KeyValue) -> ApiResult<Value> {
    let mut v: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    if let Some(c) = r.conversion {
        (c.to_served)(&mut v);
    }
    Ok(stamp(r, v, kv.mod_revision))
}

/// [`encode`] for storage as `r`'s stored version (`conversion.rs`);
/// `obj` stays in the version served.
pub fn encode_as_stored(r: &ResourceInfo, obj: &mut Value) -> ApiResult<Bytes> {
    let Some(c) = r.conversion else {
        return encode(obj);
    };
    let mut stored = obj.clone();
    (c.to_stored)(&mut stored);
    meta_mut(obj).shift_remove("resourceVersion");
    encode(&mut stored)
}

/// An object as served at `revision`: type meta set, and the revision as
/// its resourceVersion, placed as decoding the stored bytes places it.
pub fn stamp(r: &ResourceInfo, mut v: Value, revision: Revision) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), json!(r.api_version()));
        o.insert("kind".into(), json!(r.kind));
    }
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.shift_remove("resourceVersion");
        m.insert("resourceVersion".into(), json!(revision.to_string()));
    }
    v
}

/// The store revision an object was served at (its resourceVersion), or
/// 0 when it carries none.
pub fn revision_of(v: &Value) -> Revision {
    meta_str(v, "resourceVersion").parse().unwrap_or(0)
}

/// Encodes an object for storage; the resourceVersion is the store's
/// revision, not data, and is taken out of `obj` (see [`stamp`]).
pub fn encode(obj: &mut Value) -> ApiResult<Bytes> {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.shift_remove("resourceVersion");
    }
    // The store keeps this value for the object's lifetime: copy it out of
    // the serializer's doubling buffer so that capacity is not kept too.
    serde_json::to_vec(&*obj)
        .map(|v| Bytes::copy_from_slice(&v))
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The metadata that decides an object's lifecycle, read from its stored
/// bytes without building the rest (spec, status, managedFields).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    pub uid: Option<Value>,
    pub owner_references: Option<Value>,
    pub deletion_timestamp: Option<Value>,
    pub finalizers: Option<Value>,
}

/// The lifecycle metadata of stored bytes; None when they are not an
/// object with metadata.
pub fn stored_lifecycle(stored: &[u8]) -> Option<Lifecycle> {
    #[derive(serde::Deserialize)]
    struct Stored {
        metadata: Option<Lifecycle>,
    }
    serde_json::from_slice::<Stored>(stored).ok()?.metadata
}

pub use crate::value::{meta, meta_mut};

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `fieldValidation`: what to do with unknown fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(v: Option<&str>) -> ApiResult<Self> {
        match v {
            None | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, Strict; got {other:?}"
            ))),
        }
    }
}

/// Checks apiVersion and kind of a body against the URL's resource, filling them in when absent.
pub fn check_type(r: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let Some(o) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    let api_version = r.api_version();
    match o.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("apiVersion".into(), json!(api_version));
        }
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match o.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("kind".into(), json!(r.kind));
        }
        Some(k) if k == r.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({}) for {}",
                r.kind, r.plural
            )));
        }
    }
    if o.get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

/// Validates the object's name and metadata, returning 422 causes.
pub fn validate_meta(r: &ResourceInfo, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name");
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else {
        let errs = if r.is_namespace() {
            flotilla_core::validation::validate_dns1123_label(name)
        } else if r.group == "rbac.authorization.k8s.io" {
            // RBAC's names are path segments (`system:discovery`).
            flotilla_core::validation::validate_path_segment_name(name)
        } else {
            flotilla_core::validation::validate_dns1123_subdomain(name)
        };
        for e in errs {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: "metadata.name".into(),
                message: format!("Invalid value: \"{name}\": {e}"),
            });
        }
    }
    if let Some(m) = meta(obj) {
        causes.extend(meta::validate_object_meta(m));
    }
    causes.extend(crate::kinds::strategy(r).validate(obj));
    causes
}

/// Prunes unknown fields per `fieldValidation` and validates against the
/// schema. Returns the warnings to send back.
/// How a body whose fields have the wrong type is reported: a malformed
/// request body is 400, a patch that produces one is 422, as upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeErrors {
    BadRequest,
    Invalid,
}

pub fn apply_schema(
    r: &ResourceInfo,
    obj: &mut Value,
    validation: FieldValidation,
    type_errors: TypeErrors,
    scope: WriteScope,
) -> ApiResult<Vec<String>> {
    let name = meta_str(obj, "name").to_string();
    let outcome = match &r.schema {
        Schema::Builtin { component, decode } => {
            let mut walker = Walker::new(&openapi::resolve_builtin, false);
            if let Some(schema) = openapi::builtin_components().get(*component) {
                walker.walk_root(obj, schema);
            }
            if let Err((field, e)) = decode(obj) {
                return Err(match type_errors {
                    TypeErrors::BadRequest => ApiError::bad_request(format!(
                        "{} in body is invalid: {field}: {e}",
                        r.kind
                    )),
                    TypeErrors::Invalid => ApiError::invalid(
                        &r.group,
                        &r.kind,
                        &name,
                        vec![Cause {
                            reason: "FieldValueTypeInvalid",
                            field: field.clone(),
                            message: format!("Invalid value: {e}"),
                        }],
                    ),
                });
            }
            walker.outcome
        }
        Schema::Structural(schema) => {
            let resolve =
                |reference: &str| -> Option<&Value> { openapi::resolve_builtin(reference) };
            let mut walker = Walker::new(&resolve, true);
            // A write of the status subresource keeps nothing of the
            // request but its status: only that is checked against the
            // schema, as apiextensions-apiserver's status validator does.
            let status_schema = (scope == WriteScope::Status)
                .then(|| schema.pointer("/properties/status"))
                .flatten();
            match (status_schema, obj.get_mut("status")) {
                (Some(status_schema), Some(status)) => {
                    walker.walk_field(status, status_schema, "status")
                }
                (Some(_), None) => {}
                (None, _) => walker.walk_root(obj, schema),
            }
            walker.outcome
        }
    };
    if !outcome.causes.is_empty() {
        return Err(ApiError::invalid(&r.group, &r.kind, &name, outcome.causes));
    }
    let unknown: Vec<String> = outcome
        .unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Strict if !unknown.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        ))),
        FieldValidation::Warn => Ok(unknown),
        _ => Ok(vec![]),
    }
}

/// Whether anything but metadata and status (what a generation counts)
/// differs between `a` and `b`; compared in place, without copies.
fn spec_differs(a: &Value, b: &Value) -> bool {
    const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a != b;
    };
    let spec = |o: &'_ Map<String, Value>| {
        o.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .count()
    };
    spec(a) != spec(b)
        || a.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .any(|(k, v)| b.get(k) != Some(v))
}

/// Server-set fields on create.
pub fn prepare_create(r: &ResourceInfo, obj: &mut Value) {
    normalize(r, obj);
    // With a status subresource, status is reported through /status, never set on create.
    if r.status_subresource
        && !r.is_namespace()
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    let m = meta_mut(obj);
    m.insert("uid".into(), json!(meta::new_uid()));
    m.insert("creationTimestamp".into(), json!(meta::now()));
    for f in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "generation",
    ] {
        m.remove(f);
    }
    if m.get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        m.remove("finalizers");
    }
    if r.uses_generation {
        m.insert("generation".into(), json!(1));
    }
    let strategy = crate::kinds::strategy(r);
    if let Some(status) = strategy.initial_status(obj)
        && let Some(o) = obj.as_object_mut()
    {
        o.insert("status".into(), status);
    }
    strategy.prepare_create(obj);
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteScope {
    /// The main endpoint: everything but `.status` when the kind has a
    /// status subresource (and but a namespace's `spec.finalizers`).
    Main,
    /// `/status`: only `.status`.
    Status,
    /// A namespace's `/finalize`: only `spec.finalizers`.
    Finalize,
    /// A pod's `/binding`: the node name and the PodScheduled condition.
    Binding,
    /// A pod's `/ephemeralcontainers`: only `spec.ephemeralContainers`.
    EphemeralContainers,
    /// A workload's `/scale`: the replicas, written as the main endpoint
    /// writes them, their ownership recorded as the scale subresource's.
    Scale,
}

impl WriteScope {
    pub fn of(subresource: Option<&str>) -> WriteScope {
        match subresource {
            // A CSR's `/approval` writes its status conditions (Approved,
            // Denied), as `/status` does.
            Some("status" | "approval") => WriteScope::Status,
            Some("finalize") => WriteScope::Finalize,
            Some("binding") => WriteScope::Binding,
            Some("ephemeralcontainers") => WriteScope::EphemeralContainers,
            _ => WriteScope::Main,
        }
    }
}

/// `new` with `pointer` (a top-level or nested field) taken from `old`.
fn keep_from(new: &mut Value, old: &Value, parent: &str, field: &str) {
    let old_value = old.pointer(&format!("{parent}/{field}")).cloned();
    let target = if parent.is_empty() {
        Some(&mut *new)
    } else {
        new.pointer_mut(parent)
    };
    match (target.and_then(Value::as_object_mut), old_value) {
        (Some(o), Some(v)) => {
            o.insert(field.into(), v);
        }
        (Some(o), None) => {
            o.remove(field);
        }
        (None, Some(v)) => {
            // The parent is gone from `new`; recreate it to hold the kept field.
            if let Some(root) = new.as_object_mut() {
                let name = parent.trim_start_matches('/');
                root.insert(name.into(), json!({ field: v }));
            }
        }
        (None, None) => {}
    }
}

/// Whether `new` and `old` differ at most in `status`, in
/// `metadata.managedFields` and in `metadata.resourceVersion` (a patch
/// that leaves it alone drops it; it is the store's, not data): what a
/// status write may change.
fn same_outside_status(new: &Value, old: &Value) -> bool {
    let (Some(new), Some(old)) = (new.as_object(), old.as_object()) else {
        return false;
    };
    let same_except = |a: &Map<String, Value>, b: &Map<String, Value>, except: &[&str]| {
        let len = |m: &Map<String, Value>| {
            m.len() - except.iter().filter(|k| m.contains_key(**k)).count()
        };
        len(a) == len(b)
            && a.iter()
                .all(|(k, v)| except.contains(&k.as_str()) || b.get(k) == Some(v))
    };
    let metadata_same = match (new.get("metadata"), old.get("metadata")) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            same_except(a, b, &["managedFields", "resourceVersion"])
        }
        (a, b) => a == b,
    };
    metadata_same && same_except(new, old, &["status", "metadata"])
}

/// Carries server-owned fields from `old` into an update, and what
/// `scope` may not change, and bumps the generation on spec changes.
pub fn prepare_update(r: &ResourceInfo, obj: &mut Value, old: &Value, scope: WriteScope) {
    match scope {
        // A status writer (a patch above all) mostly sends the rest as it
        // was: then there is nothing to put back, and no copy of it to make.
        WriteScope::Status if same_outside_status(obj, old) => {}
        WriteScope::Status => {
            let mut merged = old.clone();
            keep_from(&mut merged, obj, "", "status");
            // The writer's managedFields entry (subresource "status") is
            // part of the write, as upstream's field manager records it.
            keep_from(&mut merged, obj, "/metadata", "managedFields");
            *obj = merged;
        }
        WriteScope::Finalize => {
            let mut merged = old.clone();
            keep_from(&mut merged, obj, "/spec", "finalizers");
            *obj = merged;
        }
        WriteScope::EphemeralContainers => {
            let mut merged = old.clone();
            keep_from(&mut merged, obj, "/spec", "ephemeralContainers");
            keep_from(&mut merged, obj, "/metadata", "managedFields");
            *obj = merged;
        }
        WriteScope::Binding => {}
        WriteScope::Main | WriteScope::Scale => {
            normalize(r, obj);
            if r.status_subresource {
                keep_from(obj, old, "", "status");
            }
            if r.is_namespace() {
                keep_from(obj, old, "/spec", "finalizers");
            }
        }
    }
    let old_meta = meta(old);
    let m = meta_mut(obj);
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.and_then(|o| o.get(f)) {
            Some(v) => {
                m.insert(f.into(), v.clone());
            }
            None => {
                m.remove(f);
            }
        }
    }
    m.remove("selfLink");
    if m.get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        m.remove("finalizers");
    }
    if r.uses_generation && spec_differs(obj, old) {
        let g = old_meta
            .and_then(|o| o.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(obj).insert("generation".into(), json!(g + 1));
    }
}

/// Write-only conveniences of built-in kinds, folded into what is stored:
/// a Secret's `stringData` becomes base64 `data` (and wins over it).
fn normalize(r: &ResourceInfo, obj: &mut Value) {
    crate::kinds::strategy(r).default(obj);
    if !(r.group.is_empty() && r.plural == "secrets") {
        return;
    }
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = o.remove("stringData") else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default();
            data.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

/// Whether two objects differ only in metadata.resourceVersion (a no-op write).
pub fn equal_except_resource_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let same_meta = || {
        let empty = Map::new();
        let ma = a
            .get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mb = b
            .get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let keys = |m: &Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
        keys(ma) == keys(mb)
            && ma
                .iter()
                .filter(|(k, _)| *k != "resourceVersion")
                .all(|(k, v)| mb.get(k) == Some(v))
    };
    a.len() == b.len()
        && a.iter()
            .filter(|(k, _)| *k != "metadata")
            .all(|(k, v)| b.get(k) == Some(v))
        && same_meta()
}

/// Whether an update adds a finalizer to an object already being deleted.
pub fn adds_finalizer_while_deleting(obj: &Value, old: &Value) -> bool {
    if meta(old).and_then(|m| m.get("deletionTimestamp")).is_none() {
        return false;
    }
    let list = |o: &Value| strings_at(o, "/metadata/finalizers");
    let before = list(old);
    list(obj).iter().any(|f| !before.contains(f))
}

/// The garbage collector's finalizers for Foreground and Orphan deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// Whether anything still holds the object: metadata finalizers or, for a
/// namespace, the `spec.finalizers` its controller removes through /finalize.
pub fn has_finalizers(obj: &Value) -> bool {
    let non_empty = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    non_empty(meta(obj).and_then(|m| m.get("finalizers")))
        || (obj.get("kind").and_then(Value::as_str) == Some("Namespace")
            && non_empty(obj.pointer("/spec/finalizers")))
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    crate::value::strings_at(obj, "/metadata/finalizers")
}

pub fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    finalizers(obj).iter().any(|f| f == finalizer)
}

/// Sets the garbage collector's finalizer for a deletion policy, replacing
/// the other one (a later DELETE may switch policy); true if it changed.
pub fn set_gc_finalizer(obj: &mut Value, finalizer: &str) -> bool {
    let before = finalizers(obj);
    let mut after: Vec<String> = before
        .iter()
        .filter(|f| *f != FOREGROUND_FINALIZER && *f != ORPHAN_FINALIZER)
        .cloned()
        .collect();
    after.push(finalizer.to_string());
    if after == before {
        return false;
    }
    meta_mut(obj).insert("finalizers".into(), json!(after));
    true
}

/// Removes `finalizer`; true if it was there.
pub fn remove_finalizer(obj: &mut Value, finalizer: &str) -> bool {
    let before = finalizers(obj);
    let after: Vec<&String> = before.iter().filter(|f| *f != finalizer).collect();
    if after.len() == before.len() {
        return false;
    }
    let m = meta_mut(obj);
    if after.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert("finalizers".into(), json!(after));
    }
    true
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj).and_then(|m| m.get("deletionTimestamp")).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_op_detection_ignores_only_the_resource_version() {
        let a = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "v"}});
        let b = json!({"metadata": {"name": "a", "resourceVersion": "2"}, "data": {"k": "v"}});
        assert!(equal_except_resource_version(&a, &b));
        let c = json!({"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v"}});
        assert!(!equal_except_resource_version(&a, &c));
        let d = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        assert!(!equal_except_resource_version(&a, &d));
    }

    #[test]
    fn a_status_write_keeps_everything_but_status_and_managed_fields() {
        let r = crate::builtin::resource("apps", "deployments");
        let old = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1"},
                         "resourceVersion": "7", "managedFields": [{"manager": "m"}]},
                         "spec": {"replicas": 1}, "status": {"ready": 0}});
        for (sent, kept_labels) in [
            // The rest as it was: kept as sent.
            (
                json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1"},
                    "resourceVersion": "7", "managedFields": [{"manager": "s"}]},
                    "spec": {"replicas": 1}, "status": {"ready": 1}}),
                json!({"x": "1"}),
            ),
            // ... and without the resourceVersion, as a patch that leaves
            // it alone sends it.
            (
                json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1"},
                    "managedFields": [{"manager": "s"}]},
                    "spec": {"replicas": 1}, "status": {"ready": 1}}),
                json!({"x": "1"}),
            ),
            // Changes outside status: put back as they were.
            (
                json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "2"},
                    "managedFields": [{"manager": "s"}]},
                    "spec": {"replicas": 5}, "extra": 1, "status": {"ready": 1}}),
                json!({"x": "1"}),
            ),
            (
                json!({"metadata": {"name": "a", "managedFields": [{"manager": "s"}]},
                    "status": {"ready": 1}}),
                json!({"x": "1"}),
            ),
        ] {
            let mut obj = sent;
            prepare_update(&r, &mut obj, &old, WriteScope::Status);
            assert_eq!(obj["status"], json!({"ready": 1}), "{obj}");
            assert_eq!(obj["spec"], json!({"replicas": 1}), "{obj}");
            assert_eq!(obj["metadata"]["labels"], kept_labels, "{obj}");
            assert_eq!(obj["metadata"]["uid"], "u", "{obj}");
            assert_eq!(obj["metadata"]["managedFields"], json!([{"manager": "s"}]));
            assert!(obj.get("extra").is_none(), "{obj}");
        }
    }

    #[test]
    fn spec_differs_ignores_metadata_status_and_order() {
        let a = json!({"kind": "X", "metadata": {"name": "a"}, "spec": {"r": 1}, "data": 2, "status": {"s": 1}});
        let b = json!({"data": 2, "spec": {"r": 1}, "metadata": {"name": "b"}, "status": {"s": 2}});
        assert!(!spec_differs(&a, &b));
        let c = json!({"metadata": {"name": "a"}, "spec": {"r": 2}, "data": 2});
        assert!(spec_differs(&a, &c));
        let d = json!({"metadata": {"name": "a"}, "spec": {"r": 1}});
        assert!(spec_differs(&a, &d));
        assert!(spec_differs(&d, &a));
        let e = json!({"metadata": {"name": "a"}, "spec": {"r": 1}, "extra": null, "data": 2});
        assert!(spec_differs(&a, &e));
    }
}
