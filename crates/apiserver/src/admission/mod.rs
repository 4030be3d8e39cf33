//! Admission: what a write goes through after it is decoded and before it
//! is stored, as kube-apiserver's admission chain: mutating plugins first
//! (they may change the object), then validating ones (they may only
//! refuse it). Every write through the handlers passes here, the server's
//! own included (garbage collector, namespace finalizer).

mod certificate_approval;
mod default_storage_class;
mod limit_ranger;
mod quotas;
mod resource_quota;

pub(crate) use quotas::{QuotaIndex, after_write, spawn_follower as spawn_quota_index};
pub use resource_quota::spawn_status;

use flotilla_store::Store;
use serde_json::Value;

use crate::authz::{Attributes, Authorizer, Decision, Mode};
use crate::error::ApiResult;
use crate::resources::{Registry, ResourceInfo};
use crate::user::User;

/// What an admission plugin sees of the server: the stored objects, read
/// only; who may do what; the quotas in force. Not the server itself: a
/// plugin neither writes nor serves, so it cannot call back into the
/// handlers that called it.
pub struct View<'a> {
    store: &'a dyn Store,
    registry: &'a Registry,
    authorizer: &'a dyn Authorizer,
    pub(crate) authorization_mode: Mode,
    pub(crate) rbac: &'a crate::rbac::Index,
    pub(crate) quotas: &'a QuotaIndex,
}

impl<'a> View<'a> {
    pub(crate) fn new(
        store: &'a dyn Store,
        registry: &'a Registry,
        authorizer: &'a dyn Authorizer,
        authorization_mode: Mode,
        rbac: &'a crate::rbac::Index,
        quotas: &'a QuotaIndex,
    ) -> View<'a> {
        View {
            store,
            registry,
            authorizer,
            authorization_mode,
            rbac,
            quotas,
        }
    }

    /// Whether `user` may make the request, as the server would decide.
    pub fn authorize(&self, user: &User, attributes: &Attributes) -> Decision {
        self.authorizer.authorize(user, attributes)
    }

    /// One stored object of `group/version` `plural`, for plugins that
    /// decide by other objects (None when absent or the kind is not
    /// served).
    pub fn get_object(
        &self,
        (group, version, plural): (&str, &str, &str),
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let r = self.registry.get(group, version, plural)?;
        let kv = self.store.get(&r.key(namespace, name)).ok()??;
        serde_json::from_slice(&kv.value).ok()
    }

    /// The objects of `plural` (core group unless `group`, version v1) in
    /// `namespace`.
    pub(crate) fn list_in(&self, group: &str, plural: &str, namespace: &str) -> Vec<Value> {
        self.list_version_in(group, "v1", plural, namespace)
    }

    /// The stored objects of `group/version` `plural` in `namespace`, for
    /// plugins that decide by other objects (none when the kind is not
    /// served).
    pub fn list_version_in(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: &str,
    ) -> Vec<Value> {
        self.list(group, version, plural, Some(namespace))
    }

    /// The stored objects of `group/version` `plural`, in `namespace` or
    /// in all.
    pub(crate) fn list(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Vec<Value> {
        stored(
            self.store,
            self.registry,
            (group, version, plural),
            namespace,
        )
    }
}

/// The stored objects of `group/version` `plural`, in `namespace` or in
/// all (none when the kind is not served or the store fails).
pub(crate) fn stored(
    store: &dyn Store,
    registry: &Registry,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
) -> Vec<Value> {
    let Some(r) = registry.get(group, version, plural) else {
        return Vec::new();
    };
    store
        .list(&r.collection_prefix(namespace), &Default::default())
        .map(|l| {
            l.items
                .iter()
                .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// One write, as the plugins see it.
pub struct Request<'a> {
    pub operation: Operation,
    pub resource: &'a ResourceInfo,
    pub namespace: Option<&'a str>,
    pub old: Option<&'a Value>,
    /// Who writes; None for the server's own writes.
    pub user: Option<&'a crate::user::User>,
    /// The part written (`status`, `approval`), if not the whole object.
    pub subresource: Option<&'a str>,
}

pub trait Mutating: Send + Sync {
    fn admit(&self, view: &View, request: &Request, object: &mut Value) -> ApiResult<()>;
}

pub trait Validating: Send + Sync {
    fn validate(&self, view: &View, request: &Request, object: &Value) -> ApiResult<()>;
}

const MUTATING: &[&dyn Mutating] = &[
    &limit_ranger::LimitRanger,
    &default_storage_class::DefaultStorageClass,
];
const VALIDATING: &[&dyn Validating] = &[
    &crate::rbac::escalation::Escalation,
    &certificate_approval::CertificateApproval,
    &limit_ranger::LimitRanger,
    &resource_quota::ResourceQuota,
];

/// The mutating plugins, in order: the built-in ones, then `added`, those
/// the embedding process added (`ApiServer::add_mutating_admission`).
pub fn mutate(
    view: &View,
    added: &[std::sync::Arc<dyn Mutating>],
    request: &Request,
    object: &mut Value,
) -> ApiResult<()> {
    MUTATING
        .iter()
        .try_for_each(|p| p.admit(view, request, object))?;
    added
        .iter()
        .try_for_each(|p| p.admit(view, request, object))
}

/// The validating plugins, in order; the first refusal stands.
pub fn validate(view: &View, request: &Request, object: &Value) -> ApiResult<()> {
    VALIDATING
        .iter()
        .try_for_each(|p| p.validate(view, request, object))
}

/// The containers and init containers of a pod spec.
pub(crate) fn containers_mut(pod: &mut Value) -> impl Iterator<Item = &mut Value> {
    let spec = pod.get_mut("spec").and_then(Value::as_object_mut);
    let mut all = Vec::new();
    if let Some(spec) = spec {
        for (k, v) in spec.iter_mut() {
            if matches!(k.as_str(), "containers" | "initContainers")
                && let Some(list) = v.as_array_mut()
            {
                all.extend(list.iter_mut());
            }
        }
    }
    all.into_iter()
}

pub(crate) fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
}

/// A quantity's value (cores, bytes), or None.
pub(crate) fn amount(q: Option<&Value>) -> Option<f64> {
    match q? {
        Value::String(s) => flotilla_core::quantity::parse(s),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
}
