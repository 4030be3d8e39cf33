//! Status writes shared by the workload controllers: counts that are zero
//! are omitted (upstream's omitempty), and a write happens only when
//! something changed, as a merge patch that also removes what went away.

use serde::Serialize;
use serde_json::{Value, json};

/// Drops zero counts except `keep` (fields upstream always serialises).
pub fn strip_zeros(status: &mut Value, keep: &[&str]) {
    if let Some(o) = status.as_object_mut() {
        o.retain(|k, v| keep.contains(&k.as_str()) || v != &json!(0));
    }
}

/// The merge patch taking `current` to `desired`, or `None` when they are
/// the same.
pub fn patch<S: Serialize>(current: &Option<S>, desired: &Value) -> Option<Value> {
    let current = serde_json::to_value(current).unwrap_or(Value::Null);
    if &current == desired {
        return None;
    }
    let mut patch = desired.clone();
    if let (Some(p), Some(c)) = (patch.as_object_mut(), current.as_object()) {
        for k in c.keys() {
            if !p.contains_key(k) {
                p.insert(k.clone(), Value::Null);
            }
        }
    }
    Some(json!({ "status": patch }))
}

/// Writes a merge patch through `/status`; an object deleted meanwhile is
/// not an error. Returns whether the object was still there.
pub async fn write<K>(api: &kube::Api<K>, name: &str, patch: &Value) -> Result<bool, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::PatchParams::default();
    match api
        .patch_status(name, &params, &kube::api::Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::cluster::is_status(&e, 404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes a merge patch to the object itself (metadata, spec); an object
/// deleted meanwhile is not an error. Returns whether it was still there.
pub async fn patch_object<K>(
    api: &kube::Api<K>,
    name: &str,
    patch: &Value,
) -> Result<bool, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::cluster::is_status(&e, 404) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_fields_are_nulled() {
        let current = Some(json!({"replicas": 1, "readyReplicas": 1}));
        let mut desired = json!({"replicas": 0, "readyReplicas": 0});
        strip_zeros(&mut desired, &["replicas"]);
        assert_eq!(
            patch(&current, &desired),
            Some(json!({"status": {"replicas": 0, "readyReplicas": null}}))
        );
        assert_eq!(patch(&Some(desired.clone()), &desired), None);
    }
}
