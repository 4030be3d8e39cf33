//! A member's access to the broker: the Secret `flotilla join` (or the
//! pull agent) writes into the member's `submariner-operator` namespace,
//! holding how to reach the broker, the cluster's id and, under
//! Globalnet, its global CIDR. Its presence is what turns a member's
//! fabric on; its removal (`flotilla unjoin`) turns it off.

use std::collections::BTreeMap;

use flotilla_client::credentials::Credentials;
use ipnet::Ipv4Net;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};

use crate::api::{BROKER_NAMESPACE, BROKER_SECRET, OPERATOR_NAMESPACE};

const SERVER: &str = "server";
const INSECURE: &str = "insecure";
const CLUSTER_ID: &str = "clusterID";
const GLOBAL_CIDR: &str = "globalCIDR";
const NAMESPACE: &str = "brokerNamespace";
const MANAGER: &str = "flotilla-join";

/// What a member's gateways know of the broker.
#[derive(Clone, Debug, PartialEq)]
pub struct BrokerAccess {
    pub credentials: Credentials,
    pub namespace: String,
    pub cluster_id: String,
    /// Set when this cluster uses Globalnet.
    pub global_cidr: Option<Ipv4Net>,
}

impl BrokerAccess {
    pub fn to_secret(&self) -> Secret {
        let mut data = self.credentials.secret_data();
        let mut put = |k: &str, v: String| {
            data.insert(k.to_string(), ByteString(v.into_bytes()));
        };
        put(SERVER, self.credentials.server.clone());
        put(INSECURE, self.credentials.insecure.to_string());
        put(CLUSTER_ID, self.cluster_id.clone());
        put(NAMESPACE, self.namespace.clone());
        if let Some(cidr) = self.global_cidr {
            put(GLOBAL_CIDR, cidr.to_string());
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(BROKER_SECRET.into()),
                namespace: Some(OPERATOR_NAMESPACE.into()),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        }
    }

    /// Reads the Secret; None when it is not a broker Secret.
    pub fn from_secret(secret: &Secret) -> Result<BrokerAccess, String> {
        let data: BTreeMap<String, ByteString> = secret.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|s| !s.is_empty())
        };
        let server = text(SERVER).ok_or("the broker Secret has no server")?;
        let cluster_id = text(CLUSTER_ID).ok_or("the broker Secret has no clusterID")?;
        let insecure = text(INSECURE).is_some_and(|s| s == "true");
        let global_cidr = match text(GLOBAL_CIDR) {
            Some(c) => Some(
                c.parse()
                    .map_err(|_| format!("the broker Secret's globalCIDR {c:?} is not a CIDR"))?,
            ),
            None => None,
        };
        Ok(BrokerAccess {
            credentials: Credentials::from_secret(&server, insecure, secret),
            namespace: text(NAMESPACE).unwrap_or_else(|| BROKER_NAMESPACE.into()),
            cluster_id,
            global_cidr,
        })
    }

    /// The broker's client.
    pub async fn client(&self) -> Result<Client, String> {
        self.credentials
            .client("broker")
            .await
            .map_err(|e| e.to_string())
    }
}

/// Reads the member's broker Secret, if it has one.
pub async fn read(member: &Client) -> Result<Option<BrokerAccess>, String> {
    let api: Api<Secret> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    match api.get_opt(BROKER_SECRET).await {
        Ok(Some(s)) => BrokerAccess::from_secret(&s).map(Some),
        Ok(None) => Ok(None),
        // No operator namespace yet: not joined either.
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the member runs a fabric at all: its gateways make the
/// operator namespace when they start.
pub async fn has_fabric(member: &Client) -> Result<bool, kube::Error> {
    let api: Api<Namespace> = Api::all(member.clone());
    Ok(api.get_opt(OPERATOR_NAMESPACE).await?.is_some())
}

/// Writes (or replaces) the member's broker Secret.
pub async fn write(member: &Client, access: &BrokerAccess) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    api.patch(
        BROKER_SECRET,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(access.to_secret()),
    )
    .await
    .map(|_| ())
}

/// Removes the member's broker Secret: its gateways take their tunnels
/// and routes down.
pub async fn remove(member: &Client) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    match api.delete(BROKER_SECRET, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_round_trips() {
        let access = BrokerAccess {
            credentials: Credentials {
                server: "https://127.0.0.1:6443".into(),
                ca_pem: Some(b"PEM".to_vec()),
                token: Some("t0ken".into()),
                ..Default::default()
            },
            namespace: BROKER_NAMESPACE.into(),
            cluster_id: "east".into(),
            global_cidr: Some("242.1.0.0/16".parse().unwrap()),
        };
        let again = BrokerAccess::from_secret(&access.to_secret()).unwrap();
        assert_eq!(again, access);
        let mut bad = access.to_secret();
        bad.data
            .as_mut()
            .unwrap()
            .insert(GLOBAL_CIDR.into(), ByteString(b"nope".to_vec()));
        assert!(
            BrokerAccess::from_secret(&bad)
                .unwrap_err()
                .contains("globalCIDR")
        );
    }
}

/// Makes the hub a broker: its namespace and the Cluster and Endpoint
/// CRDs (the control plane does this on start; idempotent).
pub async fn install(hub: &Client) -> Result<(), String> {
    let api: Api<Namespace> = Api::all(hub.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(BROKER_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&kube::api::PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("cannot make the broker namespace: {e}")),
    }
    flotilla_client::crd::install(hub, crate::api::broker_crds())
        .await
        .map_err(|e| e.to_string())
}

/// Globalnet's allocations on the broker: Submariner's ConfigMap
/// `submariner-globalnet-info` (range, cluster size, and `clusterinfo`,
/// each cluster's global CIDR), updated under its resourceVersion so
/// two joins never take the same CIDR.
pub const GLOBALNET_INFO: &str = "submariner-globalnet-info";

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct ClusterInfo {
    cluster_id: String,
    global_cidr: Vec<String>,
}

/// The global CIDR of `cluster_id`: the one it has, `requested` if free,
/// or the next free slice of the range.
pub async fn allocate_global_cidr(
    hub: &Client,
    cluster_id: &str,
    requested: Option<Ipv4Net>,
) -> Result<Ipv4Net, String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), BROKER_NAMESPACE);
    let range: Ipv4Net = crate::api::GLOBALNET_RANGE
        .parse()
        .map_err(|_| "bad range")?;
    for _ in 0..10 {
        let have = api
            .get_opt(GLOBALNET_INFO)
            .await
            .map_err(|e| e.to_string())?;
        let data = have
            .as_ref()
            .and_then(|c| c.data.clone())
            .unwrap_or_default();
        let mut infos: Vec<ClusterInfo> = data
            .get("clusterinfo")
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default();
        let taken: Vec<Ipv4Net> = infos
            .iter()
            .filter(|i| i.cluster_id != cluster_id)
            .flat_map(|i| i.global_cidr.iter().filter_map(|c| c.parse().ok()))
            .collect();
        let clash = |n: &Ipv4Net| {
            taken
                .iter()
                .any(|t| t.contains(&n.network()) || n.contains(&t.network()))
        };
        let mine = infos
            .iter()
            .find(|i| i.cluster_id == cluster_id)
            .and_then(|i| i.global_cidr.first()?.parse::<Ipv4Net>().ok());
        let chosen = match (requested, mine) {
            (Some(r), _) if clash(&r) => {
                return Err(format!(
                    "the global CIDR {r} overlaps another cluster's; pick another or let join choose"
                ));
            }
            (Some(r), _) => r,
            (None, Some(m)) => return Ok(m),
            (None, None) => range
                .subnets(crate::api::GLOBALNET_CLUSTER_PREFIX)
                .map_err(|e| e.to_string())?
                .find(|n| !clash(n))
                .ok_or("the Globalnet range 242.0.0.0/8 is exhausted")?,
        };
        infos.retain(|i| i.cluster_id != cluster_id);
        infos.push(ClusterInfo {
            cluster_id: cluster_id.into(),
            global_cidr: vec![chosen.to_string()],
        });
        let mut map = std::collections::BTreeMap::new();
        map.insert("globalnetEnabled".to_string(), "true".to_string());
        map.insert("globalnetCidrRange".to_string(), range.to_string());
        map.insert("globalnetClusterSize".to_string(), "65536".to_string());
        map.insert(
            "clusterinfo".to_string(),
            serde_json::to_string(&infos).map_err(|e| e.to_string())?,
        );
        let written = match have {
            Some(mut cm) => {
                cm.data = Some(map);
                api.replace(GLOBALNET_INFO, &kube::api::PostParams::default(), &cm)
                    .await
            }
            None => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(GLOBALNET_INFO.into()),
                        ..Default::default()
                    },
                    data: Some(map),
                    ..Default::default()
                };
                api.create(&kube::api::PostParams::default(), &cm).await
            }
        };
        match written {
            Ok(_) => return Ok(chosen),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the Globalnet allocations kept changing; try again".into())
}

/// Gives `cluster_id`'s global CIDR back (it left the fleet).
pub async fn release_global_cidr(hub: &Client, cluster_id: &str) -> Result<(), String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), BROKER_NAMESPACE);
    for _ in 0..10 {
        let Some(mut cm) = api
            .get_opt(GLOBALNET_INFO)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let mut data = cm.data.clone().unwrap_or_default();
        let mut infos: Vec<ClusterInfo> = data
            .get("clusterinfo")
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default();
        let before = infos.len();
        infos.retain(|i| i.cluster_id != cluster_id);
        if infos.len() == before {
            return Ok(());
        }
        data.insert(
            "clusterinfo".into(),
            serde_json::to_string(&infos).map_err(|e| e.to_string())?,
        );
        cm.data = Some(data);
        match api
            .replace(GLOBALNET_INFO, &kube::api::PostParams::default(), &cm)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the Globalnet allocations kept changing; try again".into())
}
