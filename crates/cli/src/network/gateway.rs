//! `flotilla gateway`: one gateway of a member's network fabric (the
//! member's supervisor starts one per gateway node; see
//! `flotilla_fabric::gateway`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_fabric::dataplane::Placement;
use flotilla_fabric::gateway::{self, GatewayConfig};
use flotilla_fabric::metrics::Metrics;
use ipnet::Ipv4Net;
use tracing::info;

use crate::{apiserver, kubeconfig};

#[derive(clap::Args)]
pub struct GatewayArgs {
    /// The member's kubeconfig: the gateway reaches it through its API.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The node it runs on (its Gateway object is named after it).
    #[arg(long)]
    node: String,
    /// The node's network namespace.
    #[arg(long)]
    node_netns: String,
    /// The node's address on the member's network.
    #[arg(long)]
    node_ip: Ipv4Addr,
    /// The member's router namespace, where every node's traffic leaves.
    #[arg(long)]
    router_netns: String,
    /// The underlay namespace gateways meet on (`flotilla underlay create`).
    #[arg(long)]
    underlay: String,
    /// The member's pod CIDRs (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    cluster_cidr: Vec<Ipv4Net>,
    /// The member's service CIDRs (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    service_cidr: Vec<Ipv4Net>,
    /// How long an active gateway that stopped renewing keeps the Lease.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// Serve Prometheus metrics here (/metrics).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

pub async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let member = kubeconfig::client(&args.kubeconfig).await?;
    let metrics = Arc::new(Metrics::default());
    if let Some(addr) = args.metrics_listen {
        let bound = metrics
            .clone()
            .serve(addr)
            .await
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        info!(%bound, "metrics");
        eprintln!("metrics on http://{bound}/metrics");
    }
    let config = GatewayConfig {
        member,
        node: args.node,
        placement: Placement {
            node_netns: args.node_netns,
            node_ip: args.node_ip,
            router_netns: args.router_netns,
        },
        underlay: args.underlay,
        cluster_cidrs: args.cluster_cidr,
        service_cidrs: args.service_cidr,
        lease_duration: args.lease_duration,
        metrics,
    };
    gateway::run(config, apiserver::shutdown_signal())
        .await
        .map_err(anyhow::Error::msg)
}
