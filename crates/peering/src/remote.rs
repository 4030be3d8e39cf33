//! How one cluster reaches its peer: a kubeconfig in a Secret (Liqo's
//! `kubeconfig` key), written by `flotilla peer` in the consumer's tenant
//! namespace and named by the VirtualNode's `kubeconfigSecretRef`.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{
    AuthInfo, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::{Api, Client, Config};

/// The key of the kubeconfig in the Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// The Secret holding consumer `consumer`'s credentials for `provider`.
pub fn kubeconfig_secret_name(provider: &str) -> String {
    format!("liqo-kubeconfig-{provider}")
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("secret {0} has no {KUBECONFIG_KEY} key")]
    Missing(String),
    #[error("the kubeconfig in secret {secret} is not valid: {message}")]
    Invalid { secret: String, message: String },
    #[error("cannot read secret {0}: {1}")]
    Read(String, #[source] kube::Error),
}

/// A kubeconfig for `server` with `ca_pem` and bearer `token`.
pub fn kubeconfig(name: &str, server: &str, ca_pem: Option<&[u8]>, token: &str) -> Kubeconfig {
    use base64::Engine as _;
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: name.into(),
            cluster: Some(kube::config::Cluster {
                server: Some(server.into()),
                certificate_authority_data: ca_pem.map(b64),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: name.into(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: name.into(),
            context: Some(Context {
                cluster: name.into(),
                user: Some(name.into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(name.into()),
        ..Default::default()
    }
}

/// A client from a kubeconfig, with short timeouts: a peer that does not
/// answer must not stall the loops that ask it.
pub async fn client(config: Kubeconfig) -> Result<Client, String> {
    let mut config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(15));
    Client::try_from(config).map_err(|e| e.to_string())
}

/// The client for the peer whose kubeconfig is in `ns/name`.
pub async fn from_secret(local: &Client, ns: &str, name: &str) -> Result<Client, RemoteError> {
    let secret = Api::<Secret>::namespaced(local.clone(), ns)
        .get(name)
        .await
        .map_err(|e| RemoteError::Read(format!("{ns}/{name}"), e))?;
    from_secret_object(&secret).await
}

/// A client for the cluster the kubeconfig in `secret` names.
pub async fn from_secret_object(secret: &Secret) -> Result<Client, RemoteError> {
    let at = format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    );
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .map(|ByteString(b)| b.clone())
        .ok_or_else(|| RemoteError::Missing(at.clone()))?;
    let invalid = |message: String| RemoteError::Invalid {
        secret: at.clone(),
        message,
    };
    let text = String::from_utf8(raw).map_err(|e| invalid(e.to_string()))?;
    let config = Kubeconfig::from_yaml(&text).map_err(|e| invalid(e.to_string()))?;
    client(config).await.map_err(invalid)
}
