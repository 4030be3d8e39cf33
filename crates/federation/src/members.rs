//! Clients for member clusters, built from what `flotilla join` stored:
//! the Cluster's apiEndpoint and the credentials in its Secret (Karmada's
//! `token` and `caBundle` keys; `tls.crt` and `tls.key` for members that
//! authenticate clients by certificate).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{
    AuthInfo, Cluster as KubeconfigCluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo,
    NamedCluster, NamedContext,
};
use kube::{Api, Client, Config};
use parking_lot::Mutex;

use crate::api::Cluster;
use crate::kinds::Kinds;

#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("cluster {0} has no apiEndpoint")]
    NoEndpoint(String),
    #[error("cluster {0} has no secretRef")]
    NoSecret(String),
    #[error("cannot read the credentials of cluster {cluster}")]
    ReadSecret {
        cluster: String,
        #[source]
        source: kube::Error,
    },
    #[error("the credentials of cluster {0} hold neither a token nor a client certificate")]
    NoCredentials(String),
    #[error("cluster {0} is not the one this agent runs next to")]
    NotHere(String),
    #[error("invalid credentials for {cluster}: {message}")]
    Config { cluster: String, message: String },
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
    pub async fn client(&self, cluster: &str) -> Result<Client, MemberError> {
        let config = self.config(cluster).await?;
        Client::try_from(config).map_err(|e| MemberError::Config {
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
    pub async fn clients(&self, cluster: &str) -> Result<(Client, Client), MemberError> {
        let config = self.config(cluster).await?;
        let config_error = |e: kube::Error| MemberError::Config {
            cluster: cluster.into(),
            message: e.to_string(),
        };
        let multiplexed = multiplexed(&config).map_err(config_error)?;
        let upgrades = Client::try_from(config).map_err(config_error)?;
        Ok((multiplexed, upgrades))
    }

    async fn config(&self, cluster: &str) -> Result<Config, MemberError> {
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
        let config_error = |e: &dyn std::fmt::Display| MemberError::Config {
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

/// A member's client and its discovery cache.
#[derive(Clone)]
pub struct Member {
    pub client: Client,
    /// The same member over HTTP/1.1, for requests that upgrade the
    /// connection (WebSocket exec, attach, port-forward).
    pub upgrades: Client,
    pub kinds: Kinds,
}

/// How controllers reach members: in the control plane, every joined
/// member through the credentials `flotilla join` stored (rebuilt when a
/// Cluster's endpoint or Secret changes); in a pull-mode agent, the one
/// member it runs next to.
#[derive(Clone)]
pub enum Members {
    Joined {
        hub: Client,
        cache: Arc<Mutex<HashMap<String, Cached>>>,
    },
    Fixed {
        cluster: String,
        member: Box<Member>,
    },
}

pub struct Cached {
    fingerprint: String,
    checked: Instant,
    member: Member,
}

/// How long a member's credentials are trusted before the Secret is read
/// again (a rotated token is picked up within this).
const RECHECK: Duration = Duration::from_secs(30);

impl Members {
    /// Every joined member, through the hub.
    pub fn new(hub: Client) -> Members {
        Members::Joined {
            hub,
            cache: Arc::default(),
        }
    }

    /// Only `cluster`, through `client`.
    pub fn fixed(cluster: &str, client: Client) -> Members {
        Members::Fixed {
            cluster: cluster.to_string(),
            member: Box::new(Member {
                kinds: Kinds::new(client.clone()),
                upgrades: client.clone(),
                client,
            }),
        }
    }

    pub async fn get(&self, cluster: &Cluster) -> Result<Member, MemberError> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let (hub, cache) = match self {
            Members::Joined { hub, cache } => (hub, cache),
            Members::Fixed { cluster, member } if *cluster == name => return Ok((**member).clone()),
            Members::Fixed { .. } => return Err(MemberError::NotHere(name)),
        };
        let endpoint = cluster
            .spec
            .api_endpoint
            .clone()
            .ok_or_else(|| MemberError::NoEndpoint(name.clone()))?;
        if let Some(c) = cache.lock().get(&name)
            && c.fingerprint.starts_with(&format!("{endpoint}|"))
            && c.checked.elapsed() < RECHECK
        {
            return Ok(c.member.clone());
        }
        let secret_ref = cluster
            .spec
            .secret_ref
            .clone()
            .ok_or_else(|| MemberError::NoSecret(name.clone()))?;
        let secret = Api::<Secret>::namespaced(hub.clone(), &secret_ref.namespace)
            .get(&secret_ref.name)
            .await
            .map_err(|source| MemberError::ReadSecret {
                cluster: name.clone(),
                source,
            })?;
        let fingerprint = format!(
            "{endpoint}|{}|{}",
            secret
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default(),
            cluster.spec.insecure_skip_tls_verification
        );
        if let Some(c) = cache.lock().get_mut(&name)
            && c.fingerprint == fingerprint
        {
            c.checked = Instant::now();
            return Ok(c.member.clone());
        }
        let creds = Credentials::from_secret(
            &endpoint,
            cluster.spec.insecure_skip_tls_verification,
            &secret,
        );
        if creds.token.is_none() && creds.client_cert_pem.is_none() {
            return Err(MemberError::NoCredentials(name));
        }
        let (client, upgrades) = creds.clients(&name).await?;
        let member = Member {
            kinds: Kinds::new(client.clone()),
            client,
            upgrades,
        };
        let cached = Cached {
            fingerprint,
            checked: Instant::now(),
            member: member.clone(),
        };
        cache.lock().insert(name, cached);
        Ok(member)
    }

    pub fn forget(&self, cluster: &str) {
        if let Members::Joined { cache, .. } = self {
            cache.lock().remove(cluster);
        }
    }
}
