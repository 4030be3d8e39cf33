//! The storage layer of the API server, without HTTP: the store, the
//! kinds served, the admission chain and what every write consults
//! (active namespaces, address allocation, the RBAC and quota indexes,
//! the kubelet that stops pods). The generic store (`registry.rs`) and
//! the in-process controllers (garbage collector, namespace finalizer,
//! ServiceAccounts, CSR signer, CRD follower) work through it; the HTTP
//! front (`server::ApiServer`) holds one and adds routing,
//! authentication, audit, discovery and OpenAPI.

use std::sync::Arc;

use flotilla_store::Store;
use parking_lot::RwLock;
use serde_json::Value;

use crate::authz::{Decision, Mode};
use crate::config::Config;
use crate::error::ApiResult;
use crate::resources::Registry;

pub struct Storage {
    pub store: Arc<dyn Store>,
    pub registry: Arc<Registry>,
    pub config: Config,
    /// Signs and verifies ServiceAccount tokens.
    pub(crate) tokens: Arc<crate::tokens::Signer>,
    /// Serialises Service address assignment (read of the addresses in use,
    /// then the write that takes one).
    pub(crate) service_allocation: tokio::sync::Mutex<()>,
    /// Active namespaces, so that writes need not read theirs.
    pub(crate) namespaces: crate::namespace::active::ActiveNamespaces,
    /// What runs this cluster's pods, for their log, exec, attach and
    /// portforward subresources; unset where nothing runs them.
    pub(crate) kubelet: std::sync::OnceLock<Arc<dyn crate::kubelet::Kubelet>>,
    /// The kubelet serves only the connect subresources (a peering's
    /// virtual kubelet in a member whose pods are simulated): pods are
    /// still deleted at once rather than stopped within their grace.
    pub(crate) kubelet_connect_only: std::sync::atomic::AtomicBool,
    /// Mutating admission plugins of the embedding process, after the
    /// built-in ones (a member's peering: offloaded namespaces' pods).
    pub(crate) mutating_admission: RwLock<Vec<Arc<dyn crate::admission::Mutating>>>,
    /// Subresources and tables the embedding process adds to kinds it
    /// serves through CRDs (Gardener's, in the control plane).
    pub extensions: crate::extension::Extensions,
    /// Roles and bindings, as RBAC reads them.
    pub(crate) rbac: Arc<crate::rbac::Index>,
    /// ResourceQuotas by namespace, as quota admission reads them.
    pub(crate) quotas: Arc<crate::admission::QuotaIndex>,
}

fn is_privileged(user: &crate::user::User) -> bool {
    user.groups
        .iter()
        .any(|g| g == crate::authz::PRIVILEGED_GROUP)
}

impl Storage {
    /// Adds a mutating admission plugin, run after the built-in ones.
    pub fn add_mutating_admission(&self, plugin: Arc<dyn crate::admission::Mutating>) {
        self.mutating_admission.write().push(plugin);
    }

    /// Serves a CRD's `(group, plural)` at `version` converted from and to
    /// the stored version by `conversion`, now and whenever the CRD is
    /// served again.
    pub fn add_conversion(
        &self,
        group: &str,
        plural: &str,
        version: &str,
        conversion: crate::conversion::Conversion,
    ) {
        self.extensions
            .set_conversion(group, plural, version, conversion);
        self.registry
            .set_conversion(group, version, plural, conversion);
    }

    /// Answers `subresource` of `(group, plural)` with `handler` (POST),
    /// listed in discovery as upstream lists an aggregated server's.
    pub fn add_subresource(
        &self,
        group: &str,
        plural: &str,
        subresource: &str,
        handler: Arc<dyn crate::extension::SubresourceHandler>,
    ) {
        self.extensions
            .add_subresource(group, plural, subresource, handler);
        let added = self.extensions.added_subresources(group, plural);
        self.registry.set_added_subresources(group, plural, &added);
    }

    /// Puts `kubelet` behind pods' connect subresources (once).
    pub fn set_kubelet(&self, kubelet: Arc<dyn crate::kubelet::Kubelet>) {
        let _ = self.kubelet.set(kubelet);
    }

    /// Puts `kubelet` behind pods' connect subresources (once) where no
    /// kubelet stops pods: deletions stay immediate.
    pub fn set_connect_kubelet(&self, kubelet: Arc<dyn crate::kubelet::Kubelet>) {
        self.kubelet_connect_only
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.kubelet.set(kubelet);
    }

    /// Whether a kubelet stops this cluster's pods (deletions are graceful).
    pub fn runs_pods(&self) -> bool {
        self.kubelet.get().is_some()
            && !self
                .kubelet_connect_only
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `key`'s newest value. A key this replica lacks is looked for again
    /// once its reads are current (`Store::sync`): another replica on the
    /// same store may have written it a moment ago. Only if that brought
    /// anything new: most misses are the create of a new name (every
    /// first apply to a member), and a store only this replica writes
    /// would read SQLite twice for nothing.
    pub(crate) async fn get_latest(
        &self,
        key: &str,
    ) -> Result<Option<flotilla_store::KeyValue>, flotilla_store::StoreError> {
        let seen = self.store.current_revision();
        if let Some(kv) = self.store.get(key)? {
            return Ok(Some(kv));
        }
        self.store.sync().await?;
        if self.store.current_revision() == seen {
            return Ok(None);
        }
        self.store.get(key)
    }

    /// What admission plugins see of this server.
    pub(crate) fn admission_view(&self) -> crate::admission::View<'_> {
        crate::admission::View::new(
            self.store.as_ref(),
            &self.registry,
            self,
            self.config.authorization_mode,
            &self.rbac,
            &self.quotas,
        )
    }

    /// The mutating admission plugins on a write, the embedding
    /// process's after the built-in ones.
    pub(crate) fn mutate(
        &self,
        request: &crate::admission::Request,
        object: &mut Value,
    ) -> ApiResult<()> {
        let added = self.mutating_admission.read().clone();
        crate::admission::mutate(&self.admission_view(), &added, request, object)
    }

    /// The validating admission plugins on a write.
    pub(crate) fn validate(
        &self,
        request: &crate::admission::Request,
        object: &Value,
    ) -> ApiResult<()> {
        crate::admission::validate(&self.admission_view(), request, object)
    }

    /// Whether `user` may make the request: `system:masters`, then the
    /// embedding process's authorizers, then RBAC.
    pub fn authorize(&self, user: &crate::user::User, a: &crate::authz::Attributes) -> Decision {
        self.decide(
            user,
            || self.config.authorizers.decide(user, a),
            || crate::rbac::authorize(&self.rbac, user, a),
        )
    }

    /// [`Storage::authorize`] for a non-resource path.
    pub fn authorize_path(&self, user: &crate::user::User, verb: &str, path: &str) -> Decision {
        self.decide(
            user,
            || self.config.authorizers.decide_path(user, verb, path),
            || crate::rbac::authorize_path(&self.rbac, user, verb, path),
        )
    }

    /// The union's order, for either kind of request.
    fn decide(
        &self,
        user: &crate::user::User,
        chain: impl FnOnce() -> Decision,
        rbac: impl FnOnce() -> Decision,
    ) -> Decision {
        if is_privileged(user) {
            return Decision::Allow;
        }
        match chain() {
            Decision::NoOpinion => {}
            decided => return decided,
        }
        match self.config.authorization_mode {
            Mode::AlwaysAllow => Decision::Allow,
            Mode::Rbac => rbac(),
        }
    }
}

/// The storage decides as the server does for requests, for admission
/// plugins that ask who may do what ([`crate::admission::View::authorize`]).
impl crate::authz::Authorizer for Storage {
    fn authorize(&self, user: &crate::user::User, request: &crate::authz::Attributes) -> Decision {
        Storage::authorize(self, user, request)
    }

    fn authorize_path(&self, user: &crate::user::User, verb: &str, path: &str) -> Decision {
        Storage::authorize_path(self, user, verb, path)
    }
}
