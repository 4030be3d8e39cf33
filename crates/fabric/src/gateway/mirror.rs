//! The member's copies of the broker's Endpoints (in
//! `submariner-operator`), as Submariner's datastore syncer keeps them: a
//! gateway that becomes active while the broker is unreachable (a
//! failover during a hub outage) connects from these, so the data plane
//! never depends on the broker being up.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::MANAGER;
use crate::api::{Endpoint, EndpointSpec, GROUP, OPERATOR_NAMESPACE, VERSION};

/// Marks the copies (the member's own objects of the kind are left alone).
const MIRROR_LABEL: &str = "flotilla.io/broker-copy";

/// What was last copied, by name.
pub type Mirrored = BTreeMap<String, EndpointSpec>;

/// Makes the member's copies exactly `broker` (changed ones written,
/// gone ones deleted); returns what the member now holds.
pub async fn sync(
    member: &Client,
    broker: &[Endpoint],
    have: &Mirrored,
) -> Result<Mirrored, kube::Error> {
    let api: Api<Endpoint> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    let want: Mirrored = broker
        .iter()
        .map(|e| (e.name_any(), e.spec.clone()))
        .collect();
    if &want == have {
        return Ok(want);
    }
    for (name, spec) in &want {
        if have.get(name) == Some(spec) {
            continue;
        }
        let copy = Endpoint {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(OPERATOR_NAMESPACE.into()),
                labels: Some([(MIRROR_LABEL.to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            spec: spec.clone(),
        };
        let mut body = serde_json::to_value(&copy).unwrap_or_default();
        body["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
        body["kind"] = json!("Endpoint");
        api.patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    }
    for old in api
        .list(&ListParams::default().labels(MIRROR_LABEL))
        .await?
    {
        if !want.contains_key(&old.name_any()) {
            let _ = api.delete(&old.name_any(), &DeleteParams::default()).await;
        }
    }
    Ok(want)
}

/// The member's copies.
pub async fn read(member: &Client) -> Result<Vec<Endpoint>, kube::Error> {
    let api: Api<Endpoint> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    Ok(api
        .list(&ListParams::default().labels(MIRROR_LABEL))
        .await?
        .items)
}
