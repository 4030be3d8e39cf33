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
    pub async fn client(&self, cluster: &str) -> Result<Client, MemberError> {
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
        Client::try_from(config).map_err(|e| config_error(&e))
    }
}

/// A member's client and its discovery cache.
#[derive(Clone)]
pub struct Member {
    pub client: Client,
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
        member: Member,
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
            member: Member {
                kinds: Kinds::new(client.clone()),
                client,
            },
        }
    }

    pub async fn get(&self, cluster: &Cluster) -> Result<Member, MemberError> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let (hub, cache) = match self {
            Members::Joined { hub, cache } => (hub, cache),
            Members::Fixed { cluster, member } if *cluster == name => return Ok(member.clone()),
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
        let client = creds.client(&name).await?;
        let member = Member {
            kinds: Kinds::new(client.clone()),
            client,
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
