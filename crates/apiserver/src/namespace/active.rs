//! The namespaces known to be active, kept in memory so that a write into
//! one needs no read of its namespace.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

use flotilla_store::{EventKind, ListOptions, Revision, StoreError};
use parking_lot::RwLock;

use crate::objects;
use crate::storage::Storage;

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
pub fn spawn_follower(api: Arc<Storage>) {
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

async fn follow_namespaces(api: &Storage) -> Result<Infallible, StoreError> {
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
