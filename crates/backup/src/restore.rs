//! Restores: the Backup a Restore names is read from its storage location
//! and its objects are created again, in Velero's order (CRDs and
//! namespaces first, workloads' dependencies before them), under the
//! Restore's filters and `namespaceMapping`, with what the cluster makes
//! itself stripped (uids, versions, status, a Service's clusterIP, a pod's
//! node) and Velero's `velero.io/backup-name` and `restore-name` labels.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_core::volume_data::RESTORING_ANNOTATION;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::{info, warn};

use crate::api;
use crate::archive::{self, Item};
use crate::controller::{self, Error, fail, fail_validation, json, now, objects, write_status};
use crate::filter::IncludesExcludes;
use crate::records;
use crate::storage_location::{self, STORAGE_LOCATION_LABEL};
use crate::volumes::{self, VolumeBackup};

/// Velero's default restore priorities: these first, in this order, then
/// the rest alphabetically, then the low ones.
const HIGH: &[&str] = &[
    "customresourcedefinitions.apiextensions.k8s.io",
    "namespaces",
    "storageclasses.storage.k8s.io",
    "volumesnapshotclass.snapshot.storage.k8s.io",
    "volumesnapshotcontents.snapshot.storage.k8s.io",
    "volumesnapshots.snapshot.storage.k8s.io",
    "datauploads.velero.io",
    "persistentvolumes",
    "persistentvolumeclaims",
    "serviceaccounts",
    "secrets",
    "configmaps",
    "limitranges",
    "pods",
    "replicasets.apps",
    "clusterclasses.cluster.x-k8s.io",
    "endpoints",
    "services",
];
const LOW: &[&str] = &[
    "clusterbootstraps.run.tanzu.vmware.com",
    "clusters.cluster.x-k8s.io",
    "clusterresourcesets.addons.cluster.x-k8s.io",
];
/// What Velero never restores.
const NON_RESTORABLE: &[&str] = &[
    "nodes",
    "events",
    "events.events.k8s.io",
    "backups.velero.io",
    "restores.velero.io",
    "resticrepositories.velero.io",
    "csinodes.storage.k8s.io",
    "volumeattachments.storage.k8s.io",
    "backuprepositories.velero.io",
];

const BACKUP_NAME_LABEL: &str = "velero.io/backup-name";
const RESTORE_NAME_LABEL: &str = "velero.io/restore-name";

pub async fn run(client: Client) {
    // Restores this process has started: one InProgress that is not is
    // left over from a process that died.
    let started: Arc<Mutex<HashSet<String>>> = Arc::default();
    let c = client.clone();
    controller::run(client, api::restores(), "restore", move |r| {
        reconcile(c.clone(), started.clone(), r)
    })
    .await;
}

/// Where `gr` comes in a restore.
fn priority(gr: &str) -> (usize, String) {
    if let Some(i) = HIGH.iter().position(|h| *h == gr) {
        (0, format!("{i:03}"))
    } else if let Some(i) = LOW.iter().position(|l| *l == gr) {
        (2, format!("{i:03}"))
    } else {
        (1, gr.to_string())
    }
}

async fn reconcile(
    client: Client,
    started: Arc<Mutex<HashSet<String>>>,
    restore: Arc<DynamicObject>,
) -> Result<Option<Duration>, Error> {
    let name = restore.name_any();
    let api = objects(&client, &api::restores());
    let Some(restore) = controller::fresh(&api, &restore).await? else {
        return Ok(None);
    };
    let object = json(&restore);
    let phase = object["status"]["phase"].as_str().unwrap_or_default();
    let uid = restore.uid().unwrap_or_default();
    if phase == "InProgress" && !started.lock().map(|s| s.contains(&uid)).unwrap_or(false) {
        // As Velero: failed, and its claims' pods no longer held.
        release_claims(&client, &name).await?;
        let reason = "found a restore with status \"InProgress\" during the server starting, mark it as \"Failed\"";
        return fail(&api, &name, reason).await;
    }
    if !phase.is_empty() && phase != "New" {
        return Ok(None);
    }
    let spec = &object["spec"];
    // Validation, as Velero's.
    let mut problems = Vec::new();
    let backup_name = spec["backupName"].as_str().unwrap_or_default();
    let schedule_name = spec["scheduleName"].as_str().unwrap_or_default();
    if backup_name.is_empty() == schedule_name.is_empty() {
        problems.push(
            "Either a backup or schedule must be specified as a source for the restore, but not both"
                .to_string(),
        );
    }
    let policy = spec["existingResourcePolicy"].as_str().unwrap_or("none");
    if !matches!(policy, "" | "none" | "update") {
        problems.push(format!("Invalid ExistingResourcePolicy: {policy}"));
    }
    for r in spec["includedResources"].as_array().into_iter().flatten() {
        if let Some(r) = r.as_str()
            && NON_RESTORABLE.contains(&r)
        {
            problems.push(format!("{r} are non-restorable resources"));
        }
    }
    let backup_name = if backup_name.is_empty() {
        latest_of_schedule(&client, schedule_name).await?
    } else {
        Some(backup_name.to_string())
    };
    let backups = objects(&client, &api::backups());
    let backup = match &backup_name {
        Some(b) => backups.get_opt(b).await?,
        None => None,
    };
    let Some(backup) = backup.filter(|_| problems.is_empty()) else {
        if problems.is_empty() {
            problems.push(match &backup_name {
                Some(b) => format!("Error retrieving backup: backups.velero.io \"{b}\" not found"),
                None => format!("No backups found for schedule {schedule_name:?}"),
            });
        }
        return fail_validation(&api, &name, problems).await;
    };
    let backup = json(&backup);
    let backup_name = backup["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let location_name = backup["metadata"]["labels"][STORAGE_LOCATION_LABEL]
        .as_str()
        .or(backup["spec"]["storageLocation"].as_str())
        .map(String::from);
    let storage = match storage_location::resolve(&client, location_name.as_deref()).await? {
        Ok((_, s)) => s,
        Err(message) => {
            return fail_validation(&api, &name, vec![message]).await;
        }
    };
    let Some(tarball) = storage
        .get(&backup_name, &format!("{backup_name}.tar.gz"))
        .await?
    else {
        let message = format!("the tarball of backup {backup_name} is not in its storage location");
        return fail_validation(&api, &name, vec![message]).await;
    };
    if let Ok(mut s) = started.lock() {
        s.insert(uid);
    }
    let start = now();
    write_status(
        &api,
        &name,
        json!({"phase": "InProgress", "startTimestamp": start}),
    )
    .await?;
    info!(restore = %name, backup = %backup_name, "restoring");

    // A damaged tarball is refused before anything is made of it.
    let expected = storage
        .get(&backup_name, &format!("{backup_name}-tarball.sha256"))
        .await?
        .map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let found = volumes::sha256_hex(&tarball);
    let items = match expected {
        Some(expected) if expected != found => Err(format!(
            "the tarball of backup {backup_name} does not match its checksum (sha256 {expected} expected, {found} found): its storage location is damaged"
        )),
        _ => archive::read(&tarball).map_err(|e| e.to_string()),
    };
    let items = match items {
        Ok(items) => items,
        Err(reason) => {
            return fail(&api, &name, &reason).await;
        }
    };
    let chosen = choose(spec, items);
    let total = chosen.len();
    let mut outcome = Outcome::default();
    let mapping = spec["namespaceMapping"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let namespaces = IncludesExcludes::of(&spec["includedNamespaces"], &spec["excludedNamespaces"]);
    // The data of the volumes backed up goes into the restored claims
    // (`restorePVs: false` leaves volumes, and their data, out).
    let records: Vec<VolumeBackup> = if restores_volumes(spec) {
        storage
            .get(
                &backup_name,
                &format!("{backup_name}-podvolumebackups.json.gz"),
            )
            .await?
            .and_then(|gz| archive::gunzip(&gz).ok())
            .and_then(|bytes| serde_json::from_slice::<Vec<VolumeBackup>>(&bytes).ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| namespaces.includes(&[&r.namespace]))
            .collect()
    } else {
        Vec::new()
    };
    let mut ensured: HashSet<String> = HashSet::new();
    for item in &chosen {
        // As Velero: the namespace of a namespaced item is made when
        // missing, even where the backup does not hold it.
        if let Some(ns) = &item.namespace {
            let target = mapping.get(ns).and_then(Value::as_str).unwrap_or(ns);
            if ensured.insert(target.to_string())
                && let Err(e) = flotilla_client::namespace::ensure(&client, target, &[]).await
            {
                outcome
                    .errors
                    .push(format!("error creating namespace {target}: {e}"));
            }
        }
        let held = holding_pods(item, &records, &name);
        restore_item(
            &client,
            held.as_ref().unwrap_or(item),
            &mapping,
            (&backup_name, &name),
            policy == "update",
            &mut outcome,
        )
        .await;
    }
    // Each volume waits for its claim to be bound (its pod scheduled),
    // so all wait at once: a StatefulSet's second pod comes only once
    // its first, and so its data, is ready.
    let volume_errors = futures::future::join_all(records.iter().map(|record| {
        let target = mapping
            .get(&record.namespace)
            .and_then(Value::as_str)
            .unwrap_or(&record.namespace)
            .to_string();
        let (client, storage, object, location) =
            (&client, &storage, &object, location_name.as_deref());
        async move {
            let started = now();
            let restored = restore_volume(client, storage, record, &target).await;
            records::restored(
                client,
                object,
                location.unwrap_or("default"),
                record,
                &target,
                &started,
                &restored,
            )
            .await;
            release_claim(client, &target, &record.pvc).await;
            restored.err().map(|e| {
                format!(
                    "volume {} of pod {}/{} (claim {}): {e}",
                    record.volume, record.namespace, record.pod, record.pvc
                )
            })
        }
    }))
    .await;
    outcome.errors.extend(volume_errors.into_iter().flatten());
    for error in &outcome.errors {
        warn!(restore = %name, %error, "an item was not restored");
    }
    let phase = if outcome.errors.is_empty() {
        "Completed"
    } else {
        "PartiallyFailed"
    };
    let results = json!({"warnings": {"namespaces": outcome.warnings_by_ns(), "velero": outcome.warnings},
                         "errors": {"velero": outcome.errors}});
    let dir = format!("restores/{name}");
    // The results are a record beside the restore; failing to store them
    // does not undo what was restored.
    if let Err(error) = storage
        .put_under(
            &dir,
            &format!("restore-{name}-results.gz"),
            &archive::gzip(&serde_json::to_vec(&results)?)?,
        )
        .await
    {
        tracing::warn!(%error, restore = %name, "cannot store the restore's results");
    }
    write_status(
        &api,
        &name,
        json!({"phase": phase, "startTimestamp": start, "completionTimestamp": now(),
               "progress": {"totalItems": total, "itemsRestored": outcome.restored},
               "warnings": outcome.warnings.len(), "errors": outcome.errors.len()}),
    )
    .await?;
    info!(restore = %name, restored = outcome.restored, warnings = outcome.warnings.len(), errors = outcome.errors.len(), "restore done");
    Ok(None)
}

/// A claim whose data this restore writes back, marked so that no
/// container using it starts before its data is there.
fn holding_pods(item: &Item, records: &[VolumeBackup], restore: &str) -> Option<Item> {
    let restored = item.group_resource == "persistentvolumeclaims"
        && records
            .iter()
            .any(|r| Some(r.namespace.as_str()) == item.namespace.as_deref() && r.pvc == item.name);
    if !restored {
        return None;
    }
    let mut held = item.clone();
    let annotations = &mut held.object["metadata"]["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[RESTORING_ANNOTATION] = json!(format!("{}/{restore}", api::NAMESPACE));
    Some(held)
}

/// Lets the pods of a claim start: its data is written, or will not be.
async fn release_claim(client: &Client, namespace: &str, claim: &str) {
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &claim_resource());
    let patch = json!({"metadata": {"annotations": {RESTORING_ANNOTATION: null}}});
    match claims
        .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(error) => warn!(%error, %namespace, %claim, "cannot release the restored claim"),
    }
}

/// Releases every claim a restore marked (one a dead process left).
async fn release_claims(client: &Client, restore: &str) -> Result<(), Error> {
    let claims: Api<DynamicObject> = Api::all_with(client.clone(), &claim_resource());
    let marked = claims
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{RESTORE_NAME_LABEL}={}", valid_label(restore))),
        )
        .await?;
    for claim in marked.items {
        if claim.annotations().contains_key(RESTORING_ANNOTATION) {
            release_claim(
                client,
                &claim.namespace().unwrap_or_default(),
                &claim.name_any(),
            )
            .await;
        }
    }
    Ok(())
}

fn claim_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&())
}

/// How long a restored claim may take to be bound (its pod scheduled,
/// its volume provisioned) before its data is given up on.
const CLAIM_BOUND_WAIT: Duration = Duration::from_secs(60);

/// Writes a volume's backed-up data into the volume its restored claim is
/// bound to, once it is.
async fn restore_volume(
    client: &Client,
    storage: &crate::location::Location,
    record: &VolumeBackup,
    namespace: &str,
) -> Result<u64, String> {
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + CLAIM_BOUND_WAIT;
    let volume = loop {
        let claim = claims
            .get_opt(&record.pvc)
            .await
            .map_err(|e| e.to_string())?;
        let Some(claim) = claim else {
            return Err(format!("claim {namespace}/{} was not restored", record.pvc));
        };
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if let Some(name) = claim.spec.and_then(|s| s.volume_name).filter(|_| bound) {
            break name;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "claim {namespace}/{} was not bound within {}s (no pod uses it?)",
                record.pvc,
                CLAIM_BOUND_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&volume).await.map_err(|e| e.to_string())?;
    let dir = volumes::volume_dir(&serde_json::to_value(&pv).unwrap_or_default())
        .ok_or_else(|| format!("volume {volume} is not a directory on this host"))?;
    let bytes = volumes::restore(storage, &record.namespace, &record.snapshot_id, &dir)
        .await
        .map_err(|e| e.to_string())?;
    info!(claim = %format!("{namespace}/{}", record.pvc), %volume, bytes, "volume data restored");
    Ok(bytes)
}

/// The newest completed backup of a schedule.
async fn latest_of_schedule(client: &Client, schedule: &str) -> Result<Option<String>, Error> {
    if schedule.is_empty() {
        return Ok(None);
    }
    let list = objects(client, &api::backups())
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("velero.io/schedule-name={schedule}")),
        )
        .await?;
    Ok(list
        .items
        .iter()
        .map(json)
        .filter(|b| b["status"]["phase"] == "Completed")
        .max_by(|a, b| {
            a["status"]["startTimestamp"]
                .as_str()
                .cmp(&b["status"]["startTimestamp"].as_str())
        })
        .and_then(|b| b["metadata"]["name"].as_str().map(String::from)))
}

/// The items the Restore's filters take, in Velero's order, without
/// what is never restored or the cluster makes again by itself.
fn choose(spec: &Value, items: Vec<Item>) -> Vec<Item> {
    let namespaces = IncludesExcludes::of(&spec["includedNamespaces"], &spec["excludedNamespaces"]);
    let mut resources =
        IncludesExcludes::of(&spec["includedResources"], &spec["excludedResources"]);
    resources.exclude(NON_RESTORABLE);
    let cluster_resources = spec["includeClusterResources"].as_bool();
    let mut chosen: Vec<Item> = items
        .into_iter()
        .filter(|i| {
            let plural = i.group_resource.split('.').next().unwrap_or_default();
            let kind = i.object["kind"].as_str().unwrap_or_default();
            resources.includes(&[&i.group_resource, plural, kind])
        })
        .filter(|i| match &i.namespace {
            Some(ns) => namespaces.includes(&[ns]),
            None if i.group_resource == "namespaces" => namespaces.includes(&[&i.name]),
            None => match cluster_resources {
                Some(take) => take,
                None => namespaces.everything(),
            },
        })
        .filter(|i| !made_by_the_cluster(i))
        .filter(|i| restores_volumes(spec) || i.group_resource != "persistentvolumes")
        .collect();
    chosen.sort_by_key(|i| priority(&i.group_resource));
    chosen
}

/// Whether volumes are restored: unless `restorePVs` is false (Velero's
/// default restores them).
fn restores_volumes(spec: &Value) -> bool {
    spec["restorePVs"].as_bool() != Some(false)
}

/// What the cluster makes again by itself: pods and ReplicaSets that a
/// controller owns (their owner is restored and makes them), finished
/// pods and Jobs, service account tokens, and volumes provisioned for a
/// claim (the restored claim gets a new one).
fn made_by_the_cluster(item: &Item) -> bool {
    let o = &item.object;
    let controlled = o["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == json!(true)));
    match item.group_resource.as_str() {
        "pods" => {
            controlled || matches!(o["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        }
        "replicasets.apps" | "controllerrevisions.apps" | "endpointslices.discovery.k8s.io" => {
            controlled
        }
        "jobs.batch" => o["status"]["completionTime"].is_string(),
        "secrets" => o["type"] == "kubernetes.io/service-account-token",
        "persistentvolumes" => o["spec"]["persistentVolumeReclaimPolicy"] == "Delete",
        _ => false,
    }
}

#[derive(Default)]
struct Outcome {
    restored: usize,
    warnings: Vec<String>,
    /// (namespace, warning) for `results`.
    namespaced: Vec<(String, String)>,
    errors: Vec<String>,
}

impl Outcome {
    fn warnings_by_ns(&self) -> Value {
        let mut by: Map<String, Value> = Map::new();
        for (ns, w) in &self.namespaced {
            let list = by.entry(ns.clone()).or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut() {
                list.push(json!(w));
            }
        }
        Value::Object(by)
    }
}

/// The object as it is created again: in its (mapped) namespace, without
/// what the cluster assigns, labelled with the backup and the restore.
fn prepare(item: &Item, namespace: Option<&str>, labels: (&str, &str)) -> Value {
    let mut o = item.object.clone();
    if let Some(meta) = o["metadata"].as_object_mut() {
        for field in [
            "generateName",
            "selfLink",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "ownerReferences",
            "managedFields",
        ] {
            meta.remove(field);
        }
        if let Some(ns) = namespace {
            meta.insert("namespace".into(), json!(ns));
        }
    }
    if let Some(o) = o.as_object_mut() {
        o.remove("status");
    }
    let all = &mut o["metadata"]["labels"];
    if !all.is_object() {
        *all = json!({});
    }
    all[BACKUP_NAME_LABEL] = json!(valid_label(labels.0));
    all[RESTORE_NAME_LABEL] = json!(valid_label(labels.1));
    match item.group_resource.as_str() {
        "pods" => {
            if let Some(spec) = o["spec"].as_object_mut() {
                spec.remove("nodeName");
                spec.remove("priority");
            }
        }
        "services" => {
            if o["spec"]["clusterIP"] != "None"
                && let Some(spec) = o["spec"].as_object_mut()
            {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            if o["spec"]["preserveNodePorts"] != json!(true) {
                for port in o["spec"]["ports"].as_array_mut().into_iter().flatten() {
                    if let Some(p) = port.as_object_mut() {
                        p.remove("nodePort");
                    }
                }
            }
        }
        "persistentvolumeclaims" => {
            // Provisioned again here (its volume was not restored).
            if let Some(spec) = o["spec"].as_object_mut() {
                spec.remove("volumeName");
            }
            if let Some(a) = o["metadata"]["annotations"].as_object_mut() {
                for key in [
                    "pv.kubernetes.io/bind-completed",
                    "pv.kubernetes.io/bound-by-controller",
                    "volume.kubernetes.io/selected-node",
                ] {
                    a.remove(key);
                }
            }
        }
        "namespaces" => {
            if let Some(ns) = namespace {
                o["metadata"]["name"] = json!(ns);
            }
        }
        _ => {}
    }
    o
}

/// A label value of at most 63 characters, as Velero's GetValidName.
fn valid_label(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    let suffix = format!("{:x}", h.finish());
    let keep = 63 - suffix.len().min(16);
    format!(
        "{}{}",
        &name[..keep.min(name.len())],
        &suffix[..suffix.len().min(16)]
    )
}

fn resource_of(item: &Item) -> ApiResource {
    let api_version = item.object["apiVersion"]
        .as_str()
        .unwrap_or("v1")
        .to_string();
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    ApiResource {
        group,
        version,
        api_version,
        kind: item.object["kind"].as_str().unwrap_or_default().to_string(),
        plural: item
            .group_resource
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

/// Whether two objects say the same, their metadata and status aside.
fn same(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(a) == strip(b)
}

async fn restore_item(
    client: &Client,
    item: &Item,
    mapping: &Map<String, Value>,
    (backup, restore): (&str, &str),
    update: bool,
    outcome: &mut Outcome,
) {
    let source_ns = match &item.namespace {
        Some(ns) => Some(ns.clone()),
        None if item.group_resource == "namespaces" => Some(item.name.clone()),
        None => None,
    };
    let target_ns = source_ns.as_ref().map(|ns| {
        mapping
            .get(ns)
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| ns.clone())
    });
    let object = prepare(item, target_ns.as_deref(), (backup, restore));
    let ar = resource_of(item);
    let api: Api<DynamicObject> = match (&item.namespace, &target_ns) {
        (Some(_), Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = ar.kind.clone();
    let dynamic: DynamicObject = match serde_json::from_value(object.clone()) {
        Ok(d) => d,
        Err(e) => {
            outcome
                .errors
                .push(format!("error restoring {kind} {name}: {e}"));
            return;
        }
    };
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(_) => outcome.restored += 1,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = match api.get(&name).await {
                Ok(x) => serde_json::to_value(&x).unwrap_or_default(),
                Err(e) => {
                    outcome
                        .errors
                        .push(format!("error restoring {kind} {name}: {e}"));
                    return;
                }
            };
            if same(&existing, &object) {
                outcome.restored += 1;
                return;
            }
            if update {
                let patch = Patch::Merge(&object);
                match api.patch(&name, &PatchParams::default(), &patch).await {
                    Ok(_) => {
                        outcome.restored += 1;
                        return;
                    }
                    Err(e) => {
                        warn!(error = %e, %kind, %name, "could not update the existing object")
                    }
                }
            }
            let warning = format!(
                "could not restore, {kind} {name:?} already exists. Warning: the in-cluster version is different than the backed-up version"
            );
            match &target_ns {
                Some(ns) if item.namespace.is_some() => {
                    outcome.namespaced.push((ns.clone(), warning.clone()))
                }
                _ => {}
            }
            outcome.warnings.push(warning);
        }
        Err(e) => outcome
            .errors
            .push(format!("error restoring {kind} {name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(gr: &str, ns: Option<&str>, name: &str, object: Value) -> Item {
        Item {
            group_resource: gr.into(),
            version: "v1".into(),
            namespace: ns.map(String::from),
            name: name.into(),
            object,
        }
    }

    #[test]
    fn items_come_back_in_velero_order_without_what_the_cluster_remakes() {
        let owned = json!({"kind": "Pod", "metadata": {"ownerReferences": [{"controller": true, "kind": "ReplicaSet"}]}});
        let items = vec![
            item(
                "deployments.apps",
                Some("shop"),
                "web",
                json!({"kind": "Deployment"}),
            ),
            item("pods", Some("shop"), "web-1", owned),
            item(
                "pods",
                Some("shop"),
                "solo",
                json!({"kind": "Pod", "status": {"phase": "Running"}}),
            ),
            item("namespaces", None, "shop", json!({"kind": "Namespace"})),
            item("namespaces", None, "other", json!({"kind": "Namespace"})),
            item("events", Some("shop"), "e", json!({"kind": "Event"})),
            item(
                "clusterroles.rbac.authorization.k8s.io",
                None,
                "r",
                json!({"kind": "ClusterRole"}),
            ),
            item(
                "configmaps",
                Some("shop"),
                "c",
                json!({"kind": "ConfigMap"}),
            ),
        ];
        let spec = json!({"includedNamespaces": ["shop"]});
        let order: Vec<String> = choose(&spec, items)
            .iter()
            .map(|i| format!("{}/{}", i.group_resource, i.name))
            .collect();
        // Cluster-scoped kinds stay out when only some namespaces are taken.
        assert_eq!(
            order,
            [
                "namespaces/shop",
                "configmaps/c",
                "pods/solo",
                "deployments.apps/web"
            ]
        );
    }

    #[test]
    fn restored_objects_lose_what_the_cluster_assigns() {
        let svc = item(
            "services",
            Some("shop"),
            "web",
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "5"},
                   "spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "type": "NodePort",
                            "ports": [{"port": 80, "nodePort": 30080}]},
                   "status": {"loadBalancer": {}}}),
        );
        let o = prepare(&svc, Some("shop-copy"), ("b", "r"));
        assert_eq!(o["metadata"]["namespace"], "shop-copy");
        assert!(o["metadata"].get("uid").is_none() && o.get("status").is_none());
        assert!(o["spec"].get("clusterIP").is_none());
        assert!(o["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(o["metadata"]["labels"][BACKUP_NAME_LABEL], "b");
        assert_eq!(o["metadata"]["labels"][RESTORE_NAME_LABEL], "r");
        assert_eq!(valid_label(&"x".repeat(80)).len(), 63);
    }
}
