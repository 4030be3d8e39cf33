//! Open Cluster Management's API on the hub, over Karmada's Clusters:
//! ManagedCluster and ManifestWork ([`work`]) over Karmada's Clusters and
//! Works; Placement and its PlacementDecisions ([`placement`]) choosing
//! ManagedClusters within the namespace's bound cluster sets
//! ([`crate::clustersets`], which are also the hub's tenancy); and
//! ManifestWorkReplicaSet ([`replicaset`]) fanning a ManifestWork out to
//! a Placement's clusters, so every OCM workload takes the one pipeline.

pub mod placement;
pub mod replicaset;
pub mod work;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Frontend, Informers, Row, condition, text};
use crate::context::Ctx;

/// OCM's API as a front end: always on, as its cluster sets are.
pub struct Ocm;

impl Frontend for Ocm {
    fn name(&self) -> &'static str {
        "ocm"
    }

    fn api(&self) -> &'static str {
        "Open Cluster Management"
    }

    fn groups(&self) -> &'static [&'static str] {
        &[work::CLUSTER_GROUP, work::WORK_GROUP]
    }

    fn listed(&self) -> &'static [&'static str] {
        &[work::WORK_GROUP]
    }

    fn optional(&self) -> bool {
        false
    }

    fn crds(&self) -> Vec<Value> {
        let mut crds = work::crds();
        crds.extend(placement::crds());
        crds.extend(replicaset::crds());
        crds
    }

    fn controllers(&self, ctx: &Ctx, informers: &Informers) -> Vec<BoxFuture<'static, ()>> {
        vec![
            // ManagedClusters after the Clusters, ManifestWorks into Works.
            Box::pin(work::run(ctx.clone())),
            // Placements into PlacementDecisions.
            Box::pin(placement::run(
                ctx.clone(),
                informers.cluster_sets.clone(),
                informers.set_bindings.clone(),
            )),
            // ManifestWorkReplicaSets into ManifestWorks in the decided
            // clusters' namespaces.
            Box::pin(replicaset::run(ctx.clone())),
        ]
    }

    /// A ManifestWork goes to its namespace's cluster, with its `Applied`
    /// and `Available` conditions there.
    fn placements(&self, object: &Value, _: &[(String, String)]) -> Vec<Row> {
        if object["kind"] != "ManifestWork" {
            return Vec::new();
        }
        let state = |t: &str| format!("{t}={}", condition(object, t).unwrap_or("Unknown"));
        vec![Row {
            cluster: text(object, "/metadata/namespace"),
            status: format!("{} {}", state("Applied"), state("Available")),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_manifest_work_goes_to_its_namespaces_cluster() {
        let mw = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"namespace": "c1"},
            "status": {"conditions": [{"type": "Applied", "status": "True"}]}});
        assert_eq!(Ocm.placements(&mw, &[])[0].cluster, "c1");
        assert_eq!(
            Ocm.placements(&mw, &[])[0].status,
            "Applied=True Available=Unknown"
        );
        let set = json!({"apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet", "metadata": {"namespace": "c1"}});
        assert!(Ocm.placements(&set, &[]).is_empty());
    }
}
