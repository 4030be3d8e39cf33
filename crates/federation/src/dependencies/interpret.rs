//! What a workload template depends on, as Karmada's default interpreter
//! reads it (`GetDependencies`): the ConfigMaps, Secrets,
//! PersistentVolumeClaims and ServiceAccount its pod template names. No
//! I/O: the template's JSON in, the dependencies out.

use std::collections::BTreeSet;

use serde_json::Value;

/// One object a template needs in the same namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dependency {
    pub kind: &'static str,
    pub name: String,
}

/// The kind of a dependency as the interpreter names it ("" for a kind
/// that is never one).
pub fn kind_of(kind: &str) -> &'static str {
    match kind {
        "ConfigMap" => "ConfigMap",
        "Secret" => "Secret",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "ServiceAccount" => "ServiceAccount",
        _ => "",
    }
}

impl Dependency {
    pub fn api_version(&self) -> &'static str {
        "v1"
    }
}

/// Where each kind Karmada's default interpreter knows keeps its pod
/// template (a custom kind of the same name in another group has none).
fn pod_spec<'a>(api_version: &str, kind: &str, template: &'a Value) -> Option<&'a Value> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match (group, kind) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            template.pointer("/spec/template/spec")
        }
        ("batch", "CronJob") => template.pointer("/spec/jobTemplate/spec/template/spec"),
        ("", "Pod") => template.get("spec"),
        _ => None,
    }
}

/// The dependencies of a template of `api_version`/`kind`, sorted; none
/// for kinds without a pod template.
pub fn dependencies(api_version: &str, kind: &str, template: &Value) -> Vec<Dependency> {
    let Some(spec) = pod_spec(api_version, kind, template) else {
        return Vec::new();
    };
    let mut found = BTreeSet::new();
    let mut add = |kind: &'static str, name: Option<&Value>| {
        if let Some(name) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            found.insert(Dependency {
                kind,
                name: name.to_string(),
            });
        }
    };
    let items = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    for volume in items(spec.get("volumes")) {
        add("ConfigMap", volume.pointer("/configMap/name"));
        add("Secret", volume.pointer("/secret/secretName"));
        add(
            "PersistentVolumeClaim",
            volume.pointer("/persistentVolumeClaim/claimName"),
        );
        for source in items(volume.pointer("/projected/sources")) {
            add("ConfigMap", source.pointer("/configMap/name"));
            add("Secret", source.pointer("/secret/name"));
        }
        // Secrets volume plugins name for their credentials.
        for at in [
            "/csi/nodePublishSecretRef/name",
            "/azureFile/secretName",
            "/cephfs/secretRef/name",
            "/cinder/secretRef/name",
            "/flexVolume/secretRef/name",
            "/rbd/secretRef/name",
            "/iscsi/secretRef/name",
            "/scaleIO/secretRef/name",
            "/storageos/secretRef/name",
        ] {
            add("Secret", volume.pointer(at));
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for container in items(spec.get(list)) {
            for from in items(container.get("envFrom")) {
                add("ConfigMap", from.pointer("/configMapRef/name"));
                add("Secret", from.pointer("/secretRef/name"));
            }
            for env in items(container.get("env")) {
                add("ConfigMap", env.pointer("/valueFrom/configMapKeyRef/name"));
                add("Secret", env.pointer("/valueFrom/secretKeyRef/name"));
            }
        }
    }
    for secret in items(spec.get("imagePullSecrets")) {
        add("Secret", secret.get("name"));
    }
    // Every namespace has its `default` ServiceAccount.
    let account = spec
        .get("serviceAccountName")
        .filter(|a| a.as_str() != Some("default"));
    add("ServiceAccount", account);
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_depends_on_what_its_pods_name() {
        let deployment = json!({"spec": {"template": {"spec": {
        "serviceAccountName": "runner",
        "imagePullSecrets": [{"name": "registry"}],
        "containers": [{"name": "app", "image": "nginx",
            "envFrom": [{"configMapRef": {"name": "settings"}}],
            "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "t"}}}]}],
        "volumes": [
            {"name": "a", "configMap": {"name": "settings"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "c", "projected": {"sources": [{"secret": {"name": "certs"}}]}}
        ]}}}});
        let names: Vec<String> = dependencies("apps/v1", "Deployment", &deployment)
            .into_iter()
            .map(|d| format!("{}/{}", d.kind, d.name))
            .collect();
        assert_eq!(
            names,
            [
                "ConfigMap/settings",
                "PersistentVolumeClaim/data",
                "Secret/certs",
                "Secret/registry",
                "Secret/token",
                "ServiceAccount/runner"
            ]
        );
        let default_account = json!({"spec": {"serviceAccountName": "default", "containers": []}});
        assert!(dependencies("v1", "Pod", &default_account).is_empty());
        assert!(dependencies("v1", "ConfigMap", &json!({"data": {}})).is_empty());
        // A custom kind named as a workload is not read as one.
        assert!(dependencies("example.com/v1", "Deployment", &deployment).is_empty());
    }
}
