//! The Multi-Cluster Services API (`multicluster.x-k8s.io/v1alpha1`,
//! KEP-1645) and the cluster identity of KEP-2149 (`about.k8s.io`), as
//! CRDs Flotilla installs on the hub and in every member.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube_derive::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::crd::{Kind, age, column};

pub const GROUP: &str = "multicluster.x-k8s.io";
/// The label of an import's EndpointSlices naming their ServiceImport.
pub const SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
/// The label of an import's EndpointSlices naming their source cluster.
pub const SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";
/// Marks what Flotilla's MCS controller made (imports and their slices).
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "mcs.flotilla.io";
/// KEP-2149: the ClusterProperty holding a member's cluster id.
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";

/// Exports the Service of the same namespace and name. Written by hand
/// rather than derived: a ServiceExport usually has no `spec` at all,
/// which the derived type would refuse to read.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ServiceExport {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceExportSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceExportStatus>,
}

impl kube_core::Resource for ServiceExport {
    type DynamicType = ();
    type Scope = kube_core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ServiceExport".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "serviceexports".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// `exportedLabels` and `exportedAnnotations` (v1beta1): copied onto the
/// derived ServiceImport. Other fields are kept as given.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ServiceExportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A service of the clusterset, as every member sees it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceImport",
    namespaced,
    status = "ServiceImportStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    #[serde(default)]
    pub ports: Vec<ImportPort>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// ClusterSetIP or Headless.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<Value>,
    /// v1beta1: the winning Service's, as the MCS conformance suite checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImportPort {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default)]
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    pub port: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ServiceImportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ImportCluster>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ImportCluster {
    pub cluster: String,
}

/// Karmada's MultiClusterService (`networking.karmada.io/v1alpha1`), on
/// the hub: with type CrossCluster, the Service of the same name is
/// exported from the provider clusters and imported in the consumer
/// clusters (every cluster when a list is empty).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "networking.karmada.io",
    version = "v1alpha1",
    kind = "MultiClusterService",
    namespaced,
    status = "MultiClusterServiceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServiceSpec {
    #[serde(default)]
    pub types: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_clusters: Vec<ClusterName>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumer_clusters: Vec<ClusterName>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterName {
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MultiClusterServiceStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl MultiClusterService {
    pub fn cross_cluster(&self) -> bool {
        self.spec.types.iter().any(|t| t == "CrossCluster")
    }

    /// Whether `cluster` provides (exports) the service.
    pub fn provides(&self, cluster: &str) -> bool {
        self.cross_cluster()
            && (self.spec.provider_clusters.is_empty()
                || self
                    .spec
                    .provider_clusters
                    .iter()
                    .any(|c| c.name == cluster))
    }

    /// Whether `cluster` consumes (imports) the service.
    pub fn consumes(&self, cluster: &str) -> bool {
        self.spec.consumer_clusters.is_empty()
            || self
                .spec
                .consumer_clusters
                .iter()
                .any(|c| c.name == cluster)
    }
}

/// KEP-2149's ClusterProperty (`about.k8s.io/v1alpha1`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "about.k8s.io",
    version = "v1alpha1",
    kind = "ClusterProperty",
    schema = "disabled"
)]
pub struct ClusterPropertySpec {
    pub value: String,
}

fn crd(
    group: &'static str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    spec: Value,
) -> Value {
    let mut manifest = Kind {
        group,
        version: "v1alpha1",
        kind: kind.into(),
        plural: plural.into(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
        categories: &[],
        columns: if kind == "ServiceImport" {
            // mcs-api's columns: `kubectl get serviceimport` shows the
            // type and the ClusterSetIPs.
            vec![
                column("Type", "string", ".spec.type"),
                column("IP", "string", ".spec.ips"),
                age(),
            ]
        } else {
            vec![age()]
        },
        spec,
    }
    .crd();
    if kind == "ServiceExport" {
        // A ServiceExport usually has no spec at all.
        if let Some(schema) = manifest
            .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
            .and_then(Value::as_object_mut)
        {
            schema.remove("required");
        }
    }
    if group == GROUP {
        // v1beta1 is served beside v1alpha1 with the same objects (no
        // conversion: its new fields are optional), as mcs-api's CRDs do.
        if let Some(versions) = manifest
            .pointer_mut("/spec/versions")
            .and_then(Value::as_array_mut)
            && let Some(mut beta) = versions.first().cloned()
        {
            beta["name"] = "v1beta1".into();
            beta["storage"] = false.into();
            versions.push(beta);
        }
    }
    manifest
}

/// The CRDs of the MCS API and of cluster identity.
pub fn crds() -> Vec<Value> {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    vec![
        crd(
            GROUP,
            "ServiceExport",
            "serviceexports",
            true,
            &["svcex"],
            open,
        ),
        crd(
            GROUP,
            "ServiceImport",
            "serviceimports",
            true,
            &["svcim"],
            json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": ["ClusterSetIP", "Headless"]},
                    "ips": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                    "ports": {"type": "array", "items": {
                        "type": "object",
                        "required": ["port"],
                        "properties": {
                            "name": {"type": "string"},
                            "protocol": {"type": "string"},
                            "appProtocol": {"type": "string"},
                            "port": {"type": "integer", "format": "int32"},
                        },
                    }},
                    "sessionAffinity": {"type": "string"},
                    "sessionAffinityConfig": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            }),
        ),
        crd(
            "about.k8s.io",
            "ClusterProperty",
            "clusterproperties",
            false,
            &[],
            json!({"type": "object", "required": ["value"], "properties": {"value": {"type": "string", "maxLength": 128000}}}),
        ),
    ]
}
