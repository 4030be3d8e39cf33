//! OCM's rule for binding a cluster set to a namespace: whoever creates
//! or changes a ManagedClusterSetBinding must be allowed `create` on the
//! virtual subresource `managedclustersets/bind` of that set, as OCM's
//! webhook checks. So a tenant that administers its namespace cannot
//! bind itself clusters an admin did not grant it.

use flotilla_apiserver::admission::{Mutating, Request, View};
use flotilla_apiserver::authz::{Attributes, Decision, Verb};
use flotilla_apiserver::error::{ApiError, ApiResult};
use serde_json::Value;

use super::api::GROUP;

pub struct ClusterSetBindings;

impl Mutating for ClusterSetBindings {
    fn admit(&self, view: &View, request: &Request, object: &mut Value) -> ApiResult<()> {
        let r = request.resource;
        if r.group != GROUP || r.plural != "managedclustersetbindings" {
            return Ok(());
        }
        let Some(user) = request.user else {
            return Ok(());
        };
        let set = object
            .pointer("/spec/clusterSet")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let unchanged = request
            .old
            .and_then(|old| old.pointer("/spec/clusterSet"))
            .and_then(Value::as_str)
            == Some(set);
        if unchanged {
            return Ok(());
        }
        let bind = Attributes {
            verb: Verb::Create,
            group: GROUP,
            resource: "managedclustersets",
            subresource: Some("bind"),
            namespace: None,
            path_name: Some(set),
            field_selector: None,
            body: &[],
        };
        match view.authorize(user, &bind) {
            Decision::Allow => Ok(()),
            _ => Err(ApiError::forbidden(format!(
                "user {:?} is not allowed to bind cluster set {set:?}",
                user.name
            ))),
        }
    }
}
