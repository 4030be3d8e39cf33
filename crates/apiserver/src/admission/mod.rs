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

use serde_json::Value;

use crate::error::ApiResult;
use crate::resources::ResourceInfo;
use crate::server::ApiServer;

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
    fn admit(&self, api: &ApiServer, request: &Request, object: &mut Value) -> ApiResult<()>;
}

pub trait Validating: Send + Sync {
    fn validate(&self, api: &ApiServer, request: &Request, object: &Value) -> ApiResult<()>;
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

/// The mutating plugins, in order: the built-in ones, then those the
/// embedding process added (`ApiServer::add_mutating_admission`).
pub fn mutate(api: &ApiServer, request: &Request, object: &mut Value) -> ApiResult<()> {
    MUTATING
        .iter()
        .try_for_each(|p| p.admit(api, request, object))?;
    let added = api.mutating_admission.read().clone();
    added.iter().try_for_each(|p| p.admit(api, request, object))
}

/// The validating plugins, in order; the first refusal stands.
pub fn validate(api: &ApiServer, request: &Request, object: &Value) -> ApiResult<()> {
    VALIDATING
        .iter()
        .try_for_each(|p| p.validate(api, request, object))
}

/// The objects of `plural` (core group unless `group`) in `namespace`.
pub(crate) fn list_in(api: &ApiServer, group: &str, plural: &str, namespace: &str) -> Vec<Value> {
    list_version_in(api, group, "v1", plural, namespace)
}

/// The stored objects of `group/version` `plural` in `namespace`, for
/// plugins that decide by other objects (none when the kind is not served).
pub fn list_version_in(
    api: &ApiServer,
    group: &str,
    version: &str,
    plural: &str,
    namespace: &str,
) -> Vec<Value> {
    let Some(r) = api.registry.get(group, version, plural) else {
        return Vec::new();
    };
    api.store
        .list(&r.collection_prefix(Some(namespace)), &Default::default())
        .map(|l| {
            l.items
                .iter()
                .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
                .collect()
        })
        .unwrap_or_default()
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

/// One stored object of `group/version` `plural`, for plugins that decide
/// by other objects (None when absent or the kind is not served).
pub fn get_object(
    api: &ApiServer,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
    name: &str,
) -> Option<Value> {
    let r = api.registry.get(group, version, plural)?;
    let kv = api.store.get(&r.key(namespace, name)).ok()??;
    serde_json::from_slice(&kv.value).ok()
}
