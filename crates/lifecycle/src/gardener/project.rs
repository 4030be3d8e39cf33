//! The Project controller: a Project's namespace (`spec.namespace`, made
//! as `garden-<name>` with Gardener's labels when the Project names
//! none) and its phase, `Ready` once the namespace is there, as
//! Gardener's project controller reports it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tracing::info;

use super::api as gapi;
use crate::Context;
use crate::error::Error;
use crate::objects;
use crate::runner::{self, Controller, Next};

/// The labels Gardener puts on a project's namespace.
pub const ROLE_LABEL: &str = "gardener.cloud/role";
pub const PROJECT_LABEL: &str = "project.gardener.cloud/name";

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "gardener-project",
        kind: gapi::projects(),
        wakers: vec![],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, project| async move {
        reconcile(&ctx, project).await
    })
    .await;
}

/// The namespace a Project names, or Gardener's default for it.
pub fn namespace_of(project: &Value) -> String {
    project["spec"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(String::from)
        .unwrap_or_else(|| format!("garden-{}", objects::name(project)))
}

async fn reconcile(ctx: &Context, project: Value) -> Result<Next, Error> {
    let name = objects::name(&project).to_string();
    let projects: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &gapi::projects());
    let namespace = namespace_of(&project);
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    if objects::deleting(&project) {
        return Ok(None);
    }
    if namespaces.get_opt(&namespace).await?.is_none() {
        info!(project = %name, %namespace, "making the project's namespace");
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": namespace, "labels": {ROLE_LABEL: "project", PROJECT_LABEL: name}},
        }))?;
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut patch = json!({});
    if project["spec"]["namespace"].as_str() != Some(namespace.as_str()) {
        patch["spec"] = json!({"namespace": namespace});
    }
    if !patch.as_object().is_some_and(|p| p.is_empty()) {
        projects
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let generation = project["metadata"]["generation"].clone();
    if project["status"]["phase"] != "Ready"
        || project["status"]["observedGeneration"] != generation
    {
        projects
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"status": {"phase": "Ready", "observedGeneration": generation}}),
                ),
            )
            .await?;
    }
    // A namespace removed by hand is made again.
    Ok(Some(Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_without_a_namespace_gets_gardeners() {
        assert_eq!(
            namespace_of(&json!({"metadata": {"name": "dev"}, "spec": {}})),
            "garden-dev"
        );
        assert_eq!(
            namespace_of(&json!({"metadata": {"name": "dev"}, "spec": {"namespace": "team-dev"}})),
            "team-dev"
        );
    }
}
