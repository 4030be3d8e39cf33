//! Flotilla's federation control plane: the Karmada-compatible API
//! (`cluster.karmada.io`, `policy.karmada.io`, `work.karmada.io`) and the
//! controllers that turn templates and policies into objects in member
//! clusters. Everything here talks to the hub and to members through
//! kube-rs, as any client would.
#![forbid(unsafe_code)]

pub mod crds;
