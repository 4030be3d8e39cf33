//! What a reconcile can fail with.

use std::time::Duration;

use crate::members::MemberError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Hub(#[from] kube::Error),
    #[error(transparent)]
    Member(#[from] MemberError),
    #[error("cluster {cluster}: {source}")]
    MemberApi {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("invalid object: {0}")]
    Invalid(#[from] serde_json::Error),
    #[error(transparent)]
    Install(#[from] flotilla_client::crd::InstallError),
    /// A multi-cluster service that cannot be served as asked (a full
    /// ClusterSetIP range, a member watch that ended).
    #[error("{0}")]
    Mcs(String),
}

impl Error {
    pub fn member(cluster: &str) -> impl FnOnce(kube::Error) -> Error + '_ {
        move |source| Error::MemberApi {
            cluster: cluster.to_string(),
            source,
        }
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Hub(e) if is_conflict(e))
    }

    /// Optimistic-concurrency conflicts retry at once; anything else backs
    /// off.
    pub fn retry_after(&self) -> Duration {
        if self.is_conflict() {
            Duration::from_millis(50)
        } else {
            Duration::from_secs(2)
        }
    }
}

pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.reason == "AlreadyExists")
}

pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
