//! Which resource (plural, scope) serves a kind, asked of a cluster's
//! discovery once and remembered.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use parking_lot::Mutex;

#[derive(Clone)]
pub struct Kinds {
    client: Client,
    known: Arc<Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>>,
}

impl Kinds {
    pub fn new(client: Client) -> Kinds {
        Kinds {
            client,
            known: Arc::default(),
        }
    }

    /// The resource for `api_version`/`kind` and whether it is namespaced.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), kube::Error> {
        let gvk = gvk_of(api_version, kind);
        if let Some(found) = self.known.lock().get(&gvk) {
            return Ok(found.clone());
        }
        let (ar, caps): (ApiResource, ApiCapabilities) =
            kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let found = (ar, caps.scope == Scope::Namespaced);
        self.known.lock().insert(gvk, found.clone());
        Ok(found)
    }

    /// Forgets what discovery said, after a CRD changed.
    pub fn forget(&self) {
        self.known.lock().clear();
    }
}

/// The API for objects of `ar` in `namespace`, or cluster-wide for
/// cluster-scoped objects (`None`).
pub fn scoped_api<K>(client: Client, namespace: Option<&str>, ar: &ApiResource) -> kube::Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client, ns, ar),
        None => kube::Api::all_with(client, ar),
    }
}

pub fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}
