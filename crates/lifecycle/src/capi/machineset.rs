//! The MachineSet controller: keeps `spec.replicas` Machines of its
//! template, making each with its bootstrap config and infrastructure
//! machine, and removing the not-ready and the newest first.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Context;
use crate::api::{self, Ref};
use crate::capi::templates::{self, Bootstrap, NewMachine};
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

pub async fn run(ctx: Arc<Context>) {
    let controller = Controller {
        name: "capi-machineset",
        kind: api::machine_sets(),
        wakers: vec![(api::machines(), |o| runner::owners_of_kind(o, "MachineSet"))],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, set| async move {
        reconcile(&ctx, set).await
    })
    .await;
}

fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

async fn reconcile(ctx: &Context, set: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&set).to_string();
    let name = objects::name(&set).to_string();
    let cluster = set["spec"]["clusterName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let sets = api::machine_sets();
    let owned: Vec<Value> = objects
        .list(&api::machines(), &format!("{}={name}", api::SET_NAME_LABEL))
        .await?
        .into_iter()
        .filter(|m| objects::owned_by(m, &set))
        .collect();
    if objects::deleting(&set) {
        return objects
            .finalize_after_children(
                &sets,
                &set,
                api::MACHINESET_FINALIZER,
                &api::machines(),
                &owned,
            )
            .await;
    }
    objects
        .add_finalizer(&sets, &set, api::MACHINESET_FINALIZER)
        .await?;
    if objects::label(&set, api::CLUSTER_NAME_LABEL) != Some(cluster.as_str())
        && !cluster.is_empty()
    {
        objects
            .merge(
                &sets,
                &name,
                json!({"metadata": {"labels": {api::CLUSTER_NAME_LABEL: cluster}}}),
            )
            .await?;
    }
    let mut active: Vec<Value> = owned
        .iter()
        .filter(|m| templates::active(m))
        .cloned()
        .collect();
    let desired = replicas(&set);
    let mut status = set["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let count = active.len() as i64;
    if count < desired {
        let template = &set["spec"]["template"];
        let infrastructure =
            Ref::from_value(&template["spec"]["infrastructureRef"]).ok_or_else(|| {
                Error::Provider("spec.template.spec.infrastructureRef is missing".into())
            })?;
        let bootstrap = match Ref::from_value(&template["spec"]["bootstrap"]["configRef"]) {
            Some(r) => Bootstrap::Template(r),
            None => Bootstrap::None,
        };
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(api::SET_NAME_LABEL.into(), json!(name));
        labels.insert(api::CLUSTER_NAME_LABEL.into(), json!(cluster));
        for key in [api::DEPLOYMENT_NAME_LABEL, api::TEMPLATE_HASH_LABEL] {
            if let Some(v) = objects::label(&set, key) {
                labels.insert(key.into(), json!(v));
            }
        }
        let mut spec = template["spec"].clone();
        spec["clusterName"] = json!(cluster);
        if let Some(b) = spec.get_mut("bootstrap").and_then(Value::as_object_mut) {
            b.remove("configRef");
        }
        // Cluster API makes the missing ones at once.
        for _ in count..desired {
            let machine_name = format!("{name}-{}", templates::suffix(&name));
            let bootstrap = match &bootstrap {
                Bootstrap::Template(r) => Bootstrap::Template(r.clone()),
                _ => Bootstrap::None,
            };
            templates::create_machine(
                &objects,
                NewMachine {
                    name: machine_name,
                    labels: labels.clone(),
                    owner: &set,
                    machine_spec: spec.clone(),
                    infrastructure: infrastructure.clone(),
                    bootstrap,
                },
            )
            .await?;
        }
        set_condition(
            &mut status,
            "ScalingUp",
            "True",
            "ScalingUp",
            &format!("Scaling up from {count} to {desired} replicas"),
        );
    } else if count > desired {
        templates::deletion_order(&mut active);
        for m in active.iter().take((count - desired) as usize) {
            objects.delete(&api::machines(), objects::name(m)).await?;
        }
        set_condition(
            &mut status,
            "ScalingDown",
            "True",
            "ScalingDown",
            &format!("Scaling down from {count} to {desired} replicas"),
        );
    } else {
        set_condition(&mut status, "ScalingUp", "False", "NotScalingUp", "");
        set_condition(&mut status, "ScalingDown", "False", "NotScalingDown", "");
    }
    let counted = |t: &str| {
        owned
            .iter()
            .filter(|m| templates::active(m) && objects::condition_true(m, t))
            .count()
    };
    status["replicas"] = json!(count);
    status["readyReplicas"] = json!(counted("Ready"));
    status["availableReplicas"] = json!(counted("Available"));
    status["upToDateReplicas"] = json!(counted("UpToDate"));
    status["selector"] = json!(templates::selector_string(
        &set["spec"]["selector"]["matchLabels"]
    ));
    status["observedGeneration"] = set["metadata"]["generation"].clone();
    let ready = counted("Ready") as i64;
    if ready == desired {
        set_condition(&mut status, "MachinesReady", "True", "Ready", "");
    } else {
        set_condition(
            &mut status,
            "MachinesReady",
            "False",
            "NotReady",
            &format!("{ready} of {desired} Machines ready"),
        );
    }
    if status != set["status"] {
        objects.status(&sets, &name, status).await?;
    }
    Ok(if count != desired || ready != desired {
        Some(Duration::from_secs(1))
    } else {
        None
    })
}
