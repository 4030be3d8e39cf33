//! What each built-in kind does beyond storage, declared in one place per
//! kind, as upstream's registry strategies: the fields its field
//! selectors may use, its defaults, what the server sets on a new object,
//! what makes it invalid beyond its schema or in an update (immutable
//! fields), what its deletion answers, and `kubectl get`'s columns. The generic
//! store (`registry.rs`) and the handlers ask [`strategy`]; a kind without
//! behaviour needs nothing here.

mod classes;
mod cluster;
mod config;
mod core;
mod namespace;
pub mod pod;
mod rbac;
mod service;
mod workloads;

use serde_json::Value;

use crate::error::Cause;
use crate::resources::ResourceInfo;

pub use config::MAX_DATA_BYTES;

/// A subresource a kind serves beyond those every kind may have
/// (`status`, `scale`), and which part of the server answers it.
pub struct Subresource {
    pub name: &'static str,
    /// The methods it answers; another gets 404, as upstream's
    /// unregistered routes do.
    pub methods: Methods,
    pub served_by: ServedBy,
    /// How discovery lists it; None: not listed.
    pub discovered: Option<Discovered>,
}

/// A subresource as discovery lists it.
pub struct Discovered {
    /// What it answers, as (group, version, kind); None: the kind itself.
    pub response: Option<(&'static str, &'static str, &'static str)>,
    pub verbs: &'static [&'static str],
}

/// The verbs of a subresource that is part of the object.
pub const READ_WRITE_VERBS: &[&str] = &["get", "patch", "update"];

/// The methods a subresource answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Methods {
    Any,
    Post,
    /// Everything but POST (a CSR's `approval`: read, replaced, patched).
    NotPost,
    /// GET, PUT and PATCH (a pod's `ephemeralcontainers`).
    ReadWrite,
}

impl Methods {
    pub fn allow(self, method: &http::Method) -> bool {
        use http::Method;
        match self {
            Methods::Any => true,
            Methods::Post => method == Method::POST,
            Methods::NotPost => method != Method::POST,
            Methods::ReadWrite => matches!(*method, Method::GET | Method::PUT | Method::PATCH),
        }
    }
}

/// Which part of the server answers a subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServedBy {
    /// The generic handlers, as a write of part of the object (a CSR's
    /// `approval`, a pod's `ephemeralcontainers`).
    Handlers,
    /// A pod's `binding` (`handlers::bind`).
    Binding,
    /// A pod's `eviction` (`eviction.rs`).
    Eviction,
    /// A ServiceAccount's `token` (`reviews.rs`).
    Token,
    /// The kubelet behind the server (`connect.rs`): logs, exec, attach,
    /// port-forward. Where none runs, the request is refused with why.
    Kubelet,
    /// The embedding process's handler (`extension.rs`), for a CRD's kind.
    Extension,
}

pub trait Strategy: Sync {
    /// The kind's own subresources ([`Subresource`]).
    fn subresources(&self) -> &'static [Subresource] {
        &[]
    }

    /// What the server sets on a new object of a user's, before
    /// admission: a CSR's requester.
    fn prepare_create_by(&self, _obj: &mut Value, _user: Option<&crate::user::User>) {}

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

    /// The status a new object of the kind is created with, the client's
    /// own dropped: what upstream answers before any controller has
    /// written one (its status struct's fields that Go always writes,
    /// such as a ReplicaSet's `replicas: 0` or a Service's empty
    /// `loadBalancer`, and defaulted phases). Clients read it: the
    /// official Python client's tests expect a Service's create to answer
    /// a status. `None`: no status until one is written.
    fn initial_status(&self, _obj: &Value) -> Option<Value> {
        None
    }

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

    /// A write through a subresource that writes status (`status`, a
    /// CSR's `approval`), after the generic merge: what else it may not
    /// change is put back, and why it is invalid (422 causes).
    fn update_subresource(&self, _subresource: &str, _new: &mut Value, _old: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// `kubectl get`'s columns (NAME first, `-o wide` ones at priority 1),
    /// when the kind has more than NAME and AGE.
    fn columns(&self) -> Option<Vec<crate::table::Column>> {
        None
    }

    /// A row's cells, aligned with [`Strategy::columns`]; `name` and
    /// `created` (the age) are ready-made.
    fn cells(&self, _obj: &Value, name: Value, created: String) -> Vec<Value> {
        vec![name, Value::String(created)]
    }

    /// Whether an immediate deletion answers the deleted object, as
    /// upstream's stores with `ReturnDeletedObject`; otherwise a Success
    /// Status naming it.
    fn returns_deleted_object(&self) -> bool {
        false
    }

    /// How long a deletion of `obj` waits for whoever runs it (upstream's
    /// CheckGracefulDelete), given the grace the request asked for; 0 is
    /// at once. Only kinds something runs (pods) wait.
    fn deletion_grace(&self, _obj: &Value, _requested: Option<i64>) -> i64 {
        0
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
        ("", "events") => &core::Events,
        ("", "nodes") => &core::Nodes,
        ("", "serviceaccounts") => &core::ServiceAccounts,
        ("", "persistentvolumeclaims") => &core::PersistentVolumeClaims,
        ("", "componentstatuses") => &core::ComponentStatuses,
        ("", "resourcequotas") => &core::ResourceQuotas,
        ("", "persistentvolumes") => &core::PersistentVolumes,
        ("", "podtemplates") => &ReturnsDeleted,
        ("", "services") => &service::Services,
        ("", "endpoints") => &service::Endpoints,
        ("discovery.k8s.io", "endpointslices") => &service::EndpointSlices,
        ("networking.k8s.io", "ingresses") => &service::Ingresses,
        ("", "replicationcontrollers") => &workloads::ReplicationControllers,
        ("apps", "deployments") => &workloads::Deployments,
        ("apps", "daemonsets") => &workloads::DaemonSets,
        ("apps", "replicasets") => &workloads::ReplicaSets,
        ("apps", "statefulsets") => &workloads::StatefulSets,
        ("batch", "jobs") => &workloads::Jobs,
        ("batch", "cronjobs") => &workloads::CronJobs,
        ("scheduling.k8s.io", "priorityclasses") => &classes::PriorityClasses,
        ("storage.k8s.io", "storageclasses") => &classes::StorageClasses,
        ("networking.k8s.io", "networkpolicies") => &classes::NetworkPolicies,
        ("networking.k8s.io", "ingressclasses") => &classes::IngressClasses,
        ("node.k8s.io", "runtimeclasses") => &classes::RuntimeClasses,
        ("policy", "poddisruptionbudgets") => &classes::PodDisruptionBudgets,
        ("autoscaling", "horizontalpodautoscalers") => &classes::HorizontalPodAutoscalers,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            &rbac::RoleBindings
        }
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => &rbac::Roles,
        ("certificates.k8s.io", "certificatesigningrequests") => {
            &cluster::CertificateSigningRequests
        }
        ("apiregistration.k8s.io", "apiservices") => &cluster::ApiServices,
        ("coordination.k8s.io", "leases") => &cluster::Leases,
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            &cluster::CustomResourceDefinitions
        }
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
