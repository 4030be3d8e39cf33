//! The one restart policy of the server's store followers (the CRDs it
//! serves, active namespaces, RBAC, quotas): each lists a prefix and
//! watches it until the watch ends; a watch that fell behind the store's
//! compaction lists again at once, any other error after a second, and
//! the follower ends when the store closes. And the one loop of the
//! server's own controllers that act on what is written (`each_put`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{EventKind, KeyValue, ListOptions, Store, StoreError};
use tracing::warn;

/// Runs `follow` again each time it ends, until the store closes;
/// `what` names the follower in the warning of a restart.
pub async fn until_closed<F, Fut>(what: &'static str, mut follow: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StoreError>,
{
    loop {
        match follow().await {
            StoreError::Closed => return,
            StoreError::Compacted { .. } => {}
            error => {
                warn!(%error, follower = what, "store follower restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Hands `act` every object under `prefix`, then each one put under it,
/// until `resync` has passed, and so again until the store closes: the
/// server's own controllers that keep something true of what is written
/// (service accounts, token Secrets, CSR signing), whose resync catches
/// what changed elsewhere. Restarts as `until_closed`.
pub async fn each_put<F, Fut>(
    store: Arc<dyn Store>,
    what: &'static str,
    prefix: String,
    resync: Duration,
    mut act: F,
) where
    F: FnMut(KeyValue) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        match pass(store.as_ref(), &prefix, resync, &mut act).await {
            Ok(()) | Err(StoreError::Compacted { .. }) => {}
            Err(StoreError::Closed) => return,
            Err(error) => {
                warn!(%error, follower = what, "store follower restarting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn pass<F, Fut>(
    store: &dyn Store,
    prefix: &str,
    resync: Duration,
    act: &mut F,
) -> Result<(), StoreError>
where
    F: FnMut(KeyValue) -> Fut,
    Fut: Future<Output = ()>,
{
    let listed = store.list(prefix, &ListOptions::default())?;
    for kv in listed.items {
        act(kv).await;
    }
    let mut watch = store.watch(prefix, listed.revision)?;
    let resync = tokio::time::sleep(resync);
    tokio::pin!(resync);
    loop {
        tokio::select! {
            _ = &mut resync => return Ok(()),
            events = watch.next() => {
                for event in events? {
                    if event.kind == EventKind::Put {
                        act(event.kv).await;
                    }
                }
            }
        }
    }
}
