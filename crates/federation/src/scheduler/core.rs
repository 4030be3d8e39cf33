//! One scheduling decision, without I/O: filter the clusters, select among
//! them by spread constraints, assign replicas. Karmada's generic
//! scheduler, step by step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::assign;
use super::tenancy::Limits;
use crate::api::{BindingSpec, Cluster, ClusterAffinity, Placement, TargetCluster};
use crate::names::fnv32a;
use crate::selector::cluster_matches;

/// Why a binding could not be scheduled: the Scheduled condition's reason
/// and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub clusters: Vec<TargetCluster>,
    /// The clusterAffinities term in use, if the placement has terms.
    pub affinity_name: Option<String>,
}

/// The first of `tolerations` that tolerates `taint`, as Kubernetes
/// matches them.
pub fn toleration_for<'t>(tolerations: &'t [Toleration], taint: &Taint) -> Option<&'t Toleration> {
    tolerations.iter().find(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_ok =
            t.key.as_deref().is_none_or(|k| k.is_empty()) || t.key.as_deref() == Some(&taint.key);
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            _ => {
                t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
            }
        };
        effect_ok && key_ok && value_ok
    })
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    toleration_for(tolerations, taint).is_some()
}

fn has_api(cluster: &Cluster, api_version: &str, kind: &str) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.api_enablements
            .iter()
            .any(|e| e.group_version == api_version && e.resources.iter().any(|r| r.kind == kind))
    })
}

fn spread_field<'a>(cluster: &'a Cluster, field: &str) -> Option<&'a str> {
    match field {
        "region" => cluster.spec.region.as_deref(),
        "provider" => cluster.spec.provider.as_deref(),
        "zone" => cluster.spec.all_zones().first().copied(),
        _ => cluster.metadata.name.as_deref(),
    }
}

/// Why the filter rejects `cluster` for one affinity term, in Karmada's
/// words (plural, as its counts read: "1 cluster(s) did not ..."), or
/// None when it fits. A cluster the binding is already on (`targeted`)
/// keeps it despite a new taint or a missing API, but not outside its
/// tenant's cluster sets or quota (`limits`).
pub fn rejection(
    spec: &BindingSpec,
    placement: &Placement,
    affinity: &ClusterAffinity,
    c: &Cluster,
    targeted: bool,
    limits: &Limits,
) -> Option<String> {
    let name = c.metadata.name.clone().unwrap_or_default();
    if c.metadata.deletion_timestamp.is_some() {
        Some("cluster(s) were being deleted".to_string())
    } else if let Some(why) = limits.rejection(spec, placement, &name) {
        Some(why)
    } else if spec.evicting(&name).is_some() {
        // Karmada's ClusterEviction filter: a cluster being left is not
        // chosen again while its eviction task lasts.
        Some("cluster(s) were in the process of eviction".to_string())
    } else if !cluster_matches(affinity, c) {
        Some("cluster(s) did not match the placement cluster affinity constraint".to_string())
    } else if let Some(t) = c.spec.taints.iter().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute")
            && !tolerates(&placement.cluster_tolerations, t)
    }) && !targeted
    {
        Some(format!(
            "cluster(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or("")
        ))
    } else if !targeted && !has_api(c, &spec.resource.api_version, &spec.resource.kind) {
        Some("cluster(s) did not have the API resource".to_string())
    } else {
        placement
            .spread_constraints
            .iter()
            .find_map(|s| {
                let f = s.spread_by_field.as_deref().unwrap_or("cluster");
                (s.spread_by_label.is_none() && spread_field(c, f).is_none()).then_some(f)
            })
            .map(|missing| format!("cluster(s) did not have the spread field {missing}"))
    }
}

/// The affinity term a binding's placement is scheduled under:
/// `observing` among its clusterAffinities, or the first, or its
/// clusterAffinity.
pub fn affinity_in_use(placement: &Placement, observing: Option<&str>) -> ClusterAffinity {
    if placement.cluster_affinities.is_empty() {
        return placement.cluster_affinity.clone().unwrap_or_default();
    }
    observing
        .and_then(|o| {
            placement
                .cluster_affinities
                .iter()
                .find(|t| t.affinity_name == o)
        })
        .or(placement.cluster_affinities.first())
        .map(|t| t.affinity.clone())
        .unwrap_or_default()
}

/// Filters clusters for one affinity term; the survivors, or why none.
fn filter<'a>(
    spec: &BindingSpec,
    placement: &Placement,
    affinity: &ClusterAffinity,
    clusters: &'a [Arc<Cluster>],
    previous: &BTreeSet<String>,
    limits: &Limits,
) -> Result<Vec<&'a Cluster>, Failure> {
    let mut rejected: BTreeMap<String, usize> = BTreeMap::new();
    let mut fit = Vec::new();
    for c in clusters {
        let targeted = c
            .metadata
            .name
            .as_ref()
            .is_some_and(|n| previous.contains(n));
        match rejection(spec, placement, affinity, c, targeted, limits) {
            Some(w) => *rejected.entry(w).or_default() += 1,
            None => fit.push(&**c),
        }
    }
    if fit.is_empty() {
        let reasons: Vec<String> = rejected.iter().map(|(w, n)| format!("{n} {w}")).collect();
        return Err(Failure {
            reason: "NoClusterFit",
            message: format!(
                "0/{} clusters are available: {}.",
                clusters.len(),
                if reasons.is_empty() {
                    "no cluster is joined".to_string()
                } else {
                    reasons.join(", ")
                }
            ),
        });
    }
    Ok(fit)
}

struct Candidate<'a> {
    cluster: &'a Cluster,
    name: String,
    score: i32,
    available: i64,
}

fn by_preference(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.score
        .cmp(&a.score)
        .then(b.available.cmp(&a.available))
        .then(a.name.cmp(&b.name))
}

/// Spread constraints by cluster and region pick among the candidates;
/// zone and provider constraints only filtered.
fn select<'a>(
    placement: &Placement,
    mut candidates: Vec<Candidate<'a>>,
    needed: Option<i64>,
) -> Result<Vec<Candidate<'a>>, Failure> {
    let constraint = |field: &str| {
        placement.spread_constraints.iter().find(|s| {
            s.spread_by_label.is_none()
                && s.spread_by_field.as_deref().unwrap_or("cluster") == field
        })
    };
    let by_cluster = constraint("cluster");
    candidates.sort_by(by_preference);
    let groups_failure = |field: &str, min: i32, have: usize| Failure {
        reason: "NoClusterFit",
        message: format!(
            "the number of feasible {field}s ({have}) is less than spreadConstraint.minGroups ({min})"
        ),
    };
    if let Some(region) = constraint("region") {
        let mut regions: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
        for c in &candidates {
            let r = spread_field(c.cluster, "region").unwrap_or("");
            let e = regions.entry(r).or_default();
            e.0 = e.0.max(c.score);
            e.1 += c.available;
        }
        let mut order: Vec<(&str, (i32, i64))> = regions.into_iter().collect();
        order.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(b.1.1.cmp(&a.1.1)).then(a.0.cmp(b.0)));
        let min = region.min_groups.unwrap_or(1);
        if (order.len() as i32) < min {
            return Err(groups_failure("region", min, order.len()));
        }
        let max = region.max_groups.map_or(order.len(), |m| m.max(1) as usize);
        let chosen: Vec<&str> = order.iter().take(max).map(|(r, _)| *r).collect();
        // The best cluster of each chosen region, then more from those
        // regions while a cluster constraint asks for more.
        let (mut picked, mut rest): (Vec<Candidate>, Vec<Candidate>) = (Vec::new(), Vec::new());
        for c in candidates {
            let r = spread_field(c.cluster, "region").unwrap_or("");
            if !chosen.contains(&r) {
                continue;
            }
            if picked
                .iter()
                .any(|p| spread_field(p.cluster, "region") == Some(r))
            {
                rest.push(c);
            } else {
                picked.push(c);
            }
        }
        if let Some(cluster) = by_cluster {
            let max = cluster.max_groups.map_or(usize::MAX, |m| m.max(1) as usize);
            picked.extend(rest.into_iter().take(max.saturating_sub(picked.len())));
            let min = cluster.min_groups.unwrap_or(1);
            if (picked.len() as i32) < min {
                return Err(groups_failure("cluster", min, picked.len()));
            }
        }
        picked.sort_by(by_preference);
        return Ok(picked);
    }
    if let Some(cluster) = by_cluster {
        let min = cluster.min_groups.unwrap_or(1);
        if (candidates.len() as i32) < min {
            return Err(groups_failure("cluster", min, candidates.len()));
        }
        if let Some(max) = cluster.max_groups {
            let max = max.max(1) as usize;
            let capacity = |cs: &[Candidate]| cs.iter().take(max).map(|c| c.available).sum::<i64>();
            // Too little room in the preferred clusters: the roomiest.
            if needed.is_some_and(|n| capacity(&candidates) < n) {
                candidates.sort_by(|a, b| b.available.cmp(&a.available).then(a.name.cmp(&b.name)));
            }
            candidates.truncate(max);
        }
    }
    Ok(candidates)
}

/// Schedules a binding against the joined clusters. `observing` is the
/// clusterAffinities term currently in use: terms before it are not
/// retried (Karmada does not move back by itself). `fresh` (a
/// WorkloadRebalancer asked) divides from scratch, from the first term,
/// as if nothing were placed yet. `limits` are the tenant's (none for a
/// cluster-scoped binding or a namespace without sets or quotas).
pub fn schedule(
    spec: &BindingSpec,
    uid: &str,
    clusters: &[Arc<Cluster>],
    observing: Option<&str>,
    fresh: bool,
    limits: &Limits,
) -> Result<Decision, Failure> {
    let placement = spec.placement.clone().unwrap_or_default();
    let observing = observing.filter(|_| !fresh);
    // Clusters being evicted hold no replicas the division keeps.
    let previous: BTreeMap<String, i32> = spec
        .clusters
        .iter()
        .filter(|t| !fresh && spec.evicting(&t.name).is_none())
        .map(|t| (t.name.clone(), t.replicas.unwrap_or(0)))
        .collect();
    let previous_names: BTreeSet<String> = previous.keys().cloned().collect();
    let terms: Vec<(Option<String>, ClusterAffinity)> = if placement.cluster_affinities.is_empty() {
        vec![(None, placement.cluster_affinity.clone().unwrap_or_default())]
    } else {
        let start = observing
            .and_then(|o| {
                placement
                    .cluster_affinities
                    .iter()
                    .position(|t| t.affinity_name == o)
            })
            .unwrap_or(0);
        placement.cluster_affinities[start..]
            .iter()
            .map(|t| (Some(t.affinity_name.clone()), t.affinity.clone()))
            .collect()
    };
    let mut failure = Failure {
        reason: "NoClusterFit",
        message: "no cluster affinity term".into(),
    };
    for (name, affinity) in terms {
        // A move to another term starts from nothing: the previous
        // assignment belongs to the term that failed.
        let term_previous = if name.as_deref() == observing || observing.is_none() {
            previous.clone()
        } else {
            BTreeMap::new()
        };
        match decide(
            spec,
            uid,
            &placement,
            &affinity,
            clusters,
            (&previous_names, &term_previous),
            limits,
        ) {
            Ok(clusters) => {
                return Ok(Decision {
                    clusters,
                    affinity_name: name,
                });
            }
            Err(f) => failure = f,
        }
    }
    Err(failure)
}

fn decide(
    spec: &BindingSpec,
    uid: &str,
    placement: &Placement,
    affinity: &ClusterAffinity,
    clusters: &[Arc<Cluster>],
    // The clusters targeted, and the replicas kept of this term's.
    (previous_names, previous): (&BTreeSet<String>, &BTreeMap<String, i32>),
    limits: &Limits,
) -> Result<Vec<TargetCluster>, Failure> {
    let fit = filter(spec, placement, affinity, clusters, previous_names, limits)?;
    let total = spec.replicas.unwrap_or(0);
    let candidates: Vec<Candidate> = fit
        .into_iter()
        .map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let available = assign::available_replicas(c, spec.replica_requirements.as_ref())
                .unwrap_or(i64::from(total));
            // A static quota assignment caps what the cluster is given.
            let available = limits.cap(&name, available);
            Candidate {
                score: if previous.contains_key(&name) { 100 } else { 0 },
                cluster: c,
                name,
                available,
            }
        })
        .collect();
    let rs = placement.replica_scheduling.as_ref();
    let divided = spec.replicas.is_some()
        && rs.is_some_and(|r| {
            r.replica_scheduling_type.as_deref().unwrap_or("Divided") == "Divided"
        });
    let selected = select(placement, candidates, divided.then_some(i64::from(total)))?;
    if !divided {
        return Ok(selected
            .iter()
            .map(|c| TargetCluster {
                name: c.name.clone(),
                replicas: spec.replicas.filter(|r| *r > 0),
            })
            .collect());
    }
    let rs = rs.cloned().unwrap_or_default();
    let ascending = fnv32a(uid.as_bytes()) & 1 == 0;
    let names: BTreeSet<&str> = selected.iter().map(|c| c.name.as_str()).collect();
    let kept: BTreeMap<String, i32> = previous
        .iter()
        .filter(|(n, _)| names.contains(n.as_str()))
        .map(|(n, r)| (n.clone(), *r))
        .collect();
    let available: Vec<(String, i64)> = selected
        .iter()
        .map(|c| (c.name.clone(), c.available))
        .collect();
    let unschedulable = |have: i64| Failure {
        reason: "Unschedulable",
        message: format!("the clusters can hold {have} more replicas, {total} are needed"),
    };
    let assignment = if rs.replica_division_preference.as_deref() == Some("Aggregated") {
        let have =
            available.iter().map(|(_, a)| a).sum::<i64>() + i64::from(kept.values().sum::<i32>());
        assign::aggregate(total, &available, &kept).ok_or_else(|| unschedulable(have))?
    } else {
        let wp = rs.weight_preference.clone().unwrap_or_default();
        if wp.dynamic_weight.as_deref() == Some("AvailableReplicas") {
            let assigned: i32 = kept.values().sum();
            let have: i64 = available.iter().map(|(_, a)| a).sum();
            if total > assigned && have < i64::from(total - assigned) {
                return Err(unschedulable(have));
            }
            assign::divide_steady(total, &available, &kept, ascending)
        } else {
            // Static weights: the highest matching rule per cluster; none
            // matching any cluster means equal weights.
            let mut weights: Vec<(String, i64)> = selected
                .iter()
                .filter_map(|c| {
                    let w = wp
                        .static_weight_list
                        .iter()
                        .filter(|w| cluster_matches(&w.target_cluster, c.cluster))
                        .map(|w| w.weight)
                        .max()?;
                    Some((c.name.clone(), w))
                })
                .collect();
            if weights.is_empty() {
                weights = selected.iter().map(|c| (c.name.clone(), 1)).collect();
            }
            assign::webster(total, &weights, ascending)
        }
    };
    if total == 0 {
        // Scaled to zero: the clusters keep the workload at 0 replicas
        // rather than losing it.
        let keep: Vec<&Candidate> = if kept.is_empty() {
            selected.iter().collect()
        } else {
            selected
                .iter()
                .filter(|c| kept.contains_key(&c.name))
                .collect()
        };
        return Ok(keep
            .into_iter()
            .map(|c| TargetCluster {
                name: c.name.clone(),
                replicas: Some(0),
            })
            .collect());
    }
    Ok(assignment
        .into_iter()
        .filter(|(_, r)| *r > 0)
        .map(|(name, r)| TargetCluster {
            name,
            replicas: Some(r),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ApiEnablement, ApiEnablementResource, ClusterSpec, ClusterStatus, ObjectReference,
        ReplicaScheduling, SpreadConstraint, StaticWeight, WeightPreference,
    };

    fn cluster(name: &str, region: &str) -> Arc<Cluster> {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                sync_mode: "Push".into(),
                region: Some(region.into()),
                ..Default::default()
            },
        );
        c.status = Some(ClusterStatus {
            api_enablements: vec![ApiEnablement {
                group_version: "apps/v1".into(),
                resources: vec![ApiEnablementResource {
                    name: "deployments".into(),
                    kind: "Deployment".into(),
                }],
            }],
            ..Default::default()
        });
        Arc::new(c)
    }

    fn binding(replicas: i32, placement: Placement) -> BindingSpec {
        BindingSpec {
            resource: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                name: "nginx".into(),
                ..Default::default()
            },
            replicas: Some(replicas),
            placement: Some(placement),
            ..Default::default()
        }
    }

    fn names(affinity: &[&str]) -> ClusterAffinity {
        ClusterAffinity {
            cluster_names: affinity.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn weighted(list: &[(&str, i64)]) -> Option<ReplicaScheduling> {
        Some(ReplicaScheduling {
            replica_scheduling_type: Some("Divided".into()),
            replica_division_preference: Some("Weighted".into()),
            weight_preference: Some(WeightPreference {
                static_weight_list: list
                    .iter()
                    .map(|(n, w)| StaticWeight {
                        target_cluster: names(&[n]),
                        weight: *w,
                    })
                    .collect(),
                dynamic_weight: None,
            }),
        })
    }

    fn result(d: &Decision) -> Vec<(String, Option<i32>)> {
        d.clusters
            .iter()
            .map(|t| (t.name.clone(), t.replicas))
            .collect()
    }

    #[test]
    fn classic_weighted_one_to_two() {
        let clusters = [
            cluster("member1", "us"),
            cluster("member2", "eu"),
            cluster("member3", "ap"),
        ];
        let p = Placement {
            cluster_affinity: Some(names(&["member1", "member2"])),
            replica_scheduling: weighted(&[("member1", 1), ("member2", 2)]),
            ..Default::default()
        };
        let d = schedule(
            &binding(3, p),
            "uid",
            &clusters,
            None,
            false,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            result(&d),
            [("member1".into(), Some(1)), ("member2".into(), Some(2))]
        );
    }

    #[test]
    fn duplicated_by_default_and_untolerated_taints_filter() {
        let mut tainted = (*cluster("member2", "eu")).clone();
        tainted.spec.taints.push(Taint {
            key: "cluster.karmada.io/not-ready".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        let clusters = [cluster("member1", "us"), Arc::new(tainted)];
        let d = schedule(
            &binding(2, Placement::default()),
            "u",
            &clusters,
            None,
            false,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(result(&d), [("member1".into(), Some(2))]);
        // Already there: a taint does not evict by itself.
        let mut b = binding(2, Placement::default());
        b.clusters = vec![TargetCluster {
            name: "member2".into(),
            replicas: Some(2),
        }];
        let d = schedule(&b, "u", &clusters, None, false, &Limits::default()).unwrap();
        assert_eq!(d.clusters.len(), 2);
    }

    #[test]
    fn spread_by_region_takes_one_cluster_per_region() {
        let clusters = [
            cluster("a1", "us"),
            cluster("a2", "us"),
            cluster("b1", "eu"),
        ];
        let p = Placement {
            spread_constraints: vec![SpreadConstraint {
                spread_by_field: Some("region".into()),
                max_groups: Some(2),
                min_groups: Some(2),
                ..Default::default()
            }],
            ..Default::default()
        };
        let d = schedule(
            &binding(1, p.clone()),
            "u",
            &clusters,
            None,
            false,
            &Limits::default(),
        )
        .unwrap();
        let picked: Vec<String> = d.clusters.iter().map(|t| t.name.clone()).collect();
        assert_eq!(picked.len(), 2);
        assert!(picked.contains(&"b1".to_string()));
        let err = schedule(
            &binding(1, p),
            "u",
            &clusters[..2],
            None,
            false,
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(err.reason, "NoClusterFit");
    }

    #[test]
    fn nothing_fits_names_the_reasons() {
        let clusters = [cluster("member1", "us")];
        let p = Placement {
            cluster_affinity: Some(names(&["nope"])),
            ..Default::default()
        };
        let err = schedule(
            &binding(1, p),
            "u",
            &clusters,
            None,
            false,
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(err.reason, "NoClusterFit");
        assert!(
            err.message.contains("1 cluster(s) did not match"),
            "{}",
            err.message
        );
    }

    fn only(namespace: &str, bound: &[&str], clusters: &[&str]) -> Limits {
        Limits {
            restriction: Some(crate::clustersets::Restriction {
                namespace: namespace.into(),
                bound: bound.iter().map(|s| s.to_string()).collect(),
                clusters: clusters.iter().map(|s| s.to_string()).collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_tenant_places_only_on_its_bound_sets_even_where_it_already_is() {
        let clusters = [
            cluster("m1", "us"),
            cluster("m2", "eu"),
            cluster("m3", "ap"),
        ];
        let limits = only("tenant-a", &["set-a"], &["m1", "m2"]);
        let d = schedule(
            &binding(1, Placement::default()),
            "u",
            &clusters,
            None,
            false,
            &limits,
        )
        .unwrap();
        assert_eq!(result(&d), [("m1".into(), Some(1)), ("m2".into(), Some(1))]);
        // A binding on m3 leaves it once the namespace is bound elsewhere.
        let mut b = binding(1, Placement::default());
        b.clusters = vec![TargetCluster {
            name: "m3".into(),
            replicas: Some(1),
        }];
        let d = schedule(&b, "u", &clusters, None, false, &limits).unwrap();
        assert!(d.clusters.iter().all(|t| t.name != "m3"));
        let none = only("tenant-a", &["set-a"], &[]);
        let err = schedule(
            &binding(1, Placement::default()),
            "u",
            &clusters,
            None,
            false,
            &none,
        )
        .unwrap_err();
        assert_eq!(err.reason, "NoClusterFit");
        assert_eq!(
            err.message,
            "0/3 clusters are available: 3 cluster(s) are not in a ManagedClusterSet bound to namespace \"tenant-a\" (bound: set-a)."
        );
    }

    #[test]
    fn static_quota_room_filters_and_caps_clusters() {
        let clusters = [cluster("m1", "us"), cluster("m2", "eu")];
        let limits = Limits {
            room: [
                ("m1".to_string(), (1, "t/q".to_string())),
                ("m2".to_string(), (0, "t/q".to_string())),
            ]
            .into(),
            ..Default::default()
        };
        // Duplicated: a cluster needs room for every replica.
        let err = schedule(
            &binding(2, Placement::default()),
            "u",
            &clusters,
            None,
            false,
            &limits,
        )
        .unwrap_err();
        assert!(
            err.message.contains(
                "2 cluster(s) had no room left in FederatedResourceQuota t/q's static assignment"
            ),
            "{}",
            err.message
        );
        let d = schedule(
            &binding(1, Placement::default()),
            "u",
            &clusters,
            None,
            false,
            &limits,
        )
        .unwrap();
        assert_eq!(result(&d), [("m1".into(), Some(1))]);
        // Divided by available replicas: m1 takes what its room allows.
        let p = Placement {
            replica_scheduling: Some(ReplicaScheduling {
                replica_scheduling_type: Some("Divided".into()),
                replica_division_preference: Some("Weighted".into()),
                weight_preference: Some(WeightPreference {
                    static_weight_list: Vec::new(),
                    dynamic_weight: Some("AvailableReplicas".into()),
                }),
            }),
            ..Default::default()
        };
        let err =
            schedule(&binding(3, p.clone()), "u", &clusters, None, false, &limits).unwrap_err();
        assert_eq!(err.reason, "Unschedulable");
        let d = schedule(&binding(1, p), "u", &clusters, None, false, &limits).unwrap();
        assert_eq!(result(&d), [("m1".into(), Some(1))]);
    }
}
