//! KubeFed's API (`types.kubefed.io/v1beta1`, `core.kubefed.io/v1beta1`)
//! over the Karmada pipeline: a `Federated<Kind>` object becomes a
//! resource template, a namespaced PropagationPolicy and an
//! OverridePolicy, all owned by it; its `Propagation` condition and
//! per-cluster status are read back from the ResourceBinding.

pub mod api;
pub mod controller;
pub mod translate;
