//! Backup and restore on Velero's API, run in each member cluster as
//! Velero's server runs there: BackupStorageLocations are validated and
//! the backups found in them are synced in as Backup objects; a Backup
//! writes the cluster's objects to its location as Velero's tarball; a
//! Restore reads one back, in Velero's order, into the same or another
//! cluster; a Schedule makes Backups as its cron expression comes due;
//! a DeleteBackupRequest removes a Backup and its files.
//! A hub serves the kinds too, so that Backups and Restores can
//! be propagated to members as Karmada's Velero guide propagates them.

#![forbid(unsafe_code)]

pub mod api;
pub mod archive;
mod backup;
mod controller;
mod deletion;
pub mod filter;
pub mod location;
pub mod migration;
pub mod records;
mod restore;
mod schedule;
pub mod storage_location;
pub mod volumes;

use kube::Client;
use tracing::warn;

pub use controller::Error;

/// The Backup object, as stored beside its tarball.
pub const BACKUP_METADATA: &str = "velero-backup.json";

/// Installs Velero's CRDs (what `velero install` does for them).
pub async fn install(client: &Client) -> Result<(), flotilla_client::crd::InstallError> {
    flotilla_client::crd::install(client, api::crds()).await
}

/// Serves Velero's kinds in this cluster and runs its controllers until
/// the future is dropped.
pub async fn run(client: Client) {
    if let Err(error) = install(&client).await {
        warn!(%error, "cannot install Velero's CRDs; backups are not served");
        return;
    }
    if let Err(error) = flotilla_client::namespace::ensure(&client, api::NAMESPACE, &[]).await {
        warn!(%error, "cannot create the velero namespace");
    }
    tokio::join!(
        storage_location::run(client.clone()),
        backup::run(client.clone()),
        restore::run(client.clone()),
        deletion::run(client.clone()),
        schedule::run(client),
    );
}
