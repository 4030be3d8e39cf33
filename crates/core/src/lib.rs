//! Types and pure logic that more than one Flotilla crate reads. Nothing
//! here does I/O or needs a runtime: quantities, label and field
//! selectors, cron schedules, Kubernetes' name rules, CRD manifests,
//! the Multi-Cluster Services API's types, and the bound of a kind a
//! reflector follows, and the marker of a volume whose data is being
//! restored.
#![forbid(unsafe_code)]

pub mod crd;
pub mod duration;
pub mod followable;
pub mod mcs;
pub mod quantity;
pub mod schedule;
pub mod selector;
pub mod validation;
pub mod volume_data;
