//! The DockerCluster controller: the cluster's API endpoint (CAPD's load
//! balancer): a loopback port chosen once and kept in
//! `spec.controlPlaneEndpoint`, where the cluster's member serves once its
//! first control plane machine starts it. Deleting the DockerCluster stops
//! the member and removes its data.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tracing::info;

use crate::Context;
use crate::api;
use crate::docker::process::free_port;
use crate::error::Error;
use crate::objects::{self, Objects, set_condition};
use crate::runner::{self, Controller, Next};

/// Runs for `kind`: DockerCluster (DockerMachine), or its `Dev*` twin.
pub async fn run(ctx: Arc<Context>, kind: kube::api::ApiResource, name: &'static str) {
    let controller = Controller {
        name,
        kind: kind.clone(),
        wakers: vec![],
        nodes: None,
    };
    runner::run_in(ctx, controller, |ctx, dc| async move {
        reconcile(&ctx, dc).await
    })
    .await;
}

/// The Cluster an infrastructure object belongs to.
pub fn cluster_of(object: &Value) -> Option<String> {
    objects::label(object, api::CLUSTER_NAME_LABEL)
        .or_else(|| objects::owner_named(object, "Cluster"))
        .map(String::from)
}

async fn reconcile(ctx: &Context, dc: Value) -> Result<Next, Error> {
    let namespace = objects::namespace(&dc).to_string();
    let name = objects::name(&dc).to_string();
    let objects = Objects::new(ctx.client.clone(), &namespace);
    let kind = crate::api::resource_of(&dc);
    let cluster = cluster_of(&dc);
    if objects::deleting(&dc) {
        if let Some(cluster) = &cluster {
            ctx.provider.remove(&namespace, cluster).await?;
            info!(cluster = %format!("{namespace}/{cluster}"), "cluster member removed");
        }
        objects
            .remove_finalizer(&kind, &dc, api::DOCKERCLUSTER_FINALIZER)
            .await?;
        return Ok(None);
    }
    // Nothing is made before the Cluster owns it, as upstream.
    let Some(_cluster) = cluster else {
        return Ok(Some(Duration::from_secs(2)));
    };
    objects
        .add_finalizer(&kind, &dc, api::DOCKERCLUSTER_FINALIZER)
        .await?;
    let endpoint = &dc["spec"]["controlPlaneEndpoint"];
    if endpoint["port"].as_i64().unwrap_or(0) == 0 {
        let port = free_port()?;
        objects
            .merge(
                &kind,
                &name,
                json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": port}}}),
            )
            .await?;
        return Ok(Some(Duration::from_millis(100)));
    }
    let mut status = dc["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["initialization"]["provisioned"] = json!(true);
    status["ready"] = json!(true);
    set_condition(
        &mut status,
        "LoadBalancerAvailable",
        "True",
        "Available",
        "",
    );
    set_condition(&mut status, "Ready", "True", "Ready", "");
    status["observedGeneration"] = dc["metadata"]["generation"].clone();
    if status != dc["status"] {
        objects.status(&kind, &name, status).await?;
    }
    Ok(None)
}
