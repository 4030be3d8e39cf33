//! Installing CRDs: on the hub (Karmada's, the front ends', the MCS API's)
//! and in members (the MCS API's, the fabric's, the peering's).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

/// How long a CRD may take to become Established.
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot install CRD {name}: {source}")]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CRD {0} was not Established within 30s")]
    NotEstablished(String),
    #[error("a built-in CRD manifest does not parse: {0}")]
    Manifest(#[from] serde_json::Error),
}

/// Server-side applies `manifests` (CRDs; idempotent across restarts and
/// upgrades) and waits until each is Established.
pub async fn install(client: &kube::Client, manifests: Vec<Value>) -> Result<(), InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("flotilla-controlplane").force();
    for manifest in manifests {
        let crd: CustomResourceDefinition = serde_json::from_value(manifest)?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| InstallError::Apply {
                name: name.clone(),
                source,
            })?;
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::conditions::is_crd_established(),
        );
        match tokio::time::timeout(ESTABLISHED_WITHIN, established).await {
            Ok(Ok(_)) => {}
            _ => return Err(InstallError::NotEstablished(name)),
        }
    }
    Ok(())
}
