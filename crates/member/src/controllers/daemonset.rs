//! The DaemonSet controller: one pod on every node the template admits
//! (nodeSelector, node affinity, taints against the template's tolerations
//! plus the ones upstream adds to daemon pods), pinned to its node with a
//! `metadata.name` node-affinity term so the scheduler binds it there;
//! rolled `maxUnavailable` nodes at a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    Toleration,
};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, run_controller};
use crate::controllers::pods::PodControl;
use crate::controllers::status;
use crate::informer::owner_ref;
use crate::placement;
use crate::pod::{self, Pod};
use crate::podutil::{self, CONTROLLER_REVISION_HASH};

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> TaskBox {
    let own = inf.daemonsets.own_triggers(|_| true);
    let from_pods = inf.pods.triggers(|c| {
        owner_ref::<Pod, DaemonSet>(c.object())
            .into_iter()
            .collect()
    });
    // A node that comes, goes or changes concerns every DaemonSet.
    let sets = cluster.daemonsets.clone();
    let from_nodes = inf.nodes.triggers(move |_| {
        sets.state()
            .iter()
            .map(|ds| ObjectRef::from_obj(ds.as_ref()))
            .collect()
    });
    let control = Arc::new(PodControl::new(cluster.clone(), "daemonset-controller"));
    run_controller(
        "daemonset",
        cluster.daemonsets.clone(),
        vec![boxed(own), boxed(from_pods), boxed(from_nodes)],
        cluster,
        2,
        move |ds, cluster| reconcile(ds, cluster, control.clone()),
    )
}

/// The tolerations upstream adds to every daemon pod.
fn daemon_tolerations(spec: &mut PodSpec) {
    let list = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        if !list
            .iter()
            .any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect))
        {
            list.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Toleration::default()
            });
        }
    }
}

/// The node a daemon pod is meant for.
fn target_node(p: &Pod) -> Option<String> {
    if let Some(n) = p.spec.as_ref()?.node_name.clone().filter(|n| !n.is_empty()) {
        return Some(n);
    }
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields
            .iter()
            .flatten()
            .find(|f| f.key == "metadata.name" && f.operator == "In")
            .and_then(|f| f.values.as_ref()?.first().cloned())
    })
}

fn pin_to(spec: &mut PodSpec, node: &str) {
    let field = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![node.to_string()]),
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let required = na
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        let fields = term.match_fields.get_or_insert_with(Vec::new);
        fields.retain(|f| f.key != "metadata.name");
        fields.push(field.clone());
    }
}

async fn reconcile(
    ds: Arc<DaemonSet>,
    cluster: Arc<Cluster>,
    control: Arc<PodControl>,
) -> Result<Action> {
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ds.namespace().unwrap_or_default();
    let name = ds.name_any();
    let key = format!("{ns}/{name}");
    let spec = ds.spec.clone().unwrap_or_default();
    let hash = podutil::template_hash(&spec.template, 0);
    let mut template_spec = spec.template.spec.clone().unwrap_or_default();
    daemon_tolerations(&mut template_spec);
    let nodes: Vec<Arc<Node>> = cluster.nodes.state();
    let view = pod::PodSpec::of(&template_spec);
    let eligible: Vec<&Arc<Node>> = nodes
        .iter()
        .filter(|n| placement::admits(n, &view).is_ok())
        .collect();
    let mut by_node: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
    let mut misplaced = Vec::new();
    for p in cluster.owned_pods(&ds.uid().unwrap_or_default()) {
        if !podutil::is_active(&p) {
            misplaced.push(p.name_any());
            continue;
        }
        match target_node(&p) {
            Some(n) if eligible.iter().any(|e| e.name_any() == n) => {
                by_node.entry(n).or_default().push(p)
            }
            _ => misplaced.push(p.name_any()),
        }
    }
    let max_unavailable = podutil::int_or_percent(
        spec.update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref()),
        eligible.len() as i32,
        true,
        1,
    )
    .max(1);
    let on_delete = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete");
    if control.caught_up(&key, &ns) {
        let mut create = Vec::new();
        let mut delete = misplaced.clone();
        let mut unavailable = 0;
        let mut outdated = Vec::new();
        for node in &eligible {
            match by_node.get_mut(&node.name_any()) {
                None => {
                    let mut pod = podutil::pod_from_template(
                        &spec.template,
                        ds.as_ref(),
                        None,
                        &BTreeMap::from([(CONTROLLER_REVISION_HASH.to_string(), hash.clone())]),
                    );
                    if let Some(ps) = pod.spec.as_mut() {
                        daemon_tolerations(ps);
                        pin_to(ps, &node.name_any());
                    }
                    create.push(pod);
                    unavailable += 1;
                }
                Some(pods) => {
                    // One per node: keep the oldest.
                    pods.sort_by_key(|p| p.metadata.creation_timestamp.clone());
                    delete.extend(pods.iter().skip(1).map(|p| p.name_any()));
                    let p = &pods[0];
                    if !podutil::is_ready(p) {
                        unavailable += 1;
                    } else if p.labels().get(CONTROLLER_REVISION_HASH) != Some(&hash) {
                        outdated.push(p.name_any());
                    }
                }
            }
        }
        if !on_delete {
            let room = usize::try_from(max_unavailable - unavailable).unwrap_or(0);
            delete.extend(outdated.into_iter().take(room));
        }
        if !delete.is_empty() {
            control
                .delete(&key, &ds.object_ref(&()), &ns, delete)
                .await?;
        }
        if !create.is_empty() {
            control
                .create(&key, &ds.object_ref(&()), &ns, create)
                .await?;
        }
    }

    let scheduled = by_node.len();
    let pods: Vec<&Arc<Pod>> = by_node.values().filter_map(|v| v.first()).collect();
    let ready = pods.iter().filter(|p| podutil::is_ready(p)).count();
    let updated = pods
        .iter()
        .filter(|p| p.labels().get(CONTROLLER_REVISION_HASH) == Some(&hash))
        .count();
    let mut status = json!({
        "observedGeneration": ds.metadata.generation.unwrap_or(0),
        "desiredNumberScheduled": eligible.len(),
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": misplaced.len(),
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": eligible.len().saturating_sub(ready),
        "updatedNumberScheduled": updated,
    });
    // The first four are required fields upstream: always present.
    status::strip_zeros(
        &mut status,
        &[
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberMisscheduled",
            "numberReady",
        ],
    );
    if let Some(patch) = status::patch(&ds.status, &status) {
        let api: Api<DaemonSet> = Api::namespaced(cluster.clients.controller_manager.clone(), &ns);
        status::write(&api, &name, &patch).await?;
    }
    Ok(Action::await_change())
}
