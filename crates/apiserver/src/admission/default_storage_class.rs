//! DefaultStorageClass: a PersistentVolumeClaim created without
//! `storageClassName` gets the cluster's default StorageClass (the one
//! annotated `storageclass.kubernetes.io/is-default-class: "true"`, the
//! newest when several are), as upstream's plugin; an empty
//! `storageClassName` asks for none and is kept.

use serde_json::{Value, json};

use super::{Mutating, Operation, Request, View};
use crate::error::ApiResult;

pub struct DefaultStorageClass;

const IS_DEFAULT: &str = "storageclass.kubernetes.io/is-default-class";
const IS_DEFAULT_BETA: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// The name of the default StorageClass, if there is one.
fn default_class(view: &View) -> Option<String> {
    view.list("storage.k8s.io", "v1", "storageclasses", None)
        .into_iter()
        .filter(|class| {
            [IS_DEFAULT, IS_DEFAULT_BETA].iter().any(|a| {
                class
                    .pointer(&format!("/metadata/annotations/{}", a.replace('/', "~1")))
                    .and_then(Value::as_str)
                    == Some("true")
            })
        })
        // The newest, then by name, as upstream picks among several.
        .max_by(|a, b| {
            let key = |c: &Value| {
                (
                    c.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    c.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            };
            key(a).cmp(&key(b))
        })
        .and_then(|c| c.pointer("/metadata/name")?.as_str().map(str::to_string))
}

impl Mutating for DefaultStorageClass {
    fn admit(&self, view: &View, request: &Request, claim: &mut Value) -> ApiResult<()> {
        if request.operation != Operation::Create
            || !request.resource.group.is_empty()
            || request.resource.plural != "persistentvolumeclaims"
            || request.subresource.is_some()
            || claim
                .pointer("/spec/storageClassName")
                .is_some_and(|c| !c.is_null())
        {
            return Ok(());
        }
        if let (Some(class), Some(spec)) = (
            default_class(view),
            claim.get_mut("spec").and_then(Value::as_object_mut),
        ) {
            spec.insert("storageClassName".into(), json!(class));
        }
        Ok(())
    }
}
