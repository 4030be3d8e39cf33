//! Whether a pod may run on a node: nodeSelector, required node affinity,
//! taints and tolerations, as kube-scheduler's filter plugins decide; shared
//! by the scheduler and the DaemonSet controller.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Taint};

use crate::pod::PodSpec;
use kube::ResourceExt;

/// Why a node was filtered out, in upstream's words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reject {
    Affinity,
    Taint(String),
    Unschedulable,
    InsufficientCpu,
    InsufficientMemory,
    TooManyPods,
    VolumeNodeAffinity,
}

impl Reject {
    pub fn message(&self) -> String {
        match self {
            Reject::Affinity => "node(s) didn't match Pod's node affinity/selector".into(),
            Reject::Taint(t) => format!("node(s) had untolerated taint {{{t}}}"),
            Reject::Unschedulable => "node(s) were unschedulable".into(),
            Reject::InsufficientCpu => "Insufficient cpu".into(),
            Reject::InsufficientMemory => "Insufficient memory".into(),
            Reject::TooManyPods => "Too many pods".into(),
            Reject::VolumeNodeAffinity => "node(s) had volume node affinity conflict".into(),
        }
    }
}

/// The scheduler's summary of why no node fits, e.g.
/// "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match ...".
pub fn unschedulable_message(total: usize, rejects: &[Reject]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in rejects {
        *counts.entry(r.message()).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(m, n)| format!("{n} {m}")).collect();
    format!(
        "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.",
        parts.join(", ")
    )
}

/// Checks nodeSelector, required node affinity and taints (NoSchedule and
/// NoExecute; a node's `unschedulable` acts as its upstream taint).
pub fn admits(node: &Node, spec: &PodSpec) -> Result<(), Reject> {
    if !matches_node_selector(node, spec) {
        return Err(Reject::Affinity);
    }
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if unschedulable
        && !tolerates(
            spec,
            &Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            },
        )
    {
        return Err(Reject::Unschedulable);
    }
    for taint in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
    {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerates(spec, taint) {
            let value = taint.value.as_deref().unwrap_or("");
            return Err(Reject::Taint(format!("{}: {value}", taint.key)));
        }
    }
    Ok(())
}

pub fn matches_node_selector(node: &Node, spec: &PodSpec) -> bool {
    let labels = node.labels();
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        // Terms are ORed; an empty list matches nothing, as upstream.
        Some(r) => r.node_selector_terms.iter().any(|t| term_matches(node, t)),
        None => true,
    }
}

/// Whether `node` matches one of `selector`'s terms (a volume's node
/// affinity).
pub fn selector_matches(node: &Node, selector: &k8s_openapi::api::core::v1::NodeSelector) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|t| term_matches(node, t))
}

fn term_matches(node: &Node, term: &NodeSelectorTerm) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.labels();
    exprs
        .iter()
        .all(|e| requirement(e, labels.get(&e.key).map(String::as_str)))
        && fields.iter().all(|f| {
            let value = (f.key == "metadata.name").then(|| node.name_any());
            requirement(f, value.as_deref())
        })
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x)
        }
        _ => false,
    }
}

/// Whether one of the pod's tolerations covers `taint`.
pub fn tolerates(spec: &PodSpec, taint: &Taint) -> bool {
    spec.tolerations.iter().flatten().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_ok = t
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == taint.key);
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        };
        // An empty key matches every taint only with operator Exists.
        let empty_key = t.key.as_deref().is_none_or(str::is_empty);
        effect_ok && key_ok && value_ok && (!empty_key || t.operator.as_deref() == Some("Exists"))
    })
}

/// Whether `selector` selects `labels` (an empty selector selects all).
pub fn label_selector_matches(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Affinity;
    use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelector, NodeSpec, Toleration};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn affinity(key: &str, op: &str, values: &[&str]) -> PodSpec {
        PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: key.into(),
                                operator: op.into(),
                                values: Some(values.iter().map(|s| s.to_string()).collect()),
                            }]),
                            match_fields: None,
                        }],
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn affinity_operators() {
        let n = node(&[("zone", "a"), ("gen", "5")], vec![]);
        assert!(admits(&n, &affinity("zone", "In", &["a", "b"])).is_ok());
        assert_eq!(
            admits(&n, &affinity("zone", "NotIn", &["a"])),
            Err(Reject::Affinity)
        );
        assert!(admits(&n, &affinity("gen", "Gt", &["4"])).is_ok());
        assert!(admits(&n, &affinity("gpu", "DoesNotExist", &[])).is_ok());
    }

    #[test]
    fn taints_need_tolerations() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let n = node(&[], vec![taint]);
        assert!(matches!(
            admits(&n, &PodSpec::default()),
            Err(Reject::Taint(_))
        ));
        let tolerant = PodSpec {
            tolerations: Some(vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Equal".into()),
                value: Some("gpu".into()),
                effect: Some("NoSchedule".into()),
                toleration_seconds: None,
            }]),
            ..Default::default()
        };
        assert!(admits(&n, &tolerant).is_ok());
    }

    #[test]
    fn message_counts_reasons() {
        let m = unschedulable_message(
            3,
            &[
                Reject::InsufficientCpu,
                Reject::InsufficientCpu,
                Reject::Affinity,
            ],
        );
        assert!(
            m.starts_with("0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't match"),
            "{m}"
        );
    }
}
