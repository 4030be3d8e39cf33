//! `flotilla controlplane`: the hub. The API server on its store (embedded,
//! or etcd for several replicas, of which one leads the controllers) plus
//! the federation controllers, which talk to it through a loopback
//! kube-rs client like any other client. The hub runs no workload
//! controllers: a Deployment here is a template.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_apiserver::{Config, loopback};
use flotilla_federation::context::Options;
use flotilla_federation::frontends;
use flotilla_federation::leader::{self, Election};
use flotilla_federation::metrics::Metrics;

use crate::apiserver::{
    Args as ServerArgs, StoreKind, announce_and_serve, prepare, shutdown_signal,
};

/// The hub's default watch window (`--watch-history`): its controllers
/// keep up with it in-process, and a start-up reloads it, so a window the
/// size of a member's busiest minute is enough.
pub const WATCH_HISTORY: &str = "10000";

/// How a member's health is probed and damped (Karmada's flags): by the
/// control plane for Push members, by the agent for a Pull one.
#[derive(clap::Args)]
pub struct ProbeArgs {
    /// How often the member is probed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub cluster_status_update_frequency: Duration,
    /// How long a member must fail its probes before it turns NotReady.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_failure_threshold: Duration,
    /// How long a NotReady member must pass its probes before it turns Ready.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_success_threshold: Duration,
}

/// How Works are applied to members: by the control plane for Push
/// members, by the agent for a Pull one.
#[derive(clap::Args)]
pub struct ExecutionArgs {
    /// How many Works are applied to each member at once, at least
    /// (Karmada counts them over all members; here each member has its
    /// own, so one slow member holds up only its own). In a fleet of fewer
    /// than 20 members each gets more: up to 10, from 100 shared.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_work_syncs: u16,
}

#[derive(clap::Args)]
#[command(mut_arg("watch_history", |a| a.default_value(WATCH_HISTORY)))]
pub struct ControlplaneArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub probes: ProbeArgs,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    /// How long a Pull cluster's agent may go without renewing its Lease
    /// before the cluster turns Ready=Unknown.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub cluster_monitor_grace_period: Duration,
    /// How long a cluster being evicted (failover) keeps its copy when the
    /// new placement does not become healthy.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub graceful_eviction_timeout: Duration,
    /// Where multi-cluster services' ClusterSetIPs come from; give one
    /// IPv4 and one IPv6 range for dual-stack imports. Outside Globalnet's
    /// 242.0.0.0/8, as Submariner's 243.0.0.0/8 is.
    #[arg(long, value_delimiter = ',', default_value = "243.0.0.0/16")]
    pub clusterset_ip_range: Vec<ipnet::IpNet>,
    /// Also serve the fleet's clusterset.local DNS zone here (UDP and TCP),
    /// as `flotilla dns` does.
    #[arg(long)]
    pub dns_listen: Option<std::net::SocketAddr>,
    /// Foreign fleet APIs to serve over the pipeline: `kubefed`
    /// (KubeFed's `types.kubefed.io` and `core.kubefed.io`) and `argocd`
    /// (Argo CD's Application and ApplicationSet, synced from git
    /// repositories on this host). Each lets the controllers create the
    /// objects its API generates. Off by default here (`flotilla up` turns
    /// both on): a front end that is off still serves its kinds, and
    /// refuses a new object of them with how to turn it on.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(frontends::optional_names()))]
    pub frontends: Vec<String>,
    /// The cores the federation controllers size their concurrency for:
    /// the Work applies in flight, tuned on 2 cores, grow with them up to
    /// 8. Default: the CPUs this process may use (its CPU affinity and
    /// cgroup quota).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub pipeline_cores: Option<u16>,
    /// Threads of the async runtime that serves the API (and, without
    /// leader election, runs the controllers) [default: one per CPU this
    /// process may use, at most 8]. On a 16-core machine, 8 instead of 16
    /// finished a burst of 10,000 templates on 10 members sooner, with
    /// less CPU and memory: the embedded store's one writer was the bound
    /// (docs/benchmarks.md).
    #[arg(long, env = "TOKIO_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: Option<u16>,
    #[command(flatten)]
    pub election: ElectionArgs,
}

/// The most runtime threads the control plane starts unless told.
const MOST_WORKER_THREADS: usize = 8;

impl ControlplaneArgs {
    /// The async runtime's worker threads.
    pub fn runtime_threads(&self) -> usize {
        match self.worker_threads {
            Some(n) => usize::from(n),
            None => flotilla_federation::context::usable_cores().min(MOST_WORKER_THREADS),
        }
    }
}

/// kube-controller-manager's leader-election flags: several replicas on one
/// etcd serve the API, and one of them runs the federation controllers.
#[derive(clap::Args)]
pub struct ElectionArgs {
    /// Run the controllers only while holding the Lease
    /// kube-system/flotilla-controlplane [default: true with --store etcd]
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub leader_elect_retry_period: Duration,
}

pub async fn run(args: ControlplaneArgs) -> anyhow::Result<()> {
    tracing::info!(
        worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "control plane starting"
    );
    let (data_dir, kubeconfig_path) = args.server.paths("controlplane");
    let metrics = Metrics::default();
    let scrape = metrics.clone();
    // The controllers act as an identity of their own, which RBAC confines.
    let (controllers_token, controllers_user) =
        flotilla_apiserver::auth::component_identity(flotilla_federation::roles::CONTROLPLANE_USER);
    let config = Config {
        metrics: Some(Arc::new(move || scrape.encode())),
        component_identities: vec![(controllers_token.clone(), controllers_user)],
        // Pull-mode agents' tokens reach their own cluster only.
        authorizers: flotilla_apiserver::authz::Chain::new(vec![Arc::new(
            flotilla_federation::agents::AgentAuthorizer,
        )]),
        public_pages: Some(crate::dashboard::pages()),
        ..Config::default()
    };
    let p = prepare(&data_dir, &args.server.serve, config).await?;
    let admin = loopback::in_process(&p.api, &p.admin_token, "flotilla-controlplane");
    let client = loopback::in_process(&p.api, &controllers_token, "flotilla-controlplane");
    // Karmada's clusters/NAME/proxy, through the members' stored credentials.
    p.api
        .set_cluster_proxy(flotilla_federation::proxy::HubProxy::new(client.clone()));
    // `flotilla describe placement`, `plan` and `network verify` as the
    // API's PlacementReview and NetworkReview, answered as their caller.
    let as_caller = crate::inspect::review::AsCaller::new(p.api.clone(), p.admin_token.clone());
    p.api
        .add_review(Arc::new(crate::inspect::review::PlacementReviews(
            as_caller.clone(),
        )));
    p.api
        .add_review(Arc::new(crate::network::review::NetworkReviews(as_caller)));
    // Binding a cluster set to a namespace needs the set's `bind`.
    p.api.add_mutating_admission(Arc::new(
        flotilla_federation::clustersets::admission::ClusterSetBindings,
    ));
    // metrics.k8s.io from the members', as karmada-metrics-adapter.
    p.api.set_resource_metrics(Arc::new(
        flotilla_federation::metrics_adapter::FleetMetrics::new(client.clone()),
    ));
    // What Karmada's webhooks default and refuse of (Cron)FederatedHPAs.
    p.api.add_mutating_admission(Arc::new(
        flotilla_federation::autoscaling::admission::Autoscalers,
    ));
    // What Cluster API's webhooks refuse, and networks that overlap the
    // ranges the hub hands out.
    p.api
        .add_mutating_admission(Arc::new(flotilla_lifecycle::admission::Validation {
            reserved: args
                .clusterset_ip_range
                .iter()
                .map(|r| {
                    (
                        *r,
                        "the hub's ClusterSet IP range (--clusterset-ip-range)".to_string(),
                    )
                })
                .collect(),
        }));
    // Cluster API's v1beta1 converted as its webhooks would; what
    // Gardener's API server adds to Shoots (its table, the admin
    // kubeconfig subresource).
    flotilla_lifecycle::extend(&p.api, client.clone());
    // The front ends that are off: their kinds are served, and a new
    // object of them is refused with how to turn them on.
    let on = |f: &dyn frontends::Frontend| frontends::is_on(f, &args.frontends);
    let off: Vec<_> = frontends::ALL.into_iter().filter(|f| !on(*f)).collect();
    if !off.is_empty() {
        p.api
            .add_mutating_admission(Arc::new(frontends::SwitchedOff(off)));
    }
    let server = tokio::spawn(p.api.serve(p.listener, Some(p.tls), shutdown_signal()));
    // Ready means the Karmada API is served: install before publishing.
    flotilla_federation::crds::install(&admin)
        .await
        .context("cannot install the control plane's CRDs")?;
    flotilla_federation::roles::install(&admin)
        .await
        .context("cannot install the control plane's roles")?;
    for frontend in frontends::ALL {
        if on(frontend) {
            frontends::install_on(frontend, &admin).await
        } else {
            frontends::install_switched_off(frontend, &admin).await
        }
        .with_context(|| format!("cannot install {}'s CRDs and roles", frontend.api()))?;
    }
    // Clusters as objects: Cluster API's kinds and the local provider's.
    flotilla_lifecycle::install(&admin)
        .await
        .context("cannot install Cluster API's CRDs and roles")?;
    // Velero's kinds, so that Backups and Restores can be propagated to
    // the members that run them (Karmada's Velero guide).
    flotilla_backup::install(&admin)
        .await
        .context("cannot install Velero's CRDs")?;
    // The hub is the network fabric's broker too.
    flotilla_fabric::broker::install(&admin)
        .await
        .map_err(anyhow::Error::msg)
        .context("cannot install the broker's CRDs")?;
    let options = Options {
        cluster_status_interval: args.probes.cluster_status_update_frequency,
        cluster_failure_threshold: args.probes.cluster_failure_threshold,
        cluster_success_threshold: args.probes.cluster_success_threshold,
        work_concurrency: args.execution.concurrent_work_syncs,
        graceful_eviction_timeout: args.graceful_eviction_timeout,
        cluster_monitor_grace_period: args.cluster_monitor_grace_period,
        clusterset_ip_ranges: args.clusterset_ip_range.clone(),
        frontends: args.frontends.clone(),
        ..Options::default()
    };
    let options = Options {
        cores: args.pipeline_cores.map_or(options.cores, usize::from),
        ..options
    };
    if let Some(addr) = args.dns_listen {
        let sockets = crate::dns::bind(addr).await?;
        let client = client.clone();
        tokio::spawn(async move {
            if let Err(error) = crate::dns::serve(client, sockets).await {
                tracing::error!(%error, "clusterset.local DNS stopped");
            }
        });
    }
    // The local infrastructure provider's clusters live beside the hub's data.
    let provider = flotilla_lifecycle::Provider {
        exe: std::env::current_exe().context("cannot find the flotilla binary")?,
        dir: data_dir.join("clusters"),
        unset_env: vec![crate::apiserver::STOP_WITH_PARENT_ENV.to_string()],
        etcd: flotilla_lifecycle::Provider::find_etcd(),
    };
    std::fs::create_dir_all(&provider.dir)
        .with_context(|| format!("cannot create {}", provider.dir.display()))?;
    let elect = args
        .election
        .leader_elect
        .unwrap_or(args.server.serve.storage.store == StoreKind::Etcd);
    if elect {
        let e = &args.election;
        let election = Election {
            lease_duration: e.leader_elect_lease_duration,
            renew_deadline: e.leader_elect_renew_deadline,
            retry_period: e.leader_elect_retry_period,
            ..Election::new(Election::identity())
        };
        tokio::spawn(lead_while_elected(
            client, election, options, metrics, provider,
        ));
    } else {
        tokio::spawn(controllers(client, options, metrics, provider));
    }
    announce_and_serve(
        "controlplane",
        server,
        &p.ca_pem,
        &p.admin_token,
        p.addr,
        &data_dir,
        &kubeconfig_path,
    )
    .await
}

/// Every controller of the control plane: the federation's and cluster
/// lifecycle's.
async fn controllers(
    client: kube::Client,
    options: Options,
    metrics: Metrics,
    provider: flotilla_lifecycle::Provider,
) {
    tokio::join!(
        flotilla_federation::controlplane::run(client.clone(), options, metrics.clone()),
        flotilla_lifecycle::run(client, metrics, provider),
    );
}

/// Runs the controllers for each term as leader: when the lease is lost,
/// they stop, while this replica keeps serving the API and stands again.
async fn lead_while_elected(
    client: kube::Client,
    election: Election,
    options: Options,
    metrics: Metrics,
    provider: flotilla_lifecycle::Provider,
) {
    leader::lead_each_term(client.clone(), election, || {
        controllers(
            client.clone(),
            options.clone(),
            metrics.clone(),
            provider.clone(),
        )
    })
    .await;
}
