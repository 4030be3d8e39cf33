//! How each controller here runs: the federation's keyed work queue (one
//! reconcile of a key at a time, client-go's queue metrics, a span per
//! reconcile), fed by watches of its own kind and of the kinds whose
//! changes concern it. Objects are few (clusters and their machines), so
//! a key's object is read fresh from the API when its turn comes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flotilla_federation::metrics::Metrics;
use flotilla_federation::queue::WorkQueue;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::broadcast;
use tracing::warn;

use crate::error::Error;
use crate::workload::NodeChange;

/// What becomes of an object after a reconcile: wait for its next change
/// (`None`), or look again after a while.
pub type Next = Option<Duration>;

/// Maps a changed object to the names (in its namespace) of the objects
/// a controller should look at again.
pub type Mapper = fn(&Value) -> Vec<String>;

/// Maps a workload cluster's Node change to the names (in the cluster's
/// namespace) of the objects a controller should look at again.
pub type NodeMapper = fn(&NodeChange) -> Vec<String>;

/// One controller: its kind and the kinds that wake it.
pub struct Controller {
    pub name: &'static str,
    pub kind: ApiResource,
    pub wakers: Vec<(ApiResource, Mapper)>,
    /// Woken by the workload clusters' Nodes too.
    pub nodes: Option<NodeMapper>,
}

/// `namespace/name`.
fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Runs `reconcile` for every object of the controller's kind, whenever
/// it or a waking object changes, until the task is dropped.
pub async fn run<F, Fut>(
    client: Client,
    metrics: Metrics,
    controller: Controller,
    node_changes: Option<broadcast::Receiver<NodeChange>>,
    reconcile: F,
) where
    F: Fn(Value) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    let queue: Arc<WorkQueue<String>> = WorkQueue::named(metrics.queue(controller.name));
    let mut feeds = Vec::new();
    let own = |_: &Value| Vec::new();
    let all = std::iter::once((controller.kind.clone(), own as Mapper, true)).chain(
        controller
            .wakers
            .iter()
            .map(|(r, m)| (r.clone(), *m, false)),
    );
    for (resource, mapper, is_own) in all {
        let queue = queue.clone();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        feeds.push(tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => vec![o],
                    Ok(watcher::Event::InitApply(o)) => vec![o],
                    Ok(_) => continue,
                    Err(error) => {
                        warn!(%error, kind = %resource.kind, "watch failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                for o in objects {
                    let namespace = o.metadata.namespace.clone().unwrap_or_default();
                    let Ok(value) = serde_json::to_value(&o) else {
                        continue;
                    };
                    let names = if is_own {
                        o.metadata.name.clone().into_iter().collect()
                    } else {
                        mapper(&value)
                    };
                    for name in names {
                        queue.add(key(&namespace, &name));
                    }
                }
            }
        }));
    }
    if let (Some(mut changes), Some(mapper)) = (node_changes, controller.nodes) {
        let queue = queue.clone();
        feeds.push(tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(change) => {
                        for name in mapper(&change) {
                            queue.add(key(&change.namespace, &name));
                        }
                    }
                    // Missed changes: the periodic looks catch up.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }));
    }
    let _feeds = Feeds(feeds);
    let again = queue.clone();
    let kind = controller.kind.clone();
    let failures: Arc<parking_lot::Mutex<std::collections::HashMap<String, u32>>> = Arc::default();
    queue
        .run(4, move |k: String| {
            let (client, kind, reconcile, again, failures) = (
                client.clone(),
                kind.clone(),
                reconcile.clone(),
                again.clone(),
                failures.clone(),
            );
            async move {
                let Some((namespace, name)) = k.split_once('/') else {
                    return;
                };
                // A cluster-scoped kind's key has no namespace.
                let api: Api<DynamicObject> = if namespace.is_empty() {
                    Api::all_with(client, &kind)
                } else {
                    Api::namespaced_with(client, namespace, &kind)
                };
                let object = match api.get_opt(name).await {
                    Ok(Some(o)) => o,
                    Ok(None) => return,
                    Err(error) => {
                        warn!(%error, key = %k, "cannot read the object; retrying");
                        again.retry_after(k, Duration::from_secs(1));
                        return;
                    }
                };
                let Ok(value) = serde_json::to_value(&object) else {
                    return;
                };
                match reconcile(value).await {
                    Ok(next) => {
                        failures.lock().remove(&k);
                        if let Some(after) = next {
                            again.add_after(k, after);
                        }
                    }
                    Err(error) => {
                        let n = {
                            let mut f = failures.lock();
                            let n = f.entry(k.clone()).or_insert(0);
                            *n = n.saturating_add(1);
                            *n
                        };
                        // 100 ms doubling to 10 s.
                        let delay =
                            Duration::from_millis(100u64 << n.min(7)).min(Duration::from_secs(10));
                        warn!(%error, key = %k, "reconcile failed; retrying");
                        again.retry_after(k, delay);
                    }
                }
            }
        })
        .await;
}

/// Stops the watches when the controller stops.
struct Feeds(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Feeds {
    fn drop(&mut self) {
        for f in &self.0 {
            f.abort();
        }
    }
}

/// [`run`] with the controllers' shared context handed to each reconcile.
pub async fn run_in<F, Fut>(ctx: Arc<crate::Context>, controller: Controller, reconcile: F)
where
    F: Fn(Arc<crate::Context>, Value) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, Error>> + Send + 'static,
{
    let (client, metrics) = (ctx.client.clone(), ctx.metrics.clone());
    let changes = controller.nodes.map(|_| ctx.workloads.subscribe());
    run(client, metrics, controller, changes, move |object| {
        reconcile(ctx.clone(), object)
    })
    .await;
}

/// Mappers: the Cluster an object belongs to, by its cluster-name label
/// or `spec.clusterName`.
pub fn cluster_of(object: &Value) -> Vec<String> {
    crate::objects::label(object, crate::api::CLUSTER_NAME_LABEL)
        .or_else(|| object["spec"]["clusterName"].as_str())
        .map(|c| vec![c.to_string()])
        .unwrap_or_default()
}

/// The owners of an object of kind `kind`.
pub fn owners_of_kind(object: &Value, kind: &str) -> Vec<String> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter(|r| r["kind"] == kind)
                .filter_map(|r| r["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
