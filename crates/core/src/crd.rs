//! CustomResourceDefinition manifests for the kinds Flotilla serves as CRDs
//! (Karmada's, the MCS API's, the front ends', the fabric's and the
//! peering's): one description of a kind, and the printer columns and
//! schemas they share.

use serde_json::{Value, json};

/// One kind as a CRD describes it.
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: String,
    pub plural: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// The categories it is listed in (`kubectl get karmada-io`).
    pub categories: &'static [&'static str],
    pub columns: Vec<Value>,
    pub spec: Value,
}

impl Kind {
    /// The CRD manifest: one served storage version with a status
    /// subresource, `spec` required and `status` kept as written.
    pub fn crd(&self) -> Value {
        let singular = self.kind.to_lowercase();
        let mut names = json!({
            "kind": &self.kind,
            "listKind": format!("{}List", self.kind),
            "plural": self.plural,
            "singular": singular,
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            names["categories"] = json!(self.categories);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group)},
            "spec": {
                "group": self.group,
                "names": names,
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": self.version,
                    "served": true,
                    "storage": true,
                    "additionalPrinterColumns": self.columns,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": self.spec,
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        },
                        "required": ["spec"],
                    }},
                }],
            },
        })
    }
}

/// A printer column.
pub fn column(name: &str, type_: &str, path: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path})
}

/// A printer column shown only by `-o wide`.
pub fn wide(name: &str, type_: &str, path: &str) -> Value {
    json!({"name": name, "type": type_, "jsonPath": path, "priority": 1})
}

/// The AGE column.
pub fn age() -> Value {
    column("AGE", "date", ".metadata.creationTimestamp")
}

/// A column showing the status of the condition of type `type_`.
pub fn condition(name: &str, type_: &str) -> Value {
    column(
        name,
        "string",
        &format!(".status.conditions[?(@.type==\"{type_}\")].status"),
    )
}

/// A `spec` schema that keeps whatever is written (the controllers read
/// such kinds with typed views).
pub fn open_schema() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// An object whose unlisted fields are kept as written.
pub fn open_object(properties: Value, required: &[&str]) -> Value {
    let mut o = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": properties});
    if !required.is_empty() {
        o["required"] = json!(required);
    }
    o
}

/// Lets objects of `crd` have no `spec` at all (kinds with status only).
pub fn spec_optional(crd: &mut Value) {
    if let Some(schema) = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .and_then(Value::as_object_mut)
    {
        schema.remove("required");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_becomes_a_crd_with_its_names_scope_and_columns() {
        let kind = Kind {
            group: "example.io",
            version: "v1",
            kind: "Widget".into(),
            plural: "widgets".into(),
            short_names: vec!["wd".into()],
            namespaced: false,
            categories: &["all-widgets"],
            columns: vec![age()],
            spec: open_schema(),
        };
        let mut crd = kind.crd();
        assert_eq!(crd["metadata"]["name"], "widgets.example.io");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["wd"]));
        assert_eq!(crd["spec"]["names"]["categories"], json!(["all-widgets"]));
        assert_eq!(
            crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
            "AGE"
        );
        let required = "/spec/versions/0/schema/openAPIV3Schema/required";
        assert_eq!(crd.pointer(required), Some(&json!(["spec"])));
        spec_optional(&mut crd);
        assert_eq!(crd.pointer(required), None);
    }
}
