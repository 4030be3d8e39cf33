//! The one restart policy of the server's store followers (the CRDs it
//! serves, active namespaces, RBAC, quotas): each lists a prefix and
//! watches it until the watch ends; a watch that fell behind the store's
//! compaction lists again at once, any other error after a second, and
//! the follower ends when the store closes.

use std::future::Future;
use std::time::Duration;

use flotilla_store::StoreError;
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
