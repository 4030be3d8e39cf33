//! Writes to the hub whose reply the controller reads little or nothing of:
//! decoding a whole object back into its type costs about as much as the
//! server spends on a small patch. They ask for the reply as
//! PartialObjectMetadata (as kube-rs's `patch_metadata` and client-go's
//! metadata client do), which spares the server rendering the rest of the
//! object (a Work's manifest); plain JSON stays acceptable, for a server
//! that does not transform write replies.

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::Value;

/// What a writer needs of the object it wrote: its new version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
}

/// Merge-patches `name` and reads only the version of the reply.
pub async fn merge_patch<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
) -> kube::Result<Written> {
    #[derive(Deserialize)]
    struct Reply {
        metadata: ReplyMeta,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ReplyMeta {
        resource_version: Option<String>,
        generation: Option<i64>,
    }
    let request = kube::core::Request::new(api.resource_url()).patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(patch),
    );
    let text = send_for_metadata(api, request).await?;
    let reply: Reply = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    Ok(Written {
        resource_version: reply.metadata.resource_version,
        generation: reply.metadata.generation,
    })
}

/// Merge-patches the status of `name` and drops the reply unread. Most
/// status writers never look at it, and decoding the whole object back
/// into its type costs about as much as the server spends on the patch.
pub async fn merge_patch_status<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
) -> kube::Result<()> {
    let request = kube::core::Request::new(api.resource_url()).patch_subresource(
        "status",
        name,
        &PatchParams::default(),
        &Patch::Merge(patch),
    );
    send_for_metadata(api, request).await?;
    Ok(())
}

/// Creates `obj` and reads only the metadata of the reply: `obj` as the
/// hub now holds it, for a writer that needs its version but not the
/// server's rendering of what it just sent (a Work's manifest).
pub async fn create<K>(api: &Api<K>, obj: &K) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::Serialize,
{
    #[derive(Deserialize)]
    struct Reply {
        metadata: kube::core::ObjectMeta,
    }
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(api.resource_url()).create(&PostParams::default(), body);
    let text = send_for_metadata(api, request).await?;
    let reply: Reply = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    let mut held = obj.clone();
    *held.meta_mut() = reply.metadata;
    Ok(held)
}

/// The reply a writer asks for: the object's metadata, else the object.
const METADATA_REPLY: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";

/// Sends a request built for `api`, asking for the reply's metadata only;
/// the reply's body as text.
async fn send_for_metadata<K: kube::Resource + Clone>(
    api: &Api<K>,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> kube::Result<String> {
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_REPLY),
    );
    api.clone().into_client().request_text(request).await
}
