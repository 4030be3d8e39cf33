//! Loops that act on a change at once: a watch wakes them, and their
//! period still catches what no watch here sees (another cluster's side).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tokio::sync::Notify;

/// Wakes `wake` on every change of what `api` lists, as long as the
/// process runs.
pub fn on_changes<K>(api: Api<K>, wake: Arc<Notify>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(waking(api, watcher::Config::default(), wake));
}

fn waking<K>(
    api: Api<K>,
    config: watcher::Config,
    wake: Arc<Notify>,
) -> impl std::future::Future<Output = ()> + Send
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .for_each(move |event| {
            if event.is_ok() {
                wake.notify_one();
            }
            futures::future::ready(())
        })
}

/// Watches in another cluster (a peer's) that wake a loop: one per key,
/// started when a pass first needs it and ended when a pass no longer
/// names it, so the loop hears of the peer's changes at once instead of
/// at its next period.
pub struct RemoteWatches {
    wake: Arc<Notify>,
    running: HashMap<String, tokio::task::JoinHandle<()>>,
    named: HashSet<String>,
}

impl RemoteWatches {
    pub fn new(wake: Arc<Notify>) -> RemoteWatches {
        RemoteWatches {
            wake,
            running: HashMap::new(),
            named: HashSet::new(),
        }
    }

    /// Keeps a watch of `api` (as `config` selects) under `key`.
    pub fn keep<K>(&mut self, key: String, api: Api<K>, config: watcher::Config)
    where
        K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    {
        self.named.insert(key.clone());
        self.running
            .entry(key)
            .or_insert_with(|| tokio::spawn(waking(api, config, self.wake.clone())));
    }

    /// Ends the watches no [`RemoteWatches::keep`] named since the last
    /// call.
    pub fn end_pass(&mut self) {
        let named = std::mem::take(&mut self.named);
        self.running.retain(|key, task| {
            let keep = named.contains(key);
            if !keep {
                task.abort();
            }
            keep
        });
    }
}

impl Drop for RemoteWatches {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// Until `wake` is notified or `period` has passed.
pub async fn woken_or_after(wake: &Notify, period: Duration) {
    tokio::select! {
        _ = wake.notified() => {}
        _ = tokio::time::sleep(period) => {}
    }
}
