//! managedFields and server-side apply.
//!
//! Every write records which manager set which fields: `Update` entries for
//! create, update and patch (the fields the write changed), `Apply` entries
//! for apply patches (the fields of the applied configuration). An apply
//! merges its configuration into the live object by the schema's list and
//! map types, removes the fields its manager applied before and no longer
//! does (unless someone else owns them), and refuses to change a field
//! another manager owns unless forced.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause};
use crate::fieldset::{self, FieldSet, Path};
use crate::merge_meta::{ListKind, SchemaAt};
use crate::objects::{self, WriteScope};
use crate::resources::ResourceInfo;

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: FieldSet,
    /// Where the entry stands in the managedFields it was read from.
    index: Option<usize>,
}

impl Entry {
    fn same_owner(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
    }
}

fn entries(obj: &Value) -> Vec<Entry> {
    managed_fields(obj)
        .iter()
        .enumerate()
        .filter_map(|(index, e)| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let manager = s("manager");
            (!manager.is_empty()).then(|| Entry {
                manager,
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields: FieldSet::from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null)),
                index: Some(index),
            })
        })
        .collect()
}

fn managed_fields(obj: &Value) -> &[Value] {
    crate::value::array_at(obj, "/metadata/managedFields")
}

/// Takes `obj`'s managedFields list out where it lies, leaving an empty
/// one in its place, so that the list put back keeps its position; None
/// where there is no list.
pub fn take_entries(obj: &mut Value) -> Option<Vec<Value>> {
    match objects::meta_mut(obj).get_mut("managedFields") {
        Some(Value::Array(entries)) => Some(std::mem::take(entries)),
        _ => None,
    }
}

/// Writes `new` entries, keeping the old time of any entry whose fields
/// did not change (so a no-op write stays a no-op). `old` were read from
/// `old_list`, which every write has written in this form: an unchanged
/// entry is copied from there rather than rendered again, or moved from
/// the object's own list where that holds it as stored (the object a
/// patch or a status write began as a copy of the stored one).
fn store_entries(obj: &mut Value, mut new: Vec<Entry>, old: &[Entry], old_list: &[Value]) {
    new.retain(|e| !e.fields.is_empty());
    let mut own = take_entries(obj).unwrap_or_default();
    let mut now = None;
    let list: Vec<Value> = new
        .iter()
        .map(|e| {
            let unchanged = old.iter().find(|o| {
                o.same_owner(e)
                    && o.fields == e.fields
                    && o.api_version == e.api_version
                    && !o.time.is_empty()
            });
            if let Some(i) = unchanged.and_then(|o| o.index)
                && let Some(stored) = old_list.get(i)
            {
                return match own.get_mut(i) {
                    Some(held) if held == stored => std::mem::take(held),
                    _ => stored.clone(),
                };
            }
            let time = unchanged
                .map(|o| o.time.clone())
                .unwrap_or_else(|| now.get_or_insert_with(crate::meta::now).clone());
            // Built in place: `json!` would copy the fields value whole.
            let mut v = Map::new();
            v.insert("manager".into(), Value::String(e.manager.clone()));
            v.insert("operation".into(), Value::String(e.operation.clone()));
            v.insert("apiVersion".into(), Value::String(e.api_version.clone()));
            v.insert("time".into(), Value::String(time));
            v.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            v.insert("fieldsV1".into(), e.fields.to_fields_v1());
            if !e.subresource.is_empty() {
                v.insert("subresource".into(), Value::String(e.subresource.clone()));
            }
            Value::Object(v)
        })
        .collect();
    let m = objects::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// Metadata the server sets: no manager owns it.
const SERVER_SET_METADATA: [&str; 11] = [
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Whether managers own the top-level field `k` in a write of `scope`:
/// not type meta, and only the part the scope may change.
fn ownable_field(k: &str, r: &ResourceInfo, scope: WriteScope) -> bool {
    let in_scope = match scope {
        WriteScope::Status => k == "status",
        WriteScope::EphemeralContainers => k == "spec",
        _ if r.status_subresource => k != "status",
        _ => true,
    };
    in_scope && k != "apiVersion" && k != "kind"
}

/// The fields managers own in `obj`: no type meta, no server-set
/// metadata, and only the part the write's scope may change; found where
/// they lie in `obj` rather than in a copy of its ownable part.
fn ownable_fields(
    obj: &Value,
    r: &ResourceInfo,
    scope: WriteScope,
    root: SchemaAt<'_>,
) -> FieldSet {
    let Some(o) = obj.as_object() else {
        return fieldset::fields_of(obj, root);
    };
    let mut set = FieldSet::default();
    let mut path = Vec::new();
    for (k, v) in o {
        if !ownable_field(k, r, scope) {
            continue;
        }
        path.push(format!("f:{k}"));
        match (k.as_str(), v) {
            ("spec", Value::Object(s)) if scope == WriteScope::EphemeralContainers => {
                if let Some(v) = s.get("ephemeralContainers") {
                    path.push("f:ephemeralContainers".into());
                    fieldset::walk(
                        v,
                        root.field(k).field("ephemeralContainers"),
                        &mut path,
                        &mut set,
                    );
                    path.pop();
                }
            }
            ("metadata", Value::Object(m)) => {
                let at = root.field(k);
                for (f, v) in m {
                    if SERVER_SET_METADATA.contains(&f.as_str()) {
                        continue;
                    }
                    path.push(format!("f:{f}"));
                    fieldset::walk(v, at.field(f), &mut path, &mut set);
                    path.pop();
                }
            }
            _ => fieldset::walk(v, root.field(k), &mut path, &mut set),
        }
        path.pop();
    }
    set
}

fn subresource_name(scope: WriteScope) -> &'static str {
    match scope {
        WriteScope::Status => "status",
        WriteScope::EphemeralContainers => "ephemeralcontainers",
        WriteScope::Scale => "scale",
        _ => "",
    }
}

/// The manager of a non-apply write: `fieldManager`, else the user agent's
/// product name, as upstream.
pub fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    user_agent
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// Records an Update by `manager` that turned `old` (None: a create) into
/// `new`: the fields it changed become the manager's, and no one else's.
pub fn track_update(
    r: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: WriteScope,
) {
    let root = crate::merge_meta::root_of(r);
    let before = old.map(entries).unwrap_or_default();
    // Clients may rewrite managedFields (`[{}]` clears them); absent means keep.
    let mut current = match objects::meta(new).and_then(|m| m.get("managedFields")) {
        Some(_) => entries(new),
        None => before.clone(),
    };
    // Every path below starts at a field in scope: reading it from the
    // whole object reads what the ownable part holds.
    let new_fields = ownable_fields(new, r, scope, root);
    let changed: Vec<Path> = match old {
        None => new_fields.leaves(),
        Some(old) => {
            let removed: Vec<Path> = ownable_fields(old, r, scope, root)
                .leaves()
                .into_iter()
                .filter(|p| fieldset::get(new, p).is_none())
                .collect();
            for e in &mut current {
                for p in &removed {
                    e.fields.remove(p);
                }
            }
            new_fields
                .leaves()
                .into_iter()
                .filter(|p| fieldset::get(old, p) != fieldset::get(new, p))
                .collect()
        }
    };
    if !changed.is_empty() {
        let mine = Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: r.api_version(),
            time: String::new(),
            subresource: subresource_name(scope).into(),
            fields: FieldSet::default(),
            index: None,
        };
        for e in &mut current {
            if !e.same_owner(&mine) {
                for p in &changed {
                    e.fields.remove(p);
                }
            }
        }
        let index = match current.iter().position(|e| e.same_owner(&mine)) {
            Some(i) => i,
            None => {
                current.push(mine);
                current.len() - 1
            }
        };
        for p in &changed {
            current[index].fields.insert(p);
        }
        current[index].api_version = r.api_version();
    }
    store_entries(
        new,
        current,
        &before,
        old.map(managed_fields).unwrap_or(&[]),
    );
}

/// Merges an applied configuration into the live value by list and map types.
fn merge(live: &Value, applied: &Value, at: SchemaAt<'_>) -> Value {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if !at.atomic_map() => {
            let mut out = l.clone();
            for (k, v) in a {
                if v.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(l.get(k).unwrap_or(&Value::Null), v, at.field(k));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(a)) => match at.list_kind() {
            ListKind::Atomic => applied.clone(),
            ListKind::Set => {
                let mut out = l.clone();
                for item in a {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            ListKind::Map(keys) => {
                let mut out = l.clone();
                for item in a {
                    let key = fieldset::item_key(item, &keys);
                    match out.iter().position(|i| fieldset::item_key(i, &keys) == key) {
                        Some(i) => out[i] = merge(&out[i], item, at.items()),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => applied.clone(),
    }
}

/// Applies `applied` for `manager` onto `live` (None: the object is
/// created). Returns the new object with its managedFields.
pub fn apply(
    r: &ResourceInfo,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    scope: WriteScope,
) -> Result<Value, ApiError> {
    let root = crate::merge_meta::root_of(r);
    let empty = json!({});
    let live_obj = live.unwrap_or(&empty);
    let before = entries(live_obj);
    let mut current = before.clone();
    // Every path below starts at a field in scope: reading it from the
    // whole object reads what the ownable part holds, without copying it.
    let applied_fields = ownable_fields(applied, r, scope, root);
    let mine = Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: r.api_version(),
        time: String::new(),
        subresource: subresource_name(scope).into(),
        fields: applied_fields.clone(),
        index: None,
    };

    // Fields others own whose value this apply would change.
    let mut conflicts: Vec<(String, Path)> = Vec::new();
    for e in &current {
        if e.manager == manager || e.subresource != mine.subresource {
            continue;
        }
        // `.` marks a list item's existence, not a value to compare.
        for p in applied_fields
            .leaves()
            .into_iter()
            .filter(|p| p.last().map(String::as_str) != Some("."))
        {
            if e.fields.contains(&p) && fieldset::get(applied, &p) != fieldset::get(live_obj, &p) {
                conflicts.push((e.manager.clone(), p));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(r, live_obj, applied, &conflicts));
        }
        for e in &mut current {
            for (m, p) in &conflicts {
                if &e.manager == m {
                    e.fields.remove(p);
                }
            }
        }
    }

    let previous = current
        .iter()
        .find(|e| e.same_owner(&mine))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut result = merge(live_obj, applied, root);
    // What this manager applied before and dropped now goes, unless another
    // manager also owns it.
    for p in previous.leaves() {
        let owned_elsewhere = current
            .iter()
            .any(|e| !e.same_owner(&mine) && e.fields.contains(&p));
        if !applied_fields.contains(&p) && !owned_elsewhere {
            fieldset::remove_path(&mut result, &p);
        }
    }
    current.retain(|e| !e.same_owner(&mine));
    current.push(mine);
    store_entries(&mut result, current, &before, managed_fields(live_obj));
    Ok(result)
}

fn conflict_error(
    r: &ResourceInfo,
    live: &Value,
    applied: &Value,
    conflicts: &[(String, Path)],
) -> ApiError {
    let n = conflicts.len();
    let mut message = format!(
        "Apply failed with {n} conflict{}: ",
        if n == 1 { "" } else { "s" }
    );
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(m, p)| format!("conflict with \"{m}\": {}", fieldset::display(p)))
        .collect();
    message.push_str(&lines.join("\n"));
    let name = {
        let n = objects::meta_str(live, "name");
        if n.is_empty() {
            objects::meta_str(applied, "name")
        } else {
            n
        }
    };
    let mut e = ApiError::new(http::StatusCode::CONFLICT, "Conflict", message);
    e.details = Some(Box::new(crate::error::Details {
        name: name.to_string(),
        group: r.group.clone(),
        kind: r.plural.clone(),
        causes: conflicts
            .iter()
            .map(|(m, p)| Cause {
                reason: "FieldManagerConflict",
                field: fieldset::display(p),
                message: format!("conflict with \"{m}\""),
            })
            .collect(),
    }));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, field: &str, time: &str) -> Value {
        json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {format!("f:{field}"): {}}}})
    }

    #[test]
    fn updates_keep_unchanged_entries_and_move_changed_fields() {
        let r = crate::builtin::resource("", "configmaps");
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "managedFields": [
                entry("a", "x", "2026-01-01T00:00:00Z"), entry("b", "y", "2026-01-02T00:00:00Z")]},
            "data": {"x": "1", "y": "2"}});

        // "a" changes its own field: both entries stay as they were.
        let mut new = old.clone();
        new["data"]["x"] = json!("3");
        track_update(&r, Some(&old), &mut new, "a", WriteScope::Main);
        assert_eq!(
            new["metadata"]["managedFields"],
            old["metadata"]["managedFields"]
        );

        // "c" takes "b"'s only field: "b" goes, "c" comes with the time of the write.
        let mut taken = old.clone();
        taken["data"]["y"] = json!("4");
        track_update(&r, Some(&old), &mut taken, "c", WriteScope::Main);
        let list = taken["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0], old["metadata"]["managedFields"][0]);
        assert_eq!(list[1]["manager"], "c");
        assert_eq!(list[1]["fieldsV1"], json!({"f:data": {"f:y": {}}}));
        assert_ne!(list[1]["time"], "2026-01-02T00:00:00Z");
    }
}
