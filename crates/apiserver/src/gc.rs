//! The garbage collector: deletes dependents whose owners are gone, and
//! carries out Foreground and Orphan deletion, as kube-controller-manager's
//! does.
//!
//! It keeps a graph of ownerReferences (by uid, as upstream) built from one
//! list of the store and kept current by a watch of every key. After each
//! batch of changes it examines the objects the batch touched:
//! - a dependent none of whose owners exist any more (or whose remaining
//!   owners are all being deleted in the foreground) is deleted; one with
//!   some owners left loses its references to the missing ones;
//! - an owner with the `foregroundDeletion` finalizer has its dependents
//!   deleted and loses the finalizer once no dependent with
//!   `blockOwnerDeletion: true` remains;
//! - an owner with the `orphan` finalizer is removed from its dependents'
//!   ownerReferences, then loses the finalizer.
//!
//! Writes go through the same code as API requests, so finalizers,
//! preconditions and watches behave as for any client.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{EventKind, KeyValue, ListOptions, StoreError};
use serde_json::Value;
use tracing::{debug, warn};

use crate::objects::{self, FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::registry::{self, DeleteOptions, Request};
use crate::storage::Storage;

/// A uid or key; one allocation shared by every map that names it (the
/// graph holds every object of the server).
type Id = Arc<str>;

#[derive(Clone, Debug)]
struct OwnerRef {
    uid: Id,
    block: bool,
}

/// One object as the collector sees it.
#[derive(Clone, Debug)]
struct Node {
    key: Id,
    owners: Vec<OwnerRef>,
    deleting: bool,
    foreground: bool,
    orphan: bool,
}

impl Node {
    fn from_value(key: Id, obj: &Value, graph: &Graph) -> Node {
        let owners = crate::value::array_at(obj, "/metadata/ownerReferences")
            .iter()
            .filter_map(|r| {
                Some(OwnerRef {
                    uid: graph.intern(r.get("uid")?.as_str()?),
                    block: r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
            })
            .collect();
        let deleting = objects::is_deleting(obj);
        Node {
            key,
            owners,
            deleting,
            foreground: deleting && objects::has_finalizer(obj, FOREGROUND_FINALIZER),
            orphan: deleting && objects::has_finalizer(obj, ORPHAN_FINALIZER),
        }
    }
}

/// Every live uid. Most objects neither own nor are owned: of them the
/// collector needs to know only that they exist, in 16 bytes rather than a
/// node (the graph spans every object of the server).
#[derive(Default)]
struct Uids {
    uuids: HashSet<u128>,
    /// Uids that are not UUIDs (this server assigns only UUIDs, but a
    /// restored store may hold others).
    other: HashSet<Id>,
}

impl Uids {
    fn insert(&mut self, uid: &str) {
        match uuid::Uuid::try_parse(uid) {
            Ok(u) => self.uuids.insert(u.as_u128()),
            Err(_) => self.other.insert(Id::from(uid)),
        };
    }

    fn remove(&mut self, uid: &str) {
        match uuid::Uuid::try_parse(uid) {
            Ok(u) => self.uuids.remove(&u.as_u128()),
            Err(_) => self.other.remove(uid),
        };
    }

    fn contains(&self, uid: &str) -> bool {
        match uuid::Uuid::try_parse(uid) {
            Ok(u) => self.uuids.contains(&u.as_u128()),
            Err(_) => self.other.contains(uid),
        }
    }
}

/// The ownership graph at one revision.
#[derive(Default)]
struct Graph {
    live: Uids,
    /// The objects the collector may act on: those with owners, and those
    /// being deleted in the foreground or orphaning.
    nodes: HashMap<Id, Node>,
    /// owner uid → dependent uids (the owner need not exist).
    dependents: HashMap<Id, BTreeSet<Id>>,
    /// The uid of each object in `nodes`.
    uid_of_key: HashMap<Id, Id>,
}

impl Graph {
    /// The graph's own copy of `uid`, if it has one.
    fn intern(&self, uid: &str) -> Id {
        if let Some((id, _)) = self.nodes.get_key_value(uid) {
            return id.clone();
        }
        if let Some((id, _)) = self.dependents.get_key_value(uid) {
            return id.clone();
        }
        Id::from(uid)
    }

    /// Records `key`'s new state, and in `dirty` the uids whose situation
    /// changed.
    fn put(&mut self, key: &str, obj: &Value, dirty: &mut HashSet<Id>) {
        let uid = objects::meta_str(obj, "uid");
        if uid.is_empty() {
            return;
        }
        self.live.insert(uid);
        let uid = self.intern(uid);
        let key: Id = match self.uid_of_key.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Id::from(key),
        };
        let node = Node::from_value(key.clone(), obj, self);
        self.unlink(&uid, dirty);
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.clone());
            // A foreground owner may be waiting on this dependent.
            dirty.insert(o.uid.clone());
        }
        if node.foreground || node.orphan {
            dirty.extend(self.dependents_of(&uid));
        }
        if node.owners.is_empty() && !node.foreground && !node.orphan {
            self.uid_of_key.remove(&key);
            return;
        }
        dirty.insert(uid.clone());
        self.uid_of_key.insert(key, uid.clone());
        self.nodes.insert(uid, node);
    }

    /// Forgets `uid`'s node and its edges to its owners, who may have
    /// been waiting on it.
    fn unlink(&mut self, uid: &str, dirty: &mut HashSet<Id>) {
        let Some(node) = self.nodes.remove(uid) else {
            return;
        };
        for o in &node.owners {
            if let Some(set) = self.dependents.get_mut(&o.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&o.uid);
                }
            }
            dirty.insert(o.uid.clone());
        }
    }

    /// Records that `key` is gone; `last` gives its last state, read only
    /// for an object without a node.
    fn remove(&mut self, key: &str, last: impl FnOnce() -> Option<Value>, dirty: &mut HashSet<Id>) {
        let uid = match self.uid_of_key.remove(key) {
            Some(uid) => uid,
            None => match last() {
                Some(obj) if !objects::meta_str(&obj, "uid").is_empty() => {
                    Id::from(objects::meta_str(&obj, "uid"))
                }
                _ => return,
            },
        };
        self.live.remove(&uid);
        self.unlink(&uid, dirty);
        dirty.extend(self.dependents_of(&uid));
    }

    /// Whether the owner `uid` exists, and whether it waits for its
    /// dependents (foreground deletion).
    fn owner(&self, uid: &str) -> Option<bool> {
        if let Some(node) = self.nodes.get(uid) {
            return Some(node.foreground);
        }
        self.live.contains(uid).then_some(false)
    }

    fn dependents_of(&self, uid: &str) -> Vec<Id> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// What the collector decided to do about one object.
#[derive(Debug)]
enum Action {
    Delete { key: Id, policy: &'static str },
    DropOwners { key: Id, uids: HashSet<Id> },
    RemoveFinalizer { key: Id, finalizer: &'static str },
}

fn decide(graph: &Graph, uid: &str, actions: &mut Vec<Action>) {
    let Some(node) = graph.nodes.get(uid) else {
        return;
    };
    if node.orphan {
        let dependents = graph.dependents_of(uid);
        for d in &dependents {
            if let Some(dep) = graph.nodes.get(d) {
                actions.push(Action::DropOwners {
                    key: dep.key.clone(),
                    uids: HashSet::from([Id::from(uid)]),
                });
            }
        }
        if dependents.is_empty() {
            actions.push(Action::RemoveFinalizer {
                key: node.key.clone(),
                finalizer: ORPHAN_FINALIZER,
            });
        }
        return;
    }
    if node.foreground {
        let dependents = graph.dependents_of(uid);
        let blocking = dependents.iter().any(|d| {
            graph
                .nodes
                .get(d)
                .is_some_and(|dep| dep.owners.iter().any(|o| &*o.uid == uid && o.block))
        });
        if !blocking {
            actions.push(Action::RemoveFinalizer {
                key: node.key.clone(),
                finalizer: FOREGROUND_FINALIZER,
            });
        }
        // Dependents are examined on their own (their owner now waits).
    }
    if node.owners.is_empty() || node.deleting {
        return;
    }
    let mut gone = HashSet::new();
    let mut waiting = false;
    let mut solid = false;
    for o in &node.owners {
        match graph.owner(&o.uid) {
            None => {
                gone.insert(o.uid.clone());
            }
            Some(true) => {
                waiting = true;
                gone.insert(o.uid.clone());
            }
            Some(false) => solid = true,
        }
    }
    if gone.is_empty() {
        return;
    }
    if solid {
        actions.push(Action::DropOwners {
            key: node.key.clone(),
            uids: gone,
        });
    } else {
        // An owner waiting for its dependents makes the chain below wait too.
        let has_dependents = !graph.dependents_of(uid).is_empty();
        let policy = if waiting && has_dependents {
            "Foreground"
        } else {
            "Background"
        };
        actions.push(Action::Delete {
            key: node.key.clone(),
            policy,
        });
    }
}

/// Runs the collector for the life of the server.
pub fn spawn(api: Arc<Storage>) {
    tokio::spawn(async move {
        loop {
            match run(&api).await {
                Ok(()) => return,
                // Fell behind the watch window: rebuild from a fresh list.
                Err(StoreError::Compacted { .. }) => continue,
                Err(StoreError::Closed) => return,
                Err(error) => {
                    warn!(%error, "garbage collector restarting");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

async fn run(api: &Arc<Storage>) -> Result<(), StoreError> {
    let mut graph = Graph::default();
    let mut dirty = HashSet::new();
    let listed = api.store.list("/", &ListOptions::default())?;
    for kv in &listed.items {
        if let Some(obj) = value_of(kv) {
            graph.put(&kv.key, &obj, &mut dirty);
        }
    }
    let mut watch = api.store.watch("/", listed.revision)?;
    // Failed actions are retried after a pause.
    let mut retry: HashSet<Id> = HashSet::new();
    loop {
        let mut actions = Vec::new();
        for uid in dirty.drain() {
            decide(&graph, &uid, &mut actions);
        }
        for action in actions {
            if let Err(e) = perform(api, &action).await {
                warn!(error = %e.message, ?action, "garbage collection step failed; will retry");
                if let Some(uid) = graph.uid_of_key.get(action_key(&action)) {
                    retry.insert(uid.clone());
                }
            }
        }
        let next = if retry.is_empty() {
            watch.next().await?
        } else {
            match tokio::time::timeout(Duration::from_secs(1), watch.next()).await {
                Ok(batch) => batch?,
                Err(_) => {
                    dirty.extend(retry.drain());
                    continue;
                }
            }
        };
        for event in next {
            match event.kind {
                EventKind::Put => {
                    if let Some(obj) = value_of(&event.kv) {
                        graph.put(&event.kv.key, &obj, &mut dirty);
                    }
                }
                EventKind::Delete => {
                    graph.remove(&event.kv.key, || value_of(&event.kv), &mut dirty)
                }
            }
        }
    }
}

/// The stored object's metadata as the collector reads it:
/// `{"metadata": {uid, ownerReferences, deletionTimestamp, finalizers}}`.
fn value_of(kv: &KeyValue) -> Option<Value> {
    let meta = objects::stored_lifecycle(&kv.value)?;
    let mut m = serde_json::Map::new();
    let fields = [
        ("uid", meta.uid),
        ("ownerReferences", meta.owner_references),
        ("deletionTimestamp", meta.deletion_timestamp),
        ("finalizers", meta.finalizers),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            m.insert(name.into(), v);
        }
    }
    Some(serde_json::json!({ "metadata": m }))
}

fn action_key(action: &Action) -> &str {
    match action {
        Action::Delete { key, .. }
        | Action::DropOwners { key, .. }
        | Action::RemoveFinalizer { key, .. } => key,
    }
}

/// The request context for the object at store key `key`.
fn request_for(api: &Arc<Storage>, key: &str) -> Option<Request> {
    let resource = api.registry.for_key(key)?;
    let rest = key.strip_prefix(&resource.prefix())?;
    let (namespace, name) = if resource.namespaced {
        let (ns, name) = rest.split_once('/')?;
        (Some(ns.to_string()), name.to_string())
    } else {
        (None, rest.to_string())
    };
    Some(Request::internal(
        api.clone(),
        resource,
        namespace,
        Some(name),
    ))
}

async fn perform(api: &Arc<Storage>, action: &Action) -> Result<(), crate::error::ApiError> {
    let Some(req) = request_for(api, action_key(action)) else {
        // A resource no longer served (its CRD went away): nothing to do.
        return Ok(());
    };
    let name = req.name.clone().unwrap_or_default();
    let result = match action {
        Action::Delete { policy, .. } => {
            debug!(key = action_key(action), policy, "deleting dependent");
            let opts = DeleteOptions::with_policy(policy);
            registry::delete(&req, &name, &opts).await.map(|_| ())
        }
        Action::DropOwners { uids, .. } => registry::update(&req, |old| {
            let mut obj = old.clone();
            let kept: Vec<Value> = crate::value::array_at(old, "/metadata/ownerReferences")
                .iter()
                .filter(|r| {
                    !uids.contains(r.get("uid").and_then(Value::as_str).unwrap_or_default())
                })
                .cloned()
                .collect();
            let m = objects::meta_mut(&mut obj);
            if kept.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(kept));
            }
            Ok((obj, Vec::new()))
        })
        .await
        .map(|_| ()),
        Action::RemoveFinalizer { finalizer, .. } => registry::update(&req, |old| {
            let mut obj = old.clone();
            objects::remove_finalizer(&mut obj, finalizer);
            Ok((obj, Vec::new()))
        })
        .await
        .map(|_| ()),
    };
    match result {
        // Someone else got there first.
        Err(e) if e.code == http::StatusCode::NOT_FOUND => Ok(()),
        other => other,
    }
}
