//! KubeFed's objects translated into the pipeline's: a federated object
//! gives a resource template, a PropagationPolicy (its placement) and an
//! OverridePolicy (its overrides); the ResourceBinding the pipeline keeps
//! gives back KubeFed's status. Pure functions, no I/O.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::api::{GENERATED_BY, MANAGED_LABEL, ORPHAN_ANNOTATION, TargetType};
use crate::api::{AggregatedStatusItem, POLICY_GROUP};

/// KubeFed's aggregate reason when a cluster did not get the object.
pub const CHECK_CLUSTERS: &str = "CheckClusters";
/// KubeFed's per-cluster statuses used here.
pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
pub const APPLY_OVERRIDES_FAILED: &str = "ApplyOverridesFailed";
pub const CREATION_FAILED: &str = "CreationFailed";

/// The name of the generated PropagationPolicy and OverridePolicy.
pub fn policy_name(name: &str) -> String {
    format!("kubefed-{name}")
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

/// A label no cluster has: KubeFed places an object with neither
/// `clusters` nor `clusterSelector` nowhere, Karmada's empty affinity
/// everywhere.
pub const NO_PLACEMENT_LABEL: &str = "kubefed.flotilla.io/no-placement";

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

/// KubeFed's placement as Karmada's cluster affinity: `clusters` wins
/// over `clusterSelector` when both are set.
pub fn cluster_affinity(fed: &Value) -> Value {
    if let Some(names) = named_clusters(fed)
        && !names.is_empty()
    {
        return json!({"clusterNames": names});
    }
    let nowhere = json!({"labelSelector": {"matchLabels": {NO_PLACEMENT_LABEL: "true"}}});
    if named_clusters(fed).is_some() {
        return nowhere;
    }
    match fed.pointer("/spec/placement/clusterSelector") {
        Some(s) if s.is_object() => json!({"labelSelector": s}),
        _ => nowhere,
    }
}

fn orphans(fed: &Value) -> bool {
    fed.pointer("/metadata/annotations")
        .and_then(|a| a.get(ORPHAN_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

/// The PropagationPolicy for the template. Every cluster gets the whole
/// object (KubeFed has no replica division without a
/// ReplicaSchedulingPreference); the orphan annotation preserves the
/// members' copies on deletion.
pub fn propagation_policy(fed: &Value, target: &TargetType) -> Value {
    let mut spec = json!({
        "resourceSelectors": selector(fed, target),
        "placement": {
            "clusterAffinity": cluster_affinity(fed),
            "replicaScheduling": {"replicaSchedulingType": "Duplicated"},
        },
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
/// `status` for those that failed.
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

    #[test]
    fn placement_becomes_cluster_affinity() {
        let mut fed = payment_api();
        let pp = propagation_policy(&fed, &deployment());
        assert_eq!(pp["metadata"]["name"], "kubefed-payment-api");
        assert_eq!(
            pp["spec"]["placement"]["clusterAffinity"]["clusterNames"],
            json!(["cluster-us-east", "cluster-eu-west"])
        );
        assert_eq!(pp["spec"].get("preserveResourcesOnDeletion"), None);
        fed["spec"]["placement"] = json!({"clusterSelector": {"matchLabels": {"region": "eu"}}});
        fed["metadata"]["annotations"] = json!({ORPHAN_ANNOTATION: "true"});
        let pp = propagation_policy(&fed, &deployment());
        assert_eq!(
            pp["spec"]["placement"]["clusterAffinity"],
            json!({"labelSelector": {"matchLabels": {"region": "eu"}}})
        );
        assert_eq!(pp["spec"]["preserveResourcesOnDeletion"], true);
        fed["spec"]["placement"] = json!({});
        let a = cluster_affinity(&fed);
        assert_eq!(
            a["labelSelector"]["matchLabels"][NO_PLACEMENT_LABEL],
            "true"
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
