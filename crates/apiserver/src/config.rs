//! The API server's tunables, as the embedding process sets them.

use std::sync::Arc;
use std::time::Duration;

/// Tunables of the API server.
#[derive(Clone)]
pub struct Config {
    /// How often watches with allowWatchBookmarks get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// The audit log (`--audit-policy-file`); `None` audits nothing.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// The admin bearer token; `None` serves without authentication
    /// (embedding in tests of the library only; the binary always sets it).
    pub admin_token: Option<String>,
    /// Where Service ClusterIPs and NodePorts come from.
    pub service_network: crate::allocation::ServiceNetwork,
    /// What `/metrics` serves (Prometheus text), when something embeds
    /// metrics of its own (the control plane's controllers).
    pub metrics: Option<MetricsSource>,
    /// Authorizers of the embedding process, asked in order before RBAC.
    pub authorizers: crate::authz::Chain,
    /// Tokens of the embedding process's components and whom each names
    /// (`auth::component_identity`).
    pub component_identities: Vec<(String, crate::user::User)>,
    /// RBAC, or every authenticated request allowed (tests only).
    pub authorization_mode: crate::authz::Mode,
    /// The CA that signs the serving certificate (PEM), published in every
    /// namespace as the `kube-root-ca.crt` ConfigMap.
    pub root_ca: Option<String>,
    /// The key ServiceAccount tokens are signed with; every replica must
    /// have the same (`tls::Pki::token_key`). `None`: a key of this process.
    pub token_key: Option<[u8; 32]>,
    /// The CA's private key (PEM): with `root_ca`, the in-process signer
    /// of `kubernetes.io/kube-apiserver-client` CSRs (`csr.rs`) issues
    /// client certificates with it. `None`: no signer runs.
    pub ca_key: Option<String>,
    /// Users from `--token-auth-file`, besides the other tokens.
    pub static_tokens: Option<Arc<crate::token_file::StaticTokens>>,
    /// Pages served to anyone, before authentication, by path: static
    /// files that hold no data (the hub's dashboard, which reads the API
    /// with its user's own token).
    pub public_pages: Option<PublicPages>,
}

/// What a public path answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublicAnswer {
    Page {
        content_type: &'static str,
        body: &'static [u8],
        headers: &'static [(&'static str, &'static str)],
    },
    /// A permanent redirect (`/dashboard` to `/dashboard/`).
    Redirect(&'static str),
}

/// The public answer for a request's path, if it has one.
pub type PublicPages = Arc<dyn Fn(&str) -> Option<PublicAnswer> + Send + Sync>;

/// Renders the Prometheus text exposition on each scrape.
pub type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

impl Default for Config {
    fn default() -> Self {
        Config {
            bookmark_interval: Duration::from_secs(60),
            audit: None,
            admin_token: None,
            service_network: Default::default(),
            metrics: None,
            authorizers: Default::default(),
            authorization_mode: Default::default(),
            component_identities: Vec::new(),
            root_ca: None,
            token_key: None,
            ca_key: None,
            static_tokens: None,
            public_pages: None,
        }
    }
}
