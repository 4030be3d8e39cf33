//! The hub's objects as JSON, through kube's dynamic API: what every
//! controller here reads and writes, with the conditions, finalizers and
//! owner references of the contract.

use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::error::Error;

/// The field manager of every write here.
pub const MANAGER: &str = "flotilla-lifecycle";

/// Objects of one namespace.
#[derive(Clone)]
pub struct Objects {
    pub client: Client,
    pub namespace: String,
}

impl Objects {
    pub fn new(client: Client, namespace: &str) -> Objects {
        Objects {
            client,
            namespace: namespace.into(),
        }
    }

    fn api(&self, r: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, r)
    }

    pub async fn get(&self, r: &ApiResource, name: &str) -> Result<Option<Value>, Error> {
        match self.api(r).get_opt(name).await? {
            Some(o) => Ok(Some(serde_json::to_value(o)?)),
            None => Ok(None),
        }
    }

    pub async fn list(&self, r: &ApiResource, selector: &str) -> Result<Vec<Value>, Error> {
        let params = ListParams::default().labels(selector);
        let list = self.api(r).list(&params).await?;
        list.items
            .into_iter()
            .map(|o| serde_json::to_value(o).map_err(Error::from))
            .collect()
    }

    /// Creates `object`; one that exists already is left as it is.
    pub async fn create(&self, r: &ApiResource, object: Value) -> Result<(), Error> {
        let obj: DynamicObject = serde_json::from_value(object)?;
        match self.api(r).create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn merge(&self, r: &ApiResource, name: &str, patch: Value) -> Result<(), Error> {
        self.api(r)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Writes `status` whole through the status subresource.
    pub async fn status(&self, r: &ApiResource, name: &str, status: Value) -> Result<(), Error> {
        self.api(r)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    /// Deletes `name` (in the background); gone already is fine.
    pub async fn delete(&self, r: &ApiResource, name: &str) -> Result<(), Error> {
        match self.api(r).delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn add_finalizer(
        &self,
        r: &ApiResource,
        object: &Value,
        finalizer: &str,
    ) -> Result<(), Error> {
        if has_finalizer(object, finalizer) {
            return Ok(());
        }
        let mut finalizers = finalizers(object);
        finalizers.push(finalizer.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object["metadata"]["resourceVersion"]}});
        self.merge(r, name(object), patch).await
    }

    /// The deletion of `owner` (of `kind`), whose `children` (of `child`)
    /// must go first: deletes those not going yet and looks again soon;
    /// once none is left, removes `finalizer` and is done (None).
    pub async fn finalize_after_children(
        &self,
        kind: &ApiResource,
        owner: &Value,
        finalizer: &str,
        child: &ApiResource,
        children: &[Value],
    ) -> Result<Option<std::time::Duration>, Error> {
        if children.is_empty() {
            self.remove_finalizer(kind, owner, finalizer).await?;
            return Ok(None);
        }
        for c in children.iter().filter(|c| !deleting(c)) {
            self.delete(child, name(c)).await?;
        }
        Ok(Some(std::time::Duration::from_millis(500)))
    }

    pub async fn remove_finalizer(
        &self,
        r: &ApiResource,
        object: &Value,
        finalizer: &str,
    ) -> Result<(), Error> {
        if !has_finalizer(object, finalizer) {
            return Ok(());
        }
        let rest: Vec<String> = finalizers(object)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": object["metadata"]["resourceVersion"]}});
        match self.merge(r, name(object), patch).await {
            Err(Error::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            other => other,
        }
    }
}

pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["labels"]
        .get(key)
        .and_then(Value::as_str)
}

pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"]
        .get(key)
        .and_then(Value::as_str)
}

pub fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    finalizers(object).iter().any(|f| f == finalizer)
}

/// An owner reference to `owner`, the controller when `controller`.
pub fn owner_ref(owner: &Value, controller: bool) -> Value {
    let mut r = json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    });
    if controller {
        r["controller"] = json!(true);
        r["blockOwnerDeletion"] = json!(true);
    }
    r
}

/// Whether `object` has an owner reference to `owner` (by uid).
pub fn owned_by(object: &Value, owner: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner["metadata"]["uid"]))
}

/// The name of the owner of kind `kind`, if one is.
pub fn owner_named<'a>(object: &'a Value, kind: &str) -> Option<&'a str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["kind"] == kind)?
        .get("name")?
        .as_str()
}

/// `object`'s owner references with `owner` added (when missing).
pub fn with_owner(object: &Value, owner: &Value, controller: bool) -> Value {
    let mut refs: Vec<Value> = object["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !refs.iter().any(|r| r["uid"] == owner["metadata"]["uid"]) {
        refs.push(owner_ref(owner, controller));
    }
    Value::Array(refs)
}

/// Now, as Kubernetes writes times.
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Sets condition `type_` in `status.conditions` (metav1.Condition), keeping
/// its transition time while its status is unchanged.
pub fn set_condition(status: &mut Value, type_: &str, state: &str, reason: &str, message: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = status
        .as_object_mut()
        .map(|o| o.entry("conditions").or_insert_with(|| json!([])));
    let Some(Value::Array(list)) = conditions else {
        return;
    };
    let existing = list.iter().position(|c| c["type"] == type_);
    let since = existing
        .and_then(|i| (list[i]["status"] == state).then(|| list[i]["lastTransitionTime"].clone()))
        .filter(|t| !t.is_null())
        .unwrap_or_else(|| json!(now()));
    let condition = json!({
        "type": type_,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    });
    match existing {
        Some(i) => list[i] = condition,
        None => list.push(condition),
    }
}

/// The status of condition `type_`, if set.
pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a str> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .get("status")?
        .as_str()
}

pub fn condition_true(object: &Value, type_: &str) -> bool {
    condition(object, type_) == Some("True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_unchanged() {
        let mut status = json!({});
        set_condition(&mut status, "Ready", "False", "NotReady", "waiting");
        status["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        set_condition(&mut status, "Ready", "False", "NotReady", "still waiting");
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(status["conditions"][0]["message"], "still waiting");
        set_condition(&mut status, "Ready", "True", "Ready", "");
        assert_ne!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
    }
}
