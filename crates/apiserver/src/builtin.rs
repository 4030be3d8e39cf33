//! The built-in kinds Flotilla serves, with upstream's scope, short names and
//! categories, and their OpenAPI schemas taken from k8s-openapi.

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, flowcontrol, networking, node, policy, rbac, scheduling,
    storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::resources::{Computed, Printer, ResourceInfo, Schema};

/// Discovery order of the built-in groups, as kube-apiserver lists them.
pub const GROUP_ORDER: &[&str] = &[
    "",
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
];

/// A built-in kind's Rust type, for schemas and decode checks.
pub struct BuiltinType {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub component: &'static str,
    pub schema: fn(&mut SchemaGenerator) -> schemars::Schema,
}

/// Checks that `v` decodes as `T`; on failure, the field's dotted path and why.
/// Tracking the path costs as much as the decode itself (a string per
/// field visited), and almost every object decodes: the path is looked
/// for only once a plain decode has failed.
fn decode<T: DeserializeOwned>(v: &Value) -> Result<(), (String, String)> {
    if T::deserialize(v).is_ok() {
        return Ok(());
    }
    serde_path_to_error::deserialize::<_, T>(v)
        .map(|_| ())
        .map_err(|e| (e.path().to_string(), e.inner().to_string()))
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<T>()
}

struct Def {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    generation: bool,
    computed: Option<Computed>,
    component: &'static str,
    decode: fn(&Value) -> Result<(), (String, String)>,
    schema: fn(&mut SchemaGenerator) -> schemars::Schema,
}

macro_rules! def {
    ($ty:ty, $group:literal, $version:literal, $plural:literal, $singular:literal, $kind:literal,
     namespaced: $ns:literal, short: $short:expr, categories: $cat:expr, status: $status:literal,
     generation: $gen:literal, component: $comp:literal) => {
        Def {
            group: $group,
            version: $version,
            plural: $plural,
            singular: $singular,
            kind: $kind,
            namespaced: $ns,
            short: $short,
            categories: $cat,
            status: $status,
            generation: $gen,
            computed: None,
            component: $comp,
            decode: decode::<$ty>,
            schema: schema::<$ty>,
        }
    };
}

/// A review or request kind: create-only, nothing stored (`reviews.rs`).
macro_rules! review {
    ($ty:ty, $group:literal, $plural:literal, $kind:literal, namespaced: $ns:literal, component: $comp:literal) => {
        review!($ty, $group, $plural, $kind, namespaced: $ns, component: $comp, computed: Computed::Review)
    };
    ($ty:ty, $group:literal, $plural:literal, $kind:literal, namespaced: $ns:literal, component: $comp:literal, computed: $computed:expr) => {
        Def {
            group: $group,
            version: "v1",
            plural: $plural,
            singular: "",
            kind: $kind,
            namespaced: $ns,
            short: &[],
            categories: &[],
            status: false,
            generation: false,
            computed: Some($computed),
            component: $comp,
            decode: decode::<$ty>,
            schema: schema::<$ty>,
        }
    };
}

fn defs() -> Vec<Def> {
    const ALL: &[&str] = &["all"];
    const NONE: &[&str] = &[];
    vec![
        def!(core::v1::Namespace, "", "v1", "namespaces", "namespace", "Namespace",
             namespaced: false, short: &["ns"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.core.v1.Namespace"),
        def!(core::v1::ConfigMap, "", "v1", "configmaps", "configmap", "ConfigMap",
             namespaced: true, short: &["cm"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.ConfigMap"),
        def!(core::v1::Secret, "", "v1", "secrets", "secret", "Secret",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.Secret"),
        def!(core::v1::ServiceAccount, "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount",
             namespaced: true, short: &["sa"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.ServiceAccount"),
        def!(core::v1::Service, "", "v1", "services", "service", "Service",
             namespaced: true, short: &["svc"], categories: ALL, status: true, generation: false,
             component: "io.k8s.api.core.v1.Service"),
        def!(core::v1::Endpoints, "", "v1", "endpoints", "endpoints", "Endpoints",
             namespaced: true, short: &["ep"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.Endpoints"),
        def!(core::v1::Event, "", "v1", "events", "event", "Event",
             namespaced: true, short: &["ev"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.Event"),
        def!(core::v1::Pod, "", "v1", "pods", "pod", "Pod",
             namespaced: true, short: &["po"], categories: ALL, status: true, generation: false,
             component: "io.k8s.api.core.v1.Pod"),
        def!(core::v1::Node, "", "v1", "nodes", "node", "Node",
             namespaced: false, short: &["no"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.core.v1.Node"),
        def!(core::v1::PersistentVolumeClaim, "", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
             namespaced: true, short: &["pvc"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.core.v1.PersistentVolumeClaim"),
        def!(core::v1::PersistentVolume, "", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume",
             namespaced: false, short: &["pv"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.core.v1.PersistentVolume"),
        def!(core::v1::ReplicationController, "", "v1", "replicationcontrollers", "replicationcontroller", "ReplicationController",
             namespaced: true, short: &["rc"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.core.v1.ReplicationController"),
        def!(CustomResourceDefinition, "apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition",
             namespaced: false, short: &["crd", "crds"], categories: &["api-extensions"], status: true, generation: true,
             component: "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"),
        def!(apps::v1::Deployment, "apps", "v1", "deployments", "deployment", "Deployment",
             namespaced: true, short: &["deploy"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.apps.v1.Deployment"),
        def!(apps::v1::ReplicaSet, "apps", "v1", "replicasets", "replicaset", "ReplicaSet",
             namespaced: true, short: &["rs"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.apps.v1.ReplicaSet"),
        def!(apps::v1::StatefulSet, "apps", "v1", "statefulsets", "statefulset", "StatefulSet",
             namespaced: true, short: &["sts"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.apps.v1.StatefulSet"),
        def!(apps::v1::DaemonSet, "apps", "v1", "daemonsets", "daemonset", "DaemonSet",
             namespaced: true, short: &["ds"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.apps.v1.DaemonSet"),
        def!(batch::v1::Job, "batch", "v1", "jobs", "job", "Job",
             namespaced: true, short: NONE, categories: ALL, status: true, generation: true,
             component: "io.k8s.api.batch.v1.Job"),
        def!(batch::v1::CronJob, "batch", "v1", "cronjobs", "cronjob", "CronJob",
             namespaced: true, short: &["cj"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.batch.v1.CronJob"),
        def!(coordination::v1::Lease, "coordination.k8s.io", "v1", "leases", "lease", "Lease",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.coordination.v1.Lease"),
        def!(discovery::v1::EndpointSlice, "discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.discovery.v1.EndpointSlice"),
        def!(networking::v1::Ingress, "networking.k8s.io", "v1", "ingresses", "ingress", "Ingress",
             namespaced: true, short: &["ing"], categories: ALL, status: true, generation: true,
             component: "io.k8s.api.networking.v1.Ingress"),
        // Stored, validated against their schemas and served with their
        // subresources; what each does beyond storage is in
        // docs/compatibility.md ("Built-in kinds").
        def!(core::v1::PodTemplate, "", "v1", "podtemplates", "podtemplate", "PodTemplate",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.PodTemplate"),
        def!(core::v1::LimitRange, "", "v1", "limitranges", "limitrange", "LimitRange",
             namespaced: true, short: &["limits"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.core.v1.LimitRange"),
        def!(core::v1::ResourceQuota, "", "v1", "resourcequotas", "resourcequota", "ResourceQuota",
             namespaced: true, short: &["quota"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.core.v1.ResourceQuota"),
        def!(apps::v1::ControllerRevision, "apps", "v1", "controllerrevisions", "controllerrevision", "ControllerRevision",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.apps.v1.ControllerRevision"),
        def!(autoscaling::v2::HorizontalPodAutoscaler, "autoscaling", "v2", "horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler",
             namespaced: true, short: &["hpa"], categories: ALL, status: true, generation: false,
             component: "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler"),
        def!(events::v1::Event, "events.k8s.io", "v1", "events", "event", "Event",
             namespaced: true, short: &["ev"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.events.v1.Event"),
        def!(autoscaling::v1::HorizontalPodAutoscaler, "autoscaling", "v1", "horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler",
             namespaced: true, short: &["hpa"], categories: ALL, status: true, generation: false,
             component: "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler"),
        def!(policy::v1::PodDisruptionBudget, "policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
             namespaced: true, short: &["pdb"], categories: NONE, status: true, generation: true,
             component: "io.k8s.api.policy.v1.PodDisruptionBudget"),
        def!(rbac::v1::Role, "rbac.authorization.k8s.io", "v1", "roles", "role", "Role",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.rbac.v1.Role"),
        def!(rbac::v1::ClusterRole, "rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.rbac.v1.ClusterRole"),
        def!(rbac::v1::RoleBinding, "rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.rbac.v1.RoleBinding"),
        def!(rbac::v1::ClusterRoleBinding, "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.rbac.v1.ClusterRoleBinding"),
        def!(networking::v1::NetworkPolicy, "networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy",
             namespaced: true, short: &["netpol"], categories: NONE, status: false, generation: true,
             component: "io.k8s.api.networking.v1.NetworkPolicy"),
        def!(networking::v1::IngressClass, "networking.k8s.io", "v1", "ingressclasses", "ingressclass", "IngressClass",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.networking.v1.IngressClass"),
        def!(storage::v1::StorageClass, "storage.k8s.io", "v1", "storageclasses", "storageclass", "StorageClass",
             namespaced: false, short: &["sc"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.storage.v1.StorageClass"),
        def!(storage::v1::CSIDriver, "storage.k8s.io", "v1", "csidrivers", "csidriver", "CSIDriver",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.storage.v1.CSIDriver"),
        def!(storage::v1::CSINode, "storage.k8s.io", "v1", "csinodes", "csinode", "CSINode",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.storage.v1.CSINode"),
        def!(storage::v1::CSIStorageCapacity, "storage.k8s.io", "v1", "csistoragecapacities", "csistoragecapacity", "CSIStorageCapacity",
             namespaced: true, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.storage.v1.CSIStorageCapacity"),
        def!(storage::v1::VolumeAttachment, "storage.k8s.io", "v1", "volumeattachments", "volumeattachment", "VolumeAttachment",
             namespaced: false, short: NONE, categories: NONE, status: true, generation: false,
             component: "io.k8s.api.storage.v1.VolumeAttachment"),
        def!(scheduling::v1::PriorityClass, "scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass",
             namespaced: false, short: &["pc"], categories: NONE, status: false, generation: false,
             component: "io.k8s.api.scheduling.v1.PriorityClass"),
        def!(node::v1::RuntimeClass, "node.k8s.io", "v1", "runtimeclasses", "runtimeclass", "RuntimeClass",
             namespaced: false, short: NONE, categories: NONE, status: false, generation: false,
             component: "io.k8s.api.node.v1.RuntimeClass"),
        def!(certificates::v1::CertificateSigningRequest, "certificates.k8s.io", "v1", "certificatesigningrequests", "certificatesigningrequest", "CertificateSigningRequest",
             namespaced: false, short: &["csr"], categories: NONE, status: true, generation: false,
             component: "io.k8s.api.certificates.v1.CertificateSigningRequest"),
        def!(admissionregistration::v1::MutatingWebhookConfiguration, "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", "MutatingWebhookConfiguration",
             namespaced: false, short: NONE, categories: &["api-extensions"], status: false, generation: true,
             component: "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration"),
        def!(admissionregistration::v1::ValidatingWebhookConfiguration, "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "validatingwebhookconfiguration", "ValidatingWebhookConfiguration",
             namespaced: false, short: NONE, categories: &["api-extensions"], status: false, generation: true,
             component: "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration"),
        def!(admissionregistration::v1::ValidatingAdmissionPolicy, "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "validatingadmissionpolicy", "ValidatingAdmissionPolicy",
             namespaced: false, short: NONE, categories: &["api-extensions"], status: true, generation: true,
             component: "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy"),
        def!(admissionregistration::v1::ValidatingAdmissionPolicyBinding, "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding",
             namespaced: false, short: NONE, categories: &["api-extensions"], status: false, generation: true,
             component: "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding"),
        def!(APIService, "apiregistration.k8s.io", "v1", "apiservices", "apiservice", "APIService",
             namespaced: false, short: NONE, categories: &["api-extensions"], status: true, generation: false,
             component: "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService"),
        def!(flowcontrol::v1::FlowSchema, "flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "flowschema", "FlowSchema",
             namespaced: false, short: NONE, categories: NONE, status: true, generation: true,
             component: "io.k8s.api.flowcontrol.v1.FlowSchema"),
        review!(core::v1::Binding, "", "bindings", "Binding",
                namespaced: true, component: "io.k8s.api.core.v1.Binding", computed: Computed::Binding),
        Def {
            short: &["cs"],
            ..review!(core::v1::ComponentStatus, "", "componentstatuses", "ComponentStatus",
                      namespaced: false, component: "io.k8s.api.core.v1.ComponentStatus",
                      computed: Computed::ComponentStatus)
        },
        review!(authentication::v1::TokenReview, "authentication.k8s.io", "tokenreviews", "TokenReview",
                namespaced: false, component: "io.k8s.api.authentication.v1.TokenReview"),
        review!(authentication::v1::SelfSubjectReview, "authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview",
                namespaced: false, component: "io.k8s.api.authentication.v1.SelfSubjectReview"),
        review!(authorization::v1::SubjectAccessReview, "authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview",
                namespaced: false, component: "io.k8s.api.authorization.v1.SubjectAccessReview"),
        review!(authorization::v1::SelfSubjectAccessReview, "authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
                namespaced: false, component: "io.k8s.api.authorization.v1.SelfSubjectAccessReview"),
        review!(authorization::v1::LocalSubjectAccessReview, "authorization.k8s.io", "localsubjectaccessreviews", "LocalSubjectAccessReview",
                namespaced: true, component: "io.k8s.api.authorization.v1.LocalSubjectAccessReview"),
        review!(authorization::v1::SelfSubjectRulesReview, "authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
                namespaced: false, component: "io.k8s.api.authorization.v1.SelfSubjectRulesReview"),
        def!(flowcontrol::v1::PriorityLevelConfiguration, "flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", "prioritylevelconfiguration", "PriorityLevelConfiguration",
             namespaced: false, short: NONE, categories: NONE, status: true, generation: true,
             component: "io.k8s.api.flowcontrol.v1.PriorityLevelConfiguration"),
    ]
}

/// The built-in kind of `group` served as `plural`, for unit tests.
#[cfg(test)]
pub fn resource(group: &str, plural: &str) -> ResourceInfo {
    resources()
        .into_iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap_or_else(|| panic!("no built-in {plural}.{group}"))
}

pub fn resources() -> Vec<ResourceInfo> {
    defs()
        .into_iter()
        .map(|d| ResourceInfo {
            group: d.group.into(),
            version: d.version.into(),
            plural: d.plural.into(),
            singular: match d.singular {
                "" => d.kind.to_lowercase(),
                s => s.into(),
            },
            kind: d.kind.into(),
            list_kind: format!("{}List", d.kind),
            namespaced: d.namespaced,
            short_names: d.short.iter().map(|s| s.to_string()).collect(),
            categories: d.categories.iter().map(|s| s.to_string()).collect(),
            status_subresource: d.status,
            uses_generation: d.generation,
            custom: false,
            printer: Printer::Builtin,
            schema: Schema::Builtin {
                component: d.component,
                decode: d.decode,
            },
            selectable_fields: Vec::new(),
            scale: matches!(d.plural, "deployments" | "replicasets" | "statefulsets")
                .then(crate::resources::ScalePaths::workload),
            computed: d.computed,
            conversion: crate::conversion::for_version(d.group, d.version, d.plural),
            added_subresources: Vec::new(),
        })
        .collect()
}

pub fn types() -> Vec<BuiltinType> {
    defs()
        .into_iter()
        .map(|d| BuiltinType {
            group: d.group,
            version: d.version,
            kind: d.kind,
            component: d.component,
            schema: d.schema,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    #[test]
    fn a_type_check_names_the_field_that_does_not_decode() {
        let good = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        });
        assert_eq!(decode::<Deployment>(&good), Ok(()));
        let mut bad = good.clone();
        bad["spec"]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": "eighty"}]);
        let (field, why) = decode::<Deployment>(&bad).unwrap_err();
        assert_eq!(
            field,
            "spec.template.spec.containers[0].ports[0].containerPort"
        );
        assert!(why.contains("invalid type"), "{why}");
        let mut bad = good;
        bad["metadata"]["labels"] = json!(["app"]);
        let (field, _) = decode::<Deployment>(&bad).unwrap_err();
        assert_eq!(field, "metadata.labels");
    }
}
