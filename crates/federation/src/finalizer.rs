//! Adding and removing a controller's finalizer, guarded by the object's
//! resourceVersion so that a concurrent change to the list is never lost.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Adds `finalizer`; whether it had to.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut all = obj.finalizers().to_vec();
    all.push(finalizer.into());
    write(api, obj, all).await?;
    Ok(true)
}

/// Removes `finalizer` if it is there; an object already gone has none.
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if !obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let rest = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    match write(api, obj, rest).await {
        // Gone already (another writer removed the last finalizer): what
        // was asked holds.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}
