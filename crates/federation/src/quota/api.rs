//! Karmada's FederatedResourceQuota (`policy.karmada.io/v1alpha1`,
//! namespaced): a namespace's total over the fleet (`spec.overall`) and,
//! optionally, what each cluster may hold (`spec.staticAssignments`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flotilla_core::crd::{Kind, column};

/// Labels of the Works carrying a quota's ResourceQuotas (Karmada's).
pub const NAMESPACE_LABEL: &str = "federatedresourcequota.karmada.io/namespace";
pub const NAME_LABEL: &str = "federatedresourcequota.karmada.io/name";
/// The Scheduled condition's reason for a binding over quota (Karmada's
/// `BindingReasonQuotaExceeded`).
pub const REASON_QUOTA_EXCEEDED: &str = "QuotaExceeded";

pub type ResourceList = BTreeMap<String, Quantity>;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "FederatedResourceQuota",
    namespaced,
    status = "FederatedResourceQuotaStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceQuotaSpec {
    #[serde(default)]
    pub overall: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_assignments: Vec<StaticClusterAssignment>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StaticClusterAssignment {
    pub cluster_name: String,
    #[serde(default)]
    pub hard: ResourceList,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FederatedResourceQuotaStatus {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overall: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overall_used: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_status: Vec<ClusterQuotaStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQuotaStatus {
    pub cluster_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hard: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used: ResourceList,
}

/// The CRD, with Karmada's columns.
pub fn crd() -> Value {
    let list =
        json!({"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}});
    Kind {
        group: "policy.karmada.io",
        version: "v1alpha1",
        kind: "FederatedResourceQuota".into(),
        plural: "federatedresourcequotas".into(),
        short_names: Vec::new(),
        namespaced: true,
        categories: &[crate::api::CATEGORY],
        columns: vec![
            column("OVERALL", "string", ".status.overall"),
            column("OVERALL_USED", "string", ".status.overallUsed"),
        ],
        spec: json!({
            "type": "object",
            "required": ["overall"],
            "properties": {
                "overall": list,
                "staticAssignments": {"type": "array", "items": {
                    "type": "object",
                    "required": ["clusterName", "hard"],
                    "properties": {
                        "clusterName": {"type": "string", "minLength": 1},
                        "hard": list,
                    },
                }},
            },
        }),
    }
    .crd()
}
