//! One watch per kind, shared by every controller that needs it: a cache
//! (reflector store) and a lossless fan-out of changes to subscribers.
//!
//! kube-rs's shared reflectors (`ReflectHandle`) need a defaultable
//! dynamic type and can stall on an object deleted before a subscriber
//! reads it; each subscriber here gets its own unbounded queue of what
//! it takes from each change instead.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::packed::{Key, PackedStore, PackedWriter};

/// A watch of every object of `api` with managedFields dropped: no
/// controller reads them, and in a cache of 100,000 Works they would be
/// most of its memory (as controller-runtime's TransformStripManagedFields).
pub fn lean_watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    watcher(api, config).modify(|obj| {
        obj.meta_mut().managed_fields = None;
    })
}

/// Who hears of each change, and what of it. Each subscriber projects
/// the change to what it needs (a key, its owner's key) as it happens,
/// so a subscriber that lags behind a burst holds a backlog of those, not
/// of parsed objects (at 100,000 Works such a backlog was a fifth of the
/// control plane's heap).
pub struct Subscribers<E>(Arc<Mutex<Vec<Subscriber<E>>>>);

/// Projects a change into a subscriber's queue; false once the
/// subscriber is gone.
type Subscriber<E> = Box<dyn FnMut(&E) -> bool + Send>;

impl<E> Clone for Subscribers<E> {
    fn clone(&self) -> Self {
        Subscribers(self.0.clone())
    }
}

impl<E: 'static> Subscribers<E> {
    fn new() -> Self {
        Subscribers(Arc::default())
    }

    fn send(&self, change: &E) {
        self.0.lock().retain_mut(|s| s(change));
    }

    /// What `project` makes of every later change (deletions included);
    /// changes it makes nothing of are not queued.
    pub fn subscribe<T: Send + 'static>(
        &self,
        mut project: impl FnMut(&E) -> Option<T> + Send + 'static,
    ) -> impl Stream<Item = T> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0
            .lock()
            .push(Box::new(move |change| match project(change) {
                Some(item) => tx.send(item).is_ok(),
                None => !tx.is_closed(),
            }));
        UnboundedReceiverStream::new(rx)
    }
}

impl<K: Clone + Send + Sync + 'static> Subscribers<Arc<K>> {
    /// Every later change, as kube-runtime's controllers take them.
    pub fn objects(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.subscribe(|obj: &Arc<K>| Some(Ok((**obj).clone())))
    }

    /// As [`objects`](Self::objects), without copying them.
    pub fn shared(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.subscribe(|obj: &Arc<K>| Some(obj.clone()))
    }
}

/// A change of a [`PackedFanout`]'s kind: the object as the watch told
/// it, and its key as the store holds it.
pub struct Change<K> {
    pub key: Key,
    pub object: K,
}

impl<K: 'static> Subscribers<Change<K>> {
    /// The key of every later change, for a work queue.
    pub fn keys(&self) -> impl Stream<Item = Key> + Send + 'static {
        self.subscribe(|c: &Change<K>| Some(c.key.clone()))
    }
}

/// A reflector store of the kind, and its changes.
pub struct Fanout<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    pub changes: Subscribers<Arc<K>>,
}

impl<K> Fanout<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    /// The fan-out and the future that drives its watch (to be spawned
    /// once every subscriber has subscribed).
    pub fn new(
        api: Api<K>,
        dyntype: K::DynamicType,
    ) -> (
        Fanout<K>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        Self::selecting(api, dyntype, watcher::Config::default())
    }

    /// As [`new`](Self::new), of the objects `config` selects.
    pub fn selecting(
        api: Api<K>,
        dyntype: K::DynamicType,
        config: watcher::Config,
    ) -> (
        Fanout<K>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let writer = reflector::store::Writer::new(dyntype);
        let store = writer.as_reader();
        let changes = Subscribers::new();
        let subs = changes.clone();
        let drive = async move {
            let events = reflector::reflector(writer, lean_watch(api, config))
                .default_backoff()
                .touched_objects();
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let Ok(obj) = event else { continue };
                subs.send(&Arc::new(obj));
            }
        };
        (Fanout { store, changes }, drive)
    }
}

/// A [`PackedStore`] of the kind, and its changes: for kinds with so many
/// objects that a reflector store of them would be most of the memory.
pub struct PackedFanout<K> {
    pub store: PackedStore<K>,
    pub changes: Subscribers<Change<K>>,
}

impl<K> PackedFanout<K>
where
    K: Resource + Clone + std::fmt::Debug + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// As [`Fanout::new`]. Subscribers hear of a change once the store
    /// holds it.
    pub fn new(
        api: Api<K>,
    ) -> (
        PackedFanout<K>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (mut writer, store) = PackedWriter::new();
        let changes = Subscribers::new();
        let subs = changes.clone();
        let drive = async move {
            let mut events =
                std::pin::pin!(lean_watch(api, watcher::Config::default()).default_backoff());
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let key = writer.apply(&event);
                if let (
                    Some(key),
                    watcher::Event::Apply(object)
                    | watcher::Event::InitApply(object)
                    | watcher::Event::Delete(object),
                ) = (key, event)
                {
                    subs.send(&Change { key, object });
                }
            }
        };
        (PackedFanout { store, changes }, drive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_subscriber_gets_what_it_projects_and_a_gone_one_is_dropped() {
        let subs = Subscribers::<Change<String>>::new();
        let keys = subs.keys();
        let long =
            subs.subscribe(|c: &Change<String>| (c.object.len() > 3).then(|| c.object.clone()));
        let dropped = subs.keys();
        drop(dropped);
        for (key, object) in [("a/one", "x"), ("a/two", "longer"), ("a/one", "y")] {
            subs.send(&Change {
                key: Key::from(key),
                object: object.to_string(),
            });
        }
        assert_eq!(
            subs.0.lock().len(),
            2,
            "the dropped subscriber is forgotten"
        );
        drop(subs);
        let keys: Vec<Key> = keys.collect().await;
        assert_eq!(keys, ["a/one", "a/two", "a/one"].map(Key::from));
        let long: Vec<String> = long.collect().await;
        assert_eq!(long, ["longer"]);
    }
}
