//! Open Cluster Management's API on the hub, over Karmada's Clusters.
//! The cluster sets ([`api`], [`clusterset`]): which clusters each
//! namespace (tenant) may place on; ManagedCluster and ManifestWork
//! ([`work`]) over Karmada's Clusters and Works. Placement is to grow
//! here beside them.

pub mod admission;
pub mod api;
pub mod clusterset;
pub mod work;
