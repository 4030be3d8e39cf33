//! What kube-controller-manager's tokens controller still does for a
//! Secret of type `kubernetes.io/service-account-token` that someone
//! creates (tools such as `karmadactl join` do, and wait for it): fills in
//! `token`, `ca.crt` and `namespace` for the ServiceAccount its annotation
//! `kubernetes.io/service-account.name` names, and records the account's
//! uid. The token does not expire; it is bound to the Secret and the
//! account, so deleting either ends it, and a filled Secret whose account
//! is gone is deleted, as upstream's.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::objects::{self, WriteScope};
use crate::registry::{self, Request};
use crate::storage::Storage;
use crate::tokens::{self, Claims, KubernetesClaims, Ref};

pub const TYPE: &str = "kubernetes.io/service-account-token";
pub const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
pub const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";
const MANAGER: &str = "kube-controller-manager";
const PREFIX: &str = "/core/secrets/";
/// A Secret whose account does not exist yet is looked at again this often.
const RESYNC: Duration = Duration::from_secs(10);
/// Legacy tokens carry no expiry; the claims need one: 9999-12-31.
const NEVER: i64 = 253_402_300_799;

/// Every Secret, then each as it is written; all again each RESYNC.
pub fn spawn(api: Arc<Storage>) {
    let store = api.store.clone();
    tokio::spawn(crate::follower::each_put(
        store,
        "token secrets controller",
        PREFIX.into(),
        RESYNC,
        move |kv| {
            let api = api.clone();
            async move { reconcile(&api, &kv.value).await }
        },
    ));
}

async fn reconcile(api: &Arc<Storage>, raw: &[u8]) {
    // Most Secrets are of other types: decided before parsing them whole.
    if !raw.windows(TYPE.len()).any(|w| w == TYPE.as_bytes()) {
        return;
    }
    let Ok(secret) = serde_json::from_slice::<Value>(raw) else {
        return;
    };
    if secret.get("type").and_then(Value::as_str) != Some(TYPE) || objects::is_deleting(&secret) {
        return;
    }
    let namespace = objects::meta_str(&secret, "namespace").to_string();
    let name = objects::meta_str(&secret, "name").to_string();
    let annotation = |key: &str| {
        secret
            .pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let account_name = annotation(ACCOUNT_NAME);
    if account_name.is_empty() {
        return;
    }
    let account = api
        .store
        .get(&format!("/core/serviceaccounts/{namespace}/{account_name}"))
        .ok()
        .flatten()
        .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .filter(|a| !objects::is_deleting(a));
    let recorded_uid = annotation(ACCOUNT_UID);
    let Some(account) = account else {
        // Filled for an account that is gone: its token is dead, and the
        // Secret goes as upstream's does. Not yet filled: the account may
        // come next.
        if !recorded_uid.is_empty() {
            delete(api, &namespace, &name).await;
        }
        return;
    };
    let account_uid = objects::meta_str(&account, "uid").to_string();
    if !recorded_uid.is_empty() && recorded_uid != account_uid {
        delete(api, &namespace, &name).await;
        return;
    }
    if secret.pointer("/data/token").is_some() && !recorded_uid.is_empty() {
        return;
    }
    let claims = Claims {
        aud: vec![tokens::ISSUER.to_string()],
        exp: NEVER,
        iat: jiff::Timestamp::now().as_second(),
        nbf: jiff::Timestamp::now().as_second(),
        iss: tokens::ISSUER.into(),
        jti: uuid::Uuid::new_v4().to_string(),
        sub: format!("system:serviceaccount:{namespace}:{account_name}"),
        kubernetes: KubernetesClaims {
            namespace: namespace.clone(),
            serviceaccount: Ref {
                name: account_name.clone(),
                uid: account_uid.clone(),
            },
            pod: None,
            secret: Some(Ref {
                name: name.clone(),
                uid: objects::meta_str(&secret, "uid").to_string(),
            }),
        },
    };
    let token = api.tokens.sign(&claims);
    let ca = api.config.root_ca.clone().unwrap_or_default();
    let Some(r) = api.registry.get("", "v1", "secrets") else {
        return;
    };
    let req = Request::internal(
        api.clone(),
        r.clone(),
        Some(namespace.clone()),
        Some(name.clone()),
    );
    let result = registry::update(&req, |old| {
        let mut new = old.clone();
        let data = &mut new["data"];
        if !data.is_object() {
            *data = json!({});
        }
        data["token"] = json!(B64.encode(&token));
        data["ca.crt"] = json!(B64.encode(&ca));
        data["namespace"] = json!(B64.encode(&namespace));
        new["metadata"]["annotations"][ACCOUNT_UID] = json!(account_uid);
        crate::managed::track_update(&r, Some(old), &mut new, MANAGER, WriteScope::Main);
        Ok((new, Vec::new()))
    })
    .await;
    match result {
        Ok(_) => {
            info!(%namespace, secret = %name, account = %account_name, "service account token secret filled")
        }
        Err(e) => debug!(error = %e.message, %namespace, secret = %name, "token secret not filled"),
    }
}

async fn delete(api: &Arc<Storage>, namespace: &str, name: &str) {
    let Some(r) = api.registry.get("", "v1", "secrets") else {
        return;
    };
    let req = Request::internal(
        api.clone(),
        r,
        Some(namespace.to_string()),
        Some(name.to_string()),
    );
    if let Err(e) = registry::delete(&req, name, &Default::default()).await {
        debug!(error = %e.message, namespace, secret = name, "token secret of a gone account not deleted");
    } else {
        info!(
            namespace,
            secret = name,
            "token secret of a deleted service account deleted"
        );
    }
}
