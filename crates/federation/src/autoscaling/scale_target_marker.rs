//! Karmada's `hpaScaleTargetMarker`: an autoscaling/v2
//! HorizontalPodAutoscaler template propagated to members (claimed by a
//! PropagationPolicy or ClusterPropagationPolicy) scales its target in
//! each member, so the target's template is labelled
//! `resourcetemplate.karmada.io/retain-replicas: "true"`: the members keep
//! the replicas their HPAs set (the execution controller leaves them), and
//! the replicas syncer (`replicas_syncer.rs`) brings a Divided template's
//! count to their sum. The label goes when the HPA goes or targets
//! another object.

use std::collections::HashMap;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use crate::api::labels;
use crate::context::Ctx;
use crate::error::is_not_found;

pub const RETAIN_REPLICAS: &str = "resourcetemplate.karmada.io/retain-replicas";

/// An HPA's target: namespace, apiVersion, kind, name.
type Target = (String, String, String, String);

fn propagated(hpa: &HorizontalPodAutoscaler) -> bool {
    let l = hpa.labels();
    l.contains_key(labels::PP_ID) || l.contains_key(labels::CPP_ID)
}

fn target_of(hpa: &HorizontalPodAutoscaler) -> Option<Target> {
    let r = &hpa.spec.as_ref()?.scale_target_ref;
    Some((
        hpa.namespace().unwrap_or_default(),
        r.api_version.clone().unwrap_or_else(|| "v1".into()),
        r.kind.clone(),
        r.name.clone(),
    ))
}

pub async fn run(ctx: Ctx) {
    let api: Api<HorizontalPodAutoscaler> = Api::all(ctx.hub.clone());
    // What each propagated HPA marked, by namespace/name.
    let mut marked: HashMap<String, Target> = HashMap::new();
    let mut events =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(error) => {
                debug!(%error, "HPA watch interrupted; it resumes");
                continue;
            }
        };
        match event {
            Event::Apply(hpa) | Event::InitApply(hpa) => {
                let key = format!("{}/{}", hpa.namespace().unwrap_or_default(), hpa.name_any());
                let now = target_of(&hpa).filter(|_| propagated(&hpa));
                let before = marked.remove(&key);
                if before.is_some() && before != now {
                    mark(&ctx, before.as_ref(), false).await;
                }
                if let Some(target) = now {
                    mark(&ctx, Some(&target), true).await;
                    marked.insert(key, target);
                }
            }
            Event::Delete(hpa) => {
                let key = format!("{}/{}", hpa.namespace().unwrap_or_default(), hpa.name_any());
                let target = marked.remove(&key).or_else(|| target_of(&hpa));
                mark(&ctx, target.as_ref(), false).await;
            }
            Event::Init | Event::InitDone => {}
        }
    }
}

/// Adds (or removes) the label on `target`'s template, if it is not so
/// already; a target that does not exist is left alone.
async fn mark(ctx: &Ctx, target: Option<&Target>, retain: bool) {
    let Some((ns, api_version, kind, name)) = target else {
        return;
    };
    let Ok((resource, _)) = ctx.hub_kinds.resolve(api_version, kind).await else {
        return;
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.hub.clone(), ns, &resource);
    let current = match api.get_metadata_opt(name).await {
        Ok(Some(m)) => m.labels().get(RETAIN_REPLICAS).cloned(),
        Ok(None) => return,
        Err(error) => {
            debug!(%error, %kind, %name, "cannot read an HPA's target");
            return;
        }
    };
    let (wanted, value) = if retain {
        (Some("true"), json!("true"))
    } else {
        (None, json!(null))
    };
    if current.as_deref() == wanted {
        return;
    }
    let patch = json!({"metadata": {"labels": {RETAIN_REPLICAS: value}}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => info!(%kind, namespace = %ns, %name, retain, "HPA scale target marked"),
        Err(e) if is_not_found(&e) => {}
        Err(error) => debug!(%error, %kind, %name, "cannot mark an HPA's target"),
    }
}
