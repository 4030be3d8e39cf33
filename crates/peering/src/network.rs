//! Networking between peers, on the fabric of the previous layer: when
//! both clusters run one (netns members with gateways on an underlay),
//! the provider is their broker (Submariner's "any cluster chosen as
//! broker"), both get a broker Secret, and their gateways open the
//! tunnel; pods of either reach the other's pods and, through reflected
//! Services and EndpointSlices, its Services. The consumer's Secret holds
//! the peering's identity, which may write only in the broker namespace.
//! A cluster already in a fleet's fabric keeps it: the peers connect
//! through that one.

use flotilla_client::credentials::Credentials;
use flotilla_fabric::api::{BROKER_NAMESPACE, CONNECTED, Gateway, OPERATOR_NAMESPACE};
use flotilla_fabric::broker::{self, BrokerAccess};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::api::{ForeignCluster, LiqoCondition, REMOTE_CLUSTER_ID, tenant_namespace};
use crate::peer::identity_name;

/// What `flotilla peer` did about networking.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Neither side (or only one) runs a fabric: pods reach each other
    /// only as the clusters' own networks allow.
    Disabled(String),
    /// Both are already in a fleet's fabric.
    Fleet,
    /// The provider is the broker of the two.
    Connected,
}

/// The fabric between the peers, if both run one.
pub async fn connect(
    consumer: &Client,
    provider: &Client,
    provider_credentials: &Credentials,
    (consumer_id, provider_id): (&str, &str),
    token: &str,
) -> Result<Outcome, String> {
    let has = |c: Client| async move { broker::has_fabric(&c).await.map_err(|e| e.to_string()) };
    let (c, p) = (has(consumer.clone()).await?, has(provider.clone()).await?);
    if !(c && p) {
        let which = match (c, p) {
            (false, false) => "neither cluster runs",
            (false, true) => "the consumer does not run",
            _ => "the provider does not run",
        };
        return Ok(Outcome::Disabled(format!(
            "{which} a network fabric (members started with --runtime netns --underlay NAME)"
        )));
    }
    let (mine, theirs) = (broker::read(consumer).await?, broker::read(provider).await?);
    if let (Some(a), Some(b)) = (&mine, &theirs)
        && a.credentials.server == b.credentials.server
        && a.credentials.server != provider_credentials.server
    {
        return Ok(Outcome::Fleet);
    }
    broker::install(provider).await?;
    // Overlapping pod CIDRs: both use Globalnet, with global CIDRs from
    // the provider's broker.
    let overlap = overlapping(consumer, provider).await;
    let (provider_global, consumer_global) = if overlap {
        (
            Some(broker::allocate_global_cidr(provider, provider_id, None).await?),
            Some(broker::allocate_global_cidr(provider, consumer_id, None).await?),
        )
    } else {
        (None, None)
    };
    // The consumer's identity may keep its cluster's objects on the broker.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": identity_name(consumer_id), "namespace": BROKER_NAMESPACE,
                     "labels": {REMOTE_CLUSTER_ID: consumer_id}},
        "rules": [{"apiGroups": ["submariner.io"], "resources": ["clusters", "endpoints"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]});
    let apply = PatchParams::apply("flotilla-peer").force();
    Api::<Role>::namespaced(provider.clone(), BROKER_NAMESPACE)
        .patch(&identity_name(consumer_id), &apply, &Patch::Apply(&role))
        .await
        .map_err(|e| e.to_string())?;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": identity_name(consumer_id), "namespace": BROKER_NAMESPACE,
                     "labels": {REMOTE_CLUSTER_ID: consumer_id}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": identity_name(consumer_id)},
        "subjects": [{"kind": "ServiceAccount", "name": identity_name(consumer_id),
                      "namespace": tenant_namespace(consumer_id)}]});
    Api::<RoleBinding>::namespaced(provider.clone(), BROKER_NAMESPACE)
        .patch(&identity_name(consumer_id), &apply, &Patch::Apply(&binding))
        .await
        .map_err(|e| e.to_string())?;
    let own_broker = theirs
        .as_ref()
        .is_none_or(|a| a.credentials.server == provider_credentials.server);
    if own_broker
        && theirs
            .as_ref()
            .is_none_or(|a| a.global_cidr != provider_global)
    {
        let access = BrokerAccess {
            credentials: provider_credentials.clone(),
            namespace: BROKER_NAMESPACE.into(),
            cluster_id: provider_id.into(),
            global_cidr: provider_global,
        };
        broker::write(provider, &access)
            .await
            .map_err(|e| e.to_string())?;
    }
    let access = BrokerAccess {
        credentials: Credentials {
            server: provider_credentials.server.clone(),
            ca_pem: provider_credentials.ca_pem.clone(),
            token: Some(token.to_string()),
            client_cert_pem: None,
            client_key_pem: None,
            insecure: provider_credentials.insecure,
        },
        namespace: BROKER_NAMESPACE.into(),
        cluster_id: consumer_id.into(),
        global_cidr: consumer_global,
    };
    broker::write(consumer, &access)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Outcome::Connected)
}

/// The pod CIDRs of a cluster's own nodes.
async fn pod_cidrs(client: &Client) -> Vec<ipnet::Ipv4Net> {
    use k8s_openapi::api::core::v1::Node;
    use kube::ResourceExt;
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.labels().contains_key(crate::api::TYPE_LABEL))
        .filter_map(|n| n.spec?.pod_cidr?.parse().ok())
        .collect()
}

/// Whether the two clusters' pod CIDRs overlap.
async fn overlapping(a: &Client, b: &Client) -> bool {
    let (x, y) = (pod_cidrs(a).await, pod_cidrs(b).await);
    x.iter().any(|p| {
        y.iter()
            .any(|q| p.contains(&q.network()) || q.contains(&p.network()))
    })
}

/// Undoes `connect`: the consumer leaves the provider's broker; the
/// provider stops being one when no consumer is left.
pub async fn disconnect(
    consumer: &Client,
    provider: &Client,
    provider_server: &str,
    (consumer_id, provider_id): (&str, &str),
) {
    let ours = |a: &Option<BrokerAccess>| {
        a.as_ref()
            .is_some_and(|a| a.credentials.server == provider_server)
    };
    if ours(&broker::read(consumer).await.ok().flatten()) {
        let _ = broker::remove(consumer).await;
        let _ = flotilla_fabric::gateway::withdraw(provider, consumer_id).await;
        let _ = broker::release_global_cidr(provider, consumer_id).await;
    }
    for kind in ["roles", "rolebindings"] {
        let _ = match kind {
            "roles" => Api::<Role>::namespaced(provider.clone(), BROKER_NAMESPACE)
                .delete(&identity_name(consumer_id), &DeleteParams::default())
                .await
                .map(|_| ()),
            _ => Api::<RoleBinding>::namespaced(provider.clone(), BROKER_NAMESPACE)
                .delete(&identity_name(consumer_id), &DeleteParams::default())
                .await
                .map(|_| ()),
        };
    }
    let consumers_left = Api::<ForeignCluster>::all(provider.clone())
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items.iter().any(|fc| {
                fc.spec.cluster_id != consumer_id
                    && fc
                        .status
                        .as_ref()
                        .is_some_and(|s| s.role.contains("Consumer"))
            })
        })
        .unwrap_or(true);
    let self_broker = broker::read(provider)
        .await
        .ok()
        .flatten()
        .is_some_and(|a| a.cluster_id == provider_id && a.namespace == BROKER_NAMESPACE);
    if !consumers_left && self_broker {
        let _ = broker::remove(provider).await;
        let _ = flotilla_fabric::gateway::withdraw(provider, provider_id).await;
        let _ = broker::release_global_cidr(provider, provider_id).await;
    }
}

/// The networking module's condition for peer `peer`, from this
/// cluster's Gateway objects; None when this cluster runs no fabric.
pub async fn condition(local: &Client, peer: &str) -> Option<LiqoCondition> {
    let gateways = Api::<Gateway>::namespaced(local.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default())
        .await
        .ok()?
        .items;
    let active = gateways.iter().find(|g| g.status.ha_status == "active")?;
    let connection = active
        .status
        .connections
        .iter()
        .find(|c| c.endpoint.cluster_id == peer);
    Some(match connection {
        Some(c) if c.status == CONNECTED => {
            LiqoCondition::new("NetworkConnectionStatus", "Established", "Connected", "")
        }
        Some(c) if c.status == "connecting" => LiqoCondition::new(
            "NetworkConnectionStatus",
            "Pending",
            "Connecting",
            &c.status_message,
        ),
        Some(c) => LiqoCondition::new(
            "NetworkConnectionStatus",
            "Error",
            "ConnectionError",
            &c.status_message,
        ),
        None => LiqoCondition::new(
            "NetworkConnectionStatus",
            "Pending",
            "NoConnection",
            "the gateway has no connection to the peer yet",
        ),
    })
}
