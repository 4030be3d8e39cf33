//! `meta.k8s.io/v1 Table` rendering with the columns upstream `kubectl get`
//! shows for built-ins, and additionalPrinterColumns for custom resources.

use serde_json::{Value, json};

use crate::extension::TableConvertor;
use crate::jsonpath;
use crate::resources::{Printer, ResourceInfo};
use crate::value::{array_at as arr, i64_at as i, str_at as s};

/// What the kinds' strategies (`kinds/`) build their columns and cells
/// from.
pub(crate) mod prelude {
    pub(crate) use super::{
        AGE, Column, NAME, age, col, containers_images, human_duration, map_selector, or_none,
        ports_string, selector_string,
    };
    pub(crate) use crate::value::{array_at as arr, i64_at as i, str_at as s};
    pub(crate) use serde_json::{Value, json};
}

pub struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub format: &'static str,
    pub priority: i64,
    pub description: &'static str,
}

pub(crate) const fn col(name: &'static str, type_: &'static str, priority: i64) -> Column {
    Column {
        name,
        type_,
        format: "",
        priority,
        description: "",
    }
}

pub(crate) const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace.",
};
pub(crate) const AGE: Column = Column {
    name: "Age",
    type_: "string",
    format: "",
    priority: 0,
    description: "CreationTimestamp is the time the object was created.",
};

fn builtin_columns(r: &ResourceInfo) -> Vec<Column> {
    crate::kinds::strategy(r)
        .columns()
        .unwrap_or_else(|| vec![NAME, AGE])
}

pub(crate) fn or_none(v: String) -> String {
    if v.is_empty() { "<none>".into() } else { v }
}

pub(crate) fn selector_string(o: &Value, pointer: &str) -> String {
    let mut parts = Vec::new();
    if let Some(m) = o
        .pointer(&format!("{pointer}/matchLabels"))
        .and_then(Value::as_object)
    {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    for e in arr(o, &format!("{pointer}/matchExpressions")) {
        let values: Vec<&str> = arr(e, "/values").iter().filter_map(Value::as_str).collect();
        let op = s(e, "/operator");
        let key = s(e, "/key");
        parts.push(match op {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_string(),
        });
    }
    or_none(parts.join(","))
}

pub(crate) fn map_selector(o: &Value, pointer: &str) -> String {
    let parts: Vec<String> = o
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    or_none(parts.join(","))
}

pub(crate) fn containers_images(o: &Value, spec: &str) -> (String, String) {
    let cs = arr(o, &format!("{spec}/containers"));
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// A duration rendered as kubectl does: `5s`, `3m20s`, `2d3h`.
pub fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 600 {
        let (m, s) = (secs / 60, secs % 60);
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if secs < 3 * 3600 {
        format!("{}m", secs / 60)
    } else if secs < 8 * 3600 {
        let (h, m) = (secs / 3600, (secs % 3600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{m}m")
        }
    } else if secs < 48 * 3600 {
        format!("{}h", secs / 3600)
    } else if secs < 8 * 86400 {
        let (d, h) = (secs / 86400, (secs % 86400) / 3600);
        if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        }
    } else if secs < 2 * 365 * 86400 {
        format!("{}d", secs / 86400)
    } else {
        format!("{}y", secs / (365 * 86400))
    }
}

pub(crate) fn age(o: &Value, pointer: &str) -> String {
    let ts = s(o, pointer);
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

pub(crate) fn ports_string(o: &Value) -> String {
    let ports: Vec<String> = arr(o, "/spec/ports")
        .iter()
        .map(|p| {
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) => format!("{}:{np}/{proto}", i(p, "/port")),
                None => format!("{}/{proto}", i(p, "/port")),
            }
        })
        .collect();
    or_none(ports.join(","))
}

fn builtin_cells(r: &ResourceInfo, o: &Value) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let created = age(o, "/metadata/creationTimestamp");
    crate::kinds::strategy(r).cells(o, name, created)
}

/// The column definitions of a resource's Table.
pub fn column_definitions(r: &ResourceInfo) -> Vec<Value> {
    match &r.printer {
        Printer::Builtin => builtin_columns(r)
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect(),
        Printer::Custom(cols) => {
            let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
                                       "description": NAME.description, "priority": 0})];
            for c in cols {
                defs.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                                 "description": c.description, "priority": c.priority}));
            }
            if !cols.iter().any(|c| c.name.eq_ignore_ascii_case("age")) {
                defs.push(json!({"name": "Age", "type": "date", "format": "",
                                 "description": AGE.description, "priority": 0}));
            }
            defs
        }
    }
}

/// One row's cells, aligned with [`column_definitions`].
pub fn cells(r: &ResourceInfo, o: &Value) -> Vec<Value> {
    match &r.printer {
        Printer::Builtin => builtin_cells(r, o),
        Printer::Custom(cols) => {
            let mut cells = vec![json!(s(o, "/metadata/name"))];
            for c in cols {
                let v = jsonpath::first(o, &c.json_path);
                cells.push(match (c.type_.as_str(), v) {
                    (_, None) => Value::Null,
                    ("date", Some(Value::String(ts))) => match ts.parse::<jiff::Timestamp>() {
                        Ok(t) => json!(human_duration(
                            jiff::Timestamp::now().as_second() - t.as_second()
                        )),
                        Err(_) => json!(ts),
                    },
                    (_, Some(v)) => v,
                });
            }
            if !cols.iter().any(|c| c.name.eq_ignore_ascii_case("age")) {
                cells.push(json!(age(o, "/metadata/creationTimestamp")));
            }
            cells
        }
    }
}

/// What each row carries as its `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

pub fn row(r: &ResourceInfo, o: &Value, include: IncludeObject) -> Value {
    with_object(json!({"cells": cells(r, o)}), o, include)
}

/// A row with the object, its metadata or nothing, as asked.
fn with_object(mut row: Value, o: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
            });
        }
        IncludeObject::Object => row["object"] = o.clone(),
    }
    row
}

/// A Table of `objects`; `with_columns` false omits columnDefinitions (watch events after the first).
/// An embedder's computed columns (`extension::TableConvertor`) take the
/// place of the resource's own.
pub fn table(
    r: &ResourceInfo,
    convertor: Option<&dyn TableConvertor>,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let columns = match (with_columns, convertor) {
        (false, _) => Vec::new(),
        (true, Some(c)) => c
            .columns()
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect(),
        (true, None) => column_definitions(r),
    };
    let rows = objects
        .iter()
        .map(|o| match convertor {
            Some(c) => with_object(json!({"cells": c.cells(o)}), o, include),
            None => row(r, o, include),
        })
        .collect::<Vec<_>>();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}
