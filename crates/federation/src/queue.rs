//! A keyed work queue with client-go's guarantees: a key waits at most
//! once however often it is added, no key is processed by two workers at
//! once, and a key added while it is processed runs again afterwards.
//!
//! It is the one way a controller runs here: each queue exports
//! client-go's workqueue metrics under its controller's name, and each
//! reconcile runs in a `reconcile{controller, key}` span. Objects are
//! looked up when their key's turn comes, in a packed store
//! ([`reconcile_packed`]: templates, bindings and Works, which are many)
//! or a reflector store of whole objects ([`reconcile_stored`]: clusters,
//! policies, autoscalers); the front ends, whose objects are few, run
//! whole passes as a queue of one key ([`crate::passes`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use flotilla_client::follow::Followable;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::context::report;
use crate::error::Error;
use crate::metrics::QueueMetrics;
use crate::packed::{Key, PackedStore};

/// Which line a key waits in: one line for a plain queue; one per member
/// for the execution controller's, so that every member has its own number
/// of writes in flight and a slow member holds up only its own keys.
pub type ShardOf<T> = for<'a> fn(&'a T) -> &'a str;

struct Shard<T> {
    /// Keys and when they were queued.
    waiting: VecDeque<(T, Instant)>,
    in_flight: usize,
    /// In `State::turns`: keys wait and there is room for one more.
    has_turn: bool,
}

/// How many keys of one line may be processed at once: a share of a
/// budget among the lines the queue has had, never under the floor nor
/// over the ceiling. The execution controller's lines are members: each
/// member of a small fleet gets more applies in flight (more writes per
/// commit on the member, less time queued in a burst), each of a large
/// one stays at the floor (every apply in flight holds a connection to
/// its member, kept for reuse), and a stuck member never holds more than
/// the ceiling. Lines, not busy lines: a share that grew while few
/// members were busy (the start and the end of a burst) would open
/// connections a large fleet then keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineLimit {
    pub floor: usize,
    pub ceiling: usize,
    pub budget: usize,
}

impl LineLimit {
    /// The same number for every line, however many lines there are.
    pub fn fixed(n: usize) -> LineLimit {
        LineLimit {
            floor: n,
            ceiling: n,
            budget: 0,
        }
    }

    /// Each line's limit while the queue has `lines` lines.
    pub fn per_line(&self, lines: usize) -> usize {
        let floor = self.floor.max(1);
        (self.budget / lines.max(1)).clamp(floor, self.ceiling.max(floor))
    }
}

struct State<T> {
    shards: HashMap<Arc<str>, Shard<T>>,
    /// Shards that may start a key now, served round robin.
    turns: VecDeque<Arc<str>>,
    waiting: usize,
    /// Keys to process: waiting, or being processed and to run again.
    dirty: HashSet<T>,
    processing: HashSet<T>,
    /// The time each delayed key is due, the earliest asked for.
    delayed: HashMap<T, Instant>,
}

pub struct WorkQueue<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    shard_of: Option<ShardOf<T>>,
    limit: LineLimit,
    metrics: QueueMetrics,
}

impl<T> WorkQueue<T>
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue whose metrics no registry exports.
    pub fn new() -> Arc<WorkQueue<T>> {
        Self::named(QueueMetrics::default())
    }

    /// A queue that reports its depth, adds, retries and the time keys
    /// wait and are worked on (`Metrics::queue`).
    pub fn named(metrics: QueueMetrics) -> Arc<WorkQueue<T>> {
        Self::build(None, LineLimit::fixed(usize::MAX), metrics)
    }

    /// A queue whose keys wait in the line `shard_of` names, with at most
    /// `limit` of a line processed at once; lines take turns.
    pub fn sharded(
        shard_of: ShardOf<T>,
        limit: LineLimit,
        metrics: QueueMetrics,
    ) -> Arc<WorkQueue<T>> {
        Self::build(Some(shard_of), limit, metrics)
    }

    fn build(
        shard_of: Option<ShardOf<T>>,
        limit: LineLimit,
        metrics: QueueMetrics,
    ) -> Arc<WorkQueue<T>> {
        Arc::new(WorkQueue {
            state: Mutex::new(State {
                shards: HashMap::new(),
                turns: VecDeque::new(),
                waiting: 0,
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: HashMap::new(),
            }),
            ready: Notify::new(),
            shard_of,
            limit,
            metrics,
        })
    }

    fn shard_name<'a>(&self, key: &'a T) -> &'a str {
        self.shard_of.map_or("", |f| f(key))
    }

    /// Puts `key` at the back of its line; true if its line may start it.
    fn enqueue(&self, s: &mut State<T>, key: T) -> bool {
        let (name, new_line) = match s.shards.get_key_value(self.shard_name(&key)) {
            Some((name, _)) => (name.clone(), false),
            None => (Arc::from(self.shard_name(&key)), true),
        };
        let limit = self.limit.per_line(s.shards.len() + usize::from(new_line));
        let shard = s.shards.entry(name.clone()).or_insert_with(|| Shard {
            waiting: VecDeque::new(),
            in_flight: 0,
            has_turn: false,
        });
        shard.waiting.push_back((key, Instant::now()));
        s.waiting += 1;
        self.metrics.adds.inc();
        self.metrics.depth.inc();
        give_turn(shard, name, &mut s.turns, limit)
    }

    pub fn add(&self, key: T) {
        let startable = {
            let mut s = self.state.lock();
            if !s.dirty.insert(key.clone()) || s.processing.contains(&key) {
                return;
            }
            self.enqueue(&mut s, key)
        };
        if startable {
            self.ready.notify_one();
        }
    }

    /// Adds every key (a sweep, or a change that concerns them all).
    pub fn add_all(&self, keys: impl IntoIterator<Item = T>) {
        for key in keys {
            self.add(key);
        }
    }

    /// Adds `key` after `delay`, unless it is already due sooner.
    pub fn add_after(self: &Arc<Self>, key: T, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut s = self.state.lock();
            if s.delayed.get(&key).is_some_and(|due| *due <= at) {
                return;
            }
            s.delayed.insert(key.clone(), at);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let due = {
                let mut s = queue.state.lock();
                // A sooner request took this one's place and has run.
                let due = s.delayed.get(&key) == Some(&at);
                if due {
                    s.delayed.remove(&key);
                }
                due
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// Adds `key` again after `delay`, counted as a retry (a reconcile
    /// that failed).
    pub fn retry_after(self: &Arc<Self>, key: T, delay: Duration) {
        self.metrics.retries.inc();
        self.add_after(key, delay);
    }

    /// Keys waiting (not those being processed).
    pub fn len(&self) -> usize {
        self.state.lock().waiting
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key whose line may start one, now being processed.
    fn take(&self) -> Option<T> {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let limit = self.limit.per_line(s.shards.len());
        loop {
            let name = s.turns.pop_front()?;
            let Some(shard) = s.shards.get_mut(&name) else {
                continue;
            };
            shard.has_turn = false;
            // The limit fell (more lines came) since this turn was given:
            // the line waits for one of its keys to finish.
            if shard.in_flight >= limit {
                continue;
            }
            let Some((key, since)) = shard.waiting.pop_front() else {
                continue;
            };
            self.metrics.depth.dec();
            shard.in_flight += 1;
            give_turn(shard, name, &mut s.turns, limit);
            s.waiting -= 1;
            s.dirty.remove(&key);
            s.processing.insert(key.clone());
            drop(guard);
            self.metrics.wait.observe(since.elapsed().as_secs_f64());
            return Some(key);
        }
    }

    fn done(&self, key: &T) {
        let startable = {
            let mut guard = self.state.lock();
            let s = &mut *guard;
            s.processing.remove(key);
            let mut startable = false;
            let lines = s.shards.len();
            let name = s
                .shards
                .get_key_value(self.shard_name(key))
                .map(|(name, _)| name.clone());
            if let Some(name) = name
                && let Some(shard) = s.shards.get_mut(&name)
            {
                shard.in_flight = shard.in_flight.saturating_sub(1);
                let limit = self.limit.per_line(lines);
                startable = give_turn(shard, name, &mut s.turns, limit);
            }
            if s.dirty.contains(key) {
                startable |= self.enqueue(s, key.clone());
            }
            startable
        };
        if startable {
            self.ready.notify_one();
        }
    }

    /// Processes keys with up to `workers` concurrent calls of `process`,
    /// for ever. A worker runs only while keys wait: an idle controller
    /// (the detector runs one per resource type) holds no task at all.
    pub async fn run<F, Fut>(self: Arc<Self>, workers: usize, process: F)
    where
        T: std::fmt::Display,
        F: Fn(T) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let workers = workers.max(1);
        let mut running = JoinSet::new();
        loop {
            // Registered before looking, so an add in between still wakes us.
            let ready = self.ready.notified();
            if running.len() < workers
                && let Some(first) = self.take()
            {
                let (queue, process) = (self.clone(), process.clone());
                running.spawn(async move {
                    let mut key = Some(first);
                    while let Some(k) = key {
                        let started = Instant::now();
                        let span = tracing::info_span!(
                            "reconcile",
                            controller = queue.metrics.name,
                            key = %k
                        );
                        process(k.clone()).instrument(span).await;
                        queue.metrics.work.observe(started.elapsed().as_secs_f64());
                        queue.done(&k);
                        key = queue.take();
                    }
                });
                continue;
            }
            tokio::select! {
                _ = ready => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
            }
        }
    }
}

/// Puts a line with keys waiting and room for one more in the turns;
/// true if it may start a key now.
fn give_turn<T>(
    shard: &mut Shard<T>,
    name: Arc<str>,
    turns: &mut VecDeque<Arc<str>>,
    limit: usize,
) -> bool {
    let may = !shard.waiting.is_empty() && shard.in_flight < limit;
    if may && !shard.has_turn {
        shard.has_turn = true;
        turns.push_back(name);
    }
    may
}

/// What becomes of an object after a reconcile: wait for its next change
/// (`None`), or look again after a while.
pub type Next = Option<Duration>;

/// Queues every key `changes` gives.
pub async fn feed<T>(queue: Arc<WorkQueue<T>>, changes: impl Stream<Item = T> + Send)
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    let mut changes = std::pin::pin!(changes);
    while let Some(key) = changes.next().await {
        queue.add(key);
    }
}

/// Queues every object of `store` on each signal (a change that concerns
/// them all: a cluster's readiness, an override policy).
pub async fn feed_all_on<K: Resource + DeserializeOwned>(
    queue: Arc<WorkQueue<Key>>,
    store: PackedStore<K>,
    signals: impl Stream<Item = ()> + Send,
) {
    let mut signals = std::pin::pin!(signals);
    while signals.next().await.is_some() {
        queue.add_all(store.keys());
    }
}

/// Runs `reconcile` on each queued key's current object with `workers`
/// at once, as kube-runtime's `Controller` does over a reflector store: a
/// key whose object is gone is dropped, `Some(after)` looks again after
/// that long, and an error is logged and retried after its backoff.
pub async fn reconcile_packed<K, F, Fut>(
    queue: Arc<WorkQueue<Key>>,
    store: PackedStore<K>,
    workers: usize,
    reconcile: F,
) where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    F: Fn(Arc<K>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    reconcile_keys(queue, workers, move |key| store.get_key(key), reconcile).await
}

/// [`reconcile_packed`] for a kind held whole, in a reflector store: the
/// controllers whose objects are few (clusters, policies, autoscalers).
/// Their keys come from [`queue_touched`] (a watch of their own) or
/// [`feed`] (a store some other part fills).
pub async fn reconcile_stored<K, F, Fut>(
    queue: Arc<WorkQueue<ObjectRef<K>>>,
    store: Store<K>,
    workers: usize,
    reconcile: F,
) where
    K: Followable,
    F: Fn(Arc<K>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    reconcile_keys(queue, workers, move |key| store.get(key), reconcile).await
}

/// A watch that runs while this is held.
pub struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Follows `api` (what `config` selects) into a store, queueing each
/// object a watch event touches.
pub fn queue_touched<K: Followable>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    queue: Arc<WorkQueue<ObjectRef<K>>>,
) -> (Store<K>, Watch) {
    let (store, task) = flotilla_client::follow::follow(api, config, move |event| {
        if let Some(obj) = flotilla_client::follow::touched(event) {
            queue.add(ObjectRef::from_obj(obj));
        }
    });
    (store, Watch(task))
}

/// The object of each watch event `changes` gives, as a key.
pub fn keys_of<K: Followable>(
    changes: impl Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send,
) -> impl Stream<Item = ObjectRef<K>> + Send {
    changes.filter_map(|c| std::future::ready(c.ok().map(|o| ObjectRef::from_obj(&o))))
}

async fn reconcile_keys<T, K, L, F, Fut>(
    queue: Arc<WorkQueue<T>>,
    workers: usize,
    lookup: L,
    reconcile: F,
) where
    T: Hash + Eq + Clone + Send + Sync + std::fmt::Display + 'static,
    K: Send + Sync + 'static,
    L: Fn(&T) -> Option<Arc<K>> + Clone + Send + Sync + 'static,
    F: Fn(Arc<K>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    let again = queue.clone();
    queue
        .run(workers, move |key: T| {
            let (queue, lookup, reconcile) = (again.clone(), lookup.clone(), reconcile.clone());
            async move {
                let Some(obj) = lookup(&key) else {
                    return;
                };
                match reconcile(obj).await {
                    Ok(None) => {}
                    Ok(Some(after)) => queue.add_after(key, after),
                    Err(error) => {
                        report(&error);
                        queue.retry_after(key, error.retry_after());
                    }
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Waits, with a deadline, until `f` holds.
    async fn until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The value of `series` in the metrics' exposition.
    fn series(metrics: &crate::metrics::Metrics, series: &str) -> Option<f64> {
        metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_named_queue_exports_client_go_workqueue_metrics() {
        let metrics = crate::metrics::Metrics::default();
        let queue = WorkQueue::<u32>::named(metrics.queue("test-controller"));
        queue.add(1);
        queue.add(1);
        queue.add(2);
        let depth = r#"workqueue_depth{name="test-controller"}"#;
        let adds = r#"workqueue_adds_total{name="test-controller"}"#;
        let waited = r#"workqueue_queue_duration_seconds_count{name="test-controller"}"#;
        let worked = r#"workqueue_work_duration_seconds_count{name="test-controller"}"#;
        let retries = r#"workqueue_retries_total{name="test-controller"}"#;
        assert_eq!(series(&metrics, depth), Some(2.0));
        assert_eq!(series(&metrics, adds), Some(2.0));
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        tokio::spawn(queue.clone().run(2, move |_| {
            let d = d.clone();
            async move {
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
        until("both keys to be worked on", || {
            series(&metrics, worked) == Some(2.0)
        })
        .await;
        assert_eq!(done.load(Ordering::SeqCst), 2);
        assert_eq!(series(&metrics, depth), Some(0.0));
        assert_eq!(series(&metrics, waited), Some(2.0));
        queue.retry_after(3, Duration::from_millis(1));
        until("the retry to run", || done.load(Ordering::SeqCst) == 3).await;
        assert_eq!(series(&metrics, retries), Some(1.0));
        assert_eq!(series(&metrics, adds), Some(3.0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_added_many_times_waits_once_and_never_runs_twice_at_once() {
        let queue = WorkQueue::<u32>::new();
        let runs: Arc<Mutex<Vec<u32>>> = Arc::default();
        // Runs of key 1 in progress, and how often a second one started.
        let running = Arc::new(AtomicUsize::new(0));
        let overlap = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        for _ in 0..5 {
            queue.add(1);
        }
        queue.add(2);
        assert_eq!(queue.len(), 2);
        let (r, n, o, rel) = (
            runs.clone(),
            running.clone(),
            overlap.clone(),
            release.clone(),
        );
        tokio::spawn(queue.clone().run(4, move |key| {
            let (r, n, o, rel) = (r.clone(), n.clone(), o.clone(), rel.clone());
            async move {
                if key == 1 && n.fetch_add(1, Ordering::SeqCst) > 0 {
                    o.fetch_add(1, Ordering::SeqCst);
                }
                r.lock().push(key);
                if key == 1 {
                    rel.notified().await;
                    n.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }));
        until("both keys to start", || runs.lock().len() == 2).await;
        // Added while being processed: runs once more, after.
        queue.add(1);
        queue.add(1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.lock().iter().filter(|k| **k == 1).count(), 1);
        release.notify_one();
        until("key 1 to run again", || {
            runs.lock().iter().filter(|k| **k == 1).count() == 2
        })
        .await;
        release.notify_one();
        until("the queue to drain", || running.load(Ordering::SeqCst) == 0).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.lock().iter().filter(|k| **k == 1).count(), 2);
        assert_eq!(runs.lock().iter().filter(|k| **k == 2).count(), 1);
        assert_eq!(overlap.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_workers_run_at_once_and_keys_added_after_an_idle_spell_still_run() {
        let queue = WorkQueue::<u32>::new();
        let (running, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (n, m, d) = (running.clone(), most.clone(), done.clone());
        tokio::spawn(queue.clone().run(3, move |_key| {
            let (n, m, d) = (n.clone(), m.clone(), d.clone());
            async move {
                let now = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
        queue.add_all(0..20);
        until("the first keys to run", || {
            done.load(Ordering::SeqCst) == 20
        })
        .await;
        assert_eq!(most.load(Ordering::SeqCst), 3);
        // Every worker has gone idle; new keys start new ones.
        tokio::time::sleep(Duration::from_millis(50)).await;
        queue.add_all(20..25);
        until("the later keys to run", || {
            done.load(Ordering::SeqCst) == 25
        })
        .await;
        assert!(most.load(Ordering::SeqCst) <= 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_line_has_its_own_keys_in_flight_and_a_stuck_line_holds_up_no_other() {
        #[allow(clippy::ptr_arg)] // the queue's key type is String
        fn line(key: &String) -> &str {
            key.split_once('/').map_or("", |(line, _)| line)
        }
        let queue =
            WorkQueue::<String>::sharded(line, LineLimit::fixed(2), QueueMetrics::default());
        let stuck = Arc::new(AtomicUsize::new(0));
        let (most_stuck, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let release = Arc::new(Notify::new());
        let (s, m, d, rel) = (
            stuck.clone(),
            most_stuck.clone(),
            done.clone(),
            release.clone(),
        );
        tokio::spawn(queue.clone().run(usize::MAX, move |key: String| {
            let (s, m, d, rel) = (s.clone(), m.clone(), d.clone(), rel.clone());
            async move {
                if key.starts_with("slow/") {
                    let now = s.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    rel.notified().await;
                    s.fetch_sub(1, Ordering::SeqCst);
                }
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
        // The slow line first: its keys wait, the fast line's do not.
        queue.add_all((0..10).map(|i| format!("slow/{i}")));
        queue.add_all((0..50).map(|i| format!("fast/{i}")));
        until("every fast key to run while the slow line is stuck", || {
            done.load(Ordering::SeqCst) == 50
        })
        .await;
        assert_eq!(stuck.load(Ordering::SeqCst), 2);
        assert_eq!(queue.len(), 8);
        until("the slow line to drain as it is let go", || {
            release.notify_waiters();
            done.load(Ordering::SeqCst) == 60
        })
        .await;
        assert_eq!(most_stuck.load(Ordering::SeqCst), 2);
        assert!(queue.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_share_a_budget_between_a_floor_and_a_ceiling() {
        #[allow(clippy::ptr_arg)] // the queue's key type is String
        fn line(key: &String) -> &str {
            key.split_once('/').map_or("", |(line, _)| line)
        }
        let limit = LineLimit {
            floor: 2,
            ceiling: 4,
            budget: 8,
        };
        assert_eq!(
            [0, 1, 2, 3, 4, 100].map(|lines| limit.per_line(lines)),
            [4, 4, 4, 2, 2, 2]
        );
        assert_eq!(LineLimit::fixed(3).per_line(1), 3);
        let queue = WorkQueue::<String>::sharded(line, limit, QueueMetrics::default());
        let in_flight: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let done = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let (f, d, rel) = (in_flight.clone(), done.clone(), release.clone());
        tokio::spawn(queue.clone().run(usize::MAX, move |key: String| {
            let (f, d, rel) = (f.clone(), d.clone(), rel.clone());
            async move {
                let line = line(&key).to_string();
                *f.lock().entry(line.clone()).or_default() += 1;
                rel.notified().await;
                *f.lock().entry(line).or_default() -= 1;
                d.fetch_add(1, Ordering::SeqCst);
            }
        }));
        let now = |l: &str| in_flight.lock().get(l).copied().unwrap_or(0);
        // One line: up to the ceiling, not the whole budget.
        queue.add_all((0..10).map(|i| format!("a/{i}")));
        until("line a at its ceiling", || now("a") == 4).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(now("a"), 4);
        // Four lines: the newcomers get their share of the budget; line a
        // keeps what it started, and starts no more while over its share.
        for l in ["b", "c", "d"] {
            queue.add_all((0..10).map(|i| format!("{l}/{i}")));
        }
        until("lines b, c and d at their share", || {
            ["b", "c", "d"].iter().all(|l| now(l) == 2)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(["a", "b", "c", "d"].map(now), [4, 2, 2, 2]);
        until("every key to run as they are let go", || {
            release.notify_waiters();
            done.load(Ordering::SeqCst) == 40
        })
        .await;
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn a_delayed_key_runs_once_at_the_earliest_time_asked() {
        let queue = WorkQueue::<u32>::new();
        let runs: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
        let r = runs.clone();
        tokio::spawn(queue.clone().run(2, move |key| {
            let r = r.clone();
            async move { r.lock().push((key, Instant::now())) }
        }));
        let start = Instant::now();
        queue.add_after(7, Duration::from_secs(30));
        queue.add_after(7, Duration::from_millis(100));
        queue.add_after(7, Duration::from_secs(60));
        until("the delayed key to run", || !runs.lock().is_empty()).await;
        let (key, at) = runs.lock()[0];
        assert_eq!(key, 7);
        assert!(at - start >= Duration::from_millis(100));
        assert!(at - start < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(runs.lock().len(), 1);
    }
}
