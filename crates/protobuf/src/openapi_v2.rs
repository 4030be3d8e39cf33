//! OpenAPI v2 (Swagger 2.0) in gnostic's protobuf form
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), the
//! only form in which kubectl reads `/openapi/v2`: it validates the items of
//! a `kind: List` against these definitions.
//!
//! The messages are the part of gnostic's `openapiv2/OpenAPIv2.proto`
//! (package `openapi.v2`) that a document of definitions uses, with
//! gnostic's field numbers; what kubectl does not read (paths, parameters,
//! security) is left out. They are built from the JSON document.

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

pub mod additional_properties_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, boxed, tag = "1")]
        Schema(Box<super::Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// gnostic's `Any`: a vendor extension's value as YAML text.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// How deep schemas may nest (they are the server's own, but bounded).
const MAX_DEPTH: usize = 64;

/// Encodes a Swagger 2.0 JSON document (`swagger`, `info`, `definitions`)
/// as gnostic's protobuf `Document`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let info = doc.get("info").unwrap_or(&Value::Null);
    let definitions = doc
        .get("definitions")
        .and_then(Value::as_object)
        .map(|defs| Definitions {
            additional_properties: defs
                .iter()
                .map(|(name, s)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema(s, 0)),
                })
                .collect(),
        });
    Document {
        swagger: text(doc, "swagger"),
        info: Some(Info {
            title: text(info, "title"),
            version: text(info, "version"),
        }),
        definitions,
    }
    .encode_to_vec()
}

fn schema(v: &Value, depth: usize) -> Schema {
    let mut s = Schema::default();
    let Some(obj) = v.as_object().filter(|_| depth < MAX_DEPTH) else {
        return s;
    };
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    s.r#ref = text("$ref");
    s.format = text("format");
    s.description = text("description");
    s.required = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    match obj.get("type") {
        Some(Value::String(t)) => {
            s.r#type = Some(TypeItem {
                value: vec![t.clone()],
            })
        }
        Some(Value::Array(ts)) => {
            s.r#type = Some(TypeItem {
                value: ts
                    .iter()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect(),
            })
        }
        _ => {}
    }
    if let Some(items) = obj.get("items") {
        s.items = Some(ItemsItem {
            schema: vec![schema(items, depth + 1)],
        });
    }
    if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
        s.all_of = all.iter().map(|x| schema(x, depth + 1)).collect();
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        s.properties = Some(Properties {
            additional_properties: props
                .iter()
                .map(|(name, p)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema(p, depth + 1)),
                })
                .collect(),
        });
    }
    s.additional_properties = match obj.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(Box::new(AdditionalPropertiesItem {
            oneof: Some(additional_properties_item::Oneof::Boolean(*b)),
        })),
        Some(p @ Value::Object(_)) => Some(Box::new(AdditionalPropertiesItem {
            oneof: Some(additional_properties_item::Oneof::Schema(Box::new(schema(
                p,
                depth + 1,
            )))),
        })),
        _ => None,
    };
    s.vendor_extension = obj
        .iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(Any {
                yaml: serde_yaml::to_string(v).unwrap_or_default(),
            }),
        })
        .collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_keeps_its_definitions_and_their_kinds() {
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "definitions": {"io.k8s.api.core.v1.ConfigMap": {
                "type": "object", "description": "cm",
                "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}},
                               "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]}}});
        let decoded = Document::decode(&encode_document(&doc)[..]).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        let defs = decoded.definitions.unwrap().additional_properties;
        let cm = defs[0].value.as_ref().unwrap();
        assert_eq!(defs[0].name, "io.k8s.api.core.v1.ConfigMap");
        assert_eq!(cm.r#type.as_ref().unwrap().value, vec!["object"]);
        let props = &cm.properties.as_ref().unwrap().additional_properties;
        assert_eq!(
            props[1].value.as_ref().unwrap().r#ref,
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(matches!(
            props[0]
                .value
                .as_ref()
                .unwrap()
                .additional_properties
                .as_deref(),
            Some(AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Schema(_))
            })
        ));
        let gvk = &cm.vendor_extension[0];
        assert_eq!(gvk.name, "x-kubernetes-group-version-kind");
        assert!(gvk.value.as_ref().unwrap().yaml.contains("kind: ConfigMap"));
    }
}
