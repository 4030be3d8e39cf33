//! Backups: a new Backup is validated (its storage location must exist
//! and be usable), then every object its filters take is read through
//! the API and written to the location as Velero's tarball, beside the
//! Backup itself, its resource list, results and log. A Backup past its
//! `expiration` goes, with its files (Velero's garbage collection).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::api;
use crate::archive::{self, Item};
use crate::controller::{self, Error, fail, fail_validation, json, now, objects, write_status};
use crate::filter::IncludesExcludes;
use crate::records;
use crate::storage_location::{self, STORAGE_LOCATION_LABEL, SYNCED_ANNOTATION};
use crate::volumes::{self, VolumeBackup};

/// Velero's default `ttl`: 30 days.
const DEFAULT_TTL: Duration = Duration::from_secs(720 * 3600);
const EXCLUDE_LABEL: &str = "velero.io/exclude-from-backup";

pub async fn run(client: Client) {
    // Backups this process has started: one InProgress that is not is
    // left over from a process that died, and failed as Velero fails it.
    let started: Arc<Mutex<HashSet<String>>> = Arc::default();
    let c = client.clone();
    controller::run(client, api::backups(), "backup", move |b| {
        reconcile(c.clone(), started.clone(), b)
    })
    .await;
}

fn terminal(phase: &str) -> bool {
    matches!(
        phase,
        "Completed" | "PartiallyFailed" | "Failed" | "FailedValidation"
    )
}

async fn reconcile(
    client: Client,
    started: Arc<Mutex<HashSet<String>>>,
    backup: Arc<DynamicObject>,
) -> Result<Option<Duration>, Error> {
    let name = backup.name_any();
    let api = objects(&client, &api::backups());
    let Some(backup) = controller::fresh(&api, &backup).await? else {
        return Ok(None);
    };
    let object = json(&backup);
    let phase = object["status"]["phase"].as_str().unwrap_or_default();
    if backup.annotations().contains_key(SYNCED_ANNOTATION) && phase.is_empty() {
        // Its stored status is being written.
        return Ok(Some(Duration::from_secs(1)));
    }
    if terminal(phase) {
        return expire(&client, &api, &object).await;
    }
    let uid = backup.uid().unwrap_or_default();
    if phase == "InProgress" && !started.lock().map(|s| s.contains(&uid)).unwrap_or(false) {
        let reason = "found a backup with status \"InProgress\" during the server starting, mark it as \"Failed\"";
        return fail(&api, &name, reason).await;
    }
    // Validation.
    let spec = &object["spec"];
    let (location_name, location) =
        match storage_location::resolve(&client, spec["storageLocation"].as_str()).await? {
            Ok(found) => found,
            Err(message) => {
                return fail_validation(&api, &name, vec![message]).await;
            }
        };
    let mut problems = Vec::new();
    if !spec["labelSelector"].is_null() && !spec["orLabelSelectors"].is_null() {
        problems.push(
            "encountered labelSelector as well as orLabelSelectors in backup spec, only one can be specified".to_string(),
        );
    }
    if phase.is_empty() && location.get(&name, crate::BACKUP_METADATA).await?.is_some() {
        problems.push(format!(
            "backup {name} already exists in storage location {location_name}"
        ));
    }
    if !problems.is_empty() {
        return fail_validation(&api, &name, problems).await;
    }
    if let Ok(mut s) = started.lock() {
        s.insert(uid);
    }
    let ttl = spec["ttl"]
        .as_str()
        .filter(|t| !t.is_empty())
        .and_then(flotilla_core::duration::parse_go)
        .unwrap_or(DEFAULT_TTL);
    let start = now();
    let expiration = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(ttl).unwrap_or_default())
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_default();
    write_status(
        &api,
        &name,
        json!({"phase": "InProgress", "startTimestamp": start, "expiration": expiration,
               "version": 1, "formatVersion": archive::FORMAT_VERSION}),
    )
    .await?;
    // Labelled with its location, as Velero does.
    api.patch(
        &name,
        &Default::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"labels": {STORAGE_LOCATION_LABEL: location_name}}}),
        ),
    )
    .await?;
    info!(backup = %name, location = %location_name, "backing up");

    let collected = collect(&client, spec).await?;
    let warnings = collected.warnings;
    let items = collected.items;
    let by_default = spec["defaultVolumesToFsBackup"] == json!(true);
    let (volume_backups, errors) = back_up_volumes(
        &client,
        &items,
        (&location, &location_name),
        &object,
        by_default,
    )
    .await;
    let tarball = archive::write(&items)?;
    let mut resource_list: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in &items {
        let key = format!(
            "{}/{}",
            item.object["apiVersion"].as_str().unwrap_or_default(),
            item.object["kind"].as_str().unwrap_or_default()
        );
        let entry = match &item.namespace {
            Some(ns) => format!("{ns}/{}", item.name),
            None => item.name.clone(),
        };
        resource_list.entry(key).or_default().push(entry);
    }
    for list in resource_list.values_mut() {
        list.sort();
    }
    let results = json!({"warnings": {"velero": warnings}, "errors": {"velero": errors}});
    let log = backup_log(
        &name,
        &location_name,
        &items,
        &volume_backups,
        &warnings,
        &errors,
    );
    let phase = if errors.is_empty() {
        "Completed"
    } else {
        "PartiallyFailed"
    };
    let status = json!({
        "phase": phase, "startTimestamp": start, "completionTimestamp": now(),
        "expiration": expiration, "version": 1, "formatVersion": archive::FORMAT_VERSION,
        "progress": {"totalItems": items.len(), "itemsBackedUp": items.len()},
        "warnings": warnings.len(), "errors": errors.len(),
    });
    let mut stored = object.clone();
    stored["status"] = status.clone();
    stored["metadata"]["labels"][STORAGE_LOCATION_LABEL] = json!(location_name);
    let files = [
        (
            format!("{name}-tarball.sha256"),
            volumes::sha256_hex(&tarball).into_bytes(),
        ),
        (format!("{name}.tar.gz"), tarball),
        (
            format!("{name}-resource-list.json.gz"),
            archive::gzip(&serde_json::to_vec(&resource_list)?)?,
        ),
        (
            format!("{name}-results.gz"),
            archive::gzip(&serde_json::to_vec(&results)?)?,
        ),
        (format!("{name}-logs.gz"), archive::gzip(log.as_bytes())?),
        (
            format!("{name}-podvolumebackups.json.gz"),
            archive::gzip(&serde_json::to_vec(&volume_backups)?)?,
        ),
        // Last: a backup is in the storage once its metadata is.
        (
            crate::BACKUP_METADATA.to_string(),
            serde_json::to_vec_pretty(&stored)?,
        ),
    ];
    // Tests of recovery stop here (a server killed mid-backup).
    flotilla_failpoint::hit("backup-before-upload");
    for (file, bytes) in &files {
        if let Err(error) = location.put(&name, file, bytes).await {
            // An unwritable or full location: failed, as Velero fails a
            // backup it cannot upload, not retried into a loop.
            let reason = format!("error uploading backup to location {location_name}: {error}");
            return fail(&api, &name, &reason).await;
        }
    }
    write_status(&api, &name, status).await?;
    info!(backup = %name, items = items.len(), volumes = volume_backups.len(), errors = errors.len(), "backup done");
    Ok(None)
}

/// The backup's log, in Velero's logfmt: what was backed up, then the
/// warnings and errors.
fn backup_log(
    name: &str,
    location: &str,
    items: &[Item],
    volumes: &[VolumeBackup],
    warnings: &[String],
    errors: &[String],
) -> String {
    let line = |level: &str, message: &str, fields: &str| {
        let message = message.replace('\\', "\\\\").replace('"', "\\\"");
        format!(
            "time=\"{}\" level={level} msg=\"{message}\" backup=velero/{name}{fields}\n",
            now()
        )
    };
    let mut log = line("info", "Setting up backup log", "");
    log += &line(
        "info",
        "Starting backup",
        &format!(" storageLocation={location}"),
    );
    for item in items {
        let namespace = item.namespace.as_deref().unwrap_or_default();
        log += &line(
            "info",
            "Backing up item",
            &format!(
                " name={} namespace={namespace} resource={}",
                item.name, item.group_resource
            ),
        );
    }
    for v in volumes {
        log += &line(
            "info",
            "Backed up volume by file system",
            &format!(
                " pod={}/{} volume={} snapshotID={} bytes={}",
                v.namespace, v.pod, v.volume, v.snapshot_id, v.total_bytes
            ),
        );
    }
    for w in warnings {
        log += &line("warning", w, "");
    }
    for e in errors {
        log += &line("error", e, "");
    }
    log += &line(
        "info",
        &format!("Backed up a total of {} items", items.len()),
        "",
    );
    log
}

/// Backs up the data of the volumes the backed-up pods' claims name, once
/// per claim; what was stored, and the errors.
async fn back_up_volumes(
    client: &Client,
    items: &[Item],
    (location, location_name): (&crate::location::Location, &str),
    backup: &Value,
    by_default: bool,
) -> (Vec<VolumeBackup>, Vec<String>) {
    let mut done: Vec<VolumeBackup> = Vec::new();
    let mut errors = Vec::new();
    let pvs: Api<DynamicObject> = Api::all_with(client.clone(), &pv_resource());
    for pod in items.iter().filter(|i| i.group_resource == "pods") {
        let Some(ns) = &pod.namespace else { continue };
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(client.clone(), ns);
        for (volume, claim) in volumes::volumes_to_back_up(&pod.object, by_default) {
            if done.iter().any(|d| d.namespace == *ns && d.pvc == claim) {
                continue;
            }
            let dir = async {
                let pvc = claims.get_opt(&claim).await.ok()??;
                let pv_name = pvc.spec?.volume_name?;
                let pv = pvs.get_opt(&pv_name).await.ok()??;
                volumes::volume_dir(&json(&pv))
            }
            .await;
            let Some(dir) = dir else {
                errors.push(format!(
                    "pod {ns}/{}: volume {volume}: claim {claim} has no volume on this host",
                    pod.name
                ));
                continue;
            };
            let started = now();
            let pod_ref = records::PodRef {
                namespace: ns,
                name: &pod.name,
                uid: pod.object["metadata"]["uid"].as_str().unwrap_or_default(),
                node: pod.object["spec"]["nodeName"].as_str().unwrap_or_default(),
            };
            let backed_up = volumes::back_up(location, ns, &dir).await;
            let (outcome, snapshot_id) = match &backed_up {
                Ok((id, bytes, _)) => (Ok(*bytes), id.as_str()),
                Err(e) => (Err(e.to_string()), ""),
            };
            records::backed_up(
                client,
                backup,
                location_name,
                &pod_ref,
                (&volume, &claim),
                &started,
                (&outcome, snapshot_id),
            )
            .await;
            match backed_up {
                Ok((snapshot_id, total_bytes, files)) => done.push(VolumeBackup {
                    namespace: ns.clone(),
                    pod: pod.name.clone(),
                    volume,
                    pvc: claim,
                    snapshot_id,
                    total_bytes,
                    files,
                }),
                Err(e) => errors.push(format!("pod {ns}/{}: volume {volume}: {e}", pod.name)),
            }
        }
    }
    (done, errors)
}

/// Deletes a finished Backup and its files once it has expired; looks
/// again then otherwise.
async fn expire(
    client: &Client,
    api: &Api<DynamicObject>,
    object: &Value,
) -> Result<Option<Duration>, Error> {
    let Some(expiration) = object["status"]["expiration"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return Ok(None);
    };
    let left = expiration.duration_since(jiff::Timestamp::now());
    if left.is_positive() {
        // At most a day at a time: the timer is no promise across restarts.
        let wait = Duration::try_from(left).unwrap_or_default();
        return Ok(Some(wait.min(Duration::from_secs(24 * 3600))));
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let location = object["metadata"]["labels"][STORAGE_LOCATION_LABEL]
        .as_str()
        .or(object["spec"]["storageLocation"].as_str());
    if let Ok((_, storage)) = storage_location::resolve(client, location).await? {
        storage.delete(name).await?;
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => info!(backup = %name, "backup expired; deleted with its files"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(None)
}

struct Collected {
    items: Vec<Item>,
    warnings: Vec<String>,
}

/// Every object the Backup's filters take, read at each kind's preferred
/// version (Velero's item collector).
async fn collect(client: &Client, spec: &Value) -> Result<Collected, Error> {
    let namespaces = IncludesExcludes::of(&spec["includedNamespaces"], &spec["excludedNamespaces"]);
    let resources = IncludesExcludes::of(&spec["includedResources"], &spec["excludedResources"]);
    let cluster_resources = spec["includeClusterResources"].as_bool();
    let selector = flotilla_core::selector::format_label_selector(&spec["labelSelector"]);
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    let mut seen_kinds = BTreeSet::new();
    let mut bound_volumes = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            // What can be listed and made again (not computed kinds such
            // as metrics.k8s.io's).
            if !caps.supports_operation(verbs::LIST) || !caps.supports_operation(verbs::CREATE) {
                continue;
            }
            let gr = archive::group_resource(&ar.group, &ar.plural);
            // Events of both groups are one resource: the core group's.
            if !seen_kinds.insert((ar.kind.clone(), gr.clone())) || gr == "events.events.k8s.io" {
                continue;
            }
            let singular = ar.kind.to_lowercase();
            let aliases = [
                ar.plural.as_str(),
                gr.as_str(),
                singular.as_str(),
                ar.kind.as_str(),
            ];
            let namespaced = caps.scope == Scope::Namespaced;
            if !resources.includes(&aliases) {
                continue;
            }
            let is_namespace = ar.group.is_empty() && ar.plural == "namespaces";
            if !namespaced && !is_namespace {
                let take = match cluster_resources {
                    Some(t) => t,
                    None => namespaces.everything(),
                };
                if !take {
                    continue;
                }
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let mut params = ListParams::default();
            if !selector.is_empty() && !is_namespace {
                params = params.labels(&selector);
            }
            let listed = match api.list(&params).await {
                Ok(l) => l.items,
                Err(e) => {
                    warnings.push(format!("cannot list {gr}: {e}"));
                    continue;
                }
            };
            for object in listed {
                if object.metadata.deletion_timestamp.is_some()
                    || object.labels().get(EXCLUDE_LABEL).map(String::as_str) == Some("true")
                {
                    continue;
                }
                let ns = object.namespace();
                if let Some(ns) = &ns
                    && !namespaces.includes(&[ns])
                {
                    continue;
                }
                if is_namespace && !namespaces.includes(&[&object.name_any()]) {
                    continue;
                }
                let mut value = json(&object);
                value["apiVersion"] = json!(ar.api_version);
                value["kind"] = json!(ar.kind);
                if ar.group.is_empty()
                    && ar.plural == "persistentvolumeclaims"
                    && value["status"]["phase"] == "Bound"
                    && let Some(volume) = value["spec"]["volumeName"].as_str()
                {
                    bound_volumes.push(volume.to_string());
                }
                items.push(Item {
                    group_resource: gr.clone(),
                    version: ar.version.clone(),
                    namespace: ns,
                    name: object.name_any(),
                    object: value,
                });
            }
        }
    }
    // The claims of the pods taken, whatever the label selector says
    // (Velero's pod backup item action).
    if resources.includes(&[
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
    ]) {
        let wanted: BTreeSet<(String, String)> = items
            .iter()
            .filter(|i| i.group_resource == "pods")
            .flat_map(|pod| {
                let ns = pod.namespace.clone().unwrap_or_default();
                pod.object["spec"]["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                    .map(move |claim| (ns.clone(), claim.to_string()))
            })
            .collect();
        for (ns, claim) in wanted {
            let taken = items.iter().any(|i| {
                i.group_resource == "persistentvolumeclaims"
                    && i.namespace.as_deref() == Some(ns.as_str())
                    && i.name == claim
            });
            if taken {
                continue;
            }
            let claims: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &claim_resource());
            let Some(object) = claims.get_opt(&claim).await? else {
                continue;
            };
            let mut value = json(&object);
            value["apiVersion"] = json!("v1");
            value["kind"] = json!("PersistentVolumeClaim");
            if value["status"]["phase"] == "Bound"
                && let Some(volume) = value["spec"]["volumeName"].as_str()
            {
                bound_volumes.push(volume.to_string());
            }
            items.push(Item {
                group_resource: "persistentvolumeclaims".into(),
                version: "v1".into(),
                namespace: Some(ns),
                name: claim,
                object: value,
            });
        }
    }
    // The volumes of the claims taken, unless volumes are left out.
    let volumes_allowed = cluster_resources != Some(false)
        && resources.includes(&["persistentvolumes", "persistentvolume", "PersistentVolume"]);
    if volumes_allowed {
        let pvs: Api<DynamicObject> = Api::all_with(client.clone(), &pv_resource());
        for volume in bound_volumes {
            if items
                .iter()
                .any(|i| i.group_resource == "persistentvolumes" && i.name == volume)
            {
                continue;
            }
            if let Some(pv) = pvs.get_opt(&volume).await? {
                let mut value = json(&pv);
                value["apiVersion"] = json!("v1");
                value["kind"] = json!("PersistentVolume");
                items.push(Item {
                    group_resource: "persistentvolumes".into(),
                    version: "v1".into(),
                    namespace: None,
                    name: volume,
                    object: value,
                });
            }
        }
    }
    Ok(Collected { items, warnings })
}

fn claim_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&())
}

fn pv_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "PersistentVolume".into(),
        plural: "persistentvolumes".into(),
    }
}
