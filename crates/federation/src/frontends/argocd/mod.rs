//! Argo CD's API (`argoproj.io/v1alpha1`) over the Karmada pipeline: an
//! ApplicationSet's `clusters` generator makes one Application per
//! selected fleet Cluster; an Application reads a directory of plain
//! manifests from a local git repository and delivers it as one Karmada
//! Work in its destination's `karmada-es-<cluster>`, which the execution
//! controller applies, so drift is reverted and status flows back as for
//! every other front end.

pub mod api;
pub mod application;
pub mod appset;
pub mod git;

use std::time::Duration;

use futures::future::BoxFuture;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;
use tracing::{info, warn};

use super::{Frontend, Informers, Row, text};
use crate::api::{Cluster, Work};
use crate::context::Ctx;
use crate::passes::{self, Watched};
use crate::roles::{READ, WRITE, cluster_role, rule};

/// The role the front end adds to the controllers: Argo CD's kinds (the
/// ApplicationSet controller writes Applications, as Argo CD's does).
pub const ROLE: &str = "system:flotilla:argocd";

/// How often every ApplicationSet and Application is looked at again: a
/// new commit is synced within this.
pub const PERIOD: Duration = Duration::from_secs(2);

/// Argo CD's API as a front end (`--frontends argocd`).
pub struct ArgoCd;

impl Frontend for ArgoCd {
    fn name(&self) -> &'static str {
        "argocd"
    }

    fn api(&self) -> &'static str {
        "Argo CD"
    }

    fn groups(&self) -> &'static [&'static str] {
        &[api::GROUP]
    }

    fn crds(&self) -> Vec<Value> {
        api::crds()
    }

    fn roles(&self) -> Vec<Value> {
        roles()
    }

    fn controllers(&self, ctx: &Ctx, _: &Informers) -> Vec<BoxFuture<'static, ()>> {
        vec![Box::pin(run(ctx.clone()))]
    }

    /// An Application goes to its destination: a cluster by name, or a
    /// `server` named by the fleet cluster of that endpoint in
    /// `endpoints` (the endpoint itself when none is); it is
    /// `<sync>/<health>` there. An ApplicationSet only makes them.
    fn placements(&self, object: &Value, endpoints: &[(String, String)]) -> Vec<Row> {
        if object["kind"] != "Application" {
            return Vec::new();
        }
        let destination = object
            .pointer("/spec/destination")
            .cloned()
            .unwrap_or_default();
        let cluster = match text(&destination, "/name") {
            n if n.is_empty() => {
                let server = text(&destination, "/server");
                endpoints
                    .iter()
                    .find(|(_, e)| *e == server)
                    .map_or(server, |(name, _)| name.clone())
            }
            n => n,
        };
        let state = |p: &str| match text(object, p) {
            s if s.is_empty() => "Unknown".to_string(),
            s => s,
        };
        vec![Row {
            cluster,
            status: format!(
                "{}/{}",
                state("/status/sync/status"),
                state("/status/health/status")
            ),
        }]
    }
}

pub fn roles() -> Vec<Value> {
    let kinds = ["applications", "applicationsets"];
    let group = [api::GROUP];
    vec![
        cluster_role(
            ROLE,
            None,
            vec![rule(
                &["*"],
                &group,
                &[
                    "applications",
                    "applications/status",
                    "applicationsets",
                    "applicationsets/status",
                ],
            )],
        ),
        cluster_role(
            "flotilla:argocd:aggregate-to-edit",
            Some("edit"),
            vec![rule(WRITE, &group, &kinds)],
        ),
        cluster_role(
            "flotilla:argocd:aggregate-to-view",
            Some("view"),
            vec![rule(READ, &group, &kinds)],
        ),
    ]
}

/// Looks at every ApplicationSet, then every Application (there are
/// few): whenever a set's or an application's spec, a Cluster, or an
/// application's Work changes, and each PERIOD, which is also how git is
/// polled for new commits.
pub async fn run(ctx: Ctx) {
    info!("Argo CD front end running");
    let changes = passes::changes(
        &ctx.hub,
        [
            Watched::spec(api::application_set_resource()),
            Watched::spec(api::application_resource()),
            Watched::any(ApiResource::erase::<Cluster>(&())),
            Watched::any(ApiResource::erase::<Work>(&())).labelled(api::APP_NAME_LABEL),
        ],
    );
    let metrics = ctx.metrics.queue("argocd");
    passes::run(metrics, changes, PERIOD, move || {
        let ctx = ctx.clone();
        async move { sync_all(&ctx).await }
    })
    .await;
}

async fn sync_all(ctx: &Ctx) -> kube::Result<()> {
    let clusters: Vec<Cluster> = ctx.clusters.state().iter().map(|c| (**c).clone()).collect();
    let appsets: Api<DynamicObject> =
        Api::all_with(ctx.hub.clone(), &api::application_set_resource());
    for set in appsets.list(&Default::default()).await? {
        if set.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Err(error) = appset::reconcile(&ctx.hub, &clusters, &set).await {
            warn!(%error, appset = %set.name_any(), "ApplicationSet not reconciled");
        }
    }
    let apps: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &api::application_resource());
    let all = apps.list(&Default::default()).await?.items;
    for app in &all {
        if let Err(error) = application::reconcile(ctx, &clusters, app).await {
            warn!(%error, app = %app.name_any(), "Application not reconciled");
        }
    }
    application::sweep(&ctx.hub, &all).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_application_goes_to_its_destination() {
        let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "spec": {"destination": {"server": "https://x:6443"}},
            "status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}});
        assert_eq!(ArgoCd.placements(&app, &[])[0].cluster, "https://x:6443");
        let fleet = [("east".to_string(), "https://x:6443".to_string())];
        assert_eq!(ArgoCd.placements(&app, &fleet)[0].cluster, "east");
        assert_eq!(ArgoCd.placements(&app, &fleet)[0].status, "Synced/Healthy");
        let named = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "spec": {"destination": {"name": "west"}}});
        assert_eq!(ArgoCd.placements(&named, &fleet)[0].cluster, "west");
        assert_eq!(
            ArgoCd.placements(&named, &fleet)[0].status,
            "Unknown/Unknown"
        );
        let appset = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet"});
        assert!(ArgoCd.placements(&appset, &[]).is_empty());
    }

    #[test]
    fn the_role_covers_argo_cds_kinds_only() {
        for role in roles() {
            for r in role["rules"].as_array().unwrap() {
                assert_eq!(r["apiGroups"], json!([api::GROUP]));
            }
        }
    }
}
