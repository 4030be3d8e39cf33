//! ResourceSlices in tenant namespaces: what a consumer asks for is
//! granted when this cluster can share it (the allocatable of its own
//! nodes, less what other consumers were granted), denied with the
//! figures when it cannot. A request for nothing in particular gets an
//! equal share of what is left. The provider's administrator may change a
//! grant afterwards (`kubectl edit --subresource=status`); the grant is
//! only computed again when the consumer changes its request.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info};

use crate::api::{LiqoCondition, ResourceSlice, TYPE_LABEL, TYPE_VIRTUAL_NODE, set_condition};
use crate::quantity;

const PERIOD: Duration = Duration::from_millis(500);
/// The request a grant answered (its digest), so a changed request is
/// granted again and an administrator's edit of a grant stays.
pub const GRANTED_FOR: &str = "liqo.io/granted-for";
/// What a provider shares, as Liqo's default: cpu, memory and pods.
const SHARED: [&str; 3] = ["cpu", "memory", "pods"];

pub async fn run(local: Client) {
    // A consumer's request is granted as soon as it arrives.
    let wake = std::sync::Arc::new(tokio::sync::Notify::new());
    crate::wake::on_changes(Api::<ResourceSlice>::all(local.clone()), wake.clone());
    loop {
        if let Err(error) = pass(&local).await {
            debug!(%error, "resource slices not granted");
        }
        crate::wake::woken_or_after(&wake, PERIOD).await;
    }
}

/// What a grant answers: the request's resources.
pub fn request_digest(slice: &ResourceSlice) -> String {
    serde_json::to_string(&slice.spec.resources).unwrap_or_default()
}

async fn pass(local: &Client) -> Result<(), kube::Error> {
    let slices = match Api::<ResourceSlice>::all(local.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(_) => return Ok(()),
    };
    // Only copies a consumer put in its tenant namespace here: a
    // consumer's own slices (asking someone else) live in a provider's
    // tenant namespace and have no consumer ID of ours.
    let incoming: Vec<&ResourceSlice> = slices
        .iter()
        .filter(|s| s.spec.consumer_cluster_id.is_some())
        .filter(|s| {
            s.namespace().as_deref()
                == s.spec
                    .consumer_cluster_id
                    .as_deref()
                    .map(crate::api::tenant_namespace)
                    .as_deref()
        })
        .collect();
    if incoming
        .iter()
        .all(|s| s.annotations().get(GRANTED_FOR) == Some(&request_digest(s)) && s.status.is_some())
    {
        return Ok(());
    }
    let capacity = shareable(local).await?;
    for slice in &incoming {
        if slice.annotations().get(GRANTED_FOR) == Some(&request_digest(slice))
            && slice.status.is_some()
        {
            continue;
        }
        // What the others hold stays theirs.
        let mut free = capacity.clone();
        for other in &incoming {
            if other.uid() == slice.uid() {
                continue;
            }
            for (k, v) in other.status.iter().flat_map(|s| s.resources.iter()) {
                if let Some(f) = free.get_mut(k) {
                    *f -= quantity::parse(&v.0).unwrap_or(0.0);
                }
            }
        }
        let others = incoming.len().max(1) as f64;
        let (accepted, resources, message) = decide(&slice.spec.resources, &free, others);
        let mut status = slice.status.clone().unwrap_or_default();
        set_condition(
            &mut status.conditions,
            LiqoCondition::new("Authentication", "Accepted", "", ""),
        );
        let (state, reason) = if accepted {
            ("Accepted", "ResourcesAccepted")
        } else {
            ("Denied", "ResourcesDenied")
        };
        set_condition(
            &mut status.conditions,
            LiqoCondition::new("Resources", state, reason, &message),
        );
        status.resources = resources;
        let api: Api<ResourceSlice> =
            Api::namespaced(local.clone(), &slice.namespace().unwrap_or_default());
        api.patch_status(
            &slice.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
        api.patch(
            &slice.name_any(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {GRANTED_FOR: request_digest(slice)}}}),
            ),
        )
        .await?;
        info!(consumer = ?slice.spec.consumer_cluster_id, %state, %message, "resource slice answered");
    }
    Ok(())
}

/// The allocatable cpu (cores), memory (bytes) and pods of this
/// cluster's own nodes (virtual nodes lend what is not ours).
async fn shareable(local: &Client) -> Result<BTreeMap<String, f64>, kube::Error> {
    let nodes = Api::<Node>::all(local.clone())
        .list(&ListParams::default())
        .await?;
    let mut total: BTreeMap<String, f64> = SHARED.iter().map(|k| (k.to_string(), 0.0)).collect();
    for n in nodes.items {
        if n.labels().get(TYPE_LABEL).map(String::as_str) == Some(TYPE_VIRTUAL_NODE) {
            continue;
        }
        let allocatable = n.status.and_then(|s| s.allocatable).unwrap_or_default();
        for k in SHARED {
            if let Some(q) = allocatable.get(k) {
                *total.entry(k.into()).or_default() += quantity::parse(&q.0).unwrap_or(0.0);
            }
        }
    }
    Ok(total)
}

/// Grants `request` from `free`: all of it or nothing, with why; an
/// empty request gets `free` split among `consumers`.
pub fn decide(
    request: &BTreeMap<String, Quantity>,
    free: &BTreeMap<String, f64>,
    consumers: f64,
) -> (bool, BTreeMap<String, Quantity>, String) {
    if request.is_empty() {
        let granted = free
            .iter()
            .map(|(k, v)| (k.clone(), quantity::format(k, (v / consumers).max(0.0))))
            .collect();
        return (true, granted, "the provider's share".into());
    }
    let mut short = Vec::new();
    for (k, q) in request {
        let want = quantity::parse(&q.0).unwrap_or(f64::MAX);
        let have = free.get(k).copied().unwrap_or(0.0);
        if want > have {
            short.push(format!(
                "{k}: asked for {}, {} free to share",
                q.0,
                quantity::format(k, have.max(0.0)).0
            ));
        }
    }
    if short.is_empty() {
        (true, request.clone(), "the resources asked for".into())
    } else {
        (false, BTreeMap::new(), short.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn a_request_within_the_free_resources_is_granted_whole() {
        let free = [("cpu".to_string(), 8.0), ("memory".to_string(), 16e9)].into();
        let (ok, got, _) = decide(&[("cpu".to_string(), q("2"))].into(), &free, 1.0);
        assert!(ok);
        assert_eq!(got["cpu"], q("2"));
    }

    #[test]
    fn asking_more_than_free_is_denied_with_the_figures() {
        let free = [("cpu".to_string(), 4.0)].into();
        let (ok, got, why) = decide(&[("cpu".to_string(), q("100"))].into(), &free, 1.0);
        assert!(!ok);
        assert!(got.is_empty());
        assert!(
            why.contains("asked for 100") && why.contains("4 free"),
            "{why}"
        );
    }

    #[test]
    fn no_request_gets_a_share() {
        let free = [("cpu".to_string(), 8.0), ("pods".to_string(), 220.0)].into();
        let (ok, got, _) = decide(&BTreeMap::new(), &free, 2.0);
        assert!(ok);
        assert_eq!(got["cpu"], q("4"));
        assert_eq!(got["pods"], q("110"));
    }
}
