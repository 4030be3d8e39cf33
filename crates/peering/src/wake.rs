//! Loops that act on a change at once: a watch wakes them, and their
//! period still catches what no watch here sees (another cluster's side).

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
    tokio::spawn(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .for_each(move |event| {
                if event.is_ok() {
                    wake.notify_one();
                }
                futures::future::ready(())
            }),
    );
}

/// Until `wake` is notified or `period` has passed.
pub async fn woken_or_after(wake: &Notify, period: Duration) {
    tokio::select! {
        _ = wake.notified() => {}
        _ = tokio::time::sleep(period) => {}
    }
}
