//! Role-based access control with upstream's semantics: the rules of the
//! Roles and ClusterRoles bound to a user (by name, group or
//! ServiceAccount) decide what it may do; nothing bound is nothing
//! allowed.
//!
//! - [`rule`]: one PolicyRule, what it allows and what covers it;
//! - [`index`]: roles and bindings in memory, indexed by subject;
//! - [`escalation`]: no one grants what they do not hold (admission);
//! - [`aggregation`]: ClusterRoles that unite others' rules;
//! - [`bootstrap`]: the roles and bindings a cluster starts with.

pub mod aggregation;
pub mod bootstrap;
pub mod escalation;
pub mod index;
pub mod rule;

use serde_json::Value;

use crate::authz::{Attributes, Decision, Verb};
use crate::resources::ResourceInfo;

use crate::user::User;
pub use index::Index;
use rule::Request;

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// RBAC's answer for a resource request: allowed by some bound rule, or
/// no opinion with upstream's reason (roles bound but missing).
pub fn authorize(index: &Index, user: &User, a: &Attributes) -> Decision {
    let name = a.path_name.map(str::to_string).or_else(|| match a.verb {
        // A list or watch of one object by name (kubectl get NAME -w).
        Verb::List | Verb::Watch => a.name(),
        _ => None,
    });
    let request = Request::Resource {
        verb: a.verb.as_str(),
        group: a.group,
        resource: a.resource,
        subresource: a.subresource,
        name: name.as_deref(),
    };
    decision(index.any_rule(user, a.namespace, |r| r.allows(&request)))
}

/// RBAC's answer for a non-resource path (`/healthz`, `/api`).
pub fn authorize_path(index: &Index, user: &User, verb: &str, path: &str) -> Decision {
    let request = Request::NonResource { verb, path };
    decision(index.any_rule(user, None, |r| r.allows(&request)))
}

fn decision(found: Result<(), Vec<String>>) -> Decision {
    match found {
        Ok(()) => Decision::Allow,
        Err(missing) if missing.is_empty() => Decision::NoOpinion,
        Err(missing) if missing.len() == 1 => Decision::Deny(format!("RBAC: {}", missing[0])),
        Err(missing) => Decision::Deny(format!("RBAC: [{}]", missing.join(", "))),
    }
}

/// After this replica wrote an RBAC object: the index takes it at once.
pub(crate) fn after_write(index: &Index, r: &ResourceInfo, obj: &Value, deleted: bool) {
    if r.group != GROUP {
        return;
    }
    let revision = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    index.apply(&r.kind, obj, revision, deleted);
}
