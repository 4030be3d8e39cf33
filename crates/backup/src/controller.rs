//! How each of Velero's controllers runs here: kube-rs's controller over
//! one kind in the `velero` namespace, objects read as JSON, status
//! written with a merge patch.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{Instrument, info_span, warn};

use crate::api;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Location(#[from] crate::location::LocationError),
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The `velero` namespace's objects of `kind`.
pub fn objects(client: &Client, kind: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), api::NAMESPACE, kind)
}

/// An object as JSON.
pub fn json(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// Merges `status` into the object's status.
pub async fn write_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: Value,
) -> Result<(), kube::Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map(|_| ())
}

/// Says why an object is refused, as Velero does (phase FailedValidation
/// with its `validationErrors`); it is not looked at again until it
/// changes.
pub async fn fail_validation(
    api: &Api<DynamicObject>,
    name: &str,
    errors: Vec<String>,
) -> Result<Option<Duration>, Error> {
    tracing::info!(object = %name, ?errors, "failed validation");
    write_status(
        api,
        name,
        json!({"phase": "FailedValidation", "validationErrors": errors}),
    )
    .await?;
    Ok(None)
}

/// Marks a Backup or Restore Failed with Velero's `failureReason`; it is
/// not looked at again until it changes.
pub async fn fail(
    api: &Api<DynamicObject>,
    name: &str,
    reason: &str,
) -> Result<Option<Duration>, Error> {
    tracing::warn!(object = %name, %reason, "failed");
    write_status(
        api,
        name,
        json!({"phase": "Failed", "failureReason": reason, "completionTimestamp": now()}),
    )
    .await?;
    Ok(None)
}

/// Now, as Velero writes its timestamps.
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

/// Runs `reconcile` for each object of `kind` in the velero namespace,
/// whenever it changes or asks to be looked at again.
pub async fn run<F, Fut>(client: Client, kind: ApiResource, name: &'static str, reconcile: F)
where
    F: Fn(Arc<DynamicObject>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Duration>, Error>> + Send + 'static,
{
    let api = objects(&client, &kind);
    let reconcile = Arc::new(reconcile);
    Controller::new_with(api, watcher::Config::default(), kind)
        .run(
            move |object, _ctx: Arc<()>| {
                let reconcile = reconcile.clone();
                let span = info_span!("reconcile", controller = name, object = %object.name_any());
                async move {
                    match reconcile(object).await? {
                        Some(after) => Ok::<_, Error>(Action::requeue(after)),
                        None => Ok(Action::await_change()),
                    }
                }
                .instrument(span)
            },
            move |object, error, _| {
                warn!(%error, controller = name, object = %object.name_any(), "reconcile failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            Arc::new(()),
        )
        .for_each(|_| async {})
        .await;
}

/// The object as the API has it now: a reconcile that follows one which
/// changed it may be handed the cache's older copy (a backup still
/// InProgress that has completed), and must not act on that again.
pub async fn fresh(
    api: &Api<DynamicObject>,
    cached: &DynamicObject,
) -> Result<Option<DynamicObject>, Error> {
    Ok(api.get_opt(&cached.name_any()).await?)
}
