//! Moving a workload's volumes from one cluster to another through
//! Velero's API in both: a Backup of the workload's pods and claims (with
//! their data) in the source, synced through the storage location both
//! share, and a Restore of the claims in the target, whose pods wait for
//! their data ([`flotilla_core::volume_data`]). The clusters are reached
//! only through their API, as any Velero user reaches them.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::api;
use crate::controller::{json, objects};

/// What moves: the pods a selector takes in one namespace, their claims
/// and their data.
#[derive(Clone, Debug)]
pub struct Volumes {
    pub namespace: String,
    /// The workload's pod selector, as a LabelSelector.
    pub selector: Value,
}

impl Volumes {
    /// Those of a workload (its JSON, of its own kind): the pods its
    /// selector takes, or a Pod's own labels; `None` for a kind with
    /// neither.
    pub fn of_workload(namespace: &str, workload: &Value) -> Option<Volumes> {
        let selector = match workload["kind"].as_str() {
            Some("Pod") => json!({"matchLabels": workload["metadata"]["labels"]}),
            _ => workload["spec"]["selector"].clone(),
        };
        selector.is_object().then(|| Volumes {
            namespace: namespace.to_string(),
            selector,
        })
    }
}

/// Whether a cluster's API answers within a few seconds.
pub async fn answers(client: &Client) -> bool {
    tokio::time::timeout(Duration::from_secs(5), client.apiserver_version())
        .await
        .is_ok_and(|r| r.is_ok())
}

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("{cluster}: {source}")]
    Api {
        cluster: String,
        source: kube::Error,
    },
    #[error("{0}")]
    Refused(String),
    #[error("{what} did not finish within {seconds}s (it is {phase:?})")]
    Timeout {
        what: String,
        phase: String,
        seconds: u64,
    },
}

/// A name for the Backup and Restore of one move: `<purpose>-<workload>-
/// <UTC time>`, short enough to be a label value (Velero labels what a
/// restore makes with it).
pub fn move_name(purpose: &str, workload: &str) -> String {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
    let room = 63 - purpose.len() - stamp.len() - 2;
    let workload: String = workload.chars().take(room).collect();
    format!(
        "{purpose}-{}-{stamp}",
        workload.trim_end_matches(['-', '.'])
    )
}

/// One cluster, reached through its API.
pub struct Cluster<'a> {
    pub name: &'a str,
    pub client: &'a Client,
}

impl Cluster<'_> {
    fn velero(&self, kind: &kube::api::ApiResource) -> Api<DynamicObject> {
        objects(self.client, kind)
    }

    fn error(&self, source: kube::Error) -> MigrationError {
        match &source {
            kube::Error::Api(s) if s.code == 404 => MigrationError::Refused(format!(
                "{}: velero.io is not served there (is Velero's server running? flotilla member runs it unless --velero false)",
                self.name
            )),
            _ => MigrationError::Api {
                cluster: self.name.to_string(),
                source,
            },
        }
    }
}

/// The storage a cluster's default BackupStorageLocation writes to:
/// provider, bucket, prefix and config.
async fn default_storage(cluster: &Cluster<'_>) -> Result<Value, MigrationError> {
    let all = cluster
        .velero(&api::locations())
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error(e))?
        .items;
    let bsl = all
        .iter()
        .find(|l| json(l)["spec"]["default"] == json!(true))
        .or_else(|| all.iter().find(|l| l.name_any() == "default"))
        .map(json)
        .ok_or_else(|| {
            MigrationError::Refused(format!(
                "{} has no default BackupStorageLocation (apply one in namespace velero, shared with the other cluster)",
                cluster.name
            ))
        })?;
    if bsl["status"]["phase"] != "Available" {
        return Err(MigrationError::Refused(format!(
            "{}: BackupStorageLocation {} is {}: {}",
            cluster.name,
            bsl["metadata"]["name"].as_str().unwrap_or_default(),
            bsl["status"]["phase"]
                .as_str()
                .unwrap_or("not validated yet"),
            bsl["status"]["message"].as_str().unwrap_or_default()
        )));
    }
    let spec = &bsl["spec"];
    Ok(
        json!({"provider": spec["provider"], "objectStorage": spec["objectStorage"], "config": spec["config"]}),
    )
}

/// Refuses two clusters whose default locations are not the same
/// storage: a backup made in one would never reach the other.
pub async fn check_shared_storage(
    source: &Cluster<'_>,
    target: &Cluster<'_>,
) -> Result<(), MigrationError> {
    let (a, b) = (
        default_storage(source).await?,
        default_storage(target).await?,
    );
    if a != b {
        return Err(MigrationError::Refused(format!(
            "{} and {} do not share their default BackupStorageLocation ({a} and {b}): point both at the same storage",
            source.name, target.name
        )));
    }
    Ok(())
}

/// Creates a Velero object, refusing a name that is taken.
async fn create(
    cluster: &Cluster<'_>,
    kind: &kube::api::ApiResource,
    name: &str,
    spec: Value,
) -> Result<(), MigrationError> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": kind.api_version, "kind": kind.kind,
        "metadata": {"name": name, "namespace": api::NAMESPACE},
        "spec": spec,
    }))
    .map_err(|e| MigrationError::Refused(e.to_string()))?;
    cluster
        .velero(kind)
        .create(&PostParams::default(), &object)
        .await
        .map(|_| ())
        .map_err(|e| cluster.error(e))
}

/// One look at what a wait waits for: done, or still waiting in a phase
/// (named in the timeout's error).
enum Step<T> {
    Done(T),
    Waiting(String),
}

/// Looks every `every` until `step` is done or `limit` passes; the
/// timeout names `what` and the last phase seen.
async fn poll<T, F, Fut>(
    limit: Duration,
    every: Duration,
    what: impl FnOnce() -> String,
    mut step: F,
) -> Result<T, MigrationError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Step<T>, MigrationError>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut phase = String::new();
    while tokio::time::Instant::now() < deadline {
        match step().await? {
            Step::Done(t) => return Ok(t),
            Step::Waiting(p) => phase = p,
        }
        tokio::time::sleep(every).await;
    }
    Err(MigrationError::Timeout {
        what: what(),
        phase,
        seconds: limit.as_secs(),
    })
}

const EVERY: Duration = Duration::from_millis(300);

/// Waits for a Velero object to reach one of Velero's final phases.
async fn finished(
    cluster: &Cluster<'_>,
    kind: &kube::api::ApiResource,
    name: &str,
    limit: Duration,
) -> Result<Value, MigrationError> {
    let api = &cluster.velero(kind);
    let what = || format!("{} {name} in {}", kind.kind, cluster.name);
    poll(limit, EVERY, what, move || async move {
        let Some(o) = api.get_opt(name).await.map_err(|e| cluster.error(e))? else {
            return Ok(Step::Waiting(String::new()));
        };
        let o = json(&o);
        let phase = o["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(match phase.as_str() {
            "Completed" | "PartiallyFailed" | "Failed" | "FailedValidation" => Step::Done(o),
            _ => Step::Waiting(phase),
        })
    })
    .await
}

/// Why a Velero object did not complete, from its status.
fn why(object: &Value) -> String {
    let status = &object["status"];
    let mut parts: Vec<String> = Vec::new();
    if let Some(r) = status["failureReason"].as_str() {
        parts.push(r.to_string());
    }
    for e in status["validationErrors"].as_array().into_iter().flatten() {
        parts.push(e.as_str().unwrap_or_default().to_string());
    }
    if let Some(n) = status["errors"].as_u64().filter(|n| *n > 0) {
        parts.push(format!("{n} errors"));
    }
    format!(
        "{} ({})",
        status["phase"].as_str().unwrap_or_default(),
        parts.join("; ")
    )
}

/// Backs up the workload's pods, claims and volume data in `source` as
/// Backup `name`; the completed Backup.
pub async fn back_up(
    source: &Cluster<'_>,
    volumes: &Volumes,
    name: &str,
    limit: Duration,
) -> Result<Value, MigrationError> {
    let spec = json!({
        "includedNamespaces": [volumes.namespace],
        "includedResources": ["pods", "persistentvolumeclaims", "persistentvolumes"],
        "labelSelector": volumes.selector,
        "defaultVolumesToFsBackup": true,
        "ttl": "720h0m0s",
    });
    create(source, &api::backups(), name, spec).await?;
    let backup = finished(source, &api::backups(), name, limit).await?;
    if backup["status"]["phase"] != "Completed" {
        return Err(MigrationError::Refused(format!(
            "backup {name} in {} did not complete: {}",
            source.name,
            why(&backup)
        )));
    }
    Ok(backup)
}

/// Waits until `cluster`'s default location has synced the backups in
/// its storage after this call: the newest one is then known there too,
/// not only those the last periodic sync saw.
pub async fn wait_synced_now(cluster: &Cluster<'_>, limit: Duration) -> Result<(), MigrationError> {
    // Sync times are whole seconds: one a second later is after this.
    let after = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    let api = &cluster.velero(&api::locations());
    let what = || format!("a sync of {}'s backup storage location", cluster.name);
    poll(limit, EVERY, what, move || async move {
        let all = api
            .list(&ListParams::default())
            .await
            .map_err(|e| cluster.error(e))?
            .items;
        let synced = all.iter().map(json).any(|l| {
            (l["spec"]["default"] == json!(true) || l["metadata"]["name"] == "default")
                && l["status"]["lastSyncedTime"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t >= after)
        });
        Ok(if synced {
            Step::Done(())
        } else {
            Step::Waiting("not synced".into())
        })
    })
    .await
}

/// The newest completed backup `cluster` knows of that holds
/// `namespace`: what is left when the source cannot be reached.
pub async fn latest_backup(
    cluster: &Cluster<'_>,
    namespace: &str,
) -> Result<Option<Value>, MigrationError> {
    let list = cluster
        .velero(&api::backups())
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error(e))?;
    Ok(list
        .items
        .iter()
        .map(json)
        .filter(|b| b["status"]["phase"] == "Completed")
        .filter(|b| {
            let included = b["spec"]["includedNamespaces"].as_array();
            included.is_none_or(|l| {
                l.is_empty()
                    || l.iter()
                        .any(|n| n.as_str() == Some(namespace) || n.as_str() == Some("*"))
            })
        })
        .max_by(|a, b| {
            a["status"]["startTimestamp"]
                .as_str()
                .cmp(&b["status"]["startTimestamp"].as_str())
        }))
}

/// Waits until `target` has synced Backup `backup` from the shared
/// storage.
pub async fn wait_synced(
    target: &Cluster<'_>,
    backup: &str,
    limit: Duration,
) -> Result<(), MigrationError> {
    let api = &target.velero(&api::backups());
    let what = || format!("backup {backup} reaching {}", target.name);
    poll(limit, EVERY, what, move || async move {
        let b = api.get_opt(backup).await.map_err(|e| target.error(e))?;
        Ok(match b {
            Some(b) if json(&b)["status"]["phase"] == "Completed" => Step::Done(()),
            _ => Step::Waiting("not synced".into()),
        })
    })
    .await
}

/// Starts Restore `name` of the claims (and their data) of `backup` in
/// `target`, and returns once the claims are made: their pods wait for
/// the data, which the restore writes once a pod is scheduled.
pub async fn restore_claims(
    target: &Cluster<'_>,
    volumes: &Volumes,
    backup: &str,
    name: &str,
    limit: Duration,
) -> Result<(), MigrationError> {
    let spec = json!({
        "backupName": backup,
        "includedNamespaces": [volumes.namespace],
        "includedResources": ["persistentvolumeclaims"],
        "existingResourcePolicy": "none",
    });
    create(target, &api::restores(), name, spec).await?;
    let api = &target.velero(&api::restores());
    let what = || format!("restore {name} in {}", target.name);
    poll(
        limit,
        Duration::from_millis(200),
        what,
        move || async move {
            let Some(r) = api.get_opt(name).await.map_err(|e| target.error(e))? else {
                return Ok(Step::Waiting(String::new()));
            };
            let r = json(&r);
            let phase = r["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match phase.as_str() {
                "FailedValidation" | "Failed" | "PartiallyFailed" => Err(MigrationError::Refused(
                    format!("restore {name} in {} failed: {}", target.name, why(&r)),
                )),
                // Made: the claims come before the data.
                "InProgress" | "Completed" if claims_made(target, volumes, name).await? => {
                    Ok(Step::Done(()))
                }
                _ => Ok(Step::Waiting(phase)),
            }
        },
    )
    .await
}

/// Whether the restore has made its claims (or had none to make).
async fn claims_made(
    target: &Cluster<'_>,
    volumes: &Volumes,
    restore: &str,
) -> Result<bool, MigrationError> {
    let restore_api = target.velero(&api::restores());
    let r = restore_api
        .get_opt(restore)
        .await
        .map_err(|e| target.error(e))?
        .map(|r| json(&r))
        .unwrap_or_default();
    if r["status"]["phase"] == "Completed" {
        return Ok(true);
    }
    // Restored claims are labelled with the restore; its items are
    // written before any volume data, so one claim means all of them.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(target.client.clone(), &volumes.namespace);
    let labelled = claims
        .list(&ListParams::default().labels(&format!("velero.io/restore-name={restore}")))
        .await
        .map_err(|e| target.error(e))?;
    Ok(!labelled.items.is_empty())
}

/// Waits for the restore to write every volume's data; the finished
/// Restore, or why it did not complete.
pub async fn wait_restored(
    target: &Cluster<'_>,
    name: &str,
    limit: Duration,
) -> Result<Value, MigrationError> {
    let restore = finished(target, &api::restores(), name, limit).await?;
    if restore["status"]["phase"] != "Completed" {
        return Err(MigrationError::Refused(format!(
            "restore {name} in {} did not complete: {}",
            target.name,
            why(&restore)
        )));
    }
    Ok(restore)
}

/// Undoes a restore that will not be used: its claims, then the Restore.
pub async fn discard_restore(target: &Cluster<'_>, volumes: &Volumes, name: &str) {
    let claims: Api<DynamicObject> = Api::namespaced_with(
        target.client.clone(),
        &volumes.namespace,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&()),
    );
    let params = ListParams::default().labels(&format!("velero.io/restore-name={name}"));
    if let Err(error) = claims
        .delete_collection(&DeleteParams::default(), &params)
        .await
    {
        tracing::warn!(%error, cluster = target.name, restore = name, "cannot remove the restored claims");
    }
    if let Err(error) = target
        .velero(&api::restores())
        .delete(name, &DeleteParams::default())
        .await
    {
        tracing::warn!(%error, cluster = target.name, restore = name, "cannot remove the restore");
    }
}
