//! Placements in words, shared by `describe placement` and `plan`.

use std::sync::Arc;

use flotilla_federation::api::{BindingSpec, Cluster, ClusterAffinity, Placement};
use flotilla_federation::clustersets::api::{ManagedClusterSet, ManagedClusterSetBinding};
use flotilla_federation::clustersets::{self as clusterset, Restriction};
use flotilla_federation::scheduler::core::{affinity_in_use, rejection};
use flotilla_federation::scheduler::tenancy::Limits;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

/// How a placement divides replicas: `Duplicated`, `Divided, Weighted by
/// static weights (member1: 1, member2: 2)`, ...
pub fn division(p: &Placement) -> String {
    let Some(rs) = &p.replica_scheduling else {
        return "Duplicated (every selected cluster runs every replica)".into();
    };
    if rs.replica_scheduling_type.as_deref() != Some("Divided") {
        return "Duplicated (every selected cluster runs every replica)".into();
    }
    match rs.replica_division_preference.as_deref() {
        Some("Aggregated") => "Divided, Aggregated (as few clusters as fit)".into(),
        _ => match &rs.weight_preference {
            Some(w) if !w.static_weight_list.is_empty() => {
                let weights: Vec<String> = w
                    .static_weight_list
                    .iter()
                    .map(|s| format!("{}: {}", affinity(&s.target_cluster), s.weight))
                    .collect();
                format!(
                    "Divided, Weighted by static weights ({})",
                    weights.join(", ")
                )
            }
            Some(w) if w.dynamic_weight.is_some() => format!(
                "Divided, Weighted by {}",
                w.dynamic_weight.as_deref().unwrap_or_default()
            ),
            _ => "Divided, Weighted equally".into(),
        },
    }
}

/// Which clusters an affinity selects, in words.
pub fn affinity(a: &ClusterAffinity) -> String {
    let mut parts = Vec::new();
    if !a.cluster_names.is_empty() {
        parts.push(a.cluster_names.join(", "));
    }
    if let Some(l) = &a.label_selector {
        let mut labels: Vec<String> = l
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for e in l.match_expressions.iter().flatten() {
            labels.push(requirement(&e.key, &e.operator, e.values.as_deref()));
        }
        parts.push(format!("labels {}", labels.join(",")));
    }
    if let Some(f) = &a.field_selector {
        for e in &f.match_expressions {
            parts.push(requirement(&e.key, &e.operator, e.values.as_deref()));
        }
    }
    if !a.exclude.is_empty() {
        parts.push(format!("excluding {}", a.exclude.join(", ")));
    }
    if parts.is_empty() {
        "every cluster".into()
    } else {
        parts.join("; ")
    }
}

/// `key Operator (v1,v2)`, for label and field selector requirements.
fn requirement(key: &str, operator: &str, values: Option<&[String]>) -> String {
    format!(
        "{key} {operator} ({})",
        values.unwrap_or_default().join(",")
    )
}

/// The ManagedClusterSets bound to `namespace`, as the scheduler reads
/// them (None: the namespace is not restricted). Sets the caller may not
/// list count as empty.
pub async fn restriction(
    hub: &kube::Client,
    namespace: &str,
    clusters: &[Arc<Cluster>],
) -> anyhow::Result<Option<Restriction>> {
    let bindings: Api<ManagedClusterSetBinding> = Api::namespaced(hub.clone(), namespace);
    let bindings = bindings
        .list(&ListParams::default())
        .await
        .map_err(super::hub_error)?
        .items;
    if bindings.is_empty() {
        return Ok(None);
    }
    let sets: Vec<Arc<ManagedClusterSet>> = Api::<ManagedClusterSet>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().map(Arc::new).collect())
        .unwrap_or_default();
    Ok(clusterset::restriction(
        namespace,
        bindings.iter(),
        &sets,
        clusters,
    ))
}

/// Each cluster of the fleet the binding is not on, and why.
pub fn left_out(
    spec: &BindingSpec,
    observing: Option<&str>,
    clusters: &[Arc<Cluster>],
    limits: &Limits,
) -> Vec<(String, String)> {
    let placement = spec.placement.clone().unwrap_or_default();
    let term = affinity_in_use(&placement, observing);
    clusters
        .iter()
        .filter(|c| !spec.clusters.iter().any(|t| t.name == c.name_any()))
        .map(|c| {
            let why = rejection(spec, &placement, &term, c, false, limits)
                .map(|r| {
                    let r = r.trim_start_matches("cluster(s) ");
                    match r.strip_prefix("are ") {
                        Some(rest) => format!("is {rest}"),
                        None => r.replace(" were ", " was "),
                    }
                })
                .unwrap_or_else(|| {
                    "fits, but the spread constraints or the division chose other clusters".into()
                });
            (c.name_any(), why)
        })
        .collect()
}
