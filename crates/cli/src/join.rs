//! `flotilla join` and `flotilla unjoin`: members in and out of the fleet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_federation::join::{self, JoinRequest};
use flotilla_federation::members::Credentials;

#[derive(clap::Args)]
pub struct JoinArgs {
    /// The member's name in the fleet.
    pub name: String,
    /// The hub's kubeconfig.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    #[command(flatten)]
    pub member: MemberArgs,
}

/// The member and what its Cluster says of it (`join` and `agent`).
#[derive(clap::Args)]
pub struct MemberArgs {
    /// The member's kubeconfig (join: its credentials are stored on the
    /// hub; agent: they never leave this machine).
    #[arg(long)]
    pub cluster_kubeconfig: PathBuf,
    /// The context of the member's kubeconfig to use [default: its current context]
    #[arg(long)]
    pub cluster_context: Option<String>,
    /// The member's region (for placement by field).
    #[arg(long)]
    pub region: Option<String>,
    /// The member's zone (repeat or separate with commas for several).
    #[arg(long, value_delimiter = ',')]
    pub zone: Vec<String>,
    /// The member's provider (for placement by field).
    #[arg(long)]
    pub provider: Option<String>,
    /// Labels for the Cluster, as k=v,k2=v2.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
}

impl MemberArgs {
    /// The member's credentials, and the Cluster's labels.
    pub fn read(&self) -> anyhow::Result<(Credentials, BTreeMap<String, String>)> {
        let labels = parse_labels(&self.labels)?;
        let credentials = join::credentials_from_kubeconfig(
            &self.cluster_kubeconfig,
            self.cluster_context.as_deref(),
        )?;
        Ok((credentials, labels))
    }
}

#[derive(clap::Args)]
pub struct UnjoinArgs {
    /// The member to remove.
    pub name: String,
    /// The hub's kubeconfig.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// How long to wait while the control plane removes the member's objects.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
}

pub async fn hub_client(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read the hub kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("invalid hub kubeconfig {}", path.display()))?;
    Ok(kube::Client::try_from(config)?)
}

fn parse_labels(labels: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    labels
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("label {l:?} is not k=v (example: --labels env=prod,tier=web)"),
        })
        .collect()
}

pub async fn join(args: JoinArgs) -> anyhow::Result<()> {
    let (credentials, labels) = args.member.read()?;
    let hub = hub_client(&args.kubeconfig).await?;
    let request = JoinRequest {
        name: args.name.clone(),
        credentials,
        provider: args.member.provider,
        region: args.member.region,
        zones: args.member.zone,
        labels,
    };
    join::join(&hub, &request).await?;
    println!("cluster {} joined (Push mode)", args.name);
    Ok(())
}

pub async fn unjoin(args: UnjoinArgs) -> anyhow::Result<()> {
    let hub = hub_client(&args.kubeconfig).await?;
    join::unjoin(&hub, &args.name, args.wait).await?;
    println!("cluster {} unjoined", args.name);
    Ok(())
}
