//! The roles and bindings in memory, indexed by subject so that a
//! request costs what its user's own bindings cost, however many bindings
//! the cluster has. Kept current by a watch of the store (other replicas'
//! writes) and, for this replica's writes, at once after each write
//! ([`Index::apply`]), so that a binding just created is honoured by the
//! next request.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use flotilla_store::{Revision, Store, StoreError};
use parking_lot::RwLock;
use serde_json::Value;

use super::rule::Rule;
use crate::user::User;
use crate::value::str_at;
use flotilla_core::selector::LabelSelector;

/// Where RBAC's kinds are stored.
pub const PREFIX: &str = "/rbac.authorization.k8s.io/";

/// A role a binding refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoleRef {
    /// `Role` or `ClusterRole`.
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug)]
struct Binding {
    /// None for a ClusterRoleBinding.
    namespace: Option<String>,
    role: RoleRef,
    subjects: Vec<String>,
}

/// A subject as bindings name it: `user:NAME` (ServiceAccounts as their
/// user names) or `group:NAME`.
fn subject_keys(binding_namespace: Option<&str>, subjects: &[Value]) -> Vec<String> {
    subjects
        .iter()
        .filter_map(|s| {
            let name = str_at(s, "/name");
            match str_at(s, "/kind") {
                "User" => Some(format!("user:{name}")),
                "Group" => Some(format!("group:{name}")),
                "ServiceAccount" => {
                    let ns = match str_at(s, "/namespace") {
                        "" => binding_namespace?,
                        ns => ns,
                    };
                    Some(format!("user:system:serviceaccount:{ns}:{name}"))
                }
                _ => None,
            }
        })
        .collect()
}

/// A stored object's identity in the index: `kind/namespace/name`.
type Key = String;

#[derive(Default)]
struct State {
    roles: HashMap<Key, Arc<Vec<Rule>>>,
    bindings: HashMap<Key, Binding>,
    by_subject: HashMap<String, HashSet<Key>>,
    /// The newest revision applied per key (deletions included), so that
    /// a watch event older than a write already applied is ignored.
    revisions: HashMap<Key, Revision>,
    /// ClusterRoles with an aggregationRule, and all ClusterRoles' labels,
    /// for the aggregation controller.
    cluster_role_labels: HashMap<String, Value>,
    /// The selectors of ClusterRoles with an aggregationRule.
    aggregation: HashMap<String, Vec<LabelSelector>>,
}

fn role_key(kind: &str, namespace: Option<&str>, name: &str) -> Key {
    format!("{kind}/{}/{name}", namespace.unwrap_or(""))
}

/// What a user's bindings give, in one namespace or cluster-wide.
pub struct Resolved {
    pub rules: Vec<Rule>,
    /// Roles bindings refer to that do not exist (upstream's RBAC reason).
    pub missing: Vec<String>,
}

#[derive(Default)]
pub struct Index {
    state: RwLock<State>,
    /// Woken when a ClusterRole changes (aggregation).
    pub(crate) cluster_roles_changed: tokio::sync::Notify,
}

impl Index {
    /// Applies one stored RBAC object, or its deletion, at `revision`.
    pub fn apply(&self, kind: &str, obj: &Value, revision: Revision, deleted: bool) {
        let namespace = Some(str_at(obj, "/metadata/namespace")).filter(|n| !n.is_empty());
        let name = str_at(obj, "/metadata/name");
        let key = role_key(kind, namespace, name);
        let mut state = self.state.write();
        // A put at the revision already applied is the same write seen
        // twice (or older than a deletion applied at once).
        let applied = state.revisions.get(&key).copied();
        if applied.is_some_and(|r| r > revision || (r == revision && !deleted)) {
            return;
        }
        state.revisions.insert(key.clone(), revision);
        match kind {
            "Role" | "ClusterRole" => {
                if deleted {
                    state.roles.remove(&key);
                } else {
                    state.roles.insert(key, Arc::new(Rule::all_of(obj)));
                }
                if kind == "ClusterRole" {
                    state.aggregation.remove(name);
                    if deleted {
                        state.cluster_role_labels.remove(name);
                    } else {
                        if let Some(selectors) = obj
                            .pointer("/aggregationRule/clusterRoleSelectors")
                            .and_then(Value::as_array)
                        {
                            let parsed = selectors
                                .iter()
                                .filter_map(|s| {
                                    let text = crate::scale::format_label_selector(Some(s));
                                    LabelSelector::parse(&text).ok()
                                })
                                .collect();
                            state.aggregation.insert(name.to_string(), parsed);
                        }
                        let labels = obj
                            .pointer("/metadata/labels")
                            .cloned()
                            .unwrap_or(Value::Null);
                        state.cluster_role_labels.insert(name.to_string(), labels);
                    }
                    drop(state);
                    self.cluster_roles_changed.notify_one();
                }
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                if let Some(old) = state.bindings.remove(&key) {
                    for subject in &old.subjects {
                        if let Some(keys) = state.by_subject.get_mut(subject) {
                            keys.remove(&key);
                            if keys.is_empty() {
                                state.by_subject.remove(subject);
                            }
                        }
                    }
                }
                if deleted {
                    return;
                }
                let subjects = subject_keys(namespace, crate::value::array_at(obj, "/subjects"));
                for subject in &subjects {
                    state
                        .by_subject
                        .entry(subject.clone())
                        .or_default()
                        .insert(key.clone());
                }
                let binding = Binding {
                    namespace: namespace.map(str::to_string),
                    role: RoleRef {
                        kind: str_at(obj, "/roleRef/kind").to_string(),
                        name: str_at(obj, "/roleRef/name").to_string(),
                    },
                    subjects,
                };
                state.bindings.insert(key, binding);
            }
            _ => {}
        }
    }

    /// Forgets everything (before a full re-list).
    fn clear(&self) {
        *self.state.write() = State::default();
    }

    /// The rules `user` holds in `namespace` (cluster-wide ones only when
    /// None), as upstream's rule resolver gathers them.
    pub fn resolve(&self, user: &User, namespace: Option<&str>) -> Resolved {
        let mut resolved = Resolved {
            rules: Vec::new(),
            missing: Vec::new(),
        };
        self.visit(user, namespace, |rules| {
            match rules {
                Ok(rules) => resolved.rules.extend(rules.iter().cloned()),
                Err(missing) => resolved.missing.push(missing),
            }
            false
        });
        resolved
    }

    /// Whether some rule `user` holds in `namespace` satisfies `allows`;
    /// the roles found missing on the way, for the reason of a denial.
    pub fn any_rule(
        &self,
        user: &User,
        namespace: Option<&str>,
        allows: impl Fn(&Rule) -> bool,
    ) -> Result<(), Vec<String>> {
        let mut missing = Vec::new();
        let found = self.visit(user, namespace, |rules| match rules {
            Ok(rules) => rules.iter().any(&allows),
            Err(m) => {
                missing.push(m);
                false
            }
        });
        if found { Ok(()) } else { Err(missing) }
    }

    /// Calls `each` with the rules of every role bound to `user` that
    /// applies in `namespace` (or the name of a missing one) until it
    /// answers true; whether it did.
    fn visit(
        &self,
        user: &User,
        namespace: Option<&str>,
        mut each: impl FnMut(Result<&[Rule], String>) -> bool,
    ) -> bool {
        let state = self.state.read();
        let subjects = std::iter::once(format!("user:{}", user.name))
            .chain(user.groups.iter().map(|g| format!("group:{g}")));
        let mut seen = HashSet::new();
        for subject in subjects {
            let Some(keys) = state.by_subject.get(&subject) else {
                continue;
            };
            for key in keys {
                let Some(binding) = state.bindings.get(key) else {
                    continue;
                };
                if binding.namespace.is_some() && binding.namespace.as_deref() != namespace {
                    continue;
                }
                let role_namespace = match binding.role.kind.as_str() {
                    "Role" => binding.namespace.as_deref(),
                    _ => None,
                };
                let role = role_key(&binding.role.kind, role_namespace, &binding.role.name);
                if !seen.insert(role.clone()) {
                    continue;
                }
                let done = match state.roles.get(&role) {
                    Some(rules) => each(Ok(rules)),
                    None => each(Err(missing_role(&binding.role))),
                };
                if done {
                    return true;
                }
            }
        }
        false
    }

    /// The rules of a role, if it exists.
    pub fn role_rules(&self, role: &RoleRef, namespace: Option<&str>) -> Option<Vec<Rule>> {
        let ns = if role.kind == "Role" { namespace } else { None };
        let state = self.state.read();
        state
            .roles
            .get(&role_key(&role.kind, ns, &role.name))
            .map(|r| r.as_ref().clone())
    }

    /// Each ClusterRole with an aggregationRule and the rules of the
    /// ClusterRoles its selectors pick (by name, duplicates dropped), as
    /// upstream's aggregation controller unites them.
    pub(crate) fn aggregations(&self) -> Vec<(String, Vec<Rule>)> {
        let state = self.state.read();
        let mut names: Vec<&String> = state.cluster_role_labels.keys().collect();
        names.sort();
        state
            .aggregation
            .iter()
            .map(|(aggregate, selectors)| {
                let mut rules: Vec<Rule> = Vec::new();
                for name in &names {
                    let labels = state
                        .cluster_role_labels
                        .get(*name)
                        .and_then(Value::as_object);
                    if *name == aggregate || !selectors.iter().any(|s| s.matches(labels)) {
                        continue;
                    }
                    let key = role_key("ClusterRole", None, name);
                    for rule in state.roles.get(&key).iter().flat_map(|r| r.iter()) {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
                (aggregate.clone(), rules)
            })
            .collect()
    }

    /// How many bindings the index holds.
    pub fn bindings(&self) -> usize {
        self.state.read().bindings.len()
    }
}

/// Upstream's words for a binding to a role that does not exist.
pub fn missing_role(role: &RoleRef) -> String {
    format!(
        "{}.rbac.authorization.k8s.io \"{}\" not found",
        role.kind.to_ascii_lowercase(),
        role.name
    )
}

/// The kind a stored key holds.
fn kind_of(key: &str) -> Option<&'static str> {
    match key.strip_prefix(PREFIX)?.split('/').next()? {
        "roles" => Some("Role"),
        "clusterroles" => Some("ClusterRole"),
        "rolebindings" => Some("RoleBinding"),
        "clusterrolebindings" => Some("ClusterRoleBinding"),
        _ => None,
    }
}

/// Loads every stored RBAC object, then follows the store's changes to
/// them until the store closes.
pub async fn follow(index: Arc<Index>, store: Arc<dyn Store>) {
    crate::follower::until_closed("RBAC", || async {
        let Err(error) = follow_once(&index, store.as_ref()).await;
        error
    })
    .await
}

/// Reads the RBAC objects stored now into the index.
pub fn load(index: &Index, store: &dyn Store) -> Result<Revision, StoreError> {
    let list = store.list(PREFIX, &Default::default())?;
    index.clear();
    for kv in &list.items {
        if let (Some(kind), Ok(obj)) = (kind_of(&kv.key), serde_json::from_slice(&kv.value)) {
            index.apply(kind, &obj, kv.mod_revision, false);
        }
    }
    Ok(list.revision)
}

async fn follow_once(
    index: &Index,
    store: &dyn Store,
) -> Result<std::convert::Infallible, StoreError> {
    let revision = load(index, store)?;
    let mut watch = store.watch(PREFIX, revision)?;
    loop {
        for event in watch.next().await? {
            let (Some(kind), Ok(obj)) = (
                kind_of(&event.kv.key),
                serde_json::from_slice::<Value>(&event.kv.value),
            ) else {
                continue;
            };
            let deleted = matches!(event.kind, flotilla_store::EventKind::Delete);
            index.apply(kind, &obj, event.kv.mod_revision, deleted);
        }
    }
}
