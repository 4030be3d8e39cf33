//! The KubeadmControlPlane controller: the cluster's certificates (the
//! `-ca` Secret) and admin kubeconfig (the `-kubeconfig` Secret, a client
//! certificate of `kubernetes-admin` in `system:masters`), and
//! `spec.replicas` control plane Machines, made one at a time; a change of
//! `version` rolls them one at a time, a new one first (maxSurge 1).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tracing::info;

use crate::Context;
use crate::api::{self, Ref};
use crate::capi::templates::{self, Bootstrap, NewMachine};
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "kubeadm-controlplane",
        kind: api::kubeadm_control_planes(),
        wakers: vec![
            (api::machines(), |o| {
                runner::owners_of_kind(o, "KubeadmControlPlane")
            }),
            (api::clusters(), |o| {
                crate::api::Ref::from_value(&o["spec"]["controlPlaneRef"])
                    .map(|r| vec![r.name])
                    .unwrap_or_default()
            }),
        ],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, kcp| async move {
        reconcile(&ctx, kcp).await
    })
    .await;
}

pub fn ca_secret(cluster: &str) -> String {
    format!("{cluster}-ca")
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A Secret of the contract: typed, labelled with the cluster, owned by
/// the control plane.
fn contract_secret(name: &str, cluster: &str, owner: &Value, data: Value) -> Result<Secret, Error> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {api::CLUSTER_NAME_LABEL: cluster},
            "ownerReferences": [objects::owner_ref(owner, true)],
        },
        "type": api::SECRET_TYPE,
        "data": data,
    }))?)
}

/// The cluster CA (`tls.crt`, `tls.key`), made once.
async fn ensure_ca(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    kcp: &Value,
) -> Result<(String, String), Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let read = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    if let Some(s) = secrets.get_opt(&ca_secret(cluster)).await?
        && let (Some(crt), Some(key)) = (read(&s, "tls.crt"), read(&s, "tls.key"))
    {
        return Ok((crt, key));
    }
    let ca = flotilla_apiserver::tls::new_ca("kubernetes")
        .map_err(|e| Error::Provider(e.to_string()))?;
    let secret = contract_secret(
        &ca_secret(cluster),
        cluster,
        kcp,
        json!({"tls.crt": b64(&ca.cert_pem), "tls.key": b64(&ca.key_pem)}),
    )?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok((ca.cert_pem, ca.key_pem)),
        // Made by another reconcile in between: use that one.
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Provider(
            "the CA Secret was just made; reading it again".into(),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The admin kubeconfig, as Cluster API writes it: cluster `<name>`,
/// user `<name>-admin`, context `<name>-admin@<name>`.
fn admin_kubeconfig(
    cluster: &str,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    let user = format!("{cluster}-admin");
    let context = format!("{user}@{cluster}");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "preferences": {},
    });
    serde_yaml::to_string(&config).unwrap_or_default()
}

async fn ensure_kubeconfig(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    server: &str,
    ca: &(String, String),
    kcp: &Value,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let name = crate::workload::kubeconfig_secret(cluster);
    if secrets.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let cert = flotilla_apiserver::tls::client_certificate(
        &ca.0,
        &ca.1,
        "kubernetes-admin",
        &["system:masters"],
    )
    .map_err(|e| Error::Provider(e.to_string()))?;
    let text = admin_kubeconfig(cluster, server, &ca.0, &cert.cert_pem, &cert.key_pem);
    let secret = contract_secret(&name, cluster, kcp, json!({"value": b64(&text)}))?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn infrastructure_template(kcp: &Value) -> Option<Ref> {
    Ref::from_value(&kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"])
        .or_else(|| Ref::from_value(&kcp["spec"]["machineTemplate"]["infrastructureRef"]))
}

async fn reconcile(ctx: &Context, kcp: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&kcp).to_string();
    let name = objects::name(&kcp).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let kcps = api::kubeadm_control_planes();
    let owned: Vec<Value> = objects
        .list(
            &api::machines(),
            &format!("{}={name}", api::CONTROL_PLANE_NAME_LABEL),
        )
        .await?
        .into_iter()
        .filter(|m| objects::owned_by(m, &kcp))
        .collect();
    if objects::deleting(&kcp) {
        return objects
            .finalize_after_children(&kcps, &kcp, api::KCP_FINALIZER, &api::machines(), &owned)
            .await;
    }
    // The Cluster adopts its control plane first (label and owner).
    let Some(cluster_name) = objects::label(&kcp, api::CLUSTER_NAME_LABEL)
        .or_else(|| objects::owner_named(&kcp, "Cluster"))
        .map(String::from)
    else {
        return Ok(Some(Duration::from_secs(2)));
    };
    objects
        .add_finalizer(&kcps, &kcp, api::KCP_FINALIZER)
        .await?;
    let Some(cluster) = objects.get(&api::clusters(), &cluster_name).await? else {
        return Ok(Some(Duration::from_secs(2)));
    };
    let mut status = kcp["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let endpoint = &cluster["spec"]["controlPlaneEndpoint"];
    let infra_ready = cluster["status"]["initialization"]["infrastructureProvisioned"] == true;
    let (Some(host), Some(port)) = (endpoint["host"].as_str(), endpoint["port"].as_i64()) else {
        set_condition(
            &mut status,
            "Available",
            "False",
            "NotAvailable",
            "Waiting for the cluster's infrastructure (spec.controlPlaneEndpoint)",
        );
        if status != kcp["status"] {
            objects.status(&kcps, &name, status).await?;
        }
        return Ok(Some(Duration::from_secs(1)));
    };
    if !infra_ready {
        return Ok(Some(Duration::from_secs(1)));
    }
    let ca = ensure_ca(ctx, &namespace, &cluster_name, &kcp).await?;
    set_condition(
        &mut status,
        "CertificatesAvailable",
        "True",
        "Available",
        "",
    );
    ensure_kubeconfig(
        ctx,
        &namespace,
        &cluster_name,
        &format!("https://{host}:{port}"),
        &ca,
        &kcp,
    )
    .await?;

    // Machines.
    let desired = kcp["spec"]["replicas"].as_i64().unwrap_or(1);
    let version = kcp["spec"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let active: Vec<&Value> = owned.iter().filter(|m| templates::active(m)).collect();
    let ready = |m: &Value| objects::condition_true(m, "Ready");
    let current = |m: &Value| m["spec"]["version"] == version.as_str();
    let initialized = kcp["status"]["initialization"]["controlPlaneInitialized"] == true
        || owned.iter().any(|m| m["status"]["nodeRef"].is_object());
    let settling = owned.iter().any(objects::deleting) || active.iter().any(|m| !ready(m));
    let outdated: Vec<&&Value> = active.iter().filter(|m| !current(m)).collect();
    let count = active.len() as i64;
    let mut action = "";
    if !settling {
        if count < desired || (!outdated.is_empty() && count <= desired) {
            create_machine(
                &objects,
                &kcp,
                &cluster_name,
                &version,
                !initialized && count == 0,
            )
            .await?;
            action = "ScalingUp";
        } else if count > desired {
            // Outdated ones first, then the newest.
            let mut candidates: Vec<Value> = active.iter().map(|m| (*m).clone()).collect();
            candidates.sort_by_key(|m| current(m));
            let victim = if !outdated.is_empty() {
                candidates.first().cloned()
            } else {
                templates::deletion_order(&mut candidates);
                candidates.first().cloned()
            };
            if let Some(m) = victim {
                objects.delete(&api::machines(), objects::name(&m)).await?;
                info!(kcp = %name, machine = %objects::name(&m), "control plane machine removed");
            }
            action = "ScalingDown";
        }
    }
    let counted = |t: &str| {
        active
            .iter()
            .filter(|m| objects::condition_true(m, t))
            .count()
    };
    let ready_count = counted("Ready") as i64;
    status["selector"] = json!(format!(
        "{}={cluster_name},{}={name}",
        api::CLUSTER_NAME_LABEL,
        api::CONTROL_PLANE_NAME_LABEL
    ));
    status["replicas"] = json!(count);
    status["readyReplicas"] = json!(ready_count);
    status["availableReplicas"] = json!(counted("Available"));
    status["upToDateReplicas"] = json!(active.iter().filter(|m| current(m)).count());
    status["initialization"]["controlPlaneInitialized"] = json!(initialized);
    status["observedGeneration"] = kcp["metadata"]["generation"].clone();
    if let Some(lowest) = active
        .iter()
        .filter_map(|m| m["spec"]["version"].as_str())
        .min()
    {
        status["version"] = json!(lowest);
    }
    // v1beta1's fields, for its clients.
    status["initialized"] = json!(initialized);
    status["ready"] = json!(ready_count > 0);
    status["updatedReplicas"] = status["upToDateReplicas"].clone();
    status["unavailableReplicas"] = json!((count - ready_count).max(0));
    if initialized {
        set_condition(&mut status, "Initialized", "True", "Initialized", "");
    } else {
        set_condition(
            &mut status,
            "Initialized",
            "False",
            "NotInitialized",
            "Control plane not yet initialized",
        );
    }
    if initialized && ready_count > 0 {
        set_condition(&mut status, "Available", "True", "Available", "");
    } else {
        set_condition(
            &mut status,
            "Available",
            "False",
            "NotAvailable",
            "No control plane machine is ready yet",
        );
    }
    if ready_count == count && count > 0 {
        set_condition(&mut status, "MachinesReady", "True", "Ready", "");
    } else {
        set_condition(
            &mut status,
            "MachinesReady",
            "False",
            "NotReady",
            &format!("{ready_count} of {count} Machines ready"),
        );
    }
    let up_to_date = outdated.is_empty();
    set_condition(
        &mut status,
        "MachinesUpToDate",
        if up_to_date { "True" } else { "False" },
        if up_to_date {
            "UpToDate"
        } else {
            "NotUpToDate"
        },
        "",
    );
    if up_to_date {
        set_condition(&mut status, "RollingOut", "False", "NotRollingOut", "");
    } else {
        set_condition(
            &mut status,
            "RollingOut",
            "True",
            "RollingOut",
            &format!("Rolling out {} Machines to {version}", outdated.len()),
        );
    }
    set_condition(
        &mut status,
        "ScalingUp",
        if action == "ScalingUp" || count < desired {
            "True"
        } else {
            "False"
        },
        if count < desired {
            "ScalingUp"
        } else {
            "NotScalingUp"
        },
        "",
    );
    set_condition(
        &mut status,
        "ScalingDown",
        if count > desired { "True" } else { "False" },
        if count > desired {
            "ScalingDown"
        } else {
            "NotScalingDown"
        },
        "",
    );
    if status != kcp["status"] {
        objects.status(&kcps, &name, status).await?;
    }
    let settled = count == desired && up_to_date && ready_count == count;
    Ok(Some(if settled {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(1)
    }))
}

async fn create_machine(
    objects: &Objects,
    kcp: &Value,
    cluster: &str,
    version: &str,
    first: bool,
) -> Result<(), Error> {
    let name = objects::name(kcp);
    let infrastructure = infrastructure_template(kcp).ok_or_else(|| {
        Error::Provider("spec.machineTemplate.spec.infrastructureRef is missing".into())
    })?;
    let machine_name = format!("{name}-{}", templates::suffix(name));
    let mut labels = kcp["spec"]["machineTemplate"]["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(api::CLUSTER_NAME_LABEL.into(), json!(cluster));
    labels.insert(api::CONTROL_PLANE_LABEL.into(), json!(""));
    labels.insert(api::CONTROL_PLANE_NAME_LABEL.into(), json!(name));
    // The first machine runs `kubeadm init`, the others join it.
    let mut config = kcp["spec"]["kubeadmConfigSpec"].clone();
    if !config.is_object() {
        config = json!({});
    }
    if let Some(c) = config.as_object_mut() {
        if first {
            c.remove("joinConfiguration");
        } else {
            c.remove("initConfiguration");
            c.entry("joinConfiguration")
                .or_insert_with(|| json!({"controlPlane": {}}));
        }
    }
    templates::create_machine(
        objects,
        NewMachine {
            name: machine_name.clone(),
            labels,
            owner: kcp,
            machine_spec: json!({"clusterName": cluster, "version": version}),
            infrastructure,
            bootstrap: Bootstrap::Config(config),
        },
    )
    .await?;
    info!(kcp = %name, machine = %machine_name, %version, "control plane machine created");
    Ok(())
}
