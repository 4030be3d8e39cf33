//! NamespaceOffloading, under `offloading.liqo.io` and `sharing.liqo.io`:
//! which providers a namespace extends to (the cluster selector over the
//! virtual nodes), its twin namespace's name there, and whether the twins
//! exist. The twins are asked for through a NamespaceMap in each
//! provider (this cluster's tenant namespace there); the provider makes
//! them and says how it went. A namespace labelled
//! `liqo.io/scheduling-enabled=true` without one gets the default one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{Instrument, debug, info, info_span, warn};

use super::{Peers, Provider, stranded};
use crate::api::{
    DEFAULT_OFFLOADING_NAME, LiqoCondition, NamespaceMap, NamespaceOffloading,
    NamespaceOffloadingStatus, OFFLOADING_GROUP, Offloading, PodOffloading, REMOTE_CLUSTER_ID,
    SCHEDULING_ENABLED, VERSION, remote_namespace, set_condition, virtual_node_name,
};

const MANAGER: &str = "liqo-namespace-offloading";
/// On a namespace this controller labelled for its NamespaceOffloading
/// (not the user): the label goes when the NamespaceOffloading does.
const LABELLED_BY_US: &str = "offloading.liqo.io/labelled-by-controller";
const PERIOD: Duration = Duration::from_millis(500);

pub fn resource(group: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, VERSION, "NamespaceOffloading"),
        "namespaceoffloadings",
    )
}

/// One NamespaceOffloading, from either group.
pub struct Entry {
    pub group: &'static str,
    pub object: NamespaceOffloading,
}

/// Every namespace's NamespaceOffloading that counts, of the objects of
/// both groups: `offloading` first, then the oldest (one per namespace,
/// as Liqo reconciles one).
pub fn entries(
    objects: impl IntoIterator<Item = (&'static str, Arc<DynamicObject>)>,
) -> Vec<Entry> {
    let mut all: Vec<Entry> = objects
        .into_iter()
        .filter_map(|(group, o)| {
            let object = serde_json::from_value::<NamespaceOffloading>(
                serde_json::to_value(o.as_ref()).ok()?,
            )
            .ok()?;
            Some(Entry { group, object })
        })
        .collect();
    all.sort_by_key(|e| {
        (
            e.object.namespace(),
            e.object.name_any() != DEFAULT_OFFLOADING_NAME,
            e.object.metadata.creation_timestamp.clone().map(|t| t.0),
        )
    });
    all.dedup_by(|b, a| a.object.namespace() == b.object.namespace());
    all
}

pub async fn run(peers: Arc<Peers>) {
    // A new or changed NamespaceOffloading (or a namespace labelled for
    // one) is acted on at once; the period catches the providers' maps.
    let wake = Arc::new(Notify::new());
    peers.wake_on_changes(&wake);
    crate::wake::on_changes(Api::<Namespace>::all(peers.local.clone()), wake.clone());
    loop {
        if let Err(error) = pass(&peers)
            .instrument(info_span!("reconcile", controller = MANAGER))
            .await
        {
            debug!(%error, "namespace offloading not synced");
        }
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

async fn pass(peers: &Peers) -> Result<(), kube::Error> {
    default_offloadings(peers).await?;
    let entries = peers.offloadings().await;
    let providers = peers.providers().await;
    let nodes: Api<Node> = Api::all(peers.local.clone());
    // What each provider should hold: namespace here → there.
    let mut wanted: BTreeMap<String, BTreeMap<String, String>> = providers
        .iter()
        .map(|p| (p.id.clone(), BTreeMap::new()))
        .collect();
    let mut plans = Vec::new();
    for entry in &entries {
        let ns = entry.object.namespace().unwrap_or_default();
        let plan = entry.object.spec.interpret();
        if let Ok(o) = &plan {
            let remote = remote_namespace(&o.mapping, &ns, &peers.cluster_id);
            for p in &providers {
                if selected(&nodes, o, &p.id).await
                    && let Some(m) = wanted.get_mut(&p.id)
                {
                    m.insert(ns.clone(), remote.clone());
                }
            }
        }
        plans.push((entry, ns, plan));
    }
    let mut current: BTreeMap<String, NamespaceMap> = BTreeMap::new();
    for p in &providers {
        match sync_map(peers, p, wanted.get(&p.id).cloned().unwrap_or_default()).await {
            Ok(map) => {
                current.insert(p.id.clone(), map);
            }
            Err(error) => debug!(%error, provider = %p.id, "namespace map not synced"),
        }
    }
    for (entry, ns, plan) in plans {
        let status = status_of(peers, &providers, &wanted, &current, &ns, &plan, entry);
        write_status(peers, entry, &ns, status).await;
        if let Ok(o) = &plan {
            label_namespace(peers, &ns, o.pods != PodOffloading::Local).await;
            if o.pods != PodOffloading::Local {
                stranded::warn(peers, &ns, &entry.object.name_any()).await;
            }
        }
    }
    Ok(())
}

/// Whether `o` selects provider `id` (by its virtual node's labels).
async fn selected(nodes: &Api<Node>, o: &Offloading, id: &str) -> bool {
    let Some(selector) = &o.selector else {
        return true;
    };
    match nodes.get_opt(&virtual_node_name(id)).await {
        Ok(Some(node)) => selector.selects(&node),
        _ => false,
    }
}

/// The default NamespaceOffloading of each labelled namespace that has
/// none (the label's meaning, as in Liqo's docs).
async fn default_offloadings(peers: &Peers) -> Result<(), kube::Error> {
    let namespaces: Api<Namespace> = Api::all(peers.local.clone());
    let labelled = namespaces
        .list(&ListParams::default().labels(&format!("{SCHEDULING_ENABLED}=true")))
        .await?;
    if labelled.items.is_empty() {
        return Ok(());
    }
    let have: Vec<String> = peers
        .offloadings()
        .await
        .iter()
        .filter_map(|e| e.object.namespace())
        .collect();
    for ns in labelled.items {
        let name = ns.name_any();
        if have.contains(&name) || ns.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // The label this controller set for a NamespaceOffloading that is
        // now gone goes with it.
        if ns.annotations().contains_key(LABELLED_BY_US) {
            let _ = namespaces
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {
                        "labels": {SCHEDULING_ENABLED: null},
                        "annotations": {LABELLED_BY_US: null}}})),
                )
                .await;
            continue;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(peers.local.clone(), &name, &resource(OFFLOADING_GROUP));
        let body = json!({"apiVersion": "offloading.liqo.io/v1beta1", "kind": "NamespaceOffloading",
            "metadata": {"name": DEFAULT_OFFLOADING_NAME, "namespace": name},
            "spec": {"namespaceMappingStrategy": "DefaultName",
                     "podOffloadingStrategy": "LocalAndRemote",
                     "clusterSelector": {"nodeSelectorTerms": []}}});
        match api
            .patch(
                DEFAULT_OFFLOADING_NAME,
                &PatchParams::apply(MANAGER),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => {
                info!(namespace = %name, "namespace offloaded with the defaults (labelled {SCHEDULING_ENABLED}=true)")
            }
            Err(error) => warn!(%error, namespace = %name, "cannot offload the labelled namespace"),
        }
    }
    Ok(())
}

/// Writes this cluster's NamespaceMap in the provider; returns it as the
/// provider last reported it.
async fn sync_map(
    peers: &Peers,
    provider: &Provider,
    desired: BTreeMap<String, String>,
) -> Result<NamespaceMap, kube::Error> {
    let api: Api<NamespaceMap> = Api::namespaced(provider.client.clone(), &provider.remote_tenant);
    let name = &peers.cluster_id;
    let existing = api.get_opt(name).await?;
    if let Some(e) = existing
        && e.spec.desired_mapping == desired
    {
        return Ok(e);
    }
    let body = json!({"apiVersion": "offloading.liqo.io/v1beta1", "kind": "NamespaceMap",
        "metadata": {"name": name, "labels": {REMOTE_CLUSTER_ID: peers.cluster_id}},
        "spec": {"desiredMapping": desired}});
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
}

#[allow(clippy::too_many_arguments)]
fn status_of(
    peers: &Peers,
    providers: &[Provider],
    wanted: &BTreeMap<String, BTreeMap<String, String>>,
    current: &BTreeMap<String, NamespaceMap>,
    ns: &str,
    plan: &Result<Offloading, String>,
    entry: &Entry,
) -> NamespaceOffloadingStatus {
    let old = entry.object.status.clone().unwrap_or_default();
    let mut status = NamespaceOffloadingStatus {
        observed_generation: entry.object.metadata.generation,
        ..Default::default()
    };
    let prior = |id: &str| {
        old.remote_namespaces_conditions
            .get(id)
            .cloned()
            .unwrap_or_default()
    };
    let o = match plan {
        Ok(o) => o,
        Err(message) => {
            status.offloading_phase = "AllFailed".into();
            for p in providers {
                let mut cs = prior(&p.id);
                set_condition(
                    &mut cs,
                    LiqoCondition::new("Ready", "False", "InvalidSpec", message),
                );
                status.remote_namespaces_conditions.insert(p.id.clone(), cs);
            }
            return status;
        }
    };
    status.remote_namespace_name = remote_namespace(&o.mapping, ns, &peers.cluster_id);
    let (mut required, mut ready, mut failed) = (0, 0, 0);
    for p in providers {
        let mut cs = prior(&p.id);
        let is_selected = wanted.get(&p.id).is_some_and(|m| m.contains_key(ns));
        if !is_selected {
            set_condition(
                &mut cs,
                LiqoCondition::new(
                    "OffloadingRequired",
                    "False",
                    "ClusterNotSelected",
                    "The remote cluster has not been selected through the ClusterSelector field",
                ),
            );
            cs.retain(|c| c.type_ != "Ready");
            status.remote_namespaces_conditions.insert(p.id.clone(), cs);
            continue;
        }
        required += 1;
        set_condition(
            &mut cs,
            LiqoCondition::new(
                "OffloadingRequired",
                "True",
                "ClusterSelected",
                "You have selected this remote cluster for namespace offloading",
            ),
        );
        // A provider that did not answer this pass keeps what it last
        // said: its twin namespace is still there.
        let Some(map) = current.get(&p.id) else {
            if cs.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
                ready += 1;
            }
            status.remote_namespaces_conditions.insert(p.id.clone(), cs);
            continue;
        };
        let there = Some(map)
            .and_then(|m| m.status.as_ref())
            .and_then(|s| s.current_mapping.get(ns))
            .filter(|r| r.remote_namespace == status.remote_namespace_name);
        let condition = match there.map(|r| r.phase.as_str()) {
            Some("Accepted") => {
                ready += 1;
                LiqoCondition::new(
                    "Ready",
                    "True",
                    "NamespaceCreated",
                    &format!(
                        "Namespace {} correctly created in cluster {}",
                        status.remote_namespace_name, p.id
                    ),
                )
            }
            Some("CreationLoopBackOff") => {
                failed += 1;
                LiqoCondition::new(
                    "Ready",
                    "False",
                    "CreationLoopBackOff",
                    &there.map(|r| r.message.clone()).unwrap_or_default(),
                )
            }
            // An earlier twin of the same name still going there.
            Some("Terminating") => LiqoCondition::new(
                "Ready",
                "False",
                "Creating",
                &there.map(|r| r.message.clone()).unwrap_or_default(),
            ),
            _ => LiqoCondition::new(
                "Ready",
                "False",
                "Creating",
                &format!(
                    "Namespace {} is being created in cluster {}",
                    status.remote_namespace_name, p.id
                ),
            ),
        };
        set_condition(&mut cs, condition);
        status.remote_namespaces_conditions.insert(p.id.clone(), cs);
    }
    status.offloading_phase = if required == 0 {
        "NoClusterSelected"
    } else if ready == required {
        "Ready"
    } else if failed == required {
        "AllFailed"
    } else if failed > 0 {
        "SomeFailed"
    } else {
        "InProgress"
    }
    .into();
    status
}

async fn write_status(peers: &Peers, entry: &Entry, ns: &str, status: NamespaceOffloadingStatus) {
    if entry.object.status.as_ref() == Some(&status) {
        return;
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(peers.local.clone(), ns, &resource(entry.group));
    let name = entry.object.name_any();
    if let Err(error) = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
    {
        debug!(%error, namespace = %ns, "namespace offloading status not written");
    } else if entry.object.status.as_ref().map(|s| &s.offloading_phase)
        != Some(&status.offloading_phase)
    {
        info!(namespace = %ns, phase = %status.offloading_phase, "namespace offloading");
    }
}

/// Liqo's label on offloaded namespaces, which the pod admission reads.
async fn label_namespace(peers: &Peers, ns: &str, enabled: bool) {
    let api: Api<Namespace> = Api::all(peers.local.clone());
    let Ok(Some(n)) = api.get_opt(ns).await else {
        return;
    };
    let has = n
        .labels()
        .get(SCHEDULING_ENABLED)
        .is_some_and(|v| v == "true");
    if has == enabled {
        return;
    }
    let (label, mark) = if enabled {
        (json!("true"), json!("true"))
    } else {
        (json!(null), json!(null))
    };
    let _ = api
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": {SCHEDULING_ENABLED: label},
                "annotations": {LABELLED_BY_US: mark}}})),
        )
        .await;
}

/// Where namespace `ns`'s pods go in provider `provider`: the twin's
/// name, once it exists there.
pub fn twin_in(entries: &[Entry], ns: &str, provider: &str) -> Option<String> {
    let entry = entries
        .iter()
        .find(|e| e.object.namespace().as_deref() == Some(ns))?;
    let status = entry.object.status.as_ref()?;
    let ready = status
        .remote_namespaces_conditions
        .get(provider)?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready.then(|| status.remote_namespace_name.clone())
}
