//! Member objects as the execution controller reads them: plain JSON,
//! without `metadata.managedFields`.
//!
//! Every apply's answer and every event of the member watches (the echo
//! of each apply among them) is an object the controller reads for its
//! version, its labels, its status and whether it holds what was applied:
//! never its managedFields, which in a member's copy are about as large
//! as the rest of it. Decoded into a typed object and converted back to
//! JSON, the two were a few percent of the hub's CPU in a burst at 100
//! members; here the managedFields are skipped over as they are read, and
//! the object is kept as the JSON its readers want.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// An object's JSON without `metadata.managedFields`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lean(pub Value);

impl<'de> Deserialize<'de> for Lean {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor { skip: None }).map(Lean)
    }
}

/// A member object as a watch or an apply brings it: its JSON (without
/// managedFields) and, for the watch's bookkeeping, its metadata.
#[derive(Clone, Debug, Default)]
pub struct LiveObject {
    pub metadata: ObjectMeta,
    pub live: Value,
}

impl LiveObject {
    pub fn kind(&self) -> &str {
        self.live.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// Gives the object the apiVersion and kind of the watch it came by,
    /// where it has none: a kube-apiserver leaves them out of the items of
    /// a list of a built-in kind (kubernetes/kubernetes#3030), and an
    /// object without them cannot be found holding a manifest, which
    /// names both.
    pub fn typed_as(&mut self, ar: &ApiResource) {
        if let Some(o) = self.live.as_object_mut() {
            for (field, value) in [("apiVersion", &ar.api_version), ("kind", &ar.kind)] {
                if !o.get(field).is_some_and(Value::is_string) {
                    o.insert(field.into(), Value::String(value.clone()));
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for LiveObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Lean(live) = Lean::deserialize(d)?;
        let metadata = match live.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(de::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(LiveObject { metadata, live })
    }
}

/// As kube-rs's `DynamicObject`: the kind is told at run time.
impl Resource for LiveObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Builds a JSON object, leaving out the key `skip`; at the top level
/// (`skip` None) its `metadata` is built leaving out `managedFields`.
struct ObjectVisitor {
    skip: Option<&'static str>,
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.skip == Some(key.as_str()) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = if self.skip.is_none() && key == "metadata" {
                map.next_value_seed(Metadata)?
            } else {
                map.next_value::<Value>()?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// `metadata` without `managedFields`; anything but an object as it is.
struct Metadata;

impl<'de> DeserializeSeed<'de> for Metadata {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        // Value's own visitor for anything but a map, ours for a map.
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("object metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
                ObjectVisitor {
                    skip: Some("managedFields"),
                }
                .visit_map(map)
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
        }
        d.deserialize_any(Either)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member_copy() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "web", "namespace": "default", "resourceVersion": "42",
                "labels": {"karmada.io/managed": "true"},
                "annotations": {"work.karmada.io/name": "web-abc"},
                "managedFields": [{"manager": "flotilla", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]
            },
            "data": {"k": "v", "managedFields": "a key of the data, kept"}
        })
    }

    #[test]
    fn an_object_is_read_whole_but_for_its_managed_fields() {
        let text = member_copy().to_string();
        let Lean(v) = serde_json::from_str(&text).unwrap();
        let mut expected = member_copy();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(v, expected);
    }

    #[test]
    fn a_live_object_carries_its_metadata_for_the_watch() {
        let obj: LiveObject = serde_json::from_str(&member_copy().to_string()).unwrap();
        assert_eq!(obj.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(obj.metadata.managed_fields, None);
        assert_eq!(obj.kind(), "ConfigMap");
        assert_eq!(obj.live["data"]["k"], "v");
    }

    #[test]
    fn an_item_of_a_list_takes_its_type_from_the_watch() {
        let mut item: LiveObject =
            serde_json::from_value(json!({"metadata": {"name": "web"}, "data": {}})).unwrap();
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        item.typed_as(&ar);
        assert_eq!(item.kind(), "ConfigMap");
        assert_eq!(item.live["apiVersion"], "v1");
        // An object that says what it is keeps it.
        let mut typed: LiveObject = serde_json::from_value(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        )
        .unwrap();
        typed.typed_as(&ar);
        assert_eq!(typed.kind(), "Deployment");
    }

    #[test]
    fn what_is_not_an_object_is_refused_not_panicked_on() {
        assert!(serde_json::from_str::<Lean>("[1, 2]").is_err());
        assert!(serde_json::from_str::<LiveObject>("\"text\"").is_err());
        assert!(serde_json::from_str::<LiveObject>(r#"{"metadata": 5}"#).is_err());
        let Lean(v) = serde_json::from_str(r#"{"metadata": null}"#).unwrap();
        assert_eq!(v, json!({"metadata": null}));
    }
}
