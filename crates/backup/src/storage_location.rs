//! BackupStorageLocations: each is validated (can its storage be
//! written?) and reported Available or Unavailable, and the backups found
//! in it that this cluster has no Backup object for are synced in, as
//! Velero's backup sync does, so that another cluster sharing the storage
//! can restore them.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::api;
use crate::controller::{self, Error, json, now, objects, write_status};
use crate::location::Location;

/// How often a location is validated and synced again.
const VALIDATION_PERIOD: Duration = Duration::from_secs(5);

/// The label Velero gives a Backup: the location it is kept in.
pub const STORAGE_LOCATION_LABEL: &str = "velero.io/storage-location";
/// Marks a Backup made from its storage (its status follows the create):
/// it is never run.
pub const SYNCED_ANNOTATION: &str = "backup.flotilla.io/synced";

pub async fn run(client: Client) {
    let c = client.clone();
    controller::run(
        client,
        api::locations(),
        "backup-storage-location",
        move |bsl| reconcile(c.clone(), bsl),
    )
    .await;
}

/// The location a Backup names, or the default one: the location marked
/// `default: true`, else the one named `default`.
pub async fn resolve(
    client: &Client,
    name: Option<&str>,
) -> Result<Result<(String, Location), String>, Error> {
    let api = objects(client, &api::locations());
    let all = api.list(&Default::default()).await?.items;
    let found = match name.filter(|n| !n.is_empty()) {
        Some(n) => all.iter().find(|l| l.name_any() == n),
        None => all
            .iter()
            .find(|l| json(l)["spec"]["default"] == json!(true))
            .or_else(|| all.iter().find(|l| l.name_any() == "default")),
    };
    let Some(bsl) = found else {
        let message = match name.filter(|n| !n.is_empty()) {
            Some(n) => format!(
                "an existing backup storage location was not specified at backup creation time and the default {n} was not found. Please address this issue (see `velero backup-location -h` for options) and create a new backup. Error: backupstoragelocations.velero.io \"{n}\" not found"
            ),
            None => "an existing backup storage location was not specified at backup creation time and the server default default does not exist. Please address this issue (see `velero backup-location -h` for options) and create a new backup. Error: backupstoragelocations.velero.io \"default\" not found".to_string(),
        };
        return Ok(Err(message));
    };
    let spec = json(bsl)["spec"].clone();
    Ok(match Location::of(&spec) {
        Ok(location) => Ok((bsl.name_any(), location)),
        Err(e) => Err(format!(
            "BackupStorageLocation \"{}\" is unavailable: {e}",
            bsl.name_any()
        )),
    })
}

async fn reconcile(client: Client, bsl: Arc<DynamicObject>) -> Result<Option<Duration>, Error> {
    let name = bsl.name_any();
    let object = json(&bsl);
    let validated = Location::of(&object["spec"]).and_then(|l| l.validate().map(|()| l));
    let (phase, message) = match &validated {
        Ok(_) => ("Available", String::new()),
        Err(e) => (
            "Unavailable",
            format!("BackupStorageLocation \"{name}\" is unavailable: {e}"),
        ),
    };
    let was = object["status"]["phase"].as_str().unwrap_or_default();
    if was != phase {
        info!(location = %name, phase, "backup storage location validated");
    }
    let mut status = json!({"phase": phase, "lastValidationTime": now()});
    status["message"] = if message.is_empty() {
        Value::Null
    } else {
        json!(message)
    };
    let api = objects(&client, &api::locations());
    if let Ok(location) = &validated {
        sync(&client, &name, location).await?;
        status["lastSyncedTime"] = json!(now());
    }
    write_status(&api, &name, status).await?;
    Ok(Some(VALIDATION_PERIOD))
}

/// Makes a Backup object for each backup in the storage that this
/// cluster has none of, with the status it was stored with.
async fn sync(client: &Client, location: &str, storage: &Location) -> Result<(), Error> {
    let api = objects(client, &api::backups());
    let known: Vec<String> = api
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    for name in storage.backups()? {
        if known.contains(&name) {
            continue;
        }
        let Some(bytes) = storage.get(&name, crate::BACKUP_METADATA)? else {
            continue;
        };
        let Ok(stored) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        let status = stored["status"].clone();
        let mut labels = stored["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels[STORAGE_LOCATION_LABEL] = json!(location);
        let backup: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "velero.io/v1",
            "kind": "Backup",
            "metadata": {"name": name, "namespace": api::NAMESPACE, "labels": labels,
                         "annotations": {SYNCED_ANNOTATION: "true"}},
            "spec": stored["spec"],
        }))?;
        match api.create(&PostParams::default(), &backup).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
        write_status(&api, &name, status).await?;
        info!(backup = %name, %location, "synced a backup from its storage location");
    }
    Ok(())
}
