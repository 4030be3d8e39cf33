//! A cluster's Liqo identity: its cluster ID, in the ConfigMap
//! `liqo/liqo-clusterid-configmap` (`CLUSTER_ID`), as Liqo keeps it.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::api::{CLUSTER_ID_CONFIGMAP, CLUSTER_ID_KEY, LIQO_NAMESPACE};

/// The cluster's ID, if it has one.
pub async fn cluster_id(client: &Client) -> Result<Option<String>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), LIQO_NAMESPACE);
    Ok(api
        .get_opt(CLUSTER_ID_CONFIGMAP)
        .await?
        .and_then(|c| c.data?.get(CLUSTER_ID_KEY).cloned())
        .filter(|id| !id.is_empty()))
}

/// The cluster's ID, set to `wanted` when it has none yet; an existing
/// ID stays (peers know the cluster by it).
pub async fn ensure_cluster_id(client: &Client, wanted: &str) -> Result<String, kube::Error> {
    if let Some(id) = cluster_id(client).await? {
        return Ok(id);
    }
    flotilla_client::namespace::ensure(client, LIQO_NAMESPACE, &[]).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), LIQO_NAMESPACE);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CLUSTER_ID_CONFIGMAP.into()),
            ..Default::default()
        },
        data: Some([(CLUSTER_ID_KEY.to_string(), wanted.to_string())].into()),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &cm).await {
        Ok(_) => Ok(wanted.to_string()),
        // Someone else set it first: theirs stands.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(cluster_id(client)
            .await?
            .unwrap_or_else(|| wanted.to_string())),
        Err(e) => Err(e),
    }
}

/// A cluster ID made from any name: lower case, DNS-1123, at most 40
/// characters (it becomes part of namespace and node names).
pub fn sanitize(name: &str) -> String {
    let mut id: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    id.truncate(40);
    let id = id.trim_matches('-').to_string();
    if id.is_empty() { "cluster".into() } else { id }
}

/// Whether `id` is a valid cluster ID (DNS-1123 label, at most 40).
pub fn valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 40
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_ids() {
        assert_eq!(sanitize("Cluster_East.1"), "cluster-east-1");
        assert!(valid(&sanitize("--x--")));
        assert!(!valid("East"));
        assert!(valid("east-1"));
    }
}
