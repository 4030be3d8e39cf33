//! Persistent volumes, as kube-controller-manager's PersistentVolume
//! controller and kind's local-path provisioner divide the work:
//!
//! - the cluster has kind's default StorageClass, `standard`
//!   (`rancher.io/local-path`, WaitForFirstConsumer, reclaim Delete);
//! - a claim binds to the smallest Available volume that fits it (class,
//!   access modes, size, volume mode, selector) or to the one it names;
//! - a claim of a class this member provisions gets a volume of its own,
//!   `pvc-<uid>`, a directory under the member's data dir (at once, or
//!   under WaitForFirstConsumer once the scheduler has chosen the node of
//!   its first pod, to which the volume is then tied by node affinity);
//! - a volume whose claim is gone is Released, and a provisioned one with
//!   reclaim policy Delete is deleted with its directory.
//!
//! Volumes are host directories (`hostPath`): the netns runtime mounts
//! them into the pods that name their claims; simulated pods write nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::cluster::{Cluster, Informers, Result, TaskBox, boxed, is_status, run_controller};
use crate::controllers::status;
use crate::events::EventRecorder;
use crate::informer::Change;
use crate::pod::Pod;
use crate::quantity;

/// The provisioner this member runs, named as kind's.
pub const PROVISIONER: &str = "rancher.io/local-path";
/// The default StorageClass, named as kind's.
pub const DEFAULT_CLASS: &str = "standard";

const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node the scheduler chose for a WaitForFirstConsumer claim's pod.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Creates the default StorageClass when the cluster has no StorageClass
/// at all (a new member; one an admin removed alongside others stays
/// removed only if another class is left).
pub async fn ensure_default_class(cluster: &Cluster) {
    let classes: Api<StorageClass> = Api::all(cluster.clients.controller_manager.clone());
    let class: StorageClass = match serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": DEFAULT_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    })) {
        Ok(c) => c,
        Err(error) => return warn!(%error, "cannot build the default StorageClass"),
    };
    for _ in 0..30 {
        let existing = classes
            .list(&kube::api::ListParams::default().limit(1))
            .await;
        let result = match existing {
            Ok(l) if !l.items.is_empty() => return,
            Ok(_) => classes
                .create(&PostParams::default(), &class)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return info!(class = DEFAULT_CLASS, "default StorageClass created"),
            Err(e) if is_status(&e, 409) => return,
            Err(error) => {
                debug!(%error, "cannot create the default StorageClass yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

struct Volumes {
    cluster: Arc<Cluster>,
    /// The binder's Events (persistentvolume-controller) and the
    /// provisioner's.
    binder: EventRecorder,
    provisioner: EventRecorder,
}

pub fn start(cluster: Arc<Cluster>, inf: &mut Informers) -> Vec<TaskBox> {
    let volumes = Arc::new(Volumes {
        binder: cluster.recorder("persistentvolume-controller"),
        provisioner: cluster.recorder(PROVISIONER),
        cluster: cluster.clone(),
    });
    let own_claims = inf.claims.own_triggers(|_| true);
    // A volume's change wakes the claim it is bound to.
    let from_volumes = inf.volumes.triggers(|c| {
        claim_of(c.object())
            .map(|(ns, name, _)| ObjectRef::new(&name).within(&ns))
            .into_iter()
            .collect()
    });
    // A pod wakes the claims it names (their first consumer).
    let from_pods = inf.pods.triggers(|c: Change<'_, Pod>| {
        let pod = c.object();
        let ns = pod.namespace().unwrap_or_default();
        pod.spec
            .iter()
            .flat_map(|s| s.claims())
            .map(|claim| ObjectRef::new(claim).within(&ns))
            .collect()
    });
    let own_volumes = inf.volumes.own_triggers(|_| true);
    // A claim's change (its deletion above all) wakes its volume.
    let from_claims = inf.claims.triggers(|c| {
        c.object()
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .map(|v| ObjectRef::new(&v))
            .into_iter()
            .collect()
    });
    let (v1, v2) = (volumes.clone(), volumes);
    vec![
        // One at a time: two claims must not pick the same volume.
        run_controller(
            "persistentvolume-binder",
            cluster.claims.clone(),
            vec![boxed(own_claims), boxed(from_volumes), boxed(from_pods)],
            cluster.clone(),
            1,
            move |claim, _| {
                let v = v1.clone();
                async move { v.sync_claim(claim).await }
            },
        ),
        run_controller(
            "persistentvolume-reclaimer",
            cluster.volumes.clone(),
            vec![boxed(own_volumes), boxed(from_claims)],
            cluster,
            1,
            move |volume, _| {
                let v = v2.clone();
                async move { v.sync_volume(volume).await }
            },
        ),
    ]
}

/// The claim a volume is bound to: (namespace, name, uid).
fn claim_of(pv: &PersistentVolume) -> Option<(String, String, String)> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((
        r.namespace.clone()?,
        r.name.clone()?,
        r.uid.clone().unwrap_or_default(),
    ))
}

fn phase_of_volume(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn phase_of_claim(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Bytes of a `storage` quantity in a resource map.
fn storage(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    map.and_then(|m| m.get("storage"))
        .and_then(|q| quantity::units(&q.0))
        .unwrap_or(0)
}

/// Whether `pv` can hold `pvc`: class, access modes, size, volume mode
/// and the claim's selector, as the binder matches.
fn fits(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let (Some(v), Some(c)) = (pv.spec.as_ref(), pvc.spec.as_ref()) else {
        return false;
    };
    let class = |s: Option<&String>| s.map(String::as_str).unwrap_or("").to_string();
    let modes_ok = c
        .access_modes
        .iter()
        .flatten()
        .all(|m| v.access_modes.iter().flatten().any(|have| have == m));
    let mode = |m: Option<&String>| m.map(String::as_str).unwrap_or("Filesystem").to_string();
    let wanted = storage(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let selector_ok = c
        .selector
        .as_ref()
        .is_none_or(|s| crate::placement::label_selector_matches(s, pv.labels()));
    class(v.storage_class_name.as_ref()) == class(c.storage_class_name.as_ref())
        && modes_ok
        && storage(v.capacity.as_ref()) >= wanted
        && mode(v.volume_mode.as_ref()) == mode(c.volume_mode.as_ref())
        && selector_ok
}

impl Volumes {
    async fn sync_claim(&self, pvc: Arc<PersistentVolumeClaim>) -> Result<Action> {
        if pvc.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let ns = pvc.namespace().unwrap_or_default();
        let uid = pvc.uid().unwrap_or_default();
        let volumes = self.cluster.volumes.state();
        let named = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
        if let Some(name) = named.filter(|n| !n.is_empty()) {
            let Some(pv) = volumes.iter().find(|v| v.name_any() == name) else {
                if phase_of_claim(&pvc) == "Bound" {
                    self.claim_status(&pvc, json!({"phase": "Lost"})).await?;
                }
                return Ok(Action::await_change());
            };
            return match claim_of(pv) {
                Some((_, _, bound)) if bound == uid => self.finish_binding(pv, &pvc).await,
                None if fits(pv, &pvc) => self.bind(pv, &pvc).await,
                // Bound elsewhere, or unfit: the claim waits.
                _ => Ok(Action::await_change()),
            };
        }
        // A volume already promised to this claim: its provisioned one,
        // or one an admin bound to it by name.
        let name = pvc.name_any();
        if let Some(pv) = volumes.iter().find(|v| {
            claim_of(v).is_some_and(|(n, c, u)| u == uid || (u.is_empty() && n == ns && c == name))
        }) {
            return self.bind(pv, &pvc).await;
        }
        let best = volumes
            .iter()
            .filter(|v| claim_of(v).is_none() && phase_of_volume(v) == "Available")
            .filter(|v| fits(v, &pvc))
            .min_by_key(|v| storage(v.spec.as_ref().and_then(|s| s.capacity.as_ref())));
        if let Some(pv) = best {
            return self.bind(pv, &pvc).await;
        }
        self.provision(&pvc).await
    }

    /// A volume of its own for a claim whose class this member
    /// provisions; otherwise the claim waits for one to appear.
    async fn provision(&self, pvc: &PersistentVolumeClaim) -> Result<Action> {
        let reference = pvc.object_ref(&());
        let class_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        if class_name.is_empty() {
            self.binder.emit(
                &reference,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set".into(),
            );
            return Ok(Action::await_change());
        }
        let classes: Api<StorageClass> = Api::all(self.cluster.clients.controller_manager.clone());
        let Some(class) = classes.get_opt(&class_name).await? else {
            self.binder.emit(
                &reference,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
            );
            return Ok(Action::requeue(Duration::from_secs(10)));
        };
        if class.provisioner != PROVISIONER {
            self.binder.emit(
                &reference,
                "ExternalProvisioning",
                format!(
                    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                    class.provisioner
                ),
            );
            return Ok(Action::await_change());
        }
        let ns = pvc.namespace().unwrap_or_default();
        let name = pvc.name_any();
        // Under WaitForFirstConsumer the volume is made on the node the
        // scheduler chose for the claim's first pod (or the node a pod
        // naming it was put on by hand), and stays tied to it.
        let node = if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
            let chosen = pvc.annotations().get(SELECTED_NODE).cloned().or_else(|| {
                self.cluster
                    .pods_by_namespace
                    .get(&ns)
                    .iter()
                    .filter(|p| p.spec.iter().flat_map(|s| s.claims()).any(|c| c == name))
                    .find_map(|p| p.spec.as_ref()?.node_name.clone())
                    .filter(|n| !n.is_empty())
            });
            let Some(node) = chosen else {
                self.binder.emit(
                    &reference,
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding".into(),
                );
                return Ok(Action::await_change());
            };
            Some(node)
        } else {
            None
        };
        let uid = pvc.uid().unwrap_or_default();
        let pv_name = format!("pvc-{uid}");
        let spec = pvc.spec.clone().unwrap_or_default();
        let requested = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage").cloned());
        let path = volume_dir(&self.cluster.config.volumes_dir, &pv_name, &ns, &name);
        let mut pv = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": requested.map(|q| q.0).unwrap_or_else(|| "1Gi".into())},
                "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                "storageClassName": class_name,
                "hostPath": {"path": path.to_string_lossy(), "type": "DirectoryOrCreate"},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": ns, "name": name, "uid": uid},
            },
        });
        if let Some(node) = &node {
            // As local-path-provisioner: only that node reaches it.
            pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}});
        }
        let pv: PersistentVolume = serde_json::from_value(pv).map_err(kube::Error::SerdeError)?;
        let api: Api<PersistentVolume> = Api::all(self.cluster.clients.controller_manager.clone());
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                self.provisioner.emit(
                    &reference,
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {pv_name}"),
                );
                // The volume's own event brings the claim back to bind.
                Ok(Action::requeue(Duration::from_secs(1)))
            }
            Err(e) if is_status(&e, 409) => Ok(Action::requeue(Duration::from_secs(1))),
            Err(e) => Err(e.into()),
        }
    }

    /// Binds `pv` to `pvc`: the volume's claimRef and phase, then the
    /// claim's volumeName and phase, as the binder writes them.
    async fn bind(&self, pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> Result<Action> {
        let client = self.cluster.clients.controller_manager.clone();
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        if claim_of(pv).is_none_or(|(_, _, uid)| uid.is_empty()) {
            let patch = json!({
                "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": pvc.namespace(), "name": pvc.name_any(), "uid": pvc.uid(),
                    "resourceVersion": pvc.resource_version()}},
            });
            if !status::patch_object(&volumes, &pv.name_any(), &patch).await? {
                return Ok(Action::await_change());
            }
        }
        self.finish_binding(pv, pvc).await
    }

    /// The rest of a binding whose volume names the claim already.
    async fn finish_binding(
        &self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Action> {
        let client = self.cluster.clients.controller_manager.clone();
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        if !set_phase(&volumes, pv, "Bound").await? {
            return Ok(Action::await_change());
        }
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(client, &pvc.namespace().unwrap_or_default());
        let named = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        if named != Some(pv.name_any().as_str()) {
            let mut annotations = json!({BIND_COMPLETED: "yes"});
            if named.is_none_or(str::is_empty) {
                annotations[BOUND_BY_CONTROLLER] = json!("yes");
            }
            let patch = json!({"metadata": {"annotations": annotations},
                               "spec": {"volumeName": pv.name_any()}});
            if !status::patch_object(&claims, &pvc.name_any(), &patch).await? {
                return Ok(Action::await_change());
            }
        }
        let spec = pv.spec.clone().unwrap_or_default();
        if phase_of_claim(pvc) != "Bound" {
            self.claim_status(
                pvc,
                json!({"phase": "Bound", "accessModes": spec.access_modes,
                       "capacity": spec.capacity}),
            )
            .await?;
            debug!(claim = %pvc.name_any(), volume = %pv.name_any(), "bound");
        }
        Ok(Action::await_change())
    }

    async fn claim_status(&self, pvc: &PersistentVolumeClaim, status: Value) -> Result<()> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(
            self.cluster.clients.controller_manager.clone(),
            &pvc.namespace().unwrap_or_default(),
        );
        status::write(&claims, &pvc.name_any(), &json!({"status": status})).await?;
        Ok(())
    }

    /// A volume: Available when new, Released when its claim is gone,
    /// deleted then if it was provisioned here with reclaim policy Delete.
    async fn sync_volume(&self, pv: Arc<PersistentVolume>) -> Result<Action> {
        if pv.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let api: Api<PersistentVolume> = Api::all(self.cluster.clients.controller_manager.clone());
        let Some((ns, name, uid)) = claim_of(&pv) else {
            set_phase(&api, &pv, "Available").await?;
            return Ok(Action::await_change());
        };
        let claim = self.cluster.claims.get(&ObjectRef::new(&name).within(&ns));
        if claim.is_some_and(|c| uid.is_empty() || c.uid().as_deref() == Some(&uid)) {
            return Ok(Action::await_change());
        }
        // Bound by name to a claim not made yet: it waits for it.
        if uid.is_empty() {
            set_phase(&api, &pv, "Available").await?;
            return Ok(Action::await_change());
        }
        // The claim is gone: the cache may lag behind a new claim's
        // creation, so ask the API before letting the volume go.
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.cluster.clients.controller_manager.clone(), &ns);
        if let Some(c) = claims.get_opt(&name).await?
            && (uid.is_empty() || c.uid().as_deref() == Some(&uid))
        {
            return Ok(Action::await_change());
        }
        let policy = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            .unwrap_or("Retain");
        let ours = pv.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER);
        if policy == "Delete" && ours {
            if let Some(path) = pv
                .spec
                .as_ref()
                .and_then(|s| s.host_path.as_ref())
                .map(|h| PathBuf::from(&h.path))
                .filter(|p| p.starts_with(&self.cluster.config.volumes_dir))
                && let Err(error) = std::fs::remove_dir_all(&path)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                warn!(%error, path = %path.display(), "cannot remove a volume's directory");
            }
            match api.delete(&pv.name_any(), &DeleteParams::default()).await {
                Ok(_) => debug!(volume = %pv.name_any(), "deleted with its claim"),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::await_change());
        }
        set_phase(&api, &pv, "Released").await?;
        Ok(Action::await_change())
    }
}

/// Writes a volume's phase unless it has it; whether the volume is there.
async fn set_phase(
    api: &Api<PersistentVolume>,
    pv: &PersistentVolume,
    phase: &str,
) -> Result<bool> {
    if phase_of_volume(pv) == phase {
        return Ok(true);
    }
    let status = json!({"status": {"phase": phase}});
    Ok(status::write(api, &pv.name_any(), &status).await?)
}

/// Where a provisioned volume's directory is, named as local-path names
/// them (`pvc-<uid>_<namespace>_<claim>`).
fn volume_dir(root: &Path, pv: &str, namespace: &str, claim: &str) -> PathBuf {
    root.join(format!("{pv}_{namespace}_{claim}"))
}
