//! Pods an offloading came too late for. Liqo's webhook mutates a pod
//! only as it is created: one created before its namespace was offloaded
//! has no toleration of the virtual nodes' taint, and when nothing else
//! can run it (it asks for a virtual node, say) it stays Pending with
//! only the scheduler's "untolerated taint" to go by. This says why, once
//! per pod, in a Warning Event on it, with the way out: the pod created
//! again is admitted under the offloading.

use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tracing::info;

use super::Peers;
use crate::api::NOT_ALLOWED_TAINT;

pub const REASON: &str = "OffloadingNotApplied";
const COMPONENT: &str = "liqo-namespace-offloading";

/// Warns about each pod of `ns` (offloaded by NamespaceOffloading
/// `offloading`) that the scheduler could not place and that lacks the
/// toleration the offloading would have given it.
pub async fn warn(peers: &Peers, ns: &str, offloading: &str) {
    let api: Api<Pod> = Api::namespaced(peers.local.clone(), ns);
    let Ok(pods) = api
        .list(&ListParams::default().fields("spec.nodeName="))
        .await
    else {
        return;
    };
    let events: Api<Event> = Api::namespaced(peers.local.clone(), ns);
    for pod in pods.items.iter().filter(|p| stranded(p)) {
        // Said once per pod, whatever restarts between.
        let uid = pod.uid().unwrap_or_default();
        let said = ListParams::default()
            .fields(&format!("involvedObject.uid={uid},reason={REASON}"))
            .limit(1);
        if events
            .list(&said)
            .await
            .map_or(true, |l| !l.items.is_empty())
        {
            continue;
        }
        let name = pod.name_any();
        let message = format!(
            "pod {name} was created before namespace {ns} was offloaded (NamespaceOffloading \
             {offloading}), so it does not tolerate the virtual nodes' taint {NOT_ALLOWED_TAINT}; \
             delete it (kubectl delete pod -n {ns} {name}) or restart its workload (kubectl \
             rollout restart -n {ns} deployment/NAME) to have it created again under the offloading"
        );
        info!(pod = %name, namespace = %ns, "pod created before its namespace's offloading");
        let involved = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(ns.into()),
            uid: pod.uid(),
            ..Default::default()
        };
        flotilla_client::events::record(
            &peers.local,
            involved,
            COMPONENT,
            ("Warning", REASON, &message),
        )
        .await;
    }
}

/// Unschedulable, not going, and without the virtual nodes' toleration.
fn stranded(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let tolerates = spec.tolerations.iter().flatten().any(|t| {
        let key = t.key.as_deref().unwrap_or_default();
        key == NOT_ALLOWED_TAINT || (key.is_empty() && t.operator.as_deref() == Some("Exists"))
    });
    let unschedulable = pod
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    pod.metadata.deletion_timestamp.is_none() && !tolerates && unschedulable
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(tolerations: serde_json::Value, scheduled: &str, reason: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [{"name": "c"}], "tolerations": tolerations},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": scheduled, "reason": reason}]}
        }))
        .unwrap()
    }

    #[test]
    fn an_unschedulable_pod_without_the_toleration_is_stranded() {
        assert!(stranded(&pod(json!([]), "False", "Unschedulable")));
    }

    #[test]
    fn a_pod_with_the_toleration_or_still_being_scheduled_is_not() {
        let t = json!([{"key": NOT_ALLOWED_TAINT, "operator": "Exists", "effect": "NoExecute"}]);
        assert!(!stranded(&pod(t, "False", "Unschedulable")));
        assert!(!stranded(&pod(
            json!([{"operator": "Exists"}]),
            "False",
            "Unschedulable"
        )));
        assert!(!stranded(&pod(json!([]), "True", "")));
        assert!(!stranded(&pod(json!([]), "False", "SchedulingGated")));
    }
}
