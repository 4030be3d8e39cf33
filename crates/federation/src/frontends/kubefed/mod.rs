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

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Frontend, Informers, Row, condition, text};
use crate::context::Ctx;
use crate::roles::{READ, WRITE, cluster_role, rule};

/// KubeFed's API as a front end (`--frontends kubefed`).
pub struct KubeFed;

impl Frontend for KubeFed {
    fn name(&self) -> &'static str {
        "kubefed"
    }

    fn api(&self) -> &'static str {
        "KubeFed"
    }

    fn groups(&self) -> &'static [&'static str] {
        &[api::TYPES_GROUP, api::CORE_GROUP, api::SCHEDULING_GROUP]
    }

    fn listed(&self) -> &'static [&'static str] {
        &[api::TYPES_GROUP]
    }

    fn crds(&self) -> Vec<Value> {
        api::crds()
    }

    fn roles(&self) -> Vec<Value> {
        roles()
    }

    fn controllers(&self, ctx: &Ctx, _: &Informers) -> Vec<BoxFuture<'static, ()>> {
        vec![Box::pin(controller::run(
            ctx.hub.clone(),
            ctx.clusters.clone(),
            ctx.metrics.queue("kubefed"),
        ))]
    }

    /// A federated object's `status.clusters`: the clusters it is placed
    /// in, with a status only where it failed.
    fn placements(&self, object: &Value, _: &[(String, String)]) -> Vec<Row> {
        if !object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with(api::TYPES_GROUP))
        {
            return Vec::new();
        }
        let propagated = condition(object, "Propagation").unwrap_or("Unknown");
        object
            .pointer("/status/clusters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| Row {
                cluster: text(c, "/name"),
                status: match c["status"].as_str() {
                    Some(failed) => failed.to_string(),
                    None if propagated == "True" => "Propagated".into(),
                    None => "Pending".into(),
                },
            })
            .collect()
    }
}

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
    fn a_federated_object_goes_to_its_status_clusters() {
        let fed = json!({"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "status": {"conditions": [{"type": "Propagation", "status": "False"}],
                       "clusters": [{"name": "a"}, {"name": "b", "status": "ClusterNotReady"}]}});
        assert_eq!(
            KubeFed.placements(&fed, &[]),
            vec![
                Row {
                    cluster: "a".into(),
                    status: "Pending".into()
                },
                Row {
                    cluster: "b".into(),
                    status: "ClusterNotReady".into()
                },
            ]
        );
        let placed = json!({"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "status": {"conditions": [{"type": "Propagation", "status": "True"}],
                       "clusters": [{"name": "a"}]}});
        assert_eq!(KubeFed.placements(&placed, &[])[0].status, "Propagated");
        let rsp = json!({"apiVersion": "scheduling.kubefed.io/v1alpha1",
            "kind": "ReplicaSchedulingPreference", "status": {"clusters": [{"name": "a"}]}});
        assert!(KubeFed.placements(&rsp, &[]).is_empty());
    }

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
