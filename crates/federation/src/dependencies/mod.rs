//! Karmada's dependencies distributor (`propagateDeps: true` on a policy):
//! what a propagated workload needs in its namespace (the ConfigMaps,
//! Secrets, PersistentVolumeClaims and ServiceAccount its pod template
//! names, [`interpret`]) goes to the clusters the workload goes to. Each
//! dependency gets an "attached" ResourceBinding (`<name>-<kind>`, owned
//! by the dependency) whose `spec.requiredBy` lists every workload binding
//! that needs it with that binding's clusters, and whose `spec.clusters`
//! is their union; the binding controller writes its Works as for any
//! binding. A dependency claimed by a policy of its own keeps that
//! policy's placement, and `requiredBy` is recorded beside it. A workload
//! that stops needing it, or goes, leaves its `requiredBy`; an attached
//! binding required by none is deleted (its copies go with its Works).
//!
//! Reads come from the caches (bindings, the detector's templates); the
//! parents and attached bindings are looked at again every few seconds,
//! which is how a dependency's own changes and a parent's deletion are
//! noticed.

pub mod interpret;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::api::{Binding, Scope, TargetCluster, binding_resource, finalizers, labels};
use crate::context::Ctx;
use crate::error::{Error, is_not_found};
use crate::fanout::{Change, Subscribers};
use crate::names;
use crate::packed::{self, Key, PackedStore};
use crate::queue::{self, WorkQueue};
use interpret::Dependency;

/// How often parents and attached bindings are looked at again.
const RESYNC: Duration = Duration::from_secs(5);
const WORKERS: usize = 4;

/// One entry of `spec.requiredBy`: a binding that needs this one, and its
/// clusters (Karmada's `BindingSnapshot`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    #[serde(default)]
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub clusters: Vec<TargetCluster>,
}

/// The bindings that require `b`, with their clusters.
pub fn required_by(b: &Binding) -> Vec<Snapshot> {
    b.spec
        .extra
        .get("requiredBy")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

fn is_parent(b: &Binding) -> bool {
    b.spec.propagate_deps == Some(true) && b.spec.placement.is_some()
}

/// The keys of changed bindings that concern dependencies: parents, and
/// bindings others require.
pub fn changes(
    bindings: &Subscribers<Change<Binding>>,
) -> impl Stream<Item = Key> + Send + 'static {
    bindings.subscribe(|c: &Change<Binding>| {
        (is_parent(&c.object) || c.object.spec.extra.contains_key("requiredBy"))
            .then(|| c.key.clone())
    })
}

struct State {
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    /// Each parent's dependencies as last distributed, by binding key.
    parents: Mutex<HashMap<String, Vec<Dependency>>>,
    /// The keys of bindings others require.
    attached: Mutex<HashSet<String>>,
}

pub async fn run(
    ctx: Ctx,
    bindings: PackedStore<Binding>,
    changes: impl Stream<Item = Key> + Send + 'static,
) {
    let queue = WorkQueue::named(ctx.metrics.queue("dependencies-distributor"));
    let state = Arc::new(State {
        ctx,
        bindings: bindings.clone(),
        parents: Mutex::default(),
        attached: Mutex::default(),
    });
    let resync = {
        let (queue, state) = (queue.clone(), state.clone());
        async move {
            loop {
                tokio::time::sleep(RESYNC).await;
                let keys: Vec<String> = state
                    .parents
                    .lock()
                    .keys()
                    .chain(state.attached.lock().iter())
                    .cloned()
                    .collect();
                for key in keys {
                    if state.bindings.get_key(&key).is_some() {
                        queue.add(Key::from(key));
                    } else {
                        // Gone: what it required is released by the
                        // attached bindings' own looks, in the queue.
                        state.parents.lock().remove(&key);
                        state.attached.lock().remove(&key);
                    }
                }
            }
        }
    };
    tokio::join!(
        resync,
        queue::feed(queue.clone(), changes),
        queue::reconcile_packed(queue, bindings, WORKERS, move |b| {
            let state = state.clone();
            async move { state.reconcile(&b).await.map(|()| None) }
        }),
    );
}

impl State {
    async fn reconcile(&self, b: &Binding) -> Result<(), Error> {
        let Some(ns) = b.namespace() else {
            return Ok(());
        };
        let name = b.name_any();
        let key = packed::key(Some(&ns), &name);
        if b.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        // As a parent: its dependencies follow its clusters.
        // A parent not yet scheduled needs nothing anywhere yet.
        let now = if is_parent(b) && !b.spec.clusters.is_empty() {
            self.dependencies_of(b)
        } else {
            Vec::new()
        };
        let before = self.parents.lock().get(&key).cloned().unwrap_or_default();
        let snapshot = Snapshot {
            namespace: ns.clone(),
            name: name.clone(),
            clusters: b
                .spec
                .clusters
                .iter()
                .map(|c| TargetCluster {
                    name: c.name.clone(),
                    replicas: None,
                })
                .collect(),
        };
        for dep in &now {
            self.attach(&ns, dep, &snapshot, b).await?;
        }
        for dep in before.iter().filter(|d| !now.contains(d)) {
            self.release(&ns, &name, dep).await?;
        }
        if is_parent(b) {
            self.parents.lock().insert(key.clone(), now);
        } else {
            self.parents.lock().remove(&key);
        }
        // As an attached one: requirements whose parent is gone go.
        let required = required_by(b);
        if required.is_empty() {
            self.attached.lock().remove(&key);
            return Ok(());
        }
        self.attached.lock().insert(key);
        // Kept: requirers that exist, are scheduled and still need this
        // dependency (so a release lost to a conflict or a restart is
        // made good here).
        let me = interpret::Dependency {
            kind: interpret::kind_of(&b.spec.resource.kind),
            name: b.spec.resource.name.clone(),
        };
        let kept: Vec<Snapshot> = required
            .iter()
            .filter(|s| {
                let parent = packed::key(Some(&s.namespace), &s.name);
                self.bindings.get_key(&parent).is_some_and(|p| {
                    is_parent(&p)
                        && !p.spec.clusters.is_empty()
                        && self.dependencies_of(&p).contains(&me)
                })
            })
            .cloned()
            .collect();
        if kept.len() != required.len() {
            self.write_required(b, kept).await?;
        }
        Ok(())
    }

    /// What the parent's template needs that exists in its namespace.
    fn dependencies_of(&self, b: &Binding) -> Vec<Dependency> {
        let r = &b.spec.resource;
        let Some(template) = self.template(&r.api_version, &r.kind, &r.namespace, &r.name) else {
            return Vec::new();
        };
        interpret::dependencies(&r.api_version, &r.kind, &template)
            .into_iter()
            .filter(|d| {
                self.ctx
                    .templates
                    .get(d.api_version(), d.kind, &r.namespace, &d.name)
                    .is_some()
            })
            .collect()
    }

    fn template(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let t = self.ctx.templates.get(api_version, kind, ns, name)?;
        serde_json::to_value(&*t).ok()
    }

    fn attached_api(&self, ns: &str) -> Api<Binding> {
        Api::namespaced_with(
            self.ctx.hub.clone(),
            ns,
            &binding_resource(Scope::Namespaced),
        )
    }

    /// Records that `parent` needs `dep` on its clusters: the dependency's
    /// binding made, or its `requiredBy` entry for the parent brought up to
    /// date.
    async fn attach(
        &self,
        ns: &str,
        dep: &Dependency,
        parent: &Snapshot,
        parent_binding: &Binding,
    ) -> Result<(), Error> {
        let name = names::binding_name(dep.kind, &dep.name);
        let Some(template) = self
            .ctx
            .templates
            .get(dep.api_version(), dep.kind, ns, &dep.name)
        else {
            return Ok(());
        };
        let uid = template.metadata.uid.clone().unwrap_or_default();
        let version = template
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        // As Karmada: the requirer's conflict policy and deletion
        // preference hold for what it brings along.
        let (conflict, preserve) = (
            parent_binding.spec.conflict_resolution.clone(),
            parent_binding.spec.preserve_resources_on_deletion,
        );
        let api = self.attached_api(ns);
        match self.bindings.get_key(&packed::key(Some(ns), &name)) {
            None => {
                let binding = json!({
                    "apiVersion": "work.karmada.io/v1alpha2",
                    "kind": "ResourceBinding",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        // The label that ties Works to their binding.
                        "labels": {labels::RB_ID: uuid::Uuid::new_v4().to_string()},
                        "ownerReferences": [{"apiVersion": "v1", "kind": dep.kind, "name": dep.name,
                            "uid": uid, "controller": true, "blockOwnerDeletion": true}],
                        "finalizers": [finalizers::BINDING],
                    },
                    "spec": {
                        "resource": {"apiVersion": "v1", "kind": dep.kind, "namespace": ns,
                            "name": dep.name, "uid": uid, "resourceVersion": version},
                        "requiredBy": [parent],
                        "clusters": parent.clusters,
                        "conflictResolution": conflict,
                        "preserveResourcesOnDeletion": preserve,
                    },
                });
                let binding: Binding = serde_json::from_value(binding)?;
                match api.create(&PostParams::default(), &binding).await {
                    Ok(_) => {
                        info!(binding = %name, namespace = %ns, required_by = %parent.name, "dependency attached");
                        Ok(())
                    }
                    // Made meanwhile: the next look brings it up to date.
                    Err(e) if crate::error::is_conflict(&e) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            Some(existing) => {
                let mut required = required_by(&existing);
                match required
                    .iter_mut()
                    .find(|s| s.namespace == parent.namespace && s.name == parent.name)
                {
                    Some(s) => *s = parent.clone(),
                    None => required.push(parent.clone()),
                }
                required.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
                let stale = existing.spec.placement.is_none()
                    && ((existing.spec.resource.uid == uid
                        && existing.spec.resource.resource_version != version)
                        || existing.spec.conflict_resolution != conflict
                        || existing.spec.preserve_resources_on_deletion != preserve);
                if required == required_by(&existing) && !stale {
                    return Ok(());
                }
                let mut patch = json!({
                    "metadata": {"resourceVersion": existing.resource_version()},
                    "spec": {"requiredBy": required},
                });
                if existing.spec.placement.is_none() {
                    patch["spec"]["clusters"] = json!(union(&required));
                    // The dependency changed: its Works are written again.
                    patch["spec"]["resource"] = json!({"resourceVersion": version});
                    patch["spec"]["conflictResolution"] = json!(conflict);
                    patch["spec"]["preserveResourcesOnDeletion"] = json!(preserve);
                }
                self.patch(&api, &name, &patch).await
            }
        }
    }

    /// `parent` no longer needs `dep`.
    async fn release(&self, ns: &str, parent: &str, dep: &Dependency) -> Result<(), Error> {
        let name = names::binding_name(dep.kind, &dep.name);
        let Some(existing) = self.bindings.get_key(&packed::key(Some(ns), &name)) else {
            return Ok(());
        };
        let kept: Vec<Snapshot> = required_by(&existing)
            .into_iter()
            .filter(|s| !(s.namespace == ns && s.name == parent))
            .collect();
        self.write_required(&existing, kept).await
    }

    /// Sets a binding's `requiredBy` (and, for one no policy placed, its
    /// clusters); deletes one no policy placed and none requires.
    async fn write_required(&self, b: &Binding, required: Vec<Snapshot>) -> Result<(), Error> {
        let ns = b.namespace().unwrap_or_default();
        let name = b.name_any();
        let api = self.attached_api(&ns);
        if required.is_empty() && b.spec.placement.is_none() {
            // Only the version looked at: a requirer added meanwhile keeps it.
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: b.resource_version(),
                    uid: b.uid(),
                }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {
                    info!(binding = %name, namespace = %ns, "dependency no longer required");
                    return Ok(());
                }
                Err(e) if is_not_found(&e) || crate::error::is_conflict(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let mut patch = json!({
            "metadata": {"resourceVersion": b.resource_version()},
            "spec": {"requiredBy": if required.is_empty() { Value::Null } else { json!(required) }},
        });
        if b.spec.placement.is_none() {
            patch["spec"]["clusters"] = json!(union(&required));
        }
        self.patch(&api, &name, &patch).await
    }

    async fn patch(&self, api: &Api<Binding>, name: &str, patch: &Value) -> Result<(), Error> {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            // Someone wrote first, or it went: the next look redoes it.
            Err(e) if crate::error::is_conflict(&e) || is_not_found(&e) => {
                debug!(binding = %name, "dependency write raced; retried at the next look");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Every cluster any requirer is on, once, by name.
fn union(required: &[Snapshot]) -> Vec<TargetCluster> {
    let mut names: Vec<&str> = required
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|n| TargetCluster {
            name: n.to_string(),
            replicas: None,
        })
        .collect()
}
