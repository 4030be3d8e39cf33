//! Creating and deleting a controller's pods, with expectations so a
//! stale cache never doubles a batch, and the Events upstream's
//! controllers record about each (SuccessfulCreate, SuccessfulDelete);
//! shared by the ReplicaSet, StatefulSet, DaemonSet and Job controllers.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::cluster::{Cluster, is_status};
use crate::events::EventRecorder;
use crate::expectations::Expectations;

/// At most this many pod writes of one controller in flight.
const BURST: usize = 16;

pub struct PodControl {
    cluster: Arc<Cluster>,
    expectations: Expectations,
    events: EventRecorder,
    /// Whether Events are worded as the StatefulSet controller's.
    stateful: bool,
}

impl PodControl {
    /// The pod control of `component` (`replicaset-controller`, ...).
    pub fn new(cluster: Arc<Cluster>, component: &'static str) -> Self {
        PodControl {
            events: cluster.recorder(component),
            stateful: component == "statefulset-controller",
            cluster,
            expectations: Expectations::default(),
        }
    }

    /// Records `verb` (create, delete) of `pod` on its owner, in the
    /// words of upstream's controller.
    fn record(&self, owner: &ObjectReference, verb: &str, pod: &str) {
        let (reason, message) = match (self.stateful, verb) {
            (true, _) => (
                if verb == "create" {
                    "SuccessfulCreate"
                } else {
                    "SuccessfulDelete"
                },
                format!(
                    "{verb} Pod {pod} in StatefulSet {} successful",
                    owner.name.as_deref().unwrap_or_default()
                ),
            ),
            (false, "create") => ("SuccessfulCreate", format!("Created pod: {pod}")),
            (false, _) => ("SuccessfulDelete", format!("Deleted pod: {pod}")),
        };
        self.events.emit(owner, reason, message);
    }

    /// Whether the cache shows every pod write `owner` (namespace/name) made.
    pub fn caught_up(&self, owner: &str, namespace: &str) -> bool {
        let pods = &self.cluster.pods;
        self.expectations.satisfied(owner, |name| {
            pods.get(&ObjectRef::new(name).within(namespace)).is_some()
        })
    }

    pub fn forget(&self, owner: &str) {
        self.expectations.forget(owner);
    }

    fn api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.cluster.clients.controller_manager.clone(), namespace)
    }

    /// Creates `pods`; returns how many were created before any error.
    pub async fn create(
        &self,
        owner: &str,
        about: &ObjectReference,
        namespace: &str,
        pods: Vec<Pod>,
    ) -> Result<usize, kube::Error> {
        let api = self.api(namespace);
        let results: Vec<Result<String, kube::Error>> = futures::stream::iter(pods)
            .map(|p| {
                let api = api.clone();
                async move {
                    api.create(&PostParams::default(), &p)
                        .await
                        .map(|c| c.name_any())
                }
            })
            .buffer_unordered(BURST)
            .collect()
            .await;
        let mut created = Vec::new();
        let mut error = None;
        for r in results {
            match r {
                Ok(name) => created.push(name),
                // A fixed name that exists already (StatefulSet): the cache will show it.
                Err(e) if is_status(&e, 409) => {}
                Err(e) => error = Some(e),
            }
        }
        let n = created.len();
        for pod in &created {
            self.record(about, "create", pod);
        }
        self.expectations.expect(owner, created, Vec::new());
        match error {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    pub async fn delete(
        &self,
        owner: &str,
        about: &ObjectReference,
        namespace: &str,
        names: Vec<String>,
    ) -> Result<(), kube::Error> {
        let api = self.api(namespace);
        self.expectations.expect(owner, Vec::new(), names.clone());
        futures::stream::iter(names)
            .map(|name| {
                let api = api.clone();
                async move {
                    match api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => {
                            self.record(about, "delete", &name);
                            Ok(())
                        }
                        Err(e) if is_status(&e, 404) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            })
            .buffer_unordered(BURST)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
    }
}
