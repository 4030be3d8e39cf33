//! Front ends: one module per foreign fleet API, each translating its
//! objects into the one pipeline (resource templates, Karmada policies,
//! bindings and Works) rather than running an engine of its own.

pub mod argocd;
pub mod kubefed;
pub mod ocm;

use flotilla_apiserver::admission::{Mutating, Operation, Request, View};
use flotilla_apiserver::error::{ApiError, ApiResult};
use futures::future::BoxFuture;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};

use crate::clustersets::api::{ManagedClusterSet, ManagedClusterSetBinding};
use crate::context::Ctx;
use crate::roles::CONTROLPLANE_USER;

/// A foreign fleet API served over the pipeline. Everything the control
/// plane and the CLI need of one is here: adding a front end is a module
/// implementing this and a row in [`ALL`].
pub trait Frontend: Sync {
    /// Its name in `--frontends`.
    fn name(&self) -> &'static str;
    /// Whose API it serves, as people call it.
    fn api(&self) -> &'static str;
    /// The API groups it serves.
    fn groups(&self) -> &'static [&'static str];
    /// The groups whose objects `flotilla get` lists from the hub, once
    /// per cluster they go to (they exist only there).
    fn listed(&self) -> &'static [&'static str] {
        self.groups()
    }
    /// Whether `--frontends` may leave it off. One that may not is always
    /// served (OCM: its cluster sets are also the hub's tenancy).
    fn optional(&self) -> bool {
        true
    }
    /// The CRDs of its kinds.
    fn crds(&self) -> Vec<Value>;
    /// Its ClusterRoles, the first one what its controllers need (bound
    /// to the controllers' user); none when the control plane's own role
    /// already covers it.
    fn roles(&self) -> Vec<Value> {
        Vec::new()
    }
    /// Its controllers, run while the control plane leads.
    fn controllers(&self, ctx: &Ctx, informers: &Informers) -> Vec<BoxFuture<'static, ()>>;
    /// The clusters one of its objects goes to and its state in each, by
    /// the kind's own fields, as `flotilla get` lists it from the hub; an
    /// object that only decides (a placement, a set) goes nowhere.
    fn placements(&self, object: &Value, endpoints: &[(String, String)]) -> Vec<Row>;
}

/// The hub's shared caches a front end's controllers may read.
pub struct Informers {
    pub cluster_sets: Store<ManagedClusterSet>,
    pub set_bindings: Store<ManagedClusterSetBinding>,
}

/// One cluster a front-end object goes to, and its state there.
#[derive(Debug, PartialEq)]
pub struct Row {
    pub cluster: String,
    pub status: String,
}

/// Every front end, in the order `--frontends` lists them.
pub const ALL: [&dyn Frontend; 3] = [&kubefed::KubeFed, &argocd::ArgoCd, &ocm::Ocm];

/// The names `--frontends` accepts.
pub fn optional_names() -> impl Iterator<Item = &'static str> {
    ALL.into_iter().filter(|f| f.optional()).map(|f| f.name())
}

/// Whether a front end runs, given the names `--frontends` chose.
pub fn is_on(frontend: &dyn Frontend, chosen: &[String]) -> bool {
    !frontend.optional() || chosen.iter().any(|n| n == frontend.name())
}

/// The front end serving `group`, if one does.
pub fn serving(group: &str) -> Option<&'static dyn Frontend> {
    ALL.into_iter().find(|f| f.groups().contains(&group))
}

/// Whether `flotilla get` lists the objects of `group` from the hub.
pub fn listed_from_hub(group: &str) -> bool {
    ALL.into_iter().any(|f| f.listed().contains(&group))
}

/// Where a front-end object goes (see [`Frontend::placements`]); nothing
/// for an object no front end serves.
pub fn placements(object: &Value, endpoints: &[(String, String)]) -> Vec<Row> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    serving(group).map_or_else(Vec::new, |f| f.placements(object, endpoints))
}

/// Installs a front end that is on: its CRDs, and its roles with the
/// first bound to the controllers' user.
pub async fn install_on(
    frontend: &dyn Frontend,
    client: &kube::Client,
) -> Result<(), InstallError> {
    install(client, frontend.crds(), frontend.roles()).await
}

/// Serves the kinds of a front end that is off, so that a user who
/// applies one is told how to turn it on (with `SwitchedOff` in the
/// admission chain) rather than that the kind does not exist.
pub async fn install_switched_off(
    frontend: &dyn Frontend,
    client: &kube::Client,
) -> Result<(), InstallError> {
    Ok(flotilla_client::crd::install(client, frontend.crds()).await?)
}

/// The status of condition `type_` in an object's `status.conditions`.
pub(crate) fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .get("status")?
        .as_str()
}

/// The string at `pointer`, or empty.
pub(crate) fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Refuses new objects of the front ends that are off: nothing would act
/// on them. Updates and deletes pass, so what an earlier run with the
/// front end on made can still be changed and removed.
pub struct SwitchedOff(pub Vec<&'static dyn Frontend>);

impl Mutating for SwitchedOff {
    fn admit(&self, _: &View, request: &Request, _: &mut Value) -> ApiResult<()> {
        if request.operation != Operation::Create || request.subresource.is_some() {
            return Ok(());
        }
        let group = request.resource.group.as_str();
        let Some(off) = self.0.iter().find(|f| f.groups().contains(&group)) else {
            return Ok(());
        };
        Err(ApiError::forbidden(format!(
            "{}'s API ({group}) is served by the {name} front end, which is off on this \
             control plane: start it with --frontends {name} (flotilla controlplane \
             --frontends {name}, or flotilla up --frontends {name})",
            off.api(),
            name = off.name()
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

/// Installs a front end (or another part of the control plane with kinds
/// of its own, such as cluster lifecycle): its CRDs, its ClusterRoles,
/// and the first of them (what the controllers need for it) bound to the
/// controllers' user.
pub async fn install(
    client: &kube::Client,
    crds: Vec<Value>,
    roles: Vec<Value>,
) -> Result<(), InstallError> {
    flotilla_client::crd::install(client, crds).await?;
    let params = PatchParams::apply("flotilla-controlplane").force();
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let mut role = None;
    for r in roles {
        let r: ClusterRole = serde_json::from_value(r)?;
        let name = r.metadata.name.clone().unwrap_or_default();
        cluster_roles
            .patch(&name, &params, &Patch::Apply(&r))
            .await?;
        role.get_or_insert(name);
    }
    let Some(role) = role else {
        return Ok(());
    };
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": CONTROLPLANE_USER}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&role, &params, &Patch::Apply(&binding))
        .await?;
    Ok(())
}
