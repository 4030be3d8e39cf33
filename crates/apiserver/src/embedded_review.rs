//! Review kinds the embedding process answers (the control plane's
//! `PlacementReview`): served as the built-in reviews are (a POST is
//! answered, nothing is stored), their answers made outside this crate.

use serde_json::{Value, json};

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
    use crate::resources::{Computed, Printer, ResourceInfo, Schema};
    let k = review.kind();
    ResourceInfo {
        group: k.group.into(),
        version: k.version.into(),
        plural: k.plural.into(),
        singular: k.kind.to_lowercase(),
        kind: k.kind.into(),
        list_kind: format!("{}List", k.kind),
        namespaced: k.namespaced,
        short_names: Vec::new(),
        categories: Vec::new(),
        status_subresource: false,
        uses_generation: false,
        custom: false,
        printer: Printer::Custom(Vec::new()),
        schema: Schema::Structural(std::sync::Arc::new(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        )),
        selectable_fields: Vec::new(),
        scale: None,
        computed: Some(Computed::Review),
        conversion: None,
        added_subresources: Vec::new(),
    }
}
