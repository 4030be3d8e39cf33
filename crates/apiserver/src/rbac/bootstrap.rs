//! The roles and bindings every 1.32 cluster starts with (upstream's
//! `bootstrappolicy`): the user-facing `cluster-admin`, `admin`, `edit`
//! and `view` (the last three aggregated from `system:aggregate-to-*`),
//! discovery and self-review for every authenticated user, health and
//! version for everyone. Reconciled at start-up as upstream's
//! `rbac/bootstrap-roles` hook: a missing one is created, one annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` gets the rules
//! and subjects of this version; one an admin set to `"false"` is left.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::ApiResult;
use crate::objects::{self, WriteScope};
use crate::registry::{self, Request};
use crate::storage::Storage;

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
const RW: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ: &[&str] = &["get", "list", "watch"];
const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A resource rule.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

/// A non-resource rule.
fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name, "labels": labels,
                        "annotations": {AUTOUPDATE: "true"}},
           "rules": rules})
}

fn aggregated(name: &str, labels: Value, aggregate_from: &str) -> Value {
    let mut role = cluster_role(name, labels, vec![]);
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {
        format!("rbac.authorization.k8s.io/aggregate-to-{aggregate_from}"): "true"}}]});
    role
}

fn binding(role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": role, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                        "annotations": {AUTOUPDATE: "true"}},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": subjects})
}

fn aggregate_to(role: &str) -> Value {
    json!({format!("rbac.authorization.k8s.io/aggregate-to-{role}"): "true"})
}

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        aggregated("admin", json!({}), "admin"),
        aggregated("edit", aggregate_to("admin"), "edit"),
        aggregated("view", aggregate_to("edit"), "view"),
        cluster_role(
            "system:aggregate-to-admin",
            aggregate_to("admin"),
            vec![
                rule(
                    ALL,
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                ),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            aggregate_to("edit"),
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(
                    RW,
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(
                    RW,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(
                    RW,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                rule(RW, &["autoscaling"], &["horizontalpodautoscalers"]),
                rule(RW, &["batch"], &["cronjobs", "jobs"]),
                rule(RW, &["policy"], &["poddisruptionbudgets"]),
                rule(
                    RW,
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                ),
                rule(ALL, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            "system:aggregate-to-view",
            aggregate_to("view"),
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                rule(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                rule(
                    READ,
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                rule(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                rule(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                rule(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![urls(&["get"], &health)],
        ),
        cluster_role(
            "system:monitoring",
            json!({}),
            vec![urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            json!({}),
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:node-bootstrapper",
            json!({}),
            vec![rule(
                &["create", "get", "list", "watch"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            json!({}),
            vec![urls(
                &["get"],
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
            )],
        ),
    ]
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        binding("system:monitoring", &["system:monitoring"]),
        binding(
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
    ]
}

/// Creates or brings up to date the bootstrap roles and bindings.
pub async fn reconcile(api: &Arc<Storage>) -> ApiResult<()> {
    for role in cluster_roles() {
        ensure(api, "clusterroles", role).await?;
    }
    for binding in cluster_role_bindings() {
        ensure(api, "clusterrolebindings", binding).await?;
    }
    Ok(())
}

/// Creates or reconciles one cluster-scoped RBAC object: the fields a
/// bootstrap object owns are `rules` (not for an aggregated role, whose
/// rules the aggregation controller writes), `aggregationRule`, `roleRef`
/// and `subjects`.
pub(crate) async fn ensure(api: &Arc<Storage>, plural: &str, desired: Value) -> ApiResult<()> {
    let Some(r) = api.registry.get("rbac.authorization.k8s.io", "v1", plural) else {
        return Ok(());
    };
    let name = objects::meta_str(&desired, "name").to_string();
    let req = Request::internal(api.clone(), r.clone(), None, Some(name.clone()));
    let owned = ["aggregationRule", "roleRef", "subjects"]
        .into_iter()
        .chain(desired.get("aggregationRule").is_none().then_some("rules"));
    let owned: Vec<&str> = owned.collect();
    let Some(kv) = api.store.get(&req.key(&name))? else {
        let created = registry::create(&req, desired, Vec::new(), |o| {
            crate::managed::track_update(&r, None, o, MANAGER, WriteScope::Main)
        })
        .await;
        return match created {
            Err(e) if e.reason == "AlreadyExists" => Ok(()),
            other => other.map(|_| ()),
        };
    };
    let current: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
    let autoupdate = current
        .pointer(&format!(
            "/metadata/annotations/{}",
            AUTOUPDATE.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let stale = owned.iter().any(|f| current.get(f) != desired.get(f));
    if autoupdate == Some("false") || !stale {
        return Ok(());
    }
    registry::update(&req, |old| {
        let mut new = old.clone();
        for field in &owned {
            match desired.get(field) {
                Some(v) => new[*field] = v.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.shift_remove(*field);
                    }
                }
            }
        }
        crate::managed::track_update(&r, Some(old), &mut new, MANAGER, WriteScope::Main);
        Ok((new, Vec::new()))
    })
    .await
    .map(|_| ())
}

/// Who managedFields credit for the bootstrap policy.
const MANAGER: &str = "kube-apiserver";
