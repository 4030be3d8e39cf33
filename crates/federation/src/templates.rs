//! The detector's caches of templates, by kind, shared with the
//! controllers that render them into Works: a binding's Works are written
//! from the cached template when it is the one the binding was made from,
//! instead of reading it from the hub again (a round trip on the path of
//! every template to its members).

use std::collections::HashMap;
use std::sync::Arc;

use kube::api::DynamicObject;
use parking_lot::RwLock;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::{ObjectReference, annotations};
use crate::interpreter;
use crate::packed::{self, PackedStore};

/// A digest of what a template delivers (its manifest as
/// [`interpreter::manifest`] makes it), recorded on its binding: writes to
/// its status do not change it, so they do not re-render its Works.
pub fn digest(manifest: &Value) -> String {
    let bytes = serde_json::to_vec(manifest).unwrap_or_default();
    let hash = Sha256::digest(&bytes);
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Each template kind's cache, by apiVersion and kind.
#[derive(Default)]
pub struct Templates(RwLock<HashMap<(String, String), PackedStore<DynamicObject>>>);

impl Templates {
    /// The detector watches `api_version`/`kind` into `store`.
    pub fn register(&self, api_version: &str, kind: &str, store: PackedStore<DynamicObject>) {
        self.0
            .write()
            .insert((api_version.to_string(), kind.to_string()), store);
    }

    /// The template of `api_version`/`kind` named `name` in `namespace`
    /// ("" for cluster-scoped ones) as the cache holds it, if the kind is
    /// watched and it exists.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let store = self
            .0
            .read()
            .get(&(api_version.to_string(), kind.to_string()))?
            .clone();
        let namespace = (!namespace.is_empty()).then_some(namespace);
        store.get_key(&packed::key(namespace, name))
    }

    /// The kind is no longer watched.
    pub fn unregister(&self, api_version: &str, kind: &str) {
        self.0
            .write()
            .remove(&(api_version.to_string(), kind.to_string()));
    }

    /// The template `r` names as the cache holds it, with its manifest,
    /// when it is the very template the binding annotated with
    /// `binding_annotations` was made from (same uid, same digest);
    /// `None` when the cache is behind or ahead of the binding, or holds
    /// no such kind.
    pub fn made_from(
        &self,
        r: &ObjectReference,
        binding_annotations: &std::collections::BTreeMap<String, String>,
    ) -> Option<(Arc<DynamicObject>, Value)> {
        let wanted = binding_annotations.get(annotations::TEMPLATE_DIGEST)?;
        let store = self
            .0
            .read()
            .get(&(r.api_version.clone(), r.kind.clone()))?
            .clone();
        let namespace = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
        let template = store.get_key(&packed::key(namespace, &r.name))?;
        if template.metadata.uid.as_deref() != Some(r.uid.as_str()) {
            return None;
        }
        let manifest = interpreter::manifest(&serde_json::to_value(&*template).ok()?);
        (&digest(&manifest) == wanted).then_some((template, manifest))
    }
}
