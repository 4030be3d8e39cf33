//! Application: a directory of plain manifests read from a local git
//! repository at `targetRevision`, delivered to the destination cluster
//! as one Karmada Work in `karmada-es-<cluster>`, which the execution
//! controller applies like any other. Sync (`Synced`/`OutOfSync` against
//! the revision), health, per-resource status and the last sync operation
//! are read back from the Work. What cannot be rendered here (Helm,
//! Kustomize, plugins, remote repositories) becomes a condition and
//! leaves whatever was applied before untouched: never a partial sync.

use std::collections::BTreeMap;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::api::{
    APP_NAME_LABEL, APP_NAMESPACE_LABEL, FIELD_MANAGER, IN_CLUSTER, INSTANCE_LABEL,
    RESOURCES_FINALIZER, application_resource,
};
use super::git::{self, File, Snapshot};
use crate::api::{Cluster, Work, WorkSpec, Workload};
use crate::context::Ctx;

/// On a Work: the commit it was synced from, and when.
pub const REVISION_ANNOTATION: &str = "argocd.flotilla.io/revision";
pub const SYNCED_AT_ANNOTATION: &str = "argocd.flotilla.io/synced-at";

/// What keeps an Application from being compared or synced: Argo CD's
/// condition type and message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    Comparison(String),
}

impl Problem {
    pub fn condition_type(&self) -> &'static str {
        match self {
            Problem::InvalidSpec(_) => "InvalidSpecError",
            Problem::Comparison(_) => "ComparisonError",
        }
    }
}

/// The one source this front end renders: a directory of a repository.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub repo_url: String,
    pub path: String,
    pub revision: String,
    pub recurse: bool,
    pub value: Value,
}

/// The Application's source, or why it cannot be rendered here.
pub fn source(app: &Value) -> Result<Source, Problem> {
    let spec = &app["spec"];
    let src = match (
        spec.get("source"),
        spec.get("sources").and_then(Value::as_array),
    ) {
        (Some(s), _) if s.is_object() => s.clone(),
        (_, Some(list)) if list.len() == 1 => list[0].clone(),
        (_, Some(list)) if list.len() > 1 => {
            return Err(Problem::InvalidSpec(
                "multiple sources are not supported by Flotilla: give one source".into(),
            ));
        }
        _ => {
            return Err(Problem::InvalidSpec(
                "spec.source or spec.sources must be specified".into(),
            ));
        }
    };
    for (key, what) in [
        ("chart", "Helm charts"),
        ("helm", "Helm sources"),
        ("kustomize", "Kustomize sources"),
        ("plugin", "config management plugins"),
    ] {
        if src.get(key).is_some_and(|v| !v.is_null()) {
            return Err(Problem::InvalidSpec(format!(
                "source.{key}: {what} are not supported by Flotilla, only directories of plain \
                 manifests; nothing was synced"
            )));
        }
    }
    let repo_url = src["repoURL"].as_str().unwrap_or_default().to_string();
    if repo_url.is_empty() {
        return Err(Problem::InvalidSpec("source.repoURL is required".into()));
    }
    if let Err(e) = git::local_path(&repo_url) {
        return Err(Problem::Comparison(format!("{e}; nothing was synced")));
    }
    Ok(Source {
        repo_url,
        path: src["path"].as_str().unwrap_or_default().to_string(),
        revision: src["targetRevision"].as_str().unwrap_or("HEAD").to_string(),
        recurse: src
            .pointer("/directory/recurse")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        value: src,
    })
}

/// The fleet cluster an Application's destination names (by `name`, or
/// by `server` against the Clusters' API endpoints), and its namespace.
pub fn destination(app: &Value, clusters: &[Cluster]) -> Result<(String, String), Problem> {
    let d = &app["spec"]["destination"];
    let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
    let (name, server, namespace) = (s("name"), s("server"), s("namespace"));
    let invalid = |m: String| {
        Problem::InvalidSpec(format!(
            "application destination spec for {} is invalid: {m}",
            app["metadata"]["name"].as_str().unwrap_or_default()
        ))
    };
    if !name.is_empty() && !server.is_empty() {
        return Err(invalid(
            "application destination can't have both name and server defined".into(),
        ));
    }
    if name == "in-cluster" || server == IN_CLUSTER {
        return Err(invalid(
            "the in-cluster destination is the hub, which runs no workloads in Flotilla: name a \
             member cluster"
                .into(),
        ));
    }
    let live = || {
        clusters
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
    };
    if !name.is_empty() {
        return match live().find(|c| c.name_any() == name) {
            Some(c) => Ok((c.name_any(), namespace)),
            None => Err(invalid(format!(
                "unable to find destination server: there are no clusters with this name: {name}"
            ))),
        };
    }
    if server.is_empty() {
        return Err(invalid("no destination server or name given".into()));
    }
    let same = |a: &str| a.trim_end_matches('/') == server.trim_end_matches('/');
    match live().find(|c| c.spec.api_endpoint.as_deref().is_some_and(same)) {
        Some(c) => Ok((c.name_any(), namespace)),
        None => Err(invalid(format!(
            "unable to find destination server: there are no clusters with this URL: {server}"
        ))),
    }
}

/// The manifests of a directory's YAML and JSON files (multi-document
/// YAML too), or why they are not plain manifests.
pub fn manifests(files: &[File], dir: &str) -> Result<Vec<Value>, Problem> {
    let dir = dir.trim_matches('/');
    for f in files {
        let base = f.path.rsplit('/').next().unwrap_or_default();
        let tool = match base {
            "kustomization.yaml" | "kustomization.yml" | "Kustomization" => Some("Kustomize"),
            "Chart.yaml" => Some("Helm"),
            _ => None,
        };
        if let Some(tool) = tool {
            return Err(Problem::Comparison(format!(
                "{} holds {base}: {tool} sources are not supported by Flotilla, only directories \
                 of plain manifests; nothing was synced",
                if dir.is_empty() { "." } else { dir }
            )));
        }
    }
    let mut out = Vec::new();
    for f in files {
        let lower = f.path.to_lowercase();
        if !(lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")) {
            continue;
        }
        let text = String::from_utf8_lossy(&f.data);
        let bad = |m: String| Problem::Comparison(format!("failed to unmarshal {}: {m}", f.path));
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| bad(e.to_string()))?;
            if v.is_null() {
                continue;
            }
            let items = if v["kind"] == "List" {
                v["items"].as_array().cloned().unwrap_or_default()
            } else {
                vec![v]
            };
            for m in items {
                let (api_version, kind, _, name) = crate::execution::identify(&m);
                if api_version.is_empty() || kind.is_empty() || name.is_empty() {
                    return Err(bad(format!(
                        "a manifest needs apiVersion, kind and metadata.name (found {api_version}/{kind} {name:?})"
                    )));
                }
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// The manifest as Argo CD applies it: the tracking label
/// `app.kubernetes.io/instance: <app>`, and the destination namespace
/// when it is namespaced and names none.
pub fn prepare(mut m: Value, app: &str, namespace: Option<&str>) -> Value {
    if !m["metadata"]["labels"].is_object() {
        m["metadata"]["labels"] = json!({});
    }
    m["metadata"]["labels"][INSTANCE_LABEL] = json!(app);
    if let Some(ns) = namespace
        && m.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        m["metadata"]["namespace"] = json!(ns);
    }
    m
}

/// A manifest's identity: group, kind, namespace, name.
pub fn identity(m: &Value) -> (String, String, String, String) {
    let (api_version, kind, namespace, name) = crate::execution::identify(m);
    let group = api_version
        .split_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (group, kind, namespace, name)
}

/// What a sync writes: git's manifests, plus (without pruning) what the
/// Work held that git no longer has.
pub fn to_sync(desired: &[Value], current: &[Value], prune: bool) -> Vec<Value> {
    let mut out = desired.to_vec();
    if !prune {
        for m in current {
            if !desired.iter().any(|d| identity(d) == identity(m)) {
                out.push(m.clone());
            }
        }
    }
    out
}

/// Argo CD's health order: the worst of an Application's resources wins.
fn rank(h: &str) -> u8 {
    match h {
        "Healthy" => 0,
        "Suspended" => 1,
        "Progressing" => 2,
        "Missing" => 3,
        "Degraded" => 4,
        _ => 5,
    }
}

/// Sync, health and per-resource status against the Work as it stands.
pub fn compare(desired: &[Value], work: Option<&Work>) -> (String, String, Vec<Value>) {
    let held: Vec<Value> = work.map(|w| w.spec.workload.parsed()).unwrap_or_default();
    let status = work.and_then(|w| w.status.clone()).unwrap_or_default();
    let applied_failed = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Applied" && c.status == "False");
    let mut resources = Vec::new();
    let mut synced = held.len() == desired.len();
    let mut health = "Healthy".to_string();
    let mut worst = |h: &str| {
        if rank(h) > rank(&health) {
            health = h.to_string();
        }
    };
    let describe = |m: &Value| {
        let (group, kind, namespace, name) = identity(m);
        let version = m["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let mut r = json!({"group": group, "version": version, "kind": kind, "name": name});
        if !namespace.is_empty() {
            r["namespace"] = json!(namespace);
        }
        r
    };
    for m in desired {
        let ordinal = held.iter().position(|h| h == m);
        let reported = ordinal.and_then(|i| {
            status
                .manifest_statuses
                .iter()
                .find(|s| s.identifier.ordinal as usize == i && s.identifier.name == identity(m).3)
        });
        let mut r = describe(m);
        let h = match (ordinal, reported) {
            (Some(_), Some(s)) => match s.health.as_deref() {
                Some("Unhealthy") => Some("Progressing"),
                Some("Healthy") => Some("Healthy"),
                _ => None,
            },
            (Some(_), None) if applied_failed => Some("Degraded"),
            _ => Some("Missing"),
        };
        let in_sync = reported.is_some();
        synced &= in_sync;
        r["status"] = json!(if in_sync { "Synced" } else { "OutOfSync" });
        if let Some(h) = h {
            worst(h);
            r["health"] = json!({"status": h});
        }
        resources.push(r);
    }
    for m in &held {
        if !desired.iter().any(|d| identity(d) == identity(m)) {
            let mut r = describe(m);
            r["status"] = json!("OutOfSync");
            r["requiresPruning"] = json!(true);
            resources.push(r);
        }
    }
    let sync = if synced { "Synced" } else { "OutOfSync" };
    (sync.to_string(), health, resources)
}

/// The Work carrying Application `namespace/name`.
pub fn work_name(namespace: &str, name: &str) -> String {
    format!("argocd-{namespace}-{name}")
}

// ---------------------------------------------------------------- reconcile

fn app_works(namespace: &str, name: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "{APP_NAMESPACE_LABEL}={namespace},{APP_NAME_LABEL}={name}"
    ))
}

/// Deletes `work` unless it is going; `preserve` says whether the
/// member's copies stay.
async fn delete_work(hub: &Client, work: &Work, preserve: Option<bool>) -> kube::Result<()> {
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let api: Api<Work> = Api::namespaced(hub.clone(), &work.namespace().unwrap_or_default());
    if let Some(p) = preserve
        && work.spec.preserve_resources_on_deletion != Some(p)
    {
        crate::writes::merge_patch(
            &api,
            &work.name_any(),
            &json!({"spec": {"preserveResourcesOnDeletion": p}}),
        )
        .await?;
    }
    match api.delete(&work.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the Works of Applications that are gone (their copies kept
/// or not as the Work was written: Argo CD deletes them only with its
/// resources finalizer).
pub async fn sweep(hub: &Client, apps: &[DynamicObject]) -> kube::Result<()> {
    let works: Api<Work> = Api::all(hub.clone());
    for w in works
        .list(&ListParams::default().labels(APP_NAME_LABEL))
        .await?
    {
        let (ns, name) = (
            w.labels()
                .get(APP_NAMESPACE_LABEL)
                .cloned()
                .unwrap_or_default(),
            w.labels().get(APP_NAME_LABEL).cloned().unwrap_or_default(),
        );
        let exists = apps
            .iter()
            .any(|a| a.name_any() == name && a.namespace().as_deref() == Some(ns.as_str()));
        if !exists && w.metadata.deletion_timestamp.is_none() {
            info!(app = %name, namespace = %ns, work = %w.name_any(), "Application gone: removing its Work");
            delete_work(hub, &w, None).await?;
        }
    }
    Ok(())
}

pub async fn reconcile(ctx: &Ctx, clusters: &[Cluster], app: &DynamicObject) -> kube::Result<()> {
    let hub = &ctx.hub;
    let name = app.name_any();
    let namespace = app.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), &namespace, &application_resource());
    let value = serde_json::to_value(app).map_err(kube::Error::SerdeError)?;
    let works: Api<Work> = Api::all(hub.clone());
    let mine = works.list(&app_works(&namespace, &name)).await?.items;
    let cascade = app.finalizers().iter().any(|f| f == RESOURCES_FINALIZER);
    if app.metadata.deletion_timestamp.is_some() {
        if !cascade {
            return Ok(());
        }
        // Argo CD's resources finalizer: the copies go, then the finalizer.
        for w in &mine {
            delete_work(hub, w, Some(false)).await?;
        }
        if mine.is_empty() {
            let kept: Vec<&String> = app
                .finalizers()
                .iter()
                .filter(|f| *f != RESOURCES_FINALIZER)
                .collect();
            crate::writes::merge_patch(&api, &name, &json!({"metadata": {"finalizers": kept}}))
                .await?;
            info!(app = %name, %namespace, "Application's resources deleted");
        }
        return Ok(());
    }
    let outcome = render(ctx, clusters, &value).await;
    let (cluster, desired, snapshot, source) = match outcome {
        Ok(x) => x,
        Err(problem) => {
            debug!(app = %name, %problem, "Application not rendered");
            let existing = mine.first();
            let status = status_of(&value, &[], existing, None, Some(&problem), None);
            return write_status(&api, &value, &name, status).await;
        }
    };
    let execution_namespace = Cluster::execution_namespace(&cluster);
    // A Work left in another cluster (the destination moved) goes.
    for w in mine
        .iter()
        .filter(|w| w.namespace().as_deref() != Some(execution_namespace.as_str()))
    {
        info!(app = %name, work = %w.name_any(), "destination moved: removing the old cluster's Work");
        delete_work(hub, w, None).await?;
    }
    let mut current = mine
        .iter()
        .find(|w| w.namespace().as_deref() == Some(execution_namespace.as_str()))
        .cloned();
    let automated = value
        .pointer("/spec/syncPolicy/automated")
        .is_some_and(|a| a.is_object());
    let operation = value.pointer("/operation/sync").cloned();
    let prune = if operation.is_some() {
        operation
            .as_ref()
            .and_then(|o| o["prune"].as_bool())
            .unwrap_or(false)
    } else {
        value
            .pointer("/spec/syncPolicy/automated/prune")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    if automated || operation.is_some() {
        let held = current
            .as_ref()
            .map(|w| w.spec.workload.parsed())
            .unwrap_or_default();
        let manifests = to_sync(&desired, &held, prune);
        let workload = Workload::new(&manifests).map_err(kube::Error::SerdeError)?;
        let wanted = WorkSpec {
            workload,
            suspend_dispatching: None,
            preserve_resources_on_deletion: Some(!cascade),
        };
        if current.as_ref().is_none_or(|w| w.spec != wanted) {
            let now =
                serde_json::to_value(crate::conditions::now()).map_err(kube::Error::SerdeError)?;
            let mut work = Work::new(&work_name(&namespace, &name), wanted);
            work.metadata.namespace = Some(execution_namespace.clone());
            work.metadata.labels = Some(BTreeMap::from([
                (APP_NAMESPACE_LABEL.to_string(), namespace.clone()),
                (APP_NAME_LABEL.to_string(), name.clone()),
            ]));
            work.metadata.annotations = Some(BTreeMap::from([
                (REVISION_ANNOTATION.to_string(), snapshot.revision.clone()),
                (
                    SYNCED_AT_ANNOTATION.to_string(),
                    now.as_str().unwrap_or_default().to_string(),
                ),
            ]));
            let mut doc = serde_json::to_value(&work).map_err(kube::Error::SerdeError)?;
            doc["apiVersion"] = json!("work.karmada.io/v1alpha1");
            doc["kind"] = json!("Work");
            let wapi: Api<Work> = Api::namespaced(hub.clone(), &execution_namespace);
            let written = wapi
                .patch(
                    &work_name(&namespace, &name),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&doc),
                )
                .await?;
            info!(app = %name, %cluster, revision = %snapshot.revision, "Application synced into its Work");
            current = Some(written);
        }
        if operation.is_some() {
            // Argo CD clears a requested operation once it has run.
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"operation": null})),
            )
            .await?;
        }
    }
    let status = status_of(
        &value,
        &desired,
        current.as_ref(),
        Some(&snapshot.revision),
        None,
        Some(&source),
    );
    write_status(&api, &value, &name, status).await
}

type Rendered = (String, Vec<Value>, Snapshot, Value);

/// Destination cluster, prepared manifests, snapshot and source.
async fn render(ctx: &Ctx, clusters: &[Cluster], app: &Value) -> Result<Rendered, Problem> {
    let src = source(app)?;
    let (cluster, namespace) = destination(app, clusters)?;
    let (url, rev, path, recurse) = (
        src.repo_url.clone(),
        src.revision.clone(),
        src.path.clone(),
        src.recurse,
    );
    let snapshot = tokio::task::spawn_blocking(move || git::read(&url, &rev, &path, recurse))
        .await
        .map_err(|e| Problem::Comparison(e.to_string()))?
        .map_err(|e| Problem::Comparison(e.to_string()))?;
    let name = app["metadata"]["name"].as_str().unwrap_or_default();
    let mut out = Vec::new();
    for m in manifests(&snapshot.files, &src.path)? {
        let (api_version, kind, _, _) = crate::execution::identify(&m);
        let namespaced = match ctx.hub_kinds.resolve(&api_version, &kind).await {
            Ok((_, namespaced)) => namespaced,
            // A kind only the members serve: a namespace given stays.
            Err(_) => true,
        };
        let ns = if namespace.is_empty() {
            "default"
        } else {
            namespace.as_str()
        };
        out.push(prepare(m, name, namespaced.then_some(ns)));
    }
    let source = src.value.clone();
    Ok((cluster, out, snapshot, source))
}

/// The Application's status: sync, health, resources, the last sync
/// operation and conditions, keeping transition times that did not move.
fn status_of(
    app: &Value,
    desired: &[Value],
    work: Option<&Work>,
    revision: Option<&str>,
    problem: Option<&Problem>,
    source: Option<&Value>,
) -> Value {
    let previous = app.get("status").cloned().unwrap_or(json!({}));
    let now = serde_json::to_value(crate::conditions::now()).unwrap_or(Value::Null);
    let mut status = json!({});
    if let Some(problem) = problem {
        let old = previous["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == problem.condition_type()));
        let time = match old {
            Some(c) if c["message"] == json!(problem.to_string()) => {
                c["lastTransitionTime"].clone()
            }
            _ => now.clone(),
        };
        status["conditions"] = json!([{"type": problem.condition_type(),
            "message": problem.to_string(), "lastTransitionTime": time}]);
        status["sync"] = json!({"status": "Unknown"});
        status["health"] = previous
            .get("health")
            .cloned()
            .unwrap_or(json!({"status": "Unknown"}));
        if let Some(op) = previous.get("operationState") {
            status["operationState"] = op.clone();
        }
        return status;
    }
    let (sync, health, resources) = compare(desired, work);
    status["sync"] = json!({
        "status": sync,
        "revision": revision,
        "comparedTo": {"source": source, "destination": app["spec"]["destination"]},
    });
    status["health"] = json!({"status": health});
    status["resources"] = json!(resources);
    if let Some(w) = work {
        let a = w.annotations();
        let synced = a.get(REVISION_ANNOTATION).cloned().unwrap_or_default();
        let started = a.get(SYNCED_AT_ANNOTATION).cloned().unwrap_or_default();
        let st = w.status.clone().unwrap_or_default();
        let applied = st.conditions.iter().find(|c| c.type_ == "Applied");
        let complete = st.manifest_statuses.len() == w.spec.workload.manifests.len();
        let (phase, message) = match applied {
            Some(c) if c.status == "False" => ("Failed", c.message.clone()),
            Some(c) if c.status == "True" && complete => (
                "Succeeded",
                "successfully synced (all tasks run)".to_string(),
            ),
            _ => (
                "Running",
                "waiting for the member cluster to apply".to_string(),
            ),
        };
        let old = &previous["operationState"];
        let finished = if phase == "Running" {
            Value::Null
        } else if old["phase"] == phase && old["startedAt"] == json!(started) {
            old["finishedAt"].clone()
        } else {
            now.clone()
        };
        let mut op = json!({
            "operation": {"sync": {"revision": synced}},
            "phase": phase,
            "message": message,
            "startedAt": started,
            "syncResult": {"revision": synced, "source": source},
        });
        if !finished.is_null() {
            op["finishedAt"] = finished;
        }
        status["operationState"] = op;
    }
    status
}

async fn write_status(
    api: &Api<DynamicObject>,
    app: &Value,
    name: &str,
    status: Value,
) -> kube::Result<()> {
    let previous = app.get("status").cloned().unwrap_or(Value::Null);
    if previous == status {
        return Ok(());
    }
    // `conditions: null` clears an error that is gone.
    let mut patch = status.clone();
    for key in ["conditions", "resources", "operationState"] {
        if patch.get(key).is_none() && previous.get(key).is_some() {
            patch[key] = Value::Null;
        }
    }
    if patch["sync"]["status"] != previous["sync"]["status"]
        || patch["health"]["status"] != previous["health"]["status"]
    {
        info!(app = %name, sync = %patch["sync"]["status"], health = %patch["health"]["status"], "Application status");
    }
    match crate::writes::merge_patch_status(api, name, &json!({"status": patch})).await {
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        Err(e) => {
            warn!(error = %e, app = %name, "Application status not written");
            Err(e)
        }
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterSpec, ManifestStatus, ResourceIdentifier, WorkStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn app(source: Value, destination: Value) -> Value {
        json!({"metadata": {"name": "guestbook", "namespace": "argocd"},
               "spec": {"source": source, "destination": destination}})
    }

    fn clusters() -> Vec<Cluster> {
        ["prod-a", "prod-b"]
            .iter()
            .map(|n| {
                Cluster::new(
                    n,
                    ClusterSpec {
                        api_endpoint: Some(format!("https://{n}:6443")),
                        ..ClusterSpec::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn helm_kustomize_plugins_and_remote_repositories_are_refused() {
        let dest = json!({"name": "prod-a"});
        for (src, kind) in [
            (
                json!({"repoURL": "file:///r", "chart": "nginx"}),
                "InvalidSpecError",
            ),
            (
                json!({"repoURL": "file:///r", "path": "p", "helm": {"valueFiles": ["v.yaml"]}}),
                "InvalidSpecError",
            ),
            (
                json!({"repoURL": "file:///r", "path": "p", "kustomize": {}}),
                "InvalidSpecError",
            ),
            (
                json!({"repoURL": "file:///r", "path": "p", "plugin": {"name": "x"}}),
                "InvalidSpecError",
            ),
            (
                json!({"repoURL": "https://github.com/argoproj/argocd-example-apps.git", "path": "guestbook"}),
                "ComparisonError",
            ),
        ] {
            let e = source(&app(src.clone(), dest.clone())).unwrap_err();
            assert_eq!(e.condition_type(), kind, "{src}");
        }
        let two = json!({"metadata": {"name": "x"}, "spec": {"sources": [{"repoURL": "/a"}, {"repoURL": "/b"}]}});
        assert_eq!(
            source(&two).unwrap_err().condition_type(),
            "InvalidSpecError"
        );
        let one = json!({"metadata": {"name": "x"}, "spec": {"sources": [{"repoURL": "/a", "path": "p"}]}});
        assert_eq!(source(&one).unwrap().path, "p");
    }

    #[test]
    fn destinations_are_fleet_clusters_by_name_or_endpoint() {
        let src = json!({"repoURL": "/r"});
        let cs = clusters();
        assert_eq!(
            destination(
                &app(src.clone(), json!({"name": "prod-b", "namespace": "web"})),
                &cs
            )
            .unwrap(),
            ("prod-b".to_string(), "web".to_string())
        );
        assert_eq!(
            destination(
                &app(src.clone(), json!({"server": "https://prod-a:6443/"})),
                &cs
            )
            .unwrap()
            .0,
            "prod-a"
        );
        for d in [
            json!({"server": IN_CLUSTER}),
            json!({"name": "nowhere"}),
            json!({"server": "https://nowhere"}),
            json!({"name": "prod-a", "server": "https://prod-a:6443"}),
        ] {
            assert_eq!(
                destination(&app(src.clone(), d.clone()), &cs)
                    .unwrap_err()
                    .condition_type(),
                "InvalidSpecError",
                "{d}"
            );
        }
    }

    fn file(path: &str, data: &str) -> File {
        File {
            path: path.into(),
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn manifests_are_read_from_yaml_and_json_and_tracked() {
        let files = [
            file(
                "app/a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n",
            ),
            file(
                "app/b.json",
                r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "b", "namespace": "other"}}"#,
            ),
            file("app/README.md", "# not a manifest"),
        ];
        let ms = manifests(&files, "app").unwrap();
        assert_eq!(ms.len(), 3);
        let cm = prepare(ms[0].clone(), "guestbook", Some("web"));
        assert_eq!(cm["metadata"]["namespace"], "web");
        assert_eq!(cm["metadata"]["labels"][INSTANCE_LABEL], "guestbook");
        let ns = prepare(ms[1].clone(), "guestbook", None);
        assert!(ns["metadata"].get("namespace").is_none());
        let d = prepare(ms[2].clone(), "guestbook", Some("web"));
        assert_eq!(d["metadata"]["namespace"], "other");

        for bad in [
            vec![file("app/kustomization.yaml", "resources: []")],
            vec![file("app/Chart.yaml", "name: x")],
            vec![file("app/x.yaml", "kind: ConfigMap\n")],
            vec![file("app/x.yaml", "a: [")],
        ] {
            assert_eq!(
                manifests(&bad, "app").unwrap_err().condition_type(),
                "ComparisonError"
            );
        }
    }

    #[test]
    fn pruning_drops_what_git_no_longer_has() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}});
        assert_eq!(
            to_sync(std::slice::from_ref(&a), &[a.clone(), b.clone()], true),
            vec![a.clone()]
        );
        assert_eq!(
            to_sync(std::slice::from_ref(&a), &[a.clone(), b.clone()], false),
            vec![a, b]
        );
    }

    fn status(name: &str, ordinal: i32, health: &str) -> ManifestStatus {
        ManifestStatus {
            identifier: ResourceIdentifier {
                ordinal,
                name: name.into(),
                ..ResourceIdentifier::default()
            },
            status: None,
            health: Some(health.into()),
        }
    }

    #[test]
    fn sync_and_health_come_from_the_work() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}});
        let desired = vec![a.clone(), d.clone()];
        assert_eq!(compare(&desired, None).0, "OutOfSync");
        assert_eq!(compare(&desired, None).1, "Missing");
        let mut work = Work::new(
            "w",
            WorkSpec {
                workload: Workload::new(&desired).unwrap(),
                suspend_dispatching: None,
                preserve_resources_on_deletion: None,
            },
        );
        let applied = |ok: bool| Condition {
            type_: "Applied".into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: String::new(),
            message: String::new(),
            last_transition_time: crate::conditions::now(),
            observed_generation: None,
        };
        work.status = Some(WorkStatus {
            conditions: vec![applied(true)],
            manifest_statuses: vec![status("a", 0, "Healthy"), status("d", 1, "Unhealthy")],
        });
        let (sync, health, resources) = compare(&desired, Some(&work));
        assert_eq!((sync.as_str(), health.as_str()), ("Synced", "Progressing"));
        assert_eq!(resources[1]["kind"], "Deployment");
        assert_eq!(resources[1]["group"], "apps");
        work.status = Some(WorkStatus {
            conditions: vec![applied(true)],
            manifest_statuses: vec![status("a", 0, "Healthy"), status("d", 1, "Healthy")],
        });
        assert_eq!(compare(&desired, Some(&work)).1, "Healthy");
        // Git dropped d: the Work still holds it, to be pruned.
        let (sync, _, resources) = compare(std::slice::from_ref(&a), Some(&work));
        assert_eq!(sync, "OutOfSync");
        assert_eq!(resources[1]["requiresPruning"], true);
    }
}
