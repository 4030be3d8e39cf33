//! Clusters as objects, on Cluster API's own API: the core controllers
//! (Cluster, MachineDeployment, MachineSet, Machine), the kubeadm
//! bootstrap and control plane providers, and a local infrastructure
//! provider serving CAPD's kinds whose clusters are Flotilla members on
//! this host. A Cluster that reaches Provisioned joins the fleet in Push
//! mode, as Karmada's cluster-api discovery joins it. Gardener's Shoots
//! (`gardener/`) are made of the same objects.
//!
//! Every controller reaches clusters only through their APIs: the hub's
//! for the objects, the workload cluster's (from its kubeconfig Secret)
//! for its Nodes; only the provider (`docker/`) touches this host.

#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod capi;
pub mod conversion;
pub mod docker;
pub mod error;
pub mod gardener;
pub mod generate;
pub mod kubeadm;
pub mod objects;
pub mod runner;
pub mod workload;

use std::sync::Arc;

use flotilla_federation::metrics::Metrics;
use futures::future::BoxFuture;
use kube::Client;
use serde_json::{Value, json};

pub use docker::process::Provider;

/// What every controller here shares.
pub struct Context {
    pub client: Client,
    pub metrics: Metrics,
    pub provider: Provider,
    pub workloads: workload::Workloads,
}

/// The ClusterRole the controllers need, bound to the control plane's
/// controllers' user: the kinds served here, and the Secrets of the
/// contract (kubeconfig, CA, bootstrap data) in any namespace, which
/// they create and read but never change or delete, and Gardener
/// Projects' namespaces, made when missing.
pub fn roles() -> Vec<Value> {
    vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:flotilla:lifecycle"},
        "rules": [
            {"verbs": ["*"], "apiGroups": [api::CLUSTER_GROUP, api::CONTROLPLANE_GROUP,
                api::BOOTSTRAP_GROUP, api::INFRASTRUCTURE_GROUP, gardener::api::CORE_GROUP],
             "resources": ["*"]},
            // Made, never deleted: they go with their owners (the
            // garbage collector's work).
            {"verbs": ["create", "get", "list", "watch"],
             "apiGroups": [""], "resources": ["secrets"]},
            {"verbs": ["get", "list", "watch"], "apiGroups": ["apiextensions.k8s.io"],
             "resources": ["customresourcedefinitions"]},
            // A Gardener Project's namespace, made when missing.
            {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["namespaces"]},
        ],
    })]
}

/// Serves the kinds and installs the controllers' role.
pub async fn install(client: &Client) -> Result<(), flotilla_federation::frontends::InstallError> {
    let crds = api::crds()
        .into_iter()
        .chain(gardener::api::crds())
        .collect();
    flotilla_federation::frontends::install(client, crds, roles()).await
}

/// What the hub's API server serves beyond the CRDs: Cluster API's
/// v1beta1 converted from and to the stored v1beta2 (as its conversion
/// webhooks), and Gardener's additions (`gardener::extend`).
pub fn extend(api: &flotilla_apiserver::storage::Storage, client: Client) {
    for kind in api::kinds() {
        api.add_conversion(
            kind.group,
            kind.plural,
            "v1beta1",
            flotilla_apiserver::conversion::Conversion {
                to_served: conversion::to_v1beta1,
                to_stored: conversion::to_v1beta2,
            },
        );
    }
    gardener::extend(api, client);
}

/// Runs every controller until the future is dropped.
pub async fn run(client: Client, metrics: Metrics, provider: Provider) {
    let ctx = Arc::new(Context {
        workloads: workload::Workloads::new(client.clone()),
        client,
        metrics,
        provider,
    });
    let controllers: Vec<BoxFuture<'static, ()>> = vec![
        Box::pin(capi::cluster::run(ctx.clone())),
        Box::pin(capi::machine::run(ctx.clone())),
        Box::pin(capi::machineset::run(ctx.clone())),
        Box::pin(capi::machinedeployment::run(ctx.clone())),
        Box::pin(capi::healthcheck::run(ctx.clone())),
        Box::pin(kubeadm::controlplane::run(ctx.clone())),
        Box::pin(gardener::shoot::run(ctx.clone())),
        Box::pin(gardener::project::run(ctx.clone())),
        Box::pin(kubeadm::bootstrap::run(ctx.clone())),
        Box::pin(docker::cluster::run(
            ctx.clone(),
            api::docker_clusters(),
            "docker-cluster",
        )),
        Box::pin(docker::cluster::run(
            ctx.clone(),
            api::dev_clusters(),
            "dev-cluster",
        )),
        Box::pin(docker::machine::run(
            ctx.clone(),
            api::docker_machines(),
            "docker-machine",
        )),
        Box::pin(docker::machine::run(
            ctx.clone(),
            api::dev_machines(),
            "dev-machine",
        )),
    ];
    futures::future::join_all(controllers).await;
}
