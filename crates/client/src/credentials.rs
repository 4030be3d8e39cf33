//! How to reach and authenticate to a cluster as `flotilla join` stores it
//! (Karmada's `token` and `caBundle` keys; `tls.crt` and `tls.key` for
//! clusters that authenticate clients by certificate), and the kube-rs
//! clients built from it.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{
    AuthInfo, Cluster as KubeconfigCluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo,
    NamedCluster, NamedContext,
};
use kube::{Client, Config};

/// Credentials that kube-rs cannot make a client of.
#[derive(Debug, thiserror::Error)]
#[error("invalid credentials for {cluster}: {message}")]
pub struct InvalidCredentials {
    pub cluster: String,
    pub message: String,
}

/// How to reach and authenticate to a member.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Credentials {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub token: Option<String>,
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
    pub insecure: bool,
}

impl Credentials {
    /// The Secret data `flotilla join` stores.
    pub fn secret_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |k: &str, v: &Option<Vec<u8>>| {
            if let Some(v) = v {
                data.insert(k.to_string(), ByteString(v.clone()));
            }
        };
        put("caBundle", &self.ca_pem);
        put("token", &self.token.as_ref().map(|t| t.as_bytes().to_vec()));
        put("tls.crt", &self.client_cert_pem);
        put("tls.key", &self.client_key_pem);
        data
    }

    pub fn from_secret(server: &str, insecure: bool, secret: &Secret) -> Credentials {
        let data = secret.data.clone().unwrap_or_default();
        let get = |k: &str| data.get(k).map(|b| b.0.clone()).filter(|b| !b.is_empty());
        Credentials {
            server: server.to_string(),
            ca_pem: get("caBundle"),
            token: get("token").and_then(|t| String::from_utf8(t).ok()),
            client_cert_pem: get("tls.crt"),
            client_key_pem: get("tls.key"),
            insecure,
        }
    }

    /// A kube-rs client for these credentials, with short connect and read
    /// timeouts: a member that does not answer must not hold a controller.
    /// It speaks HTTP/1.1, one connection per request in flight: for a
    /// few requests, and for upgrades (exec, attach, port-forward).
    pub async fn client(&self, cluster: &str) -> Result<Client, InvalidCredentials> {
        let config = self.config(cluster).await?;
        Client::try_from(config).map_err(|e| InvalidCredentials {
            cluster: cluster.into(),
            message: e.to_string(),
        })
    }

    /// The control plane's clients for a member: one that multiplexes
    /// every request and watch over one HTTP/2 connection where the member
    /// offers it (as client-go does), and an HTTP/1.1 one for upgrades.
    /// Over HTTP/1.1 alone each watch held a connection of its own, and
    /// the pool kept one more for every request that ever ran beside
    /// another: about nine per member, each with its buffers on both
    /// sides, past 20,000 open files at 1,000 members.
    pub async fn clients(&self, cluster: &str) -> Result<(Client, Client), InvalidCredentials> {
        let config = self.config(cluster).await?;
        let config_error = |e: kube::Error| InvalidCredentials {
            cluster: cluster.into(),
            message: e.to_string(),
        };
        let multiplexed = multiplexed(&config).map_err(config_error)?;
        let upgrades = Client::try_from(config).map_err(config_error)?;
        Ok((multiplexed, upgrades))
    }

    async fn config(&self, cluster: &str) -> Result<Config, InvalidCredentials> {
        let b64 = |v: &Vec<u8>| base64::engine::general_purpose::STANDARD.encode(v);
        let kubeconfig = Kubeconfig {
            clusters: vec![NamedCluster {
                name: cluster.into(),
                cluster: Some(KubeconfigCluster {
                    server: Some(self.server.clone()),
                    certificate_authority_data: self.ca_pem.as_ref().map(b64),
                    insecure_skip_tls_verify: self.insecure.then_some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: cluster.into(),
                auth_info: Some(AuthInfo {
                    token: self.token.clone().map(Into::into),
                    client_certificate_data: self.client_cert_pem.as_ref().map(b64),
                    client_key_data: self.client_key_pem.as_ref().map(|k| b64(k).into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            contexts: vec![NamedContext {
                name: cluster.into(),
                context: Some(Context {
                    cluster: cluster.into(),
                    user: Some(cluster.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            current_context: Some(cluster.into()),
            ..Default::default()
        };
        let config_error = |e: &dyn std::fmt::Display| InvalidCredentials {
            cluster: cluster.into(),
            message: e.to_string(),
        };
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| config_error(&e))?;
        config.connect_timeout = Some(Duration::from_secs(5));
        Ok(config)
    }
}

/// How long an HTTP/2 connection to a member may be silent before it is
/// pinged, and how long the ping may go unanswered before the connection
/// is dropped (client-go's ReadIdleTimeout and PingTimeout): a watch on a
/// dead connection would otherwise wait forever.
const PING_AFTER_SILENCE: Duration = Duration::from_secs(30);
const PING_ANSWERED_WITHIN: Duration = Duration::from_secs(15);
/// Flow-control windows of an HTTP/2 connection to a member, as
/// client-go's: a watch whose reader lags holds at most its stream's
/// window, and never the connection's that every other request shares.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 1 << 30;

/// A client for `config` that offers HTTP/2 and HTTP/1.1 by ALPN and keeps
/// kube-rs's own layers: the base URI, the credentials, retries of the
/// answers a server asks to have retried.
fn multiplexed(config: &Config) -> Result<Client, kube::Error> {
    use kube::client::ConfigExt;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // Every frame of the multiplexed connection goes out at once (Go's
    // default): a window update or a stream's last frame held back by
    // Nagle's algorithm stalls every request sharing the connection.
    http.set_nodelay(true);
    // The configuration comes from `Credentials::config`, which names no
    // TLS server name of its own: the endpoint's host is verified.
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .http2_keep_alive_interval(PING_AFTER_SILENCE)
        .http2_keep_alive_timeout(PING_ANSWERED_WITHIN)
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .option_layer(config.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(Client::new(service, config.default_namespace.clone()))
}
