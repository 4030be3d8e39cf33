//! ServiceAccount tokens of offloaded pods: the pod keeps talking to its
//! own cluster's API as its ServiceAccount. The consumer requests a token
//! bound to the pod (so it dies with it), and keeps it, with the
//! consumer's CA and the pod's namespace, in a Secret of the twin
//! namespace that the remote pod mounts where its projected token volume
//! was; the token is renewed at 80 % of its life, as the kubelet does.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{Peers, Provider};
use crate::api::{DESTINATION_LABEL, ORIGIN_LABEL};

/// Where a pod finds its ServiceAccount's token, CA and namespace.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The token's life (upstream's projected tokens: one hour by default).
const LIFE: i64 = 3600;
/// Until when the Secret's token is valid (RFC 3339).
const EXPIRES: &str = "offloading.liqo.io/token-expires";
/// On token Secrets: the pod they are for (reflection leaves them alone).
pub const TOKEN_FOR: &str = "offloading.liqo.io/token-for";

/// The Secret holding pod `pod`'s token in the twin namespace.
pub fn secret_name(pod: &str) -> String {
    let base: String = pod.chars().take(240).collect();
    format!("{base}-sa-token")
}

/// Whether the pod wants its ServiceAccount token mounted.
pub fn wanted(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.automount_service_account_token != Some(false))
}

/// Makes or renews the token Secret of `pod` in `remote_ns`; `existing`
/// is the Secret as last listed there.
pub async fn ensure(
    peers: &Peers,
    provider: &Provider,
    pod: &Pod,
    remote_ns: &str,
    existing: Option<&Secret>,
) -> Result<(), kube::Error> {
    let name = secret_name(&pod.name_any());
    let remote: Api<Secret> = Api::namespaced(provider.client.clone(), remote_ns);
    let fresh = existing
        .and_then(|s| {
            s.annotations()
                .get(EXPIRES)?
                .parse::<jiff::Timestamp>()
                .ok()
        })
        .is_some_and(|t| jiff::Timestamp::now() + jiff::SignedDuration::from_secs(LIFE / 5) < t);
    if fresh {
        return Ok(());
    }
    let ns = pod.namespace().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": LIFE,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                    "name": pod.name_any(), "uid": pod.uid()}}});
    let answer: Value = Api::<ServiceAccount>::namespaced(peers.local.clone(), &ns)
        .create_subresource("token", &sa, &PostParams::default(), &request)
        .await?;
    let token = answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let expires = answer
        .pointer("/status/expirationTimestamp")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(LIFE)).to_string()
        });
    let ca = Api::<ConfigMap>::namespaced(peers.local.clone(), &ns)
        .get_opt("kube-root-ca.crt")
        .await?
        .and_then(|c| c.data?.get("ca.crt").cloned())
        .unwrap_or_default();
    let data = [("token", token), ("ca.crt", ca), ("namespace", ns.clone())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
        .collect::<std::collections::BTreeMap<_, _>>();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": remote_ns,
            "labels": {ORIGIN_LABEL: peers.cluster_id, DESTINATION_LABEL: provider.id,
                       TOKEN_FOR: pod.name_any()},
            "annotations": {EXPIRES: expires}},
        "type": "Opaque", "data": data});
    remote
        .patch(
            &name,
            &PatchParams::apply("liqo-token-reflection").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}
