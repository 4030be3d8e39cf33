//! The provider's ForeignClusters of its consumers: the networking
//! module, as this cluster's gateway sees the tunnel to each.

use std::time::Duration;

use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::api::{ForeignCluster, set_condition};

const PERIOD: Duration = Duration::from_secs(1);

pub async fn run(local: Client) {
    loop {
        pass(&local).await;
        tokio::time::sleep(PERIOD).await;
    }
}

async fn pass(local: &Client) {
    let api: Api<ForeignCluster> = Api::all(local.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for fc in list.items {
        let mut status = fc.status.clone().unwrap_or_default();
        if !status.role.contains("Consumer") {
            continue;
        }
        let Some(c) = crate::network::condition(local, &fc.spec.cluster_id).await else {
            continue;
        };
        let mut changed = !status.modules.networking.enabled;
        status.modules.networking.enabled = true;
        changed |= set_condition(&mut status.modules.networking.conditions, c);
        if changed {
            let _ = api
                .patch_status(
                    &fc.spec.cluster_id,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"modules": status.modules}})),
                )
                .await;
        }
    }
}
