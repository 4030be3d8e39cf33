//! `flotilla network show connections|endpoints|gateways|networks`: the
//! fabric as `subctl show` prints it, one block per cluster. Gateways
//! are read from each member (their `Gateway` objects); networks from
//! the broker's `Cluster` objects on the hub.

use anyhow::bail;
use flotilla_fabric::api::{self, Cluster as BrokerCluster, Gateway};
use flotilla_federation::api::Cluster;
use flotilla_federation::members::Members;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::inspect::table::{Cell, Colour, Table};
use crate::inspect::{HubArgs, emit, member_client};

#[derive(clap::Args)]
pub struct ShowArgs {
    /// What to show.
    #[arg(value_enum)]
    pub what: What,
    /// Only these clusters (comma-separated) [default: every one]
    #[arg(short = 'C', long, value_delimiter = ',')]
    pub clusters: Vec<String>,
    #[command(flatten)]
    pub hub: HubArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq)]
pub enum What {
    Connections,
    Endpoints,
    Gateways,
    Networks,
    All,
}

/// The fleet's clusters, sorted, narrowed to `only`.
pub async fn clusters(hub: &kube::Client, only: &[String]) -> anyhow::Result<Vec<Cluster>> {
    let mut clusters = Api::<Cluster>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the hub: {e}"))?
        .items;
    clusters.retain(|c| only.is_empty() || only.contains(&c.name_any()));
    clusters.sort_by_key(|c| c.name_any());
    if clusters.is_empty() {
        bail!("no such clusters: `flotilla clusters` lists the fleet");
    }
    Ok(clusters)
}

/// A member's gateways, or why they cannot be read.
pub async fn gateways(
    hub_args: Option<&HubArgs>,
    members: &Members,
    cluster: &Cluster,
) -> Result<Vec<Gateway>, String> {
    let client = member_client(hub_args, members, cluster).await?;
    let api: Api<Gateway> = Api::namespaced(client, api::OPERATOR_NAMESPACE);
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(format!("cannot reach it: {e}")),
    }
}

pub async fn run(args: ShowArgs) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let clusters = clusters(&hub, &args.clusters).await?;
    let members = Members::new(hub.clone());
    let broker: Vec<BrokerCluster> = Api::namespaced(hub.clone(), api::BROKER_NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut out = String::new();
    for cluster in &clusters {
        let name = cluster.name_any();
        out.push_str(&format!("Cluster \"{name}\"\n"));
        if matches!(args.what, What::Networks | What::All) {
            out.push_str(&networks(broker.iter().find(|c| c.spec.cluster_id == name)));
        }
        if args.what == What::Networks {
            out.push('\n');
            continue;
        }
        let gateways = match gateways(Some(&args.hub), &members, cluster).await {
            Ok(g) => g,
            Err(why) => {
                out.push_str(&format!(" ✗ {why}\n\n"));
                continue;
            }
        };
        let tables: Vec<(&str, Table)> = match args.what {
            What::Connections => vec![("connections", connections(&gateways))],
            What::Endpoints => vec![("endpoints", endpoints(&gateways))],
            What::Gateways => vec![("gateways", gateway_table(&gateways))],
            _ => vec![
                ("gateways", gateway_table(&gateways)),
                ("endpoints", endpoints(&gateways)),
                ("connections", connections(&gateways)),
            ],
        };
        for (what, table) in tables {
            if table.is_empty() {
                out.push_str(&format!(
                    " ✗ {}\n",
                    if gateways.is_empty() {
                        "no gateways detected".to_string()
                    } else {
                        format!("no {what} found")
                    }
                ));
            } else {
                out.push_str(&table.for_stdout());
            }
        }
        out.push('\n');
    }
    emit(&out)
}

fn status_cell(status: &str) -> Cell {
    let colour = match status {
        api::CONNECTED => Colour::Green,
        api::CONNECTING => Colour::Yellow,
        _ => Colour::Red,
    };
    Cell::coloured(status, colour)
}

/// subctl's columns: GATEWAY CLUSTER REMOTE IP NAT CABLE DRIVER SUBNETS STATUS RTT avg.
pub fn connections(gateways: &[Gateway]) -> Table {
    let mut t = Table::new([
        "GATEWAY",
        "CLUSTER",
        "REMOTE IP",
        "NAT",
        "CABLE DRIVER",
        "SUBNETS",
        "STATUS",
        "RTT avg.",
    ]);
    for g in gateways.iter().filter(|g| g.status.ha_status == "active") {
        for c in &g.status.connections {
            let e = &c.endpoint;
            let ip = if !c.using_ip.is_empty() {
                c.using_ip.clone()
            } else if e.nat_enabled {
                e.public_ip.clone()
            } else {
                e.private_ip.clone()
            };
            t.row(vec![
                e.hostname.clone().into(),
                e.cluster_id.clone().into(),
                ip.into(),
                if c.using_nat { "yes" } else { "no" }.into(),
                e.backend.clone().into(),
                e.subnets.join(", ").into(),
                status_cell(&c.status),
                c.latency_rtt
                    .as_ref()
                    .map(|l| l.average.clone())
                    .unwrap_or_default()
                    .into(),
            ]);
        }
    }
    t
}

/// subctl's columns: CLUSTER ENDPOINT IP PUBLIC IP CABLE DRIVER TYPE.
pub fn endpoints(gateways: &[Gateway]) -> Table {
    let mut t = Table::new([
        "CLUSTER",
        "ENDPOINT IP",
        "PUBLIC IP",
        "CABLE DRIVER",
        "TYPE",
    ]);
    for g in gateways.iter().filter(|g| g.status.ha_status == "active") {
        let l = &g.status.local_endpoint;
        t.row(vec![
            l.cluster_id.clone().into(),
            l.private_ip.clone().into(),
            l.public_ip.clone().into(),
            l.backend.clone().into(),
            "local".into(),
        ]);
        for c in &g.status.connections {
            let e = &c.endpoint;
            t.row(vec![
                e.cluster_id.clone().into(),
                e.private_ip.clone().into(),
                e.public_ip.clone().into(),
                e.backend.clone().into(),
                "remote".into(),
            ]);
        }
    }
    t
}

/// subctl's columns: NODE HA STATUS SUMMARY.
pub fn gateway_table(gateways: &[Gateway]) -> Table {
    let mut t = Table::new(["NODE", "HA STATUS", "SUMMARY"]);
    for g in gateways {
        let s = &g.status;
        let total = s.connections.len();
        let up = s
            .connections
            .iter()
            .filter(|c| c.status == api::CONNECTED)
            .count();
        let summary = if !s.status_failure.is_empty() {
            s.status_failure.clone()
        } else if s.ha_status != "active" {
            "standby".into()
        } else if total == 0 {
            "There are no connections".into()
        } else if up == total {
            format!("All connections ({total}) are established")
        } else {
            format!("{up} connections out of {total} are established")
        };
        let node = if s.local_endpoint.hostname.is_empty() {
            g.name_any()
        } else {
            s.local_endpoint.hostname.clone()
        };
        t.row(vec![
            node.into(),
            s.ha_status.clone().into(),
            summary.into(),
        ]);
    }
    t
}

/// subctl's network details (labelled lines, not a table).
fn networks(cluster: Option<&BrokerCluster>) -> String {
    let Some(c) = cluster else {
        return "    No network details discovered (the cluster has no active gateway on the broker)\n".into();
    };
    let mut s = format!(
        "    Discovered network details via the broker:\n        Service CIDRs:   [{}]\n        Cluster CIDRs:   [{}]\n",
        c.spec.service_cidr.join(" "),
        c.spec.cluster_cidr.join(" ")
    );
    if !c.spec.global_cidr.is_empty() {
        s.push_str(&format!(
            "        Global CIDR:     {}\n",
            c.spec.global_cidr.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fabric::api::{Connection, EndpointSpec, GatewayStatus};

    fn gateway(ha: &str, connections: Vec<Connection>) -> Gateway {
        Gateway {
            metadata: Default::default(),
            status: GatewayStatus {
                ha_status: ha.into(),
                local_endpoint: EndpointSpec {
                    cluster_id: "east".into(),
                    hostname: "east-n0".into(),
                    private_ip: "100.64.0.2".into(),
                    public_ip: "100.64.0.2".into(),
                    backend: "wireguard".into(),
                    ..Default::default()
                },
                connections,
                ..Default::default()
            },
        }
    }

    #[test]
    fn tables_read_like_subctls() {
        let conn = Connection {
            status: "connected".into(),
            endpoint: EndpointSpec {
                cluster_id: "west".into(),
                hostname: "west-n1".into(),
                private_ip: "100.64.0.3".into(),
                public_ip: "100.64.0.3".into(),
                backend: "wireguard".into(),
                subnets: vec!["10.2.0.0/16".into(), "10.97.0.0/16".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let gws = vec![gateway("active", vec![conn]), gateway("passive", vec![])];
        let c = connections(&gws).render(None, false);
        assert!(c.starts_with("GATEWAY"), "{c}");
        assert!(
            c.contains("west-n1")
                && c.contains("10.2.0.0/16, 10.97.0.0/16")
                && c.contains("connected")
        );
        let e = endpoints(&gws).render(None, false);
        assert!(e.contains("local") && e.contains("remote"));
        let g = gateway_table(&gws).render(None, false);
        assert!(g.contains("All connections (1) are established"), "{g}");
        assert!(g.contains("standby"));
    }
}
