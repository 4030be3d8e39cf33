//! KubeFedClusters (`core.kubefed.io/v1beta1`, in `kube-federation-system`):
//! one per fleet cluster, kept by Flotilla with the cluster's endpoint,
//! labels, region, zones and readiness as KubeFed reports them. They are
//! what a federated object's `clusterSelector` selects, so a label put on
//! a KubeFedCluster (as KubeFed's documentation does) places objects.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use super::api::{CORE_GROUP, SYSTEM_NAMESPACE, VERSION};
use crate::api::Cluster;

/// The label on the KubeFedClusters Flotilla keeps.
pub const MIRROR_LABEL: &str = "kubefed.flotilla.io/mirrors-cluster";

pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CORE_GROUP, VERSION, "KubeFedCluster"),
        "kubefedclusters",
    )
}

/// A KubeFedCluster as selection sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct FedCluster {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
}

/// The KubeFedCluster mirroring `cluster` (what Flotilla owns of it).
pub fn mirror_of(cluster: &Cluster) -> Value {
    let name = cluster.name_any();
    let mut labels: BTreeMap<String, String> = cluster.labels().clone();
    labels.insert(MIRROR_LABEL.into(), "true".into());
    let mut spec = json!({
        "apiEndpoint": cluster.spec.api_endpoint.clone().unwrap_or_default(),
        "secretRef": {"name": cluster.spec.secret_ref.as_ref().map_or(name.clone(), |s| s.name.clone())},
    });
    if cluster.spec.insecure_skip_tls_verification {
        spec["disabledTLSValidations"] = json!(["*"]);
    }
    json!({
        "apiVersion": format!("{CORE_GROUP}/{VERSION}"),
        "kind": "KubeFedCluster",
        "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE, "labels": labels},
        "spec": spec,
    })
}

/// KubeFed's status for the cluster: a Ready condition (ClusterReady /
/// ClusterNotReady), or Offline when it cannot be reached; region, zones.
pub fn status_of(cluster: &Cluster, since: Option<&Value>) -> Value {
    let (type_, reason, message) = if cluster.is_ready() {
        ("Ready", "ClusterReady", "/healthz responded with ok")
    } else {
        ("Offline", "ClusterNotReachable", "cluster is not reachable")
    };
    let now = serde_json::to_value(crate::conditions::now()).unwrap_or(Value::Null);
    let transition = since
        .filter(|c| c["type"] == type_)
        .map_or(now.clone(), |c| c["lastTransitionTime"].clone());
    let mut status = json!({
        "conditions": [{
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": transition,
        }],
    });
    if let Some(region) = &cluster.spec.region {
        status["region"] = json!(region);
    }
    let zones = cluster.spec.all_zones();
    if !zones.is_empty() {
        status["zones"] = json!(zones);
    }
    status
}

/// Whether a written status says the same as `want` (probe times aside).
fn same_status(old: Option<&Value>, want: &Value) -> bool {
    let Some(old) = old else { return false };
    let key = |s: &Value| {
        let c = &s["conditions"][0];
        (
            c["type"].clone(),
            c["reason"].clone(),
            s["region"].clone(),
            s["zones"].clone(),
        )
    };
    key(old) == key(want)
}

/// Writes each fleet cluster's KubeFedCluster (skipping what is already
/// so), removes those whose cluster left, and returns every
/// KubeFedCluster with the readiness of its fleet cluster.
pub async fn sync(hub: &Client, clusters: &Store<Cluster>) -> kube::Result<Vec<FedCluster>> {
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), SYSTEM_NAMESPACE, &resource());
    let fleet = clusters.state();
    let names: BTreeSet<String> = fleet.iter().map(|c| c.name_any()).collect();
    let existing = api.list(&ListParams::default()).await?;
    for cluster in &fleet {
        super::apply::apply(hub, &resource(), mirror_of(cluster)).await?;
        let name = cluster.name_any();
        let old = existing
            .items
            .iter()
            .find(|o| o.name_any() == name)
            .and_then(|o| o.data.get("status"));
        let since = old.and_then(|s| s.pointer("/conditions/0"));
        let want = status_of(cluster, since);
        if !same_status(old, &want) {
            crate::writes::merge_patch_status(&api, &name, &json!({"status": want})).await?;
        }
    }
    for gone in existing
        .items
        .iter()
        .filter(|o| o.labels().contains_key(MIRROR_LABEL) && !names.contains(&o.name_any()))
    {
        info!(cluster = %gone.name_any(), "KubeFedCluster removed: its cluster left the fleet");
        match api.delete(&gone.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let ready: BTreeSet<String> = fleet
        .iter()
        .filter(|c| c.is_ready())
        .map(|c| c.name_any())
        .collect();
    let now = api.list(&ListParams::default()).await?;
    Ok(now
        .items
        .iter()
        .map(|o| FedCluster {
            name: o.name_any(),
            labels: o.labels().clone(),
            ready: ready.contains(&o.name_any()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(ready: bool) -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "us", "labels": {"env": "prod"}},
            "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:1", "region": "us-east",
                     "secretRef": {"namespace": "karmada-cluster", "name": "us"}},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_mirror_carries_the_clusters_endpoint_labels_and_readiness() {
        let m = mirror_of(&cluster(true));
        assert_eq!(m["metadata"]["namespace"], SYSTEM_NAMESPACE);
        assert_eq!(m["metadata"]["labels"]["env"], "prod");
        assert_eq!(m["spec"]["apiEndpoint"], "https://127.0.0.1:1");
        assert_eq!(m["spec"]["secretRef"]["name"], "us");
        let s = status_of(&cluster(true), None);
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["reason"], "ClusterReady");
        assert_eq!(s["region"], "us-east");
        let offline = status_of(&cluster(false), s.pointer("/conditions/0"));
        assert_eq!(offline["conditions"][0]["type"], "Offline");
        assert!(!same_status(Some(&s), &offline));
        assert!(same_status(Some(&s), &status_of(&cluster(true), None)));
    }
}
