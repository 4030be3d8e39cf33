//! JSON patch (RFC 6902, with Kubernetes' `test` quirk) and JSON merge patch
//! (RFC 7386).

use serde_json::Value;

/// Applies an RFC 6902 patch. As Kubernetes' patch library does, a `test`
/// of `null` against a missing member succeeds (kube-rs's finalizer helper
/// relies on it).
pub fn apply_json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or_else(|| "a JSON patch must be an array of operations".to_string())?;
    let mut kept = Vec::with_capacity(ops.len());
    for op in ops {
        let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_some_and(Value::is_null);
        if is_null_test {
            let path = op.get("path").and_then(Value::as_str).unwrap_or("");
            match doc.pointer(path) {
                None | Some(Value::Null) => continue,
                Some(_) => return Err(format!("testing value {path} failed: value is not null")),
            }
        }
        kept.push(op.clone());
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(kept))
        .map_err(|e| format!("invalid JSON patch: {e}"))?;
    json_patch::patch(doc, &patch).map_err(|e| e.to_string())
}

pub fn apply_merge_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    if !patch.is_object() {
        return Err("a merge patch must be a JSON object".into());
    }
    json_patch::merge(doc, patch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_test_on_missing_member_passes() {
        let mut doc = json!({"metadata": {"name": "a"}});
        apply_json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["x"]));
        assert!(
            apply_json_patch(
                &mut doc,
                &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}])
            )
            .is_err()
        );
        assert!(
            apply_json_patch(
                &mut doc,
                &json!([{"op": "test", "path": "/metadata/name", "value": "b"}])
            )
            .is_err()
        );
    }

    #[test]
    fn merge_patch_removes_nulls() {
        let mut doc = json!({"data": {"a": "1", "b": "2"}});
        apply_merge_patch(&mut doc, &json!({"data": {"a": null, "c": "3"}})).unwrap();
        assert_eq!(doc, json!({"data": {"b": "2", "c": "3"}}));
    }
}
