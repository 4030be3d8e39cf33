//! Argo CD's kinds on the hub (`argoproj.io/v1alpha1`): Application and
//! ApplicationSet, with open schemas and Argo CD's names, short names and
//! columns; an Application's top-level `operation` (a requested sync) is
//! kept as written.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use flotilla_core::crd::{Kind, age, column, open_schema};

pub const GROUP: &str = "argoproj.io";
pub const VERSION: &str = "v1alpha1";
/// Argo CD's tracking label on what an Application deploys.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Argo CD's label on the Applications an ApplicationSet generates.
pub const APPSET_LABEL: &str = "argocd.argoproj.io/application-set-name";
/// Argo CD's finalizer: deleting the Application deletes what it deployed.
pub const RESOURCES_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";
/// Argo CD's Secret label marking a cluster Secret.
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// The in-cluster destination: the cluster Argo CD runs in.
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// On a Work: the Application it carries.
pub const APP_NAMESPACE_LABEL: &str = "argocd.flotilla.io/application-namespace";
pub const APP_NAME_LABEL: &str = "argocd.flotilla.io/application-name";
pub const FIELD_MANAGER: &str = "flotilla-argocd";

pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "Application"),
        "applications",
    )
}

pub fn application_set_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "ApplicationSet"),
        "applicationsets",
    )
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            group: GROUP,
            version: VERSION,
            kind: "Application".into(),
            plural: "applications".into(),
            short_names: vec!["app".into(), "apps".into()],
            namespaced: true,
            categories: &[],
            columns: vec![
                column("Sync Status", "string", ".status.sync.status"),
                column("Health Status", "string", ".status.health.status"),
                column("Revision", "string", ".status.sync.revision"),
                age(),
            ],
            spec: open_schema(),
        },
        Kind {
            group: GROUP,
            version: VERSION,
            kind: "ApplicationSet".into(),
            plural: "applicationsets".into(),
            short_names: vec!["appset".into(), "appsets".into()],
            namespaced: true,
            categories: &[],
            columns: vec![age()],
            spec: open_schema(),
        },
    ]
}

/// The Application and ApplicationSet CRDs, as manifests.
pub fn crds() -> Vec<Value> {
    kinds()
        .iter()
        .map(|k| {
            let mut crd = k.crd();
            if k.kind == "Application"
                && let Some(props) = crd
                    .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties")
                    .and_then(Value::as_object_mut)
            {
                props.insert("operation".into(), open_schema());
            }
            crd
        })
        .collect()
}

/// Argo CD's condition entry (Application and ApplicationSet alike, the
/// latter with `status` and `reason`).
pub fn app_condition(type_: &str, message: &str, time: &Value) -> Value {
    json!({"type": type_, "message": message, "lastTransitionTime": time})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    #[test]
    fn crds_parse_with_argo_cds_names_and_keep_operation() {
        let crds: Vec<CustomResourceDefinition> = crds()
            .into_iter()
            .map(|m| serde_json::from_value(m).unwrap())
            .collect();
        let names: Vec<&str> = crds
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(
            names,
            ["applications.argoproj.io", "applicationsets.argoproj.io"]
        );
        let schema = serde_json::to_value(&crds[0].spec.versions[0].schema).unwrap();
        assert!(
            schema
                .pointer("/openAPIV3Schema/properties/operation")
                .is_some()
        );
    }
}
