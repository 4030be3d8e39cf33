//! The generic store of resources: create, update and delete of one
//! object of any kind, with everything a write goes through (namespace
//! lifecycle, admission, server-owned fields, allocation, CRD status,
//! compare-and-swap with retries, finalizers), as kube-apiserver's
//! `registry/generic`. It takes a [`Request`], which carries no HTTP: the
//! handlers build one from a client's request, and the server's own
//! controllers (garbage collector, namespace finalizer) make theirs with
//! [`Request::internal`].

use std::sync::Arc;

use flotilla_store::{DeletePrecondition, Revision, StoreError};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::objects::{self, WriteScope, meta_str};
use crate::resources::ResourceInfo;
use crate::storage::Storage;
use crate::user::User;

/// What a write is about and who asks, without the HTTP around it.
#[derive(Clone)]
pub struct Request {
    pub storage: Arc<Storage>,
    pub resource: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `status`, `finalize`, `binding`, `approval`: which part it writes.
    pub subresource: Option<String>,
    pub user: Option<User>,
    pub dry_run: bool,
}

impl Request {
    /// A write the server makes of itself: on one namespace or
    /// cluster-wide, not a dry run, by nobody in particular.
    pub fn internal(
        storage: Arc<Storage>,
        resource: Arc<ResourceInfo>,
        namespace: Option<String>,
        name: Option<String>,
    ) -> Request {
        Request {
            storage,
            resource,
            namespace: namespace.filter(|ns| !ns.is_empty()),
            name,
            subresource: None,
            user: None,
            dry_run: false,
        }
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    pub fn key(&self, name: &str) -> String {
        self.resource.key(self.namespace.as_deref(), name)
    }

    pub fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.resource.group, &self.resource.plural, name)
    }
}

/// A namespaced write needs its namespace to exist and not be terminating.
pub(crate) async fn check_namespace(req: &Request, creating: bool) -> ApiResult<()> {
    let Some(ns) = req.namespace.as_deref().filter(|_| req.resource.namespaced) else {
        return Ok(());
    };
    if req.storage.namespaces.is_active(ns) {
        return Ok(());
    }
    let key = format!("/core/namespaces/{ns}");
    let kv = req
        .storage
        .get_latest(&key)
        .await?
        .ok_or_else(|| ApiError::not_found("", "namespaces", ns))?;
    if creating {
        let obj: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
        if objects::is_deleting(&obj) {
            let mut e = ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                req.resource.plural,
                meta_str(&obj, "name")
            ));
            e.details = Some(Box::new(crate::error::Details {
                name: ns.to_string(),
                group: String::new(),
                kind: "namespaces".into(),
                causes: vec![Cause {
                    reason: "NamespaceTerminating",
                    field: "metadata.namespace".into(),
                    message: format!("namespace {ns} is being terminated"),
                }],
            }));
            return Err(e);
        }
    }
    Ok(())
}

/// Stores a validated new object; `track` records its managedFields.
pub async fn create(
    req: &Request,
    mut obj: Value,
    warnings: Vec<String>,
    track: impl FnOnce(&mut Value),
) -> ApiResult<Written> {
    let r = req.resource.clone();
    check_namespace(req, true).await?;
    let admission = crate::admission::Request {
        operation: crate::admission::Operation::Create,
        resource: &r,
        namespace: req.namespace.as_deref().filter(|_| r.namespaced),
        old: None,
        user: req.user.as_ref(),
        subresource: req.subresource.as_deref(),
    };
    req.storage.mutate(&admission, &mut obj)?;
    objects::prepare_create(&r, &mut obj);
    crate::kinds::strategy(&r).prepare_create_by(&mut obj, req.user.as_ref());
    crate::crd::refresh_status(&r, &mut obj);
    req.storage.validate(&admission, &obj)?;
    let _allocating = if r.is_service() {
        let guard = req.storage.service_allocation.lock().await;
        let network = &req.storage.config.service_network;
        let claim = !req.dry_run;
        crate::allocation::assign(network, req.storage.store.as_ref(), &mut obj, None, claim)
            .await?;
        Some(guard)
    } else {
        None
    };
    track(&mut obj);
    let name = meta_str(&obj, "name").to_string();
    if req.dry_run {
        return Ok(Written { obj, warnings });
    }
    let key = req.key(&name);
    let kv = match req
        .storage
        .store
        .create(&key, objects::encode_as_stored(&r, &mut obj)?)
        .await
    {
        Ok(kv) => kv,
        Err(StoreError::AlreadyExists(_)) => {
            return Err(ApiError::already_exists(&r.group, &r.plural, &name));
        }
        Err(e) => return Err(e.into()),
    };
    let stored = objects::stamp(&r, obj, kv.mod_revision);
    crate::crd::after_write(&req.storage, &r, &stored).await;
    crate::rbac::after_write(&req.storage.rbac, &r, &stored, false);
    crate::admission::after_write(&req.storage.quotas, &r, &stored, false);
    Ok(Written {
        obj: stored,
        warnings,
    })
}

/// An update computed from the current object, with its warnings.
pub type Next = (Value, Vec<String>);

/// Maps a failed store write to the client's error, or `None` when the
/// write lost a race and `retry` allows trying again on fresh state.
fn retry_or_fail(req: &Request, name: &str, e: StoreError, retry: bool) -> Option<ApiError> {
    let r = &req.resource;
    match e {
        StoreError::Conflict { .. } if retry => None,
        StoreError::Conflict { .. } => Some(ApiError::conflict(&r.group, &r.plural, name)),
        StoreError::NotFound(_) => Some(req.not_found(name)),
        e => Some(e.into()),
    }
}

/// Removes `key` if it is still at `revision`; returns `obj` stamped with
/// the deletion's revision, as watchers see it.
async fn remove(
    req: &Request,
    key: &str,
    revision: Revision,
    mut obj: Value,
) -> Result<Value, StoreError> {
    let precondition = DeletePrecondition {
        mod_revision: Some(revision),
    };
    let kv = req.storage.store.delete(key, precondition).await?;
    objects::meta_mut(&mut obj)
        .insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
    crate::crd::after_delete(&req.storage, &req.resource, &obj).await;
    crate::rbac::after_write(&req.storage.rbac, &req.resource, &obj, true);
    crate::admission::after_write(&req.storage.quotas, &req.resource, &obj, true);
    Ok(obj)
}

/// The outcome of a write: the object as stored (or as it would be, for a
/// dry run) and the warnings for the client.
pub struct Written {
    pub obj: Value,
    pub warnings: Vec<String>,
}

/// The write behind every update, patch and controller change of one object.
pub async fn update<F>(req: &Request, mut transform: F) -> ApiResult<Written>
where
    F: FnMut(&Value) -> ApiResult<Next>,
{
    let r = req.resource.clone();
    let name = req.name().to_string();
    let key = req.key(&name);
    let store = &req.storage.store;
    let _allocating = if r.is_service() {
        Some(req.storage.service_allocation.lock().await)
    } else {
        None
    };
    let mut synced = false;
    for _ in 0..32 {
        let current = req
            .storage
            .get_latest(&key)
            .await?
            .ok_or_else(|| req.not_found(&name))?;
        let old = objects::decode(&r, &current)?;
        let (mut obj, warnings) = transform(&old)?;
        let pinned = meta_str(&obj, "resourceVersion").to_string();
        if !pinned.is_empty() && pinned != current.mod_revision.to_string() {
            // The client saw a newer version, through another replica.
            if !synced
                && pinned
                    .parse::<Revision>()
                    .is_ok_and(|p| p > current.mod_revision)
            {
                store.sync().await?;
                synced = true;
                continue;
            }
            return Err(ApiError::conflict(&r.group, &r.plural, &name));
        }
        if objects::adds_finalizer_while_deleting(&obj, &old) {
            return Err(ApiError::invalid(
                &r.group,
                &r.kind,
                &name,
                vec![Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message:
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                }],
            ));
        }
        let scope = WriteScope::of(req.subresource.as_deref());
        let admission = crate::admission::Request {
            operation: crate::admission::Operation::Update,
            resource: &r,
            namespace: req.namespace.as_deref().filter(|_| r.namespaced),
            old: Some(&old),
            user: req.user.as_ref(),
            subresource: req.subresource.as_deref(),
        };
        req.storage.mutate(&admission, &mut obj)?;
        objects::prepare_update(&r, &mut obj, &old, scope);
        crate::crd::refresh_status(&r, &mut obj);
        if scope == WriteScope::Main {
            // What may not change once set (immutable fields).
            let causes = crate::kinds::strategy(&r).validate_update(&obj, &old);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&r.group, &r.kind, &name, causes));
            }
        }
        if let (WriteScope::Status | WriteScope::EphemeralContainers, Some(sub)) =
            (scope, req.subresource.as_deref())
        {
            let causes = crate::kinds::strategy(&r).update_subresource(sub, &mut obj, &old);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&r.group, &r.kind, &name, causes));
            }
        }
        req.storage.validate(&admission, &obj)?;
        if r.is_service() {
            let network = &req.storage.config.service_network;
            let claim = !req.dry_run;
            crate::allocation::assign(network, store.as_ref(), &mut obj, Some(&old), claim).await?;
        }
        if req.dry_run {
            return Ok(Written { obj, warnings });
        }
        // Removing the last finalizer of an object being deleted completes the deletion.
        if objects::is_deleting(&obj) && !objects::has_finalizers(&obj) {
            match remove(req, &key, current.mod_revision, obj).await {
                Ok(gone) => {
                    return Ok(Written {
                        obj: gone,
                        warnings,
                    });
                }
                Err(e) => match retry_or_fail(req, &name, e, pinned.is_empty()) {
                    Some(err) => return Err(err),
                    None => continue,
                },
            }
        }
        if objects::equal_except_resource_version(&obj, &old) {
            // A no-op write does not create a revision, as upstream.
            return Ok(Written { obj: old, warnings });
        }
        match store
            .update_from(&current, objects::encode_as_stored(&r, &mut obj)?)
            .await
        {
            Ok(kv) => {
                let stored = objects::stamp(&r, obj, kv.mod_revision);
                crate::crd::after_write(&req.storage, &r, &stored).await;
                crate::rbac::after_write(&req.storage.rbac, &r, &stored, false);
                crate::admission::after_write(&req.storage.quotas, &r, &stored, false);
                return Ok(Written {
                    obj: stored,
                    warnings,
                });
            }
            Err(e) => {
                if let Some(err) = retry_or_fail(req, &name, e, pinned.is_empty()) {
                    return Err(err);
                }
            }
        }
    }
    Err(ApiError::conflict(&r.group, &r.plural, &name))
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOptions {
    pub(crate) propagation_policy: Option<String>,
    /// Deprecated for propagationPolicy; true is Orphan. false also asks
    /// for 202 while the deletion waits (upstream's rule).
    pub(crate) orphan_dependents: Option<bool>,
    /// How long a pod's kubelet gets to stop it (where a kubelet runs
    /// the pods: `ApiServer::set_kubelet`); other deletions are at once.
    pub(crate) grace_period_seconds: Option<i64>,
    preconditions: Option<Preconditions>,
    #[serde(default)]
    pub(crate) dry_run: Vec<String>,
}

impl DeleteOptions {
    pub(crate) fn with_policy(policy: &str) -> Self {
        DeleteOptions {
            propagation_policy: Some(policy.to_string()),
            ..DeleteOptions::default()
        }
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

/// Deletes one object; returns what to send back.
pub async fn delete(req: &Request, name: &str, opts: &DeleteOptions) -> ApiResult<(Value, bool)> {
    let r = req.resource.clone();
    let key = req.key(name);
    let store = &req.storage.store;
    let dry_run = opts.dry_run.iter().any(|d| d == "All");
    for _ in 0..32 {
        let current = req
            .storage
            .get_latest(&key)
            .await?
            .ok_or_else(|| req.not_found(name))?;
        let mut obj = objects::decode(&r, &current)?;
        if let Some(p) = &opts.preconditions {
            if let Some(uid) = &p.uid
                && uid != meta_str(&obj, "uid")
            {
                return Err(ApiError::conflict(&r.group, &r.plural, name));
            }
            if let Some(rv) = &p.resource_version
                && *rv != current.mod_revision.to_string()
            {
                return Err(ApiError::conflict(&r.group, &r.plural, name));
            }
        }
        // A user's deletion, first asked: the embedder may refuse it.
        if req.user.is_some() && obj.pointer("/metadata/deletionTimestamp").is_none() {
            req.storage.extensions.admit_delete(&r, &obj)?;
        }
        let policy = opts.propagation_policy.as_deref().unwrap_or("Background");
        // Foreground and Orphan hand the object to the garbage collector
        // through a finalizer it removes when the dependents are dealt with.
        let gc_finalizer = match policy {
            "Foreground" => Some(objects::FOREGROUND_FINALIZER),
            "Orphan" if !r.is_namespace() => Some(objects::ORPHAN_FINALIZER),
            _ => None,
        };
        let grace = if req.storage.runs_pods() {
            crate::kinds::strategy(&r).deletion_grace(&obj, opts.grace_period_seconds)
        } else {
            0
        };
        let waiting = obj
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if grace > 0 && waiting.is_none_or(|w| grace < w) {
            // Graceful: the kubelet stops it, then deletes it with grace 0.
            let m = objects::meta_mut(&mut obj);
            let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(grace);
            m.insert("deletionTimestamp".into(), json!(meta::format_time(at)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if dry_run {
                return Ok((obj, false));
            }
            match store
                .update_from(&current, objects::encode_as_stored(&r, &mut obj)?)
                .await
            {
                Ok(kv) => return Ok((objects::stamp(&r, obj, kv.mod_revision), false)),
                Err(e) => match retry_or_fail(req, name, e, true) {
                    Some(err) => return Err(err),
                    None => continue,
                },
            }
        }
        if grace > 0 {
            // Already waiting for its kubelet, no sooner than asked.
            return Ok((obj, false));
        }
        if objects::has_finalizers(&obj) || gc_finalizer.is_some() {
            // Graceful: mark for deletion; finalizers (or the namespace
            // controller) remove the object later.
            let already = objects::is_deleting(&obj);
            let switched = gc_finalizer.is_some_and(|f| objects::set_gc_finalizer(&mut obj, f));
            if already && !switched {
                return Ok((obj, false));
            }
            let m = objects::meta_mut(&mut obj);
            if !already {
                m.insert("deletionTimestamp".into(), json!(meta::now()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            let namespace = r.is_namespace();
            if namespace {
                obj["status"]["phase"] = json!("Terminating");
            }
            if dry_run {
                return Ok((obj, false));
            }
            match store
                .update_from(&current, objects::encode_as_stored(&r, &mut obj)?)
                .await
            {
                Ok(kv) => {
                    let stored = objects::stamp(&r, obj, kv.mod_revision);
                    if namespace {
                        req.storage.namespaces.terminated(name, kv.mod_revision);
                    }
                    if namespace && !already {
                        crate::namespace::spawn_finalizer(req.storage.clone(), name.to_string());
                    }
                    return Ok((stored, false));
                }
                Err(e) => match retry_or_fail(req, name, e, true) {
                    Some(err) => return Err(err),
                    None => continue,
                },
            }
        }
        if dry_run {
            return Ok((obj, true));
        }
        match remove(req, &key, current.mod_revision, obj).await {
            Ok(gone) => return Ok((gone, true)),
            Err(e) => {
                if let Some(err) = retry_or_fail(req, name, e, true) {
                    return Err(err);
                }
            }
        }
    }
    Err(ApiError::conflict(&r.group, &r.plural, name))
}
