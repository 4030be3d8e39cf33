//! DeleteBackupRequests, as `velero backup delete` makes them: the named
//! Backup's files leave its storage location, then its PodVolumeBackups,
//! the Restores made from it and the Backup itself go; the request ends
//! Processed, with `errors` saying what could not be done (a backup that
//! does not exist, or is still being made, is left alone).

use std::sync::Arc;

use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api;
use crate::controller::{self, Error, json, objects, write_status};
use crate::storage_location::{self, STORAGE_LOCATION_LABEL};

pub async fn run(client: Client) {
    let c = client.clone();
    controller::run(
        client,
        api::delete_backup_requests(),
        "delete-backup-request",
        move |r| reconcile(c.clone(), r),
    )
    .await;
}

async fn reconcile(
    client: Client,
    request: Arc<DynamicObject>,
) -> Result<Option<std::time::Duration>, Error> {
    let requests = objects(&client, &api::delete_backup_requests());
    let Some(request) = controller::fresh(&requests, &request).await? else {
        return Ok(None);
    };
    let name = request.name_any();
    let object = json(&request);
    if object["status"]["phase"] == "Processed" {
        return Ok(None);
    }
    let backup_name = object["spec"]["backupName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let done = |errors: Vec<String>| json!({"phase": "Processed", "errors": errors});
    let backups = objects(&client, &api::backups());
    let Some(backup) = backups.get_opt(&backup_name).await? else {
        let status = done(vec![format!("backup {backup_name} not found")]);
        write_status(&requests, &name, status).await?;
        return Ok(None);
    };
    let backup = json(&backup);
    let phase = backup["status"]["phase"].as_str().unwrap_or_default();
    if phase == "InProgress" || phase.is_empty() || phase == "New" {
        let status = done(vec![format!(
            "backup {backup_name} is still in progress and cannot be deleted"
        )]);
        write_status(&requests, &name, status).await?;
        return Ok(None);
    }
    write_status(&requests, &name, json!({"phase": "InProgress"})).await?;
    let mut errors = Vec::new();
    // Its files, from the location it is kept in.
    let location = backup["metadata"]["labels"][STORAGE_LOCATION_LABEL]
        .as_str()
        .or(backup["spec"]["storageLocation"].as_str());
    match storage_location::resolve(&client, location).await? {
        Ok((_, storage)) => {
            if let Err(e) = storage.delete(&backup_name).await {
                errors.push(format!(
                    "error deleting backup's files from the location: {e}"
                ));
            }
        }
        Err(message) => errors.push(message),
    }
    if errors.is_empty() {
        let by_backup =
            ListParams::default().labels(&format!("velero.io/backup-name={backup_name}"));
        for record in objects(&client, &api::pod_volume_backups())
            .list(&by_backup)
            .await?
            .items
        {
            delete(&client, &api::pod_volume_backups(), &record.name_any()).await?;
        }
        for restore in objects(&client, &api::restores())
            .list(&Default::default())
            .await?
            .items
        {
            if json(&restore)["spec"]["backupName"] == backup_name.as_str() {
                delete(&client, &api::restores(), &restore.name_any()).await?;
            }
        }
        delete(&client, &api::backups(), &backup_name).await?;
        info!(backup = %backup_name, request = %name, "backup deleted");
    }
    write_status(&requests, &name, done(errors)).await?;
    Ok(None)
}

async fn delete(client: &Client, kind: &kube::api::ApiResource, name: &str) -> Result<(), Error> {
    match objects(client, kind)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
