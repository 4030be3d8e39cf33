//! Authorization. There is no RBAC yet: an authenticated user may do
//! anything, unless an [`Authorizer`] the embedder installs says no. The
//! control plane installs one that confines each pull-mode agent to its
//! own cluster, as kube-apiserver's Node authorizer confines kubelets.

use serde::Deserialize;

use crate::auth::User;
use crate::error::ApiError;
use crate::selector::FieldSelector;

/// What a resource request asks, as upstream's authorizers see it.
pub struct Attributes<'a> {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'a str,
    pub group: &'a str,
    /// The plural, e.g. `works`.
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    /// From the path; for a create, from the body; for a list or watch,
    /// from the field selector (see [`Attributes::name`]).
    pub path_name: Option<&'a str>,
    /// A list's or watch's `fieldSelector`.
    pub field_selector: Option<&'a str>,
    pub body: &'a [u8],
}

impl Attributes<'_> {
    /// The object's name: from the path; for a create, the body's
    /// `metadata.name` (read only when an authorizer asks); for a list or
    /// watch, the name its field selector narrows it to, as upstream
    /// authorizers see selectors (KEP-4601), so that a client confined to
    /// one object can still watch it.
    pub fn name(&self) -> Option<String> {
        if let Some(n) = self.path_name {
            return Some(n.to_string());
        }
        if matches!(self.verb, "list" | "watch") {
            let selector = FieldSelector::parse(self.field_selector?, &|_| true).ok()?;
            return selector.equal_to("metadata.name").map(str::to_string);
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
