//! The binding-status controller: folds each target cluster's Work status
//! into the binding's aggregatedStatus and FullyApplied condition, then
//! the members' statuses into the template's own status, so that
//! `kubectl get deploy` on the hub shows the fleet.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use parking_lot::Mutex;

use serde::Deserialize;
use serde_json::{Value, json};
use tracing::debug;

use crate::api::{AggregatedStatusItem, Binding, Scope, Work, WorkStatus, annotations};
use crate::binding::{binding_api, template, template_api, work_key, work_keys, work_name};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::interpreter;
use crate::packed::{self, Key, Memo, PackedStore};
use crate::queue::{self, Next, WorkQueue};

/// How long a binding's changes gather before its status is written.
/// Scheduling writes a binding twice and its Works report in quick
/// succession; one status write for the lot, instead of one per change
/// (each racing the scheduler's own status write), is what lets the
/// scheduler place bindings at full speed in a burst.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// How long a binding's status waits for Works that are queued but not
/// yet tried (a Work with no condition at all) before it reports them as
/// not applied. In a burst the execution controller's queue is seconds
/// long: every binding's status was written once with all its Works
/// pending and again when they were applied, one hub write in 27 of a
/// template's, for a state the status already implies (no FullyApplied
/// yet). A new binding's Works still to be created wait the same way. A
/// Work tried and failed, or held back (suspended dispatching),
/// has a condition and is reported at once, as is a pending Work of a
/// binding whose status says FullyApplied (a cluster added to its
/// placement).
const PENDING_GRACE: Duration = Duration::from_secs(30);

/// Bindings whose status is written at once (Karmada's controllers run 5
/// workers each). In a burst, placement goes first: the scheduler runs
/// with more, and status reporting catches up behind it.
const STATUS_SYNCS: usize = 5;

/// Works' statuses kept decoded for bindings still settling
/// ([`packed::Memo`]): a binding on a thousand clusters reads all its
/// Works at each report, and decoded each of them every time. A settled
/// binding's (FullyApplied) are forgotten.
const WORK_MEMO: usize = 20_000;

/// Bindings on fewer clusters read their Works afresh: there the decodes
/// cost less than the memory of holding them (10 MiB more of the hub at
/// 3,000 × 10, 57 MiB at 2,000 × 100, for no time saved).
const MEMO_FROM_TARGETS: usize = 200;

/// Most bindings [`Waiting`] remembers; past that it starts again empty.
const WAITING_BINDINGS: usize = 100_000;

/// For each binding whose last read of its Works found one not yet tried
/// (or not yet created) within its grace, where to look next and when the
/// earliest such grace ends. In a burst a binding comes back each time
/// one of its Works reports, and while any Work is still untried the
/// answer is "wait": a Work at a time from where the last look stopped
/// gives it, where reading every Work of the binding (on 100 clusters, 100
/// decodes a report) cost a tenth of the hub's CPU.
struct Waiting {
    bindings: Mutex<HashMap<String, Waits>>,
}

struct Waits {
    /// The binding's placement when this was recorded
    /// ([`placement_of`]): another placement is read whole again.
    placement: u64,
    /// The Work (index into the keys) the next look starts from.
    next: usize,
    /// When the earliest grace found by the last full read ends: no later
    /// than the grace of any Work untried then. Since then a Work can only
    /// be tried, or be created (its grace ends after its binding's), so
    /// waking then is never late.
    until: Timestamp,
}

/// What a binding's Work keys follow, told without making them: the
/// binding (uid) and its spec (generation), which holds the template and
/// the target clusters. A binding comes back at each report of one of
/// its Works; making all its keys each time was quadratic in its
/// clusters. Without a generation (a server that sets none), the keys.
fn placement_of(binding: &Binding) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    match binding.metadata.generation {
        Some(generation) => hasher.hash_one((binding.metadata.uid.as_deref(), generation)),
        None => hasher.hash_one(work_keys(binding)),
    }
}

impl Waiting {
    fn new() -> Waiting {
        Waiting {
            bindings: Mutex::new(HashMap::new()),
        }
    }

    /// How much longer `binding` waits, if one of its `works` (read by
    /// index) is still untried within its grace: looked for from where the
    /// last look stopped, one decode at a time. None: read every Work
    /// again.
    fn still(
        &self,
        binding: &str,
        placement: u64,
        works: usize,
        read: impl Fn(usize) -> Option<Arc<StatusOfWork>>,
        binding_created: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Duration> {
        let (next, until) = {
            let bindings = self.bindings.lock();
            let w = bindings.get(binding)?;
            (w.placement == placement).then_some((w.next, w.until))?
        };
        if crate::time::until(now, until).is_zero() {
            return None;
        }
        let (found, left) = (0..works)
            .map(|i| (next + i) % works)
            .find_map(|i| Some((i, waits_for(read(i).as_deref(), binding_created, now)?)))?;
        let left = left.min(crate::time::until(now, until));
        if let Some(w) = self.bindings.lock().get_mut(binding) {
            w.next = found;
        }
        Some(left)
    }

    fn wait(&self, binding: &str, placement: u64, next: usize, wait: Duration, now: Timestamp) {
        let mut bindings = self.bindings.lock();
        if bindings.len() >= WAITING_BINDINGS && !bindings.contains_key(binding) {
            bindings.clear();
        }
        let waits = Waits {
            placement,
            next,
            until: crate::time::after(now, wait),
        };
        bindings.insert(binding.to_string(), waits);
    }

    fn done(&self, binding: &str) {
        self.bindings.lock().remove(binding);
    }
}

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    binding_changes: impl Stream<Item = Key> + Send + 'static,
    work_owners: impl Stream<Item = String> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("binding-status-controller"));
    let memo = Arc::new(Memo::new(WORK_MEMO));
    let waiting = Arc::new(Waiting::new());
    let gather = {
        let (queue, bindings) = (queue.clone(), bindings.clone());
        let keys = futures::stream::select(
            binding_changes,
            work_owners.map(move |key| bindings.shared_key(&key)),
        );
        async move {
            let mut keys = std::pin::pin!(keys);
            while let Some(key) = keys.next().await {
                queue.add_after(key, DEBOUNCE);
            }
        }
    };
    tokio::join!(
        gather,
        queue::reconcile_packed(queue, bindings, STATUS_SYNCS, move |b| {
            reconcile(b, ctx.clone(), memo.clone(), waiting.clone())
        }),
    );
}

/// The key of the binding of `scope` each changed Work belongs to.
pub fn work_owners(
    works: &Subscribers<Change<Work>>,
    scope: Scope,
) -> impl Stream<Item = String> + Send + 'static {
    works.subscribe(move |c: &Change<Work>| owner(&c.object, scope))
}

/// The key of the binding a Work belongs to, from the annotations the
/// binding controller writes, if it is of `scope`.
pub(crate) fn owner(work: &Work, scope: Scope) -> Option<String> {
    let a = work.annotations();
    match scope {
        Scope::Namespaced => {
            let name = a.get(annotations::RB_NAME)?;
            let ns = a.get(annotations::RB_NAMESPACE)?;
            Some(packed::key(Some(ns), name))
        }
        Scope::Cluster => {
            let name = a.get(annotations::CRB_NAME)?;
            Some(packed::key(None, name))
        }
    }
}

/// The part of a Work its binding's status is made of: a binding's status
/// reads every Work of the binding each time one of them changes, so the
/// manifests are not decoded for it.
#[derive(Deserialize)]
struct StatusOfWork {
    #[serde(default)]
    metadata: CreatedAt,
    #[serde(default)]
    status: Option<WorkStatus>,
}

#[derive(Deserialize, Default)]
struct CreatedAt {
    #[serde(default, rename = "creationTimestamp")]
    created: Option<Timestamp>,
}

/// Whether a Work has not been tried yet (no condition at all).
fn untried(w: &StatusOfWork) -> bool {
    w.status.as_ref().is_none_or(|s| s.conditions.is_empty())
}

/// What is left of the grace of a Work (None: not created yet) of a
/// binding created at `binding_created`, if it is untried and its grace
/// (from its own creation, or its binding's) has not passed.
fn waits_for(
    work: Option<&StatusOfWork>,
    binding_created: Option<Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    let since = match work {
        Some(w) if untried(w) => w.metadata.created,
        Some(_) => return None,
        None => binding_created,
    };
    since
        .map(|t| crate::time::until(now, crate::time::after(t, PENDING_GRACE)))
        .filter(|left| !left.is_zero())
}

/// How long to wait before writing a status of `works` (one per target
/// cluster, None where not created yet) of a binding created at
/// `binding_created`, and the first Work that waits: while a Work created
/// less than [`PENDING_GRACE`] ago has not been tried yet, or one of a
/// binding that new is still to be created, until the first of them has
/// waited that long. A change of any of the Works brings the binding back
/// sooner.
fn pending_wait(
    works: &[Option<Arc<StatusOfWork>>],
    binding_created: Option<Timestamp>,
    now: Timestamp,
) -> Option<(usize, Duration)> {
    let waits = works
        .iter()
        .enumerate()
        .filter_map(|(i, w)| Some((i, waits_for(w.as_deref(), binding_created, now)?)));
    let first = waits.clone().next()?.0;
    let wait = waits.map(|(_, left)| left).min()?;
    Some((first, wait))
}

fn item(cluster: &str, work: Option<&StatusOfWork>) -> AggregatedStatusItem {
    let status = work.and_then(|w| w.status.as_ref());
    let applied = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Applied"));
    let manifest = status.and_then(|s| s.manifest_statuses.first());
    AggregatedStatusItem {
        cluster_name: cluster.into(),
        status: manifest.and_then(|m| m.status.clone()),
        applied: applied.is_some_and(|c| c.status == "True"),
        applied_message: applied
            .filter(|c| c.status != "True")
            .map(|c| c.message.clone())
            .or_else(|| {
                work.is_none()
                    .then(|| "Work is not created yet".to_string())
            }),
        health: Some(
            manifest
                .and_then(|m| m.health.clone())
                .unwrap_or_else(|| "Unknown".into()),
        ),
    }
}

async fn reconcile(
    binding: Arc<Binding>,
    ctx: Ctx,
    memo: Arc<Memo<StatusOfWork>>,
    waiting: Arc<Waiting>,
) -> Result<Next, Error> {
    let targets = &binding.spec.clusters;
    let binding_key = packed::key(binding.namespace().as_deref(), &binding.name_any());
    let memo = (targets.len() >= MEMO_FROM_TARGETS).then_some(&*memo);
    let forget = || {
        if let Some(memo) = memo {
            work_keys(&binding).iter().for_each(|k| memo.forget(k));
        }
    };
    if binding.metadata.deletion_timestamp.is_some() {
        forget();
        waiting.done(&binding_key);
        return Ok(None);
    }
    let read = |k: &str| match memo {
        Some(memo) => ctx.works.get_key_memo(k, memo),
        None => ctx.works.get_key_as(k).map(Arc::new),
    };
    // Waiting hides nothing while the status does not claim FullyApplied.
    let claims_applied = binding.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "FullyApplied" && c.status == "True")
    });
    let binding_created = binding.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let now = Timestamp::now();
    let placement = placement_of(&binding);
    if !claims_applied {
        // Only the Work looked at gets its key made.
        let name = work_name(&binding);
        let read_at = |i: usize| read(&work_key(&name, &targets[i].name));
        let still = waiting.still(
            &binding_key,
            placement,
            targets.len(),
            read_at,
            binding_created,
            now,
        );
        if let Some(wait) = still {
            return Ok(Some(wait));
        }
    }
    let works: Vec<Option<Arc<StatusOfWork>>> =
        work_keys(&binding).iter().map(|k| read(k)).collect();
    if !claims_applied && let Some((first, wait)) = pending_wait(&works, binding_created, now) {
        waiting.wait(&binding_key, placement, first, wait, now);
        return Ok(Some(wait));
    }
    waiting.done(&binding_key);
    let items: Vec<AggregatedStatusItem> = binding
        .spec
        .clusters
        .iter()
        .zip(&works)
        .map(|(t, work)| item(&t.name, work.as_deref()))
        .collect();
    let mut status = binding.status.clone().unwrap_or_default();
    let failed: Vec<String> = items
        .iter()
        .filter(|i| !i.applied)
        .map(|i| {
            format!(
                "{}: {}",
                i.cluster_name,
                i.applied_message.as_deref().unwrap_or("not applied")
            )
        })
        .collect();
    let fully = !items.is_empty() && failed.is_empty();
    let (reason, message) = if fully {
        (
            "FullyAppliedSuccess",
            "All works have been successfully applied".to_string(),
        )
    } else if items.is_empty() {
        (
            "FullyAppliedFailed",
            "The binding is not scheduled to any cluster".to_string(),
        )
    } else {
        ("FullyAppliedFailed", failed.join("; "))
    };
    let mut changed = conditions::set(
        &mut status.conditions,
        "FullyApplied",
        fully,
        reason,
        &message,
    );
    if status.aggregated_status != items {
        status.aggregated_status = items.clone();
        changed = true;
    }
    if changed {
        let patch = json!({
            "metadata": {"resourceVersion": binding.resource_version()},
            "status": {"aggregatedStatus": status.aggregated_status, "conditions": status.conditions},
        });
        crate::writes::merge_patch_status(
            &binding_api(&ctx, &binding),
            &binding.name_any(),
            &patch,
        )
        .await?;
    }
    reflect_into_template(&ctx, &binding, &items).await?;
    if fully {
        forget();
    }
    Ok(None)
}

async fn reflect_into_template(
    ctx: &Ctx,
    binding: &Binding,
    items: &[AggregatedStatusItem],
) -> Result<(), Error> {
    let r = &binding.spec.resource;
    if !matches!(
        r.kind.as_str(),
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "Service"
    ) {
        return Ok(());
    }
    let Some(template) = template(ctx, binding).await? else {
        return Ok(());
    };
    if template.metadata.uid.as_deref() != Some(r.uid.as_str()) {
        return Ok(());
    }
    let value = serde_json::to_value(&template)?;
    let Some(aggregated) = interpreter::aggregate_status(&r.kind, &value, items) else {
        return Ok(());
    };
    let current = value.get("status").cloned().unwrap_or(Value::Null);
    let differs = aggregated
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| current.get(k) != Some(v));
    if !differs {
        return Ok(());
    }
    let api = template_api(ctx, binding).await?;
    let patch = json!({"status": aggregated});
    match crate::writes::merge_patch_status(&api, &r.name, &patch).await {
        Ok(_) => {
            debug!(kind = %r.kind, name = %r.name, "template status updated");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(created: &str, status: Value) -> Option<Arc<StatusOfWork>> {
        serde_json::from_value(json!({
            "metadata": {"creationTimestamp": created},
            "status": status,
        }))
        .ok()
        .map(Arc::new)
    }

    #[test]
    fn a_status_waits_only_for_works_not_yet_tried_and_not_for_long() {
        let now: Timestamp = "2026-11-27T10:00:30Z".parse().unwrap();
        let old_binding = Some("2026-11-27T09:00:00Z".parse().unwrap());
        let new_binding = Some("2026-11-27T10:00:10Z".parse().unwrap());
        let applied = json!({"conditions": [{"type": "Applied", "status": "True",
            "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": "2026-11-27T10:00:01Z"}]});
        let failed = json!({"conditions": [{"type": "Applied", "status": "False",
            "reason": "AppliedFailed", "message": "refused", "lastTransitionTime": "2026-11-27T10:00:01Z"}]});
        // One Work queued 10 s ago and not tried: wait out its grace.
        let queued = || work("2026-11-27T10:00:20Z", Value::Null);
        let applied_work = || work("2026-11-27T10:00:00Z", applied.clone());
        let secs = |s| Some(Duration::from_secs(s));
        let pending_wait =
            |works: &[_], created, now| pending_wait(works, created, now).map(|(_, w)| w);
        assert_eq!(
            pending_wait(&[queued(), applied_work()], old_binding, now),
            secs(20)
        );
        // A new binding's Work not created yet: wait; an old one's: write.
        assert_eq!(pending_wait(&[None], new_binding, now), secs(10));
        assert_eq!(pending_wait(&[queued(), None], new_binding, now), secs(10));
        assert_eq!(pending_wait(&[None], old_binding, now), None);
        // Every Work tried (applied or failed): write.
        let failed_work = work("2026-11-27T10:00:20Z", failed);
        assert_eq!(
            pending_wait(&[failed_work, applied_work()], new_binding, now),
            None
        );
        // Queued for longer than the grace: reported as not applied.
        let long_queued = work("2026-11-27T09:59:00Z", json!({}));
        assert_eq!(
            pending_wait(std::slice::from_ref(&long_queued), old_binding, now),
            None
        );
        // The Work to look at first is one that waits, not one past its grace.
        assert_eq!(
            super::pending_wait(&[long_queued, queued()], old_binding, now),
            Some((1, Duration::from_secs(20)))
        );
    }

    #[test]
    fn a_placement_is_told_apart_by_its_binding_and_spec() {
        let binding = |uid: &str, generation: Option<i64>, clusters: &[&str]| -> Binding {
            serde_json::from_value(json!({
                "metadata": {"name": "web-deployment", "namespace": "default",
                             "uid": uid, "generation": generation},
                "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment",
                                      "namespace": "default", "name": "web"},
                         "clusters": clusters.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
            }))
            .unwrap()
        };
        let first = placement_of(&binding("u1", Some(2), &["m1", "m2"]));
        assert_eq!(first, placement_of(&binding("u1", Some(2), &["m1", "m2"])));
        assert_ne!(first, placement_of(&binding("u1", Some(3), &["m1", "m3"])));
        assert_ne!(first, placement_of(&binding("u2", Some(2), &["m1", "m2"])));
        // Without a generation, the clusters themselves.
        let a = placement_of(&binding("u1", None, &["m1", "m2"]));
        assert_eq!(a, placement_of(&binding("u1", None, &["m1", "m2"])));
        assert_ne!(a, placement_of(&binding("u1", None, &["m1", "m3"])));
    }

    #[test]
    fn a_binding_waiting_on_an_untried_work_looks_at_one_work_at_a_time_until_all_are_tried() {
        let now: Timestamp = "2026-11-27T10:00:30Z".parse().unwrap();
        let binding_created = Some("2026-11-27T10:00:00Z".parse().unwrap());
        let applied = json!({"conditions": [{"type": "Applied", "status": "True",
            "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": "2026-11-27T10:00:01Z"}]});
        let keys: Vec<String> = ["a", "b", "c"].map(String::from).into();
        // b created 20 s ago and c 10 s ago, neither tried: wait 10 s, for b.
        let states = std::cell::RefCell::new(HashMap::from([
            ("a", work("2026-11-27T10:00:05Z", applied.clone())),
            ("b", work("2026-11-27T10:00:10Z", Value::Null)),
            ("c", work("2026-11-27T10:00:20Z", Value::Null)),
        ]));
        let read = |k: &str| states.borrow().get(k).cloned().flatten();
        let works: Vec<_> = keys.iter().map(|k| read(k)).collect();
        let (first, wait) = pending_wait(&works, binding_created, now).unwrap();
        assert_eq!((first, wait), (1, Duration::from_secs(10)));
        let waiting = Waiting::new();
        let placement = 1;
        waiting.wait("ns/rb", placement, first, wait, now);
        let later: Timestamp = "2026-11-27T10:00:32Z".parse().unwrap();
        let read_at = |i: usize| read(&keys[i]);
        let still =
            |at| waiting.still("ns/rb", placement, keys.len(), read_at, binding_created, at);
        // b still untried: the wait's end stands, read from b alone.
        assert_eq!(still(later), Some(Duration::from_secs(8)));
        // b tried: c still waits, and the wait never ends later than the
        // earliest grace found (b's), so no Work is reported late.
        states
            .borrow_mut()
            .insert("b", work("2026-11-27T10:00:10Z", applied.clone()));
        assert_eq!(still(later), Some(Duration::from_secs(8)));
        // Every Work tried: read them all again (and write the status).
        states
            .borrow_mut()
            .insert("c", work("2026-11-27T10:00:20Z", applied.clone()));
        assert_eq!(still(later), None);
        // Another placement, or the earliest grace over: read all again.
        states
            .borrow_mut()
            .insert("c", work("2026-11-27T10:00:20Z", Value::Null));
        assert!(still(later).is_some());
        let other_placement = 2;
        assert_eq!(
            waiting.still(
                "ns/rb",
                other_placement,
                keys.len(),
                read_at,
                binding_created,
                later
            ),
            None
        );
        assert_eq!(still("2026-11-27T10:00:40Z".parse().unwrap()), None);
        waiting.done("ns/rb");
        assert_eq!(still(later), None);
    }
}
