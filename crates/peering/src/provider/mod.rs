//! The provider's side of its peerings, as Liqo's controller manager in
//! the provider: it grants ResourceSlices (`grant`), makes the twin
//! namespaces its consumers ask for (`namespaces`) and runs their
//! ShadowPods as pods (`shadowpods`). Everything here acts on this
//! cluster only: a provider keeps running what it was given while its
//! consumer is unreachable.

pub mod grant;
pub mod namespaces;
pub mod shadowpods;
pub mod status;

use kube::Client;

/// Starts the provider's loops.
pub fn spawn(local: Client) {
    tokio::spawn(grant::run(local.clone()));
    tokio::spawn(namespaces::run(local.clone()));
    tokio::spawn(status::run(local.clone()));
    tokio::spawn(shadowpods::run(local));
}
