//! One watch per kind, shared by every controller that needs it: a cache
//! (reflector store) and a lossless fan-out of changes to subscribers.
//!
//! kube-rs's shared reflectors (`ReflectHandle`) need a defaultable
//! dynamic type and can stall on an object deleted before a subscriber
//! reads it; each subscriber here gets its own unbounded queue of the
//! changed objects instead.

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

use crate::packed::{PackedStore, PackedWriter};

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

/// Who hears of each changed object: every subscriber gets its own
/// unbounded queue.
pub struct Subscribers<K>(Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>);

impl<K> Clone for Subscribers<K> {
    fn clone(&self) -> Self {
        Subscribers(self.0.clone())
    }
}

impl<K: Clone + Send + Sync + 'static> Subscribers<K> {
    fn new() -> Self {
        Subscribers(Arc::default())
    }

    fn send(&self, obj: K) {
        let obj = Arc::new(obj);
        self.0.lock().retain(|s| s.send(obj.clone()).is_ok());
    }

    /// Every later change (deletions included), as controllers take them.
    pub fn subscribe(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.subscribe_shared()
            .map(|obj: Arc<K>| Ok((*obj).clone()))
    }

    /// As [`subscribe`](Self::subscribe), without copying the objects.
    pub fn subscribe_shared(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.lock().push(tx);
        UnboundedReceiverStream::new(rx)
    }
}

/// A reflector store of the kind, and its changes.
pub struct Fanout<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub store: Store<K>,
    pub changes: Subscribers<K>,
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
                subs.send(obj);
            }
        };
        (Fanout { store, changes }, drive)
    }
}

/// A [`PackedStore`] of the kind, and its changes: for kinds with so many
/// objects that a reflector store of them would be most of the memory.
pub struct PackedFanout<K> {
    pub store: PackedStore<K>,
    pub changes: Subscribers<K>,
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
                writer.apply(&event);
                match event {
                    watcher::Event::Apply(obj)
                    | watcher::Event::InitApply(obj)
                    | watcher::Event::Delete(obj) => subs.send(obj),
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        };
        (PackedFanout { store, changes }, drive)
    }
}
