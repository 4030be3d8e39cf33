//! What each built-in kind does beyond storage, declared in one place per
//! kind, as upstream's registry strategies: the fields its field
//! selectors may use, what the server sets on a new object, what makes it
//! invalid beyond its schema, and what its deletion answers. The generic
//! store (`registry.rs`) and the handlers ask [`strategy`]; a kind without
//! behaviour needs nothing here.

mod classes;
mod config;
mod namespace;
pub mod pod;
mod service;
mod workloads;

use serde_json::Value;

use crate::error::Cause;
use crate::resources::ResourceInfo;

pub use config::MAX_DATA_BYTES;

pub trait Strategy: Sync {
    /// Fields a fieldSelector may name, beyond `metadata.name` and
    /// `metadata.namespace`.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Upstream's defaults for what the client left out, on create and
    /// update (`defaults.rs` has the shared pieces).
    fn default(&self, _obj: &mut Value) {}

    /// What the server sets on a new object, after its metadata is set.
    fn prepare_create(&self, _obj: &mut Value) {}

    /// Why the object is invalid beyond its schema (422 causes).
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Why an update of the main resource may not make `new` of `old`
    /// (immutable fields; 422 causes), after defaulting and server-owned
    /// fields are carried over.
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Whether an immediate deletion answers the deleted object, as
    /// upstream's stores with `ReturnDeletedObject`; otherwise a Success
    /// Status naming it.
    fn returns_deleted_object(&self) -> bool {
        false
    }
}

/// The strategy of `r`'s kind.
pub fn strategy(r: &ResourceInfo) -> &'static dyn Strategy {
    if r.custom {
        return &ReturnsDeleted;
    }
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => &pod::Pods,
        ("", "namespaces") => &namespace::Namespaces,
        ("", "configmaps") => &config::ConfigMaps,
        ("", "secrets") => &config::Secrets,
        ("", "events") => &Events,
        ("", "nodes") => &Selectable(&["spec.unschedulable"]),
        ("", "services") => &service::Services,
        ("", "replicationcontrollers") => &workloads::ReplicationControllers,
        (
            "",
            "serviceaccounts" | "persistentvolumes" | "persistentvolumeclaims" | "podtemplates",
        ) => &ReturnsDeleted,
        ("apps", "deployments") => &workloads::Deployments,
        ("apps", "daemonsets") => &workloads::DaemonSets,
        ("apps", "replicasets") => &workloads::ReplicaSets,
        ("apps", "statefulsets") => &workloads::StatefulSets,
        ("batch", "jobs") => &workloads::Jobs,
        ("batch", "cronjobs") => &workloads::CronJobs,
        ("scheduling.k8s.io", "priorityclasses") => &classes::PriorityClasses,
        ("storage.k8s.io", "storageclasses") => &classes::StorageClasses,
        ("networking.k8s.io", "networkpolicies") => &classes::NetworkPolicies,
        ("autoscaling", "horizontalpodautoscalers") => &classes::HorizontalPodAutoscalers,
        _ => &Plain,
    }
}

/// No behaviour beyond storage.
struct Plain;
impl Strategy for Plain {}

/// Only its deletion answers the object (custom resources, services, ...).
struct ReturnsDeleted;
impl Strategy for ReturnsDeleted {
    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// Only field selectors beyond the metadata.
struct Selectable(&'static [&'static str]);

/// 422 `field is immutable` for `field` (a JSON pointer into the object,
/// named `path` in the cause) when an update changes it.
pub(crate) fn immutable(new: &Value, old: &Value, pointer: &str, path: &str) -> Option<Cause> {
    let (before, after) = (old.pointer(pointer), new.pointer(pointer));
    (before != after).then(|| Cause {
        reason: "FieldValueInvalid",
        field: path.into(),
        message: format!(
            "Invalid value: {}: field is immutable",
            after.map_or("null".to_string(), Value::to_string)
        ),
    })
}
impl Strategy for Selectable {
    fn selectable_fields(&self) -> &'static [&'static str] {
        self.0
    }
}

/// Core Events: selected by what they are about (`kubectl describe`).
struct Events;
impl Strategy for Events {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }
}
