//! What every part of Flotilla that talks to a cluster as a client shares:
//! the credentials `flotilla join` stores and the clients made of them,
//! installing CRDs, making sure a namespace exists, recording Events,
//! following a kind into a local cache.
//! Everything here goes through the Kubernetes API only, so it works the
//! same against Flotilla's API server and any other cluster's.
#![forbid(unsafe_code)]

pub mod crd;
pub mod credentials;
pub mod events;
pub mod follow;
pub mod namespace;
