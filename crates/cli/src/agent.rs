//! `flotilla agent`: the pull-mode agent, run next to a member the hub
//! cannot reach (see `flotilla_federation::agent`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_federation::agent::{self, AgentOptions};
use flotilla_federation::join;

use crate::apiserver::shutdown_signal;
use crate::join::{hub_client, parse_labels};

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The cluster's name in the fleet (the one its token was issued for).
    #[arg(long)]
    pub cluster_name: String,
    /// The hub's kubeconfig, with the token from
    /// `flotilla token create --cluster NAME`.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The member's kubeconfig; it never leaves this machine.
    #[arg(long)]
    pub cluster_kubeconfig: PathBuf,
    /// The context of the member's kubeconfig to use [default: its current context]
    #[arg(long)]
    pub cluster_context: Option<String>,
    #[arg(long)]
    pub region: Option<String>,
    /// The member's zone (repeat or separate with commas for several).
    #[arg(long, value_delimiter = ',')]
    pub zone: Vec<String>,
    #[arg(long)]
    pub provider: Option<String>,
    /// Labels for the Cluster, as k=v,k2=v2.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// How often the member is probed and its status reported.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub cluster_status_update_frequency: Duration,
    /// How long the member must fail its probes before it turns NotReady.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_failure_threshold: Duration,
    /// How long a NotReady member must pass its probes before it turns Ready.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_success_threshold: Duration,
    /// The Lease's duration; it is renewed every quarter of it.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub cluster_lease_duration: Duration,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let labels = parse_labels(&args.labels)?;
    let credentials = join::credentials_from_kubeconfig(
        &args.cluster_kubeconfig,
        args.cluster_context.as_deref(),
    )?;
    let member = credentials
        .client(&args.cluster_name)
        .await
        .with_context(|| format!("cannot build a client for {}", credentials.server))?;
    let hub = hub_client(&args.kubeconfig).await?;
    let options = AgentOptions {
        cluster: args.cluster_name.clone(),
        api_endpoint: credentials.server.clone(),
        provider: args.provider,
        region: args.region,
        zones: args.zone,
        labels,
        status_interval: args.cluster_status_update_frequency,
        success_threshold: args.cluster_success_threshold,
        failure_threshold: args.cluster_failure_threshold,
        lease_duration: args.cluster_lease_duration,
    };
    agent::register(&hub, &options)
        .await
        .with_context(|| format!("cannot register cluster {}", args.cluster_name))?;
    println!(
        "flotilla agent for {} running (Pull mode; the member is at {})",
        args.cluster_name, credentials.server
    );
    tokio::select! {
        _ = agent::renew_lease(hub.clone(), options.clone()) => {}
        _ = agent::report_status(hub, member, options) => {}
        _ = shutdown_signal() => {}
    }
    Ok(())
}
