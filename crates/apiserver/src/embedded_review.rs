//! Review kinds the embedding process answers (the control plane's
//! `PlacementReview`): served as the built-in reviews are (a POST is
//! answered, nothing is stored), their answers made outside this crate.

use serde_json::Value;

use crate::error::ApiResult;
use crate::user::User;

/// The name of a review kind the embedding process answers.
#[derive(Clone, Debug)]
pub struct ReviewKind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

/// A review kind answered by the embedding process (the control plane's
/// `PlacementReview`): its `spec` in, its `status` out, for the caller.
#[async_trait::async_trait]
pub trait EmbeddedReview: Send + Sync {
    fn kind(&self) -> ReviewKind;
    /// The `status` for `spec`, asked by `user`; an error is the answer's
    /// Status (a 403 where what it reads is forbidden to `user`).
    async fn answer(&self, user: &User, namespace: Option<&str>, spec: &Value) -> ApiResult<Value>;
}

/// How the registry serves an embedded review kind.
pub(crate) fn resource_of(review: &dyn EmbeddedReview) -> crate::resources::ResourceInfo {
    use crate::resources::{Computed, Printer, ResourceInfo};
    let k = review.kind();
    let mut info = ResourceInfo::computed(
        (k.group, k.version),
        (k.plural, k.kind),
        k.namespaced,
        Printer::Custom(Vec::new()),
        Computed::Review,
    );
    info.singular = k.kind.to_lowercase();
    info
}
