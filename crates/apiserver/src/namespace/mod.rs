//! Namespace deletion: a terminating namespace refuses new content, its
//! content is deleted (finalizers honoured), then the namespace goes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::ListOptions;
use tracing::{info, warn};

use crate::objects;
use crate::registry::{self, DeleteOptions, Request};
use crate::storage::Storage;

pub mod active;

/// Removes everything in `namespace`; true once it is empty.
async fn remove_content(api: &Arc<Storage>, namespace: &str) -> bool {
    let mut empty = true;
    let mut seen = BTreeSet::new();
    for r in api.registry.all() {
        // Versions of one resource share storage; visit it once.
        if !r.namespaced || !seen.insert(r.prefix()) {
            continue;
        }
        let prefix = r.collection_prefix(Some(namespace));
        let Ok(list) = api.store.list(&prefix, &ListOptions::default()) else {
            empty = false;
            continue;
        };
        for kv in list.items {
            empty = false;
            let Ok(obj) = objects::decode(&r, &kv) else {
                continue;
            };
            if objects::is_deleting(&obj) {
                continue;
            }
            let req = Request::internal(api.clone(), r.clone(), Some(namespace.to_string()), None);
            if let Err(error) = registry::delete(
                &req,
                objects::meta_str(&obj, "name"),
                &DeleteOptions::default(),
            )
            .await
            {
                warn!(error = %error.message, namespace, "could not delete namespace content");
            }
        }
    }
    empty
}

/// Finalizes a terminating namespace in the background.
pub fn spawn_finalizer(api: Arc<Storage>, namespace: String) {
    tokio::spawn(async move {
        let key = format!("/core/namespaces/{namespace}");
        loop {
            // A read that fails is tried again with the content.
            if matches!(api.store.get(&key), Ok(None)) {
                return;
            }
            if remove_content(&api, &namespace).await {
                // Empty: drop the `kubernetes` finalizer through /finalize, as
                // upstream's namespace controller does; the namespace goes
                // once no metadata finalizer holds it either.
                let Some(r) = api.registry.get("", "v1", "namespaces") else {
                    return;
                };
                let mut req = Request::internal(api.clone(), r, None, Some(namespace.clone()));
                req.subresource = Some("finalize".into());
                let result = registry::update(&req, |old| {
                    let mut obj = old.clone();
                    let rest: Vec<String> = crate::value::strings_at(old, "/spec/finalizers")
                        .into_iter()
                        .filter(|f| f != "kubernetes")
                        .collect();
                    obj["spec"]["finalizers"] = serde_json::json!(rest);
                    Ok((obj, Vec::new()))
                })
                .await;
                match result {
                    Ok(_) => info!(namespace, "namespace finalized"),
                    Err(error) => {
                        warn!(error = %error.message, namespace, "could not finalize namespace")
                    }
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// Resumes finalization of namespaces that were terminating at shutdown.
pub fn resume_terminating(api: &Arc<Storage>) {
    let Some(r) = api.registry.get("", "v1", "namespaces") else {
        return;
    };
    let Ok(list) = api.store.list(&r.prefix(), &ListOptions::default()) else {
        return;
    };
    for kv in list.items {
        if let Ok(obj) = objects::decode(&r, &kv)
            && objects::is_deleting(&obj)
        {
            spawn_finalizer(api.clone(), objects::meta_str(&obj, "name").to_string());
        }
    }
}
