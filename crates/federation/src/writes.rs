//! Writes to the hub whose reply the controller does not read.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

/// Merge-patches the status of `name` and drops the reply unread. Most
/// status writers never look at it, and decoding the whole object back
/// into its type costs about as much as the server spends on the patch.
pub async fn merge_patch_status<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
) -> kube::Result<()> {
    let request = kube::core::Request::new(api.resource_url())
        .patch_subresource(
            "status",
            name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .map_err(kube::Error::BuildRequest)?;
    api.clone().into_client().request_text(request).await?;
    Ok(())
}
