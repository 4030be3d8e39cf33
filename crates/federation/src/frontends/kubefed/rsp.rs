//! KubeFed's ReplicaSchedulingPreference (`scheduling.kubefed.io/v1alpha1`):
//! how many replicas of a FederatedDeployment or FederatedReplicaSet of
//! the same name each cluster runs, from per-cluster weights and bounds.
//! The plan is handed to the pipeline as a Divided placement whose static
//! weights are the planned counts, so Karmada's division reproduces it
//! exactly. Pure functions, no I/O.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::names::fnv32a;

/// The kinds a preference can target.
pub const TARGET_KINDS: &[&str] = &["FederatedDeployment", "FederatedReplicaSet"];

/// One cluster's preference (`spec.clusters[name]`, or `"*"` for any).
#[derive(Clone, Debug, PartialEq)]
pub struct Preference {
    pub min: i64,
    pub max: Option<i64>,
    pub weight: i64,
}

/// A ReplicaSchedulingPreference's spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Rsp {
    pub target_kind: String,
    pub total: i64,
    pub rebalance: bool,
    pub intersect_with_cluster_selector: bool,
    pub clusters: BTreeMap<String, Preference>,
}

/// Reads the spec; the message says what is wrong with it.
pub fn parse(rsp: &Value) -> Result<Rsp, String> {
    let spec = rsp.get("spec").ok_or("spec is required")?;
    let target_kind = spec
        .get("targetKind")
        .and_then(Value::as_str)
        .ok_or("spec.targetKind is required")?;
    if !TARGET_KINDS.contains(&target_kind) {
        return Err(format!(
            "spec.targetKind {target_kind:?} is not supported: one of {}",
            TARGET_KINDS.join(", ")
        ));
    }
    let total = spec
        .get("totalReplicas")
        .and_then(Value::as_i64)
        .ok_or("spec.totalReplicas is required")?;
    if total < 0 {
        return Err("spec.totalReplicas must not be negative".into());
    }
    let mut clusters = BTreeMap::new();
    for (name, p) in spec
        .get("clusters")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let int = |k: &str| p.get(k).and_then(Value::as_i64);
        let pref = Preference {
            min: int("minReplicas").unwrap_or(0),
            max: int("maxReplicas"),
            weight: int("weight").unwrap_or(0),
        };
        if pref.min < 0 || pref.weight < 0 || pref.max.is_some_and(|m| m < pref.min) {
            return Err(format!(
                "spec.clusters[{name:?}]: minReplicas, maxReplicas and weight must not be \
                 negative, and maxReplicas not below minReplicas"
            ));
        }
        clusters.insert(name.clone(), pref);
    }
    let flag = |k: &str| spec.get(k).and_then(Value::as_bool).unwrap_or(false);
    Ok(Rsp {
        target_kind: target_kind.to_string(),
        total,
        rebalance: flag("rebalance"),
        intersect_with_cluster_selector: flag("intersectWithClusterSelector"),
        clusters,
    })
}

impl Rsp {
    /// A cluster's preference: its own, else `"*"`'s; none means no
    /// replicas there.
    fn preference(&self, cluster: &str) -> Option<&Preference> {
        self.clusters
            .get(cluster)
            .or_else(|| self.clusters.get("*"))
    }

    /// Replicas per candidate cluster (ready, and placed where the
    /// preference intersects with the placement). `current` is what each
    /// cluster runs now: without `rebalance` a distribution that still
    /// fits the preferences is kept, so running replicas do not move.
    /// Replicas no cluster can take (every one at its maximum) stay
    /// unscheduled, as in KubeFed. `key` spreads ties between objects.
    pub fn plan(
        &self,
        candidates: &[String],
        current: &BTreeMap<String, i64>,
        key: &str,
    ) -> BTreeMap<String, i64> {
        let mut order: Vec<(&str, &Preference)> = candidates
            .iter()
            .filter_map(|c| Some((c.as_str(), self.preference(c)?)))
            .collect();
        if !self.rebalance && self.keeps(&order, current) {
            return current.clone();
        }
        // Heavier first; ties in an order of the object's own.
        order.sort_by_key(|(c, p)| {
            (
                std::cmp::Reverse(p.weight),
                fnv32a(format!("{key}/{c}").as_bytes()),
            )
        });
        let mut plan: BTreeMap<String, i64> = BTreeMap::new();
        let mut remaining = self.total;
        for (c, p) in &order {
            let n = p.min.min(remaining);
            remaining -= n;
            plan.insert(c.to_string(), n);
        }
        while remaining > 0 {
            let open: Vec<&(&str, &Preference)> = order
                .iter()
                .filter(|(c, p)| p.weight > 0 && p.max.is_none_or(|m| plan[*c] < m))
                .collect();
            let weights: i64 = open.iter().map(|(_, p)| p.weight).sum();
            if weights == 0 {
                break;
            }
            let round = remaining;
            for (c, p) in open {
                let share = (round * p.weight + weights - 1) / weights;
                let room = p.max.map_or(i64::MAX, |m| m - plan[*c]);
                let n = share.min(room).min(remaining);
                *plan.entry(c.to_string()).or_default() += n;
                remaining -= n;
            }
        }
        plan.retain(|_, n| *n > 0);
        plan
    }

    /// Whether the current distribution still fits: the total, every
    /// cluster a candidate within its bounds.
    fn keeps(&self, order: &[(&str, &Preference)], current: &BTreeMap<String, i64>) -> bool {
        !current.is_empty()
            && current.values().sum::<i64>() == self.total
            && current.iter().all(|(c, n)| {
                order.iter().any(|(o, p)| {
                    o == c && *n >= p.min && p.max.is_none_or(|m| *n <= m) && p.weight > 0
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rsp(spec: Value) -> Rsp {
        parse(&json!({ "spec": spec })).unwrap()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn counts(plan: &BTreeMap<String, i64>) -> Vec<(&str, i64)> {
        plan.iter().map(|(c, n)| (c.as_str(), *n)).collect()
    }

    #[test]
    fn weights_divide_the_total() {
        let r = rsp(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 9,
            "clusters": {"a": {"weight": 1}, "b": {"weight": 2}}}),
        );
        let plan = r.plan(&names(&["a", "b"]), &BTreeMap::new(), "ns/web");
        assert_eq!(counts(&plan), vec![("a", 3), ("b", 6)]);
    }

    #[test]
    fn minimums_come_first_and_maximums_send_the_rest_elsewhere() {
        // KubeFed's documented example: "*" weight 2, one cluster 1..3 weight 1.
        let r = rsp(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 15,
            "clusters": {"*": {"weight": 2}, "ap": {"minReplicas": 1, "maxReplicas": 3, "weight": 1}}}),
        );
        let plan = r.plan(&names(&["ap", "eu", "us"]), &BTreeMap::new(), "test/nginx2");
        assert_eq!(plan.values().sum::<i64>(), 15);
        assert!((1..=3).contains(&plan["ap"]));
        assert!(plan["eu"] >= 5 && plan["us"] >= 5, "{plan:?}");
        // Bounds everywhere below the total: the rest stays unscheduled.
        let r = rsp(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 10,
            "clusters": {"a": {"maxReplicas": 2, "weight": 1}, "b": {"maxReplicas": 3, "weight": 1}}}),
        );
        let plan = r.plan(&names(&["a", "b"]), &BTreeMap::new(), "x");
        assert_eq!(counts(&plan), vec![("a", 2), ("b", 3)]);
    }

    #[test]
    fn clusters_without_a_preference_or_not_candidates_get_nothing() {
        let r = rsp(
            json!({"targetKind": "FederatedDeployment", "totalReplicas": 4,
            "clusters": {"a": {"weight": 1}, "b": {"weight": 1}}}),
        );
        let plan = r.plan(&names(&["a", "c"]), &BTreeMap::new(), "x");
        assert_eq!(counts(&plan), vec![("a", 4)]);
    }

    #[test]
    fn without_rebalance_a_fitting_distribution_stays() {
        let spec = json!({"targetKind": "FederatedDeployment", "totalReplicas": 4,
            "clusters": {"a": {"weight": 1}, "b": {"weight": 1}}});
        let current: BTreeMap<String, i64> = [("a".to_string(), 3), ("b".to_string(), 1)].into();
        let kept = rsp(spec.clone()).plan(&names(&["a", "b"]), &current, "x");
        assert_eq!(kept, current);
        let mut rebalancing = spec.clone();
        rebalancing["rebalance"] = json!(true);
        let moved = rsp(rebalancing).plan(&names(&["a", "b"]), &current, "x");
        assert_eq!(counts(&moved), vec![("a", 2), ("b", 2)]);
        // A cluster gone from the candidates: planned afresh.
        let replanned = rsp(spec).plan(&names(&["a"]), &current, "x");
        assert_eq!(counts(&replanned), vec![("a", 4)]);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let e = |spec: Value| parse(&json!({ "spec": spec })).unwrap_err();
        assert!(e(json!({"totalReplicas": 1})).contains("targetKind"));
        assert!(
            e(json!({"targetKind": "FederatedJob", "totalReplicas": 1})).contains("not supported")
        );
        assert!(e(json!({"targetKind": "FederatedDeployment"})).contains("totalReplicas"));
        assert!(
            e(
                json!({"targetKind": "FederatedDeployment", "totalReplicas": 1,
                "clusters": {"a": {"minReplicas": 3, "maxReplicas": 2}}})
            )
            .contains("maxReplicas")
        );
    }
}
