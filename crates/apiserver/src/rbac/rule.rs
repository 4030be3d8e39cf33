//! One RBAC `PolicyRule`: whether it allows a request (upstream's
//! `RuleAllows`) and whether a set of rules covers it (upstream's
//! `Covers`, the escalation check).

use serde_json::Value;

use crate::value::strings_at;

/// A `PolicyRule` as stored in a Role or ClusterRole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// What a request is, as rules match it.
pub enum Request<'a> {
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        name: Option<&'a str>,
    },
    NonResource {
        verb: &'a str,
        path: &'a str,
    },
}

impl Rule {
    pub fn from_json(rule: &Value) -> Rule {
        Rule {
            verbs: strings_at(rule, "/verbs"),
            api_groups: strings_at(rule, "/apiGroups"),
            resources: strings_at(rule, "/resources"),
            resource_names: strings_at(rule, "/resourceNames"),
            non_resource_urls: strings_at(rule, "/nonResourceURLs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn all_of(role: &Value) -> Vec<Rule> {
        crate::value::array_at(role, "/rules")
            .iter()
            .map(Rule::from_json)
            .collect()
    }

    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::json!({"verbs": self.verbs});
        let mut put = |key: &str, values: &[String]| {
            if !values.is_empty() {
                rule[key] = serde_json::json!(values);
            }
        };
        put("apiGroups", &self.api_groups);
        put("resources", &self.resources);
        put("resourceNames", &self.resource_names);
        put("nonResourceURLs", &self.non_resource_urls);
        rule
    }

    pub fn allows(&self, request: &Request) -> bool {
        match *request {
            Request::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
            } => {
                has(&self.verbs, verb)
                    && has(&self.api_groups, group)
                    && self.matches_resource(resource, subresource)
                    && (self.resource_names.is_empty()
                        || name.is_some_and(|n| self.resource_names.iter().any(|r| r == n)))
            }
            Request::NonResource { verb, path } => {
                has(&self.verbs, verb)
                    && self.non_resource_urls.iter().any(|u| url_matches(u, path))
            }
        }
    }

    fn matches_resource(&self, resource: &str, subresource: Option<&str>) -> bool {
        self.resources.iter().any(|r| {
            if r == "*" {
                return true;
            }
            match subresource {
                None => r == resource,
                Some(sub) => {
                    r.strip_prefix("*/") == Some(sub) || r.split_once('/') == Some((resource, sub))
                }
            }
        })
    }

    /// The rule as single (verb, group, resource, name) or (verb, url)
    /// grants, as upstream breaks it down to compare with what a user holds.
    fn grants(&self) -> Vec<Grant<'_>> {
        let mut grants = Vec::new();
        for verb in &self.verbs {
            for url in &self.non_resource_urls {
                grants.push(Grant::NonResource { verb, url });
            }
            for group in &self.api_groups {
                for resource in &self.resources {
                    if self.resource_names.is_empty() {
                        grants.push(Grant::Resource {
                            verb,
                            group,
                            resource,
                            name: None,
                        });
                    }
                    for name in &self.resource_names {
                        grants.push(Grant::Resource {
                            verb,
                            group,
                            resource,
                            name: Some(name),
                        });
                    }
                }
            }
        }
        grants
    }

    /// Whether this rule (of someone's) grants at least what `grant` does.
    fn covers(&self, grant: &Grant) -> bool {
        match *grant {
            Grant::Resource {
                verb,
                group,
                resource,
                name,
            } => {
                has(&self.verbs, verb)
                    && has(&self.api_groups, group)
                    && self.covers_resource(resource)
                    && (self.resource_names.is_empty()
                        || name.is_some_and(|n| self.resource_names.iter().any(|r| r == n)))
            }
            Grant::NonResource { verb, url } => {
                has(&self.verbs, verb)
                    && self.non_resource_urls.iter().any(|own| {
                        own == url || own.strip_suffix('*').is_some_and(|p| url.starts_with(p))
                    })
            }
        }
    }

    fn covers_resource(&self, wanted: &str) -> bool {
        self.resources.iter().any(|own| {
            own == "*"
                || own == wanted
                // `*/status` covers `pods/status`, `pods/*` covers `pods/log`.
                || match (own.split_once('/'), wanted.split_once('/')) {
                    (Some(("*", sub)), Some((_, wanted_sub))) => sub == wanted_sub,
                    (Some((res, "*")), Some((wanted_res, _))) => res == wanted_res,
                    _ => false,
                }
        })
    }
}

/// `values` holds `*` or `value`.
fn has(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

/// A nonResourceURL of a rule against a request path: exact, `*`, or a
/// prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*" || rule == path || rule.strip_suffix('*').is_some_and(|p| path.starts_with(p))
}

enum Grant<'a> {
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        name: Option<&'a str>,
    },
    NonResource {
        verb: &'a str,
        url: &'a str,
    },
}

/// The rules of `wanted` that `held` does not cover, each narrowed to one
/// verb, group, resource and name (for the escalation message).
pub fn uncovered(held: &[Rule], wanted: &[Rule]) -> Vec<Rule> {
    let mut missing = Vec::new();
    for rule in wanted {
        for grant in rule.grants() {
            if held.iter().any(|h| h.covers(&grant)) {
                continue;
            }
            missing.push(match grant {
                Grant::Resource {
                    verb,
                    group,
                    resource,
                    name,
                } => Rule {
                    verbs: vec![verb.into()],
                    api_groups: vec![group.into()],
                    resources: vec![resource.into()],
                    resource_names: name.map(|n| vec![n.to_string()]).unwrap_or_default(),
                    non_resource_urls: vec![],
                },
                Grant::NonResource { verb, url } => Rule {
                    verbs: vec![verb.into()],
                    non_resource_urls: vec![url.into()],
                    ..Rule::default()
                },
            });
        }
    }
    missing
}

/// Upstream's rendering of a rule in escalation messages:
/// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}`.
pub fn describe(rule: &Rule) -> String {
    let list = |values: &[String]| {
        let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        format!("[{}]", quoted.join(" "))
    };
    let mut parts = Vec::new();
    if !rule.api_groups.is_empty() {
        parts.push(format!("APIGroups:{}", list(&rule.api_groups)));
    }
    if !rule.resources.is_empty() {
        parts.push(format!("Resources:{}", list(&rule.resources)));
    }
    if !rule.resource_names.is_empty() {
        parts.push(format!("ResourceNames:{}", list(&rule.resource_names)));
    }
    if !rule.non_resource_urls.is_empty() {
        parts.push(format!("NonResourceURLs:{}", list(&rule.non_resource_urls)));
    }
    parts.push(format!("Verbs:{}", list(&rule.verbs)));
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> Rule {
        Rule::from_json(&v)
    }

    fn res<'a>(verb: &'a str, group: &'a str, resource: &'a str) -> Request<'a> {
        Request::Resource {
            verb,
            group,
            resource,
            subresource: None,
            name: None,
        }
    }

    #[test]
    fn resources_and_subresources_match_as_upstream() {
        let pods = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows(&res("get", "", "pods")));
        assert!(!pods.allows(&res("list", "", "pods")));
        assert!(!pods.allows(&res("get", "apps", "pods")));
        let log = Request::Resource {
            verb: "get",
            group: "",
            resource: "pods",
            subresource: Some("log"),
            name: None,
        };
        assert!(!pods.allows(&log), "pods does not grant pods/log");
        let sub = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}));
        assert!(sub.allows(&log));
        let any_status = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/log"]}));
        assert!(any_status.allows(&log));
        assert!(!any_status.allows(&res("get", "", "pods")));
    }

    #[test]
    fn resource_names_confine_to_named_objects() {
        let one = rule(json!({"verbs": ["get", "list"], "apiGroups": [""],
                              "resources": ["configmaps"], "resourceNames": ["app"]}));
        let named = |name| Request::Resource {
            verb: "get",
            group: "",
            resource: "configmaps",
            subresource: None,
            name,
        };
        assert!(one.allows(&named(Some("app"))));
        assert!(!one.allows(&named(Some("other"))));
        assert!(
            !one.allows(&named(None)),
            "an unnamed request is not confined"
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        let get = |path| Request::NonResource { verb: "get", path };
        assert!(r.allows(&get("/healthz")));
        assert!(r.allows(&get("/apis/apps/v1")));
        assert!(!r.allows(&get("/version")));
    }

    #[test]
    fn covering_breaks_rules_down_per_grant() {
        let held = vec![
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "configmaps"]}),
            ),
            rule(json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["*"]})),
        ];
        let within =
            rule(json!({"verbs": ["get"], "apiGroups": ["", "apps"], "resources": ["pods"]}));
        assert!(uncovered(&held, &[within]).is_empty());
        let beyond = rule(
            json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods", "secrets"]}),
        );
        let missing = uncovered(&held, &[beyond]);
        assert_eq!(missing.len(), 3, "get secrets, delete pods, delete secrets");
        assert_eq!(
            describe(&missing[1]),
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#
        );
        // A wildcard is only covered by a wildcard.
        let star = rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}));
        assert_eq!(uncovered(&held, &[star]).len(), 1);
    }
}
