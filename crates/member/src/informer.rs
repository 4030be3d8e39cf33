//! Shared informers: one list+watch per kind for all the simulator's
//! controllers (as kube-controller-manager's SharedInformerFactory), feeding
//! a kube-runtime reflector store and fanning every change, deletions
//! included, out to the controllers that care.
//!
//! kube-runtime's own shared streams do not forward deletions, which the
//! workload controllers need (a deleted pod must be replaced), hence this
//! thin layer over its watcher and store.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, watcher::Event};
use kube::{Api, Resource, ResourceExt};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tracing::warn;

/// One change seen by an informer.
pub enum Change<'a, K> {
    Applied(&'a K),
    Deleted(&'a K),
}

impl<K> Clone for Change<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Change<'_, K> {}

impl<'a, K> Change<'a, K> {
    pub fn object(&self) -> &'a K {
        match self {
            Change::Applied(o) | Change::Deleted(o) => o,
        }
    }
}

type Handler<K> = Box<dyn Fn(Change<'_, K>) + Send + Sync>;

/// Kinds the simulator watches.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
impl<K> Watched for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

pub struct Informer<K: Watched> {
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    store: Store<K>,
    handlers: Vec<Handler<K>>,
}

impl<K: Watched> Informer<K> {
    pub fn new(api: Api<K>) -> Self {
        let (store, writer) = reflector::store();
        Informer {
            api,
            writer,
            store,
            handlers: Vec::new(),
        }
    }

    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Calls `f` for every change, after the store reflects it.
    pub fn on_change(&mut self, f: impl Fn(Change<'_, K>) + Send + Sync + 'static) {
        self.handlers.push(Box::new(f));
    }

    /// A stream of reconcile requests for a controller of `P`: `map` names
    /// the objects a change concerns.
    pub fn triggers<P>(
        &mut self,
        map: impl Fn(Change<'_, K>) -> Vec<ObjectRef<P>> + Send + Sync + 'static,
    ) -> impl Stream<Item = ObjectRef<P>> + Send + 'static
    where
        P: Resource + 'static,
        P::DynamicType: Send + Sync,
        ObjectRef<P>: Send,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        self.on_change(move |change| {
            for r in map(change) {
                let _ = tx.send(r);
            }
        });
        UnboundedReceiverStream::new(rx)
    }

    /// Requests for the changed objects themselves, those `filter` keeps.
    pub fn own_triggers(
        &mut self,
        filter: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
        self.triggers(move |change| match change {
            Change::Applied(o) if filter(o) => vec![ObjectRef::from_obj(o)],
            _ => Vec::new(),
        })
    }

    /// Lists and watches until the task is dropped, re-listing after errors.
    pub async fn run(mut self) {
        let kind = K::kind(&()).to_string();
        let mut events = watcher(self.api.clone(), watcher::Config::default())
            .default_backoff()
            // managedFields are never read here and are a good part of each object.
            .modify(|o| o.managed_fields_mut().clear())
            .boxed();
        let mut listing: Vec<K> = Vec::new();
        let mut before: Vec<Arc<K>> = Vec::new();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(error) => {
                    warn!(%error, %kind, "watch failed; retrying");
                    continue;
                }
            };
            if matches!(event, Event::Init) {
                before = self.store.state();
            }
            self.writer.apply_watcher_event(&event);
            match event {
                Event::Apply(o) => self.notify(Change::Applied(&o)),
                Event::Delete(o) => self.notify(Change::Deleted(&o)),
                Event::Init => listing.clear(),
                Event::InitApply(o) => listing.push(o),
                Event::InitDone => {
                    // Objects gone while the watch was down are deletions too.
                    let now: HashSet<ObjectRef<K>> =
                        listing.iter().map(ObjectRef::from_obj).collect();
                    for old in std::mem::take(&mut before) {
                        if !now.contains(&ObjectRef::from_obj(old.as_ref())) {
                            self.notify(Change::Deleted(old.as_ref()));
                        }
                    }
                    for o in std::mem::take(&mut listing) {
                        self.notify(Change::Applied(&o));
                    }
                }
            }
        }
    }

    fn notify(&self, change: Change<'_, K>) {
        for h in &self.handlers {
            h(change);
        }
    }
}

/// A secondary index over an informer's store: objects by a derived key
/// (controller owner uid, node name), kept current by the informer.
/// Objects are held by a shared "namespace/name" id, keys interned: an
/// index entry costs a few dozen bytes per object.
pub struct Index<K: Watched> {
    inner: Arc<RwLock<IndexInner>>,
    store: Store<K>,
}

impl<K: Watched> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            inner: self.inner.clone(),
            store: self.store.clone(),
        }
    }
}

#[derive(Default)]
struct IndexInner {
    by_key: HashMap<Arc<str>, HashSet<Arc<str>>>,
    key_of: HashMap<Arc<str>, Arc<str>>,
}

impl IndexInner {
    fn remove(&mut self, id: &str) {
        if let Some(old) = self.key_of.remove(id)
            && let Some(set) = self.by_key.get_mut(&old)
        {
            set.remove(id);
            if set.is_empty() {
                self.by_key.remove(&old);
            }
        }
    }

    fn insert(&mut self, id: &str, key: &str) {
        let id: Arc<str> = match self.key_of.get_key_value(id) {
            Some((id, _)) => id.clone(),
            None => Arc::from(id),
        };
        self.remove(&id);
        let key: Arc<str> = match self.by_key.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        };
        self.by_key
            .entry(key.clone())
            .or_default()
            .insert(id.clone());
        self.key_of.insert(id, key);
    }
}

impl<K: Watched> Index<K> {
    pub fn new(
        informer: &mut Informer<K>,
        key: impl Fn(&K) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        let inner = Arc::new(RwLock::new(IndexInner::default()));
        let writer = inner.clone();
        informer.on_change(move |change| {
            let o = change.object();
            let id = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
            let mut idx = writer.write();
            match (change, key(o)) {
                (Change::Applied(_), Some(k)) => idx.insert(&id, &k),
                _ => idx.remove(&id),
            }
        });
        Index {
            inner,
            store: informer.store(),
        }
    }

    /// The objects under `key`, as the store has them now.
    pub fn get(&self, key: &str) -> Vec<Arc<K>> {
        let ids: Vec<Arc<str>> = self
            .inner
            .read()
            .by_key
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        ids.iter()
            .filter_map(|id| {
                let (ns, name) = id.split_once('/')?;
                let r = ObjectRef::new(name);
                self.store
                    .get(&if ns.is_empty() { r } else { r.within(ns) })
            })
            .collect()
    }
}

/// The uid of `o`'s controlling owner.
pub fn controller_uid<K: Resource>(o: &K) -> Option<String> {
    o.owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// A request for `o`'s controlling owner of kind `P`.
pub fn owner_ref<K: Resource, P: Resource<DynamicType = ()>>(o: &K) -> Option<ObjectRef<P>> {
    let owner = o
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))?;
    (owner.kind == P::kind(&()) && owner.api_version == P::api_version(&()))
        .then(|| ObjectRef::new(&owner.name).within(&o.namespace().unwrap_or_default()))
}
