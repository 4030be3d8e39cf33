//! RBAC's kinds: `kubectl get`'s columns (roles are not enforced yet).

use super::Strategy;
use crate::table::prelude::*;

pub struct RoleBindings;

impl Strategy for RoleBindings {
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
