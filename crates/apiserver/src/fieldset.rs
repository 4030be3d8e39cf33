//! Sets of field paths in upstream's `FieldsV1` form, the currency of
//! managedFields and server-side apply.
//!
//! A set is a tree whose keys are path elements exactly as FieldsV1 writes
//! them: `f:<field>`, `k:<json of the list-map key fields>`, `v:<json of a
//! set item>`, and `.` for "this list item itself". A node without
//! children is a leaf: the field is owned whole.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::merge_meta::{ListKind, SchemaAt};

/// One path element, as written in FieldsV1.
pub type Element = String;
/// A path from the object root.
pub type Path = Vec<Element>;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    children: BTreeMap<Element, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Parses a FieldsV1 object; anything else is the empty set.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Some(m) = v.as_object() {
            for (k, child) in m {
                set.children
                    .insert(k.clone(), FieldSet::from_fields_v1(child));
            }
        }
        set
    }

    pub fn to_fields_v1(&self) -> Value {
        Value::Object(
            self.children
                .iter()
                .map(|(k, v)| (k.clone(), v.to_fields_v1()))
                .collect::<Map<String, Value>>(),
        )
    }

    pub fn insert(&mut self, path: &[Element]) {
        let mut cur = self;
        for e in path {
            cur = cur.children.entry(e.clone()).or_default();
        }
    }

    /// Every path that ends at a leaf.
    pub fn leaves(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for (k, child) in &self.children {
            prefix.push(k.clone());
            if child.children.is_empty() {
                out.push(prefix.clone());
            } else {
                child.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    pub fn contains(&self, path: &[Element]) -> bool {
        let mut cur = self;
        for e in path {
            match cur.children.get(e) {
                Some(c) => cur = c,
                None => return false,
            }
        }
        cur.children.is_empty()
    }

    /// Removes the leaf at `path`, pruning parents left empty.
    pub fn remove(&mut self, path: &[Element]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if rest.is_empty() {
            self.children.remove(first);
            return;
        }
        if let Some(child) = self.children.get_mut(first) {
            child.remove(rest);
            if child.children.is_empty() {
                self.children.remove(first);
            }
        }
    }
}

/// The fields `value` sets, as apply and update tracking count them.
pub fn fields_of(value: &Value, at: SchemaAt<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    walk(value, at, &mut Vec::new(), &mut set);
    set
}

/// Adds the fields of `value`, which lies at `path`, to `set`.
pub fn walk(value: &Value, at: SchemaAt<'_>, path: &mut Path, set: &mut FieldSet) {
    match value {
        Value::Object(m) if !m.is_empty() && !at.atomic_map() => {
            for (k, v) in m {
                path.push(format!("f:{k}"));
                walk(v, at.field(k), path, set);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match at.list_kind() {
            ListKind::Atomic => set.insert(path),
            ListKind::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    set.insert(path);
                    path.pop();
                }
            }
            ListKind::Map(keys) => {
                for item in items {
                    path.push(item_key(item, &keys));
                    path.push(".".into());
                    set.insert(path);
                    path.pop();
                    walk(item, at.items(), path, set);
                    path.pop();
                }
            }
        },
        _ => set.insert(path),
    }
}

/// `k:{"name":"web"}` for a list-map item.
pub fn item_key(item: &Value, keys: &[String]) -> Element {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    format!("k:{}", Value::Object(m))
}

/// The value at `path` in `obj`, if present.
pub fn get<'a>(obj: &'a Value, path: &[Element]) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        cur = step(cur, e)?;
    }
    Some(cur)
}

fn step<'a>(cur: &'a Value, e: &str) -> Option<&'a Value> {
    if e == "." {
        return Some(cur);
    }
    if let Some(f) = e.strip_prefix("f:") {
        return cur.get(f);
    }
    let items = cur.as_array()?;
    if let Some(k) = e.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .find(|i| key.iter().all(|(kk, kv)| i.get(kk) == Some(kv)));
    }
    if let Some(v) = e.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        return items.iter().find(|i| **i == want);
    }
    None
}

/// Removes what `path` names from `obj`: a field, a list item (`k:`/`v:`
/// followed by nothing or `.`).
pub fn remove_path(obj: &mut Value, path: &[Element]) {
    let path: Vec<&str> = path
        .iter()
        .map(String::as_str)
        .filter(|e| *e != ".")
        .collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for e in parents {
        let next = step_mut(cur, e);
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(items) = cur.as_array_mut() {
        let matches = |i: &Value| step(&json!([i]), last).is_some();
        items.retain(|i| !matches(i));
    }
}

fn step_mut<'a>(cur: &'a mut Value, e: &str) -> Option<&'a mut Value> {
    if let Some(f) = e.strip_prefix("f:") {
        return cur.get_mut(f);
    }
    let index = {
        let items = cur.as_array()?;
        let found = step(cur, e)?;
        items.iter().position(|i| std::ptr::eq(i, found))?
    };
    cur.as_array_mut()?.get_mut(index)
}

/// `.spec.containers[name="web"].image`, as upstream prints conflicts.
pub fn display(path: &[Element]) -> String {
    let mut out = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = e.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_a_deployment_follow_list_types() {
        let root = crate::openapi::builtin_components().get("io.k8s.api.apps.v1.Deployment");
        let obj = json!({"metadata": {"labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "web", "image": "x", "args": ["-v"]}]}}}});
        let set = fields_of(&obj, SchemaAt::new(root));
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}, "f:labels": {"f:app": {}}},
                   "f:spec": {"f:selector": {},
                              "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                  ".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        let image: Path = [
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"web\"}",
            "f:image",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(get(&obj, &image), Some(&json!("x")));
        assert_eq!(
            display(&image),
            ".spec.template.spec.containers[name=\"web\"].image"
        );
        let mut o = obj.clone();
        remove_path(&mut o, &image[..5]);
        assert_eq!(o["spec"]["template"]["spec"]["containers"], json!([]));
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }
}
