//! Reads of JSON objects by pointer, with the empty value when absent,
//! and an object's metadata: what printers, CRD handling, conversion and
//! admission do with untyped objects.

use serde_json::{Map, Value, json};

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

pub fn i64_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

pub fn array_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The string items of the array at `pointer`.
pub fn strings_at(v: &Value, pointer: &str) -> Vec<String> {
    array_at(v, pointer)
        .iter()
        .filter_map(|x| x.as_str().map(String::from))
        .collect()
}

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}
