//! The objects every cluster starts with, made once at start-up (and by
//! whichever replica comes first): the system namespaces and the two
//! system PriorityClasses, as kube-apiserver's bootstrap controllers; and,
//! once the server listens, the `default/kubernetes` Service in front of
//! it, made again if deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use flotilla_store::StoreError;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::state::ApiServer;

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

/// How often the `kubernetes` Service is looked for (upstream's bootstrap
/// controller: every 10 s).
const KUBERNETES_SERVICE_EVERY: Duration = Duration::from_secs(10);

/// Keeps `default/kubernetes`, as upstream's bootstrap controller does:
/// a ClusterIP Service on the Service range's first host (which the
/// allocator gives no other Service), port 443 (`https`) to the server's
/// `port`, labelled `component=apiserver`, `provider=kubernetes`. Clients
/// and tools read it (kube-runtime's event tests record events on it).
/// Without endpoints: the server listens on the host, which pods may not
/// reach.
pub fn spawn_kubernetes_service(api: Arc<ApiServer>, port: u16) {
    let token = api.config.admin_token.clone().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(
        crate::loopback::in_process(&api, &token, "kube-apiserver"),
        "default",
    );
    let ip = api
        .config
        .service_network
        .kubernetes_service_ip()
        .to_string();
    tokio::spawn(async move {
        let service: Service = match serde_json::from_value(json!({
            "metadata": {"name": "kubernetes",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": ip, "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}
        })) {
            Ok(s) => s,
            Err(error) => {
                warn!(%error, "the kubernetes Service cannot be made");
                return;
            }
        };
        let mut every = tokio::time::interval(KUBERNETES_SERVICE_EVERY);
        loop {
            every.tick().await;
            match services.get_opt("kubernetes").await {
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(error) => {
                    debug!(%error, "cannot look for the kubernetes Service");
                    continue;
                }
            }
            match services.create(&PostParams::default(), &service).await {
                Ok(_) => debug!("made the kubernetes Service"),
                // Another replica made it first.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(error) => warn!(%error, "cannot make the kubernetes Service"),
            }
        }
    });
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
