//! The simulator as a whole: shared informers, the cluster view every
//! controller reads, and the wiring that starts them.

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
use kube::{Api, Client, ResourceExt};
use tracing::{Instrument, info, warn};

use crate::config::SimConfig;
use crate::controllers;
use crate::events::EventRecorder;
use crate::faults::Faults;
use crate::informer::{Index, Informer, Watched, controller_uid};
use crate::runtime::RuntimeHandle;

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
    recorders: parking_lot::Mutex<std::collections::HashMap<&'static str, EventRecorder>>,
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

/// A running simulator; dropping it stops every task.
pub struct Simulator {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The cluster's metrics-server, for the API server to serve.
    pub metrics: Arc<crate::metrics::MetricsServer>,
}

impl Drop for Simulator {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Simulator {
    /// Starts the nodes and controllers of the cluster `config` describes
    /// against the API behind `clients`; returns once the caches are synced.
    pub async fn start(
        clients: Clients,
        config: SimConfig,
        faults: Faults,
        runtime: RuntimeHandle,
    ) -> Result<Simulator> {
        let client = clients.controller_manager.clone();
        let mut inf = Informers {
            pods: Informer::new(Api::all(client.clone())),
            nodes: Informer::new(Api::all(client.clone())),
            services: Informer::new(Api::all(client.clone())),
            replicasets: Informer::new(Api::all(client.clone())),
            deployments: Informer::new(Api::all(client.clone())),
            statefulsets: Informer::new(Api::all(client.clone())),
            daemonsets: Informer::new(Api::all(client.clone())),
            jobs: Informer::new(Api::all(client.clone())),
            claims: Informer::new(Api::all(client.clone())),
            volumes: Informer::new(Api::all(client.clone())),
            hpas: Informer::new(Api::all(client.clone())),
            cronjobs: Informer::new(Api::all(client.clone())),
        };
        let pods_by_owner = Index::new(&mut inf.pods, |p: &Pod| controller_uid(p));
        let pods_by_node = Index::new(&mut inf.pods, |p: &Pod| {
            p.spec.as_ref().and_then(|s| s.node_name.clone())
        });
        let pods_by_namespace = Index::new(&mut inf.pods, |p: &Pod| p.namespace());
        let replicasets_by_owner =
            Index::new(&mut inf.replicasets, |r: &ReplicaSet| controller_uid(r));
        let jobs_by_owner = Index::new(&mut inf.jobs, |j: &Job| controller_uid(j));
        let cluster = Arc::new(Cluster {
            clients,
            config,
            faults,
            pods: inf.pods.store(),
            pods_by_owner,
            pods_by_node,
            pods_by_namespace,
            nodes: inf.nodes.store(),
            services: inf.services.store(),
            replicasets: inf.replicasets.store(),
            replicasets_by_owner,
            deployments: inf.deployments.store(),
            statefulsets: inf.statefulsets.store(),
            daemonsets: inf.daemonsets.store(),
            jobs: inf.jobs.store(),
            jobs_by_owner,
            claims: inf.claims.store(),
            volumes: inf.volumes.store(),
            hpas: inf.hpas.store(),
            cronjobs: inf.cronjobs.store(),
            recorders: Default::default(),
        });
        let metrics = Arc::new(crate::metrics::MetricsServer::new(
            cluster.clone(),
            runtime.runtime.clone(),
            crate::metrics::RESOLUTION,
        ));
        let mut controllers: Vec<TaskBox> = vec![
            controllers::nodes::start(cluster.clone(), &mut inf),
            controllers::scheduler::start(cluster.clone(), &mut inf),
            controllers::kubelet::start(cluster.clone(), &mut inf, runtime),
            controllers::replicaset::start(cluster.clone(), &mut inf),
            controllers::deployment::start(cluster.clone(), &mut inf),
            controllers::statefulset::start(cluster.clone(), &mut inf),
            controllers::daemonset::start(cluster.clone(), &mut inf),
            controllers::job::start(cluster.clone(), &mut inf),
            controllers::endpoints::start(cluster.clone(), &mut inf),
            controllers::hpa::start(cluster.clone(), &mut inf),
            controllers::cronjob::start(cluster.clone(), &mut inf),
        ];
        controllers.extend(controllers::volumes::start(cluster.clone(), &mut inf));
        let mut tasks = vec![
            tokio::spawn(inf.pods.run()),
            tokio::spawn(inf.nodes.run()),
            tokio::spawn(inf.services.run()),
            tokio::spawn(inf.replicasets.run()),
            tokio::spawn(inf.deployments.run()),
            tokio::spawn(inf.statefulsets.run()),
            tokio::spawn(inf.daemonsets.run()),
            tokio::spawn(inf.jobs.run()),
            tokio::spawn(inf.claims.run()),
            tokio::spawn(inf.volumes.run()),
            tokio::spawn(inf.hpas.run()),
            tokio::spawn(inf.cronjobs.run()),
        ];
        let c = &cluster;
        let synced = async {
            let _ = c.pods.wait_until_ready().await;
            let _ = c.nodes.wait_until_ready().await;
            let _ = c.services.wait_until_ready().await;
            let _ = c.replicasets.wait_until_ready().await;
            let _ = c.deployments.wait_until_ready().await;
            let _ = c.statefulsets.wait_until_ready().await;
            let _ = c.daemonsets.wait_until_ready().await;
            let _ = c.jobs.wait_until_ready().await;
            let _ = c.claims.wait_until_ready().await;
            let _ = c.volumes.wait_until_ready().await;
            let _ = c.hpas.wait_until_ready().await;
            let _ = c.cronjobs.wait_until_ready().await;
        };
        if tokio::time::timeout(Duration::from_secs(60), synced)
            .await
            .is_err()
        {
            warn!("caches did not sync within 60s; starting the controllers anyway");
        }
        controllers::nodes::register_all(&cluster).await;
        controllers::volumes::ensure_default_class(&cluster).await;
        tasks.extend(controllers.into_iter().map(tokio::spawn));
        info!(cluster = %cluster.config.cluster_name, nodes = cluster.config.nodes, "simulator running");
        Ok(Simulator { tasks, metrics })
    }
}

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
