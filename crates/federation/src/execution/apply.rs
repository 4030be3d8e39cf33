//! Putting one manifest into a member, and taking it out again.

use flotilla_client::namespace::Ensured;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use super::Execution;
use super::live::Lean;
use super::observed::{Presence, is_ours, manifest_digest, member_object, prepare};
use crate::api::{ResourceIdentifier, Work, annotations, labels};
use crate::autoscaling::scale_target_marker::RETAIN_REPLICAS;
use crate::error::{Error, is_not_found};
use crate::kinds::scoped_api;
use crate::members::Member;

/// The field manager of every apply to a member.
pub const FIELD_MANAGER: &str = "flotilla";

/// What became of one manifest in its member.
pub struct Outcome {
    pub identifier: ResourceIdentifier,
    pub status: Option<Value>,
    pub health: &'static str,
}

/// apiVersion, kind, namespace and name of a manifest.
pub fn identify(m: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        m.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

/// What the member holds under a manifest's name before the apply.
struct Existing {
    /// Labelled managed by Flotilla.
    ours: bool,
    /// Its `spec.replicas`, when it was read.
    replicas: Option<Value>,
}

fn applied_from(obj: &DynamicObject, work: &Work) -> bool {
    let a = obj.annotations();
    a.get(annotations::WORK_NAME).map(String::as_str) == work.metadata.name.as_deref()
        && a.get(annotations::WORK_NAMESPACE) == work.metadata.namespace.as_ref()
}

/// Brings one manifest (its text as the Work holds it) into the member:
/// nothing to do when the member watch shows the object already holding
/// it, otherwise a server-side apply. The outcome, or why it failed.
pub async fn sync(
    exec: &Arc<Execution>,
    member: &Member,
    cluster: &str,
    work: &Work,
    raw: &str,
    overwrite: bool,
) -> Result<Outcome, String> {
    let manifest: Value =
        serde_json::from_str(raw).map_err(|e| format!("the manifest is not valid JSON: {e}"))?;
    let (api_version, kind, namespace, name) = identify(&manifest);
    let (ar, namespaced) = member
        .kinds
        .resolve(&api_version, &kind)
        .await
        .map_err(|e| format!("the member does not serve {api_version} {kind}: {e}"))?;
    let namespace = if namespaced { namespace } else { String::new() };
    let identifier = ResourceIdentifier {
        ordinal: 0,
        group: ar.group.clone(),
        version: ar.version.clone(),
        kind: kind.clone(),
        resource: ar.plural.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let key = member_object(cluster, &api_version, &kind, &namespace, &name);
    let digest = manifest_digest(raw);
    let synced = exec.watches.synced(member, cluster, &ar).await;
    if synced && let Some(seen) = exec.watches.in_sync(&key, &digest) {
        return Ok(Outcome {
            identifier,
            status: seen.status,
            health: seen.health,
        });
    }

    if namespaced {
        ensure_namespace(exec, member, cluster, &namespace).await?;
    }
    let api: Api<DynamicObject> = scoped_api(
        member.client.clone(),
        namespaced.then_some(namespace.as_str()),
        &ar,
    );
    let scalable = matches!(kind.as_str(), "Deployment" | "StatefulSet" | "ReplicaSet");
    let presence = synced.then(|| exec.watches.presence(&key));
    // The member is read only when the watch cannot tell what holds the
    // name: not synced, someone else's object, or replicas to compare.
    let existing = match presence {
        Some(Presence::Absent) => None,
        Some(Presence::Ours) if !scalable => Some(Existing {
            ours: true,
            replicas: None,
        }),
        _ => api
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .map(|obj| Existing {
                ours: is_ours(&obj),
                replicas: obj.data.pointer("/spec/replicas").cloned(),
            }),
    };
    if existing.as_ref().is_some_and(|e| !e.ours) && !overwrite {
        return Err(format!(
            "{kind} {}{name} already exists in cluster {cluster} and is not managed by Flotilla; \
             set conflictResolution: Overwrite in the policy to take it over",
            if namespace.is_empty() {
                String::new()
            } else {
                format!("{namespace}/")
            }
        ));
    }
    let mut applied = prepare(&manifest, work, &digest);
    // Only a member whose replicas differ from ours can have an autoscaler
    // that moved them: look for one then, not on every apply.
    let replicas_differ = existing
        .as_ref()
        .is_some_and(|e| e.replicas.as_ref() != applied.pointer("/spec/replicas"));
    // A template marked as scaled by the members' HPAs (Karmada's label),
    // or a member HPA found targeting the object: the member owns them.
    let retained = applied
        .pointer("/metadata/labels")
        .and_then(|l| l.get(RETAIN_REPLICAS))
        .and_then(Value::as_str)
        == Some("true");
    if scalable
        && replicas_differ
        && (retained || scaled_by_hpa(member, &namespace, &kind, &name).await)
        && let Some(spec) = applied.get_mut("spec").and_then(Value::as_object_mut)
    {
        // The member's autoscaler owns replicas.
        spec.remove("replicas");
    }
    let live = apply_to_member(&member.client, api.resource_url(), &name, &applied)
        .await
        .map_err(|e| e.to_string())?;
    if existing.is_none() {
        info!(%cluster, %kind, %namespace, %name, "created in member");
    }
    exec.watches
        .record(key, &kind, &live, &applied, &digest, work);
    Ok(Outcome {
        identifier,
        status: crate::interpreter::reflect_status(&live),
        health: crate::interpreter::health(&kind, &live),
    })
}

/// Server-side applies `applied` as Flotilla at `url` (a resource
/// collection), taking over fields others
/// set. The answer is read as plain JSON, the form every reader of the live
/// object here wants (its resourceVersion, its status, whether it holds
/// what was applied), not decoded into a typed object first and encoded
/// back: once per copy, that was a few percent of the hub in a burst. Its
/// managedFields are skipped over ([`Lean`]).
async fn apply_to_member(
    client: &kube::Client,
    url: &str,
    name: &str,
    applied: &Value,
) -> Result<Value, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let request = kube::core::Request::new(url)
        .patch(name, &params, &Patch::Apply(applied))
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Lean>(request).await.map(|Lean(live)| live)
}

async fn scaled_by_hpa(member: &Member, namespace: &str, kind: &str, name: &str) -> bool {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(member.client.clone(), namespace);
    match api.list(&Default::default()).await {
        Ok(list) => list.items.iter().any(|h| {
            h.spec
                .as_ref()
                .is_some_and(|s| s.scale_target_ref.kind == kind && s.scale_target_ref.name == name)
        }),
        Err(_) => false,
    }
}

/// Creates the namespace of a propagated object in the member when it is
/// missing: namespaces follow the workloads placed into them.
async fn ensure_namespace(
    exec: &Execution,
    member: &Member,
    cluster: &str,
    namespace: &str,
) -> Result<(), String> {
    let key = (cluster.to_string(), namespace.to_string());
    if exec.namespaces.lock().contains(&key) {
        return Ok(());
    }
    let ensured = flotilla_client::namespace::ensure(&member.client, namespace, &[])
        .await
        .map_err(|e| format!("cannot create namespace {namespace}: {e}"))?;
    if ensured == Ensured::Created {
        info!(%cluster, %namespace, "namespace created in member");
    }
    exec.namespaces.lock().insert(key);
    Ok(())
}

/// What becomes of a member's copy when its Work goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// Deleted with it.
    Delete,
    /// Kept (`preserveResourcesOnDeletion`), without the marks that made
    /// it Flotilla's, so that nothing manages or claims it any more.
    Release,
}

/// Deletes or releases the member's copy of a manifest, if it is still
/// the copy this Work put there.
pub async fn leave_member(
    exec: &Execution,
    member: &Member,
    cluster: &str,
    work: &Work,
    manifest: &Value,
    leaving: Leaving,
) -> Result<(), Error> {
    let (api_version, kind, namespace, name) = identify(manifest);
    let (ar, namespaced) = match member.kinds.resolve(&api_version, &kind).await {
        Ok(found) => found,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(Error::member(cluster)(e)),
    };
    let namespace = if namespaced { namespace } else { String::new() };
    // Nothing of this object is ours to recognise any more.
    exec.watches.forget_ours(&member_object(
        cluster,
        &api_version,
        &kind,
        &namespace,
        &name,
    ));
    let api: Api<DynamicObject> = scoped_api(
        member.client.clone(),
        namespaced.then_some(namespace.as_str()),
        &ar,
    );
    let Some(obj) = api.get_opt(&name).await.map_err(Error::member(cluster))? else {
        return Ok(());
    };
    if !applied_from(&obj, work) {
        return Ok(());
    }
    if leaving == Leaving::Release {
        let unmark = json!({"metadata": {
            "labels": {labels::MANAGED: null},
            "annotations": {
                annotations::WORK_NAME: null,
                annotations::WORK_NAMESPACE: null,
                annotations::MANIFEST_DIGEST: null,
            },
        }});
        return match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&unmark))
            .await
        {
            Ok(_) => {
                info!(%cluster, %kind, %namespace, %name, "released in member (preserved)");
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(Error::member(cluster)(e)),
        };
    }
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {
            info!(%cluster, %kind, %namespace, %name, "deleted from member");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::member(cluster)(e)),
    }
}
