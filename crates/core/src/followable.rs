//! What a kind must be for kube-runtime's watcher and reflector store to
//! follow it: one name for the bound that the client's `follow`, the
//! federation's work queue, the member's proxy and cluster DNS all need.

use kube_core::Resource;

/// A kind a reflector can follow.
pub trait Followable:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Followable for K where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}
