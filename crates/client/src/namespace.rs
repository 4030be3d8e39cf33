//! Namespaces made on demand: the namespace a propagated object, a lease
//! or an import lives in, created when it is missing.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};

/// Whether [`ensure`] found the namespace or made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ensured {
    Existed,
    Created,
}

/// Creates namespace `name` with `labels` unless it exists. A namespace
/// created by someone else meanwhile (409) counts as existing; the labels
/// of an existing namespace are left as they are.
pub async fn ensure(
    client: &kube::Client,
    name: &str,
    labels: &[(&str, &str)],
) -> Result<Ensured, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(Ensured::Existed);
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(Ensured::Created),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Ensured::Existed),
        Err(error) => Err(error),
    }
}
