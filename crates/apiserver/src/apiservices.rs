//! One `apiregistration.k8s.io/v1` APIService per served group-version,
//! as kube-aggregator's autoregistration keeps them: `v1.apps`, `v1.` for
//! the core group, `v1alpha1.policy.karmada.io` for a CRD's. They are
//! local (no `spec.service`), always Available, labelled
//! `kube-aggregator.kubernetes.io/automanaged`, made as groups come (CRDs
//! created through any replica) and removed as they go.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::StoreError;
use serde_json::{Value, json};
use tracing::warn;

use crate::builtin::GROUP_ORDER;
use crate::objects;
use crate::storage::Storage;

const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";
/// How often the served groups are compared with the APIServices.
const PERIOD: Duration = Duration::from_secs(2);

pub fn spawn(api: Arc<Storage>) {
    tokio::spawn(async move {
        let mut seen = None;
        loop {
            let generation = api.registry.generation();
            if seen != Some(generation) {
                match reconcile(&api).await {
                    Ok(()) => seen = Some(generation),
                    Err(StoreError::Closed) => return,
                    Err(error) => warn!(%error, "APIServices not reconciled"),
                }
            }
            tokio::time::sleep(PERIOD).await;
        }
    });
}

/// upstream's name of a group-version's APIService.
fn name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

async fn reconcile(api: &Arc<Storage>) -> Result<(), StoreError> {
    let Some(r) = api
        .registry
        .get("apiregistration.k8s.io", "v1", "apiservices")
    else {
        return Ok(());
    };
    let mut wanted = BTreeSet::new();
    for (group, versions) in api.registry.groups() {
        let builtin = GROUP_ORDER.iter().position(|g| *g == group);
        for (i, version) in versions.iter().enumerate() {
            let service = name(&group, version);
            wanted.insert(service.clone());
            let key = r.key(None, &service);
            if api.store.get(&key)?.is_some() {
                continue;
            }
            // Built-in groups in upstream's order; CRDs as autoregistration.
            let (group_priority, version_priority) = match builtin {
                Some(at) => (18000 - 100 * at as i64, if i == 0 { 15 } else { 9 }),
                None => (1000, 100),
            };
            let mut obj = json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": service, "labels": {AUTOMANAGED: "onstart"}},
                "spec": {"group": group, "version": version,
                         "groupPriorityMinimum": group_priority,
                         "versionPriority": version_priority},
            });
            objects::prepare_create(&r, &mut obj);
            obj["status"] = json!({"conditions": [{"type": "Available", "status": "True",
                "lastTransitionTime": crate::meta::now(), "reason": "Local",
                "message": "Local APIServices are always available"}]});
            let bytes = bytes::Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
            match api.store.create(&key, bytes).await {
                Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    // What this server made for a group no longer served goes.
    let listed = api.store.list(&r.prefix(), &Default::default())?;
    for kv in listed.items {
        let Ok(obj) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let managed = obj.pointer(&format!(
            "/metadata/labels/{}",
            AUTOMANAGED.replace('/', "~1")
        ));
        if managed.is_some() && !wanted.contains(objects::meta_str(&obj, "name")) {
            match api
                .store
                .delete(
                    &kv.key,
                    flotilla_store::DeletePrecondition {
                        mod_revision: Some(kv.mod_revision),
                    },
                )
                .await
            {
                Ok(_) | Err(StoreError::NotFound(_) | StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
