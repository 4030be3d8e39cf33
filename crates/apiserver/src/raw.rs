//! Stored objects served without decoding them: the top level and the
//! metadata of the stored JSON are split into fields, the served fields
//! (apiVersion, kind, resourceVersion) are stamped in, and every other
//! field is copied through as the stored text. A watch event or a list item
//! costs a scan of the bytes instead of building and dropping a tree.

use std::fmt;

use flotilla_store::KeyValue;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;

/// An object's fields in their stored order, values as their stored text.
struct Fields<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(FieldsVisitor)
    }
}

/// Writes `fields` as a JSON object, with `stamped` replacing the field of
/// the same name in place or, when absent, following the rest (the order
/// `objects::decode` gives them).
fn write_object(out: &mut Vec<u8>, fields: &[(String, &RawValue)], stamped: &[(&str, &[u8])]) {
    out.push(b'{');
    let mut first = true;
    let mut separate = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    for (name, value) in fields {
        separate(out);
        write_key(out, name);
        match stamped.iter().find(|(n, _)| n == name) {
            Some((_, v)) => out.extend_from_slice(v),
            None => out.extend_from_slice(value.get().as_bytes()),
        }
    }
    for (name, value) in stamped {
        if !fields.iter().any(|(n, _)| n == name) {
            separate(out);
            write_key(out, name);
            out.extend_from_slice(value);
        }
    }
    out.push(b'}');
}

fn write_key(out: &mut Vec<u8>, name: &str) {
    // Serializing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, name);
    out.push(b':');
}

/// Appends the stored object `kv` to `out` as it is served: the same
/// bytes as serializing `objects::decode(r, kv)`.
pub fn write_served(out: &mut Vec<u8>, r: &ResourceInfo, kv: &KeyValue) -> ApiResult<()> {
    let corrupt = |e: serde_json::Error| {
        ApiError::internal(format!("stored object {} is corrupt: {e}", kv.key))
    };
    let converted = r.conversion.is_some();
    let Ok(top) = serde_json::from_slice::<Fields>(&kv.value)
        .map_err(|_| ())
        .and_then(|top| {
            // A converted kind is served as decoding converts it.
            if converted { Err(()) } else { Ok(top) }
        })
    else {
        // Not an object: served as decoding it would.
        let v = crate::objects::decode(r, kv)?;
        return serde_json::to_writer(out, &v).map_err(corrupt);
    };
    let api_version = serde_json::to_vec(&r.api_version()).map_err(corrupt)?;
    let kind = serde_json::to_vec(&r.kind).map_err(corrupt)?;
    let revision = format!("\"{}\"", kv.mod_revision);
    let metadata = match top.0.iter().find(|(n, _)| n == "metadata") {
        Some((_, raw)) => match serde_json::from_str::<Fields>(raw.get()) {
            Ok(mut meta) => {
                // A stored resourceVersion (there should be none) is
                // replaced at the end, as `objects::stamp` places it.
                meta.0.retain(|(n, _)| n != "resourceVersion");
                let mut bytes = Vec::with_capacity(raw.get().len() + 32);
                write_object(
                    &mut bytes,
                    &meta.0,
                    &[("resourceVersion", revision.as_bytes())],
                );
                Some(bytes)
            }
            // metadata that is not an object is served as stored.
            Err(_) => None,
        },
        None => None,
    };
    let mut stamped: Vec<(&str, &[u8])> = vec![("apiVersion", &api_version), ("kind", &kind)];
    if let Some(m) = &metadata {
        stamped.push(("metadata", m));
    }
    write_object(out, &top.0, &stamped);
    Ok(())
}

/// The stored object `kv` as served (see [`write_served`]).
pub fn served(r: &ResourceInfo, kv: &KeyValue) -> ApiResult<Vec<u8>> {
    let mut out = Vec::with_capacity(kv.value.len() + 64);
    write_served(&mut out, r, kv)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn served_as_decoded(r: &ResourceInfo, stored: &[u8]) {
        let kv = KeyValue {
            key: "/registry/configmaps/default/a".into(),
            value: bytes::Bytes::copy_from_slice(stored),
            create_revision: 3,
            mod_revision: 42,
        };
        let decoded = serde_json::to_vec(&crate::objects::decode(r, &kv).unwrap()).unwrap();
        let raw = served(r, &kv).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&raw),
            String::from_utf8_lossy(&decoded)
        );
        let v: Value = serde_json::from_slice(&raw).unwrap();
        if v["metadata"].is_object() {
            assert_eq!(v["metadata"]["resourceVersion"], "42");
        }
    }

    #[test]
    fn served_bytes_are_the_decoded_object_serialized() {
        let r = crate::builtin::resource("", "configmaps");
        let cases = [
            // As stored: no resourceVersion, apiVersion and kind first.
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x\"y"}}, "data": {"k": "v\n\u{00e9} \u{2028}", "n": "1"}}),
            // Without apiVersion and kind: they follow the stored fields.
            json!({"metadata": {"name": "a", "uid": "u"}, "data": {}}),
            // A stale resourceVersion is replaced, at the end.
            json!({"metadata": {"resourceVersion": "7", "name": "a", "uid": "u"}, "kind": "Other", "binaryData": {"b": "AAE="}}),
            // Numbers, nulls, nesting, escaped keys.
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "annotations": {"a\"b": "c"}}, "x": [1, 2.5, -3e300, null, true, {"y": []}]}),
            // metadata that is not an object, and none at all.
            json!({"metadata": "odd", "data": {"k": "v"}}),
            json!({"data": {"k": "v"}}),
            json!([1, 2]),
        ];
        for case in cases {
            served_as_decoded(&r, &serde_json::to_vec(&case).unwrap());
        }
    }

    #[test]
    fn corrupt_stored_bytes_are_an_internal_error() {
        let r = crate::builtin::resources().remove(0);
        let kv = KeyValue {
            key: "/registry/x".into(),
            value: bytes::Bytes::from_static(b"{\"metadata\": "),
            create_revision: 1,
            mod_revision: 1,
        };
        let e = served(&r, &kv).unwrap_err();
        assert_eq!(e.to_status()["code"], 500);
    }
}
