//! Tenants on a shared fleet, as the scheduler enforces them for
//! namespaced bindings (ClusterResourceBindings are the admin's and are
//! not restricted):
//!
//! - a namespace with ManagedClusterSetBindings places only on the
//!   clusters of its bound sets (a filter, like the others);
//! - its FederatedResourceQuotas' static assignments bound what each
//!   assigned cluster can take (a filter, and a cap on the replicas a
//!   cluster is given);
//! - their `spec.overall` bounds what the namespace's scheduled bindings
//!   take together: a decision that would go past it is refused with
//!   Karmada's `QuotaExceeded`.
//!
//! Usage comes from the bindings cache, overlaid with what this
//! scheduler decided and the cache may not show yet, and is read and
//! charged under one lock: two bindings decided at once cannot both take
//! the last of a quota.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use parking_lot::Mutex;

use super::core::{self, Decision, Failure};
use crate::api::{Binding, BindingSpec, Cluster, Placement};
use crate::clustersets::api::{ManagedClusterSet, ManagedClusterSetBinding};
use crate::clustersets::{self as clusterset, Restriction};
use crate::packed::PackedStore;
use crate::quota::api::{FederatedResourceQuota, REASON_QUOTA_EXCEEDED};
use crate::quota::usage::{self, Charge};

/// What tenancy allows one binding, for the filter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// The clusters of the namespace's bound sets, if it has bindings.
    pub restriction: Option<Restriction>,
    /// Replicas of this binding each statically assigned cluster has
    /// room for, and the quota that decides it.
    pub room: BTreeMap<String, (i64, String)>,
}

/// Whether the binding's replicas are divided among clusters (each
/// cluster then needs room for one at least) rather than duplicated.
pub fn divided(spec: &BindingSpec, placement: &Placement) -> bool {
    spec.replicas.is_some()
        && placement
            .replica_scheduling
            .as_ref()
            .is_some_and(|r| r.replica_scheduling_type.as_deref().unwrap_or("Divided") == "Divided")
}

impl Limits {
    /// Why tenancy filters `cluster` out, in the scheduler's plural.
    pub fn rejection(
        &self,
        spec: &BindingSpec,
        placement: &Placement,
        cluster: &str,
    ) -> Option<String> {
        if let Some(r) = &self.restriction
            && !r.allows(cluster)
        {
            return Some(r.rejection());
        }
        let (room, quota) = self.room.get(cluster)?;
        let needed = if divided(spec, placement) {
            1
        } else {
            i64::from(spec.replicas.unwrap_or(0))
        };
        (spec.replicas.unwrap_or(0) > 0 && *room < needed).then(|| {
            format!(
                "cluster(s) had no room left in FederatedResourceQuota {quota}'s static assignment"
            )
        })
    }

    /// The replicas `cluster` may take under the static assignments.
    pub fn cap(&self, cluster: &str, available: i64) -> i64 {
        self.room
            .get(cluster)
            .map_or(available, |(room, _)| available.min(*room))
    }
}

/// What each binding was last charged by this scheduler, with the
/// generation it was decided at: the cache's copy is used once it is
/// newer (it then holds this decision, or someone's later change).
#[derive(Default)]
pub struct Charges(Mutex<HashMap<String, (Option<i64>, Charge)>>);

impl Charges {
    pub fn forget(&self, uid: &str) {
        self.0.lock().remove(uid);
    }
}

/// The caches tenancy is decided from.
#[derive(Clone)]
pub struct Tenancy {
    pub sets: Store<ManagedClusterSet>,
    pub set_bindings: Store<ManagedClusterSetBinding>,
    pub quotas: Store<FederatedResourceQuota>,
}

/// A decision under tenancy, and whether a quota holds the namespace (a
/// refusal may then be lifted by another binding's change).
pub struct Outcome {
    pub decision: Result<Decision, Failure>,
    pub under_quota: bool,
}

impl Tenancy {
    /// The namespace's restriction to its bound sets, if any.
    pub fn restriction(&self, namespace: &str, clusters: &[Arc<Cluster>]) -> Option<Restriction> {
        let bindings = self.set_bindings.state();
        clusterset::restriction(
            namespace,
            bindings.iter().map(|b| &**b),
            &self.sets.state(),
            clusters,
        )
    }

    /// Schedules `binding` (in `namespace`) within its namespace's sets
    /// and quotas.
    pub fn schedule(
        &self,
        namespace: &str,
        binding: &Binding,
        clusters: &[Arc<Cluster>],
        bindings: &PackedStore<Binding>,
        (observing, fresh): (Option<&str>, bool),
        charges: &Charges,
    ) -> Outcome {
        let spec = &binding.spec;
        let uid = binding.metadata.uid.clone().unwrap_or_default();
        let restriction = self.restriction(namespace, clusters);
        let quotas: Vec<Arc<FederatedResourceQuota>> = self
            .quotas
            .state()
            .into_iter()
            .filter(|q| {
                q.namespace().as_deref() == Some(namespace)
                    && q.metadata.deletion_timestamp.is_none()
            })
            .collect();
        if quotas.is_empty() {
            let limits = Limits {
                restriction,
                room: BTreeMap::new(),
            };
            return Outcome {
                decision: core::schedule(spec, &uid, clusters, observing, fresh, &limits),
                under_quota: false,
            };
        }
        let req = spec.replica_requirements.as_ref();
        let mut charged = charges.0.lock();
        let others: Vec<Charge> = bindings
            .in_namespace(namespace)
            .iter()
            .filter(|b| b.metadata.uid.as_deref() != Some(uid.as_str()))
            .map(
                |b| match charged.get(b.metadata.uid.as_deref().unwrap_or_default()) {
                    Some((generation, c)) if b.metadata.generation <= *generation => c.clone(),
                    _ => Charge::of(&b.spec.clusters, b.spec.replica_requirements.as_ref()),
                },
            )
            .collect();
        let others = usage::total(&others);
        let refs: Vec<&FederatedResourceQuota> = quotas.iter().map(|q| &**q).collect();
        let limits = Limits {
            restriction,
            room: usage::cluster_room(&refs, &others, req),
        };
        let old = Charge::of(&spec.clusters, req);
        let decision =
            core::schedule(spec, &uid, clusters, observing, fresh, &limits).and_then(|d| {
                let new = Charge::of(&d.clusters, req);
                for q in &refs {
                    usage::check_overall(q, &others, &old, &new).map_err(|e| Failure {
                        reason: REASON_QUOTA_EXCEEDED,
                        message: e.message(),
                    })?;
                }
                Ok((d, new))
            });
        let charge = match &decision {
            Ok((_, new)) => new.clone(),
            // Refused: the binding keeps what it had.
            Err(_) => old,
        };
        charged.insert(uid, (binding.metadata.generation, charge));
        Outcome {
            decision: decision.map(|(d, _)| d),
            under_quota: true,
        }
    }
}
