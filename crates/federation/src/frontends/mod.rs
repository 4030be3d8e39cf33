//! Front ends: one module per foreign fleet API, each translating its
//! objects into the one pipeline (resource templates, Karmada policies,
//! bindings and Works) rather than running an engine of its own.

pub mod argocd;
pub mod kubefed;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::roles::CONTROLPLANE_USER;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Crds(#[from] crate::crds::InstallError),
    #[error("cannot apply the front end's roles: {0}")]
    Roles(#[from] kube::Error),
    #[error("a built-in role does not parse: {0}")]
    Manifest(#[from] serde_json::Error),
}

/// Installs a front end: its CRDs, its ClusterRoles, and the first of
/// them (`role`, what the controllers need for it) bound to the
/// controllers' user.
pub async fn install(
    client: &kube::Client,
    crds: Vec<Value>,
    roles: Vec<Value>,
    role: &str,
) -> Result<(), InstallError> {
    crate::crds::install_manifests(client, crds).await?;
    let params = PatchParams::apply("flotilla-controlplane").force();
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    for r in roles {
        let r: ClusterRole = serde_json::from_value(r)?;
        let name = r.metadata.name.clone().unwrap_or_default();
        cluster_roles
            .patch(&name, &params, &Patch::Apply(&r))
            .await?;
    }
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": CONTROLPLANE_USER}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(role, &params, &Patch::Apply(&binding))
        .await?;
    Ok(())
}
