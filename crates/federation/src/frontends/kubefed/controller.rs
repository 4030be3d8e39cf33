//! Keeps each federated object's generated objects (template,
//! PropagationPolicy, OverridePolicy) as its spec says, and its KubeFed
//! status as the pipeline's ResourceBinding reports. A pass looks at
//! every type config and federated object (there are few) when a watch
//! sees one of them, a KubeFedCluster, a Cluster or a generated binding
//! change, and every few seconds regardless; writes happen only when
//! what was generated changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::api::{
    CORE_GROUP, SCHEDULING_GROUP, SYSTEM_NAMESPACE, TYPES_GROUP, TargetType, VERSION,
    default_types, enabled_target, type_config,
};
use super::apply::apply;
use super::clusters::FedCluster;
use super::rsp;
use super::translate::{self, BadOverride, CHECK_CLUSTERS, Placement};
use crate::api::{
    Binding, Cluster, POLICY_GROUP, Scope, WORK_GROUP, annotations, binding_resource,
};
use crate::metrics::QueueMetrics;
use crate::names::binding_name;
use crate::passes::{self, Watched};

/// How long a failed start waits before the next.
const RETRY: Duration = Duration::from_secs(1);
/// A pass at least this often, even without a change seen.
const RESYNC: Duration = Duration::from_secs(10);

fn type_config_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CORE_GROUP, VERSION, "FederatedTypeConfig"),
        "federatedtypeconfigs",
    )
}

fn rsp_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(SCHEDULING_GROUP, "v1alpha1", "ReplicaSchedulingPreference"),
        "replicaschedulingpreferences",
    )
}

fn policy_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(POLICY_GROUP, "v1alpha1", kind),
        plural,
    )
}

fn target_resource(t: &TargetType) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&t.group, &t.version, &t.kind),
        &t.plural,
    )
}

/// The federated kind a type config names.
fn federated_resource(ftc: &Value) -> Option<ApiResource> {
    let f = ftc.pointer("/spec/federatedType")?;
    let s = |k: &str| f.get(k).and_then(Value::as_str);
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(s("group")?, s("version")?, s("kind")?),
        s("pluralName")?,
    ))
}

/// Creates `kube-federation-system` and KubeFed's default type configs
/// (those missing only: a user's edit, `propagation: Disabled` say,
/// stays), with their status.
pub async fn ensure_type_configs(hub: &Client) -> kube::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))
        .map_err(kube::Error::SerdeError)?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), SYSTEM_NAMESPACE, &type_config_resource());
    for t in default_types() {
        let obj: DynamicObject =
            serde_json::from_value(type_config(&t)).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        let status = json!({"status": {
            "observedGeneration": 1,
            "propagationController": "Running",
            "statusController": "Running",
        }});
        api.patch_status(
            &t.config_name(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    }
    Ok(())
}

pub async fn run(hub: Client, clusters: Store<Cluster>, metrics: QueueMetrics) {
    while let Err(error) = ensure_type_configs(&hub).await {
        warn!(%error, "KubeFed type configs not written; retrying");
        tokio::time::sleep(RETRY).await;
    }
    info!("KubeFed front end running");
    let changes = changes(&hub);
    passes::run(metrics, changes, RESYNC, move || {
        let (hub, clusters) = (hub.clone(), clusters.clone());
        async move { sync_all(&hub, &clusters).await }
    })
    .await;
}

/// The changes the front end reacts to: its own kinds (type configs,
/// federated objects of the default types, preferences, KubeFedClusters),
/// the fleet's Clusters coming, going or changing spec (their readiness
/// is looked at each resync, as KubeFed's health checks), and the
/// ResourceBindings of the templates it generated (their status is its
/// status).
fn changes(hub: &Client) -> impl futures::Stream<Item = ()> + Send + 'static {
    let mut kinds = vec![
        Watched::any(type_config_resource()),
        Watched::any(rsp_resource()),
        Watched::any(super::clusters::resource()),
        Watched::spec(ApiResource::erase::<Cluster>(&())),
    ];
    kinds.extend(default_types().iter().map(|t| {
        Watched::spec(ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(TYPES_GROUP, VERSION, &t.federated_kind()),
            &t.federated_plural(),
        ))
    }));
    let bindings: Api<Binding> = Api::all_with(hub.clone(), &binding_resource(Scope::Namespaced));
    let generated = watcher(bindings, watcher::Config::default())
        .default_backoff()
        .filter_map(|e| async move {
            let generated = |b: &Binding| {
                b.annotations()
                    .get(annotations::PP_NAME)
                    .is_some_and(|p| p.starts_with(translate::POLICY_PREFIX))
            };
            match e.ok()? {
                watcher::Event::Apply(b) | watcher::Event::Delete(b) => generated(&b).then_some(()),
                _ => None,
            }
        });
    futures::stream::select(passes::changes(hub, kinds), generated)
}

/// Every ReplicaSchedulingPreference, by namespace and name.
async fn preferences(hub: &Client) -> BTreeMap<(String, String), Value> {
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), &rsp_resource());
    match api.list(&Default::default()).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|r| {
                let key = (r.namespace()?, r.name_any());
                Some((key, serde_json::to_value(r).ok()?))
            })
            .collect(),
        Err(error) => {
            debug!(%error, "ReplicaSchedulingPreferences not listed");
            BTreeMap::new()
        }
    }
}

async fn sync_all(hub: &Client, clusters: &Store<Cluster>) -> kube::Result<()> {
    let fleet = super::clusters::sync(hub, clusters).await?;
    let preferences = preferences(hub).await;
    let configs: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), SYSTEM_NAMESPACE, &type_config_resource());
    for ftc in configs.list(&Default::default()).await? {
        let ftc = serde_json::to_value(&ftc).map_err(kube::Error::SerdeError)?;
        let (Some(target), Some(fed_ar)) = (enabled_target(&ftc), federated_resource(&ftc)) else {
            continue;
        };
        let feds: Api<DynamicObject> = Api::all_with(hub.clone(), &fed_ar);
        let list = match feds.list(&Default::default()).await {
            Ok(l) => l,
            Err(error) => {
                debug!(%error, kind = %fed_ar.kind, "federated kind not served");
                continue;
            }
        };
        if !target.namespaced {
            if target.kind == "Namespace" && target.group.is_empty() {
                let live: Vec<Value> = list
                    .items
                    .iter()
                    .filter(|f| f.metadata.deletion_timestamp.is_none())
                    .filter_map(|f| serde_json::to_value(f).ok())
                    .collect();
                super::namespace::sync(hub, &fleet, &fed_ar, &live).await?;
            }
            // FederatedClusterRole: stored, not propagated.
            continue;
        }
        for fed in list {
            if fed.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = fed.name_any();
            let key = (fed.namespace().unwrap_or_default(), fed.name_any());
            let fed = serde_json::to_value(&fed).map_err(kube::Error::SerdeError)?;
            let rsp = preferences.get(&key);
            if let Err(error) = reconcile(hub, &fleet, rsp, &fed_ar, &target, &fed).await {
                warn!(%error, federated = %name, kind = %fed_ar.kind, "KubeFed object not reconciled");
            }
        }
    }
    Ok(())
}

/// Makes the template, and the binding made from it once there is one,
/// owners of a generated policy too (besides the federated object), so that the policy outlives both:
/// were the OverridePolicy collected while the binding still rendered
/// Works, the members' copies would be rewritten without their overrides
/// on their way out (or, orphaned, would stay so). The binding goes only
/// once its Works have.
fn also_owned_by(
    mut policy: Value,
    template: &Value,
    uid: Option<String>,
    binding: Option<&Binding>,
) -> Value {
    let Some(owners) = policy["metadata"]["ownerReferences"].as_array_mut() else {
        return policy;
    };
    if let Some(uid) = uid {
        owners.push(json!({
            "apiVersion": template["apiVersion"],
            "kind": template["kind"],
            "name": template["metadata"]["name"],
            "uid": uid,
        }));
    }
    if let Some(b) = binding
        && let Some(uid) = &b.metadata.uid
    {
        owners.push(json!({
            "apiVersion": format!("{WORK_GROUP}/v1alpha2"),
            "kind": "ResourceBinding",
            "name": b.name_any(),
            "uid": uid,
        }));
    }
    policy
}

/// Where the federated object goes: its placement, or the plan of the
/// ReplicaSchedulingPreference of its name (then also the total to
/// write as the template's replicas); and what is wrong with either.
fn resolve(
    fed: &Value,
    fleet: &[FedCluster],
    rsp: Option<&Value>,
    binding: Option<&Binding>,
) -> (Placement, Option<i64>, Vec<String>) {
    let mut notes = Vec::new();
    let placed = translate::placed_clusters(fed, fleet).unwrap_or_else(|e| {
        notes.push(e);
        Vec::new()
    });
    let kind = fed["kind"].as_str().unwrap_or_default();
    let rsp = rsp.map(rsp::parse).and_then(|r| match r {
        Ok(r) if r.target_kind == kind => Some(r),
        Ok(_) => None,
        Err(e) => {
            notes.push(format!("ReplicaSchedulingPreference: {e}"));
            None
        }
    });
    let Some(rsp) = rsp else {
        return (Placement::Clusters(placed), None, notes);
    };
    let ready = fleet.iter().filter(|c| c.ready).map(|c| c.name.clone());
    let candidates: Vec<String> = if rsp.intersect_with_cluster_selector {
        ready.filter(|c| placed.contains(c)).collect()
    } else {
        ready.collect()
    };
    let current: BTreeMap<String, i64> = binding
        .map(|b| {
            b.spec
                .clusters
                .iter()
                .filter_map(|c| Some((c.name.clone(), c.replicas?.into())))
                .collect()
        })
        .unwrap_or_default();
    let key = format!(
        "{}/{}",
        fed["metadata"]["namespace"].as_str().unwrap_or_default(),
        fed["metadata"]["name"].as_str().unwrap_or_default()
    );
    let plan = rsp.plan(&candidates, &current, &key);
    (Placement::Replicas(plan), Some(rsp.total), notes)
}

async fn reconcile(
    hub: &Client,
    fleet: &[FedCluster],
    rsp: Option<&Value>,
    fed_ar: &ApiResource,
    target: &TargetType,
    fed: &Value,
) -> kube::Result<()> {
    let name = fed["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = fed["metadata"]["namespace"].as_str().unwrap_or_default();
    let bindings: Api<Binding> =
        Api::namespaced_with(hub.clone(), namespace, &binding_resource(Scope::Namespaced));
    let binding = bindings.get_opt(&binding_name(&target.kind, name)).await?;
    let (placement, total, mut notes) = resolve(fed, fleet, rsp, binding.as_ref());
    let binding = match binding {
        // Placed nowhere now: Karmada's scheduler keeps the last placement
        // when no cluster fits, so the binding goes (its Works, and the
        // members' copies, with it) and comes back placed nowhere.
        Some(b) if placement.clusters().is_empty() && !b.spec.clusters.is_empty() => {
            info!(federated = %name, "placed nowhere now; its copies go");
            match bindings.delete(&b.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
            None
        }
        b => b,
    };
    let mut template = translate::template(fed, target);
    if let Some(total) = total
        && template["spec"].is_object()
    {
        // The preference's total replaces the template's replicas.
        template["spec"]["replicas"] = json!(total);
    }
    let uid = apply(hub, &target_resource(target), template.clone()).await?;
    let pp = translate::propagation_policy(fed, target, &placement);
    let pp = also_owned_by(pp, &template, uid.clone(), binding.as_ref());
    apply(
        hub,
        &policy_resource("PropagationPolicy", "propagationpolicies"),
        pp,
    )
    .await?;
    let (op, bad) = translate::override_policy(fed, target, &template);
    let op = also_owned_by(op, &template, uid, binding.as_ref());
    apply(
        hub,
        &policy_resource("OverridePolicy", "overridepolicies"),
        op,
    )
    .await?;
    notes.extend(
        bad.iter()
            .map(|b| format!("override for cluster {}: {}", b.cluster, b.reason)),
    );
    let placed = placement.clusters();
    write_status(
        hub,
        fleet,
        fed_ar,
        fed,
        &placed,
        binding.as_ref(),
        &bad,
        notes,
    )
    .await
}

/// Writes KubeFed's status of `fed` (placed on `placed`, as `binding`
/// reports), unless it says the same already.
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_status(
    hub: &Client,
    fleet: &[FedCluster],
    fed_ar: &ApiResource,
    fed: &Value,
    placed: &[String],
    binding: Option<&Binding>,
    bad: &[BadOverride],
    mut notes: Vec<String>,
) -> kube::Result<()> {
    let name = fed["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = fed["metadata"]["namespace"].as_str().unwrap_or_default();
    let known: BTreeSet<String> = fleet.iter().map(|c| c.name.clone()).collect();
    let ready: BTreeSet<String> = fleet
        .iter()
        .filter(|c| c.ready)
        .map(|c| c.name.clone())
        .collect();
    let aggregated = binding
        .and_then(|b| b.status.as_ref())
        .map(|s| s.aggregated_status.clone())
        .unwrap_or_default();
    let (cluster_status, ok) = translate::status(placed, &known, &ready, &aggregated, bad);
    let ok = ok && notes.is_empty();
    let unknown = placed
        .iter()
        .filter(|c| !known.contains(*c))
        .map(|c| format!("cluster {c} is not a member of the fleet"));
    notes.splice(0..0, unknown);
    let (status_str, reason) = if ok {
        ("True", "")
    } else {
        ("False", CHECK_CLUSTERS)
    };
    let message = notes.join("; ");
    let old = fed.pointer("/status/conditions").and_then(Value::as_array);
    let old = old.and_then(|cs| cs.iter().find(|c| c["type"] == "Propagation"));
    let same = old.is_some_and(|c| {
        c["status"] == status_str
            && c["reason"].as_str().unwrap_or_default() == reason
            && c["message"].as_str().unwrap_or_default() == message
    }) && fed.pointer("/status/clusters") == Some(&json!(cluster_status));
    if same {
        return Ok(());
    }
    let now = serde_json::to_value(crate::conditions::now()).map_err(kube::Error::SerdeError)?;
    let transition = match old {
        Some(c) if c["status"] == status_str => c["lastTransitionTime"].clone(),
        _ => now.clone(),
    };
    let mut condition = json!({
        "type": "Propagation",
        "status": status_str,
        "lastUpdateTime": now,
        "lastTransitionTime": transition,
    });
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
    }
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    let status = json!({"status": {
        "observedGeneration": fed["metadata"]["generation"],
        "conditions": [condition],
        "clusters": cluster_status,
    }});
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), namespace, fed_ar);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    info!(federated = %name, kind = %fed_ar.kind, propagation = status_str, "KubeFed status");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_owned_by_its_federated_object_its_template_and_their_binding() {
        let policy = json!({"metadata": {"ownerReferences": [{"uid": "fed"}]}});
        let template =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let owned = also_owned_by(policy.clone(), &template, Some("t-1".into()), None);
        assert_eq!(
            owned["metadata"]["ownerReferences"],
            json!([{"uid": "fed"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "t-1"}])
        );
        assert_eq!(also_owned_by(policy.clone(), &template, None, None), policy);
        let mut binding = Binding::new(
            "web-deployment",
            &binding_resource(Scope::Namespaced),
            Default::default(),
        );
        binding.metadata.uid = Some("b-1".into());
        let owned = also_owned_by(policy, &template, Some("t-1".into()), Some(&binding));
        assert_eq!(
            owned["metadata"]["ownerReferences"][2],
            json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding", "name": "web-deployment", "uid": "b-1"})
        );
    }
}
