//! The built-in kinds Flotilla serves, with upstream's scope, short names and
//! categories, and their OpenAPI schemas taken from k8s-openapi.

use k8s_openapi::api::{apps, batch, coordination, core, discovery, networking};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::resources::{Printer, ResourceInfo, Schema};

/// Discovery order of the built-in groups, as kube-apiserver lists them.
pub const GROUP_ORDER: &[&str] = &[
    "",
    "apiextensions.k8s.io",
    "apps",
    "batch",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "networking.k8s.io",
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
fn decode<T: DeserializeOwned>(v: &Value) -> Result<(), (String, String)> {
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
    ]
}

pub fn resources() -> Vec<ResourceInfo> {
    defs()
        .into_iter()
        .map(|d| ResourceInfo {
            group: d.group.into(),
            version: d.version.into(),
            plural: d.plural.into(),
            singular: d.singular.into(),
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
