//! The `/scale` subresource: an `autoscaling/v1` Scale view of a workload's
//! replicas, for built-ins and for CRDs that declare it.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::objects::meta_str;
use crate::resources::{ResourceInfo, ScalePaths, ScaleSelector};

/// `.spec.replicas` (a CRD's simple JSON path) as a JSON pointer.
pub fn json_path_to_pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .fold(String::new(), |acc, s| format!("{acc}/{s}"))
}

fn paths(r: &ResourceInfo) -> ApiResult<&ScalePaths> {
    r.scale.as_ref().ok_or_else(ApiError::path_not_found)
}

/// The Scale of `obj`.
pub fn view(r: &ResourceInfo, obj: &Value) -> ApiResult<Value> {
    let p = paths(r)?;
    let mut metadata = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        let v = meta_str(obj, f);
        if !v.is_empty() {
            metadata[f] = json!(v);
        }
    }
    let replicas = |ptr: &str| obj.pointer(ptr).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({"replicas": replicas(&p.status_replicas)});
    let selector = match &p.selector {
        ScaleSelector::None => String::new(),
        ScaleSelector::SpecSelector => format_label_selector(obj.pointer("/spec/selector")),
        ScaleSelector::Path(ptr) => obj
            .pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    };
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas(&p.spec_replicas)},
        "status": status,
    }))
}

/// Writes the replicas a client set on `scale` into `obj`; carries the
/// Scale's resourceVersion over as the write's precondition.
pub fn write_back(r: &ResourceInfo, obj: &mut Value, scale: &Value) -> ApiResult<()> {
    let p = paths(r)?;
    let invalid = |message: String| {
        ApiError::invalid(
            "autoscaling",
            "Scale",
            meta_str(obj, "name"),
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.replicas".into(),
                message,
            }],
        )
    };
    let replicas = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_i64() {
            Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => n,
            Some(n) => {
                return Err(invalid(format!(
                    "Invalid value: {n}: must be greater than or equal to 0"
                )));
            }
            None => return Err(invalid(format!("Invalid value: {v}: must be an integer"))),
        },
    };
    set_pointer(obj, &p.spec_replicas, json!(replicas));
    let rv = meta_str(scale, "resourceVersion").to_string();
    let m = crate::objects::meta_mut(obj);
    if rv.is_empty() {
        m.remove("resourceVersion");
    } else {
        m.insert("resourceVersion".into(), json!(rv));
    }
    Ok(())
}

/// Sets the value at `pointer`, creating objects along the way.
fn set_pointer(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert(part.to_string(), value);
            return;
        }
        cur = map.entry(part.to_string()).or_insert_with(|| json!({}));
    }
}

/// A LabelSelector in the string form of `kubectl get -l`:
/// `app=web,tier in (a,b),!legacy`.
pub fn format_label_selector(selector: Option<&Value>) -> String {
    selector.map_or_else(String::new, flotilla_core::selector::format_label_selector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_selectors_convert() {
        assert_eq!(json_path_to_pointer(".spec.replicas"), "/spec/replicas");
        let sel = json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "legacy", "operator": "DoesNotExist"}]});
        assert_eq!(
            format_label_selector(Some(&sel)),
            "app=web,tier in (a,b),!legacy"
        );
        let mut obj = json!({"metadata": {}});
        set_pointer(&mut obj, "/spec/replicas", json!(3));
        assert_eq!(obj, json!({"metadata": {}, "spec": {"replicas": 3}}));
    }
}
