//! Namespace deletion: a terminating namespace refuses new content, its
//! content is deleted (finalizers honoured), then the namespace goes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{EventKind, ListOptions, Revision, StoreError};
use parking_lot::RwLock;
use tracing::{info, warn};

use crate::objects;
use crate::registry::{self, DeleteOptions, Request};
use crate::server::ApiServer;

/// Removes everything in `namespace`; true once it is empty.
async fn remove_content(api: &Arc<ApiServer>, namespace: &str) -> bool {
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
pub fn spawn_finalizer(api: Arc<ApiServer>, namespace: String) {
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
pub fn resume_terminating(api: &Arc<ApiServer>) {
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

/// Namespaces known to be active, kept from a watch of the store, so that
/// a write into one needs no read of its namespace. Only "active" is
/// answered from here; an unknown or terminating namespace is read from
/// the store. A namespace this server marks terminating leaves the view at
/// once; one marked by another replica leaves it when the watch brings the
/// change, and in that lag content may be admitted that the finalizer's
/// next sweep removes (upstream's lifecycle admission, on an informer, has
/// the same window).
#[derive(Default)]
pub struct ActiveNamespaces {
    inner: RwLock<View>,
}

#[derive(Default)]
struct View {
    active: HashSet<String>,
    /// Namespaces this server saw terminate at a revision the watch has
    /// not reached: older events must not make them active again.
    terminated: HashMap<String, Revision>,
}

impl ActiveNamespaces {
    pub fn is_active(&self, namespace: &str) -> bool {
        self.inner.read().active.contains(namespace)
    }

    /// The namespace began terminating at `revision` (a write of this server).
    pub fn terminated(&self, namespace: &str, revision: Revision) {
        let mut view = self.inner.write();
        view.active.remove(namespace);
        view.terminated.insert(namespace.to_string(), revision);
    }

    fn put(&self, namespace: &str, revision: Revision, stored: &[u8]) {
        let active =
            objects::stored_lifecycle(stored).is_some_and(|m| m.deletion_timestamp.is_none());
        let mut view = self.inner.write();
        match view.terminated.get(namespace) {
            Some(at) if revision < *at => return,
            Some(_) => {
                view.terminated.remove(namespace);
            }
            None => {}
        }
        if active {
            view.active.insert(namespace.to_string());
        } else {
            view.active.remove(namespace);
        }
    }

    fn remove(&self, namespace: &str) {
        let mut view = self.inner.write();
        view.active.remove(namespace);
        view.terminated.remove(namespace);
    }

    fn clear(&self) {
        self.inner.write().active.clear();
    }
}

/// Keeps `api.namespaces` from a list and watch of the store, relisting
/// when the watch falls behind; ends when the store closes.
pub fn spawn_active_namespaces(api: Arc<ApiServer>) {
    tokio::spawn(async move {
        crate::follower::until_closed("active namespaces", || async {
            let Err(error) = follow_namespaces(&api).await;
            // Until relisted, every namespace is read from the store.
            api.namespaces.clear();
            error
        })
        .await
    });
}

async fn follow_namespaces(api: &ApiServer) -> Result<Infallible, StoreError> {
    const PREFIX: &str = "/core/namespaces/";
    let name = |key: &str| key.get(PREFIX.len()..).unwrap_or_default().to_string();
    let listed = api.store.list(PREFIX, &ListOptions::default())?;
    api.namespaces.clear();
    for kv in &listed.items {
        api.namespaces
            .put(&name(&kv.key), kv.mod_revision, &kv.value);
    }
    let mut watch = api.store.watch(PREFIX, listed.revision)?;
    loop {
        for event in watch.next().await? {
            match event.kind {
                EventKind::Put => {
                    api.namespaces
                        .put(&name(&event.kv.key), event.kv.mod_revision, &event.kv.value)
                }
                EventKind::Delete => api.namespaces.remove(&name(&event.kv.key)),
            }
        }
    }
}
