//! The execution controller: applies each Work's manifests to its member
//! (in the control plane, for Push members; in a Pull member's agent, for
//! that member) with server-side apply, so fields the member owns (a
//! Service's clusterIP, replicas under an HPA) stay the member's, and
//! drift in the fields Flotilla applies is reverted. Objects Flotilla did
//! not create are left alone unless the policy says Overwrite. Member
//! objects are watched, so their status flows back into the Work and a
//! deleted or edited copy is re-applied at once.

mod apply;
pub use apply::identify;
mod live;
mod observed;

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tracing::debug;

use crate::api::{
    EXECUTION_PREFIX, ManifestStatus, ResourceIdentifier, Work, WorkStatus, annotations, finalizers,
};
use crate::conditions;
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::finalizer;
use crate::packed::{Key, PackedStore};
use crate::queue::{self, LineLimit, Next, WorkQueue};
use observed::MemberWatches;

pub use apply::FIELD_MANAGER;
use apply::Leaving;

/// How often every Work is checked again even without events: a safety
/// net for changes a member's watch could not report. One sweep for all,
/// rather than a timer per Work held in the queue.
const RESYNC: Duration = Duration::from_secs(300);

/// How often a sweep that is due looks again while Works wait in the
/// queue (a burst): the sweep goes after them, not ahead of them.
const SWEEP_WAIT: Duration = Duration::from_secs(1);

/// How often a deleted Work whose member is not ready looks again.
const NOT_READY_RETRY: Duration = Duration::from_secs(5);

/// Work applies in flight shared by the fleet's members on 2 cores,
/// beyond each one's `--concurrent-work-syncs`: each member of a fleet of
/// up to 10 gets [`MOST_WORK_SYNCS_PER_MEMBER`], so that in a burst each
/// member commits more applies per fsync and Works wait less; a fleet of
/// 20 or more stays at the floor. Both grow with the cores
/// (`Options::scaled`): on 16, 100 in flight bounded a burst of 10,000 ×
/// 10 at 6,000 Works a second, each waiting 5 s in the queue, with half
/// the cores idle (docs/benchmarks.md). When applies went over HTTP/1.1,
/// each held a connection to its member, about 200 KiB of the hub's
/// memory; they now share one per member (HTTP/2). On 2
/// cores (docs/benchmarks.md) 16 per member instead of 5 took the p99
/// latency of 10,000 × 10 from 46 to 21 s but the hub's peak RSS from 198
/// to 249 MiB; 10 took it from 43 to 26 s with the peak within the
/// spread; and a share counted among the busy members instead of all of
/// them let a 100-member burst open 96 MiB more of connections at its
/// start and end.
const WORK_SYNCS_SHARED: usize = 100;
/// The most applies in flight to one member (unless
/// `--concurrent-work-syncs` asks for more).
const MOST_WORK_SYNCS_PER_MEMBER: usize = 10;

struct Execution {
    shared: Ctx,
    watches: Arc<MemberWatches>,
    /// Namespaces known to exist in each member.
    namespaces: Mutex<HashSet<(String, String)>>,
}

/// A Work's line in the queue: its execution namespace, that is its
/// member.
fn member_of(key: &Key) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

pub async fn run(ctx: Ctx, changes: impl futures::Stream<Item = Key> + Send + 'static) {
    // Each member has its own line and its own writes in flight: a burst
    // for one member, or one that answers slowly, does not hold up the
    // others, and the fleet's throughput grows with its members.
    let floor = usize::from(ctx.options.work_concurrency);
    let queue = WorkQueue::sharded(
        member_of,
        LineLimit {
            floor,
            ceiling: floor.max(ctx.options.scaled(MOST_WORK_SYNCS_PER_MEMBER)),
            budget: ctx.options.scaled(WORK_SYNCS_SHARED),
        },
        ctx.metrics.queue("execution-controller"),
    );
    let exec = Arc::new(Execution {
        shared: ctx.clone(),
        watches: MemberWatches::new(ctx.clone(), queue.clone()),
        namespaces: Mutex::default(),
    });
    let works = ctx.works.clone();
    tokio::join!(
        queue::feed(queue.clone(), changes),
        sweep(queue.clone(), move || works.keys()),
        queue::reconcile_packed(
            queue,
            ctx.works.clone(),
            // Bounded by the members' lines, not here.
            usize::MAX,
            move |work| reconcile(work, exec.clone()),
        )
    );
}

/// Every RESYNC, puts every Work (`all`) in the queue again. A sweep that
/// falls due while Works wait (a burst of new ones) waits until the queue
/// has emptied, for at most one more RESYNC: a million Works queued again
/// ahead of the burst would hold up the new ones by as many syncs.
async fn sweep(queue: Arc<WorkQueue<Key>>, all: impl Fn() -> Vec<Key>) {
    let mut every = tokio::time::interval(RESYNC);
    // A sweep that waited its longest is not followed by another at once.
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let latest = tokio::time::Instant::now() + RESYNC;
        while !queue.is_empty() && tokio::time::Instant::now() < latest {
            tokio::time::sleep(SWEEP_WAIT).await;
        }
        queue.add_all(all());
    }
}

/// The Works to reconcile for a change of theirs: every change but one
/// that moved only the status. The controller's own status write would
/// otherwise bring each Work back once more, to find its member objects
/// as they were (as Karmada's execution controller, whose update
/// predicate ignores status). Member drift comes through the member
/// watches, not through the Work.
pub fn changes(
    works: &Subscribers<Change<Work>>,
    store: PackedStore<Work>,
) -> impl futures::Stream<Item = Key> + Send + 'static {
    let mut seen: HashMap<Key, u64> = HashMap::new();
    works.subscribe(move |c: &Change<Work>| {
        if !store.contains_key(&c.key) {
            seen.remove(&c.key);
            return Some(c.key.clone());
        }
        let now = beyond_status(&c.object);
        (seen.insert(c.key.clone(), now) != Some(now)).then(|| c.key.clone())
    })
}

/// A digest of everything of a Work but its status that its reconcile
/// reads: the spec (by generation), deletion, finalizers, labels and
/// annotations.
fn beyond_status(work: &Work) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let m = &work.metadata;
    (
        m.generation,
        m.deletion_timestamp.is_some(),
        &m.finalizers,
        &m.labels,
        &m.annotations,
    )
        .hash(&mut h);
    h.finish()
}

fn cluster_of(work: &Work) -> Option<String> {
    work.namespace()?
        .strip_prefix(EXECUTION_PREFIX)
        .map(str::to_string)
}

async fn reconcile(work: Arc<Work>, exec: Arc<Execution>) -> Result<Next, Error> {
    let Some(cluster_name) = cluster_of(&work) else {
        return Ok(None);
    };
    if crate::mcs::pull::is_suppressed(&work) {
        // A report from the member (Karmada's suppressed instruction).
        return Ok(None);
    }
    let ctx = &exec.shared;
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &work.namespace().unwrap_or_default());
    let cluster = ctx.cluster(&cluster_name);
    if cluster
        .as_ref()
        .is_some_and(|c| c.spec.sync_mode != ctx.options.applies_sync_mode)
    {
        // The hub cannot reach a Pull cluster: its agent applies its
        // Works, finalizers included. An agent applies nothing else.
        return Ok(None);
    }
    if work.metadata.deletion_timestamp.is_some() {
        if !work.finalizers().iter().any(|f| f == finalizers::EXECUTION) {
            return Ok(None);
        }
        let leaving = match work.spec.preserve_resources_on_deletion {
            Some(true) => Leaving::Release,
            _ => Leaving::Delete,
        };
        match &cluster {
            Some(c) if c.is_ready() => {
                let member = ctx.members.get(c).await?;
                for m in &work.spec.workload.parsed() {
                    apply::leave_member(&exec, &member, &cluster_name, &work, m, leaving).await?;
                }
            }
            // As Karmada: the copy is deleted (or released) once the member
            // is back, so that nothing is left behind still marked as a
            // Work's. Only a member being unjoined (or gone) lets its Works
            // go unreached.
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                debug!(cluster = %cluster_name, work = %work.name_any(), "member not ready; deleting its copy once it is");
                return Ok(Some(NOT_READY_RETRY));
            }
            _ => {}
        }
        finalizer::remove(&api, &*work, finalizers::EXECUTION).await?;
        return Ok(None);
    }
    if finalizer::add(&api, &*work, finalizers::EXECUTION).await? {
        // The update comes back as an event and applies then.
        return Ok(None);
    }
    let Some(cluster) = cluster else {
        return Ok(Some(Duration::from_secs(5)));
    };
    let mut status = work.status.clone().unwrap_or_default();
    if work.spec.suspend_dispatching == Some(true) {
        conditions::set(
            &mut status.conditions,
            "Dispatching",
            false,
            "SuspendDispatching",
            "Dispatching is suspended by the policy",
        );
        write_status(&api, &work, status).await?;
        return Ok(None);
    }
    conditions::set(
        &mut status.conditions,
        "Dispatching",
        true,
        "Dispatching",
        "Work is being dispatched to the member",
    );
    let started = Instant::now();
    let member = match ctx.members.get(&cluster).await {
        Ok(m) => m,
        Err(e) => {
            conditions::set(
                &mut status.conditions,
                "Applied",
                false,
                "AppliedFailed",
                &e.to_string(),
            );
            write_status(&api, &work, status).await?;
            return Err(e.into());
        }
    };
    let conflict_overwrite = work
        .annotations()
        .get(annotations::CONFLICT_RESOLUTION)
        .map(String::as_str)
        == Some("overwrite");
    let mut manifest_statuses = Vec::new();
    let mut failures = Vec::new();
    for (i, raw) in work.spec.workload.manifests.iter().enumerate() {
        match apply::sync(
            &exec,
            &member,
            &cluster_name,
            &work,
            raw.get(),
            conflict_overwrite,
        )
        .await
        {
            Ok(outcome) => {
                manifest_statuses.push(ManifestStatus {
                    identifier: ResourceIdentifier {
                        ordinal: i as i32,
                        ..outcome.identifier
                    },
                    status: outcome.status,
                    health: Some(outcome.health.into()),
                });
            }
            Err(message) => failures.push(message),
        }
    }
    // A manifest dropped from the Work leaves its member too (Argo CD's
    // prune, a ManifestWork's removed manifest): what the last status
    // reported as applied, and the Work no longer holds.
    let held = work.spec.workload.parsed();
    for gone in dropped(&status.manifest_statuses, &held) {
        if let Err(e) =
            apply::leave_member(&exec, &member, &cluster_name, &work, &gone, Leaving::Delete).await
        {
            failures.push(e.to_string());
            // Still reported, so that the next try prunes it again.
            if let Some(s) = status
                .manifest_statuses
                .iter()
                .find(|s| identity_of(&s.identifier) == identity_of_manifest(&gone))
            {
                manifest_statuses.push(s.clone());
            }
        }
    }
    let ok = failures.is_empty();
    ctx.metrics.observe_work_sync(ok, started.elapsed());
    if ok {
        conditions::set(
            &mut status.conditions,
            "Applied",
            true,
            "AppliedSuccessful",
            "Manifest has been successfully applied",
        );
    } else {
        conditions::set(
            &mut status.conditions,
            "Applied",
            false,
            "AppliedFailed",
            &failures.join("; "),
        );
    }
    status.manifest_statuses = manifest_statuses;
    // Tests of recovery stop here: applied to the member, not reported.
    flotilla_failpoint::hit("execution-after-member-write");
    write_status(&api, &work, status).await?;
    // A synced Work is looked at again by the periodic sweep.
    Ok((!ok).then_some(Duration::from_secs(2)))
}

/// group, kind, namespace, name.
type Identity = (String, String, String, String);

fn identity_of(id: &ResourceIdentifier) -> Identity {
    (
        id.group.clone(),
        id.kind.clone(),
        id.namespace.clone(),
        id.name.clone(),
    )
}

fn identity_of_manifest(m: &Value) -> Identity {
    let (api_version, kind, namespace, name) = identify(m);
    let group = api_version
        .split_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (group, kind, namespace, name)
}

/// The objects a Work's last status reports that its manifests no longer
/// hold, as minimal manifests to delete by. A namespace missing on either
/// side matches any (a cluster-scoped object's identifier has none, a
/// manifest may leave its namespace to a default): never delete what the
/// Work may still mean.
fn dropped(reported: &[ManifestStatus], held: &[Value]) -> Vec<Value> {
    let held: Vec<Identity> = held.iter().map(identity_of_manifest).collect();
    reported
        .iter()
        .filter(|s| {
            let (g, k, ns, n) = identity_of(&s.identifier);
            !held.iter().any(|(hg, hk, hns, hn)| {
                *hg == g && *hk == k && *hn == n && (ns.is_empty() || hns.is_empty() || *hns == ns)
            })
        })
        .map(|s| {
            let id = &s.identifier;
            let api_version = if id.group.is_empty() {
                id.version.clone()
            } else {
                format!("{}/{}", id.group, id.version)
            };
            json!({"apiVersion": api_version, "kind": id.kind,
                   "metadata": {"name": id.name, "namespace": id.namespace}})
        })
        .collect()
}

async fn write_status(api: &Api<Work>, work: &Work, status: WorkStatus) -> Result<(), Error> {
    if work.status.as_ref() == Some(&status) {
        return Ok(());
    }
    patch_status(api, work, json!({"status": status})).await
}

/// Merge-patches a Work's status; a Work gone meanwhile is no error.
pub async fn patch_status(api: &Api<Work>, work: &Work, patch: Value) -> Result<(), Error> {
    match crate::writes::merge_patch_status(api, &work.name_any(), &patch).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Runs the sweep over a queue holding `waiting`, counting its sweeps.
    fn sweeping(waiting: &[&str]) -> (Arc<WorkQueue<Key>>, Arc<AtomicUsize>) {
        let queue = WorkQueue::new();
        queue.add_all(waiting.iter().map(|k| Key::from(*k)));
        let sweeps = Arc::new(AtomicUsize::new(0));
        let counted = sweeps.clone();
        tokio::spawn(sweep(queue.clone(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
            vec![Key::from("karmada-es-m1/swept")]
        }));
        (queue, sweeps)
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_due_during_a_burst_waits_for_the_queue_to_empty() {
        let (queue, sweeps) = sweeping(&["karmada-es-m1/new"]);
        tokio::time::sleep(RESYNC + SWEEP_WAIT * 5).await;
        assert_eq!(
            sweeps.load(Ordering::SeqCst),
            0,
            "swept ahead of a waiting Work"
        );
        let taken = Arc::new(Mutex::new(Vec::new()));
        let seen = taken.clone();
        tokio::spawn(queue.clone().run(1, move |key: Key| {
            seen.lock().push(key);
            async {}
        }));
        tokio::time::sleep(SWEEP_WAIT * 3).await;
        assert_eq!(sweeps.load(Ordering::SeqCst), 1);
        assert_eq!(
            taken.lock().as_slice(),
            [
                Key::from("karmada-es-m1/new"),
                Key::from("karmada-es-m1/swept")
            ],
            "the waiting Work first, then the sweep's"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_that_never_empties_still_gets_its_sweep() {
        let (_queue, sweeps) = sweeping(&["karmada-es-m1/stuck"]);
        tokio::time::sleep(RESYNC * 2 - SWEEP_WAIT * 5).await;
        assert_eq!(sweeps.load(Ordering::SeqCst), 0);
        tokio::time::sleep(SWEEP_WAIT * 10).await;
        assert_eq!(
            sweeps.load(Ordering::SeqCst),
            1,
            "a sweep waits one RESYNC at most"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_queue_is_swept_every_resync() {
        let (queue, sweeps) = sweeping(&[]);
        tokio::spawn(queue.clone().run(1, |_key: Key| async {}));
        tokio::time::sleep(RESYNC * 3 + SWEEP_WAIT).await;
        assert_eq!(sweeps.load(Ordering::SeqCst), 3);
    }

    fn reported(group: &str, kind: &str, namespace: &str, name: &str) -> ManifestStatus {
        ManifestStatus {
            identifier: ResourceIdentifier {
                ordinal: 0,
                group: group.into(),
                version: "v1".into(),
                kind: kind.into(),
                resource: String::new(),
                namespace: namespace.into(),
                name: name.into(),
            },
            status: None,
            health: None,
        }
    }

    #[test]
    fn only_what_the_work_no_longer_holds_is_dropped() {
        let statuses = [
            reported("apps", "Deployment", "web", "api"),
            reported("", "ConfigMap", "web", "old"),
            reported("", "Namespace", "", "web"),
            reported("", "ConfigMap", "default", "defaulted"),
        ];
        let held = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "web"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web", "namespace": "x"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "defaulted"}}),
        ];
        let gone = dropped(&statuses, &held);
        assert_eq!(
            gone,
            vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "web"}})
            ]
        );
        assert!(dropped(&statuses[..1], &held).is_empty());
    }
}
