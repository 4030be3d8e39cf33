//! Authorization. There is no RBAC yet: an authenticated user may do
//! anything, unless an [`Authorizer`] the embedder installs says no. The
//! control plane installs one that confines each pull-mode agent to its
//! own cluster, as kube-apiserver's Node authorizer confines kubelets.

use serde::Deserialize;

use crate::auth::User;
use crate::error::ApiError;

/// What a resource request asks, as upstream's authorizers see it.
pub struct Attributes<'a> {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'a str,
    pub group: &'a str,
    /// The plural, e.g. `works`.
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    /// From the path; for a create, from the body (see [`Attributes::name`]).
    pub path_name: Option<&'a str>,
    pub body: &'a [u8],
}

impl Attributes<'_> {
    /// The object's name: from the path, or for a create the body's
    /// `metadata.name` (read only when an authorizer asks).
    pub fn name(&self) -> Option<String> {
        if let Some(n) = self.path_name {
            return Some(n.to_string());
        }
        #[derive(Deserialize)]
        struct Meta {
            name: Option<String>,
        }
        #[derive(Deserialize)]
        struct Named {
            metadata: Option<Meta>,
        }
        let named: Named = serde_json::from_slice(self.body).ok()?;
        named.metadata?.name
    }

    /// Upstream's 403 for this request and `user`.
    pub fn forbidden(&self, user: &User) -> ApiError {
        let qualified = if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let subject = match self.path_name {
            Some(n) => format!("{qualified} \"{n}\""),
            None => qualified,
        };
        let resource = match self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.to_string(),
        };
        let scope = match self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        ApiError::forbidden(format!(
            "{subject} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            user.name, self.verb, self.group
        ))
    }
}

/// Decides whether `user` may make a request.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, user: &User, request: &Attributes) -> Result<(), ApiError>;
}
