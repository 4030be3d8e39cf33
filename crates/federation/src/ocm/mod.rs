//! Open Cluster Management's API on the hub, over Karmada's Clusters.
//! For now the cluster sets ([`api`], [`clusterset`]): which clusters
//! each namespace (tenant) may place on. ManagedCluster, Placement and
//! ManifestWork are to grow here beside them.

pub mod admission;
pub mod api;
pub mod clusterset;
