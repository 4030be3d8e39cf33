//! Liqo's API (`core.liqo.io`, `authentication.liqo.io`,
//! `offloading.liqo.io`, all `v1beta1`), the contract between the peering
//! controllers of the two clusters: field names, labels and enums are
//! Liqo's own, so manifests and `kubectl get` habits carry over.
//! `NamespaceOffloading` is also served under `sharing.liqo.io/v1beta1`,
//! with the older field names (`podOffloadingPolicy`, a label-selector
//! `clusterSelector`) that manifests in circulation use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub const CORE_GROUP: &str = "core.liqo.io";
pub const AUTHENTICATION_GROUP: &str = "authentication.liqo.io";
pub const OFFLOADING_GROUP: &str = "offloading.liqo.io";
/// Where older manifests put NamespaceOffloading.
pub const SHARING_GROUP: &str = "sharing.liqo.io";
pub const VERSION: &str = "v1beta1";

/// Where a cluster's Liqo identity lives.
pub const LIQO_NAMESPACE: &str = "liqo";
/// The ConfigMap holding the cluster's ID (`CLUSTER_ID`).
pub const CLUSTER_ID_CONFIGMAP: &str = "liqo-clusterid-configmap";
pub const CLUSTER_ID_KEY: &str = "CLUSTER_ID";

/// The peer's cluster ID, on everything that concerns a peer.
pub const REMOTE_CLUSTER_ID: &str = "liqo.io/remote-cluster-id";
pub const TYPE_LABEL: &str = "liqo.io/type";
pub const TYPE_VIRTUAL_NODE: &str = "virtual-node";
/// The taint on virtual nodes, and the toleration offloaded pods get.
pub const NOT_ALLOWED_TAINT: &str = "virtual-node.liqo.io/not-allowed";
/// The namespace label that opts a namespace's pods into offloading.
pub const SCHEDULING_ENABLED: &str = "liqo.io/scheduling-enabled";
/// Marks tenant namespaces (a peer's room in this cluster).
pub const TENANT_NAMESPACE_LABEL: &str = "liqo.io/tenant-namespace";
/// On reflected objects and ShadowPods: the consumer and the provider.
pub const ORIGIN_LABEL: &str = "offloading.liqo.io/origin";
pub const DESTINATION_LABEL: &str = "offloading.liqo.io/destination";
/// On ShadowPods: the virtual node the consumer's pod is bound to.
pub const NODENAME_LABEL: &str = "offloading.liqo.io/nodename";
/// On the provider's pod made from a ShadowPod.
pub const MANAGED_BY_LABEL: &str = "liqo.io/managed-by";
pub const MANAGED_BY_SHADOWPOD: &str = "shadowpod";
/// On a consumer's pod that runs remotely.
pub const SHADOW_POD_LABEL: &str = "liqo.io/shadowPod";
/// The name Liqo reconciles a NamespaceOffloading under.
pub const DEFAULT_OFFLOADING_NAME: &str = "offloading";

/// A tenant namespace: the room of peer `cluster_id` in this cluster.
pub fn tenant_namespace(cluster_id: &str) -> String {
    format!("liqo-tenant-{cluster_id}")
}

/// The Node a provider's capacity appears as in the consumer.
pub fn virtual_node_name(provider_id: &str) -> String {
    format!("liqo-{provider_id}")
}

/// A Liqo condition (ForeignCluster's modules): a type and a status of
/// Liqo's own enum (`Established`, `Pending`, `Error`, `Ready`, `NotReady`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiqoCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl LiqoCondition {
    pub fn new(type_: &str, status: &str, reason: &str, message: &str) -> Self {
        LiqoCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(jiff::Timestamp::now())),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Sets `new` in `conditions` by type, keeping the transition time when
/// the status did not change; whether anything changed.
pub fn set_condition(conditions: &mut Vec<LiqoCondition>, mut new: LiqoCondition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) if c.status == new.status && c.reason == new.reason && c.message == new.message => {
            false
        }
        Some(c) => {
            if c.status == new.status {
                new.last_transition_time = c.last_transition_time.clone();
            }
            *c = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// A peer, as this cluster sees it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.liqo.io",
    version = "v1beta1",
    kind = "ForeignCluster",
    status = "ForeignClusterStatus"
)]
pub struct ForeignClusterSpec {
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForeignClusterStatus {
    /// What the peer is to this cluster: `Consumer` (it uses our
    /// resources), `Provider`, `ConsumerAndProvider` or `Unknown`.
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub modules: Modules,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_server_url: String,
    #[serde(default)]
    pub tenant_namespace: TenantNamespace,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<LiqoCondition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Modules {
    #[serde(default)]
    pub networking: Module,
    #[serde(default)]
    pub authentication: Module,
    #[serde(default)]
    pub offloading: Module,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Module {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<LiqoCondition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TenantNamespace {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub local: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote: String,
}

/// A consumer's request for a provider's resources, and the grant.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "authentication.liqo.io",
    version = "v1beta1",
    kind = "ResourceSlice",
    namespaced,
    status = "ResourceSliceStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    #[serde(
        default,
        rename = "consumerClusterID",
        skip_serializing_if = "Option::is_none"
    )]
    pub consumer_cluster_id: Option<String>,
    #[serde(
        default,
        rename = "providerClusterID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_cluster_id: Option<String>,
    /// What the consumer asks for (`cpu`, `memory`, `pods`); empty: all
    /// the provider shares.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceStatus {
    /// `Authentication` and `Resources`, each `Accepted` or `Denied`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<LiqoCondition>,
    /// What the provider grants.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
}

/// A provider's capacity as a Node of the consumer.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "offloading.liqo.io",
    version = "v1beta1",
    kind = "VirtualNode",
    namespaced,
    status = "VirtualNodeStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualNodeSpec {
    #[serde(default, rename = "clusterID")]
    pub cluster_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_node: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<LocalRef>,
    #[serde(default)]
    pub resource_quota: ResourceQuotaSpec,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LocalRef {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceQuotaSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hard: BTreeMap<String, Quantity>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct VirtualNodeStatus {
    /// `VirtualKubelet` and `Node`, each `None`, `Creating`, `Running`,
    /// `Draining` or `Deleting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<LiqoCondition>,
}

/// Which of a namespace's pods may leave the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodOffloading {
    Local,
    Remote,
    LocalAndRemote,
}

impl PodOffloading {
    pub fn as_str(self) -> &'static str {
        match self {
            PodOffloading::Local => "Local",
            PodOffloading::Remote => "Remote",
            PodOffloading::LocalAndRemote => "LocalAndRemote",
        }
    }
}

/// How a namespace is named in the providers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceMapping {
    DefaultName,
    EnforceSameName,
    SelectedName(String),
}

/// Which providers a namespace goes to.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterSelector {
    /// Liqo's: node selector terms over the VirtualNodes' labels.
    Terms(Vec<NodeSelectorTerm>),
    /// The older manifests': a label selector over the same labels.
    Labels(LabelSelector),
}

impl ClusterSelector {
    /// As node selector terms (ORed; a label selector is one term).
    pub fn terms(&self) -> Vec<NodeSelectorTerm> {
        match self {
            ClusterSelector::Terms(t) => t.clone(),
            ClusterSelector::Labels(s) => {
                let mut exprs: Vec<NodeSelectorRequirement> = s
                    .match_labels
                    .iter()
                    .flatten()
                    .map(|(k, v)| NodeSelectorRequirement {
                        key: k.clone(),
                        operator: "In".into(),
                        values: Some(vec![v.clone()]),
                    })
                    .collect();
                exprs.extend(s.match_expressions.iter().flatten().map(|r| {
                    NodeSelectorRequirement {
                        key: r.key.clone(),
                        operator: r.operator.clone(),
                        values: r.values.clone(),
                    }
                }));
                vec![NodeSelectorTerm {
                    match_expressions: Some(exprs),
                    ..Default::default()
                }]
            }
        }
    }

    /// Whether virtual node `node` is selected.
    pub fn selects(&self, node: &k8s_openapi::api::core::v1::Node) -> bool {
        let spec = json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": self.terms()}}}});
        serde_json::from_value::<flotilla_member::pod::PodSpec>(spec)
            .is_ok_and(|spec| flotilla_member::placement::matches_node_selector(node, &spec))
    }
}

/// A namespace to offload, with Liqo's current field names and the older
/// ones (`podOffloadingPolicy`, a label-selector `clusterSelector`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "offloading.liqo.io",
    version = "v1beta1",
    kind = "NamespaceOffloading",
    namespaced,
    status = "NamespaceOffloadingStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceOffloadingSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_mapping_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_namespace_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_offloading_strategy: Option<String>,
    /// The older name of `podOffloadingStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_offloading_policy: Option<String>,
    /// A NodeSelector (`nodeSelectorTerms`) or a LabelSelector
    /// (`matchLabels`, `matchExpressions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceOffloadingStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `NoClusterSelected`, `InProgress`, `SomeFailed`,
    /// `AllFailed` or `Terminating`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub offloading_phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_namespace_name: String,
    /// Per provider cluster ID: `OffloadingRequired` and `Ready`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub remote_namespaces_conditions: BTreeMap<String, Vec<LiqoCondition>>,
}

/// What a spec means, whichever field names it was written with; an
/// invalid value is an error naming the field.
#[derive(Clone, Debug, PartialEq)]
pub struct Offloading {
    pub pods: PodOffloading,
    pub mapping: NamespaceMapping,
    /// None: every provider.
    pub selector: Option<ClusterSelector>,
}

impl NamespaceOffloadingSpec {
    pub fn interpret(&self) -> Result<Offloading, String> {
        let pods = match self
            .pod_offloading_strategy
            .as_deref()
            .or(self.pod_offloading_policy.as_deref())
        {
            None | Some("") | Some("LocalAndRemote") => PodOffloading::LocalAndRemote,
            Some("Local") => PodOffloading::Local,
            Some("Remote") => PodOffloading::Remote,
            Some(other) => {
                return Err(format!(
                    "podOffloadingStrategy {other:?} is not one of Local, Remote, LocalAndRemote"
                ));
            }
        };
        let mapping = match self.namespace_mapping_strategy.as_deref() {
            None | Some("") | Some("DefaultName") => NamespaceMapping::DefaultName,
            Some("EnforceSameName") => NamespaceMapping::EnforceSameName,
            Some("SelectedName") => match self.remote_namespace_name.as_deref() {
                Some(n) if !n.is_empty() => NamespaceMapping::SelectedName(n.to_string()),
                _ => {
                    return Err(
                        "namespaceMappingStrategy SelectedName needs remoteNamespaceName".into(),
                    );
                }
            },
            Some(other) => {
                return Err(format!(
                    "namespaceMappingStrategy {other:?} is not one of DefaultName, EnforceSameName, SelectedName"
                ));
            }
        };
        let selector = match &self.cluster_selector {
            None => None,
            Some(v) if v.get("nodeSelectorTerms").is_some() => {
                let terms: Vec<NodeSelectorTerm> =
                    serde_json::from_value(v["nodeSelectorTerms"].clone())
                        .map_err(|e| format!("clusterSelector.nodeSelectorTerms: {e}"))?;
                (!terms.is_empty()).then_some(ClusterSelector::Terms(terms))
            }
            Some(v) => {
                let s: LabelSelector = serde_json::from_value(v.clone())
                    .map_err(|e| format!("clusterSelector: {e}"))?;
                let empty = s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                    && s.match_expressions.as_ref().is_none_or(Vec::is_empty);
                (!empty).then_some(ClusterSelector::Labels(s))
            }
        };
        Ok(Offloading {
            pods,
            mapping,
            selector,
        })
    }
}

/// The remote namespace's name for namespace `ns` of consumer `consumer`.
pub fn remote_namespace(mapping: &NamespaceMapping, ns: &str, consumer: &str) -> String {
    match mapping {
        NamespaceMapping::DefaultName => format!("{ns}-{consumer}"),
        NamespaceMapping::EnforceSameName => ns.to_string(),
        NamespaceMapping::SelectedName(n) => n.clone(),
    }
}

/// The consumer's wish for namespaces in the provider, in its tenant
/// namespace there; the provider creates them and says how it went.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "offloading.liqo.io",
    version = "v1beta1",
    kind = "NamespaceMap",
    namespaced,
    status = "NamespaceMapStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceMapSpec {
    /// Consumer namespace to provider namespace.
    #[serde(default)]
    pub desired_mapping: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceMapStatus {
    #[serde(default)]
    pub current_mapping: BTreeMap<String, RemoteNamespaceStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteNamespaceStatus {
    pub remote_namespace: String,
    /// `Accepted`, `CreationLoopBackOff` or `Terminating`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A consumer's pod, as the provider keeps it: the provider runs it even
/// while the consumer is unreachable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "offloading.liqo.io",
    version = "v1beta1",
    kind = "ShadowPod",
    namespaced,
    status = "ShadowPodStatus"
)]
pub struct ShadowPodSpec {
    pub pod: PodSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ShadowPodStatus {
    #[serde(default)]
    pub phase: String,
}

/// One CRD in Liqo's category, with an open schema (the controllers read
/// the fields they need with the types above).
fn crd(
    group: &'static str,
    (kind, plural): (&str, &str),
    namespaced: bool,
    short: &[&str],
    columns: Vec<Value>,
) -> Value {
    use flotilla_core::crd::{Kind, age};
    let mut columns = columns;
    columns.push(age());
    let mut crd = Kind {
        group,
        version: VERSION,
        kind: kind.into(),
        plural: plural.into(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
        categories: &[],
        columns,
        spec: flotilla_core::crd::open_schema(),
    }
    .crd();
    crd["spec"]["names"]["categories"] = json!(["liqo"]);
    crd
}

/// Every CRD a peered cluster serves (consumer and provider alike).
pub fn crds() -> Vec<Value> {
    use flotilla_core::crd::column;
    let condition = |name: &str, type_: &str| {
        column(
            name,
            "string",
            &format!(".status.conditions[?(@.type==\"{type_}\")].status"),
        )
    };
    let offloading_columns = || {
        vec![
            column(
                "NamespaceMappingStrategy",
                "string",
                ".spec.namespaceMappingStrategy",
            ),
            column(
                "PodOffloadingStrategy",
                "string",
                ".spec.podOffloadingStrategy",
            ),
            column("OffloadingPhase", "string", ".status.offloadingPhase"),
        ]
    };
    vec![
        crd(
            CORE_GROUP,
            ("ForeignCluster", "foreignclusters"),
            false,
            &["fc"],
            vec![
                column("Role", "string", ".status.role"),
                column("ClusterID", "string", ".spec.clusterID"),
            ],
        ),
        crd(
            AUTHENTICATION_GROUP,
            ("ResourceSlice", "resourceslices"),
            true,
            &["rslice"],
            vec![
                condition("Authentication", "Authentication"),
                condition("Resources", "Resources"),
            ],
        ),
        crd(
            OFFLOADING_GROUP,
            ("VirtualNode", "virtualnodes"),
            true,
            &["vn", "vnode"],
            vec![
                column("ClusterID", "string", ".spec.clusterID"),
                column("Create Node", "boolean", ".spec.createNode"),
            ],
        ),
        crd(
            OFFLOADING_GROUP,
            ("NamespaceOffloading", "namespaceoffloadings"),
            true,
            &["nso", "nsof"],
            offloading_columns(),
        ),
        crd(
            SHARING_GROUP,
            ("NamespaceOffloading", "namespaceoffloadings"),
            true,
            &[],
            offloading_columns(),
        ),
        crd(
            OFFLOADING_GROUP,
            ("NamespaceMap", "namespacemaps"),
            true,
            &["nm"],
            vec![],
        ),
        crd(
            OFFLOADING_GROUP,
            ("ShadowPod", "shadowpods"),
            true,
            &["shp", "shpod"],
            vec![column("Status", "string", ".status.phase")],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> NamespaceOffloadingSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn older_and_current_field_names_mean_the_same() {
        let old = spec(json!({"clusterSelector": {"matchLabels": {}},
            "podOffloadingPolicy": "LocalAndRemote"}))
        .interpret()
        .unwrap();
        assert_eq!(old.pods, PodOffloading::LocalAndRemote);
        assert_eq!(old.selector, None, "an empty label selector selects all");
        let current = spec(json!({"podOffloadingStrategy": "Remote",
            "namespaceMappingStrategy": "EnforceSameName",
            "clusterSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "region", "operator": "In", "values": ["eu"]}]}]}}))
        .interpret()
        .unwrap();
        assert_eq!(current.pods, PodOffloading::Remote);
        assert_eq!(current.mapping, NamespaceMapping::EnforceSameName);
        assert!(matches!(current.selector, Some(ClusterSelector::Terms(t)) if t.len() == 1));
    }

    #[test]
    fn invalid_values_name_the_field() {
        let e = spec(json!({"podOffloadingStrategy": "Everywhere"}))
            .interpret()
            .unwrap_err();
        assert!(e.contains("podOffloadingStrategy"), "{e}");
        let e = spec(json!({"namespaceMappingStrategy": "SelectedName"}))
            .interpret()
            .unwrap_err();
        assert!(e.contains("remoteNamespaceName"), "{e}");
    }

    #[test]
    fn remote_names_follow_the_mapping() {
        assert_eq!(
            remote_namespace(&NamespaceMapping::DefaultName, "shop", "east"),
            "shop-east"
        );
        assert_eq!(
            remote_namespace(&NamespaceMapping::EnforceSameName, "shop", "east"),
            "shop"
        );
    }
}
