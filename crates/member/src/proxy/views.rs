//! Minimal views of the cross-cluster resources the member's data plane
//! reads: the MCS API's ServiceImport (written into the member by the
//! hub's MCS controller) and Submariner Globalnet's GlobalIngressIP.
//! Local on purpose: the member does not depend on the federation crate,
//! and reads only the fields it acts on. Every field has a default, so
//! an object written by another implementation (or half-written) still
//! reads, rather than failing the whole watch.

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The label of an import's EndpointSlices naming their ServiceImport
/// (a Service's own slices have `kubernetes.io/service-name` instead).
pub const IMPORT_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";

/// `multicluster.x-k8s.io/v1alpha1` ServiceImport: a service of the
/// clusterset, reached at its ClusterSetIPs (`ips`) or, when Headless,
/// by DNS only.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceImport",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    /// ClusterSetIP or Headless.
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub ports: Vec<ImportPort>,
    #[serde(default)]
    pub session_affinity: Option<String>,
    #[serde(default)]
    pub session_affinity_config: Option<SessionAffinityConfig>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImportPort {
    /// The exported Service's port name: the import slices' ports carry
    /// the same names, which is how target ports resolve.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub port: i32,
}

/// `submariner.io/v1` GlobalIngressIP: a global address Globalnet gave
/// to an exported Service (target `ClusterIPService`) or a headless
/// Service's pod (`HeadlessServicePod`, not handled here).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "submariner.io",
    version = "v1",
    kind = "GlobalIngressIP",
    namespaced,
    status = "GlobalIngressIPStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalIngressIPSpec {
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub service_ref: Option<LocalRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LocalRef {
    #[serde(default)]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GlobalIngressIPStatus {
    #[serde(default, rename = "allocatedIP")]
    pub allocated_ip: Option<String>,
}
