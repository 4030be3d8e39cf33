//! Velero's records of file-system volume backups and restores: a
//! PodVolumeBackup for each volume a Backup stored, a PodVolumeRestore for
//! each a Restore wrote back (`velero.io/v1`, in the `velero` namespace,
//! labelled with their Backup or Restore), so `kubectl get pvb,pvr` and
//! `velero backup describe --details` have what they read. They are
//! written once the volume is done, with its outcome.

use kube::Client;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tracing::warn;

use crate::api;
use crate::controller::{now, objects};
use crate::volumes::VolumeBackup;

/// The pod a volume was read from or written for.
pub struct PodRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub node: &'a str,
}

/// What became of one volume: its bytes, or why not.
pub type Outcome = Result<u64, String>;

fn status(started: &str, outcome: &Outcome, snapshot_id: &str) -> Value {
    let mut status = json!({
        "startTimestamp": started,
        "completionTimestamp": now(),
        "snapshotID": snapshot_id,
    });
    match outcome {
        Ok(bytes) => {
            status["phase"] = json!("Completed");
            status["progress"] = json!({"totalBytes": bytes, "bytesDone": bytes});
        }
        Err(message) => {
            status["phase"] = json!("Failed");
            status["message"] = json!(message);
        }
    }
    status
}

fn pod(p: &PodRef) -> Value {
    json!({"kind": "Pod", "namespace": p.namespace, "name": p.name, "uid": p.uid})
}

/// Records a volume of `backup` (the Backup object) stored in `location`.
pub async fn backed_up(
    client: &Client,
    backup: &Value,
    location: &str,
    pod_ref: &PodRef<'_>,
    (volume, pvc): (&str, &str),
    started: &str,
    (outcome, snapshot_id): (&Outcome, &str),
) {
    let name = backup["metadata"]["name"].as_str().unwrap_or_default();
    let uid = backup["metadata"]["uid"].as_str().unwrap_or_default();
    let object = json!({
        "apiVersion": "velero.io/v1",
        "kind": "PodVolumeBackup",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": api::NAMESPACE,
            "labels": {"velero.io/backup-name": name, "velero.io/backup-uid": uid},
            "ownerReferences": [{"apiVersion": "velero.io/v1", "kind": "Backup", "name": name, "uid": uid, "controller": true}],
        },
        "spec": {
            "node": pod_ref.node,
            "pod": pod(pod_ref),
            "volume": volume,
            "backupStorageLocation": location,
            "repoIdentifier": crate::volumes::repository(pod_ref.namespace),
            "uploaderType": "kopia",
            "tags": {"backup": name, "backup-uid": uid, "ns": pod_ref.namespace, "pod": pod_ref.name,
                     "pod-uid": pod_ref.uid, "pvc": pvc, "volume": volume},
        },
        "status": status(started, outcome, snapshot_id),
    });
    create(client, &api::pod_volume_backups(), object).await;
}

/// Records a volume `restore` (the Restore object) wrote from `record`.
pub async fn restored(
    client: &Client,
    restore: &Value,
    location: &str,
    record: &VolumeBackup,
    target_namespace: &str,
    started: &str,
    outcome: &Outcome,
) {
    let name = restore["metadata"]["name"].as_str().unwrap_or_default();
    let uid = restore["metadata"]["uid"].as_str().unwrap_or_default();
    let object = json!({
        "apiVersion": "velero.io/v1",
        "kind": "PodVolumeRestore",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": api::NAMESPACE,
            "labels": {"velero.io/restore-name": name, "velero.io/restore-uid": uid},
            "ownerReferences": [{"apiVersion": "velero.io/v1", "kind": "Restore", "name": name, "uid": uid, "controller": true}],
        },
        "spec": {
            "pod": {"kind": "Pod", "namespace": target_namespace, "name": record.pod},
            "volume": record.volume,
            "backupStorageLocation": location,
            "repoIdentifier": crate::volumes::repository(&record.namespace),
            "uploaderType": "kopia",
            "snapshotID": record.snapshot_id,
            "sourceNamespace": record.namespace,
        },
        "status": status(started, outcome, &record.snapshot_id),
    });
    create(client, &api::pod_volume_restores(), object).await;
}

/// A record is a report: failing to write one is logged, not fatal.
async fn create(client: &Client, resource: &kube::api::ApiResource, object: Value) {
    let api = objects(client, resource);
    let object: DynamicObject = match serde_json::from_value(object) {
        Ok(o) => o,
        Err(error) => {
            warn!(%error, kind = %resource.kind, "cannot make the record");
            return;
        }
    };
    if let Err(error) = api.create(&PostParams::default(), &object).await {
        warn!(%error, kind = %resource.kind, "cannot write the record");
    }
}
