//! Why a reconcile failed; it is retried with a growing pause.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("malformed object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the member's admin endpoint: {0}")]
    Admin(#[from] flotilla_member::admin::client::AdminError),
    #[error("{0}")]
    Provider(String),
}
