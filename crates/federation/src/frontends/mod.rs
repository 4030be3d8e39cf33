//! Front ends: one module per foreign fleet API, each translating its
//! objects into the one pipeline (resource templates, Karmada policies,
//! bindings and Works) rather than running an engine of its own.

pub mod argocd;
pub mod kubefed;

use flotilla_apiserver::admission::{Mutating, Operation, Request};
use flotilla_apiserver::error::{ApiError, ApiResult};
use flotilla_apiserver::server::ApiServer;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::roles::CONTROLPLANE_USER;

/// A front end, as `--frontends` names it.
#[derive(Debug)]
pub struct Frontend {
    /// Its name in `--frontends`.
    pub name: &'static str,
    /// Whose API it serves.
    pub api: &'static str,
    /// The API groups it serves.
    pub groups: &'static [&'static str],
    crds: fn() -> Vec<Value>,
    roles: fn() -> Vec<Value>,
    role: &'static str,
}

pub const KUBEFED: Frontend = Frontend {
    name: "kubefed",
    api: "KubeFed",
    groups: &[
        kubefed::api::TYPES_GROUP,
        kubefed::api::CORE_GROUP,
        kubefed::api::SCHEDULING_GROUP,
    ],
    crds: kubefed::api::crds,
    roles: kubefed::roles,
    role: kubefed::ROLE,
};

pub const ARGOCD: Frontend = Frontend {
    name: "argocd",
    api: "Argo CD",
    groups: &[argocd::api::GROUP],
    crds: argocd::api::crds,
    roles: argocd::roles,
    role: argocd::ROLE,
};

/// Every front end, in the order `--frontends` lists them.
pub const ALL: [&Frontend; 2] = [&KUBEFED, &ARGOCD];

impl Frontend {
    /// Installs the front end: its CRDs, and its roles with the first
    /// bound to the controllers' user.
    pub async fn install(&self, client: &kube::Client) -> Result<(), InstallError> {
        install(client, (self.crds)(), (self.roles)(), self.role).await
    }

    /// Serves the kinds of a front end that is off, so that a user who
    /// applies one is told how to turn it on (with `SwitchedOff` in the
    /// admission chain) rather than that the kind does not exist.
    pub async fn install_switched_off(&self, client: &kube::Client) -> Result<(), InstallError> {
        Ok(flotilla_client::crd::install(client, (self.crds)()).await?)
    }
}

/// Refuses new objects of the front ends that are off: nothing would act
/// on them. Updates and deletes pass, so what an earlier run with the
/// front end on made can still be changed and removed.
pub struct SwitchedOff(pub Vec<&'static Frontend>);

impl Mutating for SwitchedOff {
    fn admit(&self, _: &ApiServer, request: &Request, _: &mut Value) -> ApiResult<()> {
        if request.operation != Operation::Create || request.subresource.is_some() {
            return Ok(());
        }
        let group = request.resource.group.as_str();
        let Some(off) = self.0.iter().find(|f| f.groups.contains(&group)) else {
            return Ok(());
        };
        Err(ApiError::forbidden(format!(
            "{}'s API ({group}) is served by the {name} front end, which is off on this \
             control plane: start it with --frontends {name} (flotilla controlplane \
             --frontends {name}, or flotilla up --frontends {name})",
            off.api,
            name = off.name
        )))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Crds(#[from] flotilla_client::crd::InstallError),
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
    flotilla_client::crd::install(client, crds).await?;
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
