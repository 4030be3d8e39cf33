//! The objects every cluster starts with, made once at start-up (and by
//! whichever replica comes first): the system namespaces and the two
//! system PriorityClasses, as kube-apiserver's bootstrap controllers.

use std::sync::Arc;

use flotilla_store::StoreError;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::server::ApiServer;

pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Upstream's `system-cluster-critical` and `system-node-critical`.
const SYSTEM_PRIORITY_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
];

pub async fn system_objects(api: &Arc<ApiServer>) -> ApiResult<()> {
    for name in SYSTEM_NAMESPACES {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                        "labels": {"kubernetes.io/metadata.name": name}}});
        ensure(api, "", "namespaces", ns).await?;
    }
    for (name, value, description) in SYSTEM_PRIORITY_CLASSES {
        let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value,
                           "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority",
                           "description": description});
        ensure(api, "scheduling.k8s.io", "priorityclasses", class).await?;
    }
    Ok(())
}

/// Creates a cluster-scoped `obj` unless one of its name exists.
async fn ensure(api: &Arc<ApiServer>, group: &str, plural: &str, mut obj: Value) -> ApiResult<()> {
    let Some(r) = api.registry.get(group, "v1", plural) else {
        return Err(ApiError::internal(format!("{plural} are not registered")));
    };
    let key = r.key(None, objects::meta_str(&obj, "name"));
    if api.store.get(&key)?.is_some() {
        return Ok(());
    }
    objects::prepare_create(&r, &mut obj);
    match api.store.create(&key, objects::encode(&mut obj)?).await {
        Ok(_) | Err(StoreError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
