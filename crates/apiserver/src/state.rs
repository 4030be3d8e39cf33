//! The API server's shared state: its storage and what the HTTP front
//! keeps beside it. What the handlers and filters are given; the routing
//! over it (`server.rs`) is above them, so nothing here imports it.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::auth::Authenticator;
use crate::discovery;
use crate::openapi::OpenApi;
use crate::storage::Storage;

/// One API server: the HTTP front (routing, authentication, audit,
/// discovery, OpenAPI, the aggregated APIs' seams) over its [`Storage`],
/// which it dereferences to.
pub struct ApiServer {
    pub storage: Arc<Storage>,
    pub openapi: OpenApi,
    /// The aggregated discovery documents, rebuilt when the kinds change.
    pub discovery: discovery::AggregatedCache,
    pub(crate) authenticator: Option<Authenticator>,
    pub(crate) address: RwLock<String>,
    /// Whether a task keeps the `kubernetes` Service (one per server,
    /// however often it serves again: a member's unreachable fault).
    pub(crate) keeps_kubernetes_service: std::sync::atomic::AtomicBool,
    /// Set once the server stops: watches end at once, as kube-apiserver
    /// ends them on shutdown, so a graceful stop waits only for ordinary
    /// requests (clients watch again elsewhere).
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
    /// What measures nodes and pods for `metrics.k8s.io`; the group is
    /// served only once it is set.
    pub(crate) resource_metrics:
        std::sync::OnceLock<Arc<dyn crate::resource_metrics::ResourceMetrics>>,
    /// Karmada's `clusters/NAME/proxy` (the control plane sets it).
    pub(crate) cluster_proxy: std::sync::OnceLock<Arc<dyn crate::cluster_proxy::ClusterProxy>>,
    /// Review kinds the embedding process answers, by plural.
    pub(crate) embedded_reviews: parking_lot::RwLock<
        std::collections::BTreeMap<String, Arc<dyn crate::embedded_review::EmbeddedReview>>,
    >,
}

impl std::ops::Deref for ApiServer {
    type Target = Storage;

    fn deref(&self) -> &Storage {
        &self.storage
    }
}
