//! Writing what the front end generates: server-side apply under its own
//! field manager, skipped when what was last applied is the same (the
//! controller looks at every object each second).

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::debug;

use super::api::{FIELD_MANAGER, HASH_ANNOTATION};
use crate::names::fnv32a;

/// Server-side applies `obj` unless what was last applied is the same;
/// the object's uid.
pub async fn apply(hub: &Client, ar: &ApiResource, mut obj: Value) -> kube::Result<Option<String>> {
    let hash = fnv32a(obj.to_string().as_bytes()).to_string();
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][HASH_ANNOTATION] = json!(hash);
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, ar),
        None => Api::all_with(hub.clone(), ar),
    };
    if let Some(existing) = api.get_opt(&name).await?
        && existing.annotations().get(HASH_ANNOTATION) == Some(&hash)
    {
        return Ok(existing.metadata.uid);
    }
    debug!(kind = %ar.kind, %name, "KubeFed: applying generated object");
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await?;
    Ok(applied.metadata.uid)
}
