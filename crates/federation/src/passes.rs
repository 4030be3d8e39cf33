//! Controllers that reconcile all their objects in one pass (the front
//! ends, whose objects are few): a pass at start, then one whenever a
//! watch sees a change that matters, and at least every resync. Bursts
//! of changes are taken in one pass, and a change only of an object's
//! status (a pass's own status writes, say) does not start another.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;
use tracing::warn;

use crate::metrics::QueueMetrics;
use crate::queue::WorkQueue;

/// How long a failed pass waits before the next.
const RETRY: Duration = Duration::from_secs(1);
/// How long a pass waits after a change for the rest of its burst.
const SETTLE: Duration = Duration::from_millis(50);
/// The least time between the starts of two passes, whatever changes: a
/// busy fleet (Clusters' status, Works) costs at most two passes a second.
const SPACING: Duration = Duration::from_millis(500);

/// What changes of a kind start a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Any change: the pass reads this kind's status, labels or data.
    Any,
    /// Objects that come, go or begin to be deleted, and changes of their
    /// spec (a new `metadata.generation`): the pass writes this kind's
    /// status itself.
    Spec,
}

/// A kind a pass depends on.
pub struct Watched {
    pub kind: ApiResource,
    pub trigger: Trigger,
    /// Only objects with these labels (a label selector).
    pub labels: Option<String>,
}

impl Watched {
    pub fn any(kind: ApiResource) -> Watched {
        Watched {
            kind,
            trigger: Trigger::Any,
            labels: None,
        }
    }

    pub fn spec(kind: ApiResource) -> Watched {
        Watched {
            kind,
            trigger: Trigger::Spec,
            labels: None,
        }
    }

    pub fn labelled(mut self, selector: &str) -> Watched {
        self.labels = Some(selector.to_string());
        self
    }
}

/// One tick per change of these kinds (every namespace) that their
/// trigger says matters.
pub fn changes(hub: &Client, kinds: impl IntoIterator<Item = Watched>) -> BoxStream<'static, ()> {
    let streams: Vec<BoxStream<'static, ()>> = kinds
        .into_iter()
        .map(|w| {
            let api: Api<DynamicObject> = Api::all_with(hub.clone(), &w.kind);
            let trigger = w.trigger;
            let mut config = watcher::Config::default();
            if let Some(l) = &w.labels {
                config = config.labels(l);
            }
            // What a Spec trigger compares: generation, and being deleted.
            let mut generations: HashMap<String, (Option<i64>, bool)> = HashMap::new();
            watcher(api, config)
                .default_backoff()
                .filter_map(move |event| {
                    let tick = match event {
                        Ok(watcher::Event::Apply(o)) => {
                            let uid = o.uid().unwrap_or_default();
                            let now = (
                                o.metadata.generation,
                                o.metadata.deletion_timestamp.is_some(),
                            );
                            let before = generations.insert(uid, now);
                            trigger == Trigger::Any || now.0.is_none() || before != Some(now)
                        }
                        Ok(watcher::Event::Delete(o)) => {
                            generations.remove(&o.uid().unwrap_or_default());
                            true
                        }
                        Ok(watcher::Event::InitApply(o)) => {
                            let now = (
                                o.metadata.generation,
                                o.metadata.deletion_timestamp.is_some(),
                            );
                            generations.insert(o.uid().unwrap_or_default(), now);
                            false
                        }
                        // A (re)list done: whatever it changed is looked at.
                        Ok(watcher::Event::InitDone) => true,
                        Ok(watcher::Event::Init) | Err(_) => false,
                    };
                    futures::future::ready(tick.then_some(()))
                })
                .boxed()
        })
        .collect();
    futures::stream::select_all(streams).boxed()
}

/// Runs `pass` at start, after every burst of `changes`, and at least
/// every `resync`, as a controller of one key on a [`WorkQueue`] (named
/// by `metrics`, whose reconcile span each pass runs in): passes never
/// overlap, a change during one brings one more after it, and a failed
/// pass is logged and retried.
pub async fn run<F, Fut, E>(
    metrics: QueueMetrics,
    changes: impl Stream<Item = ()> + Send,
    resync: Duration,
    pass: F,
) where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display,
{
    let controller = metrics.name;
    let queue = WorkQueue::named(metrics);
    queue.add(controller);
    // A burst's first change starts the pass once the rest has come.
    let feed = {
        let queue = queue.clone();
        changes.for_each(move |()| {
            queue.add_after(controller, SETTLE);
            futures::future::ready(())
        })
    };
    let again = queue.clone();
    let passes = queue.run(1, move |key| {
        let (queue, pass) = (again.clone(), pass.clone());
        async move {
            let started = Instant::now();
            match pass().await {
                Ok(()) => queue.add_after(key, resync),
                Err(error) => {
                    warn!(%error, controller = key, "pass failed; retrying");
                    queue.retry_after(key, RETRY);
                }
            }
            // Held in flight until then: what changes meanwhile waits.
            tokio::time::sleep_until(started + SPACING).await;
        }
    });
    futures::join!(feed, passes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_pass_and_quiet_means_the_resync() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<()>();
        let passes = Arc::new(AtomicUsize::new(0));
        let counted = passes.clone();
        let metrics = QueueMetrics {
            name: "test",
            ..Default::default()
        };
        let task = tokio::spawn(run(metrics, rx, Duration::from_secs(10), move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 1, "a pass at start");
        for _ in 0..20 {
            tx.unbounded_send(()).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 2, "twenty changes, one pass");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 3, "the resync");
        task.abort();
    }
}
