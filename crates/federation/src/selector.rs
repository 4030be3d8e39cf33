//! Label selectors and cluster affinities, evaluated against clusters and
//! templates.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{Cluster, ClusterAffinity};

/// Whether `labels` satisfy `selector` (matchLabels AND matchExpressions).
/// An empty selector matches everything, as in Kubernetes.
pub fn labels_match(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    exact
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

fn field_matches(e: &NodeSelectorRequirement, cluster: &Cluster) -> bool {
    let spec = &cluster.spec;
    let have: Vec<&str> = match e.key.as_str() {
        "provider" => spec.provider.iter().map(String::as_str).collect(),
        "region" => spec.region.iter().map(String::as_str).collect(),
        "zone" => spec.all_zones(),
        _ => return false,
    };
    let values = e.values.as_deref().unwrap_or_default();
    match e.operator.as_str() {
        "In" => have.iter().any(|h| values.iter().any(|v| v == h)),
        "NotIn" => !have.iter().any(|h| values.iter().any(|v| v == h)),
        _ => false,
    }
}

/// Karmada's `ClusterMatches`: `exclude` first, then every part that is
/// set must match. An empty affinity matches every cluster.
pub fn cluster_matches(affinity: &ClusterAffinity, cluster: &Cluster) -> bool {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    if affinity.exclude.iter().any(|n| n == name) {
        return false;
    }
    if !affinity.cluster_names.is_empty() && !affinity.cluster_names.iter().any(|n| n == name) {
        return false;
    }
    if let Some(selector) = &affinity.label_selector {
        let labels = cluster.metadata.labels.clone().unwrap_or_default();
        if !labels_match(selector, &labels) {
            return false;
        }
    }
    if let Some(fields) = &affinity.field_selector
        && !fields
            .match_expressions
            .iter()
            .all(|e| field_matches(e, cluster))
    {
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterSpec, FieldSelector};

    fn cluster(name: &str, region: &str, labels: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                region: Some(region.into()),
                ..Default::default()
            },
        );
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        c
    }

    #[test]
    fn affinity_parts_are_anded_and_exclude_wins() {
        let east = cluster("member1", "us-east", &[("env", "prod")]);
        let west = cluster("member2", "eu-west", &[("env", "dev")]);
        let all = ClusterAffinity::default();
        assert!(cluster_matches(&all, &east));
        let prod = ClusterAffinity {
            label_selector: Some(LabelSelector {
                match_labels: Some([("env".to_string(), "prod".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(cluster_matches(&prod, &east));
        assert!(!cluster_matches(&prod, &west));
        let excluded = ClusterAffinity {
            cluster_names: vec!["member1".into()],
            exclude: vec!["member1".into()],
            ..Default::default()
        };
        assert!(!cluster_matches(&excluded, &east));
        let region = ClusterAffinity {
            field_selector: Some(FieldSelector {
                match_expressions: vec![NodeSelectorRequirement {
                    key: "region".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["us-east".into()]),
                }],
            }),
            ..Default::default()
        };
        assert!(!cluster_matches(&region, &east));
        assert!(cluster_matches(&region, &west));
    }
}
