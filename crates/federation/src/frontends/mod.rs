//! Front ends: one module per foreign fleet API, each translating its
//! objects into the one pipeline (resource templates, Karmada policies,
//! bindings and Works) rather than running an engine of its own.

pub mod argocd;
pub mod kubefed;
