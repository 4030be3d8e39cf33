//! What an embedding process adds to a kind it serves through a CRD, as
//! an aggregated API server serves its own kinds: a subresource answered
//! by the embedder's handler (Gardener's `shoots/adminkubeconfig`), and
//! `kubectl get`'s columns computed from the object where a CRD's JSONPath
//! columns cannot say it (Gardener's "Create Succeeded (100%)").
//!
//! A user's deletion of an object of such a kind may be refused by the
//! embedder, as a validating admission plugin on DELETE refuses it
//! (Gardener's deletion confirmation); the server's own deletions
//! (garbage collection, a namespace's) are not asked.
//!
//! A CRD's kind served at versions of different shapes is converted
//! between them by the embedder's functions (Cluster API's v1beta1 and
//! v1beta2), as a conversion webhook would: on its way out of the store
//! and back in (`conversion.rs` does the same for built-in kinds).
//!
//! The request is authenticated and authorised as any other (`create` on
//! `shoots/adminkubeconfig`) before the handler sees it; the handler is
//! handed the stored parent object, the request body and the user.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::RwLock;
use serde_json::Value;

use crate::conversion::Conversion;
use crate::error::ApiResult;
use crate::resources::{AddedSubresource, ResourceInfo};
use crate::user::User;

/// One call of an added subresource (POST, as a `NamedCreater`).
pub struct SubresourceCall {
    /// The object the subresource belongs to, as stored.
    pub parent: Value,
    /// The request's body, decoded.
    pub body: Value,
    /// Who asked; None when the server serves without authentication.
    pub user: Option<User>,
}

/// Answers an added subresource: the object to return with 201, or an
/// error as a Status.
pub trait SubresourceHandler: Send + Sync {
    fn create(&self, call: SubresourceCall) -> BoxFuture<'static, ApiResult<Value>>;
    /// What it answers, as (group, version, kind), for discovery.
    fn response_kind(&self) -> (&'static str, &'static str, &'static str);
}

/// A column of a computed table.
#[derive(Clone, Debug)]
pub struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: i64,
}

/// `kubectl get`'s columns of a kind, computed from each object; the
/// cells are aligned with the columns (Name and Age included).
pub trait TableConvertor: Send + Sync {
    fn columns(&self) -> Vec<Column>;
    fn cells(&self, object: &Value) -> Vec<Value>;
}

/// (group, plural, subresource or version).
/// Refuses a user's deletion of an object, with why (403 Forbidden, as
/// upstream's admission answers).
pub trait DeleteAdmission: Send + Sync {
    fn admit_delete(&self, object: &Value) -> ApiResult<()>;
}

type SubresourceKey = (String, String, String);

/// The embedder's additions, by (group, plural[, subresource]).
#[derive(Default)]
pub struct Extensions {
    subresources: RwLock<HashMap<SubresourceKey, Arc<dyn SubresourceHandler>>>,
    tables: RwLock<HashMap<(String, String), Arc<dyn TableConvertor>>>,
    conversions: RwLock<HashMap<SubresourceKey, Conversion>>,
    deletes: RwLock<HashMap<(String, String), Arc<dyn DeleteAdmission>>>,
}

impl Extensions {
    /// Adds a subresource; `Storage::add_subresource` also lists it in
    /// discovery.
    pub(crate) fn add_subresource(
        &self,
        group: &str,
        plural: &str,
        subresource: &str,
        handler: Arc<dyn SubresourceHandler>,
    ) {
        self.subresources
            .write()
            .insert((group.into(), plural.into(), subresource.into()), handler);
    }

    /// The subresources added to `(group, plural)`, as discovery lists
    /// them (POST only: `create`).
    pub(crate) fn added_subresources(&self, group: &str, plural: &str) -> Vec<AddedSubresource> {
        let mut added: Vec<AddedSubresource> = self
            .subresources
            .read()
            .iter()
            .filter(|((g, p, _), _)| g == group && p == plural)
            .map(|((_, _, name), handler)| {
                let (g, v, k) = handler.response_kind();
                AddedSubresource {
                    name: name.clone(),
                    response: (g.into(), v.into(), k.into()),
                    verbs: vec!["create".into()],
                }
            })
            .collect();
        added.sort_by(|a, b| a.name.cmp(&b.name));
        added
    }

    pub fn add_delete_admission(
        &self,
        group: &str,
        plural: &str,
        admission: Arc<dyn DeleteAdmission>,
    ) {
        self.deletes
            .write()
            .insert((group.into(), plural.into()), admission);
    }

    /// Whether a user may delete `object` of `r`, as the embedder decides.
    pub(crate) fn admit_delete(&self, r: &ResourceInfo, object: &Value) -> ApiResult<()> {
        let check = self
            .deletes
            .read()
            .get(&(r.group.clone(), r.plural.clone()))
            .cloned();
        match check {
            Some(check) => check.admit_delete(object),
            None => Ok(()),
        }
    }

    pub fn add_table(&self, group: &str, plural: &str, convertor: Arc<dyn TableConvertor>) {
        self.tables
            .write()
            .insert((group.into(), plural.into()), convertor);
    }

    /// The conversion of `(group, plural)` at `version` from and to the
    /// stored version; the registry is told by `Storage::add_conversion`.
    pub(crate) fn set_conversion(
        &self,
        group: &str,
        plural: &str,
        version: &str,
        conversion: Conversion,
    ) {
        self.conversions
            .write()
            .insert((group.into(), plural.into(), version.into()), conversion);
    }

    /// The conversion a CRD's resource is served with, if one was added.
    pub(crate) fn conversion(&self, r: &ResourceInfo) -> Option<Conversion> {
        self.conversions
            .read()
            .get(&(r.group.clone(), r.plural.clone(), r.version.clone()))
            .copied()
    }

    pub(crate) fn subresource(
        &self,
        r: &ResourceInfo,
        subresource: &str,
    ) -> Option<Arc<dyn SubresourceHandler>> {
        self.subresources
            .read()
            .get(&(r.group.clone(), r.plural.clone(), subresource.to_string()))
            .cloned()
    }

    pub(crate) fn table(&self, r: &ResourceInfo) -> Option<Arc<dyn TableConvertor>> {
        self.tables
            .read()
            .get(&(r.group.clone(), r.plural.clone()))
            .cloned()
    }
}
