//! The KubeadmConfig controller: a Machine's bootstrap data, as
//! cloud-config in a Secret named after the config. A control plane
//! machine's carries the cluster CA (as kubeadm's `/etc/kubernetes/pki`),
//! a joining machine's the CA certificate; both say what kubeadm would
//! run. Joins wait until the control plane is initialized, as upstream.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::Context;
use crate::api;
use crate::error::Error;
use crate::kubeadm::controlplane::ca_secret;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

/// Where the bootstrap data puts the cluster CA; the provider reads them
/// back from the data, as cloud-init would write them.
pub const CA_CERT_PATH: &str = "/etc/kubernetes/pki/ca.crt";
pub const CA_KEY_PATH: &str = "/etc/kubernetes/pki/ca.key";

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "kubeadm-bootstrap",
        kind: api::kubeadm_configs(),
        wakers: vec![],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, config| async move {
        reconcile(&ctx, config).await
    })
    .await;
}

fn read(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
}

/// The cloud-config of a machine.
fn cloud_config(init: bool, control_plane: bool, ca_cert: &str, ca_key: &str) -> String {
    let mut files = vec![
        json!({"path": CA_CERT_PATH, "owner": "root:root", "permissions": "0640", "content": ca_cert}),
    ];
    if control_plane {
        files.push(json!({"path": CA_KEY_PATH, "owner": "root:root", "permissions": "0600", "content": ca_key}));
    }
    let command = if init {
        "kubeadm init --config /run/kubeadm/kubeadm.yaml"
    } else {
        "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"
    };
    let config = json!({"write_files": files, "runcmd": [command]});
    format!(
        "## template: jinja\n#cloud-config\n{}",
        serde_yaml::to_string(&config).unwrap_or_default()
    )
}

/// The files a cloud-config writes, by path.
pub fn written_files(data: &str) -> Vec<(String, String)> {
    let body = data
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let Ok(config) = serde_yaml::from_str::<Value>(&body) else {
        return Vec::new();
    };
    config["write_files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| {
                    Some((
                        f["path"].as_str()?.to_string(),
                        f["content"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn reconcile(ctx: &Context, config: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&config).to_string();
    let name = objects::name(&config).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    if config["status"]["dataSecretName"].is_string() || objects::deleting(&config) {
        return Ok(None);
    }
    let Some(machine_name) = objects::owner_named(&config, "Machine") else {
        // The Machine adopts its config first.
        return Ok(Some(Duration::from_secs(1)));
    };
    let Some(machine) = objects.get(&api::machines(), machine_name).await? else {
        return Ok(Some(Duration::from_secs(1)));
    };
    let cluster_name = machine["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(cluster) = objects.get(&api::clusters(), &cluster_name).await? else {
        return Ok(Some(Duration::from_secs(1)));
    };
    let mut status = config["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let init = !config["spec"]["initConfiguration"].is_null()
        || config["spec"]["joinConfiguration"].is_null()
            && objects::label(&machine, api::CONTROL_PLANE_LABEL).is_some();
    let control_plane = objects::label(&machine, api::CONTROL_PLANE_LABEL).is_some();
    let waiting = if cluster["status"]["initialization"]["infrastructureProvisioned"] != true {
        Some((
            "WaitingForClusterInfrastructureReady",
            "Waiting for the cluster's infrastructure",
        ))
    } else if !init && cluster["status"]["initialization"]["controlPlaneInitialized"] != true {
        Some((
            "WaitingForControlPlaneInitialized",
            "Waiting for the control plane to be initialized",
        ))
    } else {
        None
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let ca = secrets.get_opt(&ca_secret(&cluster_name)).await?;
    let ca = ca.and_then(|s| Some((read(&s, "tls.crt")?, read(&s, "tls.key")?)));
    let (Some((ca_cert, ca_key)), None) = (ca, waiting) else {
        let (reason, message) = waiting.unwrap_or((
            "WaitingForCertificates",
            "Waiting for the cluster CA Secret",
        ));
        set_condition(&mut status, "DataSecretAvailable", "False", reason, message);
        set_condition(&mut status, "Ready", "False", reason, message);
        if status != config["status"] {
            objects
                .status(&api::kubeadm_configs(), &name, status)
                .await?;
        }
        return Ok(Some(Duration::from_secs(1)));
    };
    let data = cloud_config(init, control_plane, &ca_cert, &ca_key);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {api::CLUSTER_NAME_LABEL: cluster_name},
            "ownerReferences": [objects::owner_ref(&config, true)],
        },
        "type": api::SECRET_TYPE,
        "data": {"value": b64(&data), "format": b64("cloud-config")},
    }))?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    status["initialization"]["dataSecretCreated"] = json!(true);
    status["dataSecretName"] = json!(name);
    status["ready"] = json!(true);
    set_condition(&mut status, "DataSecretAvailable", "True", "Available", "");
    set_condition(&mut status, "Ready", "True", "Ready", "");
    status["observedGeneration"] = config["metadata"]["generation"].clone();
    objects
        .status(&api::kubeadm_configs(), &name, status)
        .await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_reads_back_the_files_the_data_writes() {
        let data = cloud_config(true, true, "CERT\nPEM", "KEY");
        let files = written_files(&data);
        assert!(files.contains(&(CA_CERT_PATH.to_string(), "CERT\nPEM".to_string())));
        assert!(files.contains(&(CA_KEY_PATH.to_string(), "KEY".to_string())));
        let join = written_files(&cloud_config(false, false, "CERT", "KEY"));
        assert_eq!(join.len(), 1);
    }
}
