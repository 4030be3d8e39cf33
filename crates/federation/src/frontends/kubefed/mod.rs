//! KubeFed's API (`types.kubefed.io/v1beta1`, `core.kubefed.io/v1beta1`,
//! `scheduling.kubefed.io/v1alpha1`) over the Karmada pipeline: a
//! `Federated<Kind>` object becomes a resource template, a namespaced
//! PropagationPolicy and an OverridePolicy, all owned by it (a
//! FederatedNamespace, a ClusterPropagationPolicy of the namespace); its
//! `Propagation` condition and per-cluster status are read back from the
//! ResourceBinding. KubeFedClusters mirror the fleet's clusters, and a
//! ReplicaSchedulingPreference divides a workload's replicas.

pub mod api;
mod apply;
pub mod clusters;
pub mod controller;
mod namespace;
pub mod rsp;
pub mod translate;

use serde_json::Value;

use crate::roles::{READ, WRITE, cluster_role, rule};

/// The role the front end adds to the controllers: KubeFed's own kinds,
/// and creating the templates of the namespaced types KubeFed enables by
/// default (the controllers otherwise create no user objects).
pub const ROLE: &str = "system:flotilla:kubefed";

pub fn roles() -> Vec<Value> {
    let mut rules = vec![rule(
        &["*"],
        &[api::CORE_GROUP, api::TYPES_GROUP, api::SCHEDULING_GROUP],
        &["*"],
    )];
    for t in api::default_types().iter().filter(|t| t.namespaced) {
        rules.push(rule(&["create"], &[t.group.as_str()], &[t.plural.as_str()]));
    }
    let users_kinds = [api::TYPES_GROUP, api::SCHEDULING_GROUP];
    vec![
        cluster_role(ROLE, None, rules),
        // A namespace's editors write its federated objects; viewers read them.
        cluster_role(
            "flotilla:kubefed:aggregate-to-edit",
            Some("edit"),
            vec![rule(WRITE, &users_kinds, &["*"])],
        ),
        cluster_role(
            "flotilla:kubefed:aggregate-to-view",
            Some("view"),
            vec![rule(READ, &users_kinds, &["*"])],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_role_creates_namespaced_templates_and_nothing_of_rbac() {
        let role = &roles()[0];
        let rules = role["rules"].as_array().unwrap();
        let creates = |group: &str, resource: &str| {
            rules.iter().any(|r| {
                r["apiGroups"].as_array().unwrap().contains(&json!(group))
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                    && r["verbs"].as_array().unwrap().contains(&json!("create"))
            })
        };
        assert!(creates("apps", "deployments"));
        assert!(creates("", "configmaps"));
        assert!(!creates("rbac.authorization.k8s.io", "clusterroles"));
        assert!(!creates("", "namespaces"));
        for r in rules {
            let groups = r["apiGroups"].as_array().unwrap();
            assert!(!groups.contains(&json!("*")));
            assert!(!groups.contains(&json!("rbac.authorization.k8s.io")));
        }
    }
}
