//! `flotilla clusters`: the fleet at a glance.

use flotilla_apiserver::table::human_duration;
use flotilla_core::quantity;
use flotilla_federation::api::Cluster;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::table::{Cell, Colour, Table};
use super::{HubArgs, hub_error};

#[derive(clap::Args)]
pub struct ClustersArgs {
    #[command(flatten)]
    pub hub: HubArgs,
}

pub async fn run(args: ClustersArgs) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let mut clusters = Api::<Cluster>::all(hub)
        .list(&ListParams::default())
        .await
        .map_err(hub_error)?
        .items;
    if clusters.is_empty() {
        println!("No clusters joined: `flotilla join` (Push) or `flotilla agent` (Pull) adds one.");
        return Ok(());
    }
    clusters.sort_by_key(|c| c.name_any());
    super::emit(&clusters_table(&clusters).for_stdout())
}

/// Allocated of allocatable, as `0.4/12` (CPU cores) or `1.5Gi/48Gi`.
fn usage(cluster: &Cluster, resource: &str) -> String {
    let Some(summary) = cluster
        .status
        .as_ref()
        .and_then(|s| s.resource_summary.as_ref())
    else {
        return "-".into();
    };
    let amount = |m: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >| {
        m.get(resource)
            .and_then(|q| quantity::parse(&q.0))
            .unwrap_or(0.0)
    };
    let (used, total) = (amount(&summary.allocated), amount(&summary.allocatable));
    if resource == "cpu" {
        format!("{}/{}", short(used), short(total))
    } else {
        const GI: f64 = 1024.0 * 1024.0 * 1024.0;
        format!("{}Gi/{}Gi", short(used / GI), short(total / GI))
    }
}

/// 12, 0.4, 1.5: one decimal below 10, none above.
fn short(v: f64) -> String {
    if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn clusters_table(clusters: &[Cluster]) -> Table {
    let mut table = Table::new([
        "NAME", "MODE", "READY", "VERSION", "NODES", "CPU", "MEMORY", "REGION", "ZONES", "AGE",
    ]);
    let now = jiff::Timestamp::now();
    for c in clusters {
        let ready = c.condition("Ready").map(|r| r.status.clone());
        let ready = match ready.as_deref() {
            Some("True") => Cell::coloured("True", Colour::Green),
            Some("False") => Cell::coloured("False", Colour::Red),
            Some(other) => Cell::coloured(other, Colour::Yellow),
            None => Cell::from("-"),
        };
        let status = c.status.as_ref();
        let nodes = status
            .and_then(|s| s.node_summary.as_ref())
            .map_or("-".to_string(), |n| {
                format!("{}/{}", n.ready_num, n.total_num)
            });
        let age = c
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or("-".to_string(), |t| {
                human_duration(now.duration_since(t.0).as_secs())
            });
        table.row(vec![
            c.name_any().into(),
            c.spec.sync_mode.clone().into(),
            ready,
            status
                .and_then(|s| s.kubernetes_version.clone())
                .unwrap_or_else(|| "-".into())
                .into(),
            nodes.into(),
            usage(c, "cpu").into(),
            usage(c, "memory").into(),
            c.spec.region.clone().unwrap_or_else(|| "-".into()).into(),
            match c.spec.all_zones().join(",") {
                z if z.is_empty() => "-".into(),
                z => z.into(),
            },
            age.into(),
        ]);
    }
    table
}
