//! OverridePolicies and ClusterOverridePolicies: how each cluster's copy
//! of a template differs from the template (a registry mirror, a replica
//! count, a label). The binding controller asks this module for each
//! target cluster's manifest; nothing here does I/O.
//!
//! Karmada's order: every matching ClusterOverridePolicy, then the
//! OverridePolicies of the template's namespace; within each, the least
//! specific selector first and then by name, so the most specific policy
//! is applied last and wins; within a policy, its rules in order, those
//! whose targetCluster matches the cluster.

pub mod image;
mod overriders;

use std::fmt;

use serde_json::Value;

use crate::api::{Cluster, ClusterAffinity, OverridePolicy, Overriders};
use crate::detector::matching::{Specificity, Template, selectors_match};
use crate::selector::cluster_matches;

/// What was applied to one cluster's manifest, for the Work's
/// `policy.karmada.io/applied-(cluster-)overrides` annotations: one entry
/// per rule, `{policyName, overriders}`.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    pub cluster_policies: Vec<Value>,
    pub policies: Vec<Value>,
}

/// An override that could not be applied: which policy, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct OverrideError {
    /// `ClusterOverridePolicy/name` or `OverridePolicy/namespace/name`.
    pub policy: String,
    pub message: String,
}

impl fmt::Display for OverrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.policy, self.message)
    }
}

fn name(p: &OverridePolicy) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// The policies that select `t`, in the order they apply.
fn ordered<'p>(
    policies: impl IntoIterator<Item = &'p OverridePolicy>,
    t: &Template,
) -> Vec<&'p OverridePolicy> {
    let mut selected: Vec<(Specificity, &OverridePolicy)> = policies
        .into_iter()
        .filter_map(|p| {
            // No selectors: every resource, as a kind-only selector ranks.
            let s = if p.spec.resource_selectors.is_empty() {
                Some(Specificity::Kind)
            } else {
                selectors_match(&p.spec.resource_selectors, t)
            };
            Some((s?, p))
        })
        .collect();
    selected.sort_by(|(sa, a), (sb, b)| sa.cmp(sb).then_with(|| name(a).cmp(name(b))));
    selected.into_iter().map(|(_, p)| p).collect()
}

/// A policy's rules; the deprecated top-level pair when it has none.
fn rules(p: &OverridePolicy) -> Vec<(Option<&ClusterAffinity>, &Overriders)> {
    if p.spec.override_rules.is_empty() {
        return p
            .spec
            .overriders
            .as_ref()
            .map(|o| (p.spec.target_cluster.as_ref(), o))
            .into_iter()
            .collect();
    }
    p.spec
        .override_rules
        .iter()
        .map(|r| (r.target_cluster.as_ref(), &r.overriders))
        .collect()
}

/// Applies to `manifest` (the template as `cluster` gets it) every
/// override that concerns it. `cluster_policies` are all the
/// ClusterOverridePolicies, `policies` all the OverridePolicies (those of
/// other namespaces are passed over). On error `manifest` is partly
/// overridden and must not be delivered.
pub fn apply<'p>(
    manifest: &mut Value,
    t: &Template,
    cluster: &Cluster,
    cluster_policies: impl IntoIterator<Item = &'p OverridePolicy>,
    policies: impl IntoIterator<Item = &'p OverridePolicy>,
) -> Result<Applied, OverrideError> {
    let mut applied = Applied::default();
    let namespaced: Vec<&OverridePolicy> = match t.namespace {
        Some(ns) => policies
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .collect(),
        // A cluster-scoped template gets ClusterOverridePolicies only.
        None => Vec::new(),
    };
    let scopes = [
        (ordered(cluster_policies, t), true),
        (ordered(namespaced, t), false),
    ];
    for (ordered, cluster_scoped) in scopes {
        for p in ordered {
            for (i, (target, o)) in rules(p).into_iter().enumerate() {
                if target.is_some_and(|a| !cluster_matches(a, cluster)) {
                    continue;
                }
                overriders::apply(manifest, o).map_err(|message| OverrideError {
                    policy: match &p.metadata.namespace {
                        Some(ns) if !cluster_scoped => {
                            format!("OverridePolicy/{ns}/{}", name(p))
                        }
                        _ => format!("ClusterOverridePolicy/{}", name(p)),
                    },
                    message: format!("overrideRules[{i}].{message}"),
                })?;
                let entry = overriders::applied_entry(name(p), o);
                if cluster_scoped {
                    applied.cluster_policies.push(entry);
                } else {
                    applied.policies.push(entry);
                }
            }
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests;
