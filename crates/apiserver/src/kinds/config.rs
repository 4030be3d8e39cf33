//! ConfigMaps and Secrets: at most 1 MiB of data, frozen once
//! `immutable: true`, as upstream validates them; a Secret's type never
//! changes, and Secrets are selectable by type.

use base64::Engine as _;
use serde_json::Value;

use super::Strategy;
use crate::error::Cause;
use crate::table::prelude::*;

/// What a ConfigMap or Secret may hold, keys and values together: 1 MiB.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

pub struct ConfigMaps;
pub struct Secrets;

impl Strategy for ConfigMaps {
    /// Upstream's cause names the whole object.
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        too_large(obj, "").into_iter().collect()
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        frozen(new, old, &["data", "binaryData"])
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Data", "integer", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let n = o
            .get("data")
            .and_then(Value::as_object)
            .map_or(0, |m| m.len())
            + o.get("binaryData")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
        vec![name, json!(n), json!(created)]
    }
}

/// An `immutable: true` object keeps its data and stays immutable.
fn frozen(new: &Value, old: &Value, fields: &[&str]) -> Vec<Cause> {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return Vec::new();
    }
    let forbidden = |field: &str| Cause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: "Forbidden: field is immutable when `immutable` is set".into(),
    };
    let mut causes = Vec::new();
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(forbidden("immutable"));
    }
    for field in fields {
        if new.get(*field) != old.get(*field) {
            causes.push(forbidden(field));
        }
    }
    causes
}

impl Strategy for Secrets {
    /// Upstream's SetDefaults_Secret: no type is `Opaque`.
    fn default(&self, obj: &mut Value) {
        if let Some(map) = obj.as_object_mut()
            && map
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        {
            map.insert("type".into(), Value::from("Opaque"));
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    /// Upstream's cause names `data`; values count decoded.
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        too_large(obj, "data").into_iter().collect()
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = frozen(new, old, &["data"]);
        // A Secret's type never changes (an absent one is Opaque).
        let kind = |o: &Value| {
            o.get("type")
                .and_then(Value::as_str)
                .unwrap_or("Opaque")
                .to_string()
        };
        if kind(new) != kind(old) {
            causes.push(Cause {
                reason: "FieldValueInvalid",
                field: "type".into(),
                message: format!("Invalid value: \"{}\": field is immutable", kind(new)),
            });
        }
        causes
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Type", "string", 0),
            col("Data", "integer", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let n = o
            .get("data")
            .and_then(Value::as_object)
            .map_or(0, |m| m.len());
        let t = match s(o, "/type") {
            "" => "Opaque",
            t => t,
        };
        vec![name, json!(t), json!(n), json!(created)]
    }
}

/// 422 for data over [`MAX_DATA_BYTES`] (binary and Secret values counted
/// decoded).
fn too_large(obj: &Value, field: &str) -> Option<Cause> {
    let decoded = |v: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_or(v.len(), |b| b.len())
    };
    let mut total = 0;
    for (map, base64) in [
        ("data", field == "data"),
        ("binaryData", true),
        ("stringData", false),
    ] {
        for (k, v) in obj
            .get(map)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let v = v.as_str().unwrap_or_default();
            total += k.len() + if base64 { decoded(v) } else { v.len() };
        }
    }
    (total > MAX_DATA_BYTES).then(|| Cause {
        reason: "FieldValueTooLong",
        field: field.into(),
        message: format!("Too long: may not be more than {MAX_DATA_BYTES} bytes"),
    })
}
