//! `flotilla`: the single binary.
#![forbid(unsafe_code)]

mod agent;
mod apiserver;
mod bench;
mod chaos;
mod cleanup;
mod cluster_api;
mod controlplane;
mod dashboard;
mod dns;
mod inspect;
mod join;
mod kubeconfig;
mod member;
mod migrate;
mod network;
mod peering;
mod store_migrate;
mod token;
mod up;
mod users;
mod velero;

use clap::{Parser, Subcommand};

/// mimalloc: the default allocator fragments badly across tokio's threads
/// (members held several times their live data; see docs/benchmarks.md).
/// Built without transparent huge pages: partly used 2 MiB pages counted
/// fully in RSS (a 10,000-pod member: 175 -> 151 MiB). The feature
/// `system-allocator` leaves it out, for heap profilers (heaptrack) that
/// see only malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The version and, when the build knew it, the git commit (`build.rs`):
/// `0.1.0 (abc1234)`.
pub(crate) const VERSION: &str = env!("FLOTILLA_VERSION");

#[derive(Parser)]
#[command(
    name = "flotilla",
    version = VERSION,
    about = "One Kubernetes API over a fleet of clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a local fleet: a control plane and simulated members, joined
    /// (resumes the fleet in --data-dir if there is one).
    Up(up::UpArgs),
    /// Remove what killed Flotilla processes left on this host (network
    /// namespaces, links, nftables tables, cgroups, processes), whatever
    /// their data dirs; `--dry-run` lists it.
    Cleanup(cleanup::CleanupArgs),
    /// Run a fleet under load while killing, stopping and cutting off its
    /// components at random (seeded), then check that nothing acknowledged
    /// was lost, doubled or left behind.
    Chaos(Box<chaos::ChaosArgs>),
    /// Run the Kubernetes-compatible API server on the embedded store.
    Apiserver(apiserver::Args),
    /// Run the control plane (hub): the API server with Karmada's API and
    /// the federation controllers.
    Controlplane(Box<controlplane::ControlplaneArgs>),
    /// Register a member cluster with the control plane (Push mode).
    Join(join::JoinArgs),
    /// Remove a member cluster and what Flotilla put there.
    Unjoin(join::UnjoinArgs),
    /// Run a simulated member cluster: the API server plus nodes and
    /// workload controllers (`flotilla member fault` injects failures).
    Member(Box<member::Args>),
    /// Run the pull-mode agent of a member the hub cannot reach.
    Agent(Box<agent::AgentArgs>),
    /// The cross-cluster network fabric: connections, endpoints, gateways,
    /// networks; verification and benchmarks.
    #[command(subcommand)]
    Network(network::NetworkCommand),
    /// Export a member's Service to the fleet (creates its ServiceExport).
    #[command(subcommand)]
    Export(network::export::ExportCommand),
    /// Run one gateway of a member's network fabric (the member starts
    /// them on its gateway nodes).
    Gateway(Box<network::gateway::GatewayArgs>),
    /// The underlay network gateways meet on (a stand-in for the internet).
    #[command(subcommand)]
    Underlay(network::underlay::UnderlayCommand),
    /// Peer with another cluster and use its resources through a virtual
    /// node (Liqo's model: no hub needed).
    Peer(Box<peering::PeerArgs>),
    /// Remove a peering: drain the virtual node, delete everything the
    /// peering made on both sides.
    Unpeer(Box<peering::UnpeerArgs>),
    /// Offload a namespace to the peered providers.
    #[command(subcommand)]
    Offload(peering::OffloadCommand),
    /// Peerings: `info`, and the controllers for a non-Flotilla cluster.
    #[command(subcommand)]
    Peering(peering::PeeringCommand),
    /// Serve the fleet's clusterset.local DNS zone (multi-cluster services).
    Dns(dns::DnsArgs),
    /// Move a control plane's objects between stores (embedded, etcd).
    #[command(subcommand)]
    Store(store_migrate::StoreCommand),
    /// Issue, list and revoke bearer tokens for other identities.
    #[command(subcommand)]
    Token(token::Token),
    /// Kubeconfigs for named users (client certificates from the cluster CA).
    #[command(subcommand)]
    Kubeconfig(users::KubeconfigCommand),
    /// The fleet's clusters: mode, readiness, version, nodes, capacity.
    Clusters(inspect::clusters::ClustersArgs),
    /// Clusters declared as objects (Cluster API): generate, describe,
    /// kubeconfig, as clusterctl.
    #[command(subcommand)]
    Cluster(cluster_api::ClusterCommand),
    /// Backups on Velero's API: create, describe, logs, as `velero backup`.
    #[command(subcommand)]
    Backup(velero::BackupCommand),
    /// Restores on Velero's API: create, describe, as `velero restore`.
    #[command(subcommand)]
    Restore(velero::RestoreCommand),
    /// Where the hub's web dashboard is, and the token to sign in with.
    Dashboard(dashboard::DashboardArgs),
    /// Move a workload and its volumes' data to another cluster: backup,
    /// restore, switch, in one command.
    Migrate(migrate::MigrateArgs),
    /// Objects of a kind in every member, with a CLUSTER column.
    Get(inspect::get::GetArgs),
    /// Explain where a template was placed and why.
    #[command(subcommand)]
    Describe(inspect::describe::Describe),
    /// Show where manifests would go, without applying anything.
    Plan(inspect::plan::PlanArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion { shell: clap_complete::Shell },
    /// Measure performance.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// The netns runtime's container shim (started by `member --runtime netns`).
    #[command(name = "__container-shim", hide = true)]
    ContainerShim { launch: std::path::PathBuf },
    /// A Cluster API control plane's endpoint of several members (the
    /// local provider starts it, as CAPD its load balancer).
    #[command(name = "__control-plane-endpoint", hide = true)]
    ControlPlaneEndpoint(cluster_api::EndpointArgs),
    /// The stand-in workload of containers without a command.
    #[command(name = "__standin", hide = true)]
    Standin {
        #[arg(long = "port")]
        ports: Vec<u16>,
        /// The well-known image's page `/` answers (nginx, httpd).
        #[arg(long)]
        page: Option<flotilla_member::runtime::netns::images::Page>,
    },
    /// The imitation of the agnhost test image's program.
    #[command(name = "__agnhost", hide = true)]
    Agnhost {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Under chaos the hub is often away on purpose: the client's own
    // errors about it would drown the run's report.
    let default_filter = match cli.command {
        Command::Chaos(_) => "info,kube_client=off",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            // FLOTILLA_LOG, else the usual RUST_LOG (`flotilla=debug` is
            // every crate of ours), else info.
            tracing_subscriber::EnvFilter::try_from_env("FLOTILLA_LOG")
                .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        // Colours for a terminal only: logs go to files too (`flotilla up`).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(error) = flotilla_failpoint::configure_from_env() {
        eprintln!("error: {error}");
        return std::process::ExitCode::FAILURE;
    }
    // The shim must enter namespaces while it has one thread: before tokio.
    if let Command::ContainerShim { launch } = &cli.command {
        let code = flotilla_member::runtime::netns::shim::main(launch);
        return std::process::ExitCode::from(code.clamp(0, 255) as u8);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Controlplane(args) = &cli.command {
        runtime.worker_threads(args.runtime_threads());
    }
    let runtime = match runtime.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await,
            Command::Cleanup(args) => cleanup::run(args).await,
            Command::Chaos(args) => chaos::run(*args).await,
            Command::Dns(args) => dns::run(args).await,
            Command::Peer(args) => peering::peer(*args).await,
            Command::Unpeer(args) => peering::unpeer(*args).await,
            Command::Offload(cmd) => peering::offload(cmd).await,
            Command::Peering(cmd) => peering::run(cmd).await,
            Command::Network(cmd) => network::run(cmd).await,
            Command::Export(cmd) => network::export::run(cmd).await,
            Command::Gateway(args) => network::gateway::run(*args).await,
            Command::Underlay(cmd) => network::underlay::run(cmd).await,
            Command::Clusters(args) => inspect::clusters::run(args).await,
            Command::Cluster(command) => cluster_api::run(command).await,
            Command::Backup(command) => velero::run_backup(command).await,
            Command::Restore(command) => velero::run_restore(command).await,
            Command::Migrate(args) => migrate::run(args).await,
            Command::Dashboard(args) => dashboard::run(args).await,
            Command::Get(args) => inspect::get::run(args).await,
            Command::Describe(cmd) => inspect::describe::run(cmd).await,
            Command::Plan(args) => inspect::plan::run(args).await,
            Command::Completion { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut command, "flotilla", &mut script);
                inspect::emit(&String::from_utf8_lossy(&script))
            }
            Command::Agent(args) => agent::run(*args).await,
            Command::Apiserver(args) => apiserver::run(args).await,
            Command::Bench(b) => bench::run(b).await,
            Command::Controlplane(args) => controlplane::run(*args).await,
            Command::Join(args) => join::join(args).await,
            Command::Unjoin(args) => join::unjoin(args).await,
            Command::Member(m) => member::run(*m).await,
            Command::Token(t) => token::run(t).await,
            Command::Kubeconfig(cmd) => users::run(cmd).await,
            Command::Store(cmd) => store_migrate::run(cmd).await,
            Command::Standin { ports, page } => {
                flotilla_member::runtime::netns::standin::serve(ports, page)
                    .await
                    .map_err(anyhow::Error::from)
            }
            Command::Agnhost { args } => flotilla_member::runtime::netns::agnhost::run(args)
                .await
                .map_err(anyhow::Error::msg),
            Command::ControlPlaneEndpoint(args) => cluster_api::endpoint(args).await,
            Command::ContainerShim { .. } => Ok(()),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
