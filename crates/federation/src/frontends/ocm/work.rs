//! Open Cluster Management's ManagedCluster and ManifestWork on the hub,
//! as a front end over the one pipeline: a ManagedCluster (and a cluster
//! namespace) per Karmada Cluster, and one Karmada Work in
//! `karmada-es-<cluster>` per ManifestWork in that cluster's namespace,
//! applied by the execution controller; the Work's per-manifest status
//! becomes the ManifestWork's conditions, resource status and feedback.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::{Cluster, ManifestStatus, Work, WorkSpec, Workload};
use crate::context::Ctx;
use crate::passes::{self, Watched};
use flotilla_core::crd::{Kind, age, column};

pub const CLUSTER_GROUP: &str = "cluster.open-cluster-management.io";
pub const WORK_GROUP: &str = "work.open-cluster-management.io";
/// OCM's finalizer on a ManifestWork until its resources are cleaned up.
pub const CLEANUP_FINALIZER: &str = "cluster.open-cluster-management.io/manifest-work-cleanup";
/// On a ManagedCluster: kept by Flotilla, after the Cluster of that name.
pub const FROM_CLUSTER: &str = "flotilla.io/karmada-cluster";
/// On a Work: the ManifestWork it carries.
pub const WORK_NAMESPACE_LABEL: &str = "work.open-cluster-management.io/manifestwork-namespace";
pub const WORK_NAME_LABEL: &str = "work.open-cluster-management.io/manifestwork-name";

pub fn managed_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CLUSTER_GROUP, "v1", "ManagedCluster"),
        "managedclusters",
    )
}

pub fn manifest_work_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(WORK_GROUP, "v1", "ManifestWork"),
        "manifestworks",
    )
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            group: CLUSTER_GROUP,
            version: "v1",
            kind: "ManagedCluster".into(),
            plural: "managedclusters".into(),
            short_names: vec!["mcl".into(), "mcls".into()],
            namespaced: false,
            categories: &[],
            columns: vec![
                column("Hub Accepted", "boolean", ".spec.hubAcceptsClient"),
                column(
                    "Joined",
                    "string",
                    ".status.conditions[?(@.type==\"ManagedClusterJoined\")].status",
                ),
                column(
                    "Available",
                    "string",
                    ".status.conditions[?(@.type==\"ManagedClusterConditionAvailable\")].status",
                ),
                age(),
            ],
            spec: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        },
        Kind {
            group: WORK_GROUP,
            version: "v1",
            kind: "ManifestWork".into(),
            plural: "manifestworks".into(),
            short_names: vec!["mw".into()],
            namespaced: true,
            categories: &[],
            columns: vec![
                column(
                    "Applied",
                    "string",
                    ".status.conditions[?(@.type==\"Applied\")].status",
                ),
                column(
                    "Available",
                    "string",
                    ".status.conditions[?(@.type==\"Available\")].status",
                ),
                age(),
            ],
            spec: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        },
    ]
}

/// The ManagedCluster and ManifestWork CRDs, as manifests.
pub fn crds() -> Vec<Value> {
    kinds()
        .iter()
        .map(|k| {
            let mut crd = k.crd();
            flotilla_core::crd::spec_optional(&mut crd);
            crd
        })
        .collect()
}

// ------------------------------------------------------------ ManagedCluster

/// The ManagedCluster that stands for `cluster`: its labels plus OCM's
/// `name`, accepted by the hub.
pub fn managed_cluster(cluster: &Cluster) -> Value {
    let name = cluster.name_any();
    let mut labels: BTreeMap<String, String> = cluster.labels().clone();
    labels.insert("name".into(), name.clone());
    labels.insert(FROM_CLUSTER.into(), "true".into());
    json!({
        "apiVersion": format!("{CLUSTER_GROUP}/v1"),
        "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels},
        "spec": {"hubAcceptsClient": true, "leaseDurationSeconds": 60},
    })
}

/// A ManagedCluster's taints: those it has (an admin's), less OCM's
/// availability taints, plus `unreachable` (`NoSelect`) while the Cluster
/// is not Ready, as OCM's registration hub taints a cluster whose
/// availability is Unknown. A taint kept keeps its `timeAdded`.
pub fn managed_cluster_taints(cluster: &Cluster, existing: &[Value]) -> Vec<Value> {
    use super::placement::{TAINT_UNAVAILABLE, TAINT_UNREACHABLE};
    let key = |t: &Value| {
        t.get("key")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut taints: Vec<Value> = existing
        .iter()
        .filter(|t| {
            let k = key(t);
            k != TAINT_UNAVAILABLE && k != TAINT_UNREACHABLE
        })
        .cloned()
        .collect();
    if !cluster.is_ready() {
        let added = existing
            .iter()
            .find(|t| key(t) == TAINT_UNREACHABLE)
            .and_then(|t| t.get("timeAdded").cloned())
            .unwrap_or_else(|| json!(crate::conditions::now()));
        taints.push(json!({"key": TAINT_UNREACHABLE, "value": "", "effect": "NoSelect", "timeAdded": added}));
    }
    taints
}

/// A ManagedCluster's status from its Cluster's: conditions, capacity,
/// allocatable and version. `previous` keeps transition times.
pub fn managed_cluster_status(cluster: &Cluster, previous: &Value) -> Value {
    let mut conds: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> = previous
        .pointer("/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    crate::conditions::set(
        &mut conds,
        "HubAcceptedManagedCluster",
        true,
        "HubClusterAdminAccepted",
        "Accepted by hub cluster admin",
    );
    crate::conditions::set(
        &mut conds,
        "ManagedClusterJoined",
        true,
        "ManagedClusterJoined",
        "Managed cluster joined",
    );
    if cluster.is_ready() {
        crate::conditions::set(
            &mut conds,
            "ManagedClusterConditionAvailable",
            true,
            "ManagedClusterAvailable",
            "Managed cluster is available",
        );
    } else {
        crate::conditions::set_status(
            &mut conds,
            "ManagedClusterConditionAvailable",
            "Unknown",
            "ManagedClusterLeaseUpdateStopped",
            "Registration agent stopped updating its lease.",
        );
    }
    let status = cluster.status.clone().unwrap_or_default();
    let summary = status.resource_summary.unwrap_or_default();
    let mut allocatable = summary.allocatable.clone();
    // OCM's allocatable is what is left: Karmada's allocatable less allocated.
    for (k, used) in &summary.allocated {
        if let (Some(total), Some(used)) = (
            allocatable.get(k).and_then(|q| quantity(&q.0)),
            quantity(&used.0),
        ) {
            let left = (total - used).max(0.0);
            allocatable.insert(
                k.clone(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(format_quantity(left)),
            );
        }
    }
    // OCM's well-known ClusterClaims, from what the Cluster says.
    let mut claims = vec![
        json!({"name": "id.k8s.io", "value": cluster.spec.id.clone().unwrap_or_else(|| cluster.name_any())}),
    ];
    if let Some(v) = status
        .kubernetes_version
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        claims.push(json!({"name": "kubeversion.open-cluster-management.io", "value": v}));
    }
    if let Some(p) = cluster.spec.provider.as_deref() {
        claims.push(json!({"name": "platform.open-cluster-management.io", "value": p}));
    }
    if let Some(r) = cluster.spec.region.as_deref() {
        claims.push(json!({"name": "region.open-cluster-management.io", "value": r}));
    }
    json!({
        "conditions": conds,
        "clusterClaims": claims,
        "capacity": summary.allocatable,
        "allocatable": allocatable,
        "version": {"kubernetes": status.kubernetes_version.unwrap_or_default()},
    })
}

/// A quantity's value (plain numbers, milli and binary/decimal suffixes).
pub fn quantity(q: &str) -> Option<f64> {
    let suffixes: [(&str, f64); 11] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("m", 0.001),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (s, f) in suffixes {
        if let Some(n) = q.strip_suffix(s) {
            return n.parse::<f64>().ok().map(|n| n * f);
        }
    }
    q.parse().ok()
}

fn format_quantity(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as i64)
    } else {
        format!("{}m", (v * 1000.0).round() as i64)
    }
}

// ------------------------------------------------------------- ManifestWork

/// The Work carrying ManifestWork `namespace/name`.
pub fn work_name(namespace: &str, name: &str) -> String {
    format!("ocm-{namespace}-{name}")
}

/// Why a manifest cannot be applied, before it reaches a cluster.
pub fn invalid(manifest: &Value) -> Option<String> {
    if !manifest.is_object() {
        return Some("the manifest is not an object".into());
    }
    for (path, what) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        if manifest
            .pointer(path)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Some(format!("the manifest has no {what}"));
        }
    }
    None
}

/// The delete option's propagation policy: `Foreground` (the default),
/// `Orphan` or `SelectivelyOrphan`.
pub fn propagation_policy(mw: &Value) -> &str {
    mw.pointer("/spec/deleteOption/propagationPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Foreground")
}

/// Whether the manifest (group, resource, namespace, name) is to be left
/// in the cluster when the ManifestWork goes.
pub fn orphaned(mw: &Value, group: &str, resource: &str, namespace: &str, name: &str) -> bool {
    match propagation_policy(mw) {
        "Orphan" => true,
        "SelectivelyOrphan" => mw
            .pointer("/spec/deleteOption/selectivelyOrphans/orphaningRules")
            .and_then(Value::as_array)
            .is_some_and(|rules| {
                rules.iter().any(|r| {
                    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                    s("group") == group
                        && s("resource") == resource
                        && s("namespace") == namespace
                        && s("name") == name
                })
            }),
        _ => false,
    }
}

/// The value at a simple JSON path (`.status.readyReplicas`,
/// `.a.b[0].c`), relative to the object; a path not starting at
/// `.status` is taken under status, as OCM's feedback paths are.
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut at = object;
    let rest = if let Some(r) = path.strip_prefix(".status") {
        at = at.get("status")?;
        r
    } else {
        at = at.get("status")?;
        path
    };
    let mut rest = rest;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[?(@.") {
            // A filter on a list: `[?(@.type=="Ready")]`, the first match.
            let (field, r) = r.split_once("==")?;
            let (value, r) = r.split_once(")]")?;
            let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
            at = at
                .as_array()?
                .iter()
                .find(|e| e.get(field.trim()).and_then(Value::as_str) == Some(value))?;
            rest = r;
        } else if let Some(r) = rest.strip_prefix('[') {
            let (index, r) = r.split_once(']')?;
            at = at.get(index.trim().parse::<usize>().ok()?)?;
            rest = r;
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            at = at.get(&r[..end])?;
            rest = &r[end..];
        }
    }
    Some(at)
}

fn field_value(v: &Value) -> Value {
    match v {
        Value::Number(n) if n.is_i64() => json!({"type": "Integer", "integer": n}),
        Value::String(s) => json!({"type": "String", "string": s}),
        Value::Bool(b) => json!({"type": "Boolean", "boolean": b}),
        // A fraction has no OCM type but its text.
        other => json!({"type": "String", "string": other.to_string()}),
    }
}

/// Status feedback for a manifest from the member's status (`status` as
/// the Work reports it, under `status`): the values and whether every
/// rule found its fields.
pub fn feedback(kind: &str, rules: &[Value], status: Option<&Value>) -> (Vec<Value>, bool) {
    let object = json!({"status": status.cloned().unwrap_or(Value::Null)});
    let mut values = Vec::new();
    let mut complete = true;
    for rule in rules {
        let paths: Vec<(String, String)> = match rule.get("type").and_then(Value::as_str) {
            Some("WellKnownStatus") => {
                let names: &[&str] = match kind {
                    "Deployment" => &["ReadyReplicas", "Replicas", "AvailableReplicas"],
                    "Job" => &["JobComplete", "JobSucceeded"],
                    "Pod" => &["PodPhase", "PodReady"],
                    _ => &[],
                };
                names
                    .iter()
                    .map(|n| {
                        let p = match *n {
                            "JobComplete" => {
                                ".status.conditions[?(@.type==\"Complete\")].status".to_string()
                            }
                            "JobSucceeded" => ".status.succeeded".to_string(),
                            "PodPhase" => ".status.phase".to_string(),
                            "PodReady" => {
                                ".status.conditions[?(@.type==\"Ready\")].status".to_string()
                            }
                            n => {
                                let mut f = n.to_string();
                                f[..1].make_ascii_lowercase();
                                format!(".status.{f}")
                            }
                        };
                        (n.to_string(), p)
                    })
                    .collect()
            }
            Some("JSONPaths") => rule
                .get("jsonPaths")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    Some((
                        p.get("name")?.as_str()?.to_string(),
                        p.get("path")?.as_str()?.to_string(),
                    ))
                })
                .collect(),
            _ => {
                complete = false;
                continue;
            }
        };
        for (name, path) in paths {
            match json_path(&object, &path) {
                // As OCM: a field the object does not (yet) have gives no
                // value; a structure, map or list gives none and leaves
                // the feedback unsynced.
                None | Some(Value::Null) => {}
                Some(Value::Object(_) | Value::Array(_)) => complete = false,
                Some(v) => values.push(json!({"name": name, "fieldValue": field_value(v)})),
            }
        }
    }
    (values, complete)
}

fn config_for(mw: &Value, group: &str, resource: &str, namespace: &str, name: &str) -> Vec<Value> {
    mw.pointer("/spec/manifestConfigs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            let id = c.get("resourceIdentifier").cloned().unwrap_or_default();
            let s = |k: &str| {
                id.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            s("group") == group
                && s("resource") == resource
                && s("name") == name
                && (s("namespace") == namespace || s("namespace").is_empty())
        })
        .flat_map(|c| {
            c.get("feedbackRules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

fn condition(type_: &str, ok: &str, reason: &str, message: &str, previous: &[Value]) -> Value {
    let time = previous
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(ok))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(crate::conditions::now()));
    json!({"type": type_, "status": ok, "reason": reason, "message": message, "lastTransitionTime": time})
}

fn tf(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// One manifest of a ManifestWork, as the status reports it.
pub struct Entry {
    pub ordinal: usize,
    pub manifest: Value,
    /// Why it was not sent to the cluster.
    pub invalid: Option<String>,
    /// What the Work says of it, once applied.
    pub status: Option<ManifestStatus>,
}

/// The ManifestWork's status: conditions and per-manifest status, from
/// its manifests as sent and what the Work reports. `work_applied` is the
/// Work's Applied condition (status and message), when it has one.
pub fn manifest_work_status(
    mw: &Value,
    entries: &[Entry],
    work_applied: Option<(bool, String)>,
) -> Value {
    let previous: Vec<Value> = mw
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let prev_manifests: Vec<Value> = mw
        .pointer("/status/resourceStatus/manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let generation = mw
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let mut manifests = Vec::new();
    let (mut applied_all, mut available_all, mut progressing, mut degraded) =
        (true, true, false, false);
    for e in entries {
        let (api_version, kind, mut namespace, name) = crate::execution::identify(&e.manifest);
        let (mut group, mut version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let mut resource = String::new();
        if let Some(s) = &e.status {
            group = s.identifier.group.clone();
            version = s.identifier.version.clone();
            resource = s.identifier.resource.clone();
            namespace = s.identifier.namespace.clone();
        }
        let prev: Vec<Value> = prev_manifests
            .iter()
            .find(|m| m.pointer("/resourceMeta/ordinal") == Some(&json!(e.ordinal)))
            .and_then(|m| m.get("conditions").and_then(Value::as_array).cloned())
            .unwrap_or_default();
        let mut conds = Vec::new();
        let mut values = Vec::new();
        match (&e.invalid, &e.status) {
            (Some(why), _) => {
                applied_all = false;
                available_all = false;
                degraded = true;
                conds.push(condition(
                    "Applied",
                    "False",
                    "AppliedManifestFailed",
                    why,
                    &prev,
                ));
                conds.push(condition(
                    "Available",
                    "Unknown",
                    "ResourceNotApplied",
                    "The manifest is not applied",
                    &prev,
                ));
            }
            (None, Some(s)) => {
                conds.push(condition(
                    "Applied",
                    "True",
                    "AppliedManifestComplete",
                    "Apply manifest complete",
                    &prev,
                ));
                conds.push(condition(
                    "Available",
                    "True",
                    "ResourceAvailable",
                    "Resource is available",
                    &prev,
                ));
                match s.health.as_deref() {
                    Some("Healthy") => {}
                    Some("Unhealthy") => degraded = true,
                    _ => progressing = true,
                }
                let rules = config_for(mw, &group, &resource, &namespace, &name);
                if !rules.is_empty() {
                    let (v, complete) = feedback(&kind, &rules, s.status.as_ref());
                    values = v;
                    conds.push(if complete {
                        condition(
                            "StatusFeedbackSynced",
                            "True",
                            "StatusFeedbackSynced",
                            "",
                            &prev,
                        )
                    } else {
                        condition(
                            "StatusFeedbackSynced",
                            "False",
                            "StatusFeedbackSyncFailed",
                            "some status fields were not found",
                            &prev,
                        )
                    });
                }
            }
            (None, None) => {
                applied_all = false;
                available_all = false;
                progressing = true;
                let message = match &work_applied {
                    Some((false, m)) => m.clone(),
                    _ => "The manifest is being applied".to_string(),
                };
                conds.push(condition(
                    "Applied",
                    "False",
                    "AppliedManifestFailed",
                    &message,
                    &prev,
                ));
                conds.push(condition(
                    "Available",
                    "Unknown",
                    "ResourceNotApplied",
                    "The manifest is not applied yet",
                    &prev,
                ));
            }
        }
        manifests.push(json!({
            "resourceMeta": {
                "ordinal": e.ordinal,
                "group": group,
                "version": version,
                "kind": kind,
                "resource": resource,
                "name": name,
                "namespace": namespace,
            },
            "statusFeedback": {"values": values},
            "conditions": conds,
        }));
    }
    let mut conds = vec![
        if applied_all {
            condition(
                "Applied",
                "True",
                "AppliedManifestWorkComplete",
                "Apply manifest work complete",
                &previous,
            )
        } else {
            condition(
                "Applied",
                "False",
                "AppliedManifestWorkFailed",
                "Failed to apply manifest work",
                &previous,
            )
        },
        if available_all {
            condition(
                "Available",
                "True",
                "ResourcesAvailable",
                "All resources are available",
                &previous,
            )
        } else {
            condition(
                "Available",
                "False",
                "ResourcesNotAvailable",
                "One or more resources are not available",
                &previous,
            )
        },
        condition(
            "Progressing",
            tf(progressing),
            if progressing {
                "ResourcesProgressing"
            } else {
                "ResourcesComplete"
            },
            if progressing {
                "One or more resources are not yet ready"
            } else {
                "All resources are ready"
            },
            &previous,
        ),
        condition(
            "Degraded",
            tf(degraded),
            if degraded {
                "ResourcesDegraded"
            } else {
                "ResourcesHealthy"
            },
            if degraded {
                "One or more resources are invalid or unhealthy"
            } else {
                "No resource is degraded"
            },
            &previous,
        ),
    ];
    for c in &mut conds {
        c["observedGeneration"] = generation.clone();
    }
    json!({"conditions": conds, "resourceStatus": {"manifests": manifests}})
}

/// A ManifestWork in a namespace that is no cluster's: never applied.
pub fn no_cluster_status(mw: &Value, namespace: &str) -> Value {
    let previous: Vec<Value> = mw
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let message = format!(
        "namespace {namespace} is not a ManagedCluster's: the ManifestWork is applied to no cluster"
    );
    json!({"conditions": [
        condition("Applied", "False", "ManagedClusterNotFound", &message, &previous),
        condition("Available", "Unknown", "ManagedClusterNotFound", &message, &previous),
    ]})
}

// ---------------------------------------------------------------- controller

/// A pass at least this often, even without a change seen.
const RESYNC: Duration = Duration::from_secs(10);

/// Keeps ManagedClusters, cluster namespaces, and ManifestWorks' Works
/// and status: a pass whenever a Cluster, a ManagedCluster's or a
/// ManifestWork's spec, or a ManifestWork's Work changes, and every
/// resync.
pub async fn run(ctx: Ctx) {
    let changes = passes::changes(
        &ctx.hub,
        [
            Watched::any(ApiResource::erase::<Cluster>(&())),
            Watched::spec(managed_cluster_resource()),
            Watched::spec(manifest_work_resource()),
            Watched::any(ApiResource::erase::<Work>(&())).labelled(WORK_NAME_LABEL),
        ],
    );
    // The cluster namespaces known to exist: looked up once each.
    let namespaces = Arc::new(Mutex::new(HashSet::new()));
    let metrics = ctx.metrics.queue("ocm-work");
    passes::run(metrics, changes, RESYNC, move || {
        let (ctx, namespaces) = (ctx.clone(), namespaces.clone());
        async move {
            let mut known = namespaces.lock().clone();
            let result = sync(&ctx, &mut known).await;
            *namespaces.lock() = known;
            result
        }
    })
    .await;
}

async fn sync(ctx: &Ctx, namespaces: &mut HashSet<String>) -> kube::Result<()> {
    sync_clusters(ctx, namespaces).await?;
    sync_works(ctx).await
}

async fn sync_clusters(ctx: &Ctx, known: &mut HashSet<String>) -> kube::Result<()> {
    let clusters = ctx.clusters.state();
    let ar = managed_cluster_resource();
    let api: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &ar);
    let existing = api.list(&Default::default()).await?;
    let by_name: HashMap<String, &DynamicObject> =
        existing.items.iter().map(|m| (m.name_any(), m)).collect();
    let namespaces: Api<Namespace> = Api::all(ctx.hub.clone());
    let params = PatchParams::apply("flotilla-ocm").force();
    for cluster in &clusters {
        let name = cluster.name_any();
        if cluster.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let found = by_name.get(&name).copied();
        let mut wanted = managed_cluster(cluster);
        let had_taints: Vec<Value> = found
            .and_then(|m| m.data.pointer("/spec/taints"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let taints = managed_cluster_taints(cluster, &had_taints);
        let taints_differ = taints != had_taints;
        wanted["spec"]["taints"] = json!(taints);
        let differs = taints_differ
            || found.is_none_or(|m| {
                m.labels()
                    != &serde_json::from_value::<BTreeMap<String, String>>(
                        wanted["metadata"]["labels"].clone(),
                    )
                    .unwrap_or_default()
                    || m.data.pointer("/spec/hubAcceptsClient") != Some(&json!(true))
            });
        if differs {
            api.patch(&name, &params, &Patch::Apply(&wanted)).await?;
            if found.is_none() {
                info!(cluster = %name, "ManagedCluster created");
            }
        }
        let previous = found
            .and_then(|m| m.data.get("status").cloned())
            .unwrap_or(Value::Null);
        let status = managed_cluster_status(cluster, &previous);
        if previous != status {
            crate::writes::merge_patch_status(&api, &name, &json!({"status": status})).await?;
        }
        if !known.contains(&name) && namespaces.get_opt(&name).await?.is_none() {
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace");
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => info!(cluster = %name, "cluster namespace created"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        known.insert(name);
    }
    let cluster_names: HashSet<String> = clusters.iter().map(|c| c.name_any()).collect();
    known.retain(|n| cluster_names.contains(n));
    for m in &existing.items {
        let ours = m.labels().get(FROM_CLUSTER).map(String::as_str) == Some("true");
        if ours && !cluster_names.contains(&m.name_any()) {
            match api.delete(&m.name_any(), &DeleteParams::default()).await {
                Ok(_) => info!(cluster = %m.name_any(), "ManagedCluster removed"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

async fn sync_works(ctx: &Ctx) -> kube::Result<()> {
    let ar = manifest_work_resource();
    let all: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &ar);
    for mw in all.list(&Default::default()).await?.items {
        let namespace = mw.namespace().unwrap_or_default();
        let name = mw.name_any();
        if let Err(error) = sync_work(ctx, &ar, &namespace, mw).await {
            warn!(%error, %namespace, %name, "ManifestWork not synced");
        }
    }
    Ok(())
}

async fn sync_work(
    ctx: &Ctx,
    ar: &ApiResource,
    namespace: &str,
    mw: DynamicObject,
) -> kube::Result<()> {
    let name = mw.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.hub.clone(), namespace, ar);
    // A cluster being unjoined takes its Works with it.
    let cluster = ctx
        .cluster(namespace)
        .filter(|c| c.metadata.deletion_timestamp.is_none());
    let works: Api<Work> =
        Api::namespaced(ctx.hub.clone(), &Cluster::execution_namespace(namespace));
    let work_name = work_name(namespace, &name);
    let value = serde_json::to_value(&mw).unwrap_or_default();
    if mw.metadata.deletion_timestamp.is_some() {
        if cluster.is_some()
            && let Some(work) = works.get_opt(&work_name).await?
        {
            let preserve = preserve_all(&value, &work.spec.workload.parsed());
            if work.metadata.deletion_timestamp.is_none() {
                if work.spec.preserve_resources_on_deletion.unwrap_or(false) != preserve {
                    crate::writes::merge_patch(
                        &works,
                        &work_name,
                        &json!({"spec": {"preserveResourcesOnDeletion": preserve}}),
                    )
                    .await?;
                }
                works.delete(&work_name, &DeleteParams::default()).await?;
                info!(%namespace, %name, "ManifestWork deleted: removing its Work");
            }
            // Foreground: the finalizer stays until the Work is gone.
            return Ok(());
        }
        return crate::finalizer::remove(&api, &mw, CLEANUP_FINALIZER).await;
    }
    if crate::finalizer::add(&api, &mw, CLEANUP_FINALIZER).await? {
        return Ok(());
    }
    let Some(cluster) = cluster else {
        let status = no_cluster_status(&value, namespace);
        return write_status(&api, &value, &name, status).await;
    };
    let manifests: Vec<Value> = value
        .pointer("/spec/workload/manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut entries = Vec::new();
    let mut sent = Vec::new();
    for (ordinal, mut manifest) in manifests.into_iter().enumerate() {
        let invalid = invalid(&manifest);
        if invalid.is_none() {
            default_namespace(ctx, &mut manifest).await;
            sent.push((ordinal, manifest.clone()));
        }
        entries.push(Entry {
            ordinal,
            manifest,
            invalid,
            status: None,
        });
    }
    let preserve = preserve_all(
        &value,
        &sent.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
    );
    let workload = Workload::new(&sent.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>())
        .map_err(kube::Error::SerdeError)?;
    let existing = works.get_opt(&work_name).await?;
    let wanted = WorkSpec {
        workload,
        suspend_dispatching: None,
        preserve_resources_on_deletion: Some(preserve),
    };
    match &existing {
        Some(w) if w.spec == wanted => {}
        _ => {
            let mut work = Work::new(&work_name, wanted);
            work.metadata.namespace = Some(Cluster::execution_namespace(namespace));
            work.metadata.labels = Some(BTreeMap::from([
                (WORK_NAMESPACE_LABEL.to_string(), namespace.to_string()),
                (WORK_NAME_LABEL.to_string(), name.clone()),
            ]));
            let mut doc = serde_json::to_value(&work).map_err(kube::Error::SerdeError)?;
            doc["apiVersion"] = json!("work.karmada.io/v1alpha1");
            doc["kind"] = json!("Work");
            works
                .patch(
                    &work_name,
                    &PatchParams::apply("flotilla-ocm").force(),
                    &Patch::Apply(&doc),
                )
                .await?;
            debug!(cluster = %cluster.name_any(), work = %work_name, "Work written for ManifestWork");
        }
    }
    let work_status = existing.and_then(|w| w.status).unwrap_or_default();
    let work_applied = work_status
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")
        .map(|c| (c.status == "True", c.message.clone()));
    for s in work_status.manifest_statuses {
        if let Some((ordinal, _)) = sent.get(s.identifier.ordinal as usize)
            && let Some(e) = entries.get_mut(*ordinal)
        {
            e.status = Some(s);
        }
    }
    let status = manifest_work_status(&value, &entries, work_applied);
    write_status(&api, &value, &name, status).await
}

/// Whether the Work keeps its copies when it goes: every manifest is
/// orphaned (`Orphan`, or `SelectivelyOrphan` rules covering them all;
/// the Work keeps or deletes all its copies alike).
fn preserve_all(mw: &Value, manifests: &[Value]) -> bool {
    !manifests.is_empty()
        && manifests.iter().all(|m| {
            let (api_version, kind, ns, n) = crate::execution::identify(m);
            let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
            orphaned(mw, group, &plural(&kind), &ns, &n)
        })
}

/// A namespaced manifest without a namespace goes to `default`.
async fn default_namespace(ctx: &Ctx, manifest: &mut Value) {
    let (api_version, kind, namespace, _) = crate::execution::identify(manifest);
    if !namespace.is_empty() {
        return;
    }
    if let Ok((_, true)) = ctx.hub_kinds.resolve(&api_version, &kind).await {
        manifest["metadata"]["namespace"] = json!("default");
    }
}

fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

async fn write_status(
    api: &Api<DynamicObject>,
    mw: &Value,
    name: &str,
    status: Value,
) -> kube::Result<()> {
    if mw.get("status") == Some(&status) {
        return Ok(());
    }
    match crate::writes::merge_patch_status(api, name, &json!({"status": status})).await {
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterSpec, ResourceIdentifier};

    fn deployment_status(ready: i64) -> ManifestStatus {
        ManifestStatus {
            identifier: ResourceIdentifier {
                ordinal: 0,
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                resource: "deployments".into(),
                namespace: "default".into(),
                name: "hello".into(),
            },
            status: Some(
                json!({"replicas": 1, "readyReplicas": ready, "availableReplicas": ready, "conditions": []}),
            ),
            health: Some("Healthy".into()),
        }
    }

    fn mw(extra: Value) -> Value {
        let mut mw = json!({
            "metadata": {"name": "hello-work-demo", "namespace": "c1", "generation": 2},
            "spec": {"manifestConfigs": [{
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "namespace": "default", "name": "hello"},
                "feedbackRules": [
                    {"type": "WellKnownStatus"},
                    {"type": "JSONPaths", "jsonPaths": [{"name": "ready", "path": ".status.readyReplicas"}, {"name": "gone", "path": ".nothing"}, {"name": "whole", "path": ".conditions"}]},
                ],
            }]},
        });
        if let (Some(a), Some(b)) = (mw["spec"].as_object_mut(), extra.as_object()) {
            a.extend(b.clone());
        }
        mw
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hello", "namespace": "default"}})
    }

    #[test]
    fn managed_cluster_follows_its_cluster() {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        c.metadata.labels = Some([("region".to_string(), "eu".to_string())].into());
        let m = managed_cluster(&c);
        assert_eq!(m["metadata"]["labels"]["name"], "m1");
        assert_eq!(m["metadata"]["labels"]["region"], "eu");
        assert_eq!(m["spec"]["hubAcceptsClient"], true);
        let status = managed_cluster_status(&c, &Value::Null);
        let cond = |s: &Value, t: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(cond(&status, "HubAcceptedManagedCluster"), "True");
        assert_eq!(cond(&status, "ManagedClusterConditionAvailable"), "Unknown");
        c.status = Some(serde_json::from_value(json!({
            "kubernetesVersion": "v1.31.0",
            "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "resourceSummary": {"allocatable": {"cpu": "4", "memory": "8Gi"}, "allocated": {"cpu": "1500m"}},
        })).unwrap());
        let status = managed_cluster_status(&c, &status);
        assert_eq!(cond(&status, "ManagedClusterConditionAvailable"), "True");
        assert_eq!(status["capacity"]["cpu"], "4");
        assert_eq!(status["allocatable"]["cpu"], "2500m");
        assert_eq!(status["allocatable"]["memory"], "8Gi");
        assert_eq!(status["version"]["kubernetes"], "v1.31.0");
    }

    #[test]
    fn an_unready_cluster_is_tainted_unreachable() {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        let admins = json!({"key": "maintenance", "value": "", "effect": "NoSelect", "timeAdded": "2026-01-01T00:00:00Z"});
        let taints = managed_cluster_taints(&c, std::slice::from_ref(&admins));
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[0], admins);
        assert_eq!(taints[1]["key"], super::super::placement::TAINT_UNREACHABLE);
        assert_eq!(taints[1]["effect"], "NoSelect");
        // Kept as it was while the cluster stays down.
        assert_eq!(managed_cluster_taints(&c, &taints), taints);
        c.status = Some(serde_json::from_value(json!({
            "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        })).unwrap());
        assert_eq!(managed_cluster_taints(&c, &taints), [admins]);
        let status = managed_cluster_status(&c, &Value::Null);
        assert_eq!(
            status["clusterClaims"][0],
            json!({"name": "id.k8s.io", "value": "m1"})
        );
    }

    #[test]
    fn invalid_manifests_are_named() {
        assert_eq!(invalid(&deployment()), None);
        assert_eq!(
            invalid(&json!({"apiVersion": "v1", "metadata": {"name": "x"}})).as_deref(),
            Some("the manifest has no kind")
        );
        assert_eq!(
            invalid(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).as_deref(),
            Some("the manifest has no metadata.name")
        );
        assert!(invalid(&json!("text")).is_some());
    }

    #[test]
    fn json_paths_read_under_status() {
        let o = json!({"status": {"readyReplicas": 2, "conditions": [{"type": "A"}]}});
        assert_eq!(json_path(&o, ".status.readyReplicas"), Some(&json!(2)));
        assert_eq!(json_path(&o, ".readyReplicas"), Some(&json!(2)));
        assert_eq!(
            json_path(&o, ".status.conditions[0].type"),
            Some(&json!("A"))
        );
        assert_eq!(json_path(&o, ".status.missing"), None);
        let o = json!({"status": {"conditions": [
            {"type": "Available", "status": "False"},
            {"type": "Ready", "status": "True"},
        ]}});
        assert_eq!(
            json_path(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(&json!("True"))
        );
        assert_eq!(
            json_path(&o, r#".conditions[?(@.type=="Gone")].status"#),
            None
        );
        let (values, complete) = feedback(
            "Pod",
            &[json!({"type": "WellKnownStatus"})],
            Some(&json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})),
        );
        assert!(complete);
        assert_eq!(
            values,
            [
                json!({"name": "PodPhase", "fieldValue": {"type": "String", "string": "Running"}}),
                json!({"name": "PodReady", "fieldValue": {"type": "String", "string": "True"}}),
            ]
        );
    }

    #[test]
    fn status_from_the_work() {
        let entries = [
            Entry {
                ordinal: 0,
                manifest: deployment(),
                invalid: None,
                status: Some(deployment_status(1)),
            },
            Entry {
                ordinal: 1,
                manifest: json!({"apiVersion": "v1"}),
                invalid: Some("the manifest has no kind".into()),
                status: None,
            },
        ];
        let s = manifest_work_status(&mw(json!({})), &entries, Some((true, String::new())));
        let cond = |v: &Value, t: &str| {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()
                .clone()
        };
        assert_eq!(cond(&s, "Applied")["status"], "False");
        assert_eq!(cond(&s, "Degraded")["status"], "True");
        assert_eq!(cond(&s, "Applied")["observedGeneration"], 2);
        let m0 = &s["resourceStatus"]["manifests"][0];
        assert_eq!(m0["resourceMeta"]["resource"], "deployments");
        assert_eq!(cond(m0, "Applied")["status"], "True");
        assert_eq!(cond(m0, "Available")["status"], "True");
        // A path to a list leaves feedback unsynced; a missing one gives
        // no value.
        assert_eq!(cond(m0, "StatusFeedbackSynced")["status"], "False");
        let values = m0["statusFeedback"]["values"].as_array().unwrap();
        let value = |n: &str| values.iter().find(|v| v["name"] == n).unwrap()["fieldValue"].clone();
        assert_eq!(
            value("ReadyReplicas"),
            json!({"type": "Integer", "integer": 1})
        );
        assert_eq!(
            value("AvailableReplicas"),
            json!({"type": "Integer", "integer": 1})
        );
        assert_eq!(value("ready"), json!({"type": "Integer", "integer": 1}));
        let m1 = &s["resourceStatus"]["manifests"][1];
        assert_eq!(cond(m1, "Applied")["status"], "False");
        assert_eq!(cond(m1, "Applied")["message"], "the manifest has no kind");

        // All valid and applied: Applied and Available, not Degraded; the
        // transition times stay on a second look.
        let mut one = mw(json!({}));
        let s = manifest_work_status(&one, &entries[..1], None);
        assert_eq!(cond(&s, "Applied")["status"], "True");
        assert_eq!(cond(&s, "Available")["status"], "True");
        assert_eq!(cond(&s, "Degraded")["status"], "False");
        one["status"] = s.clone();
        assert_eq!(manifest_work_status(&one, &entries[..1], None), s);
    }

    #[test]
    fn delete_options() {
        let id = ("apps", "deployments", "default", "hello");
        let orphaned_ = |m: &Value| orphaned(m, id.0, id.1, id.2, id.3);
        assert!(!orphaned_(&mw(json!({}))));
        assert!(orphaned_(&mw(
            json!({"deleteOption": {"propagationPolicy": "Orphan"}})
        )));
        let selective = |name: &str| {
            mw(
                json!({"deleteOption": {"propagationPolicy": "SelectivelyOrphan", "selectivelyOrphans": {"orphaningRules": [
                    {"group": "apps", "resource": "deployments", "namespace": "default", "name": name}
                ]}}}),
            )
        };
        assert!(orphaned_(&selective("hello")));
        assert!(!orphaned_(&selective("other")));
    }

    #[test]
    fn no_cluster_namespace() {
        let s = no_cluster_status(&json!({}), "nowhere");
        assert_eq!(s["conditions"][0]["reason"], "ManagedClusterNotFound");
        assert_eq!(s["conditions"][0]["status"], "False");
    }
}
