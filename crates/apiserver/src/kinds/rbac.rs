//! RBAC's kinds: a binding's role reference (valid, and fixed once
//! made, as upstream), `kubectl get`'s columns. Enforcement is `rbac`.

use super::Strategy;
use crate::error::Cause;
use crate::table::prelude::*;

pub struct RoleBindings;

impl Strategy for RoleBindings {
    fn validate(&self, o: &Value) -> Vec<Cause> {
        let namespaced = !s(o, "/metadata/namespace").is_empty();
        let kind = s(o, "/roleRef/kind");
        let supported: &[&str] = if namespaced {
            &["Role", "ClusterRole"]
        } else {
            &["ClusterRole"]
        };
        let mut causes = Vec::new();
        if !supported.contains(&kind) {
            let quoted: Vec<String> = supported.iter().map(|k| format!("\"{k}\"")).collect();
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: "roleRef.kind".into(),
                message: format!(
                    "Unsupported value: \"{kind}\": supported values: {}",
                    quoted.join(", ")
                ),
            });
        }
        if s(o, "/roleRef/name").is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                field: "roleRef.name".into(),
                message: "Required value".into(),
            });
        }
        causes
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        if new.get("roleRef") == old.get("roleRef") {
            return Vec::new();
        }
        vec![Cause {
            reason: "FieldValueInvalid",
            field: "roleRef".into(),
            message: format!(
                "Invalid value: rbac.RoleRef{{APIGroup:\"{}\", Kind:\"{}\", Name:\"{}\"}}: cannot change roleRef",
                s(new, "/roleRef/apiGroup"),
                s(new, "/roleRef/kind"),
                s(new, "/roleRef/name")
            ),
        }]
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Role", "string", 0),
            AGE,
            col("Users", "string", 1),
            col("Groups", "string", 1),
            col("ServiceAccounts", "string", 1),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let subjects = |kind: &str| {
            let names: Vec<String> = arr(o, "/subjects")
                .iter()
                .filter(|x| s(x, "/kind") == kind)
                .map(|x| match (kind, s(x, "/namespace")) {
                    ("ServiceAccount", ns) => format!("{ns}/{}", s(x, "/name")),
                    _ => s(x, "/name").to_string(),
                })
                .collect();
            names.join(", ")
        };
        vec![
            name,
            json!(format!(
                "{}/{}",
                s(o, "/roleRef/kind"),
                s(o, "/roleRef/name")
            )),
            json!(created),
            json!(subjects("User")),
            json!(subjects("Group")),
            json!(subjects("ServiceAccount")),
        ]
    }
}

pub struct Roles;

impl Strategy for Roles {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Created At", "date", 0)])
    }

    fn cells(&self, o: &Value, name: Value, _created: String) -> Vec<Value> {
        vec![name, json!(s(o, "/metadata/creationTimestamp"))]
    }
}
