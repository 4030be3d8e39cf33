//! Karmada's `autoscaling.karmada.io/v1alpha1`: FederatedHPA (`fhpa`), an
//! autoscaling/v2 HorizontalPodAutoscaler whose target is a resource
//! template and whose pods run in the members, and CronFederatedHPA
//! (`cronfhpa`), rules that set a workload's replicas or a FederatedHPA's
//! bounds on a cron schedule.

use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerSpec,
    HorizontalPodAutoscalerStatus, MetricSpec,
};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flotilla_core::crd::{Kind, age, column};

pub const GROUP: &str = "autoscaling.karmada.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "autoscaling.karmada.io/v1alpha1";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "autoscaling.karmada.io",
    version = "v1alpha1",
    kind = "FederatedHPA",
    namespaced,
    status = "HorizontalPodAutoscalerStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedHPASpec {
    pub scale_target_ref: CrossVersionObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    pub max_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<MetricSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
}

impl FederatedHPASpec {
    /// The same fields as an HPA's spec, which the algorithm reads.
    pub fn as_hpa(&self) -> HorizontalPodAutoscalerSpec {
        HorizontalPodAutoscalerSpec {
            scale_target_ref: self.scale_target_ref.clone(),
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            metrics: self.metrics.clone(),
            behavior: self.behavior.clone(),
        }
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "autoscaling.karmada.io",
    version = "v1alpha1",
    kind = "CronFederatedHPA",
    namespaced,
    status = "CronFederatedHPAStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct CronFederatedHPASpec {
    pub scale_target_ref: CrossVersionObjectReference,
    #[serde(default)]
    pub rules: Vec<CronFederatedHPARule>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CronFederatedHPARule {
    pub name: String,
    pub schedule: String,
    /// For a workload target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_replicas: Option<i32>,
    /// For a FederatedHPA target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_max_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// An IANA zone; the control plane's own when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful_history_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_history_limit: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CronFederatedHPAStatus {
    /// Always written, so that a merge patch clears the histories of rules
    /// that are gone.
    #[serde(default)]
    pub execution_histories: Vec<ExecutionHistory>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionHistory {
    pub rule_name: String,
    /// None while the rule is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_execution_time: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub successful_executions: Vec<SuccessfulExecution>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_executions: Vec<FailedExecution>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SuccessfulExecution {
    pub schedule_time: String,
    pub execution_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_max_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_min_replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailedExecution {
    pub schedule_time: String,
    pub execution_time: String,
    pub message: String,
}

fn target_ref() -> Value {
    json!({"type": "object", "required": ["kind", "name"], "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string"},
    }})
}

/// The CRDs, with Karmada's names, columns and schema defaults.
pub fn crds() -> Vec<Value> {
    let open = |properties: Value, required: &[&str]| {
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
               "properties": properties, "required": required})
    };
    let fhpa = Kind {
        group: GROUP,
        version: VERSION,
        kind: "FederatedHPA".into(),
        plural: "federatedhpas".into(),
        short_names: vec!["fhpa".into()],
        namespaced: true,
        categories: &[crate::api::CATEGORY],
        columns: vec![
            column("REFERENCE-KIND", "string", ".spec.scaleTargetRef.kind"),
            column("REFERENCE-NAME", "string", ".spec.scaleTargetRef.name"),
            column("MINPODS", "integer", ".spec.minReplicas"),
            column("MAXPODS", "integer", ".spec.maxReplicas"),
            column("REPLICAS", "integer", ".status.currentReplicas"),
            age(),
        ],
        spec: open(
            json!({
                "scaleTargetRef": target_ref(),
                "minReplicas": {"type": "integer", "format": "int32"},
                "maxReplicas": {"type": "integer", "format": "int32"},
                "metrics": {"type": "array", "x-kubernetes-list-type": "atomic",
                    "items": open(json!({"type": {"type": "string"}}), &["type"])},
                "behavior": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }),
            &["maxReplicas", "scaleTargetRef"],
        ),
    };
    let cron = Kind {
        group: GROUP,
        version: VERSION,
        kind: "CronFederatedHPA".into(),
        plural: "cronfederatedhpas".into(),
        short_names: vec!["cronfhpa".into()],
        namespaced: true,
        categories: &[crate::api::CATEGORY],
        columns: vec![
            column("REFERENCE-KIND", "string", ".spec.scaleTargetRef.kind"),
            column("REFERENCE-NAME", "string", ".spec.scaleTargetRef.name"),
            age(),
        ],
        spec: open(
            json!({
                "scaleTargetRef": target_ref(),
                "rules": {"type": "array", "items": open(json!({
                    "name": {"type": "string", "minLength": 1, "maxLength": 32},
                    "schedule": {"type": "string"},
                    "targetReplicas": {"type": "integer", "format": "int32"},
                    "targetMinReplicas": {"type": "integer", "format": "int32"},
                    "targetMaxReplicas": {"type": "integer", "format": "int32"},
                    "suspend": {"type": "boolean", "default": false},
                    "timeZone": {"type": "string"},
                    "successfulHistoryLimit": {"type": "integer", "format": "int32",
                        "default": 3, "minimum": 1, "maximum": 32},
                    "failedHistoryLimit": {"type": "integer", "format": "int32",
                        "default": 3, "minimum": 0, "maximum": 32},
                }), &["name", "schedule"])},
            }),
            &["rules", "scaleTargetRef"],
        ),
    };
    vec![fhpa.crd(), cron.crd()]
}
