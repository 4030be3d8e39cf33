//! The member as a whole: its shared caches and cluster view
//! ([`crate::cluster`]) with every controller, the kubelets and the
//! metrics-server started on them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;

use crate::pod::Pod;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::cluster::{Clients, Cluster, Informers, Result, TaskBox};
use crate::config::SimConfig;
use crate::controllers;
use crate::faults::Faults;
use crate::informer::{Index, Informer, controller_uid};
use crate::roster::Roster;
use crate::runtime::RuntimeHandle;

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
        roster: Arc<Roster>,
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
            roster,
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
            crate::kubelet::start(cluster.clone(), &mut inf, runtime),
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
        info!(cluster = %cluster.config.cluster_name, nodes = cluster.roster.len(), "simulator running");
        Ok(Simulator { tasks, metrics })
    }
}
