//! What every controller of the member shares: the clients, the shared
//! informers' caches and the cluster view they read, and how a
//! controller is run on them. The wiring that starts them all is
//! [`crate::simulator`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Service};

use crate::pod::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tracing::{Instrument, warn};

use crate::config::SimConfig;
use crate::events::EventRecorder;
use crate::faults::Faults;
use crate::informer::{Index, Informer, Watched};
use crate::roster::Roster;

/// Why a reconcile failed; it is retried after a pause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The clients the simulator writes with, one per upstream component so
/// managedFields name the same managers a real cluster shows.
#[derive(Clone)]
pub struct Clients {
    pub controller_manager: Client,
    pub scheduler: Client,
    pub kubelet: Client,
}

/// What every controller sees: the shared caches, the shape of the cluster
/// and the faults in force.
pub struct Cluster {
    pub clients: Clients,
    pub config: SimConfig,
    /// The nodes the member runs (they may change while it runs).
    pub roster: Arc<Roster>,
    pub faults: Faults,
    pub pods: Store<Pod>,
    pub pods_by_owner: Index<Pod>,
    pub pods_by_node: Index<Pod>,
    pub pods_by_namespace: Index<Pod>,
    pub nodes: Store<Node>,
    pub services: Store<Service>,
    pub replicasets: Store<ReplicaSet>,
    pub replicasets_by_owner: Index<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub daemonsets: Store<DaemonSet>,
    pub jobs: Store<Job>,
    pub jobs_by_owner: Index<Job>,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub cronjobs: Store<CronJob>,
    /// The Event recorders of the cluster's components, made on first use.
    pub(crate) recorders:
        parking_lot::Mutex<std::collections::HashMap<&'static str, EventRecorder>>,
}

impl Cluster {
    /// Pods controlled by the object with `uid`.
    pub fn owned_pods(&self, uid: &str) -> Vec<Arc<Pod>> {
        self.pods_by_owner.get(uid)
    }

    /// The Event recorder of `component` (`deployment-controller`,
    /// `default-scheduler`, ...), one per component so that its repeats
    /// are counted on one Event.
    pub fn recorder(&self, component: &'static str) -> EventRecorder {
        self.recorders
            .lock()
            .entry(component)
            .or_insert_with(|| {
                EventRecorder::new(
                    self.clients.controller_manager.clone(),
                    component,
                    &self.config.cluster_name,
                )
            })
            .clone()
    }
}

/// The informers, before they start: controllers register their triggers.
pub struct Informers {
    pub pods: Informer<Pod>,
    pub nodes: Informer<Node>,
    pub services: Informer<Service>,
    pub replicasets: Informer<ReplicaSet>,
    pub deployments: Informer<Deployment>,
    pub statefulsets: Informer<StatefulSet>,
    pub daemonsets: Informer<DaemonSet>,
    pub jobs: Informer<Job>,
    pub claims: Informer<PersistentVolumeClaim>,
    pub volumes: Informer<PersistentVolume>,
    pub hpas: Informer<HorizontalPodAutoscaler>,
    pub cronjobs: Informer<CronJob>,
}

/// A controller's main loop, ready to spawn.
pub type TaskBox = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs a kube-runtime controller of `K` over a shared store, reconciling
/// on `triggers`; failed reconciles are retried after a short pause.
pub fn run_controller<K, F, Fut>(
    name: &'static str,
    store: Store<K>,
    triggers: Vec<Pin<Box<dyn Stream<Item = ObjectRef<K>> + Send>>>,
    cluster: Arc<Cluster>,
    concurrency: u16,
    reconcile: F,
) -> TaskBox
where
    K: Watched + Unpin,
    F: FnMut(Arc<K>, Arc<Cluster>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    let config = kube::runtime::controller::Config::default().concurrency(concurrency);
    let mut controller =
        Controller::for_stream(futures::stream::pending(), store).with_config(config);
    for t in triggers {
        controller = controller.reconcile_on(t);
    }
    // Each reconcile's span (kube-runtime's, naming the object) sits in
    // the controller's.
    let span = tracing::info_span!("controller", name);
    Box::pin(
        controller
            .run(
                reconcile,
                move |obj: Arc<K>, error: &Error, _| {
                    warn!(%error, controller = name, object = %obj.name_any(), "reconcile failed; retrying");
                    Action::requeue(Duration::from_secs(2))
                },
                cluster,
            )
            .for_each(|_| futures::future::ready(()))
            .instrument(span),
    )
}

/// Boxes a trigger stream for [`run_controller`].
pub fn boxed<K: kube::Resource + 'static>(
    s: impl Stream<Item = ObjectRef<K>> + Send + 'static,
) -> Pin<Box<dyn Stream<Item = ObjectRef<K>> + Send>> {
    Box::pin(s)
}

/// Whether a kube error is the API's NotFound / AlreadyExists / Conflict.
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}
