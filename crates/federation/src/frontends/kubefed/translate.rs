//! KubeFed's objects translated into the pipeline's: a federated object
//! gives a resource template, a PropagationPolicy (its placement) and an
//! OverridePolicy (its overrides); the ResourceBinding the pipeline keeps
//! gives back KubeFed's status. Pure functions, no I/O.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::api::{GENERATED_BY, MANAGED_LABEL, ORPHAN_ANNOTATION, TargetType};
use super::clusters::FedCluster;
use crate::api::{AggregatedStatusItem, POLICY_GROUP};
use crate::selector::labels_match;

/// KubeFed's aggregate reason when a cluster did not get the object.
pub const CHECK_CLUSTERS: &str = "CheckClusters";
/// KubeFed's per-cluster statuses used here.
pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
pub const APPLY_OVERRIDES_FAILED: &str = "ApplyOverridesFailed";
pub const CREATION_FAILED: &str = "CreationFailed";

/// How the generated policies' names begin.
pub const POLICY_PREFIX: &str = "kubefed-";

/// The name of the generated PropagationPolicy and OverridePolicy.
pub fn policy_name(name: &str) -> String {
    format!("{POLICY_PREFIX}{name}")
}

/// The ownerReference that makes the generated objects go with the
/// federated object (the garbage collector deletes them).
pub fn owner_reference(fed: &Value) -> Value {
    json!({
        "apiVersion": fed["apiVersion"],
        "kind": fed["kind"],
        "name": fed["metadata"]["name"],
        "uid": fed["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn name_of(fed: &Value) -> &str {
    fed["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(fed: &Value) -> Option<&str> {
    fed["metadata"]["namespace"].as_str()
}

/// The resource template: `spec.template` as written, of the target
/// kind, with the federated object's name and namespace, KubeFed's
/// managed label, and the federated object as owner.
pub fn template(fed: &Value, target: &TargetType) -> Value {
    let mut t = fed
        .pointer("/spec/template")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    t["apiVersion"] = json!(target.api_version());
    t["kind"] = json!(target.kind);
    if !t["metadata"].is_object() {
        t["metadata"] = json!({});
    }
    let meta = &mut t["metadata"];
    meta["name"] = json!(name_of(fed));
    match namespace_of(fed) {
        Some(ns) if target.namespaced => meta["namespace"] = json!(ns),
        _ => {
            if let Some(m) = meta.as_object_mut() {
                m.remove("namespace");
            }
        }
    }
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][MANAGED_LABEL] = json!("true");
    meta["ownerReferences"] = json!([owner_reference(fed)]);
    t
}

fn generated_meta(fed: &Value) -> Value {
    json!({
        "name": policy_name(name_of(fed)),
        "namespace": namespace_of(fed),
        "labels": {"app.kubernetes.io/managed-by": "flotilla-kubefed"},
        "annotations": {GENERATED_BY: format!("{}/{}", fed["kind"].as_str().unwrap_or_default(), name_of(fed))},
        "ownerReferences": [owner_reference(fed)],
    })
}

fn selector(fed: &Value, target: &TargetType) -> Value {
    json!([{"apiVersion": target.api_version(), "kind": target.kind, "name": name_of(fed)}])
}

/// The clusters named in `spec.placement.clusters`, if that is set.
pub fn named_clusters(fed: &Value) -> Option<Vec<String>> {
    let clusters = fed.pointer("/spec/placement/clusters")?.as_array()?;
    Some(
        clusters
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect(),
    )
}

/// The clusters KubeFed's placement selects: `clusters` when set (it
/// wins over `clusterSelector`), else the KubeFedClusters whose labels
/// match `clusterSelector` (an empty one matches all), else none. A
/// selector that does not parse selects none and says why.
pub fn placed_clusters(fed: &Value, clusters: &[FedCluster]) -> Result<Vec<String>, String> {
    if let Some(names) = named_clusters(fed) {
        return Ok(names);
    }
    let Some(selector) = fed.pointer("/spec/placement/clusterSelector") else {
        return Ok(Vec::new());
    };
    let selector: LabelSelector = serde_json::from_value(selector.clone())
        .map_err(|e| format!("spec.placement.clusterSelector is not a label selector: {e}"))?;
    Ok(clusters
        .iter()
        .filter(|c| labels_match(&selector, &c.labels))
        .map(|c| c.name.clone())
        .collect())
}

/// Where a federated object goes, as the controller resolved it.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// Each cluster gets the whole object.
    Clusters(Vec<String>),
    /// A ReplicaSchedulingPreference's plan: replicas per cluster.
    Replicas(BTreeMap<String, i64>),
}

impl Placement {
    pub fn clusters(&self) -> Vec<String> {
        match self {
            Placement::Clusters(c) => c.clone(),
            Placement::Replicas(plan) => plan.keys().cloned().collect(),
        }
    }
}

/// A label no cluster has: KubeFed places an object with no clusters
/// nowhere, Karmada's empty affinity everywhere.
pub const NO_PLACEMENT_LABEL: &str = "kubefed.flotilla.io/no-placement";

/// The placement as Karmada's: named clusters (or none), each with the
/// whole object, or divided by static weights that are the planned
/// replica counts, which Karmada's division gives back exactly.
fn karmada_placement(placement: &Placement) -> Value {
    let names = placement.clusters();
    let affinity = if names.is_empty() {
        json!({"labelSelector": {"matchLabels": {NO_PLACEMENT_LABEL: "true"}}})
    } else {
        json!({"clusterNames": names})
    };
    let replicas = match placement {
        Placement::Replicas(plan) if !plan.is_empty() => json!({
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
            "weightPreference": {"staticWeightList": plan.iter().map(|(c, n)| json!({
                "targetCluster": {"clusterNames": [c]}, "weight": n,
            })).collect::<Vec<_>>()},
        }),
        _ => json!({"replicaSchedulingType": "Duplicated"}),
    };
    json!({"clusterAffinity": affinity, "replicaScheduling": replicas})
}

/// Whether `kubefed.io/orphan: "true"` keeps the members' copies.
pub fn orphans(fed: &Value) -> bool {
    fed.pointer("/metadata/annotations")
        .and_then(|a| a.get(ORPHAN_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

/// The PropagationPolicy for the template: the resolved placement (each
/// cluster gets the whole object unless a ReplicaSchedulingPreference
/// divides its replicas); the orphan annotation preserves the members'
/// copies on deletion.
pub fn propagation_policy(fed: &Value, target: &TargetType, placement: &Placement) -> Value {
    let mut spec = json!({
        "resourceSelectors": selector(fed, target),
        "placement": karmada_placement(placement),
    });
    if orphans(fed) {
        spec["preserveResourcesOnDeletion"] = json!(true);
    }
    json!({
        "apiVersion": format!("{POLICY_GROUP}/v1alpha1"),
        "kind": "PropagationPolicy",
        "metadata": generated_meta(fed),
        "spec": spec,
    })
}

/// An override that cannot apply to the template, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct BadOverride {
    pub cluster: String,
    pub path: String,
    pub reason: String,
}

/// Whether a JSON-patch operation at `path` can apply to `doc`: the path
/// must exist for replace and remove, its parent for add.
fn check_path(doc: &Value, op: &str, path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("path {path:?} is not a JSON pointer"));
    }
    match op {
        "add" => {
            let parent = &path[..path.rfind('/').unwrap_or(0)];
            match doc.pointer(parent) {
                Some(Value::Object(_) | Value::Array(_)) => Ok(()),
                _ => Err(format!("the parent of path {path} does not exist")),
            }
        }
        "replace" | "remove" => match doc.pointer(path) {
            Some(_) => Ok(()),
            None => Err(format!("path {path} does not exist")),
        },
        other => Err(format!("op {other:?} is not add, replace or remove")),
    }
}

/// The OverridePolicy for the template: one rule per cluster of
/// `spec.overrides`, each `clusterOverrides` entry a plaintext
/// overrider (`op` defaults to replace). Overrides that cannot apply to
/// the template are left out and returned, so the others still apply.
pub fn override_policy(
    fed: &Value,
    target: &TargetType,
    template: &Value,
) -> (Value, Vec<BadOverride>) {
    let mut rules = Vec::new();
    let mut bad = Vec::new();
    let overrides = fed
        .pointer("/spec/overrides")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for o in &overrides {
        let Some(cluster) = o["clusterName"].as_str() else {
            continue;
        };
        let mut plaintext = Vec::new();
        for co in o["clusterOverrides"].as_array().into_iter().flatten() {
            let path = co["path"].as_str().unwrap_or_default();
            let op = co["op"].as_str().unwrap_or("replace");
            if let Err(reason) = check_path(template, op, path) {
                bad.push(BadOverride {
                    cluster: cluster.to_string(),
                    path: path.to_string(),
                    reason,
                });
                continue;
            }
            let mut p = json!({"path": path, "operator": op});
            if op != "remove" {
                p["value"] = co.get("value").cloned().unwrap_or(Value::Null);
            }
            plaintext.push(p);
        }
        if !plaintext.is_empty() {
            rules.push(json!({
                "targetCluster": {"clusterNames": [cluster]},
                "overriders": {"plaintext": plaintext},
            }));
        }
    }
    let op = json!({
        "apiVersion": format!("{POLICY_GROUP}/v1alpha1"),
        "kind": "OverridePolicy",
        "metadata": generated_meta(fed),
        "spec": {
            "resourceSelectors": selector(fed, target),
            "overrideRules": rules,
        },
    });
    (op, bad)
}

/// KubeFed's status for a federated object: `Propagation` True (no
/// reason) when every placed cluster has the object, else False with
/// `CheckClusters`; `clusters[]` lists the placed clusters, with a
/// `status` for those that failed and the member object's
/// `remoteStatus`.
pub fn status(
    placed: &[String],
    known: &BTreeSet<String>,
    ready: &BTreeSet<String>,
    aggregated: &[AggregatedStatusItem],
    bad: &[BadOverride],
) -> (Vec<Value>, bool) {
    let mut clusters = Vec::new();
    let mut ok = true;
    for name in placed {
        let item = aggregated.iter().find(|a| &a.cluster_name == name);
        let failure = if !known.contains(name) || !ready.contains(name) {
            Some(CLUSTER_NOT_READY)
        } else if bad.iter().any(|b| &b.cluster == name) {
            Some(APPLY_OVERRIDES_FAILED)
        } else {
            match item {
                Some(i) if i.applied => None,
                Some(i) if i.applied_message.is_some() => Some(CREATION_FAILED),
                _ => {
                    // Not applied yet: not reported as done.
                    ok = false;
                    None
                }
            }
        };
        let mut c = json!({"name": name});
        if let Some(f) = failure {
            ok = false;
            c["status"] = json!(f);
        }
        // The member object's status, as KubeFed's raw status collection.
        if let Some(remote) = item.and_then(|i| i.status.as_ref()) {
            c["remoteStatus"] = remote.clone();
        }
        clusters.push(c);
    }
    (clusters, ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontends::kubefed::api::default_types;

    fn deployment() -> TargetType {
        default_types()
            .into_iter()
            .find(|t| t.kind == "Deployment")
            .unwrap()
    }

    fn payment_api() -> Value {
        let yaml = r#"
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: payment-api
  namespace: production
  uid: u-1
spec:
  template:
    metadata:
      labels:
        app: payment-api
    spec:
      replicas: 3
      selector:
        matchLabels:
          app: payment-api
      template:
        spec:
          containers:
          - name: payment-api
            image: myregistry/payment-api:v2.1.0
  placement:
    clusters:
    - name: cluster-us-east
    - name: cluster-eu-west
  overrides:
  - clusterName: cluster-eu-west
    clusterOverrides:
    - path: "/spec/replicas"
      value: 5
    - path: "/spec/paused"
      value: true
"#;
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_template_is_the_spec_template_as_written_with_name_and_owner() {
        let t = template(&payment_api(), &deployment());
        assert_eq!(t["apiVersion"], "apps/v1");
        assert_eq!(t["kind"], "Deployment");
        assert_eq!(t["metadata"]["name"], "payment-api");
        assert_eq!(t["metadata"]["namespace"], "production");
        assert_eq!(t["metadata"]["labels"]["app"], "payment-api");
        assert_eq!(t["metadata"]["labels"][MANAGED_LABEL], "true");
        assert_eq!(t["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(t["spec"]["replicas"], 3);
        // The pod template is passed on as written (no labels added).
        assert_eq!(t["spec"]["template"].pointer("/metadata"), None);
    }

    fn fed_cluster(name: &str, region: &str) -> FedCluster {
        FedCluster {
            name: name.into(),
            labels: [("region".to_string(), region.to_string())].into(),
            ready: true,
        }
    }

    #[test]
    fn placement_names_or_selects_kubefed_clusters() {
        let fleet = [fed_cluster("a", "eu"), fed_cluster("b", "us")];
        let mut fed = payment_api();
        let placed = placed_clusters(&fed, &fleet).unwrap();
        assert_eq!(placed, vec!["cluster-us-east", "cluster-eu-west"]);
        let pp = propagation_policy(&fed, &deployment(), &Placement::Clusters(placed));
        assert_eq!(pp["metadata"]["name"], "kubefed-payment-api");
        assert_eq!(
            pp["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["cluster-us-east", "cluster-eu-west"])
        );
        assert_eq!(pp["spec"].get("preserveResourcesOnDeletion"), None);
        fed["spec"]["placement"] = json!({"clusterSelector": {"matchLabels": {"region": "eu"}}});
        fed["metadata"]["annotations"] = json!({ORPHAN_ANNOTATION: "true"});
        assert_eq!(placed_clusters(&fed, &fleet).unwrap(), vec!["a"]);
        fed["spec"]["placement"] = json!({"clusterSelector": {}});
        assert_eq!(placed_clusters(&fed, &fleet).unwrap(), vec!["a", "b"]);
        fed["spec"]["placement"] = json!({"clusterSelector": {"matchLabels": "eu"}});
        assert!(placed_clusters(&fed, &fleet).is_err());
        fed["spec"]["placement"] = json!({});
        assert!(placed_clusters(&fed, &fleet).unwrap().is_empty());
        let pp = propagation_policy(&fed, &deployment(), &Placement::Clusters(vec![]));
        assert_eq!(
            pp["spec"]["placement"]["clusterAffinity"]["labelSelector"]["matchLabels"]
                [NO_PLACEMENT_LABEL],
            "true"
        );
        assert_eq!(pp["spec"]["preserveResourcesOnDeletion"], true);
    }

    #[test]
    fn a_replica_plan_becomes_static_weights_of_its_counts() {
        let plan: BTreeMap<String, i64> = [("a".to_string(), 2), ("b".to_string(), 7)].into();
        let pp = propagation_policy(&payment_api(), &deployment(), &Placement::Replicas(plan));
        let p = &pp["spec"]["placement"];
        assert_eq!(p["clusterAffinity"]["clusterNames"], json!(["a", "b"]));
        assert_eq!(p["replicaScheduling"]["replicaSchedulingType"], "Divided");
        assert_eq!(
            p["replicaScheduling"]["weightPreference"]["staticWeightList"][1],
            json!({"targetCluster": {"clusterNames": ["b"]}, "weight": 7})
        );
    }

    #[test]
    fn overrides_become_plaintext_rules_and_bad_paths_are_reported() {
        let fed = payment_api();
        let t = template(&fed, &deployment());
        let (op, bad) = override_policy(&fed, &deployment(), &t);
        assert_eq!(
            op["spec"]["overrideRules"],
            json!([{
                "targetCluster": {"clusterNames": ["cluster-eu-west"]},
                "overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 5}]},
            }])
        );
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].path, "/spec/paused");
        assert_eq!(bad[0].reason, "path /spec/paused does not exist");
        assert!(check_path(&t, "add", "/spec/paused").is_ok());
        assert!(check_path(&t, "remove", "/spec/replicas").is_ok());
        assert!(check_path(&t, "add", "/spec/nope/x").is_err());
    }

    #[test]
    fn status_reports_each_placed_cluster() {
        let placed = vec!["a".to_string(), "b".to_string(), "ghost".to_string()];
        let known: BTreeSet<String> = ["a", "b"].map(String::from).into();
        let ready = known.clone();
        let applied = |c: &str| AggregatedStatusItem {
            cluster_name: c.into(),
            applied: true,
            ..Default::default()
        };
        let (clusters, ok) = status(
            &placed[..2],
            &known,
            &ready,
            &[applied("a"), applied("b")],
            &[],
        );
        assert!(ok);
        assert_eq!(clusters, vec![json!({"name": "a"}), json!({"name": "b"})]);
        let mut with_status = applied("b");
        with_status.status = Some(json!({"readyReplicas": 2}));
        let (clusters, _) = status(
            &placed[..2],
            &known,
            &ready,
            &[applied("a"), with_status],
            &[],
        );
        assert_eq!(clusters[1]["remoteStatus"]["readyReplicas"], 2);
        let (clusters, ok) = status(&placed, &known, &ready, &[applied("a"), applied("b")], &[]);
        assert!(!ok);
        assert_eq!(
            clusters[2],
            json!({"name": "ghost", "status": CLUSTER_NOT_READY})
        );
        let (_, ok) = status(&placed[..2], &known, &ready, &[applied("a")], &[]);
        assert!(!ok);
    }
}
