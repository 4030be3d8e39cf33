//! KubeFed's FederatedNamespace: an object named after the namespace it
//! lives in, placing that namespace in member clusters. The hub's own
//! Namespace is the template; a ClusterPropagationPolicy
//! `kubefed-namespace-<ns>` selects it (Flotilla propagates a Namespace
//! as such only when a ClusterPropagationPolicy does). A namespaced
//! object cannot own a cluster-scoped one, so the policy's end is kept
//! here: once its FederatedNamespace is gone, the policy
//! is deleted and so is the binding (the members' copies go with its
//! Works), unless `kubefed.io/orphan` keeps the copies.

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::api::{GENERATED_BY, TargetType};
use super::apply::apply;
use super::clusters::FedCluster;
use super::translate::{self, Placement};
use crate::api::{Binding, POLICY_GROUP, Scope, binding_resource};
use crate::names::binding_name;

/// How the generated ClusterPropagationPolicies' names begin.
const PREFIX: &str = "kubefed-namespace-";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "flotilla-kubefed");

fn cpp_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(POLICY_GROUP, "v1alpha1", "ClusterPropagationPolicy"),
        "clusterpropagationpolicies",
    )
}

/// The ClusterPropagationPolicy placing namespace `ns` on `placement`.
pub fn policy(ns: &str, placement: &Placement, orphan: bool) -> Value {
    let mut p = translate::propagation_policy(
        &json!({"metadata": {"name": ns}}),
        &TargetType {
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            namespaced: false,
        },
        placement,
    );
    p["kind"] = json!("ClusterPropagationPolicy");
    p["metadata"] = json!({
        "name": format!("{PREFIX}{ns}"),
        "labels": {MANAGED_BY.0: MANAGED_BY.1},
        "annotations": {GENERATED_BY: format!("FederatedNamespace/{ns}")},
    });
    if orphan {
        p["spec"]["preserveResourcesOnDeletion"] = json!(true);
    }
    p
}

/// Whether a federated object is a FederatedNamespace KubeFed accepts:
/// named after its own namespace.
pub fn well_named(fed: &Value) -> bool {
    fed["metadata"]["name"] == fed["metadata"]["namespace"]
}

/// Places each FederatedNamespace's namespace and writes its status;
/// retires the policies of those gone.
pub async fn sync(
    hub: &Client,
    fleet: &[FedCluster],
    fed_ar: &ApiResource,
    feds: &[Value],
) -> kube::Result<()> {
    let mut live = BTreeSet::new();
    for fed in feds {
        let ns = fed["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = fed["metadata"]["name"].as_str().unwrap_or_default();
        if !well_named(fed) {
            let note = format!(
                "a FederatedNamespace must be named after its namespace: {name:?} is in {ns:?}"
            );
            super::controller::write_status(hub, fleet, fed_ar, fed, &[], None, &[], vec![note])
                .await?;
            continue;
        }
        live.insert(ns.to_string());
        let (placement, notes) = match translate::placed_clusters(fed, fleet) {
            Ok(p) => (Placement::Clusters(p), Vec::new()),
            Err(e) => (Placement::Clusters(Vec::new()), vec![e]),
        };
        let orphan = translate::orphans(fed);
        apply(hub, &cpp_resource(), policy(ns, &placement, orphan)).await?;
        let crbs: Api<Binding> = Api::all_with(hub.clone(), &binding_resource(Scope::Cluster));
        let binding = crbs.get_opt(&binding_name("Namespace", ns)).await?;
        let placed = placement.clusters();
        super::controller::write_status(
            hub,
            fleet,
            fed_ar,
            fed,
            &placed,
            binding.as_ref(),
            &[],
            notes,
        )
        .await?;
    }
    retire(hub, &live).await
}

/// The policies of FederatedNamespaces gone: deleted, and with them
/// (unless `kubefed.io/orphan` kept the copies) the binding, whose Works
/// take the namespace out of the members. The policy goes first, so
/// that nothing claims the Namespace again; a Karmada policy that places
/// nowhere would keep the last placement instead.
async fn retire(hub: &Client, live: &BTreeSet<String>) -> kube::Result<()> {
    let cpps: Api<DynamicObject> = Api::all_with(hub.clone(), &cpp_resource());
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let crbs: Api<Binding> = Api::all_with(hub.clone(), &binding_resource(Scope::Cluster));
    for cpp in cpps.list(&ListParams::default().labels(&selector)).await? {
        let name = cpp.name_any();
        let Some(ns) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if live.contains(ns) {
            continue;
        }
        let orphan = cpp.data.pointer("/spec/preserveResourcesOnDeletion") == Some(&json!(true));
        info!(namespace = %ns, orphan, "FederatedNamespace gone; its policy goes");
        match cpps.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        if orphan {
            continue;
        }
        match crbs
            .delete(&binding_name("Namespace", ns), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => warn!(%error, namespace = %ns, "the namespace's binding not deleted"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_placed_by_a_cluster_policy_of_its_own() {
        let p = policy("team-x", &Placement::Clusters(vec!["a".into()]), false);
        assert_eq!(p["kind"], "ClusterPropagationPolicy");
        assert_eq!(p["metadata"]["name"], "kubefed-namespace-team-x");
        assert_eq!(
            p["spec"]["resourceSelectors"],
            json!([{"apiVersion": "v1", "kind": "Namespace", "name": "team-x"}])
        );
        assert_eq!(
            p["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["a"])
        );
        assert_eq!(p["spec"].get("preserveResourcesOnDeletion"), None);
        assert!(well_named(
            &json!({"metadata": {"name": "n", "namespace": "n"}})
        ));
        assert!(!well_named(
            &json!({"metadata": {"name": "n", "namespace": "m"}})
        ));
    }
}
