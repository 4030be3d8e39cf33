//! OCM's Placement (`cluster.open-cluster-management.io/v1beta1`): picks
//! ManagedClusters from the cluster sets bound to the Placement's
//! namespace and writes the choice as PlacementDecisions, which
//! ManifestWorkReplicaSets (and any OCM add-on) read. Scheduling follows
//! OCM's: set eligibility, predicates (labels and ClusterClaims), taints
//! and tolerations, then prioritizers (`Balance`, `Steady`,
//! `ResourceAllocatableCPU`/`Memory`) and `numberOfClusters`. The
//! controller looks at every Placement each second, as the ManifestWork
//! controller does: there are few, and a sweep notices cluster, set and
//! decision changes alike.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::api::Cluster;
use crate::clustersets as clusterset;
use crate::clustersets::api::{ManagedClusterSet, ManagedClusterSetBinding};
use crate::context::Ctx;
use crate::passes::{self, Watched};
use crate::selector::labels_match;
use flotilla_core::crd::{Kind, age, column};

pub const GROUP: &str = "cluster.open-cluster-management.io";
pub const VERSION: &str = "v1beta1";
/// On a PlacementDecision: the Placement it belongs to.
pub const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";
pub const GROUP_INDEX_LABEL: &str = "cluster.open-cluster-management.io/decision-group-index";
pub const GROUP_NAME_LABEL: &str = "cluster.open-cluster-management.io/decision-group-name";
/// The taints OCM puts on a ManagedCluster that is not available.
pub const TAINT_UNAVAILABLE: &str = "cluster.open-cluster-management.io/unavailable";
pub const TAINT_UNREACHABLE: &str = "cluster.open-cluster-management.io/unreachable";
pub const CONDITION_SATISFIED: &str = "PlacementSatisfied";
pub const CONDITION_MISCONFIGURED: &str = "PlacementMisconfigured";
/// OCM's bound on the decisions one PlacementDecision holds.
const DECISIONS_PER_OBJECT: usize = 100;
const FIELD_MANAGER: &str = "flotilla-ocm-placement";

pub fn placement_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "Placement"),
        "placements",
    )
}

pub fn decision_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, "PlacementDecision"),
        "placementdecisions",
    )
}

fn kinds() -> Vec<Kind> {
    let placement = Kind {
        group: GROUP,
        version: VERSION,
        kind: "Placement".into(),
        plural: "placements".into(),
        short_names: vec![],
        namespaced: true,
        categories: &[],
        columns: vec![
            column(
                "Succeeded",
                "string",
                ".status.conditions[?(@.type==\"PlacementSatisfied\")].status",
            ),
            column(
                "Reason",
                "string",
                ".status.conditions[?(@.type==\"PlacementSatisfied\")].reason",
            ),
            column(
                "SelectedClusters",
                "integer",
                ".status.numberOfSelectedClusters",
            ),
            age(),
        ],
        spec: json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "clusterSets": {"type": "array", "items": {"type": "string"}},
                "numberOfClusters": {"type": "integer", "format": "int32", "minimum": 0},
                "predicates": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "tolerations": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "prioritizerPolicy": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"mode": {"type": "string", "enum": ["Additive", "Exact"]}},
                },
            },
        }),
    };
    let decision = Kind {
        group: GROUP,
        version: VERSION,
        kind: "PlacementDecision".into(),
        plural: "placementdecisions".into(),
        short_names: vec![],
        namespaced: true,
        categories: &[],
        columns: vec![age()],
        spec: flotilla_core::crd::open_schema(),
    };
    vec![placement, decision]
}

/// The Placement and PlacementDecision CRDs. Neither needs a spec (a
/// PlacementDecision has none; an empty Placement selects every cluster
/// of the bound sets).
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

// ---------------------------------------------------------------- the spec

/// The Placement spec, as far as Flotilla reads it.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct PlacementSpec {
    pub cluster_sets: Vec<String>,
    pub number_of_clusters: Option<i64>,
    pub predicates: Vec<Predicate>,
    pub prioritizer_policy: PrioritizerPolicy,
    pub tolerations: Vec<Toleration>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Predicate {
    pub required_cluster_selector: ClusterSelector,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterSelector {
    pub label_selector: Option<LabelSelector>,
    pub claim_selector: Option<ClaimSelector>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimSelector {
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct PrioritizerPolicy {
    /// `Additive` (the default: OCM's defaults plus these) or `Exact`.
    pub mode: Option<String>,
    pub configurations: Vec<PrioritizerConfig>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct PrioritizerConfig {
    pub score_coordinate: Option<ScoreCoordinate>,
    pub weight: Option<i64>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct ScoreCoordinate {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub built_in: Option<String>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Equal` (the default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
    pub toleration_seconds: Option<i64>,
}

/// A ManagedCluster's taint.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Taint {
    pub key: String,
    pub value: String,
    /// `NoSelect`, `PreferNoSelect` or `NoSelectIfNew`.
    pub effect: String,
    pub time_added: Option<String>,
}

/// What scheduling needs of a ManagedCluster.
#[derive(Clone, Debug, Default)]
pub struct Candidate {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub claims: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
}

impl Candidate {
    /// From a ManagedCluster as the hub serves it.
    pub fn from_managed_cluster(mc: &Value) -> Candidate {
        let labels = mc
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let claims = mc
            .pointer("/status/clusterClaims")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    c.get("name")?.as_str()?.to_string(),
                    c.get("value")?.as_str()?.to_string(),
                ))
            })
            .collect();
        let taints = mc
            .pointer("/spec/taints")
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .unwrap_or_default();
        let allocatable = |r: &str| {
            mc.pointer(&format!("/status/allocatable/{r}"))
                .and_then(Value::as_str)
                .and_then(super::work::quantity)
        };
        Candidate {
            name: mc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            labels,
            claims,
            taints,
            cpu: allocatable("cpu"),
            memory: allocatable("memory"),
        }
    }
}

// -------------------------------------------------------------- scheduling

/// What the namespace's cluster sets give a Placement.
#[derive(Clone, Debug, Default)]
pub struct Sets {
    /// Sets validly bound to the namespace that exist.
    pub bound: Vec<String>,
    /// Each existing set's member clusters.
    pub members: BTreeMap<String, BTreeSet<String>>,
}

/// One Placement's scheduling result.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The chosen clusters, sorted by name.
    pub decisions: Vec<String>,
    /// `PlacementSatisfied`: status, reason, message.
    pub satisfied: (bool, String, String),
    /// `PlacementMisconfigured`'s message when it is True.
    pub misconfigured: Option<String>,
}

/// The built-in prioritizers Flotilla knows.
const BUILT_INS: [&str; 4] = [
    "Balance",
    "Steady",
    "ResourceAllocatableCPU",
    "ResourceAllocatableMemory",
];

/// Whether a toleration tolerates `taint` now.
fn tolerates(t: &Toleration, taint: &Taint, now: Timestamp) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let exists = t.operator.as_deref() == Some("Exists");
    let key = t.key.as_deref().unwrap_or_default();
    let matches = if key.is_empty() {
        // An empty key with Exists tolerates every taint.
        exists
    } else {
        key == taint.key && (exists || t.value.as_deref().unwrap_or_default() == taint.value)
    };
    if !matches {
        return false;
    }
    match (t.toleration_seconds, taint.time_added.as_deref()) {
        (Some(secs), Some(added)) => added
            .parse::<Timestamp>()
            .ok()
            .and_then(|a| {
                a.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
                    .ok()
            })
            .is_none_or(|until| until > now),
        _ => true,
    }
}

/// Whether a cluster's taints keep the Placement off it: an untolerated
/// `NoSelect`, or `NoSelectIfNew` on a cluster not already decided.
fn tainted_off(spec: &PlacementSpec, c: &Candidate, decided: bool, now: Timestamp) -> bool {
    c.taints.iter().any(|taint| {
        let blocks = match taint.effect.as_str() {
            "NoSelect" => true,
            "NoSelectIfNew" => !decided,
            _ => false,
        };
        blocks && !spec.tolerations.iter().any(|t| tolerates(t, taint, now))
    })
}

/// Whether a cluster passes the predicates: any one of them (none means
/// all clusters), each needing its label and claim selectors both.
fn predicates_pass(spec: &PlacementSpec, c: &Candidate) -> bool {
    spec.predicates.is_empty()
        || spec.predicates.iter().any(|p| {
            let s = &p.required_cluster_selector;
            s.label_selector
                .as_ref()
                .is_none_or(|l| labels_match(l, &c.labels))
                && s.claim_selector.as_ref().is_none_or(|cs| {
                    labels_match(
                        &LabelSelector {
                            match_expressions: Some(cs.match_expressions.clone()),
                            match_labels: None,
                        },
                        &c.claims,
                    )
                })
        })
}

/// The prioritizers in effect and their weights: OCM's defaults
/// (`Balance` and `Steady`, weight 1) under `Additive`, changed or
/// joined by the configured ones; only the configured under `Exact`.
/// Also the misconfiguration, if a configuration names no known one.
fn prioritizers(policy: &PrioritizerPolicy) -> (Vec<(String, i64)>, Option<String>) {
    let mut chosen: Vec<(String, i64)> = if policy.mode.as_deref() == Some("Exact") {
        Vec::new()
    } else {
        vec![("Balance".into(), 1), ("Steady".into(), 1)]
    };
    let mut misconfigured = None;
    for c in &policy.configurations {
        let coordinate = c.score_coordinate.clone().unwrap_or_default();
        let type_ = coordinate.type_.as_deref().unwrap_or("BuiltIn");
        if type_ != "BuiltIn" {
            misconfigured = Some(format!(
                "scoreCoordinate type {type_:?} is not supported (only BuiltIn)"
            ));
            continue;
        }
        let name = coordinate.built_in.unwrap_or_default();
        if !BUILT_INS.contains(&name.as_str()) {
            misconfigured = Some(format!(
                "prioritizer {name:?} is not a built-in prioritizer"
            ));
            continue;
        }
        let weight = c.weight.unwrap_or(1);
        match chosen.iter_mut().find(|(n, _)| *n == name) {
            Some(p) => p.1 = weight,
            None => chosen.push((name, weight)),
        }
    }
    (chosen, misconfigured)
}

/// A score from -100 to 100 by where `v` lies between `min` and `max`.
fn spread(v: Option<f64>, min: f64, max: f64) -> f64 {
    match v {
        None => -100.0,
        Some(_) if max <= min => 100.0,
        Some(v) => -100.0 + 200.0 * (v - min) / (max - min),
    }
}

/// Schedules one Placement: `sets` is what its namespace is bound to,
/// `clusters` every ManagedCluster, `previous` its current decisions,
/// `elsewhere` how many other Placements' decisions each cluster has.
pub fn schedule(
    spec: &PlacementSpec,
    sets: &Sets,
    clusters: &[Candidate],
    previous: &[String],
    elsewhere: &HashMap<String, usize>,
    now: Timestamp,
) -> Outcome {
    let fail = |reason: &str, message: String| Outcome {
        decisions: Vec::new(),
        satisfied: (false, reason.into(), message),
        misconfigured: None,
    };
    if sets.bound.is_empty() {
        return fail(
            "NoManagedClusterSetBindings",
            "No valid ManagedClusterSetBindings found in placement namespace".into(),
        );
    }
    let eligible: Vec<&String> = if spec.cluster_sets.is_empty() {
        sets.bound.iter().collect()
    } else {
        sets.bound
            .iter()
            .filter(|s| spec.cluster_sets.contains(s))
            .collect()
    };
    if eligible.is_empty() {
        return fail(
            "NoIntersection",
            format!(
                "None of ManagedClusterSets [{}] is bound to placement namespace",
                spec.cluster_sets.join(",")
            ),
        );
    }
    let in_sets: BTreeSet<&String> = eligible
        .iter()
        .filter_map(|s| sets.members.get(*s))
        .flatten()
        .collect();
    let available: Vec<&Candidate> = clusters
        .iter()
        .filter(|c| in_sets.contains(&c.name))
        .collect();
    if available.is_empty() {
        let names: Vec<&str> = eligible.iter().map(|s| s.as_str()).collect();
        return fail(
            "AllManagedClusterSetsEmpty",
            format!(
                "All ManagedClusterSets [{}] have no member ManagedCluster",
                names.join(",")
            ),
        );
    }
    let (prioritizers, misconfigured) = prioritizers(&spec.prioritizer_policy);
    if let Some(why) = misconfigured {
        // As OCM: a misconfigured Placement is not scheduled; what it
        // had stays.
        let kept: Vec<String> = previous.to_vec();
        return Outcome {
            satisfied: (
                false,
                "NotAllDecisionsScheduled".into(),
                format!("the placement is misconfigured: {why}"),
            ),
            decisions: kept,
            misconfigured: Some(why),
        };
    }
    let feasible: Vec<&Candidate> = available
        .into_iter()
        .filter(|c| predicates_pass(spec, c))
        .filter(|c| !tainted_off(spec, c, previous.contains(&c.name), now))
        .collect();
    if feasible.is_empty() {
        return fail(
            "NoManagedClusterMatched",
            "No ManagedCluster matches any of the cluster predicate".into(),
        );
    }
    let max_elsewhere = feasible
        .iter()
        .map(|c| elsewhere.get(&c.name).copied().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let bounds = |f: fn(&Candidate) -> Option<f64>| {
        let values: Vec<f64> = feasible.iter().filter_map(|c| f(c)).collect();
        (
            values.iter().copied().fold(f64::INFINITY, f64::min),
            values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    };
    let (cpu_min, cpu_max) = bounds(|c| c.cpu);
    let (mem_min, mem_max) = bounds(|c| c.memory);
    let mut scored: Vec<(f64, &String)> = feasible
        .iter()
        .map(|c| {
            let score: f64 = prioritizers
                .iter()
                .map(|(name, weight)| {
                    let s = match name.as_str() {
                        "Balance" => {
                            let n = elsewhere.get(&c.name).copied().unwrap_or(0) as f64;
                            if max_elsewhere == 0 {
                                100.0
                            } else {
                                100.0 - 200.0 * n / max_elsewhere as f64
                            }
                        }
                        // Steady: what is decided stays decided.
                        "Steady" => f64::from(u8::from(previous.contains(&c.name))) * 100.0,
                        "ResourceAllocatableCPU" => spread(c.cpu, cpu_min, cpu_max),
                        "ResourceAllocatableMemory" => spread(c.memory, mem_min, mem_max),
                        _ => 0.0,
                    };
                    s * *weight as f64
                })
                .sum();
            (score, &c.name)
        })
        .collect();
    // Highest score first; ties by name, as OCM breaks them.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let wanted = spec
        .number_of_clusters
        .map(|n| n.max(0) as usize)
        .unwrap_or(scored.len());
    let mut decisions: Vec<String> = scored
        .into_iter()
        .take(wanted)
        .map(|(_, n)| n.clone())
        .collect();
    decisions.sort();
    let unscheduled = wanted.saturating_sub(decisions.len());
    let satisfied = if unscheduled == 0 {
        (
            true,
            "AllDecisionsScheduled".into(),
            "All cluster decisions scheduled".into(),
        )
    } else {
        (
            false,
            "NotAllDecisionsScheduled".into(),
            format!("{unscheduled} cluster decisions unscheduled"),
        )
    };
    Outcome {
        decisions,
        satisfied,
        misconfigured: None,
    }
}

/// What the namespace's bindings and the sets give its Placements.
pub fn sets_for(
    namespace: &str,
    bindings: &[Arc<ManagedClusterSetBinding>],
    sets: &[Arc<ManagedClusterSet>],
    clusters: &[Arc<Cluster>],
) -> Sets {
    let live: Vec<&Arc<ManagedClusterSet>> = sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let mut bound: Vec<String> = bindings
        .iter()
        .filter(|b| b.namespace().as_deref() == Some(namespace) && clusterset::is_valid(b))
        .map(|b| b.spec.cluster_set.clone())
        .filter(|s| live.iter().any(|l| l.name_any() == *s))
        .collect();
    bound.sort();
    bound.dedup();
    let members = live
        .iter()
        .map(|s| {
            (
                s.name_any(),
                clusterset::members(s, clusters).into_iter().collect(),
            )
        })
        .collect();
    Sets { bound, members }
}

// -------------------------------------------------------------- controller

/// A pass at least this often, even without a change seen.
const RESYNC: Duration = Duration::from_secs(10);

/// Schedules every Placement whenever something it depends on changes
/// (Placements' specs, decisions coming or going, ManagedClusters, sets
/// and their bindings) and every resync (tolerations expire with time),
/// and keeps their decisions and status.
pub async fn run(
    ctx: Ctx,
    sets: Store<ManagedClusterSet>,
    bindings: Store<ManagedClusterSetBinding>,
) {
    let changes = passes::changes(
        &ctx.hub,
        [
            Watched::spec(placement_resource()),
            Watched::spec(decision_resource()),
            Watched::any(super::work::managed_cluster_resource()),
            Watched::any(ApiResource::erase::<ManagedClusterSet>(&())),
            Watched::any(ApiResource::erase::<ManagedClusterSetBinding>(&())),
        ],
    );
    let metrics = ctx.metrics.queue("ocm-placement");
    passes::run(metrics, changes, RESYNC, move || {
        let (ctx, sets, bindings) = (ctx.clone(), sets.clone(), bindings.clone());
        async move { sync(&ctx, &sets, &bindings).await }
    })
    .await;
}

/// The decided clusters of every Placement (`namespace/name`), from the
/// PlacementDecisions.
fn decided(decisions: &[DynamicObject]) -> BTreeMap<String, Vec<String>> {
    let mut all: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in decisions {
        let Some(placement) = d.labels().get(PLACEMENT_LABEL) else {
            continue;
        };
        let key = format!("{}/{placement}", d.namespace().unwrap_or_default());
        let names = d
            .data
            .pointer("/status/decisions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|x| x.get("clusterName").and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .map(String::from);
        all.entry(key).or_default().extend(names);
    }
    all
}

async fn sync(
    ctx: &Ctx,
    sets: &Store<ManagedClusterSet>,
    bindings: &Store<ManagedClusterSetBinding>,
) -> kube::Result<()> {
    let placements: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &placement_resource());
    let placements = placements.list(&ListParams::default()).await?.items;
    let decisions_api: Api<DynamicObject> = Api::all_with(ctx.hub.clone(), &decision_resource());
    let decisions = decisions_api.list(&ListParams::default()).await?.items;
    let mcs: Api<DynamicObject> =
        Api::all_with(ctx.hub.clone(), &super::work::managed_cluster_resource());
    // Without a Placement no cluster is a candidate for anything: a fleet
    // of a thousand ManagedClusters is not read every resync for nothing.
    let candidates: Vec<Candidate> = if placements.is_empty() {
        Vec::new()
    } else {
        mcs.list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| Candidate::from_managed_cluster(&serde_json::to_value(m).unwrap_or_default()))
            .collect()
    };
    let decided = decided(&decisions);
    let (sets, bindings, clusters) = (sets.state(), bindings.state(), ctx.clusters.state());
    let now = Timestamp::now();
    for p in &placements {
        let namespace = p.namespace().unwrap_or_default();
        let name = p.name_any();
        let key = format!("{namespace}/{name}");
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let spec: PlacementSpec = match p.data.get("spec") {
            Some(s) => match serde_json::from_value(s.clone()) {
                Ok(spec) => spec,
                Err(error) => {
                    warn!(%error, %namespace, %name, "Placement spec not understood");
                    PlacementSpec::default()
                }
            },
            None => PlacementSpec::default(),
        };
        let previous = decided.get(&key).cloned().unwrap_or_default();
        let mut elsewhere: HashMap<String, usize> = HashMap::new();
        for (k, names) in &decided {
            if *k != key {
                for n in names {
                    *elsewhere.entry(n.clone()).or_default() += 1;
                }
            }
        }
        let ns_sets = sets_for(&namespace, &bindings, &sets, &clusters);
        let outcome = schedule(&spec, &ns_sets, &candidates, &previous, &elsewhere, now);
        if outcome.decisions != previous {
            info!(%namespace, placement = %name, decisions = ?outcome.decisions, "Placement decisions");
        }
        if let Err(error) = write(ctx, p, &outcome, &decisions).await {
            warn!(%error, %namespace, placement = %name, "Placement not written");
        }
    }
    // Decisions of Placements that are gone (the owner reference does
    // the same; this covers decisions written without one).
    for d in &decisions {
        let Some(placement) = d.labels().get(PLACEMENT_LABEL) else {
            continue;
        };
        let ns = d.namespace().unwrap_or_default();
        let owned = d
            .owner_references()
            .iter()
            .any(|o| o.kind == "Placement" && o.name == *placement);
        let gone = !placements
            .iter()
            .any(|p| p.namespace().as_deref() == Some(&ns) && p.name_any() == *placement);
        if owned && gone {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.hub.clone(), &ns, &decision_resource());
            match api.delete(&d.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    debug!(namespace = %ns, decision = %d.name_any(), "orphan PlacementDecision removed")
                }
                Err(e) if crate::error::is_not_found(&e) => {}
                Err(error) => warn!(%error, "orphan PlacementDecision not removed"),
            }
        }
    }
    Ok(())
}

/// The PlacementDecision `index` (from 0) of a Placement.
pub fn decision_name(placement: &str, index: usize) -> String {
    format!("{placement}-decision-{}", index + 1)
}

/// Writes a Placement's PlacementDecisions (at least one, maybe empty)
/// and its status.
async fn write(
    ctx: &Ctx,
    placement: &DynamicObject,
    outcome: &Outcome,
    existing: &[DynamicObject],
) -> kube::Result<()> {
    let namespace = placement.namespace().unwrap_or_default();
    let name = placement.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.hub.clone(), &namespace, &decision_resource());
    let chunks: Vec<&[String]> = if outcome.decisions.is_empty() {
        vec![&[]]
    } else {
        outcome.decisions.chunks(DECISIONS_PER_OBJECT).collect()
    };
    let mut names = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let dname = decision_name(&name, i);
        names.push(dname.clone());
        let found = existing
            .iter()
            .find(|d| d.namespace().as_deref() == Some(&namespace) && d.name_any() == dname);
        if found.is_none() {
            let doc = json!({
                "apiVersion": format!("{GROUP}/{VERSION}"),
                "kind": "PlacementDecision",
                "metadata": {
                    "name": dname,
                    "namespace": namespace,
                    "labels": {
                        PLACEMENT_LABEL: name,
                        GROUP_INDEX_LABEL: "0",
                        GROUP_NAME_LABEL: "",
                    },
                    "ownerReferences": [{
                        "apiVersion": format!("{GROUP}/{VERSION}"),
                        "kind": "Placement",
                        "name": name,
                        "uid": placement.uid().unwrap_or_default(),
                        "controller": true,
                        "blockOwnerDeletion": true,
                    }],
                },
            });
            api.patch(
                &dname,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await?;
        }
        let wanted: Vec<Value> = chunk
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        let current = found.and_then(|d| d.data.pointer("/status/decisions").cloned());
        if current.as_ref() != Some(&json!(wanted)) {
            crate::writes::merge_patch_status(
                &api,
                &dname,
                &json!({"status": {"decisions": wanted}}),
            )
            .await?;
        }
    }
    // Fewer decisions than before: the extra objects go.
    for d in existing.iter().filter(|d| {
        d.namespace().as_deref() == Some(&namespace)
            && d.labels().get(PLACEMENT_LABEL) == Some(&name)
            && !names.contains(&d.name_any())
    }) {
        match api.delete(&d.name_any(), &DeleteParams::default()).await {
            Err(e) if !crate::error::is_not_found(&e) => return Err(e),
            _ => {}
        }
    }
    let status = placement_status(placement, outcome, &names);
    if placement.data.get("status") != Some(&status) {
        let papi: Api<DynamicObject> =
            Api::namespaced_with(ctx.hub.clone(), &namespace, &placement_resource());
        match crate::writes::merge_patch_status(&papi, &name, &json!({"status": status})).await {
            Err(e) if !crate::error::is_not_found(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// A Placement's status: the number selected, its decision group and the
/// two conditions, transition times kept while statuses hold.
pub fn placement_status(placement: &DynamicObject, outcome: &Outcome, names: &[String]) -> Value {
    let mut conds: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> = placement
        .data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let (ok, reason, message) = &outcome.satisfied;
    crate::conditions::set(&mut conds, CONDITION_SATISFIED, *ok, reason, message);
    match &outcome.misconfigured {
        Some(why) => crate::conditions::set(
            &mut conds,
            CONDITION_MISCONFIGURED,
            true,
            "Misconfigured",
            why,
        ),
        None => crate::conditions::set(
            &mut conds,
            CONDITION_MISCONFIGURED,
            false,
            "Succeedconfigured",
            "Placement configurations check pass",
        ),
    };
    let generation = placement.metadata.generation;
    let mut conds = serde_json::to_value(&conds).unwrap_or_default();
    if let (Some(list), Some(g)) = (conds.as_array_mut(), generation) {
        for c in list {
            c["observedGeneration"] = json!(g);
        }
    }
    json!({
        "numberOfSelectedClusters": outcome.decisions.len(),
        "decisionGroups": [{
            "decisionGroupIndex": 0,
            "decisionGroupName": "",
            "decisions": names,
            "clusterCount": outcome.decisions.len(),
        }],
        "conditions": conds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str, labels: &[(&str, &str)]) -> Candidate {
        Candidate {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn all_in(set: &str, clusters: &[Candidate]) -> Sets {
        Sets {
            bound: vec![set.into()],
            members: [(
                set.to_string(),
                clusters.iter().map(|c| c.name.clone()).collect(),
            )]
            .into(),
        }
    }

    fn spec(v: Value) -> PlacementSpec {
        serde_json::from_value(v).unwrap()
    }

    fn three() -> Vec<Candidate> {
        vec![
            candidate("m1", &[("region", "eu")]),
            candidate("m2", &[("region", "us")]),
            candidate("m3", &[("region", "eu")]),
        ]
    }

    #[test]
    fn picks_by_name_then_keeps_its_decisions_steady() {
        let clusters = three();
        let sets = all_in("global", &clusters);
        let s = spec(json!({"numberOfClusters": 2}));
        let none = HashMap::new();
        let now = Timestamp::now();
        let o = schedule(&s, &sets, &clusters, &[], &none, now);
        assert_eq!(o.decisions, ["m1", "m2"]);
        assert_eq!(o.satisfied.1, "AllDecisionsScheduled");
        // Steady: m3 kept over m1 once decided.
        let o = schedule(
            &s,
            &sets,
            &clusters,
            &["m2".into(), "m3".into()],
            &none,
            now,
        );
        assert_eq!(o.decisions, ["m2", "m3"]);
    }

    #[test]
    fn an_unreachable_cluster_is_replaced_unless_tolerated() {
        let mut clusters = three();
        clusters[0].taints.push(Taint {
            key: TAINT_UNREACHABLE.into(),
            effect: "NoSelect".into(),
            time_added: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        });
        let sets = all_in("global", &clusters);
        let now = Timestamp::now();
        let previous = ["m1".to_string(), "m2".to_string()];
        let s = spec(json!({"numberOfClusters": 2}));
        let o = schedule(&s, &sets, &clusters, &previous, &HashMap::new(), now);
        assert_eq!(o.decisions, ["m2", "m3"]);
        let tolerant = spec(json!({"numberOfClusters": 2, "tolerations": [
            {"key": TAINT_UNREACHABLE, "operator": "Exists"}]}));
        let o = schedule(&tolerant, &sets, &clusters, &previous, &HashMap::new(), now);
        assert_eq!(o.decisions, ["m1", "m2"]);
        // Tolerated for a while only: long past.
        let brief = spec(json!({"numberOfClusters": 2, "tolerations": [
            {"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": 10}]}));
        let o = schedule(&brief, &sets, &clusters, &previous, &HashMap::new(), now);
        assert_eq!(o.decisions, ["m2", "m3"]);
    }

    #[test]
    fn predicates_claims_and_unsatisfiable_placements() {
        let mut clusters = three();
        clusters[2]
            .claims
            .insert("region.open-cluster-management.io".into(), "eu".into());
        let sets = all_in("global", &clusters);
        let now = Timestamp::now();
        let none = HashMap::new();
        let s = spec(json!({"predicates": [{"requiredClusterSelector": {
            "labelSelector": {"matchLabels": {"region": "eu"}}}}]}));
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &none, now).decisions,
            ["m1", "m3"]
        );
        let s = spec(json!({"predicates": [{"requiredClusterSelector": {
            "claimSelector": {"matchExpressions": [{"key": "region.open-cluster-management.io", "operator": "In", "values": ["eu"]}]}}}]}));
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &none, now).decisions,
            ["m3"]
        );
        // More than there are: what there is, not satisfied.
        let s = spec(json!({"numberOfClusters": 5}));
        let o = schedule(&s, &sets, &clusters, &[], &none, now);
        assert_eq!(o.decisions.len(), 3);
        assert_eq!(
            o.satisfied,
            (
                false,
                "NotAllDecisionsScheduled".into(),
                "2 cluster decisions unscheduled".into()
            )
        );
        let s = spec(json!({"predicates": [{"requiredClusterSelector": {
            "labelSelector": {"matchLabels": {"region": "mars"}}}}]}));
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &none, now).satisfied.1,
            "NoManagedClusterMatched"
        );
        let s = spec(json!({"clusterSets": ["other"]}));
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &none, now).satisfied.1,
            "NoIntersection"
        );
        assert_eq!(
            schedule(&s, &Sets::default(), &clusters, &[], &none, now)
                .satisfied
                .1,
            "NoManagedClusterSetBindings"
        );
    }

    #[test]
    fn status_is_stable_and_names_the_decisions() {
        let outcome = Outcome {
            decisions: vec!["m1".into(), "m2".into()],
            satisfied: (
                true,
                "AllDecisionsScheduled".into(),
                "All cluster decisions scheduled".into(),
            ),
            misconfigured: None,
        };
        let mut p = DynamicObject::new("two", &placement_resource()).within("apps");
        p.metadata.generation = Some(3);
        let names = [decision_name("two", 0)];
        let status = placement_status(&p, &outcome, &names);
        assert_eq!(status["numberOfSelectedClusters"], 2);
        assert_eq!(
            status["decisionGroups"][0]["decisions"],
            json!(["two-decision-1"])
        );
        assert_eq!(status["conditions"][0]["observedGeneration"], 3);
        assert_eq!(status["conditions"][1]["reason"], "Succeedconfigured");
        // Written back and read again: the same, so nothing is rewritten.
        p.data = json!({"status": status.clone()});
        assert_eq!(placement_status(&p, &outcome, &names), status);
    }

    #[test]
    fn prioritizers_balance_and_resources() {
        let mut clusters = three();
        clusters[0].cpu = Some(1.0);
        clusters[1].cpu = Some(8.0);
        clusters[2].cpu = Some(4.0);
        let sets = all_in("global", &clusters);
        let now = Timestamp::now();
        let s = spec(
            json!({"numberOfClusters": 1, "prioritizerPolicy": {"mode": "Exact",
            "configurations": [{"scoreCoordinate": {"type": "BuiltIn", "builtIn": "ResourceAllocatableCPU"}}]}}),
        );
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &HashMap::new(), now).decisions,
            ["m2"]
        );
        // Balance (default): the cluster with the fewest other decisions.
        let busy: HashMap<String, usize> = [("m1".to_string(), 2), ("m2".to_string(), 1)].into();
        let s = spec(json!({"numberOfClusters": 1}));
        assert_eq!(
            schedule(&s, &sets, &clusters, &[], &busy, now).decisions,
            ["m3"]
        );
        let bad = spec(json!({"prioritizerPolicy": {"configurations": [
            {"scoreCoordinate": {"type": "BuiltIn", "builtIn": "Nope"}}]}}));
        let o = schedule(&bad, &sets, &clusters, &["m1".into()], &HashMap::new(), now);
        assert!(o.misconfigured.is_some());
        assert_eq!(o.decisions, ["m1"]);
    }
}
