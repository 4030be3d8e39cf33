//! The ResourceQuotas of every namespace in memory, so that a create into
//! a namespace without one (nearly every create) reads nothing to learn
//! it: quota admission runs on every create, and a read of the store for
//! each was a twentieth of a busy member's CPU.
//!
//! Kept as the RBAC index is: from a list and watch of the store (other
//! replicas' writes, the status loop's) and, for this replica's writes, at
//! once after each write ([`after_write`]), so that a quota just created
//! is enforced on the next request. A quota written by another replica is
//! enforced once the watch brings it; upstream's quota admission reads an
//! informer and has the same window. Until the first list, and while the
//! watch is relisting, admission reads the store as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_store::{EventKind, Revision, StoreError};
use parking_lot::RwLock;
use serde_json::Value;

use crate::resources::{Registry, ResourceInfo};
use crate::value::str_at;
use flotilla_store::Store;

#[derive(Default)]
pub struct QuotaIndex {
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    /// False until listed, and again while the watch relists.
    synced: bool,
    /// namespace → name → quota.
    quotas: HashMap<String, BTreeMap<String, Arc<Value>>>,
    /// The revision last applied per `namespace/name`, deletions
    /// included, so that an event older than a write already applied
    /// (this replica's, applied before the watch brings it) is ignored.
    revisions: HashMap<String, Revision>,
}

impl QuotaIndex {
    /// The quotas of `namespace`, or None when the index cannot answer
    /// (not listed yet) and the store must be read.
    pub fn in_namespace(&self, namespace: &str) -> Option<Vec<Arc<Value>>> {
        let state = self.state.read();
        state.synced.then(|| {
            state
                .quotas
                .get(namespace)
                .map(|q| q.values().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// Applies quota `namespace/name` as stored at `revision`, or its
    /// deletion (`None`).
    fn apply(&self, namespace: &str, name: &str, obj: Option<&Value>, revision: Revision) {
        let deleted = obj.is_none();
        let mut state = self.state.write();
        let key = format!("{namespace}/{name}");
        let applied = state.revisions.get(&key).copied();
        // A put at the revision already applied is the same write seen
        // twice; an older one was overtaken.
        if applied.is_some_and(|r| r > revision || (r == revision && !deleted)) {
            return;
        }
        state.revisions.insert(key, revision);
        match obj {
            None => {
                if let Some(quotas) = state.quotas.get_mut(namespace) {
                    quotas.remove(name);
                    if quotas.is_empty() {
                        state.quotas.remove(namespace);
                    }
                }
            }
            Some(obj) => {
                state
                    .quotas
                    .entry(namespace.to_string())
                    .or_default()
                    .insert(name.to_string(), Arc::new(obj.clone()));
            }
        }
    }

    fn replace(&self, listed: Vec<(String, String, Value, Revision)>) {
        *self.state.write() = State::default();
        for (namespace, name, obj, revision) in listed {
            self.apply(&namespace, &name, Some(&obj), revision);
        }
        self.state.write().synced = true;
    }

    fn unsync(&self) {
        self.state.write().synced = false;
    }
}

fn is_quota(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "resourcequotas"
}

/// This replica's write of `obj` (stamped with its revision), applied at
/// once; anything but a ResourceQuota is ignored.
pub(crate) fn after_write(quotas: &QuotaIndex, r: &ResourceInfo, obj: &Value, deleted: bool) {
    if !is_quota(r) {
        return;
    }
    let revision = str_at(obj, "/metadata/resourceVersion")
        .parse()
        .unwrap_or(0);
    let (namespace, name) = (
        str_at(obj, "/metadata/namespace"),
        str_at(obj, "/metadata/name"),
    );
    quotas.apply(namespace, name, (!deleted).then_some(obj), revision);
}

/// Keeps `quotas` from a list and watch of the store, relisting when the
/// watch falls behind; ends when the store closes.
pub fn spawn_follower(store: Arc<dyn Store>, registry: Arc<Registry>, quotas: Arc<QuotaIndex>) {
    tokio::spawn(async move {
        crate::follower::until_closed("resource quotas", || async {
            let error = follow(store.as_ref(), &registry, &quotas).await;
            // Until relisted, quotas are read from the store.
            quotas.unsync();
            error
        })
        .await
    });
}

async fn follow(store: &dyn Store, registry: &Registry, quotas: &QuotaIndex) -> StoreError {
    let Some(r) = registry.get("", "v1", "resourcequotas") else {
        return StoreError::Closed;
    };
    let prefix = r.prefix();
    let listed = match store.list(&prefix, &Default::default()) {
        Ok(listed) => listed,
        Err(error) => return error,
    };
    let mut watch = match store.watch(&prefix, listed.revision) {
        Ok(watch) => watch,
        Err(error) => return error,
    };
    // Stored keys are `{prefix}{namespace}/{name}`.
    let split = |key: &str| {
        let (namespace, name) = key.get(prefix.len()..)?.split_once('/')?;
        Some((namespace.to_string(), name.to_string()))
    };
    quotas.replace(
        listed
            .items
            .iter()
            .filter_map(|kv| {
                let (namespace, name) = split(&kv.key)?;
                let obj = serde_json::from_slice(&kv.value).ok()?;
                Some((namespace, name, obj, kv.mod_revision))
            })
            .collect(),
    );
    loop {
        let events = match watch.next().await {
            Ok(events) => events,
            Err(error) => return error,
        };
        for event in events {
            let Some((namespace, name)) = split(&event.kv.key) else {
                continue;
            };
            let obj = match event.kind {
                EventKind::Delete => None,
                EventKind::Put => match serde_json::from_slice::<Value>(&event.kv.value) {
                    Ok(obj) => Some(obj),
                    Err(_) => continue,
                },
            };
            quotas.apply(&namespace, &name, obj.as_ref(), event.kv.mod_revision);
        }
    }
}
