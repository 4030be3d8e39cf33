//! Open Cluster Management's cluster-set API
//! (`cluster.open-cluster-management.io/v1beta2`): ManagedClusterSet
//! (cluster-scoped) and ManagedClusterSetBinding (namespaced), with OCM's
//! names, short names, defaults and printer columns. The members of a set
//! are the hub's Karmada Clusters, chosen by their labels.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flotilla_core::crd::{Kind, age, column};

pub const GROUP: &str = "cluster.open-cluster-management.io";
/// The label that makes a cluster a member of the set it names
/// (`ExclusiveClusterSetLabel` sets).
pub const CLUSTER_SET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
pub const EXCLUSIVE_CLUSTER_SET_LABEL: &str = "ExclusiveClusterSetLabel";
pub const LABEL_SELECTOR: &str = "LabelSelector";
/// A set's condition: True when no cluster is in it.
pub const CONDITION_EMPTY: &str = "ClusterSetEmpty";
/// A binding's condition: True when its set exists.
pub const CONDITION_BOUND: &str = "Bound";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSet",
    status = "ClusterSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetSpec {
    #[serde(default)]
    pub cluster_selector: ClusterSelector,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    /// `ExclusiveClusterSetLabel` (the default) or `LabelSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterSetStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSetBinding",
    namespaced,
    status = "ClusterSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetBindingSpec {
    /// The set bound; OCM requires the binding to be named after it.
    pub cluster_set: String,
}

fn selector_schema() -> Value {
    json!({
        "type": "object",
        "default": {"selectorType": EXCLUSIVE_CLUSTER_SET_LABEL},
        "properties": {
            "selectorType": {
                "type": "string",
                "default": EXCLUSIVE_CLUSTER_SET_LABEL,
                "enum": [EXCLUSIVE_CLUSTER_SET_LABEL, LABEL_SELECTOR],
            },
            "labelSelector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
    })
}

fn kinds() -> Vec<Kind> {
    let set = Kind {
        group: GROUP,
        version: "v1beta2",
        kind: "ManagedClusterSet".into(),
        plural: "managedclustersets".into(),
        short_names: vec!["mclset".into(), "mclsets".into()],
        namespaced: false,
        categories: &[],
        columns: vec![
            column(
                "Empty",
                "string",
                ".status.conditions[?(@.type==\"ClusterSetEmpty\")].status",
            ),
            age(),
        ],
        spec: json!({
            "type": "object",
            "default": {"clusterSelector": {"selectorType": EXCLUSIVE_CLUSTER_SET_LABEL}},
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"clusterSelector": selector_schema()},
        }),
    };
    let binding = Kind {
        group: GROUP,
        version: "v1beta2",
        kind: "ManagedClusterSetBinding".into(),
        plural: "managedclustersetbindings".into(),
        short_names: vec!["mclsetbinding".into(), "mclsetbindings".into()],
        namespaced: true,
        categories: &[],
        columns: vec![age()],
        spec: json!({
            "type": "object",
            "required": ["clusterSet"],
            "properties": {"clusterSet": {"type": "string", "minLength": 1}},
        }),
    };
    vec![set, binding]
}

/// The cluster-set CRDs, as manifests. A ManagedClusterSet may be
/// created without a spec (OCM defaults it).
pub fn crds() -> Vec<Value> {
    kinds()
        .iter()
        .map(|k| {
            let mut crd = k.crd();
            if !k.namespaced {
                flotilla_core::crd::spec_optional(&mut crd);
            }
            crd
        })
        .collect()
}
