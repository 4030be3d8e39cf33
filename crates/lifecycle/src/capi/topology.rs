//! Managed topologies: a Cluster with `spec.topology` gets its objects
//! from its ClusterClass: the infrastructure cluster cloned from the
//! class's template, a control plane from its template with the
//! topology's replicas and version (machines from the class's machine
//! template), and one MachineDeployment per `workers.machineDeployments`
//! entry from its class; changes of replicas and version follow, and
//! deployments no longer listed go. The class's variables and patches
//! are not applied (the local provider has no use for image settings).

use serde_json::{Value, json};
use sha2::Digest;

use crate::api::{self, Ref};
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};

/// Label of everything a topology made.
pub const OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
/// Label of a topology's MachineDeployments: their name in the topology.
pub const DEPLOYMENT_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";

/// A name that is the same on every reconcile of one cluster: a crash
/// between making an object and recording it makes no second one.
fn stable_name(cluster: &Value, role: &str) -> String {
    let digest = sha2::Sha256::digest(format!("{}/{role}", objects::uid(cluster)).as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = digest
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!(
        "{}-{role}{}{suffix}",
        objects::name(cluster),
        if role.is_empty() { "" } else { "-" }
    )
}

fn class_of(cluster: &Value) -> Option<(String, Option<String>)> {
    let topology = &cluster["spec"]["topology"];
    if let Some(name) = topology["classRef"]["name"].as_str() {
        return Some((
            name.to_string(),
            topology["classRef"]["namespace"].as_str().map(String::from),
        ));
    }
    topology["class"].as_str().map(|c| {
        (
            c.to_string(),
            topology["classNamespace"].as_str().map(String::from),
        )
    })
}

/// A template's `spec.template.spec`.
async fn template_spec(objects: &Objects, r: &Ref) -> Result<Value, Error> {
    objects
        .get(&r.resource(), &r.name)
        .await?
        .map(|t| t["spec"]["template"]["spec"].clone())
        .ok_or_else(|| Error::Provider(format!("{r} (of the ClusterClass) does not exist")))
}

fn owned_metadata(cluster: &Value, name: &str, extra: Value) -> Value {
    let mut labels = json!({api::CLUSTER_NAME_LABEL: objects::name(cluster), OWNED_LABEL: ""});
    if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    json!({
        "name": name,
        "namespace": objects::namespace(cluster),
        "labels": labels,
        "ownerReferences": [objects::owner_ref(cluster, false)],
    })
}

/// Brings the topology's objects to what the Cluster and its class say;
/// the `TopologyReconciled` condition says how it went.
pub async fn reconcile(
    objects: &Objects,
    cluster: &Value,
    status: &mut Value,
) -> Result<(), Error> {
    match apply(objects, cluster).await {
        Ok(()) => {
            set_condition(
                status,
                "TopologyReconciled",
                "True",
                "ReconcileSucceeded",
                "",
            );
            Ok(())
        }
        Err(Error::Provider(message)) => {
            set_condition(
                status,
                "TopologyReconciled",
                "False",
                "ReconcileFailed",
                &message,
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

async fn apply(objects: &Objects, cluster: &Value) -> Result<(), Error> {
    let (class_name, class_namespace) = class_of(cluster)
        .ok_or_else(|| Error::Provider("spec.topology.classRef.name is missing".into()))?;
    let class_objects = match &class_namespace {
        Some(ns) => Objects::new(objects.client.clone(), ns),
        None => objects.clone(),
    };
    let class = class_objects
        .get(&api::cluster_classes(), &class_name)
        .await?
        .ok_or_else(|| Error::Provider(format!("ClusterClass {class_name} does not exist")))?;
    let topology = &cluster["spec"]["topology"];
    let version = topology["version"].as_str().unwrap_or_default();
    let name = objects::name(cluster);
    let clusters = api::clusters();
    let mut refs = json!({});

    // The infrastructure cluster.
    if cluster["spec"]["infrastructureRef"].is_null() {
        let template = Ref::from_value(&class["spec"]["infrastructure"]["templateRef"])
            .ok_or_else(|| {
                Error::Provider(format!(
                    "ClusterClass {class_name} has no infrastructure template"
                ))
            })?;
        let kind = template.kind.trim_end_matches("Template").to_string();
        let made = Ref {
            group: template.group.clone(),
            kind,
            name: stable_name(cluster, ""),
        };
        let object = json!({
            "apiVersion": format!("{}/{}", made.group, api::VERSION),
            "kind": made.kind,
            "metadata": owned_metadata(cluster, &made.name, json!({})),
            "spec": template_spec(&class_objects, &template).await?,
        });
        objects.create(&made.resource(), object).await?;
        refs["infrastructureRef"] = made.to_value();
    }

    // The control plane.
    let cp_template =
        Ref::from_value(&class["spec"]["controlPlane"]["templateRef"]).ok_or_else(|| {
            Error::Provider(format!(
                "ClusterClass {class_name} has no control plane template"
            ))
        })?;
    let machine_template =
        Ref::from_value(&class["spec"]["controlPlane"]["machineInfrastructure"]["templateRef"]);
    let replicas = topology["controlPlane"]["replicas"].as_i64().unwrap_or(1);
    match Ref::from_value(&cluster["spec"]["controlPlaneRef"]) {
        None => {
            let kind = cp_template.kind.trim_end_matches("Template").to_string();
            let made = Ref {
                group: cp_template.group.clone(),
                kind,
                name: stable_name(cluster, ""),
            };
            let mut spec = template_spec(&class_objects, &cp_template).await?;
            spec["replicas"] = json!(replicas);
            spec["version"] = json!(version);
            if let Some(m) = &machine_template {
                spec["machineTemplate"]["spec"]["infrastructureRef"] = m.to_value();
            }
            let object = json!({
                "apiVersion": format!("{}/{}", made.group, api::VERSION),
                "kind": made.kind,
                "metadata": owned_metadata(cluster, &made.name, json!({})),
                "spec": spec,
            });
            objects.create(&made.resource(), object).await?;
            refs["controlPlaneRef"] = made.to_value();
        }
        Some(r) => {
            if let Some(cp) = objects.get(&r.resource(), &r.name).await?
                && (cp["spec"]["replicas"] != replicas || cp["spec"]["version"] != version)
            {
                objects
                    .merge(
                        &r.resource(),
                        &r.name,
                        json!({"spec": {"replicas": replicas, "version": version}}),
                    )
                    .await?;
            }
        }
    }
    if refs.as_object().is_some_and(|r| !r.is_empty()) {
        objects
            .merge(&clusters, name, json!({"spec": refs}))
            .await?;
    }

    // The workers.
    let classes = class["spec"]["workers"]["machineDeployments"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wanted = topology["workers"]["machineDeployments"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let existing = objects
        .list(
            &api::machine_deployments(),
            &format!("{}={name},{OWNED_LABEL}", api::CLUSTER_NAME_LABEL),
        )
        .await?;
    for md in &wanted {
        let (Some(md_class), Some(md_name)) = (md["class"].as_str(), md["name"].as_str()) else {
            continue;
        };
        let class_md = classes
            .iter()
            .find(|c| c["class"] == md_class)
            .ok_or_else(|| {
                Error::Provider(format!(
                    "ClusterClass {class_name} has no MachineDeployment class {md_class}"
                ))
            })?;
        let bootstrap = Ref::from_value(&class_md["bootstrap"]["templateRef"]);
        let infrastructure = Ref::from_value(&class_md["infrastructure"]["templateRef"])
            .ok_or_else(|| {
                Error::Provider(format!(
                    "MachineDeployment class {md_class} has no infrastructure template"
                ))
            })?;
        let replicas = md["replicas"].as_i64().unwrap_or(1);
        let found = existing
            .iter()
            .find(|e| objects::label(e, DEPLOYMENT_LABEL) == Some(md_name));
        let mut template_spec = json!({
            "clusterName": name,
            "version": version,
            "infrastructureRef": infrastructure.to_value(),
        });
        if let Some(b) = &bootstrap {
            template_spec["bootstrap"] = json!({"configRef": b.to_value()});
        }
        match found {
            None => {
                let md_object_name = stable_name(cluster, md_name);
                let labels = json!({DEPLOYMENT_LABEL: md_name});
                let object = json!({
                    "apiVersion": format!("{}/{}", api::CLUSTER_GROUP, api::VERSION),
                    "kind": "MachineDeployment",
                    "metadata": owned_metadata(cluster, &md_object_name, labels.clone()),
                    "spec": {
                        "clusterName": name,
                        "replicas": replicas,
                        "selector": {"matchLabels": {api::CLUSTER_NAME_LABEL: name, DEPLOYMENT_LABEL: md_name}},
                        "template": {
                            "metadata": {"labels": {api::CLUSTER_NAME_LABEL: name, DEPLOYMENT_LABEL: md_name}},
                            "spec": template_spec,
                        },
                    },
                });
                objects.create(&api::machine_deployments(), object).await?;
            }
            Some(e) => {
                if e["spec"]["replicas"] != replicas
                    || e["spec"]["template"]["spec"]["version"] != version
                {
                    objects
                        .merge(
                            &api::machine_deployments(),
                            objects::name(e),
                            json!({"spec": {"replicas": replicas, "template": {"spec": {"version": version}}}}),
                        )
                        .await?;
                }
            }
        }
    }
    for e in &existing {
        let listed = wanted.iter().any(|w| {
            Some(w["name"].as_str().unwrap_or_default()) == objects::label(e, DEPLOYMENT_LABEL)
        });
        if !listed && !objects::deleting(e) {
            objects
                .delete(&api::machine_deployments(), objects::name(e))
                .await?;
        }
    }
    Ok(())
}
