//! ClusterRole aggregation, as upstream's controller: a ClusterRole with an
//! `aggregationRule` gets as its rules the union of the rules of the
//! ClusterRoles its selectors pick, kept current as they change (how
//! `admin`, `edit` and `view` grow with the kinds CRDs add).

use std::sync::Arc;

use serde_json::Value;
use tracing::warn;

use super::rule::Rule;
use crate::objects::WriteScope;
use crate::registry::{self, Request};
use crate::storage::Storage;

/// Re-aggregates whenever a ClusterRole changes.
pub fn spawn(api: Arc<Storage>) {
    tokio::spawn(async move {
        loop {
            api.rbac.cluster_roles_changed.notified().await;
            aggregate(&api).await;
        }
    });
}

async fn aggregate(api: &Arc<Storage>) {
    let Some(r) = api
        .registry
        .get("rbac.authorization.k8s.io", "v1", "clusterroles")
    else {
        return;
    };
    for (name, rules) in api.rbac.aggregations() {
        let wanted: Vec<Value> = rules.iter().map(Rule::to_json).collect();
        let req = Request::internal(api.clone(), r.clone(), None, Some(name.clone()));
        let result = registry::update(&req, |old| {
            let mut new = old.clone();
            new["rules"] = Value::Array(wanted.clone());
            crate::managed::track_update(
                &r,
                Some(old),
                &mut new,
                "clusterrole-aggregation-controller",
                WriteScope::Main,
            );
            Ok((new, Vec::new()))
        })
        .await;
        if let Err(error) = result
            && error.code != 404
        {
            warn!(error = %error.message, role = %name, "cannot aggregate a ClusterRole");
        }
    }
}
