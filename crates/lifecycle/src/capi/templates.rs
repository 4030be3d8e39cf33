//! Machines made from templates, as MachineSets and the kubeadm control
//! plane make them: the bootstrap config and the infrastructure machine
//! cloned from their templates (`spec.template.spec`, annotated with
//! what they were cloned from), then the Machine referencing both.

use serde_json::{Map, Value, json};
use sha2::Digest;

use crate::api::{self, Ref};
use crate::error::Error;
use crate::objects::{self, Objects};

/// A short random-looking suffix for generated names (lower-case
/// letters and digits, as upstream's `names.SimpleNameGenerator`).
pub fn suffix(seed: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let digest = sha2::Sha256::digest(format!("{seed}/{nanos}").as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    digest
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The kind a template makes: `DockerMachineTemplate` → `DockerMachine`.
fn made_kind(template_kind: &str) -> Option<&str> {
    template_kind.strip_suffix("Template")
}

/// Clones `template` (a `*Template` object's reference) into an object
/// named `name` with `labels` and `owner` as its controller; returns the
/// reference to what was made.
pub async fn clone(
    objects: &Objects,
    template: &Ref,
    name: &str,
    labels: &Map<String, Value>,
    owner: &Value,
) -> Result<Ref, Error> {
    let Some(source) = objects.get(&template.resource(), &template.name).await? else {
        return Err(Error::Provider(format!("{template} does not exist")));
    };
    let kind = made_kind(&template.kind)
        .ok_or_else(|| Error::Provider(format!("{template} is not a template kind")))?;
    let made = Ref {
        group: template.group.clone(),
        kind: kind.to_string(),
        name: name.to_string(),
    };
    let mut metadata_labels = source["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    metadata_labels.extend(labels.clone());
    let mut annotations = source["spec"]["template"]["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert(api::CLONED_FROM_NAME.into(), json!(template.name));
    annotations.insert(
        api::CLONED_FROM_KIND.into(),
        json!(format!("{}.{}", template.kind, template.group)),
    );
    let object = json!({
        "apiVersion": format!("{}/{}", template.group, api::VERSION),
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": objects.namespace,
            "labels": metadata_labels,
            "annotations": annotations,
            "ownerReferences": [objects::owner_ref(owner, true)],
        },
        "spec": source["spec"]["template"]["spec"].clone(),
    });
    objects.create(&made.resource(), object).await?;
    Ok(made)
}

/// Makes one Machine: its bootstrap config (cloned from `bootstrap`, or
/// given whole as `bootstrap_spec`), its infrastructure machine (cloned
/// from `infrastructure`), and the Machine itself from `machine_spec`
/// with both referenced.
pub struct NewMachine<'a> {
    pub name: String,
    pub labels: Map<String, Value>,
    pub owner: &'a Value,
    pub machine_spec: Value,
    pub infrastructure: Ref,
    pub bootstrap: Bootstrap,
}

pub enum Bootstrap {
    Template(Ref),
    /// A KubeadmConfig's spec (the control plane's `kubeadmConfigSpec`).
    Config(Value),
    None,
}

pub async fn create_machine(objects: &Objects, new: NewMachine<'_>) -> Result<(), Error> {
    let infrastructure = clone(
        objects,
        &new.infrastructure,
        &new.name,
        &new.labels,
        new.owner,
    )
    .await?;
    let mut spec = new.machine_spec.clone();
    if !spec.is_object() {
        spec = json!({});
    }
    spec["infrastructureRef"] = infrastructure.to_value();
    match new.bootstrap {
        Bootstrap::Template(t) => {
            let made = clone(objects, &t, &new.name, &new.labels, new.owner).await?;
            spec["bootstrap"] = json!({"configRef": made.to_value()});
        }
        Bootstrap::Config(config_spec) => {
            let config = json!({
                "apiVersion": format!("{}/{}", api::BOOTSTRAP_GROUP, api::VERSION),
                "kind": "KubeadmConfig",
                "metadata": {
                    "name": new.name,
                    "namespace": objects.namespace,
                    "labels": new.labels,
                    "ownerReferences": [objects::owner_ref(new.owner, true)],
                },
                "spec": config_spec,
            });
            objects.create(&api::kubeadm_configs(), config).await?;
            let made = Ref {
                group: api::BOOTSTRAP_GROUP.into(),
                kind: "KubeadmConfig".into(),
                name: new.name.clone(),
            };
            spec["bootstrap"] = json!({"configRef": made.to_value()});
        }
        Bootstrap::None => {}
    }
    let machine = json!({
        "apiVersion": format!("{}/{}", api::CLUSTER_GROUP, api::VERSION),
        "kind": "Machine",
        "metadata": {
            "name": new.name,
            "namespace": objects.namespace,
            "labels": new.labels,
            "ownerReferences": [objects::owner_ref(new.owner, true)],
        },
        "spec": spec,
    });
    objects.create(&api::machines(), machine).await
}

/// Whether a Machine counts toward its owner's replicas (it is not being
/// deleted).
pub fn active(machine: &Value) -> bool {
    !objects::deleting(machine)
}

/// `matchLabels` as a label selector string.
pub fn selector_string(match_labels: &Value) -> String {
    match_labels
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Machines first to go when scaling down: not ready before ready, then
/// the newest.
pub fn deletion_order(machines: &mut [Value]) {
    machines.sort_by(|a, b| {
        let ready = |m: &Value| objects::condition_true(m, "Ready");
        ready(a).cmp(&ready(b)).then_with(|| {
            b["metadata"]["creationTimestamp"]
                .as_str()
                .cmp(&a["metadata"]["creationTimestamp"].as_str())
                .then_with(|| objects::name(b).cmp(objects::name(a)))
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unready_and_newest_machines_go_first() {
        let m = |name: &str, created: &str, ready: &str| {
            json!({"metadata": {"name": name, "creationTimestamp": created},
                   "status": {"conditions": [{"type": "Ready", "status": ready}]}})
        };
        let mut list = vec![
            m("old-ready", "2026-01-01T00:00:00Z", "True"),
            m("new-ready", "2026-01-02T00:00:00Z", "True"),
            m("old-unready", "2026-01-01T00:00:00Z", "False"),
        ];
        deletion_order(&mut list);
        let names: Vec<&str> = list.iter().map(objects::name).collect();
        assert_eq!(names, ["old-unready", "new-ready", "old-ready"]);
        assert_eq!(suffix("x").len(), 5);
        assert_eq!(made_kind("DockerMachineTemplate"), Some("DockerMachine"));
    }
}
