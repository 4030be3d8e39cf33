//! Which clusters a namespace may use: the members of the
//! ManagedClusterSets bound to it. A namespace with no
//! ManagedClusterSetBinding is unrestricted (a single-tenant hub needs
//! none); one with bindings places only on their sets' clusters. The
//! controller here keeps the sets' `ClusterSetEmpty` and the bindings'
//! `Bound` conditions, as OCM's registration hub does.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

pub mod admission;
pub mod api;

use crate::api::Cluster;
use crate::conditions;
use crate::selector::labels_match;
use api::{
    CLUSTER_SET_LABEL, CONDITION_BOUND, CONDITION_EMPTY, LABEL_SELECTOR, ManagedClusterSet,
    ManagedClusterSetBinding,
};

/// Whether `cluster` is a member of `set`: labelled with the set's name
/// (`ExclusiveClusterSetLabel`, the default), or matching its
/// `labelSelector` (`LabelSelector`; no selector selects nothing).
pub fn is_member(set: &ManagedClusterSet, cluster: &Cluster) -> bool {
    let selector = &set.spec.cluster_selector;
    if selector.selector_type.as_deref() == Some(LABEL_SELECTOR) {
        return selector
            .label_selector
            .as_ref()
            .is_some_and(|s| labels_match(s, cluster.labels()));
    }
    cluster.labels().get(CLUSTER_SET_LABEL) == Some(&set.name_any())
}

/// The names of `set`'s member clusters, sorted.
pub fn members(set: &ManagedClusterSet, clusters: &[Arc<Cluster>]) -> Vec<String> {
    let mut names: Vec<String> = clusters
        .iter()
        .filter(|c| is_member(set, c))
        .map(|c| c.name_any())
        .collect();
    names.sort();
    names
}

/// Whether a binding is valid: OCM requires it to be named after its set.
pub fn is_valid(binding: &ManagedClusterSetBinding) -> bool {
    binding.name_any() == binding.spec.cluster_set
}

/// What the ManagedClusterSetBindings of a namespace allow it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Restriction {
    pub namespace: String,
    /// The sets bound (valid bindings, existing or not), sorted.
    pub bound: Vec<String>,
    /// The clusters of the bound sets that exist.
    pub clusters: BTreeSet<String>,
}

impl Restriction {
    pub fn allows(&self, cluster: &str) -> bool {
        self.clusters.contains(cluster)
    }

    /// Why a cluster outside the bound sets is filtered out, in the
    /// scheduler's plural ("3 cluster(s) are not in ...").
    pub fn rejection(&self) -> String {
        format!(
            "cluster(s) are not in a ManagedClusterSet bound to namespace \"{}\" (bound: {})",
            self.namespace,
            if self.bound.is_empty() {
                "none".to_string()
            } else {
                self.bound.join(", ")
            }
        )
    }
}

/// The restriction on `namespace`, or None when it has no binding. An
/// invalid binding (named otherwise than its set) still restricts the
/// namespace, to no set: a mistake must not open the whole fleet.
pub fn restriction<'a>(
    namespace: &str,
    bindings: impl IntoIterator<Item = &'a ManagedClusterSetBinding>,
    sets: &[Arc<ManagedClusterSet>],
    clusters: &[Arc<Cluster>],
) -> Option<Restriction> {
    let ours: Vec<&ManagedClusterSetBinding> = bindings
        .into_iter()
        .filter(|b| b.namespace().as_deref() == Some(namespace))
        .collect();
    if ours.is_empty() {
        return None;
    }
    let mut bound: Vec<String> = ours
        .iter()
        .filter(|b| is_valid(b))
        .map(|b| b.spec.cluster_set.clone())
        .collect();
    bound.sort();
    bound.dedup();
    let clusters = sets
        .iter()
        .filter(|s| bound.contains(&s.name_any()) && s.metadata.deletion_timestamp.is_none())
        .flat_map(|s| members(s, clusters))
        .collect();
    Some(Restriction {
        namespace: namespace.to_string(),
        bound,
        clusters,
    })
}

/// Keeps the sets' and bindings' conditions, looking at all of them on
/// every change of a set, a binding or a cluster (there are few).
pub async fn run(
    hub: Client,
    sets: Store<ManagedClusterSet>,
    bindings: Store<ManagedClusterSetBinding>,
    clusters: Store<Cluster>,
    changes: impl Stream<Item = ()> + Send + 'static,
) {
    let mut changes = std::pin::pin!(changes.ready_chunks(64));
    while changes.next().await.is_some() {
        loop {
            match sync(&hub, &sets, &bindings, &clusters).await {
                Ok(()) => break,
                Err(error) => {
                    warn!(%error, "cluster set status not written; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

async fn sync(
    hub: &Client,
    sets: &Store<ManagedClusterSet>,
    bindings: &Store<ManagedClusterSetBinding>,
    clusters: &Store<Cluster>,
) -> kube::Result<()> {
    let clusters = clusters.state();
    let sets = sets.state();
    for set in &sets {
        let n = members(set, &clusters).len();
        let mut conds = set.status.clone().unwrap_or_default().conditions;
        let changed = if n == 0 {
            conditions::set(
                &mut conds,
                CONDITION_EMPTY,
                true,
                "NoClusterMatched",
                "No ManagedCluster selected",
            )
        } else {
            conditions::set(
                &mut conds,
                CONDITION_EMPTY,
                false,
                "ClustersSelected",
                &format!("{n} ManagedClusters selected"),
            )
        };
        if changed {
            debug!(set = %set.name_any(), members = n, "cluster set status");
            let api: Api<ManagedClusterSet> = Api::all(hub.clone());
            write(&api, &set.name_any(), &conds).await?;
        }
    }
    for binding in bindings.state() {
        let mut conds = binding.status.clone().unwrap_or_default().conditions;
        let set = &binding.spec.cluster_set;
        let changed = if !is_valid(&binding) {
            conditions::set(
                &mut conds,
                CONDITION_BOUND,
                false,
                "InvalidBinding",
                &format!(
                    "The ManagedClusterSetBinding must have the same name as spec.clusterSet ({set})"
                ),
            )
        } else if sets.iter().any(|s| &s.name_any() == set) {
            conditions::set(
                &mut conds,
                CONDITION_BOUND,
                true,
                "ClusterSetBound",
                &format!("The ManagedClusterSet {set} is bound"),
            )
        } else {
            conditions::set(
                &mut conds,
                CONDITION_BOUND,
                false,
                "ClusterSetNotFound",
                &format!("The ManagedClusterSet {set} does not exist"),
            )
        };
        if changed {
            let ns = binding.namespace().unwrap_or_default();
            let api: Api<ManagedClusterSetBinding> = Api::namespaced(hub.clone(), &ns);
            write(&api, &binding.name_any(), &conds).await?;
        }
    }
    Ok(())
}

async fn write<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> kube::Result<()> {
    match crate::writes::merge_patch_status(api, name, &json!({"status": {"conditions": conds}}))
        .await
    {
        // Deleted meanwhile: nothing to report on.
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterSpec;
    use crate::clustersets::api::{
        ClusterSelector, ManagedClusterSetBindingSpec, ManagedClusterSetSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn cluster(name: &str, labels: &[(&str, &str)]) -> Arc<Cluster> {
        let mut c = Cluster::new(name, ClusterSpec::default());
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        Arc::new(c)
    }

    fn set(name: &str, selector: ClusterSelector) -> Arc<ManagedClusterSet> {
        Arc::new(ManagedClusterSet::new(
            name,
            ManagedClusterSetSpec {
                cluster_selector: selector,
            },
        ))
    }

    fn binding(ns: &str, name: &str, set: &str) -> ManagedClusterSetBinding {
        let mut b = ManagedClusterSetBinding::new(
            name,
            ManagedClusterSetBindingSpec {
                cluster_set: set.into(),
            },
        );
        b.metadata.namespace = Some(ns.into());
        b
    }

    fn fleet() -> Vec<Arc<Cluster>> {
        vec![
            cluster("m1", &[(CLUSTER_SET_LABEL, "set-a"), ("env", "prod")]),
            cluster("m2", &[(CLUSTER_SET_LABEL, "set-a")]),
            cluster("m3", &[(CLUSTER_SET_LABEL, "set-b"), ("env", "prod")]),
        ]
    }

    #[test]
    fn exclusive_label_and_label_selector_sets() {
        let clusters = fleet();
        assert_eq!(
            members(&set("set-a", ClusterSelector::default()), &clusters),
            ["m1", "m2"]
        );
        let prod = ClusterSelector {
            selector_type: Some(LABEL_SELECTOR.into()),
            label_selector: Some(LabelSelector {
                match_labels: Some([("env".to_string(), "prod".to_string())].into()),
                ..Default::default()
            }),
        };
        assert_eq!(members(&set("prod", prod), &clusters), ["m1", "m3"]);
        // A LabelSelector set without a selector selects nothing.
        let none = ClusterSelector {
            selector_type: Some(LABEL_SELECTOR.into()),
            label_selector: None,
        };
        assert!(members(&set("x", none), &clusters).is_empty());
    }

    #[test]
    fn a_namespace_is_restricted_to_its_bound_sets_only_when_it_has_bindings() {
        let clusters = fleet();
        let sets = vec![
            set("set-a", ClusterSelector::default()),
            set("set-b", ClusterSelector::default()),
        ];
        let bindings = [
            binding("tenant-a", "set-a", "set-a"),
            binding("tenant-b", "set-b", "set-b"),
            binding("tenant-c", "wrong-name", "set-a"),
        ];
        let a = restriction("tenant-a", &bindings, &sets, &clusters).unwrap();
        assert_eq!(a.bound, ["set-a"]);
        assert!(a.allows("m1") && a.allows("m2") && !a.allows("m3"));
        assert_eq!(
            a.rejection(),
            "cluster(s) are not in a ManagedClusterSet bound to namespace \"tenant-a\" (bound: set-a)"
        );
        let b = restriction("tenant-b", &bindings, &sets, &clusters).unwrap();
        assert_eq!(b.clusters.iter().collect::<Vec<_>>(), ["m3"]);
        // No binding: unrestricted.
        assert!(restriction("default", &bindings, &sets, &clusters).is_none());
        // A binding not named after its set binds nothing, but restricts.
        let c = restriction("tenant-c", &bindings, &sets, &clusters).unwrap();
        assert!(c.clusters.is_empty() && c.bound.is_empty());
        // A bound set that does not exist (yet) contributes no cluster.
        let d = [binding("tenant-d", "set-z", "set-z")];
        let d = restriction("tenant-d", &d, &sets, &clusters).unwrap();
        assert_eq!(d.bound, ["set-z"]);
        assert!(d.clusters.is_empty());
    }
}
