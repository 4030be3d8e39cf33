//! Strategic merge patch for built-in kinds: maps merge recursively, lists
//! of keyed objects merge by their patch merge key (containers by name,
//! container ports by containerPort, ...), lists with the merge strategy
//! merge as sets, other lists are replaced. Keys and strategies come from
//! the schema (see `merge_meta`). The directives `$patch`,
//! `$setElementOrder`, `$retainKeys` and `$deleteFromPrimitiveList` are
//! honoured.

use serde_json::{Map, Value};

use crate::merge_meta::SchemaAt;

/// Why a strategic merge patch does not apply, and where.
#[derive(Debug, PartialEq, Eq)]
pub struct PatchError {
    /// Dotted path of the offending field (`spec.template.spec.containers`).
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

fn error(path: &[String], message: impl Into<String>) -> PatchError {
    PatchError {
        field: path.join("."),
        message: message.into(),
    }
}

pub fn apply(doc: &mut Value, patch: &Value, at: SchemaAt<'_>) -> Result<(), PatchError> {
    let Some(patch) = patch.as_object() else {
        return Err(error(&[], "a strategic merge patch must be a JSON object"));
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(target) = doc {
        merge_map(target, patch, at, &mut Vec::new())?;
    }
    Ok(())
}

fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        other => other.clone(),
    }
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    at: SchemaAt<'_>,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = match strip(&Value::Object(patch.clone())) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            return Ok(());
        }
        Some("delete") => {
            target.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(error(
                path,
                format!(
                    "unknown patch directive $patch: {other:?}: supported values: \"replace\", \"merge\", \"delete\""
                ),
            ));
        }
    }
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((field.to_string(), value.clone()));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) =
                (target.get_mut(field), value.as_array())
            {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            target.remove(key);
            continue;
        }
        path.push(key.clone());
        let result = merge_field(target, key, value, at.field(key), path);
        path.pop();
        result?;
    }
    for (field, order) in orders {
        reorder(target, &field, &order, at.field(&field));
    }
    Ok(())
}

fn merge_field(
    target: &mut Map<String, Value>,
    key: &str,
    value: &Value,
    at: SchemaAt<'_>,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    let merge_key = at.patch_merge_key();
    match (target.get_mut(key), value) {
        (Some(Value::Object(existing)), Value::Object(p)) => {
            if p.get("$patch").and_then(Value::as_str) == Some("delete") {
                target.remove(key);
                return Ok(());
            }
            merge_map(existing, p, at, path)
        }
        (Some(Value::Array(existing)), Value::Array(items)) => {
            if let Some(mk) = merge_key {
                merge_keyed_list(existing, items, mk, at.items(), path)
            } else if at.patch_strategy_has("merge") {
                for item in items {
                    if !existing.contains(item) {
                        existing.push(item.clone());
                    }
                }
                Ok(())
            } else {
                *existing = items.iter().map(strip).collect();
                Ok(())
            }
        }
        (_, Value::Object(p)) if p.get("$patch").and_then(Value::as_str) == Some("delete") => {
            target.remove(key);
            Ok(())
        }
        (_, Value::Array(items)) if merge_key.is_some() => {
            // Nothing to merge into: keep non-directive entries.
            let kept: Vec<Value> = items
                .iter()
                .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                .map(strip)
                .collect();
            target.insert(key.to_string(), Value::Array(kept));
            Ok(())
        }
        _ => {
            target.insert(key.to_string(), strip(value));
            Ok(())
        }
    }
}

fn merge_keyed_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    mk: &str,
    item_schema: SchemaAt<'_>,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    for item in items {
        let Some(p) = item.as_object() else {
            return Err(error(
                path,
                format!("list items must be objects with the merge key {mk:?}, found {item}"),
            ));
        };
        if p.get("$patch").and_then(Value::as_str) == Some("replace") {
            // `{"$patch": "replace"}` among the items: the list becomes the other items.
            *existing = items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip)
                .collect();
            return Ok(());
        }
        let Some(key_value) = p.get(mk) else {
            return Err(error(
                path,
                format!("map: {item} does not contain declared merge key: {mk}"),
            ));
        };
        let position = existing.iter().position(|e| e.get(mk) == Some(key_value));
        if p.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = position {
                existing.remove(i);
            }
            continue;
        }
        match position {
            Some(i) => {
                if let Value::Object(e) = &mut existing[i] {
                    merge_map(e, p, item_schema, path)?;
                }
            }
            None => existing.push(strip(item)),
        }
    }
    Ok(())
}

/// Orders `target[field]` as `$setElementOrder` lists it; unlisted items keep their relative order after.
fn reorder(target: &mut Map<String, Value>, field: &str, order: &Value, at: SchemaAt<'_>) {
    let (Some(Value::Array(list)), Some(order)) = (target.get_mut(field), order.as_array()) else {
        return;
    };
    let mk = at.patch_merge_key();
    let key_of = |v: &Value| -> Value {
        match mk {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let wanted: Vec<Value> = order
        .iter()
        .map(|o| match mk {
            Some(k) => o.get(k).cloned().unwrap_or(Value::Null),
            None => o.clone(),
        })
        .collect();
    let mut sorted: Vec<Value> = Vec::with_capacity(list.len());
    for w in &wanted {
        if let Some(i) = list.iter().position(|v| key_of(v) == *w) {
            sorted.push(list.remove(i));
        }
    }
    sorted.append(list);
    *list = sorted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Applies `patch` to `doc` as a Pod (or a Deployment when it has a template).
    fn apply(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
        let kind = if doc.pointer("/spec/template").is_some() {
            "apps.v1.Deployment"
        } else {
            "core.v1.Pod"
        };
        let root = crate::openapi::builtin_components().get(&format!("io.k8s.api.{kind}"));
        super::apply(doc, patch, SchemaAt::new(root))
    }

    #[test]
    fn containers_merge_by_name_and_keep_other_writers_fields() {
        let mut doc = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:1", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "s:1"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "side"}],
            "containers": [{"name": "app", "image": "a:2"}]}}}});
        apply(&mut doc, &patch).unwrap();
        let cs = &doc["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(cs[0]["ports"][0]["containerPort"], 80);
        assert_eq!(cs[1]["name"], "side");
    }

    #[test]
    fn directives() {
        let mut doc = json!({"metadata": {"finalizers": ["a", "b"]}, "data": {"x": "1", "y": "2"},
                             "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        apply(
            &mut doc,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
                                "data": {"$patch": "replace", "z": "3"},
                                "spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(doc["data"], json!({"z": "3"}));
        assert_eq!(doc["spec"]["containers"], json!([{"name": "b"}]));
    }

    #[test]
    fn retain_keys_and_list_replacement() {
        let mut doc = json!({"spec": {"strategy": {"type": "RollingUpdate",
                                                   "rollingUpdate": {"maxSurge": 1}},
                                      "volumes": [{"name": "a"}, {"name": "b"}]}});
        apply(
            &mut doc,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"},
                             "volumes": [{"$patch": "replace"}, {"name": "c"}]}}),
        )
        .unwrap();
        assert_eq!(doc["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(doc["spec"]["volumes"], json!([{"name": "c"}]));
    }

    #[test]
    fn keyed_items_merge_in_place_and_new_ones_append_in_order() {
        let mut doc = json!({"spec": {"containers": [{"name": "a", "env": [
            {"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}});
        apply(
            &mut doc,
            &json!({"spec": {"containers": [{"name": "a",
                "$setElementOrder/env": [{"name": "Z"}, {"name": "X"}],
                "env": [{"name": "Y", "$patch": "delete"}, {"name": "Z", "value": "3"}]}]}}),
        )
        .unwrap();
        assert_eq!(
            doc["spec"]["containers"][0]["env"],
            json!([{"name": "Z", "value": "3"}, {"name": "X", "value": "1"}])
        );
    }

    #[test]
    fn errors_name_the_field() {
        let mut doc = json!({"spec": {"containers": [{"name": "a"}]}});
        let e = apply(&mut doc, &json!({"spec": {"containers": [{"image": "x"}]}})).unwrap_err();
        assert_eq!(e.field, "spec.containers");
        assert!(e.message.contains("merge key: name"), "{e}");
        let e = apply(&mut doc, &json!({"spec": {"$patch": "explode"}})).unwrap_err();
        assert_eq!(e.field, "spec");
    }
}
