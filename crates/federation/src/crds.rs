//! The Karmada CRDs the control plane installs on start: same groups,
//! versions, names, short names, categories and printer columns as
//! Karmada's, so a Karmada user's YAML and `kubectl get` habits carry over.
//!
//! The schemas check what every object of a kind must have (Karmada's
//! required fields and enums at the top levels) and keep the rest of
//! `spec` and `status` as written; the controllers read them with typed
//! views.

use flotilla_client::crd::InstallError;
use flotilla_core::crd::{Kind, age, column, condition, open_object, wide};
use serde_json::{Value, json};
use tracing::info;

use crate::api::CATEGORY;

/// A namespaced kind of the `karmada-io` category and its cluster-scoped
/// twin, named as Karmada names them (PropagationPolicy `pp` and
/// ClusterPropagationPolicy `cpp`), with the same schema and columns.
fn twins(
    group: &'static str,
    version: &'static str,
    (kind, plural, short): (&str, &str, &str),
    columns: Vec<Value>,
    spec: Value,
) -> [Kind; 2] {
    let namespaced = Kind {
        group,
        version,
        kind: kind.into(),
        plural: plural.into(),
        short_names: vec![short.into()],
        namespaced: true,
        categories: &[CATEGORY],
        columns: columns.clone(),
        spec: spec.clone(),
    };
    let cluster = Kind {
        group,
        version,
        kind: format!("Cluster{kind}"),
        plural: format!("cluster{plural}"),
        short_names: vec![format!("c{short}")],
        namespaced: false,
        categories: &[CATEGORY],
        columns,
        spec,
    };
    [namespaced, cluster]
}

fn propagation_spec() -> Value {
    open_object(
        json!({
            "resourceSelectors": {"type": "array", "minItems": 1, "items": open_object(json!({
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "namespace": {"type": "string"},
                "name": {"type": "string"},
            }), &["apiVersion", "kind"])},
            "priority": {"type": "integer", "format": "int32", "default": 0},
            "preemption": {"type": "string", "enum": ["Always", "Never"], "default": "Never"},
            "conflictResolution": {"type": "string", "enum": ["Abort", "Overwrite"], "default": "Abort"},
            "schedulerName": {"type": "string", "default": "default-scheduler"},
            "activationPreference": {"type": "string", "enum": ["", "Lazy"]},
            "placement": open_object(json!({}), &[]),
            "failover": failover_schema(),
        }),
        &["resourceSelectors"],
    )
}

/// A policy's `failover`, as Karmada's CRD checks it: the purge modes
/// (the deprecated `Immediately` and `Graciously` still accepted) and the
/// state preservation rules.
fn failover_schema() -> Value {
    let purge_mode = json!({"type": "string",
        "enum": ["Directly", "Gracefully", "Never", "Immediately", "Graciously"]});
    let state_preservation = open_object(
        json!({"rules": {"type": "array", "minItems": 1, "items": open_object(json!({
            "aliasLabelName": {"type": "string", "minLength": 1},
            "jsonPath": {"type": "string", "minLength": 1},
        }), &["aliasLabelName", "jsonPath"])}}),
        &["rules"],
    );
    open_object(
        json!({
            "application": open_object(json!({
                "purgeMode": purge_mode,
                "gracePeriodSeconds": {"type": "integer", "format": "int32", "minimum": 1},
                "statePreservation": state_preservation,
            }), &[]),
            "cluster": open_object(json!({
                "purgeMode": purge_mode,
                "statePreservation": state_preservation,
            }), &[]),
        }),
        &[],
    )
}

fn override_spec() -> Value {
    let operator = |ops: &[&str]| json!({"type": "string", "enum": ops});
    let all = ["add", "remove", "replace"];
    let list = |item: Value| json!({"type": "array", "items": item});
    let map_overrider = list(open_object(
        json!({"operator": operator(&all), "value": {"type": "object", "additionalProperties": {"type": "string"}}}),
        &["operator"],
    ));
    let command_args = list(open_object(
        json!({
            "containerName": {"type": "string"},
            "operator": operator(&["add", "remove"]),
            "value": {"type": "array", "items": {"type": "string"}},
        }),
        &["containerName", "operator"],
    ));
    let sub_path = list(open_object(
        json!({"subPath": {"type": "string"}, "operator": operator(&all)}),
        &["subPath", "operator"],
    ));
    let overriders = open_object(
        json!({
            "imageOverrider": list(open_object(json!({
                "predicate": open_object(json!({"path": {"type": "string"}}), &["path"]),
                "component": {"type": "string", "enum": ["Registry", "Repository", "Tag"]},
                "operator": operator(&all),
                "value": {"type": "string"},
            }), &["component", "operator"])),
            "commandOverrider": command_args.clone(),
            "argsOverrider": command_args,
            "labelsOverrider": map_overrider.clone(),
            "annotationsOverrider": map_overrider,
            "fieldOverrider": list(open_object(json!({
                "fieldPath": {"type": "string"},
                "json": sub_path.clone(),
                "yaml": sub_path,
            }), &["fieldPath"])),
            "plaintext": list(open_object(
                json!({"path": {"type": "string"}, "operator": operator(&all)}),
                &["path", "operator"],
            )),
        }),
        &[],
    );
    open_object(
        json!({
            "resourceSelectors": {"type": "array", "items": open_object(json!({
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
            }), &["apiVersion", "kind"])},
            "overrideRules": list(open_object(json!({"overriders": overriders.clone()}), &["overriders"])),
            "overriders": overriders,
        }),
        &[],
    )
}

fn binding_spec() -> Value {
    open_object(
        json!({"resource": open_object(json!({
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "name": {"type": "string"},
        }), &["apiVersion", "kind", "name"])}),
        &["resource"],
    )
}

fn kinds() -> Vec<Kind> {
    let policy_columns = vec![
        column("CONFLICT-RESOLUTION", "string", ".spec.conflictResolution"),
        column("PRIORITY", "string", ".spec.priority"),
        age(),
    ];
    let binding_columns = vec![
        condition("SCHEDULED", "Scheduled"),
        condition("FULLYAPPLIED", "FullyApplied"),
        age(),
    ];
    let cluster = Kind {
        group: "cluster.karmada.io",
        version: "v1alpha1",
        kind: "Cluster".into(),
        plural: "clusters".into(),
        short_names: Vec::new(),
        namespaced: false,
        categories: &[],
        columns: vec![
            column("VERSION", "string", ".status.kubernetesVersion"),
            column("MODE", "string", ".spec.syncMode"),
            condition("READY", "Ready"),
            age(),
            wide("ZONES", "string", ".spec.zones"),
            wide("REGION", "string", ".spec.region"),
            wide("PROVIDER", "string", ".spec.provider"),
            wide("API-ENDPOINT", "string", ".spec.apiEndpoint"),
            wide("PROXY-URL", "string", ".spec.proxyURL"),
        ],
        spec: open_object(
            json!({
                "syncMode": {"type": "string", "enum": ["Push", "Pull"]},
                "apiEndpoint": {"type": "string"},
                "provider": {"type": "string"},
                "region": {"type": "string"},
                "zone": {"type": "string"},
                "zones": {"type": "array", "items": {"type": "string"}},
                "taints": {"type": "array", "items": open_object(json!({
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                }), &["key", "effect"])},
            }),
            &["syncMode"],
        ),
    };
    let work = Kind {
        group: "work.karmada.io",
        version: "v1alpha1",
        kind: "Work".into(),
        plural: "works".into(),
        short_names: vec!["wk".into()],
        namespaced: true,
        categories: &[CATEGORY],
        columns: vec![
            column(
                "WORKLOAD-KIND",
                "string",
                ".spec.workload.manifests[*].kind",
            ),
            condition("APPLIED", "Applied"),
            age(),
        ],
        spec: open_object(
            json!({"workload": open_object(json!({
                "manifests": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true}},
            }), &[])}),
            &[],
        ),
    };
    let rebalancer = Kind {
        group: "apps.karmada.io",
        version: "v1alpha1",
        kind: "WorkloadRebalancer".into(),
        plural: "workloadrebalancers".into(),
        short_names: Vec::new(),
        namespaced: false,
        categories: &[CATEGORY],
        columns: vec![age()],
        spec: open_object(
            json!({
                "workloads": {"type": "array", "minItems": 1, "items": open_object(json!({
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "namespace": {"type": "string"},
                    "name": {"type": "string"},
                }), &["apiVersion", "kind", "name"])},
                "ttlSecondsAfterFinished": {"type": "integer", "format": "int32"},
            }),
            &["workloads"],
        ),
    };
    let match_conditions = || {
        json!({"type": "array", "items": open_object(
            json!({
                "conditionType": {"type": "string"},
                "operator": {"type": "string", "enum": ["In", "NotIn"]},
                "statusValues": {"type": "array", "items": {"type": "string"}},
            }),
            &["conditionType", "operator", "statusValues"],
        )})
    };
    let taint_policy = Kind {
        group: "policy.karmada.io",
        version: "v1alpha1",
        kind: "ClusterTaintPolicy".into(),
        plural: "clustertaintpolicies".into(),
        short_names: Vec::new(),
        namespaced: false,
        categories: &[CATEGORY],
        columns: vec![age()],
        spec: open_object(
            json!({
                "targetClusters": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "addOnConditions": match_conditions(),
                "removeOnConditions": match_conditions(),
                "taints": {
                    "type": "array",
                    "minItems": 1,
                    // One taint per key and effect, as Karmada's webhook.
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["key", "effect"],
                    "items": open_object(json!({
                        "key": {"type": "string", "minLength": 1},
                        "value": {"type": "string"},
                        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    }), &["key", "effect"]),
                },
            }),
            &["taints"],
        ),
    };
    let multicluster_service = Kind {
        group: "networking.karmada.io",
        version: "v1alpha1",
        kind: "MultiClusterService".into(),
        plural: "multiclusterservices".into(),
        short_names: vec!["mcs".into()],
        namespaced: true,
        categories: &[CATEGORY],
        columns: vec![age()],
        spec: open_object(
            json!({
                "types": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": ["CrossCluster", "LoadBalancer"]}},
                "providerClusters": {"type": "array", "items": open_object(json!({"name": {"type": "string"}}), &["name"])},
                "consumerClusters": {"type": "array", "items": open_object(json!({"name": {"type": "string"}}), &["name"])},
            }),
            &["types"],
        ),
    };
    let mut kinds = vec![
        cluster,
        work,
        rebalancer,
        taint_policy,
        multicluster_service,
    ];
    kinds.extend(twins(
        "policy.karmada.io",
        "v1alpha1",
        ("PropagationPolicy", "propagationpolicies", "pp"),
        policy_columns,
        propagation_spec(),
    ));
    kinds.extend(twins(
        "policy.karmada.io",
        "v1alpha1",
        ("OverridePolicy", "overridepolicies", "op"),
        vec![age()],
        override_spec(),
    ));
    kinds.extend(twins(
        "work.karmada.io",
        "v1alpha2",
        ("ResourceBinding", "resourcebindings", "rb"),
        binding_columns,
        binding_spec(),
    ));
    kinds
}

/// Every CRD the control plane serves, as manifests.
pub fn manifests() -> Vec<Value> {
    kinds().iter().map(Kind::crd).collect()
}

/// Server-side applies every CRD (idempotent across restarts and
/// upgrades) and waits until each is Established.
pub async fn install(client: &kube::Client) -> Result<(), InstallError> {
    let mut all = manifests();
    all.extend(crate::mcs::api::crds());
    // Tenants: OCM's cluster sets and Karmada's FederatedResourceQuota.
    all.extend(crate::clustersets::api::crds());
    all.push(crate::quota::api::crd());
    all.extend(crate::autoscaling::api::crds());
    flotilla_client::crd::install(client, all).await?;
    info!(count = kinds().len(), "Karmada CRDs installed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    use super::*;

    #[test]
    fn every_manifest_is_a_valid_crd_with_karmadas_names() {
        let crds: Vec<CustomResourceDefinition> = manifests()
            .into_iter()
            .map(|m| serde_json::from_value(m).unwrap())
            .collect();
        let names: Vec<&str> = crds
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap())
            .collect();
        assert!(names.contains(&"propagationpolicies.policy.karmada.io"));
        assert!(names.contains(&"resourcebindings.work.karmada.io"));
        let short: Vec<String> = crds
            .iter()
            .flat_map(|c| c.spec.names.short_names.clone().unwrap_or_default())
            .collect();
        for s in ["pp", "cpp", "op", "cop", "rb", "crb"] {
            assert!(short.iter().any(|x| x == s), "short name {s}");
        }
    }
}
