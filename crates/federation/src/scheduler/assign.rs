//! Replica assignment: Duplicated, Divided by static or dynamic weights
//! (Webster / Sainte-Laguë), and Aggregated, with Karmada's steady
//! behaviour on scale up and down.

use std::collections::BTreeMap;

use flotilla_core::quantity;

use crate::api::{Cluster, ReplicaRequirements};

/// Seats for `total` replicas over parties weighted by votes, one seat at
/// a time to the largest `votes / (2·seats + 1)`. Ties go to the party
/// with fewer seats, then by name, ascending or descending as the binding
/// decides (so ties do not always favour the same cluster).
pub fn webster(total: i32, parties: &[(String, i64)], ascending: bool) -> BTreeMap<String, i32> {
    let mut seats: BTreeMap<String, i32> = parties.iter().map(|(n, _)| (n.clone(), 0)).collect();
    let all_zero = parties.iter().all(|(_, v)| *v <= 0);
    let votes = |v: i64| if all_zero { 1 } else { v.max(0) };
    for _ in 0..total.max(0) {
        let mut best: Option<(&String, i64, i32)> = None;
        for (name, v) in parties {
            let v = votes(*v);
            if v == 0 {
                continue;
            }
            let s = seats[name];
            let better = match best {
                None => true,
                Some((bn, bv, bs)) => {
                    // v/(2s+1) vs bv/(2bs+1), exactly.
                    let lhs = i128::from(v) * i128::from(2 * bs + 1);
                    let rhs = i128::from(bv) * i128::from(2 * s + 1);
                    lhs > rhs || (lhs == rhs && (s < bs || (s == bs && ((name < bn) == ascending))))
                }
            };
            if better {
                best = Some((name, v, s));
            }
        }
        let Some((name, _, _)) = best else { break };
        if let Some(s) = seats.get_mut(name) {
            *s += 1;
        }
    }
    seats
}

/// How many more replicas with these requirements fit in a cluster, from
/// its resourceSummary; `None` when the cluster has not reported one.
pub fn available_replicas(cluster: &Cluster, req: Option<&ReplicaRequirements>) -> Option<i64> {
    let summary = cluster.status.as_ref()?.resource_summary.as_ref()?;
    let amount = |m: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                  r: &str| {
        m.get(r)
            .and_then(|q| {
                if r == "cpu" {
                    quantity::millicores(&q.0)
                } else {
                    quantity::units(&q.0)
                }
            })
            .unwrap_or(0)
    };
    let free = |r: &str| {
        amount(&summary.allocatable, r)
            - amount(&summary.allocated, r)
            - amount(&summary.allocating, r)
    };
    let mut fit = free("pods").max(0);
    for (r, q) in req.map(|r| &r.resource_request).into_iter().flatten() {
        if r == "pods" {
            continue;
        }
        let need = if r == "cpu" {
            quantity::millicores(&q.0)
        } else {
            quantity::units(&q.0)
        }
        .unwrap_or(0);
        if need > 0 {
            fit = fit.min(free(r).max(0) / need);
        }
    }
    Some(fit)
}

/// Divided by weights: from scratch for static weights, steady for
/// dynamic ones (scale up spreads only the delta; scale down re-splits
/// the new total by the current assignment).
pub fn divide_steady(
    total: i32,
    weights: &[(String, i64)],
    previous: &BTreeMap<String, i32>,
    ascending: bool,
) -> BTreeMap<String, i32> {
    let assigned: i32 = previous.values().sum();
    if previous.is_empty() {
        return webster(total, weights, ascending);
    }
    if assigned == total {
        return previous.clone();
    }
    if total < assigned {
        let current: Vec<(String, i64)> = previous
            .iter()
            .map(|(n, r)| (n.clone(), i64::from(*r)))
            .collect();
        return webster(total, &current, ascending);
    }
    let mut result = previous.clone();
    for (n, r) in webster(total - assigned, weights, ascending) {
        *result.entry(n).or_default() += r;
    }
    result
}

/// Aggregated: as few clusters as possible. Clusters already used come
/// first, then the most available; each takes what fits.
pub fn aggregate(
    total: i32,
    available: &[(String, i64)],
    previous: &BTreeMap<String, i32>,
) -> Option<BTreeMap<String, i32>> {
    let assigned: i32 = previous.values().sum();
    if !previous.is_empty() && assigned == total {
        return Some(previous.clone());
    }
    if !previous.is_empty() && total < assigned {
        let current: Vec<(String, i64)> = previous
            .iter()
            .map(|(n, r)| (n.clone(), i64::from(*r)))
            .collect();
        return Some(webster(total, &current, true));
    }
    let mut order: Vec<&(String, i64)> = available.iter().collect();
    order.sort_by(|a, b| {
        let used = |n: &String| previous.get(n).copied().unwrap_or(0);
        used(&b.0)
            .cmp(&used(&a.0))
            .then(b.1.cmp(&a.1))
            .then(a.0.cmp(&b.0))
    });
    let mut result = previous.clone();
    let mut remaining = i64::from(total - assigned);
    for (name, avail) in order {
        if remaining <= 0 {
            break;
        }
        let take = remaining.min(*avail);
        if take > 0 {
            *result.entry(name.clone()).or_default() += take as i32;
            remaining -= take;
        }
    }
    (remaining <= 0).then_some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parties(w: &[(&str, i64)]) -> Vec<(String, i64)> {
        w.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn webster_divides_one_to_two() {
        let seats = webster(3, &parties(&[("member1", 1), ("member2", 2)]), true);
        assert_eq!(seats["member1"], 1);
        assert_eq!(seats["member2"], 2);
    }

    #[test]
    fn webster_ties_follow_the_binding_direction() {
        let p = parties(&[("a", 1), ("b", 1)]);
        assert_eq!(webster(1, &p, true)["a"], 1);
        assert_eq!(webster(1, &p, false)["b"], 1);
        // Sainte-Laguë, not D'Hondt: 7 seats at 5:3 is 4:3, not 5:2.
        let s = webster(7, &parties(&[("a", 5), ("b", 3)]), true);
        assert_eq!((s["a"], s["b"]), (4, 3));
    }

    #[test]
    fn steady_scale_up_spreads_only_the_delta() {
        let prev: BTreeMap<String, i32> = [("a".into(), 3), ("b".into(), 1)].into();
        let w = parties(&[("a", 0), ("b", 10)]);
        let r = divide_steady(6, &w, &prev, true);
        assert_eq!((r["a"], r["b"]), (3, 3));
        let down = divide_steady(2, &w, &prev, true);
        assert_eq!(down.values().sum::<i32>(), 2);
        assert!(down["a"] >= down["b"]);
    }

    #[test]
    fn aggregated_packs_into_few_clusters() {
        let avail = parties(&[("a", 2), ("b", 10), ("c", 5)]);
        let r = aggregate(8, &avail, &BTreeMap::new()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r["b"], 8);
        assert!(aggregate(20, &avail, &BTreeMap::new()).is_none());
    }
}
