//! The audit policy: `audit.k8s.io/v1` `Policy` as kube-apiserver reads
//! it from `--audit-policy-file`, and the level a request is recorded at.
//!
//! Rules are tried in order and the first that matches decides; a request
//! no rule matches is not audited (level `None`). A rule matches when each
//! of its non-empty lists matches: `users` (the user's name), `userGroups`
//! (any of its groups), `verbs`, and then either `namespaces`/`resources`
//! (resource requests only) or `nonResourceURLs` (other paths only).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// How much of a request is recorded, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// When in its handling an event is written for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

/// A resource rule's group and the resources of it that it names.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    /// The API group; empty is the core group.
    #[serde(default)]
    pub group: String,
    /// Plurals, `plural/subresource`, `plural/*`, `*/subresource` or `*`;
    /// empty: every resource of the group.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty: any.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of the policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces; `""` names cluster-scoped resources.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Paths, each exact or ending in `*` (a prefix); `*` alone is every path.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// The policy file's document.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml::Value>,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

/// A policy that parsed and validated.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// Why a policy was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("{0}")]
    Syntax(String),
    #[error("apiVersion {0:?} is not audit.k8s.io/v1")]
    ApiVersion(String),
    #[error("kind {0:?} is not Policy")]
    Kind(String),
    #[error("the policy has no rules (a policy without rules audits nothing)")]
    NoRules,
    #[error(
        "rules[{0}]: a rule cannot apply to both resources (resources, namespaces) and nonResourceURLs"
    )]
    Mixed(usize),
    #[error(
        "rules[{0}].nonResourceURLs: {1:?} must be \"*\" or a path starting with \"/\", with \"*\" only at its end"
    )]
    NonResourceUrl(usize, String),
    #[error("rules[{0}].resources: resourceNames need specific resources, not {1:?}")]
    NamesWithWildcard(usize, String),
}

/// What the policy says about one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluated {
    pub level: Level,
    pub omit_stages: BTreeSet<Stage>,
    pub omit_managed_fields: bool,
}

/// The request as the policy sees it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Attributes<'a> {
    /// The authenticated user (before impersonation); `None` when
    /// authentication failed or the server authenticates no one.
    pub user: Option<(&'a str, &'a [String])>,
    pub verb: &'a str,
    /// Set for resource requests.
    pub resource: Option<ResourceAttributes<'a>>,
    /// The path of a non-resource request.
    pub path: &'a str,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Policy {
    /// Parses and validates a policy file's contents.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let deserializer = serde_yaml::Deserializer::from_str(text);
        let doc: Document = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            if path == "." || path.is_empty() {
                PolicyError::Syntax(e.into_inner().to_string())
            } else {
                PolicyError::Syntax(format!("{path}: {}", e.into_inner()))
            }
        })?;
        if doc.api_version != "audit.k8s.io/v1" {
            return Err(PolicyError::ApiVersion(doc.api_version));
        }
        if doc.kind != "Policy" {
            return Err(PolicyError::Kind(doc.kind));
        }
        if doc.rules.is_empty() {
            return Err(PolicyError::NoRules);
        }
        for (i, rule) in doc.rules.iter().enumerate() {
            if !rule.non_resource_urls.is_empty()
                && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
            {
                return Err(PolicyError::Mixed(i));
            }
            for url in &rule.non_resource_urls {
                let body = url.strip_suffix('*').unwrap_or(url);
                if url != "*" && (!body.starts_with('/') || body.contains('*')) {
                    return Err(PolicyError::NonResourceUrl(i, url.clone()));
                }
            }
            for gr in &rule.resources {
                if gr.resource_names.is_empty() {
                    continue;
                }
                if let Some(wild) = gr.resources.iter().find(|r| r.contains('*')) {
                    return Err(PolicyError::NamesWithWildcard(i, wild.clone()));
                }
            }
        }
        Ok(Policy {
            rules: doc.rules,
            omit_stages: doc.omit_stages,
            omit_managed_fields: doc.omit_managed_fields,
        })
    }

    /// The level, stages to omit and managed-fields choice for a request:
    /// the first matching rule's, `None` when none matches, and never
    /// above `Metadata` for secrets and tokens ([`sensitive`]).
    pub fn evaluate(&self, attrs: &Attributes) -> Evaluated {
        let mut omit_stages: BTreeSet<Stage> = self.omit_stages.iter().copied().collect();
        let Some(rule) = self.rules.iter().find(|r| rule_matches(r, attrs)) else {
            return Evaluated {
                level: Level::None,
                omit_stages,
                omit_managed_fields: self.omit_managed_fields,
            };
        };
        omit_stages.extend(rule.omit_stages.iter().copied());
        let level = match attrs.resource {
            Some(r) if rule.level > Level::Metadata && sensitive(&r) => Level::Metadata,
            _ => rule.level,
        };
        Evaluated {
            level,
            omit_stages,
            omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
        }
    }
}

/// Resources whose requests and responses carry credentials: secrets,
/// TokenReviews and TokenRequests (`serviceaccounts/token`). Flotilla
/// never records them beyond `Metadata`, whatever the policy says (a
/// deliberate safety cap; kube-apiserver leaves this to the policy).
pub fn sensitive(r: &ResourceAttributes) -> bool {
    r.resource == "secrets"
        || (r.group == "authentication.k8s.io" && r.resource == "tokenreviews")
        || (r.group.is_empty() && r.resource == "serviceaccounts" && r.subresource == "token")
}

fn rule_matches(rule: &Rule, attrs: &Attributes) -> bool {
    if !rule.users.is_empty() {
        match attrs.user {
            Some((name, _)) if rule.users.iter().any(|u| u == name) => {}
            _ => return false,
        }
    }
    if !rule.user_groups.is_empty() {
        match attrs.user {
            Some((_, groups)) if groups.iter().any(|g| rule.user_groups.contains(g)) => {}
            _ => return false,
        }
    }
    if !rule.verbs.is_empty() && !rule.verbs.iter().any(|v| v == attrs.verb) {
        return false;
    }
    if !rule.namespaces.is_empty() || !rule.resources.is_empty() {
        return match &attrs.resource {
            Some(r) => resource_matches(rule, r),
            None => false,
        };
    }
    if !rule.non_resource_urls.is_empty() {
        return attrs.resource.is_none()
            && rule
                .non_resource_urls
                .iter()
                .any(|spec| path_matches(attrs.path, spec));
    }
    true
}

fn resource_matches(rule: &Rule, r: &ResourceAttributes) -> bool {
    if !rule.namespaces.is_empty() && !rule.namespaces.iter().any(|n| n == r.namespace) {
        return false;
    }
    if rule.resources.is_empty() {
        return true;
    }
    let combined = if r.subresource.is_empty() {
        r.resource.to_string()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    rule.resources
        .iter()
        .filter(|gr| gr.group == r.group)
        .any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !gr.resource_names.iter().any(|n| n == r.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                res == "*"
                    || *res == combined
                    || (!r.subresource.is_empty() && res.strip_prefix("*/") == Some(r.subresource))
                    || res.strip_suffix("/*") == Some(r.resource)
            })
        })
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
metadata:
  name: test
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    userGroups: ["system:nodes"]
    nonResourceURLs: ["/healthz*", "/version"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods/log", "pods/status"]
  - level: Request
    resources:
      - group: ""
        resources: ["configmaps"]
        resourceNames: ["controller-leader"]
    verbs: ["update"]
    omitStages: ["ResponseStarted"]
    omitManagedFields: true
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["secrets", "serviceaccounts/token"]
      - group: "authentication.k8s.io"
        resources: ["tokenreviews"]
  - level: Metadata
    namespaces: ["kube-system", ""]
  - level: Request
    resources:
      - group: "apps"
        resources: ["*/scale"]
      - group: "batch"
        resources: ["jobs/*"]
      - group: "rbac.authorization.k8s.io"
  - level: Metadata
    nonResourceURLs: ["/metrics"]
  - level: RequestResponse
    userGroups: ["auditors"]
  - level: Metadata
    verbs: ["get", "list", "watch"]
"#;

    fn res<'a>(
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Option<ResourceAttributes<'a>> {
        Some(ResourceAttributes {
            group,
            resource,
            subresource,
            namespace,
            name,
        })
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).expect("policy parses");
        let none: &[String] = &[];
        let nodes = ["system:nodes".to_string()];
        let auditors = ["auditors".to_string()];
        use Level::*;
        #[allow(clippy::type_complexity)]
        let table: Vec<(
            Option<(&str, &[String])>,
            &str,
            Option<ResourceAttributes>,
            &str,
            Level,
        )> = vec![
            // users and verbs together
            (
                Some(("system:kube-proxy", none)),
                "watch",
                res("", "endpoints", "", "", ""),
                "",
                None,
            ),
            (
                Some(("system:kube-proxy", none)),
                "list",
                res("", "pods", "", "a", ""),
                "",
                Metadata,
            ),
            // userGroups with nonResourceURLs, prefix and exact
            (
                Some(("node-1", &nodes)),
                "get",
                Option::None,
                "/healthz/etcd",
                None,
            ),
            (
                Some(("node-1", &nodes)),
                "get",
                Option::None,
                "/version",
                None,
            ),
            (
                Some(("node-1", &nodes)),
                "get",
                Option::None,
                "/versions",
                Metadata,
            ),
            // a non-resource rule never matches a resource request
            (
                Some(("node-1", &nodes)),
                "get",
                res("", "pods", "", "healthz", ""),
                "",
                Metadata,
            ),
            // subresources named exactly
            (
                Some(("alice", none)),
                "get",
                res("", "pods", "log", "a", "p"),
                "",
                RequestResponse,
            ),
            (
                Some(("alice", none)),
                "update",
                res("", "pods", "status", "a", "p"),
                "",
                RequestResponse,
            ),
            (
                Some(("alice", none)),
                "create",
                res("", "pods", "exec", "a", "p"),
                "",
                None,
            ),
            // the plain resource is not its subresource
            (
                Some(("alice", none)),
                "create",
                res("", "pods", "", "a", "p"),
                "",
                None,
            ),
            // resourceNames and verbs
            (
                Some(("kcm", none)),
                "update",
                res("", "configmaps", "", "a", "controller-leader"),
                "",
                Request,
            ),
            (
                Some(("kcm", none)),
                "update",
                res("", "configmaps", "", "a", "other"),
                "",
                None,
            ),
            (
                Some(("kcm", none)),
                "get",
                res("", "configmaps", "", "a", "controller-leader"),
                "",
                Metadata,
            ),
            // secrets and tokens capped at Metadata whatever the rule says
            (
                Some(("alice", none)),
                "create",
                res("", "secrets", "", "a", ""),
                "",
                Metadata,
            ),
            (
                Some(("alice", none)),
                "create",
                res("", "serviceaccounts", "token", "a", "default"),
                "",
                Metadata,
            ),
            (
                Some(("alice", none)),
                "create",
                res("authentication.k8s.io", "tokenreviews", "", "", ""),
                "",
                Metadata,
            ),
            // namespaces: "" is cluster scope
            (
                Some(("alice", none)),
                "delete",
                res("", "configmaps", "", "kube-system", "x"),
                "",
                Metadata,
            ),
            (
                Some(("alice", none)),
                "delete",
                res("", "nodes", "", "", "n"),
                "",
                Metadata,
            ),
            (
                Some(("alice", none)),
                "delete",
                res("", "configmaps", "", "default", "x"),
                "",
                None,
            ),
            // */subresource, resource/*, a whole group
            (
                Some(("alice", none)),
                "update",
                res("apps", "deployments", "scale", "a", "d"),
                "",
                Request,
            ),
            (
                Some(("alice", none)),
                "update",
                res("apps", "deployments", "", "a", "d"),
                "",
                None,
            ),
            (
                Some(("alice", none)),
                "update",
                res("batch", "jobs", "status", "a", "j"),
                "",
                Request,
            ),
            // `resource/*` also matches the resource itself, as upstream's matcher does
            (
                Some(("alice", none)),
                "update",
                res("batch", "jobs", "", "a", "j"),
                "",
                Request,
            ),
            (
                Some(("alice", none)),
                "update",
                res("batch", "cronjobs", "", "a", "j"),
                "",
                None,
            ),
            (
                Some(("alice", none)),
                "create",
                res("rbac.authorization.k8s.io", "roles", "", "a", ""),
                "",
                Request,
            ),
            // group must match exactly: core pods/log rule is not apps'
            (
                Some(("alice", none)),
                "create",
                res("apps", "pods", "log", "a", ""),
                "",
                None,
            ),
            // nonResourceURLs exact
            (
                Some(("alice", none)),
                "get",
                Option::None,
                "/metrics",
                Metadata,
            ),
            (
                Some(("alice", none)),
                "post",
                Option::None,
                "/metrics/x",
                None,
            ),
            // userGroups
            (
                Some(("carol", &auditors)),
                "create",
                res("", "configmaps", "", "a", ""),
                "",
                RequestResponse,
            ),
            (
                Some(("carol", &auditors)),
                "create",
                res("", "secrets", "", "a", ""),
                "",
                Metadata,
            ),
            // no user: user and group rules never match
            (Option::None, "get", Option::None, "/healthz", Metadata),
            (
                Option::None,
                "create",
                res("", "configmaps", "", "a", ""),
                "",
                None,
            ),
        ];
        for (i, (user, verb, resource, path, want)) in table.into_iter().enumerate() {
            let got = policy.evaluate(&Attributes {
                user,
                verb,
                resource,
                path,
            });
            assert_eq!(
                got.level, want,
                "case {i}: {user:?} {verb} {resource:?} {path}"
            );
        }
    }

    #[test]
    fn omit_stages_and_managed_fields_combine_policy_and_rule() {
        let policy = Policy::parse(POLICY).expect("policy parses");
        let leader = Attributes {
            user: Some(("kcm", &[])),
            verb: "update",
            resource: res("", "configmaps", "", "a", "controller-leader"),
            path: "",
        };
        let got = policy.evaluate(&leader);
        assert_eq!(
            got.omit_stages,
            BTreeSet::from([Stage::RequestReceived, Stage::ResponseStarted])
        );
        assert!(got.omit_managed_fields);
        let other = policy.evaluate(&Attributes {
            verb: "get",
            ..leader
        });
        assert_eq!(other.omit_stages, BTreeSet::from([Stage::RequestReceived]));
        assert!(!other.omit_managed_fields);
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let cases = [
            (
                "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]",
                "audit.k8s.io/v1",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Pol\nrules: [{level: None}]",
                "kind",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []",
                "no rules",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]",
                "rules[0].level",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resource: [pods]}]",
                "unknown field `resource`",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None}, {users: [a]}]",
                "missing field `level`",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, namespaces: [a], nonResourceURLs: [/x]}]",
                "both",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [healthz]}]",
                "healthz",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{resources: ['*'], resourceNames: [x]}]}]",
                "resourceNames",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Sometimes]\nrules: [{level: None}]",
                "omitStages",
            ),
            ("{ not yaml", ""),
        ];
        for (text, needle) in cases {
            let err = Policy::parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text}: {err} lacks {needle:?}");
        }
    }
}
