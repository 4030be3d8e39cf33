//! The hub's roles for the federation: the control plane's controllers act
//! as `system:flotilla:controlplane`, confined to what the pipeline
//! needs (reading templates of any kind and writing their labels and
//! status; writing the pipeline's own objects; nothing of RBAC, no
//! impersonation, no creating or deleting users' objects), and the
//! Karmada, MCS and fabric kinds a tenant uses join the aggregated
//! `admin`, `edit` and `view` roles, so that a namespace admin can
//! propagate the namespace's objects.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::api::CLUSTER_NAMESPACE;

/// Who the control plane's controllers are.
pub const CONTROLPLANE_USER: &str = "system:flotilla:controlplane";

const MANAGER: &str = "flotilla-controlplane";
const ALL: &[&str] = &["*"];
pub const READ: &[&str] = &["get", "list", "watch"];
pub const WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The API groups whose objects the pipeline owns.
const PIPELINE_GROUPS: &[&str] = &[
    "cluster.karmada.io",
    "policy.karmada.io",
    "work.karmada.io",
    "config.karmada.io",
    "networking.karmada.io",
    "apps.karmada.io",
    "autoscaling.karmada.io",
    "multicluster.x-k8s.io",
    "submariner.io",
    "about.k8s.io",
    "cluster.open-cluster-management.io",
    // ManifestWorks made for ManifestWorkReplicaSets are created and
    // deleted by the control plane.
    "work.open-cluster-management.io",
    "coordination.k8s.io",
    "events.k8s.io",
];

pub fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

/// The controllers' ClusterRole.
pub fn controlplane_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": CONTROLPLANE_USER},
        "rules": [
            // Templates of any kind: read them, label them, report status.
            rule(&["get", "list", "watch", "patch", "update"], &["*"], &["*"]),
            rule(ALL, PIPELINE_GROUPS, &["*"]),
            // Execution namespaces, events, derived Services and slices.
            rule(WRITE, &[""], &["namespaces", "events", "services"]),
            rule(WRITE, &["discovery.k8s.io"], &["endpointslices"]),
            {"verbs": ["get"], "nonResourceURLs": ["*"]},
        ],
    })
}

/// A ClusterRole; with `aggregate_to` (`edit`, `view`...), labelled to
/// be aggregated into that default role.
pub fn cluster_role(name: &str, aggregate_to: Option<&str>, rules: Vec<Value>) -> Value {
    let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                          "metadata": {"name": name}, "rules": rules});
    if let Some(to) = aggregate_to {
        role["metadata"]["labels"] =
            json!({format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"});
    }
    role
}

/// What a tenant's namespace roles gain: propagation policies and the
/// multi-cluster services of the namespace for `edit` (and so `admin`);
/// the pipeline's view of them (bindings, Works, quotas) for `view`.
fn aggregated_roles() -> Vec<Value> {
    let role = |name: &str, to: &str, rules: Vec<Value>| cluster_role(name, Some(to), rules);
    vec![
        role(
            "flotilla:aggregate-to-edit",
            "edit",
            vec![
                rule(
                    WRITE,
                    &["policy.karmada.io"],
                    &["propagationpolicies", "overridepolicies"],
                ),
                rule(
                    WRITE,
                    &["multicluster.x-k8s.io"],
                    &["serviceexports", "serviceimports"],
                ),
                rule(WRITE, &["networking.karmada.io"], &["multiclusterservices"]),
                // OCM: choosing clusters among the namespace's bound sets,
                // and fanning work out to them.
                rule(
                    WRITE,
                    &["cluster.open-cluster-management.io"],
                    &["placements"],
                ),
                rule(
                    WRITE,
                    &["work.open-cluster-management.io"],
                    &["manifestworkreplicasets"],
                ),
            ],
        ),
        // Binding a cluster set also needs `create` on that set's
        // `managedclustersets/bind`, which only an admin grants.
        role(
            "flotilla:aggregate-to-admin",
            "admin",
            vec![rule(
                WRITE,
                &["cluster.open-cluster-management.io"],
                &["managedclustersetbindings"],
            )],
        ),
        role(
            "flotilla:aggregate-to-view",
            "view",
            vec![
                rule(
                    READ,
                    &["policy.karmada.io"],
                    &[
                        "propagationpolicies",
                        "overridepolicies",
                        "federatedresourcequotas",
                        "federatedresourcequotas/status",
                    ],
                ),
                rule(
                    READ,
                    &["work.karmada.io"],
                    &["resourcebindings", "resourcebindings/status"],
                ),
                // Where a template went, and where manifests would go
                // (answered with the caller's own reads).
                rule(&["create"], &["inspect.flotilla.io"], &["placementreviews"]),
                rule(
                    READ,
                    &["multicluster.x-k8s.io"],
                    &["serviceexports", "serviceimports"],
                ),
                rule(READ, &["networking.karmada.io"], &["multiclusterservices"]),
                rule(
                    READ,
                    &["cluster.open-cluster-management.io"],
                    &[
                        "managedclustersetbindings",
                        "placements",
                        "placements/status",
                        "placementdecisions",
                        "placementdecisions/status",
                    ],
                ),
                rule(
                    READ,
                    &["work.open-cluster-management.io"],
                    &["manifestworkreplicasets", "manifestworkreplicasets/status"],
                ),
            ],
        ),
    ]
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot apply {kind} {name}: {source}")]
    Apply {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Namespace(#[from] crate::join::JoinError),
}

fn applying(kind: &'static str, name: &str) -> impl FnOnce(kube::Error) -> InstallError {
    let name = name.to_string();
    move |source| InstallError::Apply { kind, name, source }
}

/// Applies the controllers' role and binding and the aggregated roles
/// (server-side apply: a newer version's rules replace an older one's).
pub async fn install(client: &kube::Client) -> Result<(), InstallError> {
    let params = PatchParams::apply(MANAGER).force();
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let mut roles = aggregated_roles();
    roles.push(controlplane_role());
    for role in roles {
        let name = role["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        cluster_roles
            .patch(&name, &params, &Patch::Apply(&role))
            .await
            .map_err(applying("ClusterRole", &name))?;
    }
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": CONTROLPLANE_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": CONTROLPLANE_USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": CONTROLPLANE_USER}],
    });
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(CONTROLPLANE_USER, &params, &Patch::Apply(&binding))
        .await
        .map_err(applying("ClusterRoleBinding", CONTROLPLANE_USER))?;
    // A removed cluster's credentials, in the namespace that keeps them.
    crate::join::ensure_cluster_namespace(client).await?;
    let credentials = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": CONTROLPLANE_USER, "namespace": CLUSTER_NAMESPACE},
        "rules": [rule(&["delete"], &[""], &["secrets"])],
    });
    Api::<Role>::namespaced(client.clone(), CLUSTER_NAMESPACE)
        .patch(CONTROLPLANE_USER, &params, &Patch::Apply(&credentials))
        .await
        .map_err(applying("Role", CONTROLPLANE_USER))?;
    let mut binding = binding;
    binding["kind"] = json!("RoleBinding");
    binding["metadata"]["namespace"] = json!(CLUSTER_NAMESPACE);
    binding["roleRef"]["kind"] = json!("Role");
    Api::<RoleBinding>::namespaced(client.clone(), CLUSTER_NAMESPACE)
        .patch(CONTROLPLANE_USER, &params, &Patch::Apply(&binding))
        .await
        .map_err(applying("RoleBinding", CONTROLPLANE_USER))?;
    Ok(())
}
