//! Clients for member clusters, built from what `flotilla join` stored:
//! the Cluster's apiEndpoint and the credentials in its Secret (Karmada's
//! `token` and `caBundle` keys; `tls.crt` and `tls.key` for members that
//! authenticate clients by certificate).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_client::credentials::{Credentials, InvalidCredentials};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
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
    #[error(transparent)]
    Config(#[from] InvalidCredentials),
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
