//! OpenAPI v3: an index and one document per group-version, for built-ins
//! (schemas from k8s-openapi) and CRDs (their structural schemas). kubectl
//! reads these for `apply`'s server-side validation check and `explain`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::builtin;
use crate::resources::{Registry, ResourceInfo, Schema};

const REF_PREFIX: &str = "#/components/schemas/";

/// Component schemas of every built-in kind and what they reference.
pub fn builtin_components() -> &'static Map<String, Value> {
    static COMPONENTS: OnceLock<Map<String, Value>> = OnceLock::new();
    COMPONENTS.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().into_generator();
        let types = builtin::types();
        for t in &types {
            (t.schema)(&mut generator);
        }
        // ObjectMeta is needed by CRD documents even if no kind pulled it in.
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        let mut defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
        crate::merge_meta::annotate(&mut defs);
        for t in &types {
            if let Some(Value::Object(s)) = defs.get_mut(t.component) {
                s.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
                );
            }
        }
        defs
    })
}

/// Resolves `#/components/schemas/<name>` among the built-in components.
pub fn resolve_builtin(reference: &str) -> Option<&'static Value> {
    builtin_components().get(reference.strip_prefix(REF_PREFIX)?)
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str)
                && let Some(name) = r.strip_prefix(REF_PREFIX)
            {
                out.push(name.to_string());
            }
            for x in m.values() {
                collect_refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// The named components and everything they reach.
fn reachable(roots: impl IntoIterator<Item = String>) -> Map<String, Value> {
    let all = builtin_components();
    let mut seen = BTreeSet::new();
    let mut stack: Vec<String> = roots.into_iter().collect();
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(s) = all.get(&name) {
            collect_refs(s, &mut stack);
        }
    }
    seen.into_iter()
        .filter_map(|n| all.get(&n).map(|s| (n, s.clone())))
        .collect()
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Upstream's component name for a custom kind: reversed group, version, kind.
fn custom_component(r: &ResourceInfo) -> String {
    let mut parts: Vec<&str> = r.group.split('.').collect();
    parts.reverse();
    format!("{}.{}.{}", parts.join("."), r.version, r.kind)
}

fn custom_schema(r: &ResourceInfo, schema: &Value) -> Value {
    let mut s = schema.clone();
    if !s.is_object() {
        s = json!({"type": "object"});
    }
    let props = s
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(props)) = props {
        props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        props.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("{REF_PREFIX}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}],
                   "description": "Standard object's metadata."}),
        );
    }
    s["x-kubernetes-group-version-kind"] =
        json!([{"group": r.group, "version": r.version, "kind": r.kind}]);
    s
}

fn param(name: &str, location: &str, ty: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": ty}, "uniqueItems": true})
}

fn operation(
    r: &ResourceInfo,
    action: &str,
    verb_id: &str,
    component: &str,
    extra: Vec<Value>,
) -> Value {
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let group_id: String = r
        .group
        .split('.')
        .next()
        .map(|g| {
            let mut c = g.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect(),
                None => "Core".into(),
            }
        })
        .unwrap_or_default();
    let version_id = {
        let mut c = r.version.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let mut params = vec![
        param("dryRun", "query", "string"),
        param("fieldManager", "query", "string"),
        param("fieldValidation", "query", "string"),
    ];
    params.extend(extra);
    let mut op = json!({
        "operationId": format!("{verb_id}{}{version_id}{scope}{}", if r.group.is_empty() { "Core".to_string() } else { group_id }, r.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{REF_PREFIX}{component}")}}}}},
    });
    if matches!(action, "put" | "post" | "patch") {
        // kubectl sends strategic merge patches only where the document offers them.
        let types: &[&str] = if action == "patch" && !r.custom {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else if action == "patch" {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &["application/json", "application/yaml"]
        };
        let content: Map<String, Value> = types
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    json!({"schema": {"$ref": format!("{REF_PREFIX}{component}")}}),
                )
            })
            .collect();
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

fn gv_document(group: &str, version: &str, resources: &[Arc<ResourceInfo>]) -> Value {
    let mut paths = Map::new();
    let mut components = Map::new();
    let mut builtin_roots = vec!["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".to_string()];
    for r in resources {
        let component = match &r.schema {
            Schema::Builtin { component, .. } => {
                builtin_roots.push(component.to_string());
                component.to_string()
            }
            Schema::Structural(s) => {
                let name = custom_component(r);
                components.insert(name.clone(), custom_schema(r, s));
                name
            }
        };
        let base = format!("/{}", gv_path(group, version));
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        let item = format!("{collection}/{{name}}");
        paths.insert(
            collection,
            json!({
                "get": operation(r, "list", "list", &component, vec![param("labelSelector", "query", "string"), param("fieldSelector", "query", "string"), param("watch", "query", "boolean")]),
                "post": operation(r, "post", "create", &component, vec![]),
            }),
        );
        paths.insert(
            item,
            json!({
                "get": operation(r, "get", "read", &component, vec![]),
                "put": operation(r, "put", "replace", &component, vec![]),
                "patch": operation(r, "patch", "patch", &component, vec![param("force", "query", "boolean")]),
                "delete": operation(r, "delete", "delete", &component, vec![]),
            }),
        );
    }
    components.extend(reachable(builtin_roots));
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::version::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": components},
    })
}

/// Rewrites `#/components/schemas/X` references to Swagger 2.0's
/// `#/definitions/X`.
fn to_v2_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix(REF_PREFIX)
            {
                *r = format!("#/definitions/{name}");
            }
            m.values_mut().for_each(to_v2_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2_refs),
        _ => {}
    }
}

/// `/openapi/v2`: one Swagger 2.0 document with the definitions of every
/// served kind (no paths: kubectl reads definitions, to validate the items
/// of a `kind: List` and for `explain` when v3 is missing).
fn v2_document(registry: &Registry) -> Value {
    let mut definitions = builtin_components().clone();
    for r in registry.all() {
        if let Schema::Structural(s) = &r.schema {
            definitions.insert(custom_component(&r), custom_schema(&r, s));
        }
    }
    let mut definitions = Value::Object(definitions);
    to_v2_refs(&mut definitions);
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::version::GIT_VERSION},
        "paths": {},
        "definitions": definitions,
    })
}

/// `/openapi/v2` as JSON and as gnostic protobuf.
#[derive(Clone)]
pub struct V2 {
    pub json: Arc<Vec<u8>>,
    pub protobuf: Arc<Vec<u8>>,
}

struct Cached {
    generation: u64,
    /// Built on first use.
    v2: OnceLock<V2>,
    /// gv path → (hash, document bytes).
    documents: HashMap<String, (String, Arc<Vec<u8>>)>,
    index: Arc<Vec<u8>>,
}

/// Builds documents lazily and rebuilds them when the registry changes.
#[derive(Default)]
pub struct OpenApi {
    cached: Mutex<Option<Arc<Cached>>>,
}

impl OpenApi {
    fn current(&self, registry: &Registry) -> Arc<Cached> {
        let generation = registry.generation();
        let mut cached = self.cached.lock();
        if let Some(c) = cached.as_ref()
            && c.generation == generation
        {
            return c.clone();
        }
        let mut documents = HashMap::new();
        let mut index = BTreeMap::new();
        for (group, versions) in registry.groups() {
            for version in versions {
                let resources = registry.resources_in(&group, &version);
                let doc = gv_document(&group, &version, &resources);
                let bytes = serde_json::to_vec(&doc).unwrap_or_default();
                let hash = hex(&Sha256::digest(&bytes));
                let path = gv_path(&group, &version);
                index.insert(
                    path.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
                );
                documents.insert(path, (hash, Arc::new(bytes)));
            }
        }
        let index = serde_json::to_vec(&json!({"paths": index})).unwrap_or_default();
        let c = Arc::new(Cached {
            generation,
            v2: OnceLock::new(),
            documents,
            index: Arc::new(index),
        });
        *cached = Some(c.clone());
        c
    }

    pub fn v2(&self, registry: &Registry) -> V2 {
        let cached = self.current(registry);
        cached
            .v2
            .get_or_init(|| {
                let doc = v2_document(registry);
                let json = serde_json::to_vec(&doc).unwrap_or_default();
                let protobuf = flotilla_protobuf::openapi_v2::encode_document(&doc);
                V2 {
                    json: Arc::new(json),
                    protobuf: Arc::new(protobuf),
                }
            })
            .clone()
    }

    pub fn index(&self, registry: &Registry) -> Arc<Vec<u8>> {
        self.current(registry).index.clone()
    }

    /// The document for `api/v1` or `apis/<g>/<v>`, with its hash.
    pub fn document(&self, registry: &Registry, path: &str) -> Option<(String, Arc<Vec<u8>>)> {
        self.current(registry).documents.get(path).cloned()
    }
}

/// Upper-case hex, as kube-apiserver writes the hashes of its OpenAPI and
/// discovery documents (their ETags).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}
