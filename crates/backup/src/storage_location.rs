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
use crate::location::{Location, LocationError};

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
    Ok(match open(client, &json(bsl)).await {
        Ok(location) => Ok((bsl.name_any(), location)),
        Err(e) => Err(format!(
            "BackupStorageLocation \"{}\" is unavailable: {e}",
            bsl.name_any()
        )),
    })
}

/// The Secret velero install makes from `--secret-file`, mounted as the
/// plugins' credentials file when a location names none.
const DEFAULT_CREDENTIALS: (&str, &str) = ("cloud-credentials", "cloud");

/// The storage of a BackupStorageLocation, with the credentials its
/// `spec.credential` names (or the server's default ones).
pub async fn open(client: &Client, bsl: &Value) -> Result<Location, LocationError> {
    let spec = &bsl["spec"];
    let named = spec["credential"]["name"]
        .as_str()
        .filter(|n| !n.is_empty());
    let (secret, key) = match named {
        Some(name) => (name, spec["credential"]["key"].as_str().unwrap_or_default()),
        None => DEFAULT_CREDENTIALS,
    };
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), api::NAMESPACE);
    let found = secrets
        .get_opt(secret)
        .await
        .map_err(|e| LocationError::Credentials(format!("cannot read Secret {secret}: {e}")))?;
    let file = found.and_then(|s| s.data).and_then(|d| {
        d.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    });
    if named.is_some() && file.is_none() {
        return Err(LocationError::Credentials(format!(
            "Secret {}/{secret} has no key {key:?}",
            api::NAMESPACE
        )));
    }
    Location::of(spec, file.as_deref())
}

async fn reconcile(client: Client, bsl: Arc<DynamicObject>) -> Result<Option<Duration>, Error> {
    let name = bsl.name_any();
    let object = json(&bsl);
    let validated = match open(&client, &object).await {
        Ok(l) => l.validate().await.map(|()| l),
        Err(e) => Err(e),
    };
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
    for name in storage.backups().await? {
        if known.contains(&name) {
            continue;
        }
        let Some(bytes) = storage.get(&name, crate::BACKUP_METADATA).await? else {
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
