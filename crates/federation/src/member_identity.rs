//! The hub's identity in a Push member, as `karmadactl join` makes it: a
//! ServiceAccount `karmada-<cluster>` in the member's `karmada-cluster`
//! namespace, bound to a ClusterRole of its own. The hub propagates
//! objects of any kind, RBAC's included, so the role grants every verb
//! (as Karmada's); what it buys is an identity apart from the member's
//! admins, whose token the hub stores instead of the operator's, and
//! which the member revokes by deleting the ServiceAccount (or its token
//! Secret) without touching anyone else's access. The ClusterRole owns the
//! rest: deleting it (the one request the hub can still make, since every
//! other removal cuts its own access first) lets the garbage collector
//! remove the binding, the ServiceAccount and the token's Secret.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::warn;

use crate::api::CLUSTER_NAMESPACE;

/// How long the hub's token lasts: the member revokes it by deleting
/// the ServiceAccount or the token's Secret.
const TOKEN_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

fn account(cluster: &str) -> String {
    format!("karmada-{cluster}")
}

fn role(cluster: &str) -> String {
    format!("karmada-controller-manager:{}", account(cluster))
}

/// Creates (or brings back) the hub's identity in `member` and returns a
/// token for it.
pub async fn create(member: &kube::Client, cluster: &str) -> Result<String, kube::Error> {
    let params = PatchParams::apply("flotilla-join").force();
    let name = account(cluster);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": CLUSTER_NAMESPACE}});
    Api::<Namespace>::all(member.clone())
        .patch(CLUSTER_NAMESPACE, &params, &Patch::Apply(&ns))
        .await?;
    let cluster_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role(cluster)},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                  {"nonResourceURLs": ["*"], "verbs": ["get"]}]});
    let owner = Api::<ClusterRole>::all(member.clone())
        .patch(&role(cluster), &params, &Patch::Apply(&cluster_role))
        .await?;
    let owned_by = json!([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "name": role(cluster), "uid": owner.metadata.uid}]);
    let accounts: Api<ServiceAccount> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": CLUSTER_NAMESPACE,
                                 "ownerReferences": owned_by}});
    accounts.patch(&name, &params, &Patch::Apply(&sa)).await?;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role(cluster), "ownerReferences": owned_by},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role(cluster)},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": CLUSTER_NAMESPACE}]});
    Api::<ClusterRoleBinding>::all(member.clone())
        .patch(&role(cluster), &params, &Patch::Apply(&binding))
        .await?;
    // The token is bound to a Secret of its own: deleting it revokes the
    // token without touching the ServiceAccount.
    let secret_name = format!("{name}-token");
    let secrets: Api<Secret> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": secret_name, "namespace": CLUSTER_NAMESPACE,
                                     "ownerReferences": owned_by}});
    let secret = secrets
        .patch(&secret_name, &params, &Patch::Apply(&secret))
        .await?;
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": TOKEN_LIFETIME.as_secs(),
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": secret_name,
                                    "uid": secret.metadata.uid}},
    }))
    .map_err(kube::Error::SerdeError)?;
    let issued = accounts
        .create_token_request(&name, &PostParams::default(), &request)
        .await?;
    Ok(issued.status.map(|s| s.token).unwrap_or_default())
}

/// Removes the hub's identity from `member` (best effort: a member that
/// has revoked it already has nothing left to remove): its ClusterRole,
/// whose dependents the member's garbage collector removes.
pub async fn delete(member: &kube::Client, cluster: &str) {
    let removed = Api::<ClusterRole>::all(member.clone())
        .delete(&role(cluster), &DeleteParams::background())
        .await;
    match removed {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 401 => {}
        Err(error) => warn!(%error, cluster, "cannot remove the hub's identity from the member"),
    }
}
