//! The execution controller (Push mode): applies each Work's manifests to
//! its member with server-side apply, so fields the member owns (a
//! Service's clusterIP, replicas under an HPA) stay the member's, and
//! drift in the fields Flotilla applies is reverted. Objects Flotilla did
//! not create are left alone unless the policy says Overwrite. Member
//! objects are watched, so their status flows back into the Work and a
//! deleted or edited copy is re-applied at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::api::{
    EXECUTION_PREFIX, ManifestStatus, ResourceIdentifier, Work, WorkStatus, annotations,
    finalizers, labels,
};
use crate::conditions;
use crate::context::{Ctx, retry};
use crate::error::{Error, is_not_found};
use crate::finalizer;
use crate::interpreter;
use crate::kinds::{gvk_of, scoped_api};
use crate::members::Member;

/// A member object: cluster, kind, namespace, name.
type MemberObject = (String, String, String, String);

/// The field manager of every apply to a member.
pub const FIELD_MANAGER: &str = "flotilla";

/// How often every Work is re-applied even without events: a safety net
/// for drift a member's watch could not report.
const RESYNC: Duration = Duration::from_secs(300);

struct Execution {
    shared: Ctx,
    /// Member watches of managed objects, by cluster and kind.
    watches: Mutex<HashMap<(String, GroupVersionKind), JoinHandle<()>>>,
    /// Namespaces known to exist in each member.
    namespaces: Mutex<HashSet<(String, String)>>,
    /// The resourceVersion each apply left on a member object, so the
    /// watch does not bring back the echo of Flotilla's own write.
    applied: Mutex<HashMap<MemberObject, String>>,
    member_events: mpsc::Sender<ObjectRef<Work>>,
}

pub async fn run(
    ctx: Ctx,
    works: Store<Work>,
    changes: impl futures::Stream<Item = Result<Work, kube::runtime::watcher::Error>> + Send + 'static,
) {
    let (tx, rx) = mpsc::channel(1024);
    let exec = Arc::new(Execution {
        shared: ctx.clone(),
        watches: Mutex::default(),
        namespaces: Mutex::default(),
        applied: Mutex::default(),
        member_events: tx,
    });
    let concurrency = ctx.options.work_concurrency;
    Controller::for_stream(changes, works)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .reconcile_on(tokio_stream::wrappers::ReceiverStream::new(rx))
        .run(
            reconcile,
            |w, e, x: Arc<Execution>| retry(w, e, x.shared.clone()),
            exec,
        )
        .for_each(|_| async {})
        .await;
}

fn cluster_of(work: &Work) -> Option<String> {
    work.namespace()?
        .strip_prefix(EXECUTION_PREFIX)
        .map(str::to_string)
}

async fn reconcile(work: Arc<Work>, exec: Arc<Execution>) -> Result<Action, Error> {
    let Some(cluster_name) = cluster_of(&work) else {
        return Ok(Action::await_change());
    };
    let ctx = &exec.shared;
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &work.namespace().unwrap_or_default());
    let cluster = ctx.cluster(&cluster_name);
    if work.metadata.deletion_timestamp.is_some() {
        if !work.finalizers().iter().any(|f| f == finalizers::EXECUTION) {
            return Ok(Action::await_change());
        }
        let preserve = work.spec.preserve_resources_on_deletion == Some(true);
        match &cluster {
            Some(c) if c.is_ready() && !preserve => {
                let member = ctx.members.get(c).await?;
                for m in &work.spec.workload.parsed() {
                    delete_from_member(&member, &cluster_name, &work, m).await?;
                    // Nothing of this object is ours to recognise any more.
                    let (_, kind, namespace, name) = identify(m);
                    exec.applied
                        .lock()
                        .remove(&(cluster_name.clone(), kind, namespace, name));
                }
            }
            Some(_) if !preserve => {
                warn!(cluster = %cluster_name, work = %work.name_any(), "member not ready; its copy is left in place");
            }
            _ => {}
        }
        finalizer::remove(&api, &*work, finalizers::EXECUTION).await?;
        return Ok(Action::await_change());
    }
    if finalizer::add(&api, &*work, finalizers::EXECUTION).await? {
        // The update comes back as an event and applies then.
        return Ok(Action::await_change());
    }
    let Some(cluster) = cluster else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    let mut status = work.status.clone().unwrap_or_default();
    if work.spec.suspend_dispatching == Some(true) {
        conditions::set(
            &mut status.conditions,
            "Dispatching",
            false,
            "SuspendDispatching",
            "Dispatching is suspended by the policy",
        );
        write_status(&api, &work, status).await?;
        return Ok(Action::await_change());
    }
    conditions::set(
        &mut status.conditions,
        "Dispatching",
        true,
        "Dispatching",
        "Work is being dispatched to the member",
    );
    let started = Instant::now();
    let member = match ctx.members.get(&cluster).await {
        Ok(m) => m,
        Err(e) => {
            conditions::set(
                &mut status.conditions,
                "Applied",
                false,
                "AppliedFailed",
                &e.to_string(),
            );
            write_status(&api, &work, status).await?;
            return Err(e.into());
        }
    };
    let conflict_overwrite = work
        .annotations()
        .get(annotations::CONFLICT_RESOLUTION)
        .map(String::as_str)
        == Some("overwrite");
    let mut manifest_statuses = Vec::new();
    let mut failures = Vec::new();
    for (i, m) in work.spec.workload.parsed().iter().enumerate() {
        match apply(&exec, &member, &cluster_name, &work, m, conflict_overwrite).await {
            Ok((identifier, live)) => {
                let kind = identifier.kind.clone();
                manifest_statuses.push(ManifestStatus {
                    identifier: ResourceIdentifier {
                        ordinal: i as i32,
                        ..identifier
                    },
                    status: interpreter::reflect_status(&live),
                    health: Some(interpreter::health(&kind, &live).into()),
                });
            }
            Err(message) => failures.push(message),
        }
    }
    let ok = failures.is_empty();
    ctx.metrics.observe_work_sync(ok, started.elapsed());
    if ok {
        conditions::set(
            &mut status.conditions,
            "Applied",
            true,
            "AppliedSuccessful",
            "Manifest has been successfully applied",
        );
    } else {
        conditions::set(
            &mut status.conditions,
            "Applied",
            false,
            "AppliedFailed",
            &failures.join("; "),
        );
    }
    status.manifest_statuses = manifest_statuses;
    write_status(&api, &work, status).await?;
    Ok(if ok {
        Action::requeue(RESYNC)
    } else {
        Action::requeue(Duration::from_secs(2))
    })
}

async fn write_status(api: &Api<Work>, work: &Work, status: WorkStatus) -> Result<(), Error> {
    if work.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let patch = json!({"status": status});
    match api
        .patch_status(
            &work.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn identify(m: &Value) -> (String, String, String, String) {
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

fn ours(obj: &DynamicObject, work: &Work) -> bool {
    let a = obj.annotations();
    a.get(annotations::WORK_NAME).map(String::as_str) == work.metadata.name.as_deref()
        && a.get(annotations::WORK_NAMESPACE) == work.metadata.namespace.as_ref()
}

/// Applies one manifest; the live object, or why it could not be applied.
async fn apply(
    exec: &Arc<Execution>,
    member: &Member,
    cluster: &str,
    work: &Work,
    manifest: &Value,
    overwrite: bool,
) -> Result<(ResourceIdentifier, Value), String> {
    let (api_version, kind, namespace, name) = identify(manifest);
    let (ar, namespaced) = member
        .kinds
        .resolve(&api_version, &kind)
        .await
        .map_err(|e| format!("the member does not serve {api_version} {kind}: {e}"))?;
    let identifier = ResourceIdentifier {
        ordinal: 0,
        group: ar.group.clone(),
        version: ar.version.clone(),
        kind: kind.clone(),
        resource: ar.plural.clone(),
        namespace: if namespaced {
            namespace.clone()
        } else {
            String::new()
        },
        name: name.clone(),
    };
    if namespaced {
        ensure_namespace(exec, member, cluster, &namespace).await?;
    }
    let api: Api<DynamicObject> = scoped_api(
        member.client.clone(),
        namespaced.then_some(namespace.as_str()),
        &ar,
    );
    let existing = api.get_opt(&name).await.map_err(|e| e.to_string())?;
    if let Some(obj) = &existing
        && obj.labels().get(labels::MANAGED).map(String::as_str) != Some("true")
        && !overwrite
    {
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
    let mut applied = manifest.clone();
    if let Some(meta) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        let l = meta.entry("labels").or_insert_with(|| json!({}));
        l[labels::MANAGED] = json!("true");
        let a = meta.entry("annotations").or_insert_with(|| json!({}));
        a[annotations::WORK_NAME] = json!(work.name_any());
        a[annotations::WORK_NAMESPACE] = json!(work.namespace());
    }
    // Only a member whose replicas differ from ours can have an autoscaler
    // that moved them: look for one then, not on every apply.
    let replicas_differ = existing
        .as_ref()
        .is_some_and(|e| e.data.pointer("/spec/replicas") != applied.pointer("/spec/replicas"));
    if matches!(kind.as_str(), "Deployment" | "StatefulSet" | "ReplicaSet")
        && replicas_differ
        && scaled_by_hpa(member, &namespace, &kind, &name).await
        && let Some(spec) = applied.get_mut("spec").and_then(Value::as_object_mut)
    {
        // The member's autoscaler owns replicas.
        spec.remove("replicas");
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let live = api
        .patch(&name, &params, &Patch::Apply(&applied))
        .await
        .map_err(|e| e.to_string())?;
    if existing.is_none() {
        info!(%cluster, %kind, %namespace, %name, "created in member");
    }
    ensure_watch(exec, member, cluster, &ar);
    if let Some(rv) = live.metadata.resource_version.clone() {
        let key = (
            cluster.to_string(),
            kind.clone(),
            namespace.clone(),
            name.clone(),
        );
        exec.applied.lock().insert(key, rv);
    }
    let live = serde_json::to_value(&live).map_err(|e| e.to_string())?;
    Ok((identifier, live))
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
    let api: Api<Namespace> = Api::all(member.client.clone());
    if api
        .get_opt(namespace)
        .await
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))
            .map_err(|e| e.to_string())?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => info!(%cluster, %namespace, "namespace created in member"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("cannot create namespace {namespace}: {e}")),
        }
    }
    exec.namespaces.lock().insert(key);
    Ok(())
}

async fn delete_from_member(
    member: &Member,
    cluster: &str,
    work: &Work,
    manifest: &Value,
) -> Result<(), Error> {
    let (api_version, kind, namespace, name) = identify(manifest);
    let (ar, namespaced) = match member.kinds.resolve(&api_version, &kind).await {
        Ok(found) => found,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(Error::member(cluster)(e)),
    };
    let api: Api<DynamicObject> = scoped_api(
        member.client.clone(),
        namespaced.then_some(namespace.as_str()),
        &ar,
    );
    let Some(obj) = api.get_opt(&name).await.map_err(Error::member(cluster))? else {
        return Ok(());
    };
    if !ours(&obj, work) {
        return Ok(());
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

/// Watches the managed objects of one kind in one member; each event
/// brings its Work back to the controller.
fn ensure_watch(exec: &Arc<Execution>, member: &Member, cluster: &str, ar: &ApiResource) {
    let key = (cluster.to_string(), gvk_of(&ar.api_version, &ar.kind));
    let mut watches = exec.watches.lock();
    if watches.get(&key).is_some_and(|t| !t.is_finished()) {
        return;
    }
    let api = Api::<DynamicObject>::all_with(member.client.clone(), ar);
    let tx = exec.member_events.clone();
    let exec2 = exec.clone();
    let cluster = cluster.to_string();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().labels(&format!("{}=true", labels::MANAGED));
        let mut events = watcher(api, config)
            .default_backoff()
            .touched_objects()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(obj) => {
                    let key = (
                        cluster.clone(),
                        obj.types
                            .as_ref()
                            .map(|t| t.kind.clone())
                            .unwrap_or_default(),
                        obj.namespace().unwrap_or_default(),
                        obj.name_any(),
                    );
                    let echo =
                        exec2.applied.lock().get(&key) == obj.metadata.resource_version.as_ref();
                    if echo && obj.metadata.deletion_timestamp.is_none() {
                        continue;
                    }
                    let a = obj.annotations();
                    if let (Some(name), Some(ns)) = (
                        a.get(annotations::WORK_NAME),
                        a.get(annotations::WORK_NAMESPACE),
                    ) {
                        let _ = tx.send(ObjectRef::new(name).within(ns)).await;
                    }
                }
                Err(error) => {
                    if exec2.shared.cluster(&cluster).is_none() {
                        break;
                    }
                    debug!(%error, %cluster, "member watch interrupted");
                }
            }
        }
    });
    watches.insert(key, task);
}
