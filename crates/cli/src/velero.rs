//! `flotilla backup` and `flotilla restore`: Velero's CLI's `create`,
//! `describe` and `logs`, against the cluster a kubeconfig names (a
//! member, or a hub whose Backups are propagated). They write and read
//! Velero's objects in the `velero` namespace; Velero's server there does
//! the work.

use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_backup::api;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::inspect::HubArgs;

#[derive(clap::Subcommand)]
pub enum BackupCommand {
    /// Back up objects (and volume data) of the cluster, as `velero
    /// backup create`.
    Create(BackupCreateArgs),
    /// A backup's state and what it holds, as `velero backup describe`.
    Describe(BackupDescribeArgs),
    /// A backup's log, as `velero backup logs`.
    Logs(DescribeArgs),
    /// Delete a backup, its files and restores, as `velero backup delete`
    /// (through a DeleteBackupRequest).
    Delete(BackupDeleteArgs),
}

#[derive(clap::Args)]
pub struct BackupDescribeArgs {
    name: String,
    /// List each volume backed up by file system, not only their count.
    #[arg(long)]
    details: bool,
    #[command(flatten)]
    cluster: HubArgs,
}

#[derive(clap::Args)]
pub struct BackupDeleteArgs {
    name: String,
    /// Wait until the request is processed, and say what it could not do.
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    cluster: HubArgs,
}

#[derive(clap::Subcommand)]
pub enum RestoreCommand {
    /// Restore a backup into the cluster, as `velero restore create`.
    Create(RestoreCreateArgs),
    /// A restore's state, as `velero restore describe`.
    Describe(DescribeArgs),
}

#[derive(clap::Args)]
pub struct BackupCreateArgs {
    name: String,
    /// Namespaces to include, comma-separated [default: all]
    #[arg(long, value_delimiter = ',')]
    include_namespaces: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    exclude_namespaces: Vec<String>,
    /// Resources to include (`deployments`, `configmaps`), comma-separated
    #[arg(long, value_delimiter = ',')]
    include_resources: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    exclude_resources: Vec<String>,
    /// Only objects with these labels (`app=nginx`)
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// How long the backup is kept (`720h0m0s`)
    #[arg(long)]
    ttl: Option<String>,
    #[arg(long)]
    storage_location: Option<String>,
    /// Back up the data of every claim-backed volume of the pods
    #[arg(long)]
    default_volumes_to_fs_backup: bool,
    /// Wait until it is done, and say how it went
    #[arg(long, short = 'w')]
    wait: bool,
    #[command(flatten)]
    cluster: HubArgs,
}

#[derive(clap::Args)]
pub struct RestoreCreateArgs {
    /// [default: <backup>-<YYYYMMDDhhmmss>]
    name: Option<String>,
    #[arg(long)]
    from_backup: Option<String>,
    /// Restore the newest backup of this schedule
    #[arg(long)]
    from_schedule: Option<String>,
    #[arg(long, value_delimiter = ',')]
    include_namespaces: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    exclude_namespaces: Vec<String>,
    /// `old:new` pairs, comma-separated
    #[arg(long, value_delimiter = ',')]
    namespace_mappings: Vec<String>,
    /// `none` (existing objects are left, with a warning) or `update`
    #[arg(long)]
    existing_resource_policy: Option<String>,
    #[arg(long, short = 'w')]
    wait: bool,
    #[command(flatten)]
    cluster: HubArgs,
}

#[derive(clap::Args)]
pub struct DescribeArgs {
    name: String,
    #[command(flatten)]
    cluster: HubArgs,
}

pub async fn run_backup(command: BackupCommand) -> anyhow::Result<()> {
    match command {
        BackupCommand::Create(a) => create_backup(a).await,
        BackupCommand::Describe(a) => {
            let api = objects(&a.cluster, &api::backups()).await?;
            let backup = get(&api, "backup", &a.name).await?;
            let records = objects(&a.cluster, &api::pod_volume_backups())
                .await?
                .list(
                    &kube::api::ListParams::default()
                        .labels(&format!("velero.io/backup-name={}", a.name)),
                )
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let records: Vec<Value> = records
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect();
            crate::inspect::emit(&format!(
                "{}\n{}",
                describe_backup(&backup),
                pod_volume_backups(&records, a.details)
            ))
        }
        BackupCommand::Logs(a) => backup_logs(a).await,
        BackupCommand::Delete(a) => delete_backup(a).await,
    }
}

async fn delete_backup(a: BackupDeleteArgs) -> anyhow::Result<()> {
    let backups = objects(&a.cluster, &api::backups()).await?;
    let backup = get(&backups, "backup", &a.name).await?;
    let requests = objects(&a.cluster, &flotilla_backup::api::delete_backup_requests()).await?;
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "DeleteBackupRequest",
        "metadata": {"generateName": format!("{}-", a.name), "namespace": api::NAMESPACE,
                     "labels": {"velero.io/backup-name": a.name,
                                "velero.io/backup-uid": backup["metadata"]["uid"]}},
        "spec": {"backupName": a.name},
    }))?;
    let made = requests
        .create(&PostParams::default(), &request)
        .await
        .context("cannot ask for the deletion")?;
    println!(
        "Request to delete backup \"{}\" submitted successfully.\nThe backup will be fully deleted after all associated data (backup files, volume data records, restores) are removed.",
        a.name
    );
    if !a.wait {
        return Ok(());
    }
    let name = kube::ResourceExt::name_any(&made);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let request = get(&requests, "deletebackuprequest", &name).await?;
        if request["status"]["phase"] == "Processed" {
            let errors: Vec<&str> = request["status"]["errors"]
                .as_array()
                .map(|e| e.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if errors.is_empty() {
                println!("Backup \"{}\" deleted.", a.name);
                return Ok(());
            }
            bail!("backup {} was not deleted: {}", a.name, errors.join("; "));
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the deletion of backup {} is not processed after 10 minutes",
                a.name
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

pub async fn run_restore(command: RestoreCommand) -> anyhow::Result<()> {
    match command {
        RestoreCommand::Create(a) => create_restore(a).await,
        RestoreCommand::Describe(a) => {
            let api = objects(&a.cluster, &api::restores()).await?;
            let restore = get(&api, "restore", &a.name).await?;
            crate::inspect::emit(&describe_restore(&restore))
        }
    }
}

async fn objects(
    cluster: &HubArgs,
    kind: &kube::api::ApiResource,
) -> anyhow::Result<Api<DynamicObject>> {
    let client = cluster.client().await?;
    Ok(Api::namespaced_with(client, api::NAMESPACE, kind))
}

async fn get(api: &Api<DynamicObject>, what: &str, name: &str) -> anyhow::Result<Value> {
    match api.get_opt(name).await {
        Ok(Some(o)) => Ok(serde_json::to_value(o)?),
        Ok(None) => bail!(
            "no {what} {name:?} in namespace velero (list them with kubectl get {what}s -n velero)"
        ),
        Err(kube::Error::Api(s)) if s.code == 404 => bail!(
            "this cluster does not serve velero.io: is Velero's server running there? (flotilla member runs it unless --velero false)"
        ),
        Err(e) => Err(anyhow::Error::new(e).context("cannot reach the cluster")),
    }
}

fn list_or_null(v: &[String]) -> Value {
    if v.is_empty() { Value::Null } else { json!(v) }
}

/// `app=nginx,tier=web` as a label selector's `matchLabels`.
fn match_labels(selector: &str) -> anyhow::Result<Value> {
    let mut labels = serde_json::Map::new();
    for part in selector.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            bail!("--selector {selector:?}: write key=value pairs, comma-separated (app=nginx)");
        };
        labels.insert(k.trim().into(), json!(v.trim()));
    }
    Ok(json!({"matchLabels": labels}))
}

async fn create(
    api: &Api<DynamicObject>,
    kind: &str,
    name: &str,
    spec: Value,
) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": kind,
        "metadata": {"name": name, "namespace": api::NAMESPACE},
        "spec": spec,
    }))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            bail!(
                "{} {name:?} already exists (choose another name)",
                kind.to_lowercase()
            )
        }
        Err(kube::Error::Api(s)) if s.code == 404 => bail!(
            "this cluster does not serve velero.io: is Velero's server running there? (flotilla member runs it unless --velero false)"
        ),
        Err(e) => Err(anyhow::Error::new(e).context("cannot reach the cluster")),
    }
}

/// Waits until the object's phase is one of Velero's final ones.
async fn wait_done(api: &Api<DynamicObject>, what: &str, name: &str) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let object = get(api, what, name).await?;
        let phase = object["status"]["phase"].as_str().unwrap_or_default();
        if matches!(
            phase,
            "Completed" | "PartiallyFailed" | "Failed" | "FailedValidation"
        ) {
            return Ok(object);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{what} {name} is still {phase:?} after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn create_backup(a: BackupCreateArgs) -> anyhow::Result<()> {
    let api = objects(&a.cluster, &api::backups()).await?;
    let mut spec = json!({
        "includedNamespaces": list_or_null(&a.include_namespaces),
        "excludedNamespaces": list_or_null(&a.exclude_namespaces),
        "includedResources": list_or_null(&a.include_resources),
        "excludedResources": list_or_null(&a.exclude_resources),
        "ttl": a.ttl,
        "storageLocation": a.storage_location,
    });
    if let Some(s) = &a.selector {
        spec["labelSelector"] = match_labels(s)?;
    }
    if a.default_volumes_to_fs_backup {
        spec["defaultVolumesToFsBackup"] = json!(true);
    }
    strip_nulls(&mut spec);
    create(&api, "Backup", &a.name, spec).await?;
    println!("Backup request \"{}\" submitted successfully.", a.name);
    if !a.wait {
        println!(
            "Run `flotilla backup describe {}` or `flotilla backup logs {}` for more details.",
            a.name, a.name
        );
        return Ok(());
    }
    let done = wait_done(&api, "backup", &a.name).await?;
    let phase = done["status"]["phase"].as_str().unwrap_or_default();
    println!(
        "Backup completed with status: {phase}. You may check for more information using the commands `flotilla backup describe {}` and `flotilla backup logs {}`.",
        a.name, a.name
    );
    if phase != "Completed" {
        std::process::exit(1);
    }
    Ok(())
}

async fn create_restore(a: RestoreCreateArgs) -> anyhow::Result<()> {
    let api = objects(&a.cluster, &api::restores()).await?;
    let (source, key) = match (&a.from_backup, &a.from_schedule) {
        (Some(b), None) => (b.clone(), "backupName"),
        (None, Some(s)) => (s.clone(), "scheduleName"),
        _ => bail!("name exactly one of --from-backup and --from-schedule"),
    };
    let mut mapping = serde_json::Map::new();
    for pair in &a.namespace_mappings {
        let Some((from, to)) = pair.split_once(':') else {
            bail!(
                "--namespace-mappings {pair:?}: write old:new pairs, comma-separated (shop:shop-copy)"
            );
        };
        mapping.insert(from.into(), json!(to));
    }
    let stamp = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| format!("{source}-{stamp}"));
    let mut spec = json!({
        key: source,
        "includedNamespaces": list_or_null(&a.include_namespaces),
        "excludedNamespaces": list_or_null(&a.exclude_namespaces),
        "existingResourcePolicy": a.existing_resource_policy,
    });
    if !mapping.is_empty() {
        spec["namespaceMapping"] = Value::Object(mapping);
    }
    strip_nulls(&mut spec);
    create(&api, "Restore", &name, spec).await?;
    println!("Restore request \"{name}\" submitted successfully.");
    if !a.wait {
        println!("Run `flotilla restore describe {name}` for more details.");
        return Ok(());
    }
    let done = wait_done(&api, "restore", &name).await?;
    let phase = done["status"]["phase"].as_str().unwrap_or_default();
    println!(
        "Restore completed with status: {phase}. You may check for more information using the command `flotilla restore describe {name}`."
    );
    if phase != "Completed" {
        std::process::exit(1);
    }
    Ok(())
}

fn strip_nulls(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, x| !x.is_null());
    }
}

fn or_none(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => "<none>".into(),
    }
}

fn or_all(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => or_none(v),
        _ => "*".into(),
    }
}

fn labels_line(o: &Value, key: &str) -> String {
    match o["metadata"][key].as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .filter(|(k, _)| *k != "kubectl.kubernetes.io/last-applied-configuration")
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n              "),
        _ => "<none>".into(),
    }
}

fn errors_block(status: &Value) -> String {
    let mut out = String::new();
    if let Some(list) = status["validationErrors"]
        .as_array()
        .filter(|l| !l.is_empty())
    {
        out.push_str("\nValidation errors:");
        for e in list {
            out.push_str(&format!("  {}\n", e.as_str().unwrap_or_default()));
        }
    }
    if let Some(reason) = status["failureReason"].as_str() {
        out.push_str(&format!("\nFailure reason:  {reason}\n"));
    }
    out
}

/// `velero backup describe`'s text.
fn describe_backup(b: &Value) -> String {
    let spec = &b["spec"];
    let status = &b["status"];
    let text = |v: &Value, default: &str| v.as_str().unwrap_or(default).to_string();
    let selector = match spec["labelSelector"]["matchLabels"].as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(","),
        _ => "<none>".into(),
    };
    let cluster_scoped = match spec["includeClusterResources"].as_bool() {
        Some(true) => "included",
        Some(false) => "excluded",
        None => "auto",
    };
    format!(
        "Name:         {name}\nNamespace:    velero\nLabels:       {labels}\nAnnotations:  {annotations}\n\nPhase:  {phase}\n{errors}\n\
Errors:    {errors_n}\nWarnings:  {warnings_n}\n\n\
Namespaces:\n  Included:  {inc_ns}\n  Excluded:  {exc_ns}\n\n\
Resources:\n  Included:        {inc_r}\n  Excluded:        {exc_r}\n  Cluster-scoped:  {cluster_scoped}\n\n\
Label selector:  {selector}\n\nStorage Location:  {location}\n\n\
Velero-Native Snapshot PVs:  auto\nFile System Backup (Default):  {fs}\n\nTTL:  {ttl}\n\n\
Started:    {started}\nCompleted:  {completed}\n\nExpiration:  {expiration}\n\n\
Total items to be backed up:  {total}\nItems backed up:              {done}\n",
        name = text(&b["metadata"]["name"], ""),
        labels = labels_line(b, "labels"),
        annotations = labels_line(b, "annotations"),
        phase = text(&status["phase"], "New"),
        errors = errors_block(status),
        errors_n = status["errors"].as_u64().unwrap_or(0),
        warnings_n = status["warnings"].as_u64().unwrap_or(0),
        inc_ns = or_all(&spec["includedNamespaces"]),
        exc_ns = or_none(&spec["excludedNamespaces"]),
        inc_r = or_all(&spec["includedResources"]),
        exc_r = or_none(&spec["excludedResources"]),
        location = text(&spec["storageLocation"], "default"),
        fs = spec["defaultVolumesToFsBackup"].as_bool().unwrap_or(false),
        ttl = text(&spec["ttl"], "720h0m0s"),
        started = text(&status["startTimestamp"], "<n/a>"),
        completed = text(&status["completionTimestamp"], "<n/a>"),
        expiration = text(&status["expiration"], "<n/a>"),
        total = status["progress"]["totalItems"].as_u64().unwrap_or(0),
        done = status["progress"]["itemsBackedUp"].as_u64().unwrap_or(0),
    )
}

/// `velero backup describe`'s "Backup Volumes" section: the volumes
/// backed up by file system, counted by phase, or listed with `--details`.
fn pod_volume_backups(records: &[Value], details: bool) -> String {
    let mut out = String::from(
        "Backup Volumes:\n  Velero-Native Snapshots: <none included>\n\n  CSI Snapshots: <none included>\n\n",
    );
    if records.is_empty() {
        out.push_str("  Pod Volume Backups: <none included>\n");
        return out;
    }
    let mut by_phase: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for r in records {
        let phase = r["status"]["phase"].as_str().unwrap_or("New").to_string();
        let pod = &r["spec"]["pod"];
        by_phase.entry(phase).or_default().push(format!(
            "{}/{}: {}",
            pod["namespace"].as_str().unwrap_or_default(),
            pod["name"].as_str().unwrap_or_default(),
            r["spec"]["volume"].as_str().unwrap_or_default()
        ));
    }
    if details {
        out.push_str("  Pod Volume Backups - kopia:\n");
        for (phase, volumes) in &by_phase {
            out.push_str(&format!("    {phase}:\n"));
            for v in volumes {
                out.push_str(&format!("      {v}\n"));
            }
        }
    } else {
        out.push_str("  Pod Volume Backups - kopia (specify --details for more information):\n");
        for (phase, volumes) in &by_phase {
            out.push_str(&format!("    {phase}:  {}\n", volumes.len()));
        }
    }
    out
}

/// `velero restore describe`'s text.
fn describe_restore(r: &Value) -> String {
    let spec = &r["spec"];
    let status = &r["status"];
    let text = |v: &Value, default: &str| v.as_str().unwrap_or(default).to_string();
    let mapping = match spec["namespaceMapping"].as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "<none>".into(),
    };
    format!(
        "Name:         {name}\nNamespace:    velero\nLabels:       {labels}\nAnnotations:  {annotations}\n\nPhase:  {phase}\n{errors}\n\
Total items to be restored:  {total}\nItems restored:              {done}\n\n\
Started:    {started}\nCompleted:  {completed}\n\nWarnings:  {warnings_n}\nErrors:    {errors_n}\n\n\
Backup:  {backup}\n\nNamespaces:\n  Included:  {inc_ns}\n  Excluded:  {exc_ns}\n\n\
Namespace mappings:  {mapping}\n\nExisting Resource Policy:  {policy}\n",
        name = text(&r["metadata"]["name"], ""),
        labels = labels_line(r, "labels"),
        annotations = labels_line(r, "annotations"),
        phase = text(&status["phase"], "New"),
        errors = errors_block(status),
        total = status["progress"]["totalItems"].as_u64().unwrap_or(0),
        done = status["progress"]["itemsRestored"].as_u64().unwrap_or(0),
        started = text(&status["startTimestamp"], "<n/a>"),
        completed = text(&status["completionTimestamp"], "<n/a>"),
        warnings_n = status["warnings"].as_u64().unwrap_or(0),
        errors_n = status["errors"].as_u64().unwrap_or(0),
        backup = text(&spec["backupName"], &text(&spec["scheduleName"], "")),
        inc_ns = or_all(&spec["includedNamespaces"]),
        exc_ns = or_none(&spec["excludedNamespaces"]),
        policy = text(&spec["existingResourcePolicy"], "<none>"),
    )
}

/// The backup's log, read from its storage location (with its credentials).
async fn backup_logs(a: DescribeArgs) -> anyhow::Result<()> {
    let client = a.cluster.client().await?;
    let backups: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), api::NAMESPACE, &api::backups());
    let backup = get(&backups, "backup", &a.name).await?;
    let location_name = backup["metadata"]["labels"]["velero.io/storage-location"]
        .as_str()
        .or(backup["spec"]["storageLocation"].as_str())
        .unwrap_or("default")
        .to_string();
    let locations: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), api::NAMESPACE, &api::locations());
    let bsl = get(&locations, "backupstoragelocation", &location_name).await?;
    let location = flotilla_backup::storage_location::open(&client, &bsl)
        .await
        .with_context(|| format!("storage location {location_name}"))?;
    let Some(gz) = location
        .get(&a.name, &format!("{}-logs.gz", a.name))
        .await
        .with_context(|| format!("storage location {location_name}"))?
    else {
        bail!(
            "backup {} has no log in its storage location yet (it is not done)",
            a.name
        );
    };
    let text = flotilla_backup::archive::gunzip(&gz).context("the backup's log is not gzipped")?;
    crate::inspect::emit(&String::from_utf8_lossy(&text))
}
