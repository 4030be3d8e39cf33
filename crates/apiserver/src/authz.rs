//! Authorization, as kube-apiserver's union authorizer: members of
//! `system:masters` may do anything; then a chain of [`Authorizer`]s the
//! embedding process installs (the control plane's confines each pull-mode
//! agent to its own cluster, as kube-apiserver's Node authorizer confines
//! kubelets), each answering allow, deny or no opinion, the first with an
//! opinion deciding; then RBAC (`rbac`), unless the server runs with the
//! `AlwaysAllow` escape hatch. What nothing allows is forbidden.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use crate::error::ApiError;
use crate::user::User;
use flotilla_core::selector::FieldSelector;

/// What a request does, as upstream's authorizers name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// A verb that is not a REST operation (`impersonate`, `bind`,
    /// `escalate`, `approve`, or what a review names).
    Other(String),
}

impl Verb {
    pub fn as_str(&self) -> &str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other(v) => v,
        }
    }

    pub fn parse(verb: &str) -> Verb {
        match verb {
            "get" => Verb::Get,
            "list" => Verb::List,
            "watch" => Verb::Watch,
            "create" => Verb::Create,
            "update" => Verb::Update,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            "deletecollection" => Verb::DeleteCollection,
            other => Verb::Other(other.to_string()),
        }
    }

    /// get, list and watch.
    pub fn reads(&self) -> bool {
        matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a resource request asks, as upstream's authorizers see it.
pub struct Attributes<'a> {
    pub verb: Verb,
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

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied, and why (appended to the Forbidden message).
    Deny(String),
    /// Left to the next authorizer of the chain.
    NoOpinion,
}

/// The group whose members may do anything (upstream's privileged group).
pub const PRIVILEGED_GROUP: &str = "system:masters";

/// How the server authorizes (kube-apiserver's `--authorization-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Roles and bindings decide.
    #[default]
    Rbac,
    /// Every authenticated request is allowed: for tests only.
    AlwaysAllow,
}

/// Decides whether `user` may make a request, or leaves it to the next.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, user: &User, request: &Attributes) -> Decision;

    /// The same for a non-resource path (`/healthz`, `/api`).
    fn authorize_path(&self, _user: &User, _verb: &str, _path: &str) -> Decision {
        Decision::NoOpinion
    }
}

/// Authorizers asked in order; the first with an opinion decides.
#[derive(Clone, Default)]
pub struct Chain(Vec<Arc<dyn Authorizer>>);

impl Chain {
    pub fn new(authorizers: Vec<Arc<dyn Authorizer>>) -> Self {
        Chain(authorizers)
    }

    pub fn decide(&self, user: &User, request: &Attributes) -> Decision {
        self.0
            .iter()
            .map(|a| a.authorize(user, request))
            .find(|d| *d != Decision::NoOpinion)
            .unwrap_or(Decision::NoOpinion)
    }

    pub fn decide_path(&self, user: &User, verb: &str, path: &str) -> Decision {
        self.0
            .iter()
            .map(|a| a.authorize_path(user, verb, path))
            .find(|d| *d != Decision::NoOpinion)
            .unwrap_or(Decision::NoOpinion)
    }

    /// The request allowed, or upstream's 403.
    pub fn check(&self, user: &User, request: &Attributes) -> Result<(), ApiError> {
        match self.decide(user, request) {
            Decision::Deny(reason) => Err(request.forbidden(user, &reason)),
            _ => Ok(()),
        }
    }
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
        if matches!(self.verb, Verb::List | Verb::Watch) {
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

    /// Upstream's 403 for this request and `user`, with the authorizer's
    /// reason when it gave one.
    pub fn forbidden(&self, user: &User, reason: &str) -> ApiError {
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
        let reason = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        ApiError::forbidden(format!(
            "{subject} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}{reason}",
            user.name, self.verb, self.group
        ))
        .with_details(crate::error::Details {
            name: self.path_name.unwrap_or_default().to_string(),
            group: self.group.to_string(),
            kind: self.resource.to_string(),
            causes: Vec::new(),
        })
    }
}

/// Upstream's 403 for a non-resource path.
pub fn forbidden_path(user: &User, verb: &str, path: &str, reason: &str) -> ApiError {
    let reason = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    ApiError::forbidden(format!(
        "forbidden: User \"{}\" cannot {verb} path \"{path}\"{reason}",
        user.name
    ))
}
