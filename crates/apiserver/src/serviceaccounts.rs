//! What kube-controller-manager's `serviceaccount` and
//! `root-ca-cert-publisher` controllers keep in every namespace: a
//! `default` ServiceAccount (manifests and clients assume one), and the
//! `kube-root-ca.crt` ConfigMap with the CA that signs the API server's
//! certificate. Both come back when deleted, at the next pass.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tracing::warn;

use crate::objects::{self, WriteScope};
use crate::registry::{self, Request};
use crate::storage::Storage;

/// Who managedFields credit, as upstream's controllers.
const MANAGER: &str = "kube-controller-manager";
/// How often every namespace is checked, besides at its creation.
const RESYNC: Duration = Duration::from_secs(10);
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Every namespace, then each as it is written; all again each RESYNC.
pub fn spawn(api: Arc<Storage>) {
    let store = api.store.clone();
    tokio::spawn(crate::follower::each_put(
        store,
        "service account controller",
        "/core/namespaces/".into(),
        RESYNC,
        move |kv| {
            let api = api.clone();
            async move { reconcile(&api, &kv.value).await }
        },
    ));
}

async fn reconcile(api: &Arc<Storage>, namespace: &[u8]) {
    let Ok(ns) = serde_json::from_slice::<Value>(namespace) else {
        return;
    };
    let name = objects::meta_str(&ns, "name").to_string();
    if name.is_empty() || objects::is_deleting(&ns) {
        return;
    }
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "default", "namespace": name}});
    ensure(api, "serviceaccounts", &name, account).await;
    if let Some(ca) = api.config.root_ca.clone() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": name,
                         "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
            "data": {"ca.crt": ca}});
        ensure(api, "configmaps", &name, config_map).await;
    }
}

/// Creates `obj` unless an object of its name exists; a root CA ConfigMap
/// whose certificate differs is brought back to the CA. Through the store
/// layer, as any write: admission, managedFields, namespace lifecycle.
async fn ensure(api: &Arc<Storage>, plural: &str, namespace: &str, obj: Value) {
    let Some(r) = api.registry.get("", "v1", plural) else {
        return;
    };
    let name = objects::meta_str(&obj, "name").to_string();
    let req = Request::internal(
        api.clone(),
        r.clone(),
        Some(namespace.to_string()),
        Some(name.clone()),
    );
    let result = match api.store.get(&req.key(&name)) {
        Ok(None) => registry::create(&req, obj, Vec::new(), |o| {
            crate::managed::track_update(&r, None, o, MANAGER, WriteScope::Main)
        })
        .await
        .map(|_| ()),
        Ok(Some(kv)) if plural == "configmaps" => {
            let Ok(current) = serde_json::from_slice::<Value>(&kv.value) else {
                return;
            };
            if current.get("data") == obj.get("data") || objects::is_deleting(&current) {
                return;
            }
            registry::update(&req, |old| {
                let mut new = old.clone();
                new["data"] = obj["data"].clone();
                crate::managed::track_update(&r, Some(old), &mut new, MANAGER, WriteScope::Main);
                Ok((new, Vec::new()))
            })
            .await
            .map(|_| ())
        }
        Ok(Some(_)) => Ok(()),
        Err(e) => Err(e.into()),
    };
    match result {
        // Another replica, or the namespace going: the next pass looks again.
        Err(e) if matches!(e.code.as_u16(), 403 | 404 | 409) => {}
        Err(e) => warn!(error = %e.message, namespace, name, "cannot ensure {plural}"),
        Ok(()) => {}
    }
}
