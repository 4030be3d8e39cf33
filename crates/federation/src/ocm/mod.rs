//! Open Cluster Management's API on the hub, over Karmada's Clusters.
//! The cluster sets ([`api`], [`clusterset`]): which clusters each
//! namespace (tenant) may place on; ManagedCluster and ManifestWork
//! ([`work`]) over Karmada's Clusters and Works; Placement and its
//! PlacementDecisions ([`placement`]) choosing ManagedClusters; and
//! ManifestWorkReplicaSet ([`replicaset`]) fanning a ManifestWork out to
//! a Placement's clusters, so every OCM workload takes the one pipeline.

pub mod admission;
pub mod api;
pub mod clusterset;
pub mod placement;
pub mod replicaset;
pub mod work;
