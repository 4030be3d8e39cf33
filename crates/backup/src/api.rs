//! Velero's kinds (`velero.io/v1`) as CRDs, with Velero's names and
//! printer columns: BackupStorageLocation (`bsl`), Backup, Restore,
//! Schedule, and the volume records PodVolumeBackup and PodVolumeRestore.
//! Their specs are kept as written and read as JSON.

use flotilla_core::crd::{Kind, age, column, open_schema};
use kube::api::ApiResource;
use serde_json::Value;

pub const GROUP: &str = "velero.io";
pub const VERSION: &str = "v1";
/// Where Velero keeps its objects.
pub const NAMESPACE: &str = "velero";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn locations() -> ApiResource {
    resource("BackupStorageLocation", "backupstoragelocations")
}

pub fn backups() -> ApiResource {
    resource("Backup", "backups")
}

pub fn restores() -> ApiResource {
    resource("Restore", "restores")
}

pub fn schedules() -> ApiResource {
    resource("Schedule", "schedules")
}

pub fn delete_backup_requests() -> ApiResource {
    resource("DeleteBackupRequest", "deletebackuprequests")
}

pub fn pod_volume_backups() -> ApiResource {
    resource("PodVolumeBackup", "podvolumebackups")
}

pub fn pod_volume_restores() -> ApiResource {
    resource("PodVolumeRestore", "podvolumerestores")
}

fn kind(kind: &str, plural: &str, short: &[&str], columns: Vec<Value>) -> Kind {
    Kind {
        group: GROUP,
        version: VERSION,
        kind: kind.into(),
        plural: plural.into(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced: true,
        categories: &["velero"],
        columns,
        spec: open_schema(),
    }
}

/// The CRD manifests, as `velero install` creates them.
pub fn crds() -> Vec<Value> {
    let mut crds: Vec<Value> = [
        kind(
            "BackupStorageLocation",
            "backupstoragelocations",
            &["bsl"],
            vec![
                column("Phase", "string", ".status.phase"),
                column("Last Validated", "date", ".status.lastValidationTime"),
                age(),
                column("Default", "boolean", ".spec.default"),
            ],
        ),
        kind("Backup", "backups", &[], vec![age()]),
        kind("Restore", "restores", &[], vec![age()]),
        kind(
            "DeleteBackupRequest",
            "deletebackuprequests",
            &[],
            vec![
                column("BackupName", "string", ".spec.backupName"),
                column("Status", "string", ".status.phase"),
            ],
        ),
        kind(
            "Schedule",
            "schedules",
            &[],
            vec![
                column("Status", "string", ".status.phase"),
                column("Schedule", "string", ".spec.schedule"),
                column("LastBackup", "date", ".status.lastBackup"),
                age(),
                column("Paused", "boolean", ".spec.paused"),
            ],
        ),
    ]
    .iter()
    .map(Kind::crd)
    .collect();
    // Velero's records, as its CRDs serve them: no status subresource
    // (written whole by the server), the progress columns.
    let progress = |what: &str| {
        vec![
            column("Status", "string", ".status.phase"),
            column("Started", "date", ".status.startTimestamp"),
            column("Bytes Done", "integer", ".status.progress.bytesDone"),
            column("Total Bytes", "integer", ".status.progress.totalBytes"),
            column("Storage Location", "string", ".spec.backupStorageLocation"),
            age(),
            column("Node", "string", ".status.node"),
            column(what, "string", ".spec.uploaderType"),
        ]
    };
    for (k, plural, uploader) in [
        ("PodVolumeBackup", "podvolumebackups", "Uploader"),
        ("PodVolumeRestore", "podvolumerestores", "Uploader Type"),
    ] {
        let mut crd = kind(k, plural, &[], progress(uploader)).crd();
        if let Some(versions) = crd["spec"]["versions"].as_array_mut() {
            for v in versions {
                v["subresources"] = serde_json::json!({});
            }
        }
        crds.push(crd);
    }
    // A Backup or Restore may be written with an empty spec.
    for crd in &mut crds {
        flotilla_core::crd::spec_optional(crd);
    }
    crds
}
