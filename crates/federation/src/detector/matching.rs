//! Which policy a template belongs to: Karmada's selector matching,
//! priority and specificity rules, without I/O.

use std::collections::BTreeMap;

use crate::api::{Policy, ResourceSelector};
use crate::selector::labels_match;

/// What a policy selects a template by; more specific wins on equal
/// priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    Kind,
    LabelSelector,
    Name,
}

/// The identity of a template as selectors see it.
pub struct Template<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// The API group of an apiVersion: `apps` of `apps/v1`, the core group
/// (empty) of `v1`.
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Whether a selector's apiVersion and kind name the template's kind. The
/// group and kind decide, not the version: the hub presents a template at
/// its kind's preferred version, while a selector names whichever served
/// version its author wrote (the MCS documentation's
/// `multicluster.x-k8s.io/v1alpha1` ServiceExport, served beside
/// `v1beta1`), and every served version is the same object.
pub fn names_kind(api_version: &str, kind: &str, t: &Template) -> bool {
    kind == t.kind && group_of(api_version) == group_of(t.api_version)
}

fn selector_matches(s: &ResourceSelector, t: &Template) -> Option<Specificity> {
    if !names_kind(&s.api_version, &s.kind, t) {
        return None;
    }
    if let Some(ns) = s.namespace.as_deref().filter(|n| !n.is_empty())
        && Some(ns) != t.namespace
    {
        return None;
    }
    // A name makes the label selector irrelevant.
    if let Some(name) = s.name.as_deref().filter(|n| !n.is_empty()) {
        return (name == t.name).then_some(Specificity::Name);
    }
    match &s.label_selector {
        Some(ls) => labels_match(ls, t.labels).then_some(Specificity::LabelSelector),
        None => Some(Specificity::Kind),
    }
}

/// How specifically `policy` selects `template`, if it does at all.
pub fn policy_matches(policy: &Policy, t: &Template) -> Option<Specificity> {
    selectors_match(&policy.spec.resource_selectors, t)
}

/// The most specific of `selectors` that selects `t`, if any does.
pub fn selectors_match(selectors: &[ResourceSelector], t: &Template) -> Option<Specificity> {
    selectors
        .iter()
        .filter_map(|s| selector_matches(s, t))
        .max()
}

/// The best of `candidates` for `template`: highest priority, then most
/// specific selector, then the name that sorts first.
pub fn best<'p>(
    candidates: impl IntoIterator<Item = &'p Policy>,
    t: &Template,
) -> Option<&'p Policy> {
    candidates
        .into_iter()
        .filter_map(|p| Some((p, policy_matches(p, t)?)))
        .min_by(|(a, sa), (b, sb)| {
            b.spec
                .priority
                .cmp(&a.spec.priority)
                .then(sb.cmp(sa))
                .then_with(|| name(a).cmp(name(b)))
        })
        .map(|(p, _)| p)
}

fn name(p: &Policy) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// Karmada's order: a PropagationPolicy in the template's namespace wins
/// over every ClusterPropagationPolicy, whatever their priorities.
pub fn choose<'p>(
    propagation: impl IntoIterator<Item = &'p Policy>,
    cluster: impl IntoIterator<Item = &'p Policy>,
    t: &Template,
) -> Option<(&'p Policy, bool)> {
    let namespaced = t.namespace.and_then(|ns| {
        best(
            propagation
                .into_iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some(ns)),
            t,
        )
    });
    match namespaced {
        Some(p) => Some((p, true)),
        None => best(cluster, t).map(|p| (p, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PolicySpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn policy(name: &str, ns: Option<&str>, priority: i32, selector: ResourceSelector) -> Policy {
        let mut p = Policy::new(
            name,
            &crate::api::policy_resource(crate::api::Scope::Namespaced),
            PolicySpec {
                resource_selectors: vec![selector],
                priority,
                ..Default::default()
            },
        );
        p.metadata.namespace = ns.map(str::to_string);
        p
    }

    fn kind_only() -> ResourceSelector {
        ResourceSelector {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            ..Default::default()
        }
    }

    fn by_name(n: &str) -> ResourceSelector {
        ResourceSelector {
            name: Some(n.into()),
            ..kind_only()
        }
    }

    fn by_label(k: &str, v: &str) -> ResourceSelector {
        ResourceSelector {
            label_selector: Some(LabelSelector {
                match_labels: Some([(k.to_string(), v.to_string())].into()),
                ..Default::default()
            }),
            ..kind_only()
        }
    }

    #[test]
    fn a_selector_names_a_kind_at_any_version_of_its_group() {
        let labels = BTreeMap::new();
        let export = Template {
            api_version: "multicluster.x-k8s.io/v1beta1",
            kind: "ServiceExport",
            namespace: Some("production"),
            name: "payment-api",
            labels: &labels,
        };
        let selector = |api_version: &str, kind: &str| ResourceSelector {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Default::default()
        };
        for v in [
            "multicluster.x-k8s.io/v1alpha1",
            "multicluster.x-k8s.io/v1beta1",
        ] {
            assert_eq!(
                selector_matches(&selector(v, "ServiceExport"), &export),
                Some(Specificity::Kind),
                "{v}"
            );
        }
        // Another group, another kind, the core group: no match.
        assert!(
            selector_matches(&selector("example.com/v1beta1", "ServiceExport"), &export).is_none()
        );
        assert!(
            selector_matches(
                &selector("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
                &export
            )
            .is_none()
        );
        let cm = Template {
            api_version: "v1",
            kind: "ConfigMap",
            ..export
        };
        assert!(selector_matches(&selector("v1", "ConfigMap"), &cm).is_some());
        assert!(selector_matches(&selector("example.com/v1", "ConfigMap"), &cm).is_none());
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
    }

    #[test]
    fn priority_then_specificity_then_name() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "nginx".to_string())].into();
        let t = Template {
            api_version: "apps/v1",
            kind: "Deployment",
            namespace: Some("default"),
            name: "nginx",
            labels: &labels,
        };
        let pps = [
            policy("foo", Some("default"), 0, kind_only()),
            policy("bar", Some("default"), 0, kind_only()),
            policy("by-label", Some("default"), 0, by_label("app", "nginx")),
        ];
        let (p, _) = choose(&pps, [], &t).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("by-label"));
        let pps2 = [pps[0].clone(), pps[1].clone()];
        assert_eq!(
            choose(&pps2, [], &t).unwrap().0.metadata.name.as_deref(),
            Some("bar")
        );
        let high = policy("zzz", Some("default"), 5, kind_only());
        let named = policy("aaa", Some("default"), 0, by_name("nginx"));
        let both = [named, high];
        assert_eq!(
            choose(&both, [], &t).unwrap().0.metadata.name.as_deref(),
            Some("zzz")
        );
        // Wrong name, wrong labels, other namespace: no match.
        let none = [
            policy("n", Some("default"), 0, by_name("other")),
            policy("l", Some("default"), 0, by_label("app", "redis")),
            policy("o", Some("other"), 0, kind_only()),
        ];
        assert!(choose(&none, [], &t).is_none());
        // A namespaced policy beats a higher-priority cluster policy.
        let cpp = [policy("c", None, 100, kind_only())];
        let (p, namespaced) = choose(&pps, &cpp, &t).unwrap();
        assert!(namespaced);
        assert_eq!(p.metadata.name.as_deref(), Some("by-label"));
        assert!(!choose(&none, &cpp, &t).unwrap().1);
    }

    #[test]
    fn a_namespaced_policy_reaches_only_its_own_namespace() {
        let labels = BTreeMap::new();
        let t = Template {
            api_version: "apps/v1",
            kind: "Deployment",
            namespace: Some("tenant-a"),
            name: "web",
            labels: &labels,
        };
        // Tenant B's policy names tenant A's namespace and object: no match.
        let reach = ResourceSelector {
            namespace: Some("tenant-a".into()),
            ..by_name("web")
        };
        let b = policy("grab", Some("tenant-b"), 100, reach.clone());
        assert!(choose([&b], [], &t).is_none());
        // The same policy in tenant A's namespace, or a cluster-wide one
        // (an admin's), does.
        let a = policy("own", Some("tenant-a"), 0, reach.clone());
        assert_eq!(
            choose([&b, &a], [], &t).map(|(p, ns)| (name(p), ns)),
            Some(("own", true))
        );
        let cpp = policy("admin", None, 0, reach);
        assert_eq!(
            choose([&b], [&cpp], &t).map(|(p, ns)| (name(p), ns)),
            Some(("admin", false))
        );
    }
}
