//! Joining and leaving: what `flotilla join` and `flotilla unjoin` do to
//! the hub. A join checks everything before it writes, and a failed join
//! leaves nothing behind.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use secrecy::ExposeSecret;
use serde_json::json;

use crate::api::{CLUSTER_NAMESPACE, Cluster, ClusterSpec, SecretRef, sync_mode};
use flotilla_client::credentials::Credentials;

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("cannot read the cluster kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("cannot reach cluster {name} at {server}: {message}")]
    Unreachable {
        name: String,
        server: String,
        message: String,
    },
    #[error("a cluster named {0} has already joined; unjoin it first or choose another name")]
    Duplicate(String),
    #[error("{0:?} is not a valid cluster name: {1}")]
    InvalidName(String, String),
    #[error("cluster {0} has not joined")]
    NotJoined(String),
    #[error("cluster {name} is still leaving after {seconds}s: {message}")]
    Timeout {
        name: String,
        seconds: u64,
        message: String,
    },
    #[error("the hub refused: {0}")]
    Hub(#[from] kube::Error),
}

/// Where a member is and what the operator says about it.
#[derive(Clone, Debug, Default)]
pub struct JoinRequest {
    pub name: String,
    pub credentials: Credentials,
    pub provider: Option<String>,
    pub region: Option<String>,
    pub zones: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

/// The credentials of one context of a kubeconfig file: a bearer token or
/// a client certificate. Exec plugins and auth providers cannot be stored
/// for the control plane to use and are refused.
pub fn credentials_from_kubeconfig(
    path: &Path,
    context: Option<&str>,
) -> Result<Credentials, JoinError> {
    let config = Kubeconfig::read_from(path).map_err(|e| JoinError::Kubeconfig {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    credentials_of(&config, &path.display().to_string(), context)
}

/// The credentials of one context of a parsed kubeconfig (a Cluster API
/// cluster's kubeconfig Secret, say); `source` names it in errors.
pub fn credentials_of(
    config: &Kubeconfig,
    source: &str,
    context: Option<&str>,
) -> Result<Credentials, JoinError> {
    let fail = |message: String| JoinError::Kubeconfig {
        path: source.to_string(),
        message,
    };
    let context_name = context
        .map(str::to_string)
        .or(config.current_context.clone())
        .ok_or_else(|| fail("no current-context; pass --cluster-context".into()))?;
    let ctx = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| fail(format!("no context named {context_name}")))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| {
            fail(format!(
                "context {context_name} names a missing cluster {}",
                ctx.cluster
            ))
        })?;
    let user_name = ctx.user.clone().unwrap_or_default();
    let user = config
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .unwrap_or_default();
    if user.exec.is_some() || user.auth_provider.is_some() {
        return Err(fail(format!(
            "user {user_name} authenticates through an exec plugin or auth provider; \
             join needs a bearer token or a client certificate"
        )));
    }
    let read = |data: Option<String>,
                file: Option<String>,
                what: &str|
     -> Result<Option<Vec<u8>>, JoinError> {
        if let Some(d) = data {
            return base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(Some)
                .map_err(|e| fail(format!("{what} is not base64: {e}")));
        }
        match file {
            Some(f) => std::fs::read(&f)
                .map(Some)
                .map_err(|e| fail(format!("cannot read {what} {f}: {e}"))),
            None => Ok(None),
        }
    };
    let token = match (user.token.as_ref(), user.token_file.as_ref()) {
        (Some(t), _) => Some(t.expose_secret().to_string()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| fail(format!("cannot read token file {f}: {e}")))?
                .trim()
                .to_string(),
        ),
        _ => None,
    };
    let creds = Credentials {
        server: cluster
            .server
            .clone()
            .ok_or_else(|| fail(format!("cluster {} has no server", ctx.cluster)))?,
        ca_pem: read(
            cluster.certificate_authority_data,
            cluster.certificate_authority,
            "certificate-authority",
        )?,
        token,
        client_cert_pem: read(
            user.client_certificate_data,
            user.client_certificate,
            "client-certificate",
        )?,
        client_key_pem: read(
            user.client_key_data.map(|k| k.expose_secret().to_string()),
            user.client_key,
            "client-key",
        )?,
        insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
    };
    if creds.token.is_none() && creds.client_cert_pem.is_none() {
        return Err(fail(format!(
            "user {user_name} has neither a token nor a client certificate"
        )));
    }
    Ok(creds)
}

/// Karmada's rule for cluster names (a DNS label of at most 48).
pub fn valid_name(name: &str) -> Result<(), JoinError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(JoinError::InvalidName(
            name.into(),
            "use at most 48 lowercase letters, digits and '-', starting and ending with a letter or digit".into(),
        ))
    }
}

/// Creates `karmada-cluster`, where members' credentials and pull-mode
/// agents' Leases live, if it is not there yet.
pub async fn ensure_cluster_namespace(hub: &Client) -> Result<(), JoinError> {
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    if namespaces.get_opt(CLUSTER_NAMESPACE).await?.is_none() {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": CLUSTER_NAMESPACE}}))
                .map_err(|e| JoinError::Hub(kube::Error::SerdeError(e)))?;
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Registers a member in Push mode: its credentials in a Secret in
/// `karmada-cluster`, and a Cluster that references it.
pub async fn join(hub: &Client, req: &JoinRequest) -> Result<Cluster, JoinError> {
    valid_name(&req.name)?;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    if clusters.get_opt(&req.name).await?.is_some() {
        return Err(JoinError::Duplicate(req.name.clone()));
    }
    let unreachable = |message: String| JoinError::Unreachable {
        name: req.name.clone(),
        server: req.credentials.server.clone(),
        message,
    };
    let member = req
        .credentials
        .client(&req.name)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    match tokio::time::timeout(Duration::from_secs(10), member.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Err(_) => return Err(unreachable("no answer within 10s".into())),
    }
    ensure_cluster_namespace(hub).await?;
    // The hub keeps a credential of its own for the member, not the one
    // the operator joined with.
    let token = crate::member_identity::create(&member, &req.name)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let credentials = Credentials {
        token: Some(token),
        client_cert_pem: None,
        client_key_pem: None,
        ..req.credentials.clone()
    };
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), CLUSTER_NAMESPACE);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(req.name.clone()),
            namespace: Some(CLUSTER_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(credentials.secret_data()),
        ..Default::default()
    };
    // A Secret left by a join that failed half-way is replaced.
    if secrets.get_opt(&req.name).await?.is_some() {
        secrets.delete(&req.name, &DeleteParams::default()).await?;
    }
    secrets.create(&PostParams::default(), &secret).await?;
    let mut cluster = Cluster::new(
        &req.name,
        ClusterSpec {
            sync_mode: sync_mode::PUSH.into(),
            api_endpoint: Some(req.credentials.server.clone()),
            secret_ref: Some(SecretRef {
                namespace: CLUSTER_NAMESPACE.into(),
                name: req.name.clone(),
            }),
            insecure_skip_tls_verification: req.credentials.insecure,
            provider: req.provider.clone(),
            region: req.region.clone(),
            zones: req.zones.clone(),
            ..Default::default()
        },
    );
    if !req.labels.is_empty() {
        cluster.metadata.labels = Some(req.labels.clone());
    }
    match clusters.create(&PostParams::default(), &cluster).await {
        Ok(c) => Ok(c),
        Err(e) => {
            // Leave nothing behind.
            let _ = secrets.delete(&req.name, &DeleteParams::default()).await;
            Err(match e {
                kube::Error::Api(s) if s.code == 409 => JoinError::Duplicate(req.name.clone()),
                e => e.into(),
            })
        }
    }
}

/// Removes a member: deletes its Cluster and waits while the control
/// plane removes what it put there (the member's copies, the execution
/// namespace, the stored credentials).
pub async fn unjoin(hub: &Client, name: &str, wait: Duration) -> Result<(), JoinError> {
    let clusters: Api<Cluster> = Api::all(hub.clone());
    // The hub's credential for the member, read before the control plane
    // removes it: with it the member's identity for the hub goes last.
    let member = match Api::<Secret>::namespaced(hub.clone(), CLUSTER_NAMESPACE)
        .get_opt(name)
        .await
    {
        Ok(Some(secret)) => {
            let cluster = clusters.get_opt(name).await.ok().flatten();
            match cluster.and_then(|c| c.spec.api_endpoint.clone().map(|e| (e, c))) {
                Some((server, c)) => {
                    let insecure = c.spec.insecure_skip_tls_verification;
                    Credentials::from_secret(&server, insecure, &secret)
                        .client(name)
                        .await
                        .ok()
                }
                None => None,
            }
        }
        _ => None,
    };
    match clusters.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(JoinError::NotJoined(name.into())),
        Err(e) => return Err(e.into()),
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if clusters.get_opt(name).await?.is_none() {
            if let Some(member) = &member {
                crate::member_identity::delete(member, name).await;
            }
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(JoinError::Timeout {
                name: name.into(),
                seconds: wait.as_secs(),
                message: "is the control plane running? It removes the cluster's objects before the Cluster goes".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
