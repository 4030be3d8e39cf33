//! A cache of one kind's objects held as compressed JSON and decoded on
//! each read. The controllers keep every Work of the fleet (one per
//! binding and cluster: 100,000 for 10,000 templates on 10 members); as
//! parsed objects in a reflector store each cost about 4 KiB, packed they
//! cost a few hundred bytes, and a read costs a few microseconds.
//!
//! It follows a watch as kube-rs's reflector store does: a relist
//! replaces the contents once it is complete, so a reader never sees a
//! half-listed cache.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use flotilla_store::packed::{Dictionaries, Packed};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::error;

/// An object's key in the store: `namespace/name` (cluster-scoped
/// objects: `/name`), so that a namespace's objects are one range.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or(""))
}

/// An object's key in the store, from its metadata; None without a name.
pub fn key_of(meta: &ObjectMeta) -> Option<String> {
    Some(key(meta.namespace.as_deref(), meta.name.as_deref()?))
}

/// A key as the store holds it; work queues hold the same allocation
/// (see [`PackedStore::shared_key`]), not a copy per queued key.
pub type Key = Arc<str>;

type Objects = BTreeMap<Key, Packed>;

/// The read side, cheap to clone.
pub struct PackedStore<K> {
    objects: Arc<RwLock<Objects>>,
    listed: watch::Receiver<bool>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for PackedStore<K> {
    fn clone(&self) -> Self {
        PackedStore {
            objects: self.objects.clone(),
            listed: self.listed.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> PackedStore<K>
where
    K: Resource + DeserializeOwned,
{
    pub fn get(&self, r: &ObjectRef<K>) -> Option<Arc<K>> {
        self.get_key(&key(r.namespace.as_deref(), &r.name))
    }

    /// The object under [`key`].
    pub fn get_key(&self, key: &str) -> Option<Arc<K>> {
        let packed = self.objects.read().get(key)?.clone();
        decode(&packed)
    }

    /// Part of the object `r` names, decoded as `V`: a type naming only
    /// the fields its reader needs, so that the rest (a Work's manifests)
    /// is skipped over instead of built into values and dropped again.
    pub fn get_as<V: DeserializeOwned>(&self, r: &ObjectRef<K>) -> Option<V> {
        self.get_key_as(&key(r.namespace.as_deref(), &r.name))
    }

    /// As [`get_as`](Self::get_as), of the object under [`key`].
    pub fn get_key_as<V: DeserializeOwned>(&self, key: &str) -> Option<V> {
        let packed = self.objects.read().get(key)?.clone();
        decode_as(&packed)
    }

    /// As [`get_key_as`](Self::get_key_as), through `memo`: the part is
    /// decoded again only when the object changed since `memo` decoded it.
    pub fn get_key_memo<V: DeserializeOwned>(&self, key: &str, memo: &Memo<V>) -> Option<Arc<V>> {
        let packed = self.objects.read().get(key)?.clone();
        if let Some((held, value)) = memo.entries.lock().get(key)
            && held.is_same(&packed)
        {
            return Some(value.clone());
        }
        let value = Arc::new(decode_as::<V>(&packed)?);
        let mut entries = memo.entries.lock();
        if entries.len() >= memo.capacity {
            entries.clear();
        }
        entries.insert(Arc::from(key), (packed, value.clone()));
        Some(value)
    }

    /// Whether the store holds an object under [`key`], without decoding it.
    pub fn contains_key(&self, key: &str) -> bool {
        self.objects.read().contains_key(key)
    }

    /// Every object in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        let from = format!("{namespace}/");
        let packed: Vec<Packed> = self
            .objects
            .read()
            .range::<str, _>((
                std::ops::Bound::Included(from.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(&from))
            .map(|(_, v)| v.clone())
            .collect();
        packed.iter().filter_map(decode).collect()
    }

    /// The key of every object, for a periodic sweep.
    pub fn keys(&self) -> Vec<Key> {
        self.objects.read().keys().cloned().collect()
    }

    /// `key` as the store holds it, shared; a new one when the store has
    /// no such object.
    pub fn shared_key(&self, key: &str) -> Key {
        match self.objects.read().get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Key::from(key),
        }
    }

    /// Resolves once the watch's first list is in.
    pub async fn wait_until_listed(&self) {
        let mut listed = self.listed.clone();
        // An error means the writer is gone, with the process.
        let _ = listed.wait_for(|l| *l).await;
    }
}

fn decode<K: DeserializeOwned>(packed: &Packed) -> Option<Arc<K>> {
    decode_as(packed).map(Arc::new)
}

/// The packed object, or the part of it `V` names.
fn decode_as<V: DeserializeOwned>(packed: &Packed) -> Option<V> {
    match serde_json::from_slice(&packed.unpack()) {
        Ok(obj) => Some(obj),
        // Only a bug could get here: the writer encoded it.
        Err(error) => {
            error!(%error, "packed object does not decode");
            None
        }
    }
}

/// Parts of a store's objects as a reader last decoded them, each with the
/// packed value it came from: for a reader that reads the same objects
/// over and over while only a few of them change (a binding's status reads
/// every Work of the binding each time one reports: a thousand decodes per
/// report for a binding on a thousand clusters). Bounded: past `capacity`
/// entries it starts again empty; readers [`forget`](Memo::forget) what
/// they will not read again soon.
pub struct Memo<V> {
    entries: Mutex<HashMap<Key, (Packed, Arc<V>)>>,
    capacity: usize,
}

impl<V> Memo<V> {
    pub fn new(capacity: usize) -> Memo<V> {
        Memo {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    pub fn forget(&self, key: &str) {
        self.entries.lock().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

/// The write side, fed a watch's events in order.
pub struct PackedWriter<K> {
    objects: Arc<RwLock<Objects>>,
    /// The objects of a relist so far; they replace the cache at its end.
    relist: Option<Objects>,
    listed: watch::Sender<bool>,
    /// One family: the objects are all of one kind.
    dictionaries: Dictionaries,
    _kind: PhantomData<fn() -> K>,
}

impl<K> PackedWriter<K>
where
    K: Resource + Serialize + DeserializeOwned,
{
    pub fn new() -> (PackedWriter<K>, PackedStore<K>) {
        let objects = Arc::new(RwLock::new(Objects::new()));
        let (listed, listed_rx) = watch::channel(false);
        (
            PackedWriter {
                objects: objects.clone(),
                relist: None,
                listed,
                dictionaries: Dictionaries::default(),
                _kind: PhantomData,
            },
            PackedStore {
                objects,
                listed: listed_rx,
                _kind: PhantomData,
            },
        )
    }

    /// Follows `event`; the key of the object it changed, as the store
    /// holds it.
    pub fn apply(&mut self, event: &watcher::Event<K>) -> Option<Key> {
        match event {
            watcher::Event::Init => {
                self.relist = Some(Objects::new());
                None
            }
            watcher::Event::InitApply(obj) => {
                let (k, v) = self.entry(obj)?;
                if let Some(relist) = self.relist.as_mut() {
                    relist.insert(k.clone(), v);
                }
                Some(k)
            }
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    *self.objects.write() = relist;
                }
                self.listed.send_replace(true);
                None
            }
            watcher::Event::Apply(obj) => {
                let (k, v) = self.entry(obj)?;
                let mut objects = self.objects.write();
                // The key held already stays, shared with work queues.
                let k = objects
                    .get_key_value(&k)
                    .map_or(k, |(held, _)| held.clone());
                objects.insert(k.clone(), v);
                Some(k)
            }
            watcher::Event::Delete(obj) => {
                let k = key_of(obj.meta())?;
                let removed = self.objects.write().remove_entry(k.as_str());
                Some(removed.map_or_else(|| k.into(), |(k, _)| k))
            }
        }
    }

    fn entry(&self, obj: &K) -> Option<(Key, Packed)> {
        let k = key_of(obj.meta())?;
        match serde_json::to_vec(obj) {
            Ok(json) => {
                let json = Bytes::from(json);
                let dictionary = self.dictionaries.pick("", &json);
                Some((k.into(), Packed::pack_with(&json, dictionary)))
            }
            Err(error) => {
                error!(%error, object = %k, "object does not encode; not cached");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(ns: &str, name: &str, value: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c.data = Some([("k".to_string(), value.repeat(100))].into());
        c
    }

    fn r(ns: &str, name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within(ns)
    }

    #[tokio::test]
    async fn reads_give_back_what_the_watch_said_and_a_relist_replaces_everything() {
        let (mut w, store) = PackedWriter::<ConfigMap>::new();
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(cm("a", "one", "1")));
        w.apply(&watcher::Event::InitApply(cm("b", "two", "2")));
        assert!(store.keys().is_empty(), "a half-listed cache is not shown");
        w.apply(&watcher::Event::InitDone);
        store.wait_until_listed().await;
        assert_eq!(*store.get(&r("a", "one")).unwrap(), cm("a", "one", "1"));
        w.apply(&watcher::Event::Apply(cm("a", "one", "3")));
        w.apply(&watcher::Event::Apply(cm("a", "three", "3")));
        assert_eq!(*store.get(&r("a", "one")).unwrap(), cm("a", "one", "3"));
        let in_a: Vec<String> = store
            .in_namespace("a")
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(in_a, ["one", "three"]);
        w.apply(&watcher::Event::Delete(cm("a", "one", "3")));
        assert!(store.get(&r("a", "one")).is_none());
        // A relist that no longer has `three` forgets it, at its end.
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(cm("b", "two", "2")));
        assert!(store.get(&r("a", "three")).is_some());
        w.apply(&watcher::Event::InitDone);
        assert!(store.get(&r("a", "three")).is_none());
        assert_eq!(store.keys(), [Key::from("b/two")]);
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct DataOnly {
        data: std::collections::BTreeMap<String, String>,
    }

    #[tokio::test]
    async fn a_memo_decodes_an_object_again_only_once_it_changed() {
        let (mut w, store) = PackedWriter::<ConfigMap>::new();
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(cm("a", "one", "1")));
        w.apply(&watcher::Event::InitDone);
        let memo = Memo::<DataOnly>::new(2);
        let first = store.get_key_memo("a/one", &memo).unwrap();
        let again = store.get_key_memo("a/one", &memo).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "unchanged: not decoded again");
        // Changed to the very same content: still a new version, read anew.
        w.apply(&watcher::Event::Apply(cm("a", "one", "2")));
        let changed = store.get_key_memo("a/one", &memo).unwrap();
        assert_eq!(changed.data["k"], "2".repeat(100));
        assert!(!Arc::ptr_eq(&first, &changed));
        w.apply(&watcher::Event::Delete(cm("a", "one", "2")));
        assert!(store.get_key_memo("a/one", &memo).is_none(), "gone is gone");
        // Bounded: past its capacity it starts again.
        for name in ["x", "y", "z"] {
            w.apply(&watcher::Event::Apply(cm("a", name, name)));
            store.get_key_memo(&format!("a/{name}"), &memo).unwrap();
        }
        assert!(memo.len() <= 2);
        memo.forget("a/z");
        assert!(memo.len() <= 1);
    }
}
