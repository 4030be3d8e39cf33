//! `flotilla join` and `flotilla unjoin`: members in and out of the fleet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_client::credentials::Credentials;
use flotilla_federation::join::{self, JoinRequest};

#[derive(clap::Args)]
pub struct JoinArgs {
    /// The member's name in the fleet.
    pub name: String,
    /// The hub's kubeconfig.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    #[command(flatten)]
    pub member: MemberArgs,
    #[command(flatten)]
    pub fabric: FabricArgs,
}

/// How the member joins the network fabric (when it runs one).
#[derive(clap::Args, Clone, Default)]
pub struct FabricArgs {
    /// Give the cluster a global CIDR (Globalnet): for members whose pod
    /// or service CIDRs overlap another member's.
    #[arg(long)]
    pub globalnet: bool,
    /// The global CIDR to use [default: the next free /16 of 242.0.0.0/8]
    #[arg(long, requires = "globalnet")]
    pub global_cidr: Option<ipnet::Ipv4Net>,
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
    let credentials = request.credentials.clone();
    join::join(&hub, &request).await?;
    println!("cluster {} joined (Push mode)", args.name);
    let member = credentials
        .client(&args.name)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let hub_credentials = join::credentials_from_kubeconfig(&args.kubeconfig, None)?;
    match join_fabric(&hub, &member, hub_credentials, &args.name, &args.fabric).await? {
        Some(Some(cidr)) => println!(
            "cluster {} joined the network fabric (Globalnet, global CIDR {cidr})",
            args.name
        ),
        Some(None) => println!("cluster {} joined the network fabric", args.name),
        None => {}
    }
    Ok(())
}

/// Connects the member to the fleet's network fabric, if it runs one:
/// writes its broker Secret (with, under Globalnet, its global CIDR).
/// None: it runs no fabric; Some(global CIDR) otherwise.
pub async fn join_fabric(
    hub: &kube::Client,
    member: &kube::Client,
    hub_credentials: Credentials,
    name: &str,
    fabric: &FabricArgs,
) -> anyhow::Result<Option<Option<ipnet::Ipv4Net>>> {
    use flotilla_fabric::broker::{self, BrokerAccess};
    let has = broker::has_fabric(member)
        .await
        .with_context(|| format!("cannot reach cluster {name}"))?;
    if !has {
        if fabric.globalnet {
            bail!(
                "--globalnet: cluster {name} runs no network fabric (start it with `flotilla member --runtime netns --underlay NAME`)"
            );
        }
        return Ok(None);
    }
    broker::install(hub).await.map_err(anyhow::Error::msg)?;
    let global_cidr = if fabric.globalnet {
        Some(
            broker::allocate_global_cidr(hub, name, fabric.global_cidr)
                .await
                .map_err(anyhow::Error::msg)?,
        )
    } else {
        None
    };
    let access = BrokerAccess {
        credentials: hub_credentials,
        namespace: flotilla_fabric::api::BROKER_NAMESPACE.into(),
        cluster_id: name.to_string(),
        global_cidr,
    };
    broker::write(member, &access)
        .await
        .with_context(|| format!("cannot give cluster {name} its broker Secret"))?;
    Ok(Some(global_cidr))
}

/// Takes a member out of the fabric: its gateways stop (their Secret
/// goes), and the broker forgets it, so every other cluster drops its
/// tunnel and routes even if this one is unreachable.
async fn leave_fabric(hub: &kube::Client, name: &str) {
    use flotilla_federation::api::Cluster;
    use flotilla_federation::members::Members;
    let clusters: kube::Api<Cluster> = kube::Api::all(hub.clone());
    if let Ok(Some(cluster)) = clusters.get_opt(name).await
        && cluster.spec.sync_mode == flotilla_federation::api::sync_mode::PUSH
        && let Ok(m) = Members::new(hub.clone()).get(&cluster).await
        && let Err(error) = flotilla_fabric::broker::remove(&m.client).await
    {
        eprintln!(
            "warning: cannot remove cluster {name}'s broker Secret ({error}); its gateways keep their tunnels until it is reachable"
        );
    }
    if let Err(error) = flotilla_fabric::gateway::withdraw(hub, name).await {
        eprintln!("warning: cannot remove cluster {name} from the broker: {error}");
    }
    if let Err(error) = flotilla_fabric::broker::release_global_cidr(hub, name).await {
        eprintln!("warning: cannot release cluster {name}'s global CIDR: {error}");
    }
}

pub async fn unjoin(args: UnjoinArgs) -> anyhow::Result<()> {
    let hub = hub_client(&args.kubeconfig).await?;
    leave_fabric(&hub, &args.name).await;
    join::unjoin(&hub, &args.name, args.wait).await?;
    println!("cluster {} unjoined", args.name);
    Ok(())
}
