//! OCM's ManifestWorkReplicaSet (`work.open-cluster-management.io/v1alpha1`):
//! one ManifestWork from its template in the namespace of every cluster
//! its Placements decided, and none elsewhere. The ManifestWorks then go
//! the one way every ManifestWork goes (a Karmada Work, the execution
//! controller), so this is only fan-out and a summary of their status.
//! Every rollout strategy rolls out as `All` (at once). The controller
//! sweeps every second, as the ManifestWork controller does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::placement::{PLACEMENT_LABEL, decision_resource, placement_resource};
use super::work::{CLEANUP_FINALIZER, WORK_GROUP, manifest_work_resource};
use crate::context::Ctx;
use crate::passes::{self, Watched};
use flotilla_core::crd::{Kind, age, column};

pub const VERSION: &str = "v1alpha1";
/// On a ManifestWork: the ManifestWorkReplicaSet (`<namespace>.<name>`)
/// it was made for.
pub const REPLICASET_LABEL: &str = "work.open-cluster-management.io/manifestworkreplicaset";
pub const CONDITION_PLACEMENT_VERIFIED: &str = "PlacementVerified";
pub const CONDITION_APPLIED: &str = "ManifestworkApplied";
pub const CONDITION_ROLLED_OUT: &str = "PlacementRolledOut";
const FIELD_MANAGER: &str = "flotilla-ocm-replicaset";

pub fn replicaset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(WORK_GROUP, VERSION, "ManifestWorkReplicaSet"),
        "manifestworkreplicasets",
    )
}

fn kind() -> Kind {
    Kind {
        group: WORK_GROUP,
        version: VERSION,
        kind: "ManifestWorkReplicaSet".into(),
        plural: "manifestworkreplicasets".into(),
        short_names: vec!["mwrs".into()],
        namespaced: true,
        categories: &[],
        columns: vec![
            column(
                "Placement",
                "string",
                ".status.conditions[?(@.type==\"PlacementVerified\")].reason",
            ),
            column(
                "Found",
                "string",
                ".status.conditions[?(@.type==\"PlacementVerified\")].status",
            ),
            column(
                "ManifestWorks",
                "string",
                ".status.conditions[?(@.type==\"ManifestworkApplied\")].reason",
            ),
            column(
                "Applied",
                "string",
                ".status.conditions[?(@.type==\"ManifestworkApplied\")].status",
            ),
            age(),
        ],
        spec: json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "manifestWorkTemplate": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "placementRefs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"name": {"type": "string", "minLength": 1}},
                    },
                },
            },
        }),
    }
}

/// The ManifestWorkReplicaSet CRD.
pub fn crds() -> Vec<Value> {
    vec![kind().crd()]
}

/// The label value naming a ManifestWorkReplicaSet.
pub fn owner_key(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The names of the Placements a ManifestWorkReplicaSet refers to.
pub fn placement_refs(mwrs: &Value) -> Vec<String> {
    mwrs.pointer("/spec/placementRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

/// The rollout type of a placement reference: `All` unless it says
/// otherwise (`rolloutStrategy.type`, or the older `rolloutType`).
fn rollout_type(r: &Value) -> &str {
    r.pointer("/rolloutStrategy/type")
        .or_else(|| r.pointer("/rolloutStrategy/rolloutType"))
        .and_then(Value::as_str)
        .unwrap_or("All")
}

/// What the ManifestWorks of a ManifestWorkReplicaSet say, counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub total: usize,
    pub applied: usize,
    pub available: usize,
    pub degraded: usize,
    pub progressing: usize,
}

impl Summary {
    /// Counts `works` (ManifestWorks as the hub serves them) among
    /// `total` wanted.
    pub fn of<'a>(total: usize, works: impl IntoIterator<Item = &'a Value>) -> Summary {
        let mut s = Summary {
            total,
            ..Default::default()
        };
        for w in works {
            let is = |t: &str| {
                w.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == t && c["status"] == "True")
            };
            s.applied += usize::from(is("Applied"));
            s.available += usize::from(is("Available"));
            s.degraded += usize::from(is("Degraded"));
            s.progressing += usize::from(is("Progressing"));
        }
        s
    }

    fn to_json(&self) -> Value {
        json!({
            "total": self.total,
            "applied": self.applied,
            "available": self.available,
            "degraded": self.degraded,
            "progressing": self.progressing,
        })
    }
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str, previous: &[Value]) -> Value {
    let status = if ok { "True" } else { "False" };
    let time = previous
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(crate::conditions::now()));
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": time})
}

/// One placement reference as found: its name, whether the Placement
/// exists, and its decided clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub name: String,
    pub exists: bool,
    pub clusters: Vec<String>,
}

/// The ManifestWorkReplicaSet's status from its placements and the
/// ManifestWorks it has (`works`: cluster to ManifestWork).
pub fn replicaset_status(mwrs: &Value, found: &[Found], works: &BTreeMap<String, Value>) -> Value {
    let previous: Vec<Value> = mwrs
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let missing: Vec<&str> = found
        .iter()
        .filter(|f| !f.exists)
        .map(|f| f.name.as_str())
        .collect();
    let all: BTreeSet<&String> = found.iter().flat_map(|f| &f.clusters).collect();
    let verified = if !missing.is_empty() {
        condition(
            CONDITION_PLACEMENT_VERIFIED,
            false,
            "PlacementDecisionNotFound",
            &format!("Placement {} not found", missing.join(", ")),
            &previous,
        )
    } else if all.is_empty() {
        condition(
            CONDITION_PLACEMENT_VERIFIED,
            false,
            "PlacementDecisionEmpty",
            "The placements decided no cluster",
            &previous,
        )
    } else {
        condition(
            CONDITION_PLACEMENT_VERIFIED,
            true,
            "AsExpected",
            "",
            &previous,
        )
    };
    let summary = Summary::of(all.len(), all.iter().filter_map(|c| works.get(*c)));
    let applied = if summary.total > 0 && summary.applied == summary.total {
        condition(CONDITION_APPLIED, true, "AsExpected", "", &previous)
    } else if summary.total == 0 {
        condition(
            CONDITION_APPLIED,
            false,
            "NotAsExpected",
            "No ManifestWork is wanted",
            &previous,
        )
    } else {
        condition(
            CONDITION_APPLIED,
            false,
            "Processing",
            &format!(
                "{} of {} ManifestWorks applied",
                summary.applied, summary.total
            ),
            &previous,
        )
    };
    let done = summary.total > 0 && summary.available == summary.total;
    let rolled_out = condition(
        CONDITION_ROLLED_OUT,
        done,
        if done { "Complete" } else { "Progressing" },
        "",
        &previous,
    );
    let placement_summary: Vec<Value> = found
        .iter()
        .map(|f| {
            let s = Summary::of(
                f.clusters.len(),
                f.clusters.iter().filter_map(|c| works.get(c)),
            );
            json!({
                "name": f.name,
                "availableDecisionGroups": format!("1 ({} / {} clusters applied)", s.applied, s.total),
                "summary": s.to_json(),
            })
        })
        .collect();
    json!({
        "conditions": [verified, applied, rolled_out],
        "summary": summary.to_json(),
        "placementSummary": placement_summary,
    })
}

// -------------------------------------------------------------- controller

/// A pass at least this often, even without a change seen.
const RESYNC: Duration = Duration::from_secs(10);

/// Fans every ManifestWorkReplicaSet out whenever one changes its spec,
/// a PlacementDecision or one of their ManifestWorks changes, and every
/// resync.
pub async fn run(ctx: Ctx) {
    let changes = passes::changes(
        &ctx.hub,
        [
            Watched::spec(replicaset_resource()),
            Watched::any(decision_resource()),
            Watched::any(manifest_work_resource()).labelled(REPLICASET_LABEL),
        ],
    );
    let metrics = ctx.metrics.queue("ocm-manifestworkreplicaset");
    passes::run(metrics, changes, RESYNC, move || {
        let ctx = ctx.clone();
        async move { sync(&ctx).await }
    })
    .await;
}

async fn sync(ctx: &Ctx) -> kube::Result<()> {
    let all: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &replicaset_resource());
    let sets = all.list(&ListParams::default()).await?.items;
    let works: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &manifest_work_resource());
    let ours = works
        .list(&ListParams::default().labels(REPLICASET_LABEL))
        .await?
        .items;
    for mwrs in &sets {
        let namespace = mwrs.namespace().unwrap_or_default();
        let name = mwrs.name_any();
        let key = owner_key(&namespace, &name);
        let mine: Vec<&DynamicObject> = ours
            .iter()
            .filter(|w| w.labels().get(REPLICASET_LABEL) == Some(&key))
            .collect();
        if let Err(error) = sync_one(ctx, mwrs, &mine).await {
            warn!(%error, %namespace, %name, "ManifestWorkReplicaSet not synced");
        }
    }
    // ManifestWorks whose ManifestWorkReplicaSet is gone without its
    // finalizer (never seen, or the finalizer removed by hand).
    for w in &ours {
        let Some(key) = w.labels().get(REPLICASET_LABEL) else {
            continue;
        };
        let live = sets
            .iter()
            .any(|s| owner_key(&s.namespace().unwrap_or_default(), &s.name_any()) == *key);
        if !live {
            delete_work(ctx, w).await;
        }
    }
    Ok(())
}

async fn delete_work(ctx: &Ctx, w: &DynamicObject) {
    if w.metadata.deletion_timestamp.is_some() {
        return;
    }
    let ns = w.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), &ns, &manifest_work_resource());
    match api.delete(&w.name_any(), &DeleteParams::default()).await {
        Ok(_) => {
            info!(cluster = %ns, work = %w.name_any(), "ManifestWork of a ManifestWorkReplicaSet removed")
        }
        Err(e) if crate::error::is_not_found(&e) => {}
        Err(error) => warn!(%error, cluster = %ns, "ManifestWork not removed"),
    }
}

async fn sync_one(ctx: &Ctx, mwrs: &DynamicObject, mine: &[&DynamicObject]) -> kube::Result<()> {
    let namespace = mwrs.namespace().unwrap_or_default();
    let name = mwrs.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), &namespace, &replicaset_resource());
    if mwrs.metadata.deletion_timestamp.is_some() {
        // Its ManifestWorks go first; the finalizer stays until they have.
        for w in mine {
            delete_work(ctx, w).await;
        }
        if mine.is_empty() {
            return crate::finalizer::remove(&api, mwrs, CLEANUP_FINALIZER).await;
        }
        return Ok(());
    }
    if crate::finalizer::add(&api, mwrs, CLEANUP_FINALIZER).await? {
        return Ok(());
    }
    let value = serde_json::to_value(mwrs).map_err(kube::Error::SerdeError)?;
    let placements: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), &namespace, &placement_resource());
    let decisions: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), &namespace, &decision_resource());
    let mut found = Vec::new();
    for r in value
        .pointer("/spec/placementRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(pname) = r.get("name").and_then(Value::as_str) else {
            continue;
        };
        if rollout_type(r) != "All" {
            debug!(%namespace, %name, placement = %pname, rollout = rollout_type(r), "rolled out as All");
        }
        let exists = placements.get_opt(pname).await?.is_some();
        let mut clusters = Vec::new();
        if exists {
            let selector = format!("{PLACEMENT_LABEL}={pname}");
            for d in decisions
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
            {
                clusters.extend(
                    d.data
                        .pointer("/status/decisions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.get("clusterName").and_then(Value::as_str))
                        .filter(|c| !c.is_empty())
                        .map(String::from),
                );
            }
            clusters.sort();
            clusters.dedup();
        }
        found.push(Found {
            name: pname.to_string(),
            exists,
            clusters,
        });
    }
    let wanted: BTreeSet<String> = found.iter().flat_map(|f| f.clusters.clone()).collect();
    let template = value
        .pointer("/spec/manifestWorkTemplate")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let key = owner_key(&namespace, &name);
    let mut by_cluster: BTreeMap<String, Value> = BTreeMap::new();
    for w in mine {
        let cluster = w.namespace().unwrap_or_default();
        if !wanted.contains(&cluster) {
            delete_work(ctx, w).await;
            continue;
        }
        by_cluster.insert(
            cluster,
            serde_json::to_value(w).map_err(kube::Error::SerdeError)?,
        );
    }
    for cluster in &wanted {
        let current = by_cluster.get(cluster);
        let same = current.is_some_and(|w| w.get("spec") == Some(&template));
        if same {
            continue;
        }
        let doc = json!({
            "apiVersion": format!("{WORK_GROUP}/v1"),
            "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": cluster, "labels": {REPLICASET_LABEL: key}},
            "spec": template,
        });
        let works: Api<DynamicObject> =
            Api::namespaced_with(ctx.hub.clone(), cluster, &manifest_work_resource());
        match works
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await
        {
            Ok(_) => {
                if current.is_none() {
                    info!(%namespace, %name, %cluster, "ManifestWork created for ManifestWorkReplicaSet");
                }
            }
            // The cluster namespace is not there (yet): next sweep.
            Err(error) => warn!(%error, %namespace, %name, %cluster, "ManifestWork not written"),
        }
    }
    let status = replicaset_status(&value, &found, &by_cluster);
    if value.get("status") == Some(&status) {
        return Ok(());
    }
    match crate::writes::merge_patch_status(&api, &name, &json!({"status": status})).await {
        Err(e) if crate::error::is_not_found(&e) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(applied: bool, available: bool) -> Value {
        let c = |t: &str, ok: bool| json!({"type": t, "status": if ok {"True"} else {"False"}});
        json!({"status": {"conditions": [c("Applied", applied), c("Available", available), c("Degraded", false), c("Progressing", !available)]}})
    }

    fn cond(status: &Value, t: &str) -> (String, String) {
        let c = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap();
        (
            c["status"].as_str().unwrap().into(),
            c["reason"].as_str().unwrap().into(),
        )
    }

    #[test]
    fn status_summarizes_the_manifest_works() {
        let found = [Found {
            name: "p".into(),
            exists: true,
            clusters: vec!["m1".into(), "m2".into()],
        }];
        let works: BTreeMap<String, Value> = [
            ("m1".to_string(), work(true, true)),
            ("m2".to_string(), work(true, false)),
        ]
        .into();
        let s = replicaset_status(&json!({}), &found, &works);
        assert_eq!(
            s["summary"],
            json!({"total": 2, "applied": 2, "available": 1, "degraded": 0, "progressing": 1})
        );
        assert_eq!(
            cond(&s, "PlacementVerified"),
            ("True".into(), "AsExpected".into())
        );
        assert_eq!(
            cond(&s, "ManifestworkApplied"),
            ("True".into(), "AsExpected".into())
        );
        assert_eq!(
            cond(&s, "PlacementRolledOut"),
            ("False".into(), "Progressing".into())
        );
        // A second look changes nothing.
        let again = replicaset_status(&json!({"status": s.clone()}), &found, &works);
        assert_eq!(again, s);
        // One not yet written: processing.
        let one: BTreeMap<String, Value> = [("m1".to_string(), work(true, true))].into();
        let s = replicaset_status(&json!({}), &found, &one);
        assert_eq!(
            cond(&s, "ManifestworkApplied"),
            ("False".into(), "Processing".into())
        );
    }

    #[test]
    fn a_missing_placement_is_reported() {
        let found = [Found {
            name: "nowhere".into(),
            exists: false,
            clusters: vec![],
        }];
        let s = replicaset_status(&json!({}), &found, &BTreeMap::new());
        assert_eq!(
            cond(&s, "PlacementVerified"),
            ("False".into(), "PlacementDecisionNotFound".into())
        );
        assert_eq!(s["summary"]["total"], 0);
        assert_eq!(
            rollout_type(&json!({"rolloutStrategy": {"type": "Progressive"}})),
            "Progressive"
        );
        assert_eq!(rollout_type(&json!({"name": "p"})), "All");
        assert_eq!(
            placement_refs(&json!({"spec": {"placementRefs": [{"name": "a"}, {"name": "b"}]}})),
            ["a", "b"]
        );
    }
}
