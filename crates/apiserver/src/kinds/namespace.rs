//! Namespaces: labelled with their name, finalized by the server
//! (`spec.finalizers: [kubernetes]`), Active from creation, answered
//! with themselves on deletion, selectable by phase. Their lifecycle is
//! `namespace.rs`.

use serde_json::{Value, json};

use super::Strategy;
use crate::table::prelude::*;

pub struct Namespaces;

impl Strategy for Namespaces {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn prepare_create(&self, obj: &mut Value) {
        let m = crate::objects::meta_mut(obj);
        let name = m.get("name").cloned().unwrap_or(Value::Null);
        if !m.get("labels").is_some_and(Value::is_object) {
            m.insert("labels".into(), json!({}));
        }
        if let Some(labels) = m.get_mut("labels").and_then(Value::as_object_mut) {
            labels.insert("kubernetes.io/metadata.name".into(), name);
        }
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Status", "string", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![name, json!(s(o, "/status/phase")), json!(created)]
    }
}
