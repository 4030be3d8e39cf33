//! Strategic merge patch for built-in kinds: maps merge recursively, lists
//! of keyed objects merge by their patch merge key (containers by name,
//! container ports by containerPort, ...), other lists are replaced. The
//! directives `$patch`, `$setElementOrder`, `$retainKeys` and
//! `$deleteFromPrimitiveList` are honoured.

use serde_json::{Map, Value};

/// The patch merge key of a list field, from the upstream types' tags.
fn merge_key(parent: &[String], field: &str) -> Option<&'static str> {
    let in_container = parent.last().is_some_and(|p| {
        matches!(
            p.as_str(),
            "containers" | "initContainers" | "ephemeralContainers"
        )
    });
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates"
        | "readinessGates" => {
            if field == "readinessGates" {
                "conditionType"
            } else {
                "name"
            }
        }
        "ports" if in_container => "containerPort",
        "ports" => "port",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Primitive lists whose patch strategy is merge (union).
fn merges_primitives(field: &str) -> bool {
    field == "finalizers"
}

pub fn apply(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let Some(patch) = patch.as_object() else {
        return Err("a strategic merge patch must be a JSON object".into());
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(target) = doc {
        merge_map(target, patch, &mut Vec::new())?;
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
    path: &mut Vec<String>,
) -> Result<(), String> {
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
        Some(other) => return Err(format!("unknown patch type: {other:?}")),
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
        let result = merge_field(target, key, value, path);
        path.pop();
        result?;
    }
    for (field, order) in orders {
        path.push(field.clone());
        reorder(target, &field, &order, path);
        path.pop();
    }
    Ok(())
}

fn merge_field(
    target: &mut Map<String, Value>,
    key: &str,
    value: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    let parent: Vec<String> = path[..path.len() - 1].to_vec();
    match (target.get_mut(key), value) {
        (Some(Value::Object(existing)), Value::Object(p)) => {
            if p.get("$patch").and_then(Value::as_str) == Some("delete") {
                target.remove(key);
                return Ok(());
            }
            merge_map(existing, p, path)
        }
        (Some(Value::Array(existing)), Value::Array(items)) => {
            if let Some(mk) = merge_key(&parent, key) {
                merge_keyed_list(existing, items, mk, path)
            } else if merges_primitives(key) {
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
        (_, Value::Array(items)) if merge_key(&parent, key).is_some() => {
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
    path: &mut Vec<String>,
) -> Result<(), String> {
    for item in items {
        let Some(p) = item.as_object() else {
            return Err(format!(
                "list items at {} must be objects with the key {mk:?}",
                path.join(".")
            ));
        };
        if p.get("$patch").and_then(Value::as_str) == Some("replace") {
            *existing = items.iter().map(strip).collect();
            return Ok(());
        }
        let Some(key_value) = p.get(mk) else {
            return Err(format!(
                "map: {p:?} does not contain declared merge key: {mk}"
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
                    merge_map(e, p, path)?;
                }
            }
            None => existing.push(strip(item)),
        }
    }
    Ok(())
}

/// Orders `target[field]` as `$setElementOrder` lists it; unlisted items keep their relative order after.
fn reorder(target: &mut Map<String, Value>, field: &str, order: &Value, path: &[String]) {
    let parent = &path[..path.len().saturating_sub(1)];
    let (Some(Value::Array(list)), Some(order)) = (target.get_mut(field), order.as_array()) else {
        return;
    };
    let mk = merge_key(parent, field);
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
}
