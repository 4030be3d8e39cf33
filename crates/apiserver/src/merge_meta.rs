//! How lists and maps of built-in types merge, for strategic merge patch
//! and server-side apply: upstream's `patchStrategy`/`patchMergeKey` tags
//! and `listType`/`listMapKeys`/`mapType` markers, which k8s-openapi's
//! schemas do not carry. They are added to the OpenAPI components as the
//! `x-kubernetes-*` extensions kube-apiserver publishes (kubectl reads them
//! to build its apply patches), and both mergers read them from there, as
//! they read a CRD's own extensions.

use serde_json::{Map, Value, json};

/// (component, property, patch strategy, merge key, list type, list map keys)
type Entry = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

const CORE: &str = "io.k8s.api.core.v1.";

/// Upstream's markers on the fields of the served built-in kinds (v1.33).
const LISTS: &[Entry] = &[
    (
        "PodSpec",
        "volumes",
        "merge,retainKeys",
        "name",
        "map",
        &["name"],
    ),
    (
        "PodSpec",
        "initContainers",
        "merge",
        "name",
        "map",
        &["name"],
    ),
    ("PodSpec", "containers", "merge", "name", "map", &["name"]),
    (
        "PodSpec",
        "ephemeralContainers",
        "merge",
        "name",
        "map",
        &["name"],
    ),
    (
        "PodSpec",
        "imagePullSecrets",
        "merge",
        "name",
        "map",
        &["name"],
    ),
    ("PodSpec", "hostAliases", "merge", "ip", "map", &["ip"]),
    (
        "PodSpec",
        "topologySpreadConstraints",
        "merge",
        "topologyKey",
        "map",
        &["topologyKey", "whenUnsatisfiable"],
    ),
    (
        "PodSpec",
        "resourceClaims",
        "merge,retainKeys",
        "name",
        "map",
        &["name"],
    ),
    (
        "PodSpec",
        "schedulingGates",
        "merge",
        "name",
        "map",
        &["name"],
    ),
    ("PodSpec", "tolerations", "", "", "atomic", &[]),
    (
        "Container",
        "ports",
        "merge",
        "containerPort",
        "map",
        &["containerPort", "protocol"],
    ),
    ("Container", "env", "merge", "name", "map", &["name"]),
    (
        "Container",
        "volumeMounts",
        "merge",
        "mountPath",
        "map",
        &["mountPath"],
    ),
    (
        "Container",
        "volumeDevices",
        "merge",
        "devicePath",
        "map",
        &["devicePath"],
    ),
    ("Container", "envFrom", "", "", "atomic", &[]),
    ("Container", "resizePolicy", "", "", "atomic", &[]),
    (
        "EphemeralContainer",
        "ports",
        "merge",
        "containerPort",
        "map",
        &["containerPort", "protocol"],
    ),
    (
        "EphemeralContainer",
        "env",
        "merge",
        "name",
        "map",
        &["name"],
    ),
    (
        "EphemeralContainer",
        "volumeMounts",
        "merge",
        "mountPath",
        "map",
        &["mountPath"],
    ),
    (
        "EphemeralContainer",
        "volumeDevices",
        "merge",
        "devicePath",
        "map",
        &["devicePath"],
    ),
    ("PodStatus", "conditions", "merge", "type", "map", &["type"]),
    ("PodStatus", "podIPs", "merge", "ip", "map", &["ip"]),
    ("PodStatus", "hostIPs", "merge", "ip", "map", &["ip"]),
    (
        "ServiceSpec",
        "ports",
        "merge",
        "port",
        "map",
        &["port", "protocol"],
    ),
    ("ServiceSpec", "clusterIPs", "", "", "atomic", &[]),
    (
        "ServiceStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    ("ServiceAccount", "secrets", "merge", "name", "", &[]),
    ("NodeStatus", "conditions", "merge", "type", "", &[]),
    ("NodeStatus", "addresses", "merge", "type", "", &[]),
    ("NodeSpec", "podCIDRs", "merge", "", "set", &[]),
    (
        "NamespaceStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "PersistentVolumeClaimStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        "merge",
        "",
        "set",
        &[],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        "merge",
        "uid",
        "map",
        &["uid"],
    ),
    (
        "io.k8s.api.apps.v1.DeploymentStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.StatefulSetStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.DaemonSetStatus",
        "conditions",
        "merge",
        "type",
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.batch.v1.JobStatus",
        "conditions",
        "merge",
        "type",
        "atomic",
        &[],
    ),
];

/// Non-list fields with a patch strategy.
const FIELDS: &[(&str, &str, &str)] = &[
    (
        "io.k8s.api.apps.v1.DeploymentSpec",
        "strategy",
        "retainKeys",
    ),
    ("PersistentVolumeClaimSpec", "dataSource", "retainKeys"),
];

/// Structs upstream marks atomic: replaced whole by apply.
const ATOMIC_MAPS: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "ObjectReference",
    "LocalObjectReference",
];

fn component(name: &str) -> String {
    if name.starts_with("io.k8s.") {
        name.to_string()
    } else {
        format!("{CORE}{name}")
    }
}

/// Adds the markers to the components they belong to.
pub fn annotate(defs: &mut Map<String, Value>) {
    for (comp, prop, strategy, key, list_type, map_keys) in LISTS {
        let Some(p) = defs
            .get_mut(&component(comp))
            .and_then(|c| c.pointer_mut(&format!("/properties/{prop}")))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if !strategy.is_empty() {
            p.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
        }
        if !key.is_empty() {
            p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
        if !list_type.is_empty() {
            p.insert("x-kubernetes-list-type".into(), json!(list_type));
        }
        if !map_keys.is_empty() {
            p.insert("x-kubernetes-list-map-keys".into(), json!(map_keys));
        }
    }
    for (comp, prop, strategy) in FIELDS {
        if let Some(p) = defs
            .get_mut(&component(comp))
            .and_then(|c| c.pointer_mut(&format!("/properties/{prop}")))
            .and_then(Value::as_object_mut)
        {
            p.insert("x-kubernetes-patch-strategy".into(), json!(strategy));
        }
    }
    // FieldsV1 is an opaque tree of path elements.
    if let Some(Value::Object(c)) = defs.get_mut("io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1") {
        c.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    for comp in ATOMIC_MAPS {
        if let Some(Value::Object(c)) = defs.get_mut(&component(comp)) {
            c.insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
    }
}

/// How a list merges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole.
    Atomic,
    /// Primitive items, merged as a set.
    Set,
    /// Items keyed by these fields.
    Map(Vec<String>),
}

/// A position in a schema while walking an object alongside it.
#[derive(Clone, Copy)]
pub struct SchemaAt<'a> {
    /// The field's own schema (where the extensions are), if known.
    /// `$ref`s point at built-in components (CRD schemas are inline).
    pub schema: Option<&'a Value>,
}

impl<'a> SchemaAt<'a> {
    pub fn new(schema: Option<&'a Value>) -> Self {
        SchemaAt { schema }
    }

    /// Follows `$ref` and the single-element `allOf` that wraps one.
    fn target(&self) -> Option<&'a Value> {
        let mut cur = self.schema?;
        for _ in 0..16 {
            if let Some(r) = cur.get("$ref").and_then(Value::as_str) {
                cur = crate::openapi::resolve_builtin(r)?;
            } else if let Some([only]) = cur
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                cur = only;
            } else {
                return Some(cur);
            }
        }
        None
    }

    fn with(&self, schema: Option<&'a Value>) -> Self {
        SchemaAt { schema }
    }

    /// The schema of field `name` of this object (or of a map's values).
    pub fn field(&self, name: &str) -> Self {
        let t = self.target();
        let prop = t
            .and_then(|t| t.get("properties"))
            .and_then(|p| p.get(name))
            .or_else(|| {
                t.and_then(|t| t.get("additionalProperties"))
                    .filter(|a| a.is_object())
            });
        // A CRD's schema leaves metadata out: it is always an ObjectMeta.
        let prop = prop.or_else(|| {
            (name == "metadata")
                .then(|| {
                    crate::openapi::builtin_components()
                        .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
                })
                .flatten()
        });
        self.with(prop)
    }

    /// The schema of this list's items.
    pub fn items(&self) -> Self {
        self.with(self.target().and_then(|t| t.get("items")))
    }

    fn ext(&self, name: &str) -> Option<&'a Value> {
        self.schema
            .and_then(|s| s.get(name))
            .or_else(|| self.target().and_then(|t| t.get(name)))
    }

    /// The strategic merge key of this list field, if it merges by key.
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.ext("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
    }

    /// Whether strategic merge patches merge this field (`merge`, `retainKeys`).
    pub fn patch_strategy_has(&self, strategy: &str) -> bool {
        self.ext("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .is_some_and(|s| s.split(',').any(|x| x == strategy))
    }

    /// The list type for server-side apply (atomic when unmarked, as upstream).
    pub fn list_kind(&self) -> ListKind {
        match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListKind::Set,
            Some("map") => ListKind::Map(crate::value::strings_at(
                self.schema.unwrap_or(&Value::Null),
                "/x-kubernetes-list-map-keys",
            ))
            .normalize(self),
            _ => ListKind::Atomic,
        }
    }

    /// Whether apply replaces this object whole.
    pub fn atomic_map(&self) -> bool {
        self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }
}

impl ListKind {
    /// Map keys may be on the resolved schema instead of the field's.
    fn normalize(self, at: &SchemaAt<'_>) -> ListKind {
        match self {
            ListKind::Map(keys) if keys.is_empty() => {
                let keys = at
                    .target()
                    .map(|t| crate::value::strings_at(t, "/x-kubernetes-list-map-keys"))
                    .unwrap_or_default();
                if keys.is_empty() {
                    ListKind::Atomic
                } else {
                    ListKind::Map(keys)
                }
            }
            other => other,
        }
    }
}

/// The schema root for objects of `r`.
pub fn root_of(r: &crate::resources::ResourceInfo) -> SchemaAt<'_> {
    SchemaAt::new(match &r.schema {
        crate::resources::Schema::Builtin { component, .. } => {
            crate::openapi::builtin_components().get(*component)
        }
        crate::resources::Schema::Structural(s) => Some(s.as_ref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_markers_are_published_and_found() {
        let defs = crate::openapi::builtin_components();
        let root = SchemaAt::new(defs.get("io.k8s.api.apps.v1.Deployment"));
        let containers = root
            .field("spec")
            .field("template")
            .field("spec")
            .field("containers");
        assert_eq!(containers.patch_merge_key(), Some("name"));
        assert_eq!(containers.list_kind(), ListKind::Map(vec!["name".into()]));
        let ports = containers.items().field("ports");
        assert_eq!(ports.patch_merge_key(), Some("containerPort"));
        let finalizers = root.field("metadata").field("finalizers");
        assert!(finalizers.patch_strategy_has("merge"));
        assert_eq!(finalizers.list_kind(), ListKind::Set);
        assert!(root.field("spec").field("selector").atomic_map());
        assert_eq!(
            root.field("spec")
                .field("template")
                .field("spec")
                .field("tolerations")
                .list_kind(),
            ListKind::Atomic
        );
    }
}
