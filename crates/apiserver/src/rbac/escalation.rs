//! Escalation prevention, as upstream's policy-based RBAC storage: a user
//! may write a Role or ClusterRole only with rules it holds itself (or
//! with the `escalate` verb on it), and a binding only to a role whose
//! rules it holds (or with the `bind` verb on that role). Members of
//! `system:masters` and the server's own writes may do either.

use serde_json::Value;

use super::index::RoleRef;
use super::rule::{self, Rule};
use crate::admission::{Request, Validating, View};
use crate::authz::{Attributes, Decision, Mode, Verb};
use crate::error::{ApiError, ApiResult, Details};

use crate::user::User;
use crate::value::str_at;

pub struct Escalation;

impl Validating for Escalation {
    fn validate(&self, view: &View, request: &Request, object: &Value) -> ApiResult<()> {
        let r = request.resource;
        if r.group != super::GROUP || view.authorization_mode == Mode::AlwaysAllow {
            return Ok(());
        }
        let Some(user) = request.user else {
            return Ok(());
        };
        if user
            .groups
            .iter()
            .any(|g| g == crate::authz::PRIVILEGED_GROUP)
        {
            return Ok(());
        }
        let name = str_at(object, "/metadata/name");
        let namespace = request.namespace;
        let forbidden = |why: String| {
            ApiError::forbidden(format!(
                "{}.{} \"{name}\" is forbidden: {why}",
                r.plural,
                super::GROUP
            ))
            .with_details(Details {
                name: name.to_string(),
                group: super::GROUP.into(),
                kind: r.plural.clone(),
                causes: Vec::new(),
            })
        };
        let may = |verb: &str, resource: &str, object: &str| {
            let attributes = Attributes {
                verb: Verb::parse(verb),
                group: super::GROUP,
                resource,
                subresource: None,
                namespace,
                path_name: Some(object),
                field_selector: None,
                body: &[],
            };
            view.authorize(user, &attributes) == Decision::Allow
        };
        let wanted = match r.plural.as_str() {
            "roles" | "clusterroles" => {
                if may("escalate", &r.plural, name) {
                    return Ok(());
                }
                if object.get("aggregationRule").is_some_and(|a| !a.is_null())
                    && !holds_everything(view, user)
                {
                    return Err(forbidden(
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
                Rule::all_of(object)
            }
            "rolebindings" | "clusterrolebindings" => {
                let role = RoleRef {
                    kind: str_at(object, "/roleRef/kind").to_string(),
                    name: str_at(object, "/roleRef/name").to_string(),
                };
                let role_plural = match role.kind.as_str() {
                    "Role" => "roles",
                    _ => "clusterroles",
                };
                if may("bind", role_plural, &role.name) {
                    return Ok(());
                }
                match view.rbac.role_rules(&role, namespace) {
                    Some(rules) => rules,
                    None => {
                        return Err(forbidden(format!(
                            "{role_plural}.{} \"{}\" not found",
                            super::GROUP,
                            role.name
                        )));
                    }
                }
            }
            _ => return Ok(()),
        };
        let held = view.rbac.resolve(user, namespace).rules;
        let missing = rule::uncovered(&held, &wanted);
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
        let rules: Vec<String> = missing.iter().map(rule::describe).collect();
        Err(forbidden(format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups.join(" "),
            rules.join("\n")
        )))
    }
}

/// Whether `user` holds every verb on every resource cluster-wide.
fn holds_everything(view: &View, user: &User) -> bool {
    let all = Rule {
        verbs: vec!["*".into()],
        api_groups: vec!["*".into()],
        resources: vec!["*".into()],
        ..Rule::default()
    };
    rule::uncovered(&view.rbac.resolve(user, None).rules, &[all]).is_empty()
}
