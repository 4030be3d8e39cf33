//! KubeFed's kinds on the hub: one `Federated<Kind>` CRD per type of the
//! set KubeFed enables by default, generated from [`TYPES`], with an open
//! schema; `FederatedTypeConfig` (`core.kubefed.io/v1beta1`) and one
//! object of it per type in `kube-federation-system`.

use serde_json::{Value, json};

use flotilla_core::crd::{Kind, age, column, open_schema};

pub const TYPES_GROUP: &str = "types.kubefed.io";
pub const CORE_GROUP: &str = "core.kubefed.io";
pub const SCHEDULING_GROUP: &str = "scheduling.kubefed.io";
pub const VERSION: &str = "v1beta1";
/// Where KubeFed keeps its type configs (and, upstream, its clusters).
pub const SYSTEM_NAMESPACE: &str = "kube-federation-system";
/// KubeFed's annotation: deleting the federated object leaves the
/// members' copies in place.
pub const ORPHAN_ANNOTATION: &str = "kubefed.io/orphan";
/// KubeFed's label on what it manages.
pub const MANAGED_LABEL: &str = "kubefed.io/managed";
/// Marks the policies generated here, and names their source.
pub const GENERATED_BY: &str = "kubefed.flotilla.io/generated-from";
/// The hash of what was last written, to skip writes that change nothing.
pub const HASH_ANNOTATION: &str = "kubefed.flotilla.io/hash";
pub const FIELD_MANAGER: &str = "flotilla-kubefed";

/// A target type: what a `Federated<Kind>` propagates.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetType {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl TargetType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn federated_kind(&self) -> String {
        format!("Federated{}", self.kind)
    }

    pub fn federated_plural(&self) -> String {
        format!("federated{}", self.plural)
    }

    /// KubeFed names a type config `<plural>[.<group>]`.
    pub fn config_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The types KubeFed enables by default: (group, version, kind, plural,
/// namespaced). `FederatedNamespace` is namespaced in KubeFed although a
/// Namespace is not (its object is named after, and lives in, the
/// namespace it federates).
pub const TYPES: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    ("batch", "v1", "Job", "jobs", true),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
];

pub fn default_types() -> Vec<TargetType> {
    TYPES
        .iter()
        .map(|(group, version, kind, plural, namespaced)| TargetType {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            namespaced: *namespaced,
        })
        .collect()
}

/// Whether the federated kind is namespaced: every one but the
/// federated form of a cluster-scoped type, Namespace excepted.
pub fn federated_namespaced(t: &TargetType) -> bool {
    t.namespaced || t.kind == "Namespace"
}

fn federated_kind(t: &TargetType) -> Kind {
    Kind {
        group: TYPES_GROUP,
        version: VERSION,
        kind: t.federated_kind(),
        plural: t.federated_plural(),
        short_names: vec![],
        namespaced: federated_namespaced(t),
        categories: &[],
        columns: vec![age()],
        spec: open_schema(),
    }
}

fn type_config_kind() -> Kind {
    Kind {
        group: CORE_GROUP,
        version: VERSION,
        kind: "FederatedTypeConfig".into(),
        plural: "federatedtypeconfigs".into(),
        short_names: vec!["ftc".into()],
        namespaced: true,
        categories: &[],
        columns: vec![age()],
        spec: json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "required": ["federatedType", "targetType"],
            "properties": {
                "federatedType": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "targetType": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "propagation": {"type": "string", "enum": ["Enabled", "Disabled"]},
            },
        }),
    }
}

fn kubefed_cluster_kind() -> Kind {
    Kind {
        group: CORE_GROUP,
        version: VERSION,
        kind: "KubeFedCluster".into(),
        plural: "kubefedclusters".into(),
        short_names: vec![],
        namespaced: true,
        categories: &[],
        columns: vec![
            age(),
            column(
                "READY",
                "string",
                ".status.conditions[?(@.type=='Ready')].status",
            ),
        ],
        spec: open_schema(),
    }
}

fn rsp_kind() -> Kind {
    Kind {
        group: SCHEDULING_GROUP,
        version: "v1alpha1",
        kind: "ReplicaSchedulingPreference".into(),
        plural: "replicaschedulingpreferences".into(),
        short_names: vec!["rsp".into()],
        namespaced: true,
        categories: &[],
        columns: vec![age()],
        spec: json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "required": ["targetKind", "totalReplicas"],
            "properties": {
                "targetKind": {"type": "string"},
                "totalReplicas": {"type": "integer", "format": "int32"},
                "rebalance": {"type": "boolean"},
                "intersectWithClusterSelector": {"type": "boolean"},
                "clusters": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        }),
    }
}

/// Every KubeFed CRD, as manifests. A federated object may have no spec
/// (KubeFed's schemas do not require one).
pub fn crds() -> Vec<Value> {
    let mut out: Vec<Value> = default_types()
        .iter()
        .map(|t| {
            let mut crd = federated_kind(t).crd();
            flotilla_core::crd::spec_optional(&mut crd);
            crd
        })
        .collect();
    let mut ftc = type_config_kind();
    ftc.columns
        .insert(0, column("PROPAGATION", "string", ".spec.propagation"));
    out.push(ftc.crd());
    out.push(kubefed_cluster_kind().crd());
    out.push(rsp_kind().crd());
    out
}

/// The FederatedTypeConfig KubeFed writes for `t` when a type is enabled.
pub fn type_config(t: &TargetType) -> Value {
    let scope = |namespaced: bool| if namespaced { "Namespaced" } else { "Cluster" };
    let mut target = json!({
        "kind": t.kind,
        "pluralName": t.plural,
        "scope": scope(t.namespaced),
        "version": t.version,
    });
    if !t.group.is_empty() {
        target["group"] = json!(t.group);
    }
    json!({
        "apiVersion": format!("{CORE_GROUP}/{VERSION}"),
        "kind": "FederatedTypeConfig",
        "metadata": {"name": t.config_name(), "namespace": SYSTEM_NAMESPACE},
        "spec": {
            "federatedType": {
                "group": TYPES_GROUP,
                "kind": t.federated_kind(),
                "pluralName": t.federated_plural(),
                "scope": scope(federated_namespaced(t)),
                "version": VERSION,
            },
            "propagation": "Enabled",
            "targetType": target,
        },
    })
}

/// A type config's target type, when its propagation is enabled.
pub fn enabled_target(ftc: &Value) -> Option<TargetType> {
    let spec = ftc.get("spec")?;
    if spec.get("propagation").and_then(Value::as_str) == Some("Disabled") {
        return None;
    }
    let t = spec.get("targetType")?;
    let s = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_string);
    Some(TargetType {
        group: s("group").unwrap_or_default(),
        version: s("version")?,
        kind: s("kind")?,
        plural: s("pluralName")?,
        namespaced: s("scope").as_deref() != Some("Cluster"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    #[test]
    fn crds_parse_and_are_named_as_kubefeds() {
        let names: Vec<String> = crds()
            .into_iter()
            .map(|m| {
                let c: CustomResourceDefinition = serde_json::from_value(m).unwrap();
                c.metadata.name.unwrap()
            })
            .collect();
        for n in [
            "federateddeployments.types.kubefed.io",
            "federatedconfigmaps.types.kubefed.io",
            "federatedsecrets.types.kubefed.io",
            "federatedservices.types.kubefed.io",
            "federatednamespaces.types.kubefed.io",
            "federatedtypeconfigs.core.kubefed.io",
        ] {
            assert!(names.iter().any(|x| x == n), "{n}");
        }
    }

    #[test]
    fn type_configs_round_trip_their_target() {
        for t in default_types() {
            let ftc = type_config(&t);
            assert_eq!(enabled_target(&ftc), Some(t.clone()));
        }
        let d = &default_types()[5];
        assert_eq!(d.config_name(), "deployments.apps");
        assert_eq!(d.api_version(), "apps/v1");
        let mut off = type_config(d);
        off["spec"]["propagation"] = json!("Disabled");
        assert_eq!(enabled_target(&off), None);
    }
}
