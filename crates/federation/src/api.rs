//! Typed views of Karmada's API: the contract between the controllers.
//!
//! Field names and meanings follow Karmada's Go types. Fields no
//! controller reads yet are kept as raw JSON (`extra`) so that copying a
//! policy's placement into a binding loses nothing a user wrote.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use kube::core::{ApiResource, GroupVersionKind, NotUsed, Object};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

pub const CLUSTER_GROUP: &str = "cluster.karmada.io";
pub const POLICY_GROUP: &str = "policy.karmada.io";
pub const WORK_GROUP: &str = "work.karmada.io";
/// Karmada's category: `kubectl get karmada-io` lists its kinds.
pub const CATEGORY: &str = "karmada-io";

/// Where Push clusters' credentials live (as `karmadactl join` does).
pub const CLUSTER_NAMESPACE: &str = "karmada-cluster";
/// The prefix of each cluster's execution namespace, which holds its Works.
pub const EXECUTION_PREFIX: &str = "karmada-es-";

pub mod labels {
    pub const PP_ID: &str = "propagationpolicy.karmada.io/permanent-id";
    pub const CPP_ID: &str = "clusterpropagationpolicy.karmada.io/permanent-id";
    pub const RB_ID: &str = "resourcebinding.karmada.io/permanent-id";
    pub const CRB_ID: &str = "clusterresourcebinding.karmada.io/permanent-id";
    pub const WORK_ID: &str = "work.karmada.io/permanent-id";
    /// On every object Flotilla creates in a member.
    pub const MANAGED: &str = "karmada.io/managed";
}

pub mod annotations {
    pub const PP_NAME: &str = "propagationpolicy.karmada.io/name";
    pub const PP_NAMESPACE: &str = "propagationpolicy.karmada.io/namespace";
    pub const CPP_NAME: &str = "clusterpropagationpolicy.karmada.io/name";
    pub const APPLIED_PLACEMENT: &str = "policy.karmada.io/applied-placement";
    pub const RB_NAME: &str = "resourcebinding.karmada.io/name";
    pub const RB_NAMESPACE: &str = "resourcebinding.karmada.io/namespace";
    pub const CRB_NAME: &str = "clusterresourcebinding.karmada.io/name";
    pub const WORK_NAME: &str = "work.karmada.io/name";
    pub const WORK_NAMESPACE: &str = "work.karmada.io/namespace";
    pub const CONFLICT_RESOLUTION: &str = "work.karmada.io/conflict-resolution";
    pub const TEMPLATE_GENERATION: &str = "resourcetemplate.karmada.io/generation";
    /// Flotilla's own: a digest of the template's propagated content, so a
    /// status-only write to the template does not re-render its Works.
    pub const TEMPLATE_DIGEST: &str = "flotilla.io/template-digest";
    /// Flotilla's own, on member objects: a digest of the Work manifest
    /// they were applied from, so a later check can tell whether the
    /// member still holds exactly that manifest without applying it again.
    pub const MANIFEST_DIGEST: &str = "flotilla.io/manifest-digest";
    /// On Works: the OverridePolicies applied, and the ClusterOverridePolicies.
    pub const APPLIED_OVERRIDES: &str = "policy.karmada.io/applied-overrides";
    pub const APPLIED_CLUSTER_OVERRIDES: &str = "policy.karmada.io/applied-cluster-overrides";
}

pub mod finalizers {
    pub const CLUSTER: &str = "karmada.io/cluster-controller";
    pub const BINDING: &str = "karmada.io/binding-controller";
    pub const EXECUTION: &str = "karmada.io/execution-controller";
}

// ---------------------------------------------------------------- Cluster

/// `spec.syncMode`: the hub applies the Works of a Push cluster; the
/// agent running next to a Pull cluster applies that cluster's.
pub mod sync_mode {
    pub const PUSH: &str = "Push";
    pub const PULL: &str = "Pull";
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.karmada.io",
    version = "v1alpha1",
    kind = "Cluster",
    status = "ClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub sync_mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verification: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl ClusterSpec {
    /// `zones`, or the deprecated `zone` when `zones` is empty.
    pub fn all_zones(&self) -> Vec<&str> {
        if self.zones.is_empty() {
            self.zone.iter().map(String::as_str).collect()
        } else {
            self.zones.iter().map(String::as_str).collect()
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_enablements: Vec<ApiEnablement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_summary: Option<NodeSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_summary: Option<ResourceSummary>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEnablement {
    pub group_version: String,
    #[serde(default)]
    pub resources: Vec<ApiEnablementResource>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ApiEnablementResource {
    pub name: String,
    pub kind: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    pub total_num: i32,
    pub ready_num: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ResourceSummary {
    #[serde(default)]
    pub allocatable: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub allocating: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub allocated: BTreeMap<String, Quantity>,
}

impl Cluster {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    pub fn is_ready(&self) -> bool {
        self.condition("Ready").is_some_and(|c| c.status == "True")
    }

    pub fn execution_namespace(name: &str) -> String {
        format!("{EXECUTION_PREFIX}{name}")
    }
}

// ------------------------------------------------------------- Policies

/// PropagationPolicy and ClusterPropagationPolicy share one spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<String>,
    #[serde(default)]
    pub placement: Placement,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

pub type Policy = Object<PolicySpec, NotUsed>;

// -------------------------------------------------------------- Overrides

/// OverridePolicy and ClusterOverridePolicy share one spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// Empty: every resource.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    #[serde(default)]
    pub override_rules: Vec<OverrideRule>,
    /// Deprecated in Karmada, still honoured when `overrideRules` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overriders: Option<Overriders>,
}

pub type OverridePolicy = Object<OverrideSpec, NotUsed>;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRule {
    /// None: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,
    #[serde(default)]
    pub overriders: Overriders,
}

/// Applied in this order within a rule, as Karmada does.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_overrider: Vec<ImageOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_overrider: Vec<CommandArgsOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args_overrider: Vec<CommandArgsOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels_overrider: Vec<MapOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations_overrider: Vec<MapOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_overrider: Vec<FieldOverrider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PlaintextOverrider>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OverrideOperator {
    Add,
    Remove,
    Replace,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageComponent {
    Registry,
    Repository,
    Tag,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverrider {
    /// Where the image is; None: every container of a known workload kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate: Option<ImagePredicate>,
    pub component: ImageComponent,
    pub operator: OverrideOperator,
    #[serde(default)]
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ImagePredicate {
    pub path: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    pub container_name: String,
    pub operator: OverrideOperator,
    #[serde(default)]
    pub value: Vec<String>,
}

/// labelsOverrider and annotationsOverrider.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MapOverrider {
    pub operator: OverrideOperator,
    #[serde(default)]
    pub value: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FieldOverrider {
    /// A JSON pointer to a string field holding JSON or YAML.
    pub field_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json: Vec<SubPathOperation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub yaml: Vec<SubPathOperation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubPathOperation {
    pub sub_path: String,
    pub operator: OverrideOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PlaintextOverrider {
    pub path: String,
    pub operator: OverrideOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_affinities: Vec<ClusterAffinityTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaScheduling>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FieldSelector {
    #[serde(default)]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinityTerm {
    pub affinity_name: String,
    #[serde(flatten)]
    pub affinity: ClusterAffinity,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_groups: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_division_preference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<WeightPreference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WeightPreference {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_weight_list: Vec<StaticWeight>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_weight: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StaticWeight {
    pub target_cluster: ClusterAffinity,
    pub weight: i64,
}

// ------------------------------------------------------------- Bindings

/// ResourceBinding and ClusterResourceBinding share one spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    pub resource: ObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<TargetCluster>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Clusters being left, whose Works stay until the task goes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graceful_eviction_tasks: Vec<GracefulEvictionTask>,
    /// Set by a WorkloadRebalancer: a later time than the last scheduling
    /// asks for a fresh division.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_triggered_at: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GracefulEvictionTask {
    pub from_cluster: String,
    /// Directly, Gracefully (the default) or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub producer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_deletion: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// The workload's state read from the cluster left, as labels for
    /// the cluster it moves to (`statePreservation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_label_state: Option<BTreeMap<String, String>>,
    /// Where the binding was when the state was read: those clusters get
    /// no labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters_before_failover: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl GracefulEvictionTask {
    /// Whether the old copy goes at once: `Directly`, or the deprecated
    /// `Immediately`.
    pub fn purges_directly(&self) -> bool {
        matches!(self.purge_mode.as_deref(), Some("Directly" | "Immediately"))
    }
}

/// What of a workload's status travels with it when it fails over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservation {
    #[serde(default)]
    pub rules: Vec<StatePreservationRule>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservationRule {
    /// The label the value is injected under.
    pub alias_label_name: String,
    /// Where in the workload's status the value is (`{ .jobStatus.id }`).
    #[serde(rename = "jsonPath")]
    pub json_path: String,
}

/// A policy's (and binding's) `failover`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverBehavior {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFailover>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailover>,
    /// Flotilla's own: once the clusters a fresh division would use again
    /// (the ones failed over from, or the first clusterAffinities term)
    /// have been Ready this long, divide afresh, as a WorkloadRebalancer
    /// would. Karmada never moves back by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_when_recovered: Option<ReturnWhenRecovered>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReturnWhenRecovered {
    /// How long every cluster of the fresh division must have been Ready
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seconds: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFailover {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationFailover {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_conditions: Option<DecisionConditions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DecisionConditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i32>,
}

impl BindingSpec {
    /// Whether `spec.suspension` stops its Works reaching `cluster`
    /// (`dispatching`, or `dispatchingOnClusters.clusterNames`).
    pub fn dispatch_suspended_on(&self, cluster: &str) -> bool {
        let Some(s) = &self.suspension else {
            return false;
        };
        s.get("dispatching").and_then(Value::as_bool) == Some(true)
            || s.pointer("/dispatchingOnClusters/clusterNames")
                .and_then(Value::as_array)
                .is_some_and(|names| names.iter().any(|n| n.as_str() == Some(cluster)))
    }

    /// The binding's failover settings, if it opted in.
    pub fn failover(&self) -> Option<FailoverBehavior> {
        serde_json::from_value(self.failover.clone()?).ok()
    }

    /// Whether `cluster` is being evicted.
    pub fn evicting(&self, cluster: &str) -> Option<&GracefulEvictionTask> {
        self.graceful_eviction_tasks
            .iter()
            .find(|t| t.from_cluster == cluster)
    }
}

// ------------------------------------------------------ WorkloadRebalancer

/// `policy.karmada.io/v1alpha1` ClusterTaintPolicy: taints the target
/// clusters while their conditions match `addOnConditions`, and removes
/// the taints when they match `removeOnConditions`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "ClusterTaintPolicy",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaintPolicySpec {
    /// Every cluster when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_clusters: Option<ClusterAffinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_on_conditions: Vec<MatchCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_on_conditions: Vec<MatchCondition>,
    /// Key, effect and value; `timeAdded` is set when a taint is added.
    pub taints: Vec<Taint>,
}

/// A cluster condition's status `In` or `NotIn` the given values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    pub condition_type: String,
    pub operator: String,
    pub status_values: Vec<String>,
}

/// `apps.karmada.io/v1alpha1` WorkloadRebalancer: asks for a fresh
/// division of the named workloads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "apps.karmada.io",
    version = "v1alpha1",
    kind = "WorkloadRebalancer",
    status = "WorkloadRebalancerStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRebalancerSpec {
    pub workloads: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRebalancerStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed_workloads: Vec<ObservedWorkload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_time: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObservedWorkload {
    pub workload: ObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRequirements {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_request: BTreeMap<String, Quantity>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetCluster {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_observing_affinity_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_time: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_status: Vec<AggregatedStatusItem>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatusItem {
    pub cluster_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(default)]
    pub applied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
}

pub type Binding = Object<BindingSpec, BindingStatus>;

/// Which of the twin kinds an object is: namespaced (PropagationPolicy,
/// ResourceBinding) or cluster-scoped (ClusterPropagationPolicy,
/// ClusterResourceBinding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespaced,
    Cluster,
}

pub fn policy_resource(scope: Scope) -> ApiResource {
    let kind = match scope {
        Scope::Namespaced => "PropagationPolicy",
        Scope::Cluster => "ClusterPropagationPolicy",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(POLICY_GROUP, "v1alpha1", kind))
}

pub fn override_resource(scope: Scope) -> ApiResource {
    let kind = match scope {
        Scope::Namespaced => "OverridePolicy",
        Scope::Cluster => "ClusterOverridePolicy",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(POLICY_GROUP, "v1alpha1", kind))
}

pub fn binding_resource(scope: Scope) -> ApiResource {
    let kind = match scope {
        Scope::Namespaced => "ResourceBinding",
        Scope::Cluster => "ClusterResourceBinding",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(WORK_GROUP, "v1alpha2", kind))
}

// ----------------------------------------------------------------- Work

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "work.karmada.io",
    version = "v1alpha1",
    kind = "Work",
    namespaced,
    status = "WorkStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    pub workload: Workload,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_dispatching: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
}

/// The manifests as the JSON text they arrived in: a Work cache of
/// 100,000 Works holds them as text, several times smaller than parsed
/// trees; they are parsed where they are applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Workload {
    #[serde(default)]
    pub manifests: Vec<Box<RawValue>>,
}

impl Workload {
    pub fn new(manifests: &[Value]) -> Result<Workload, serde_json::Error> {
        Ok(Workload {
            manifests: manifests
                .iter()
                .map(serde_json::value::to_raw_value)
                .collect::<Result<_, _>>()?,
        })
    }

    /// The manifests, parsed; one that does not parse is skipped.
    pub fn parsed(&self) -> Vec<Value> {
        self.manifests
            .iter()
            .filter_map(|m| serde_json::from_str(m.get()).ok())
            .collect()
    }
}

/// Equal when the manifests say the same, however their text is laid out.
/// The same text is the same manifest: parsing both (each binding sync
/// compares each of its Works) is left for texts that differ.
impl PartialEq for Workload {
    fn eq(&self, other: &Workload) -> bool {
        self.manifests.len() == other.manifests.len()
            && (self
                .manifests
                .iter()
                .zip(&other.manifests)
                .all(|(a, b)| a.get() == b.get())
                || self.parsed() == other.parsed())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_statuses: Vec<ManifestStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManifestStatus {
    pub identifier: ResourceIdentifier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ResourceIdentifier {
    pub ordinal: i32,
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: String,
    pub name: String,
}

impl Work {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(texts: &[&str]) -> Workload {
        Workload {
            manifests: texts
                .iter()
                .map(|t| RawValue::from_string(t.to_string()).expect("valid JSON"))
                .collect(),
        }
    }

    #[test]
    fn workloads_are_equal_by_what_their_manifests_say_not_by_their_layout() {
        let a = r#"{"kind":"ConfigMap","data":{"k":"v"}}"#;
        assert_eq!(workload(&[a]), workload(&[a]));
        assert_eq!(
            workload(&[a]),
            workload(&[r#"{ "data": {"k": "v"}, "kind": "ConfigMap" }"#])
        );
        assert_ne!(
            workload(&[a]),
            workload(&[r#"{"kind":"ConfigMap","data":{"k":"w"}}"#])
        );
        assert_ne!(workload(&[a]), workload(&[a, a]));
    }
}
