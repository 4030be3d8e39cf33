//! `shoots/adminkubeconfig` and `shoots/viewerkubeconfig`: a short-lived
//! kubeconfig of a Shoot, as Gardener's API server issues it to a user
//! who may `create` that subresource. The answer is an
//! `authentication.gardener.cloud/v1alpha1` AdminKubeconfigRequest (or
//! ViewerKubeconfigRequest) whose status holds a kubeconfig with a client
//! certificate of the asking user, in `system:masters` (admin) or in
//! `gardener.cloud:system:viewers` (viewer: bound to `view` in the shoot,
//! `shoot.rs`), signed by the shoot's CA and valid for
//! `spec.expirationSeconds` (10 minutes to a day; an hour when unset).

use base64::Engine;
use flotilla_apiserver::error::{ApiError, ApiResult, Cause};
use flotilla_apiserver::extension::{SubresourceCall, SubresourceHandler};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::Client;
use serde_json::{Value, json};

use crate::kubeadm::controlplane::ca_secret;

pub const API_VERSION: &str = "authentication.gardener.cloud/v1alpha1";
/// The group a viewer kubeconfig's user is in; the shoot binds it to
/// `view`.
pub const VIEWERS_GROUP: &str = "gardener.cloud:system:viewers";
const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
/// Gardener's default `--shoot-admin-kubeconfig-max-expiration`.
const MAX_SECONDS: i64 = 86_400;

/// Which kubeconfig a subresource issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Admin,
    Viewer,
}

impl Access {
    pub fn subresource(self) -> &'static str {
        match self {
            Access::Admin => "adminkubeconfig",
            Access::Viewer => "viewerkubeconfig",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Access::Admin => "AdminKubeconfigRequest",
            Access::Viewer => "ViewerKubeconfigRequest",
        }
    }

    fn group(self) -> &'static str {
        match self {
            Access::Admin => "system:masters",
            Access::Viewer => VIEWERS_GROUP,
        }
    }
}

/// Answers `shoots/adminkubeconfig` or `shoots/viewerkubeconfig`, reading
/// the shoot's CA through `client` (the lifecycle controllers').
pub struct ShootKubeconfig {
    pub client: Client,
    pub access: Access,
}

impl SubresourceHandler for ShootKubeconfig {
    fn create(&self, call: SubresourceCall) -> BoxFuture<'static, ApiResult<Value>> {
        let (client, access) = (self.client.clone(), self.access);
        Box::pin(async move { issue(client, access, call).await })
    }

    fn response_kind(&self) -> (&'static str, &'static str, &'static str) {
        (
            "authentication.gardener.cloud",
            "v1alpha1",
            self.access.kind(),
        )
    }
}

/// The requested validity in seconds, as Gardener validates and caps it.
pub fn expiration(kind: &str, request: &Value) -> ApiResult<i64> {
    let requested = &request["spec"]["expirationSeconds"];
    let seconds = match requested {
        Value::Null => DEFAULT_SECONDS,
        v => v.as_i64().ok_or_else(|| {
            ApiError::bad_request("spec.expirationSeconds must be an integer number of seconds")
        })?,
    };
    if seconds < MIN_SECONDS {
        return Err(ApiError::invalid(
            "authentication.gardener.cloud",
            kind,
            "",
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.expirationSeconds".into(),
                message: format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            }],
        ));
    }
    Ok(seconds.min(MAX_SECONDS))
}

async fn issue(client: Client, access: Access, call: SubresourceCall) -> ApiResult<Value> {
    let shoot = &call.parent;
    let name = shoot["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = shoot["metadata"]["namespace"].as_str().unwrap_or_default();
    let seconds = expiration(access.kind(), &call.body)?;
    let Some(server) = shoot["status"]["advertisedAddresses"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "external"))
        .and_then(|a| a["url"].as_str())
    else {
        return Err(ApiError::invalid(
            "core.gardener.cloud",
            "Shoot",
            name,
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "status.status".into(),
                message: "no suitable advertised address for kube-apiserver found in .status.advertisedAddresses (the shoot is not created yet)".into(),
            }],
        ));
    };
    let secrets: Api<Secret> = Api::namespaced(client, namespace);
    let ca = secrets
        .get_opt(&ca_secret(name))
        .await
        .map_err(|e| ApiError::internal(format!("could not get client CA secret: {e}")))?
        .ok_or_else(|| ApiError::internal("could not get client CA secret: not made yet"))?;
    let read = |key: &str| {
        ca.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| ApiError::internal(format!("the CA secret has no {key}")))
    };
    let (ca_cert, ca_key) = (read("tls.crt")?, read("tls.key")?);
    let user = call
        .user
        .as_ref()
        .map_or("system:anonymous", |u| u.name.as_str());
    let not_after = jiff::Timestamp::now().as_second() + seconds;
    let cert = flotilla_apiserver::tls::client_certificate_until(
        &ca_cert,
        &ca_key,
        user,
        &[access.group()],
        Some(not_after),
    )
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let context = format!("{namespace}--{name}-external");
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": b64(&ca_cert)}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [{"name": context, "user": {"client-certificate-data": b64(&cert.cert_pem), "client-key-data": b64(&cert.key_pem)}}],
        "preferences": {},
    });
    let text = serde_yaml::to_string(&kubeconfig).unwrap_or_default();
    let expires = jiff::Timestamp::from_second(not_after)
        .map(|t| t.to_string())
        .unwrap_or_default();
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": access.kind(),
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"expirationSeconds": seconds},
        "status": {"kubeconfig": b64(&text), "expirationTimestamp": expires},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: &str = "AdminKubeconfigRequest";

    #[test]
    fn expiration_is_defaulted_bounded_and_capped() {
        assert_eq!(expiration(KIND, &json!({})).unwrap(), 3600);
        assert_eq!(
            expiration(KIND, &json!({"spec": {"expirationSeconds": 900}})).unwrap(),
            900
        );
        assert_eq!(
            expiration(KIND, &json!({"spec": {"expirationSeconds": 999_999}})).unwrap(),
            86_400
        );
        let e = expiration(KIND, &json!({"spec": {"expirationSeconds": 599}})).unwrap_err();
        assert_eq!(e.code.as_u16(), 422);
    }
}
