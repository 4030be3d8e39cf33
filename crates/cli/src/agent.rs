//! `flotilla agent`: the pull-mode agent, run next to a member the hub
//! cannot reach (see `flotilla_federation::agent`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_federation::agent::{self, AgentOptions};

use crate::apiserver::shutdown_signal;
use crate::controlplane::{ExecutionArgs, ProbeArgs};
use crate::join::{MemberArgs, hub_client};

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The cluster's name in the fleet (the one its token was issued for).
    #[arg(long)]
    pub cluster_name: String,
    /// The hub's kubeconfig, with the token from
    /// `flotilla token create --cluster NAME`.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    #[command(flatten)]
    pub member: MemberArgs,
    #[command(flatten)]
    pub probes: ProbeArgs,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    /// The Lease's duration; it is renewed every quarter of it.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub cluster_lease_duration: Duration,
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let (credentials, labels) = args.member.read()?;
    let member = credentials
        .client(&args.cluster_name)
        .await
        .with_context(|| format!("cannot build a client for {}", credentials.server))?;
    let hub = hub_client(&args.kubeconfig).await?;
    let options = AgentOptions {
        cluster: args.cluster_name.clone(),
        api_endpoint: credentials.server.clone(),
        provider: args.member.provider,
        region: args.member.region,
        zones: args.member.zone,
        labels,
        status_interval: args.probes.cluster_status_update_frequency,
        success_threshold: args.probes.cluster_success_threshold,
        failure_threshold: args.probes.cluster_failure_threshold,
        lease_duration: args.cluster_lease_duration,
        work_concurrency: args.execution.concurrent_work_syncs,
    };
    agent::register(&hub, &options)
        .await
        .with_context(|| format!("cannot register cluster {}", args.cluster_name))?;
    join_fabric(&args.kubeconfig, &member, &args.cluster_name).await?;
    println!(
        "flotilla agent for {} running (Pull mode; the member is at {})",
        args.cluster_name, credentials.server
    );
    tokio::select! {
        _ = agent::renew_lease(hub.clone(), options.clone()) => {}
        _ = agent::report_status(hub.clone(), member.clone(), options.clone()) => {}
        _ = flotilla_federation::mcs::pull::report(hub.clone(), member.clone(), options.cluster.clone()) => {}
        _ = agent::apply_works(hub, member, options) => {}
        _ = shutdown_signal() => {}
    }
    Ok(())
}

/// A Pull member that runs a network fabric joins it with the agent's
/// own credentials (the broker lets an agent write only its cluster's
/// objects). A broker Secret already there (say, with a global CIDR the
/// fleet's admin allocated) is kept.
async fn join_fabric(
    hub_kubeconfig: &std::path::Path,
    member: &kube::Client,
    cluster: &str,
) -> anyhow::Result<()> {
    use flotilla_fabric::broker::{self, BrokerAccess};
    if !broker::has_fabric(member).await.unwrap_or(false)
        || broker::read(member).await.ok().flatten().is_some()
    {
        return Ok(());
    }
    let access = BrokerAccess {
        credentials: flotilla_federation::join::credentials_from_kubeconfig(hub_kubeconfig, None)?,
        namespace: flotilla_fabric::api::BROKER_NAMESPACE.into(),
        cluster_id: cluster.to_string(),
        global_cidr: None,
    };
    broker::write(member, &access)
        .await
        .with_context(|| format!("cannot give cluster {cluster} its broker Secret"))?;
    println!("cluster {cluster} joined the network fabric");
    Ok(())
}
