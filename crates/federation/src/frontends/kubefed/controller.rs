//! Keeps each federated object's generated objects (template,
//! PropagationPolicy, OverridePolicy) as its spec says, and its KubeFed
//! status as the pipeline's ResourceBinding reports. It looks at every
//! type config and federated object each second (there are few); writes
//! happen only when what was generated changes.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::api::{
    CORE_GROUP, FIELD_MANAGER, HASH_ANNOTATION, SYSTEM_NAMESPACE, TargetType, VERSION,
    default_types, enabled_target, type_config,
};
use super::translate::{self, BadOverride, CHECK_CLUSTERS};
use crate::api::{Binding, Cluster, POLICY_GROUP, Scope, binding_resource};
use crate::names::{binding_name, fnv32a};

const PERIOD: Duration = Duration::from_secs(1);

fn type_config_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CORE_GROUP, VERSION, "FederatedTypeConfig"),
        "federatedtypeconfigs",
    )
}

fn policy_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(POLICY_GROUP, "v1alpha1", kind),
        plural,
    )
}

fn target_resource(t: &TargetType) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&t.group, &t.version, &t.kind),
        &t.plural,
    )
}

/// The federated kind a type config names.
fn federated_resource(ftc: &Value) -> Option<ApiResource> {
    let f = ftc.pointer("/spec/federatedType")?;
    let s = |k: &str| f.get(k).and_then(Value::as_str);
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(s("group")?, s("version")?, s("kind")?),
        s("pluralName")?,
    ))
}

/// Creates `kube-federation-system` and KubeFed's default type configs
/// (those missing only: a user's edit, `propagation: Disabled` say,
/// stays), with their status.
pub async fn ensure_type_configs(hub: &Client) -> kube::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))
        .map_err(kube::Error::SerdeError)?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), SYSTEM_NAMESPACE, &type_config_resource());
    for t in default_types() {
        let obj: DynamicObject =
            serde_json::from_value(type_config(&t)).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        let status = json!({"status": {
            "observedGeneration": 1,
            "propagationController": "Running",
            "statusController": "NotRunning",
        }});
        api.patch_status(
            &t.config_name(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    }
    Ok(())
}

pub async fn run(hub: Client, clusters: Store<Cluster>) {
    while let Err(error) = ensure_type_configs(&hub).await {
        warn!(%error, "KubeFed type configs not written; retrying");
        tokio::time::sleep(PERIOD).await;
    }
    info!("KubeFed front end running");
    loop {
        if let Err(error) = sync_all(&hub, &clusters).await {
            warn!(%error, "KubeFed front end: retrying");
        }
        tokio::time::sleep(PERIOD).await;
    }
}

async fn sync_all(hub: &Client, clusters: &Store<Cluster>) -> kube::Result<()> {
    let configs: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), SYSTEM_NAMESPACE, &type_config_resource());
    for ftc in configs.list(&Default::default()).await? {
        let ftc = serde_json::to_value(&ftc).map_err(kube::Error::SerdeError)?;
        let (Some(target), Some(fed_ar)) = (enabled_target(&ftc), federated_resource(&ftc)) else {
            continue;
        };
        if !target.namespaced {
            // FederatedNamespace, FederatedClusterRole: not yet.
            continue;
        }
        let feds: Api<DynamicObject> = Api::all_with(hub.clone(), &fed_ar);
        let list = match feds.list(&Default::default()).await {
            Ok(l) => l,
            Err(error) => {
                debug!(%error, kind = %fed_ar.kind, "federated kind not served");
                continue;
            }
        };
        for fed in list {
            if fed.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = fed.name_any();
            let fed = serde_json::to_value(&fed).map_err(kube::Error::SerdeError)?;
            if let Err(error) = reconcile(hub, clusters, &fed_ar, &target, &fed).await {
                warn!(%error, federated = %name, kind = %fed_ar.kind, "KubeFed object not reconciled");
            }
        }
    }
    Ok(())
}

/// Server-side applies `obj` unless what was last applied is the same;
/// the object's uid.
async fn apply(hub: &Client, ar: &ApiResource, mut obj: Value) -> kube::Result<Option<String>> {
    let hash = fnv32a(obj.to_string().as_bytes()).to_string();
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][HASH_ANNOTATION] = json!(hash);
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(hub.clone(), ns, ar),
        None => Api::all_with(hub.clone(), ar),
    };
    if let Some(existing) = api.get_opt(&name).await?
        && existing.annotations().get(HASH_ANNOTATION) == Some(&hash)
    {
        return Ok(existing.metadata.uid);
    }
    debug!(kind = %ar.kind, %name, "KubeFed: applying generated object");
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await?;
    Ok(applied.metadata.uid)
}

/// Makes the template an owner of a generated policy too, so that the
/// policy outlives the template: were the OverridePolicy deleted first,
/// the members' copies would be rewritten without their overrides before
/// they go (or, orphaned, would stay so).
fn owned_by_template(mut policy: Value, template: &Value, uid: Option<String>) -> Value {
    if let (Some(uid), Some(owners)) = (uid, policy["metadata"]["ownerReferences"].as_array_mut()) {
        owners.push(json!({
            "apiVersion": template["apiVersion"],
            "kind": template["kind"],
            "name": template["metadata"]["name"],
            "uid": uid,
        }));
    }
    policy
}

async fn reconcile(
    hub: &Client,
    clusters: &Store<Cluster>,
    fed_ar: &ApiResource,
    target: &TargetType,
    fed: &Value,
) -> kube::Result<()> {
    let template = translate::template(fed, target);
    let uid = apply(hub, &target_resource(target), template.clone()).await?;
    let pp = translate::propagation_policy(fed, target);
    let pp = owned_by_template(pp, &template, uid.clone());
    apply(
        hub,
        &policy_resource("PropagationPolicy", "propagationpolicies"),
        pp,
    )
    .await?;
    let (op, bad) = translate::override_policy(fed, target, &template);
    let op = owned_by_template(op, &template, uid);
    apply(
        hub,
        &policy_resource("OverridePolicy", "overridepolicies"),
        op,
    )
    .await?;
    write_status(hub, clusters, fed_ar, target, fed, &bad).await
}

async fn write_status(
    hub: &Client,
    clusters: &Store<Cluster>,
    fed_ar: &ApiResource,
    target: &TargetType,
    fed: &Value,
    bad: &[BadOverride],
) -> kube::Result<()> {
    let name = fed["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = fed["metadata"]["namespace"].as_str().unwrap_or_default();
    let bindings: Api<Binding> =
        Api::namespaced_with(hub.clone(), namespace, &binding_resource(Scope::Namespaced));
    let binding = bindings.get_opt(&binding_name(&target.kind, name)).await?;
    let scheduled: Vec<String> = binding
        .as_ref()
        .map(|b| b.spec.clusters.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let placed = match translate::named_clusters(fed) {
        Some(names) => names,
        None => scheduled,
    };
    let all = clusters.state();
    let known: BTreeSet<String> = all.iter().map(|c| c.name_any()).collect();
    let ready: BTreeSet<String> = all
        .iter()
        .filter(|c| c.is_ready())
        .map(|c| c.name_any())
        .collect();
    let aggregated = binding
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .map(|s| s.aggregated_status.clone())
        .unwrap_or_default();
    let (cluster_status, ok) = translate::status(&placed, &known, &ready, &aggregated, bad);
    // A selector's clusters are known once the binding is scheduled.
    let scheduled = binding
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Scheduled"));
    let ok = ok && (scheduled || translate::named_clusters(fed).is_some());
    let mut notes: Vec<String> = placed
        .iter()
        .filter(|c| !known.contains(*c))
        .map(|c| format!("cluster {c} is not a member of the fleet"))
        .collect();
    notes.extend(
        bad.iter()
            .map(|b| format!("override for cluster {}: {}", b.cluster, b.reason)),
    );
    let (status_str, reason) = if ok {
        ("True", "")
    } else {
        ("False", CHECK_CLUSTERS)
    };
    let message = notes.join("; ");
    let old = fed.pointer("/status/conditions").and_then(Value::as_array);
    let old = old.and_then(|cs| cs.iter().find(|c| c["type"] == "Propagation"));
    let same = old.is_some_and(|c| {
        c["status"] == status_str
            && c["reason"].as_str().unwrap_or_default() == reason
            && c["message"].as_str().unwrap_or_default() == message
    }) && fed.pointer("/status/clusters") == Some(&json!(cluster_status));
    if same {
        return Ok(());
    }
    let now = serde_json::to_value(crate::conditions::now()).map_err(kube::Error::SerdeError)?;
    let transition = match old {
        Some(c) if c["status"] == status_str => c["lastTransitionTime"].clone(),
        _ => now.clone(),
    };
    let mut condition = json!({
        "type": "Propagation",
        "status": status_str,
        "lastUpdateTime": now,
        "lastTransitionTime": transition,
    });
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
    }
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    let status = json!({"status": {
        "observedGeneration": fed["metadata"]["generation"],
        "conditions": [condition],
        "clusters": cluster_status,
    }});
    let api: Api<DynamicObject> = Api::namespaced_with(hub.clone(), namespace, fed_ar);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    info!(federated = %name, kind = %fed_ar.kind, propagation = status_str, "KubeFed status");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_owned_by_its_federated_object_and_its_template() {
        let policy = json!({"metadata": {"ownerReferences": [{"uid": "fed"}]}});
        let template =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let owned = owned_by_template(policy.clone(), &template, Some("t-1".into()));
        assert_eq!(
            owned["metadata"]["ownerReferences"],
            json!([{"uid": "fed"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "t-1"}])
        );
        assert_eq!(owned_by_template(policy.clone(), &template, None), policy);
    }
}
