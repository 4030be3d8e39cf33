//! Quota arithmetic, without I/O. A binding takes, of each resource,
//! its scheduled replicas (the sum of `spec.clusters[].replicas`) times
//! `replicaRequirements.resourceRequest`, as Karmada's
//! `CalculateResourceUsage` counts it; `pods` counts the replicas.
//! Amounts are millicores for CPU and base units otherwise.

use std::collections::BTreeMap;

use flotilla_core::quantity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::api::{FederatedResourceQuota, ResourceList};
use crate::api::{ReplicaRequirements, TargetCluster};

/// The request a quota key measures: `requests.cpu` is `cpu`.
pub fn requested_resource(key: &str) -> &str {
    key.strip_prefix("requests.").unwrap_or(key)
}

fn is_cpu(resource: &str) -> bool {
    requested_resource(resource) == "cpu"
}

/// A quantity of `resource` as a number (millicores for CPU).
pub fn amount(resource: &str, q: &Quantity) -> i64 {
    if is_cpu(resource) {
        quantity::millicores(&q.0)
    } else {
        quantity::units(&q.0)
    }
    .unwrap_or(0)
}

/// An amount of `resource` as the API writes quantities.
pub fn show(resource: &str, v: i64) -> String {
    let r = requested_resource(resource);
    if is_cpu(r) {
        quantity::format_millicores(v)
    } else if r == "memory" || r.contains("storage") {
        quantity::format_bytes(v)
    } else {
        v.to_string()
    }
}

pub type Amounts = BTreeMap<String, i64>;

/// What one binding takes: of each resource over the fleet, and on
/// each cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Charge {
    pub overall: Amounts,
    pub clusters: BTreeMap<String, Amounts>,
}

impl Charge {
    /// The charge of replicas placed as `clusters`, each needing `req`.
    pub fn of(clusters: &[TargetCluster], req: Option<&ReplicaRequirements>) -> Charge {
        let mut charge = Charge::default();
        for t in clusters {
            let replicas = i64::from(t.replicas.unwrap_or(0).max(0));
            if replicas == 0 {
                continue;
            }
            let on = charge.clusters.entry(t.name.clone()).or_default();
            *on.entry("pods".into()).or_default() += replicas;
            for (r, q) in req.map(|r| &r.resource_request).into_iter().flatten() {
                *on.entry(r.clone()).or_default() += replicas * amount(r, q);
            }
        }
        for on in charge.clusters.values() {
            add(&mut charge.overall, on);
        }
        charge
    }

    /// What this charge takes of a quota key.
    pub fn of_key(&self, key: &str) -> i64 {
        self.overall
            .get(requested_resource(key))
            .copied()
            .unwrap_or(0)
    }
}

pub fn add(to: &mut Amounts, more: &Amounts) {
    for (r, v) in more {
        *to.entry(r.clone()).or_default() += v;
    }
}

/// The sum of charges.
pub fn total<'a>(charges: impl IntoIterator<Item = &'a Charge>) -> Charge {
    let mut sum = Charge::default();
    for c in charges {
        add(&mut sum.overall, &c.overall);
        for (cluster, on) in &c.clusters {
            add(sum.clusters.entry(cluster.clone()).or_default(), on);
        }
    }
    sum
}

/// A binding that would take a namespace past a quota's `spec.overall`.
#[derive(Clone, Debug, PartialEq)]
pub struct Exceeded {
    /// `namespace/name` of the quota.
    pub quota: String,
    pub resource: String,
    /// What this binding would take.
    pub requested: i64,
    /// What the namespace's other bindings take.
    pub used: i64,
    pub limit: i64,
}

impl Exceeded {
    /// Karmada's words (its ResourceBinding webhook's), with the parts.
    pub fn message(&self) -> String {
        let r = &self.resource;
        format!(
            "FederatedResourceQuota({}) exceeded for resource {r}: requested sum {}, limit {} (this binding requests {}, used by others {}).",
            self.quota,
            show(r, self.requested + self.used),
            show(r, self.limit),
            show(r, self.requested),
            show(r, self.used),
        )
    }
}

/// Whether a binding may go from `old` to `new` under `quota`, with the
/// namespace's other bindings taking `others`. As Karmada's enforcement,
/// only what grows is checked: a binding that keeps or lowers its take
/// stays, even under a quota lowered below the namespace's use.
pub fn check_overall(
    quota: &FederatedResourceQuota,
    others: &Charge,
    old: &Charge,
    new: &Charge,
) -> Result<(), Exceeded> {
    for (key, limit) in &quota.spec.overall {
        let (requested, before) = (new.of_key(key), old.of_key(key));
        if requested <= before {
            continue;
        }
        let used = others.of_key(key);
        let limit = amount(key, limit);
        if used + requested > limit {
            return Err(Exceeded {
                quota: format!(
                    "{}/{}",
                    quota.metadata.namespace.as_deref().unwrap_or_default(),
                    quota.metadata.name.as_deref().unwrap_or_default()
                ),
                resource: key.clone(),
                requested,
                used,
                limit,
            });
        }
    }
    Ok(())
}

/// How many replicas, each needing `req`, each cluster with a static
/// assignment still has room for under `quotas` (the least over them),
/// with the other bindings taking `others`. Clusters without an
/// assignment are absent: only the overall limit holds there.
pub fn cluster_room(
    quotas: &[&FederatedResourceQuota],
    others: &Charge,
    req: Option<&ReplicaRequirements>,
) -> BTreeMap<String, (i64, String)> {
    let mut room: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let per_replica = |key: &str| -> i64 {
        match requested_resource(key) {
            "pods" => 1,
            r => req
                .and_then(|q| q.resource_request.get(r))
                .map_or(0, |q| amount(r, q)),
        }
    };
    for q in quotas {
        let name = format!(
            "{}/{}",
            q.metadata.namespace.as_deref().unwrap_or_default(),
            q.metadata.name.as_deref().unwrap_or_default()
        );
        for a in &q.spec.static_assignments {
            let used = others.clusters.get(&a.cluster_name);
            for (key, hard) in &a.hard {
                let need = per_replica(key);
                if need <= 0 {
                    continue;
                }
                let taken = used
                    .and_then(|u| u.get(requested_resource(key)))
                    .copied()
                    .unwrap_or(0);
                let fits = ((amount(key, hard) - taken) / need).max(0);
                let entry = room
                    .entry(a.cluster_name.clone())
                    .or_insert((i64::MAX, name.clone()));
                if fits < entry.0 {
                    *entry = (fits, name.clone());
                }
            }
        }
    }
    room
}

/// `amounts` restricted to the quota's keys, as quantities (Karmada's
/// `overallUsed` holds the keys of `overall` only).
pub fn as_list(keys: &ResourceList, amounts: &Charge) -> ResourceList {
    keys.keys()
        .map(|k| (k.clone(), Quantity(show(k, amounts.of_key(k)))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::api::{FederatedResourceQuotaSpec, StaticClusterAssignment};

    fn req(cpu: &str) -> ReplicaRequirements {
        ReplicaRequirements {
            resource_request: [
                ("cpu".to_string(), Quantity(cpu.into())),
                ("memory".to_string(), Quantity("64Mi".into())),
            ]
            .into(),
            ..Default::default()
        }
    }

    fn on(list: &[(&str, i32)]) -> Vec<TargetCluster> {
        list.iter()
            .map(|(n, r)| TargetCluster {
                name: n.to_string(),
                replicas: Some(*r),
            })
            .collect()
    }

    fn quota(
        overall: &[(&str, &str)],
        assignments: &[(&str, &str, &str)],
    ) -> FederatedResourceQuota {
        let list = |l: &[(&str, &str)]| -> ResourceList {
            l.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        };
        let mut q = FederatedResourceQuota::new(
            "team",
            FederatedResourceQuotaSpec {
                overall: list(overall),
                static_assignments: assignments
                    .iter()
                    .map(|(c, k, v)| StaticClusterAssignment {
                        cluster_name: c.to_string(),
                        hard: list(&[(k, v)]),
                    })
                    .collect(),
            },
        );
        q.metadata.namespace = Some("tenant-a".into());
        q
    }

    #[test]
    fn a_binding_takes_its_scheduled_replicas_times_its_request() {
        let c = Charge::of(&on(&[("m1", 2), ("m2", 1)]), Some(&req("250m")));
        assert_eq!(c.of_key("cpu"), 750);
        assert_eq!(c.of_key("requests.cpu"), 750);
        assert_eq!(c.of_key("memory"), (3 * 64) << 20);
        assert_eq!(c.of_key("pods"), 3);
        assert_eq!(c.clusters["m1"]["cpu"], 500);
        // Unscheduled: nothing.
        assert_eq!(Charge::of(&[], Some(&req("1"))), Charge::default());
        let both = total([&c, &c]);
        assert_eq!(both.of_key("cpu"), 1500);
        assert_eq!(both.clusters["m2"]["pods"], 2);
        let q = quota(&[("cpu", "2"), ("memory", "1Gi")], &[]);
        let l = as_list(&q.spec.overall, &both);
        assert_eq!(l["cpu"].0, "1500m");
        assert_eq!(l["memory"].0, "384Mi");
    }

    #[test]
    fn overall_is_checked_on_growth_with_karmadas_words() {
        let q = quota(&[("cpu", "1")], &[]);
        let others = Charge::of(&on(&[("m1", 1)]), Some(&req("500m")));
        let none = Charge::default();
        let fits = Charge::of(&on(&[("m1", 1)]), Some(&req("500m")));
        assert!(check_overall(&q, &others, &none, &fits).is_ok());
        let over = Charge::of(&on(&[("m1", 1), ("m2", 1)]), Some(&req("500m")));
        let e = check_overall(&q, &others, &none, &over).unwrap_err();
        assert_eq!((e.requested, e.used, e.limit), (1000, 500, 1000));
        assert_eq!(
            e.message(),
            "FederatedResourceQuota(tenant-a/team) exceeded for resource cpu: requested sum 1500m, limit 1 (this binding requests 1, used by others 500m)."
        );
        // Already placed and not growing: kept, even over the limit.
        assert!(check_overall(&q, &others, &over, &over).is_ok());
        // Resources the quota does not name are not limited.
        let mem = quota(&[("memory", "1Gi")], &[]);
        assert!(check_overall(&mem, &others, &none, &over).is_ok());
    }

    #[test]
    fn static_assignments_bound_each_clusters_room() {
        let q = quota(&[("cpu", "10")], &[("m1", "cpu", "1"), ("m2", "cpu", "2")]);
        let others = Charge::of(&on(&[("m1", 1)]), Some(&req("500m")));
        let room = cluster_room(&[&q], &others, Some(&req("500m")));
        assert_eq!(room["m1"], (1, "tenant-a/team".to_string()));
        assert_eq!(room["m2"].0, 4);
        assert!(!room.contains_key("m3"));
        // A request the assignment does not measure: no bound.
        let pods_only = ReplicaRequirements::default();
        assert!(cluster_room(&[&q], &others, Some(&pods_only)).is_empty());
    }
}
