//! Clients of the workload clusters, made from their `<cluster>-kubeconfig`
//! Secrets as Cluster API's controllers make theirs: the only way the
//! controllers reach a provisioned cluster.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::error::Error;

/// The kubeconfig Secret of a cluster.
pub fn kubeconfig_secret(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// The admin kubeconfig of a cluster, from its Secret; None while it is
/// not there.
pub async fn kubeconfig(
    hub: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<(String, String)>, Error> {
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), namespace);
    let Some(secret) = secrets.get_opt(&kubeconfig_secret(cluster)).await? else {
        return Ok(None);
    };
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned());
    Ok(value.map(|v| (v, version)))
}

/// A client of a cluster from a kubeconfig's text.
pub async fn client_from(kubeconfig: &str) -> Result<Client, Error> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)
        .map_err(|e| Error::Provider(format!("the kubeconfig Secret is not a kubeconfig: {e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Provider(format!("the kubeconfig Secret cannot be used: {e}")))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(15));
    Ok(Client::try_from(config)?)
}

/// The workload clusters' clients, made once per kubeconfig version.
pub struct Workloads {
    hub: Client,
    clients: Mutex<HashMap<String, (String, Client)>>,
}

impl Workloads {
    pub fn new(hub: Client) -> Workloads {
        Workloads {
            hub,
            clients: Mutex::default(),
        }
    }

    /// The client of `namespace/cluster`; None while its kubeconfig
    /// Secret does not exist.
    pub async fn client(&self, namespace: &str, cluster: &str) -> Result<Option<Client>, Error> {
        let Some((text, version)) = kubeconfig(&self.hub, namespace, cluster).await? else {
            return Ok(None);
        };
        let key = format!("{namespace}/{cluster}");
        if let Some((v, c)) = self.clients.lock().get(&key)
            && *v == version
        {
            return Ok(Some(c.clone()));
        }
        let client = client_from(&text).await?;
        self.clients.lock().insert(key, (version, client.clone()));
        Ok(Some(client))
    }

    /// Forgets a cluster's client (it is being deleted).
    pub fn forget(&self, namespace: &str, cluster: &str) {
        self.clients
            .lock()
            .remove(&format!("{namespace}/{cluster}"));
    }
}
