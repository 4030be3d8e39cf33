//! What Flotilla last saw of each object in each member, from one watch
//! per member and kind: of its own objects (labelled `karmada.io/managed`)
//! what they hold, of the others only that they exist.
//!
//! A Work whose member objects the watch shows holding every field
//! Flotilla would apply is synced without a round trip to the member. That
//! is what makes a restart cheap: the control plane lists each member's
//! objects of the kind once and checks every Work against them, instead of
//! reading and re-applying every object. The watch also brings status
//! changes back, and re-queues a Work whose object drifted or vanished.
//!
//! Knowing which names the member's other objects hold is what lets a
//! create go straight to the apply: a name the watch shows free is applied
//! at once, one it shows held by someone else is read first and refused
//! unless the policy overwrites. Only while the watch is listed and
//! flowing: during a (re)list or after an error every apply reads first.
//! What is left is the watch's lag: an object created by someone else a
//! moment before Flotilla's first apply of the same name is taken over,
//! where Karmada's create on a cache miss would fail and refuse it.
//! Flotilla's member server sends an unfiltered watch from its stored
//! bytes, cheaper than filtering each event by label.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::debug;

use super::live::LiveObject;
use crate::api::{Work, annotations, labels};
use crate::context::Ctx;
use crate::interpreter;
use crate::kinds::gvk_of;
use crate::members::Member;
use crate::packed::{self, Key};
use crate::queue::WorkQueue;

/// How long a Work waits for a just-started member watch to list what
/// the member holds before it falls back to reading the object itself.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// A member watch: cluster, then group and kind.
type WatchKey = (String, String);

/// A member object: the watch that sees it (cluster, then group and
/// kind) and, within it, `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemberObject {
    watch: WatchKey,
    object: Box<str>,
}

pub fn member_object(
    cluster: &str,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> MemberObject {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    MemberObject {
        watch: (cluster.to_string(), format!("{group}/{kind}")),
        object: format!("{ns}/{name}").into(),
    }
}

/// What the watch last saw of one object. There is one per object
/// Flotilla placed (100,000 for 10,000 templates on 10 members), so it
/// keeps text rather than parsed trees.
#[derive(Clone, Debug, PartialEq)]
struct Observed {
    resource_version: Option<Box<str>>,
    /// The digest of the manifest whose every field the object holds.
    in_sync_with: Option<Box<str>>,
    /// The status Flotilla reflects, as JSON text.
    status: Option<Box<str>>,
    health: &'static str,
    /// The Work the object was applied from: its key in the Work cache,
    /// shared with it.
    work: Key,
}

/// What the watch knows of a name in a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// No object holds it.
    Absent,
    /// Flotilla's (labelled managed).
    Ours,
    /// An object Flotilla did not put there.
    Foreign,
}

/// What an in-sync object reports back to its Work.
pub struct Seen {
    pub status: Option<Value>,
    pub health: &'static str,
}

fn status_text(live: &Value) -> Option<Box<str>> {
    interpreter::reflect_status(live).map(|s| s.to_string().into())
}

/// The digest a manifest is applied under (its text as the Work holds it).
pub fn manifest_digest(raw: &str) -> String {
    let d = Sha256::digest(raw.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Whether `live` holds every field of `applied` with the same value
/// (lists element by element, same length): applying `applied` again would
/// change nothing. Fields the server or the member's controllers added
/// (defaults, status, clusterIP) do not matter.
pub fn contains(live: &Value, applied: &Value) -> bool {
    match (applied, live) {
        (Value::Object(a), Value::Object(l)) => a
            .iter()
            .all(|(k, v)| l.get(k).is_some_and(|lv| contains(lv, v))),
        (Value::Array(a), Value::Array(l)) => {
            a.len() == l.len() && a.iter().zip(l).all(|(v, lv)| contains(lv, v))
        }
        (Value::Number(a), Value::Number(l)) => a == l || a.as_f64() == l.as_f64(),
        _ => applied == live,
    }
}

/// A manifest as Flotilla applies it to a member: marked managed, pointing
/// back to its Work, and carrying the digest it was applied under.
pub fn prepare(manifest: &Value, work: &Work, digest: &str) -> Value {
    let mut applied = manifest.clone();
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        let l = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        l[labels::MANAGED] = "true".into();
        let a = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        a[annotations::WORK_NAME] = work.name_any().into();
        a[annotations::WORK_NAMESPACE] = work.namespace().unwrap_or_default().into();
        a[annotations::MANIFEST_DIGEST] = digest.into();
    }
    applied
}

struct MemberWatch {
    task: JoinHandle<()>,
    started: Instant,
    synced: watch::Receiver<bool>,
}

pub struct MemberWatches {
    ctx: Ctx,
    /// Works to reconcile again: drifted, deleted or changed status.
    requeue: Arc<WorkQueue<Key>>,
    watches: Mutex<HashMap<(String, GroupVersionKind), MemberWatch>>,
    /// Per watch, per `namespace/name`: what holds the name.
    held: Mutex<HashMap<WatchKey, HashMap<Box<str>, Held>>>,
}

/// What holds a name in a member, as the watch last saw it.
#[derive(Clone, Debug, PartialEq)]
enum Held {
    /// An object Flotilla applied from a Work.
    Ours(Observed),
    /// Any other object: someone else's, or one labelled managed without
    /// saying which Work it came from.
    Foreign,
}

impl Held {
    fn ours(&self) -> Option<&Observed> {
        match self {
            Held::Ours(o) => Some(o),
            Held::Foreign => None,
        }
    }
}

impl MemberWatches {
    pub fn new(ctx: Ctx, requeue: Arc<WorkQueue<Key>>) -> Arc<MemberWatches> {
        Arc::new(MemberWatches {
            ctx,
            requeue,
            watches: Mutex::default(),
            held: Mutex::default(),
        })
    }

    /// Starts the watch of `ar` in `cluster` if it is not running, and
    /// waits (a bounded time after its start) for its first list: whether
    /// the observed state of that kind in that member can be trusted.
    pub async fn synced(
        self: &Arc<Self>,
        member: &Member,
        cluster: &str,
        ar: &ApiResource,
    ) -> bool {
        let mut synced = self.ensure(member, cluster, ar);
        let wait = {
            let key = (cluster.to_string(), gvk_of(&ar.api_version, &ar.kind));
            let watches = self.watches.lock();
            watches.get(&key).map_or(Duration::ZERO, |w| {
                SYNC_WAIT.saturating_sub(w.started.elapsed())
            })
        };
        if *synced.borrow() {
            return true;
        }
        matches!(
            tokio::time::timeout(wait, synced.wait_for(|s| *s)).await,
            Ok(Ok(_))
        )
    }

    /// What `key` reports if the object holds every field of the manifest
    /// with `digest`.
    pub fn in_sync(&self, key: &MemberObject, digest: &str) -> Option<Seen> {
        let all = self.held.lock();
        let o = all.get(&key.watch)?.get(&key.object)?.ours()?;
        (o.in_sync_with.as_deref() == Some(digest)).then(|| Seen {
            status: o
                .status
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok()),
            health: o.health,
        })
    }

    /// Whether an object holds `key`'s name in the member, and whose it
    /// is, as far as a synced watch has seen.
    pub fn presence(&self, key: &MemberObject) -> Presence {
        let all = self.held.lock();
        match all.get(&key.watch).and_then(|h| h.get(&key.object)) {
            None => Presence::Absent,
            Some(Held::Ours(_)) => Presence::Ours,
            Some(Held::Foreign) => Presence::Foreign,
        }
    }

    /// Records what an apply left in the member, so the watch's echo of
    /// it is recognised and the next sync of the Work needs no round trip.
    pub fn record(
        &self,
        key: MemberObject,
        kind: &str,
        live: &Value,
        applied: &Value,
        digest: &str,
        work: &Work,
    ) {
        let observed = Observed {
            resource_version: live
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(Into::into),
            in_sync_with: contains(live, applied).then(|| digest.into()),
            status: status_text(live),
            health: interpreter::health(kind, live),
            work: self
                .ctx
                .works
                .shared_key(&packed::key(work.namespace().as_deref(), &work.name_any())),
        };
        self.hold(key, Held::Ours(observed));
    }

    /// Sets what holds `key`'s name; what held it before.
    fn hold(&self, key: MemberObject, held: Held) -> Option<Held> {
        self.held
            .lock()
            .entry(key.watch)
            .or_default()
            .insert(key.object, held)
    }

    /// Forgets Flotilla's object at `key` (a Work taking its copy out);
    /// someone else's object there stays known.
    pub fn forget_ours(&self, key: &MemberObject) {
        let mut all = self.held.lock();
        if let Some(h) = all.get_mut(&key.watch)
            && matches!(h.get(&key.object), Some(Held::Ours(_)))
        {
            h.remove(&key.object);
        }
    }

    /// The name is free again (the watch saw its object deleted); the
    /// Work its object was applied from, if it was Flotilla's.
    fn vacate(&self, key: &MemberObject) -> Option<Key> {
        let mut all = self.held.lock();
        match all.get_mut(&key.watch)?.remove(&key.object)? {
            Held::Ours(o) => Some(o.work),
            Held::Foreign => None,
        }
    }

    /// An object that is not (or no longer) Flotilla's; if it was (its
    /// label was taken off), its Work is looked at again.
    fn observe_foreign(&self, key: MemberObject) {
        if let Some(Held::Ours(was)) = self.hold(key, Held::Foreign) {
            self.requeue.add(was.work);
        }
    }

    fn ensure(
        self: &Arc<Self>,
        member: &Member,
        cluster: &str,
        ar: &ApiResource,
    ) -> watch::Receiver<bool> {
        let key = (cluster.to_string(), gvk_of(&ar.api_version, &ar.kind));
        let mut watches = self.watches.lock();
        if let Some(w) = watches.get(&key)
            && !w.task.is_finished()
        {
            return w.synced.clone();
        }
        let (tx, rx) = watch::channel(false);
        let api = Api::<LiveObject>::all_with(member.client.clone(), ar);
        let task = tokio::spawn(
            self.clone()
                .run_watch(api, cluster.to_string(), ar.clone(), tx),
        );
        watches.insert(
            key,
            MemberWatch {
                task,
                started: Instant::now(),
                synced: rx.clone(),
            },
        );
        rx
    }

    async fn run_watch(
        self: Arc<Self>,
        api: Api<LiveObject>,
        cluster: String,
        ar: ApiResource,
        synced: watch::Sender<bool>,
    ) {
        let config = watcher::Config::default();
        let mut events = watcher(api, config).default_backoff().boxed();
        // The objects of a (re)list so far: what it does not return is gone.
        let mut listed: Option<HashSet<Box<str>>> = None;
        // Whether what is held can be trusted to tell a free name: not
        // during a (re)list, nor after an error until events flow again.
        let trust = |now: bool| {
            synced.send_if_modified(|s| std::mem::replace(s, now) != now);
        };
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => {
                    trust(false);
                    listed = Some(HashSet::new());
                }
                Ok(watcher::Event::InitApply(mut obj)) => {
                    obj.typed_as(&ar);
                    let key = self.key_of(&cluster, &ar, &obj);
                    if let Some(l) = listed.as_mut() {
                        l.insert(key.object.clone());
                    }
                    self.observe(key, &obj);
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(listed) = listed.take() {
                        self.forget_unlisted(&cluster, &ar, &listed);
                    }
                    trust(true);
                }
                Ok(watcher::Event::Apply(mut obj)) => {
                    obj.typed_as(&ar);
                    // Events flow (again, after an error).
                    trust(true);
                    let key = self.key_of(&cluster, &ar, &obj);
                    self.observe(key, &obj);
                }
                Ok(watcher::Event::Delete(obj)) => {
                    trust(true);
                    let key = self.key_of(&cluster, &ar, &obj);
                    let work = self.vacate(&key).or_else(|| {
                        work_of(&obj)
                            .filter(|_| is_ours(&obj))
                            .map(|w| self.ctx.works.shared_key(&w))
                    });
                    if let Some(work) = work {
                        self.requeue.add(work);
                    }
                }
                Err(error) => {
                    trust(false);
                    if self.ctx.cluster(&cluster).is_none() {
                        break;
                    }
                    debug!(%error, %cluster, "member watch interrupted");
                }
            }
        }
        let watch = (cluster, format!("{}/{}", ar.group, ar.kind));
        self.held.lock().remove(&watch);
    }

    fn observe(&self, key: MemberObject, obj: &LiveObject) {
        match work_of(obj).filter(|_| is_ours(obj)) {
            Some(work) => self.observe_ours(key, obj, work),
            None => self.observe_foreign(key),
        }
    }

    fn key_of(&self, cluster: &str, ar: &ApiResource, obj: &LiveObject) -> MemberObject {
        member_object(
            cluster,
            &ar.api_version,
            &ar.kind,
            &obj.namespace().unwrap_or_default(),
            &obj.name_any(),
        )
    }

    /// Takes in one event's object; re-queues its Work when the object no
    /// longer holds what the Work says, or its status or health changed.
    fn observe_ours(&self, key: MemberObject, obj: &LiveObject, work_key: String) {
        // The echo of an apply `record` already took in: nothing moved.
        // (A Work changed since is reconciled by its own event.)
        if obj.metadata.deletion_timestamp.is_none()
            && let Some(rv) = obj.metadata.resource_version.as_deref()
            && self.held.lock().get(&key.watch).is_some_and(|h| {
                h.get(&key.object).and_then(Held::ours).is_some_and(|p| {
                    p.resource_version.as_deref() == Some(rv) && p.in_sync_with.is_some()
                })
            })
        {
            return;
        }
        let live = &obj.live;
        let work = self.ctx.works.get_key(&work_key);
        let name = obj.name_any();
        let namespace = obj.namespace().unwrap_or_default();
        let in_sync_with = work.as_deref().and_then(|w| {
            let (raw, manifest) = w.spec.workload.manifests.iter().find_map(|raw| {
                let m: Value = serde_json::from_str(raw.get()).ok()?;
                let same =
                    |p: &str, v: &str| m.pointer(p).and_then(Value::as_str).unwrap_or("") == v;
                (same("/kind", obj.kind())
                    && same("/metadata/name", &name)
                    && (namespace.is_empty() || same("/metadata/namespace", &namespace)))
                .then_some((raw, m))
            })?;
            let digest = manifest_digest(raw.get());
            contains(live, &prepare(&manifest, w, &digest)).then_some(digest)
        });
        let observed = Observed {
            resource_version: obj.metadata.resource_version.as_deref().map(Into::into),
            in_sync_with: in_sync_with.map(Into::into),
            status: status_text(live),
            health: interpreter::health(obj.kind(), live),
            work: self.ctx.works.shared_key(&work_key),
        };
        let requeue = {
            let previous = self.hold(key, Held::Ours(observed.clone()));
            let previous = previous.as_ref().and_then(Held::ours);
            let unchanged = previous.is_some_and(|p| {
                p.resource_version == observed.resource_version
                    || (p.status == observed.status && p.health == observed.health)
            });
            observed.in_sync_with.is_none() || (previous.is_some() && !unchanged)
        };
        if requeue || obj.metadata.deletion_timestamp.is_some() {
            self.requeue.add(observed.work.clone());
        }
    }

    fn forget_unlisted(&self, cluster: &str, ar: &ApiResource, listed: &HashSet<Box<str>>) {
        let watch = (cluster.to_string(), format!("{}/{}", ar.group, ar.kind));
        let mut gone = Vec::new();
        if let Some(held) = self.held.lock().get_mut(&watch) {
            held.retain(|name, h| {
                let keep = listed.contains(name);
                if let (false, Held::Ours(o)) = (keep, &*h) {
                    gone.push(o.work.clone());
                }
                keep
            });
        }
        self.requeue.add_all(gone);
    }
}

/// Whether a member object is Flotilla's (labelled managed).
pub fn is_ours(obj: &impl Resource) -> bool {
    obj.labels().get(labels::MANAGED).map(String::as_str) == Some("true")
}

/// The Work cache's key of the Work a member object was applied from.
fn work_of(obj: &impl Resource) -> Option<String> {
    let a = obj.annotations();
    Some(packed::key(
        Some(a.get(annotations::WORK_NAMESPACE)?),
        a.get(annotations::WORK_NAME)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_status_added_by_the_member_still_contain_the_manifest() {
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "resourceVersion": "9", "uid": "u"},
            "spec": {"replicas": 2, "progressDeadlineSeconds": 600,
                "template": {"spec": {"containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "Always"}]}}},
            "status": {"readyReplicas": 2}});
        assert!(contains(&live, &applied));
    }

    #[test]
    fn a_changed_value_a_missing_field_or_an_extra_list_element_is_drift() {
        let applied = json!({"spec": {"replicas": 2, "ports": [{"port": 80}]}, "data": {"a": "1"}});
        let changed = json!({"spec": {"replicas": 3, "ports": [{"port": 80}]}, "data": {"a": "1"}});
        let missing = json!({"spec": {"replicas": 2, "ports": [{"port": 80}]}, "data": {}});
        let extra = json!({"spec": {"replicas": 2, "ports": [{"port": 80}, {"port": 81}]}, "data": {"a": "1"}});
        for live in [changed, missing, extra] {
            assert!(!contains(&live, &applied), "{live}");
        }
        assert!(contains(&json!({"n": 2.0}), &json!({"n": 2})));
    }

    #[test]
    fn the_digest_annotation_tells_manifests_apart_that_the_live_object_both_contains() {
        // v2 dropped a label; a member still at v1 holds every field of v2,
        // but not v2's digest.
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "karmada-es-m1"},
            "spec": {"workload": {"manifests": []}}}))
        .unwrap();
        let v1 = json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}});
        let v2 = json!({"kind": "ConfigMap", "metadata": {"name": "c"}});
        let live = prepare(&v1, &work, &manifest_digest(&v1.to_string()));
        assert!(contains(
            &live,
            &prepare(&v1, &work, &manifest_digest(&v1.to_string()))
        ));
        assert!(!contains(
            &live,
            &prepare(&v2, &work, &manifest_digest(&v2.to_string()))
        ));
    }
}
